//! Usage reports: `/os-simple-tenant-usage` (list and per project, with
//! `start`, `end`, `detailed` and, from 2.40, paging) and
//! `/os-instance_usage_audit_log` (list and `/{before}`).

use std::sync::Arc;

use berth_compute::servers::{ListRequest, Listed};
use berth_compute_model::cell::{Instance, InstanceFilter};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use uuid::Uuid;

use crate::api::{self, authorize, authorize_on, version, ComputeCtx, NovaResult};
use crate::views::usage::{self as view, InstanceUsage, Instant};

/// How many instances one report reads at most per cell listing.
const REPORT_ROWS: usize = 100_000;

/// A naive UTC `YYYY-MM-DD<sep>HH:MM:SS[.ffffff]`: the time, the
/// separator (`T` or space) and whether a fraction was given.
fn parse_datetime(text: &str) -> Option<(Instant, char, bool)> {
    let (date, time, separator) = match (text.split_once('T'), text.split_once(' ')) {
        (Some((d, t)), _) => (d, t, 'T'),
        (None, Some((d, t))) => (d, t, ' '),
        _ => return None,
    };
    let (clock, fraction) = match time.split_once('.') {
        Some((c, f)) => (c, Some(f)),
        None => (time, None),
    };
    let numbers = |text: &str, separator: char| -> Option<Vec<i64>> {
        let parts: Vec<&str> = text.split(separator).collect();
        (parts.len() == 3
            && parts.iter().all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit())))
        .then(|| parts.iter().filter_map(|p| p.parse().ok()).collect())
    };
    let (ymd, hms) = (numbers(date, '-')?, numbers(clock, ':')?);
    let micros = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 6 && f.bytes().all(|b| b.is_ascii_digit()) => {
            f.parse::<u32>().ok()? * 10u32.pow(6 - f.len() as u32)
        }
        Some(_) => return None,
    };
    if hms[2] > 59 || !date_exists(ymd[0], ymd[1], ymd[2]) {
        return None;
    }
    let text = format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", ymd[0], ymd[1], ymd[2], hms[0], hms[1], hms[2]);
    Some((Instant { secs: api::parse_time(&text)?, micros }, separator, fraction.is_some()))
}

/// A report time as Nova's `_parse_datetime` reads it
/// (`%Y-%m-%dT%H:%M:%S`, `%Y-%m-%dT%H:%M:%S.%f` or `%Y-%m-%d %H:%M:%S.%f`,
/// naive UTC); absent or empty: now.
fn parse_report_time(text: Option<&str>, now: Instant) -> ApiResult<Instant> {
    let Some(text) = text.filter(|t| !t.is_empty()) else { return Ok(now) };
    match parse_datetime(text) {
        Some((at, 'T', _)) | Some((at, _, true)) => Ok(at),
        _ => Err(ApiError::bad_request("Invalid datetime string: Datetime is in invalid format")),
    }
}

fn date_exists(year: i64, month: i64, day: i64) -> bool {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=days).contains(&day)
}

/// The report period of a request: `start` and `end` (400 when `start`
/// is not before `end`), with the end held to now, and `detailed`.
fn period(ctx: &ComputeCtx, req: &Req) -> ApiResult<(Instant, Instant, bool)> {
    // berth keeps whole seconds: now is the end of the current second, so
    // a server launched in it (stored as the second's start) is in a
    // report that ends now, as in Nova, which keeps microseconds.
    let now = Instant { secs: ctx.compute.now(), micros: 999_999 };
    let start = parse_report_time(req.query_one("start"), now)?;
    let end = parse_report_time(req.query_one("end"), now)?;
    if start >= end {
        return Err(ApiError::bad_request("Invalid start time. The start time cannot occur after the end time."));
    }
    Ok((start, end.min(now), req.query_one("detailed") == Some("1")))
}

/// From 2.75 unknown query parameters are refused.
fn check_query(req: &Req, known: &[&str]) -> ApiResult<()> {
    if !version(req).at_least(75) {
        return Ok(());
    }
    api::only_query(req, known)
}

fn usage_of(instance: &Instance) -> Option<InstanceUsage> {
    let launched_at = instance.launched_at?;
    let flavor = &instance.spec.flavor;
    Some(InstanceUsage {
        instance_id: instance.uuid,
        name: instance.spec.display_name.clone(),
        tenant_id: instance.project_id.clone(),
        flavor: flavor.name.clone(),
        memory_mb: flavor.memory_mb,
        local_gb: flavor.root_gb + flavor.ephemeral_gb,
        vcpus: flavor.vcpus,
        launched_at,
        terminated_at: instance.terminated_at.or(instance.deleted_at.filter(|_| instance.deleted)),
        vm_state: instance.vm_state.clone(),
    })
}

/// The instances of every cell (deleted ones included) active in the
/// period, in Nova's report order (project, then uuid), from after
/// `marker`, at most `limit`.
async fn active_instances(
    ctx: &ComputeCtx,
    project: Option<&str>,
    start: Instant,
    stop: Instant,
    limit: usize,
    marker: Option<&str>,
) -> ApiResult<Vec<InstanceUsage>> {
    let mut usages = Vec::new();
    for deleted in [None, Some(true)] {
        let request = ListRequest {
            filter: InstanceFilter { project_id: project.map(str::to_owned), deleted, ..InstanceFilter::default() },
            sort: Vec::new(),
            limit: REPORT_ROWS,
            marker: None,
            down_cell_stubs: false,
            brief: false,
        };
        for listed in ctx.compute.list_servers(&request).await.nova()? {
            if let Listed::Placed(instance, _) = listed {
                usages.extend(usage_of(&instance).filter(|u| view::active_in(u, start, stop)));
            }
        }
    }
    usages.sort_by(|a, b| (&a.tenant_id, a.instance_id).cmp(&(&b.tenant_id, b.instance_id)));
    usages.dedup_by_key(|u| u.instance_id);
    if let Some(marker) = marker {
        let pos = Uuid::parse_str(marker)
            .ok()
            .and_then(|m| usages.iter().position(|u| u.instance_id == m))
            .ok_or_else(|| ApiError::bad_request(format!("Marker {marker} could not be found.")))?;
        usages.drain(..=pos);
    }
    usages.truncate(limit);
    Ok(usages)
}

/// Paging of a report: from 2.40 `limit` and `marker`; before, Nova's
/// `max_limit` and no marker.
fn report_paging(ctx: &ComputeCtx, req: &Req) -> ApiResult<(usize, Option<String>)> {
    if !version(req).at_least(40) {
        return Ok((ctx.max_limit, None));
    }
    let (limit, marker) = api::paging(req, ctx.max_limit)?;
    Ok((limit.unwrap_or(ctx.max_limit), marker))
}

fn next_link(
    ctx: &ComputeCtx,
    req: &Req,
    collection: &str,
    usages: &[InstanceUsage],
    limit: usize,
) -> Option<serde_json::Value> {
    let last = usages.last()?;
    if !version(req).at_least(40) || !crate::views::page_is_full(usages.len(), Some(limit), ctx.max_limit) {
        return None;
    }
    let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Some(ctx.links(req).next(collection, &query, &last.instance_id.to_string()))
}

/// `GET /os-simple-tenant-usage`.
pub fn list_tenant_usages(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-simple-tenant-usage:list")?;
        check_query(&req, &["start", "end", "detailed", "limit", "marker"])?;
        let (start, stop, detailed) = period(&ctx, &req)?;
        let (limit, marker) = report_paging(&ctx, &req)?;
        let usages = active_instances(&ctx, None, start, stop, limit, marker.as_deref()).await?;
        let list = view::tenant_usages(&usages, start, stop, ctx.compute.now(), detailed);
        let next = next_link(&ctx, &req, "os-simple-tenant-usage", &usages, limit);
        Ok(Resp::ok(view::index(list, next)))
    })
}

/// `GET /os-simple-tenant-usage/{tenant_id}`.
pub fn show_tenant_usage(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let tenant = req.param(0).to_owned();
        authorize_on(&req, "os_compute_api:os-simple-tenant-usage:show", &tenant, None)?;
        check_query(&req, &["start", "end", "limit", "marker"])?;
        let (start, stop, _) = period(&ctx, &req)?;
        let (limit, marker) = report_paging(&ctx, &req)?;
        let usages = active_instances(&ctx, Some(&tenant), start, stop, limit, marker.as_deref()).await?;
        let usage = view::tenant_usages(&usages, start, stop, ctx.compute.now(), true).into_iter().next();
        let next = next_link(&ctx, &req, &format!("os-simple-tenant-usage/{tenant}"), &usages, limit);
        Ok(Resp::ok(view::show(usage, next)))
    })
}

async fn compute_hosts(ctx: &ComputeCtx) -> Vec<String> {
    let overview = ctx.compute.overview().await;
    let mut hosts: Vec<String> = overview
        .services
        .iter()
        .filter(|s| s.service.binary == "nova-compute")
        .map(|s| s.service.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// `GET /os-instance_usage_audit_log`: the last completed month.
pub fn list_audit_logs(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-instance-usage-audit-log:list")?;
        if version(&req).at_least(102) {
            api::only_query(&req, &[])?;
        }
        let period = view::last_completed_month(Instant::at(ctx.compute.now()));
        let hosts = compute_hosts(&ctx).await;
        Ok(Resp::ok(view::audit_log("instance_usage_audit_logs", period, &hosts)))
    })
}

/// `GET /os-instance_usage_audit_log/{before}`: the last month completed
/// before `YYYY-MM-DD HH:MM:SS[.ffffff]`.
pub fn show_audit_log(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-instance-usage-audit-log:show")?;
        if version(&req).at_least(102) {
            api::only_query(&req, &[])?;
        }
        let text = req.param(0).to_owned();
        // Nova's strptime formats: a space between date and time, a
        // fraction when there is a `.`.
        let before = match parse_datetime(&text) {
            Some((at, ' ', _)) => at,
            _ => return Err(ApiError::bad_request(format!("Invalid timestamp for date {text}"))),
        };
        let period = view::last_completed_month(before);
        let hosts = compute_hosts(&ctx).await;
        Ok(Resp::ok(view::audit_log("instance_usage_audit_log", period, &hosts)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_times_parse_as_nova_reads_them() {
        let now = Instant::at(42);
        assert_eq!(parse_report_time(None, now).ok(), Some(now));
        assert_eq!(parse_report_time(Some(""), now).ok(), Some(now));
        let t = parse_report_time(Some("2026-11-23T06:15:05"), now).ok();
        assert_eq!(t, Some(Instant::at(1_795_414_505)));
        let t = parse_report_time(Some("2026-11-23T06:15:05.5"), now).ok();
        assert_eq!(t, Some(Instant { secs: 1_795_414_505, micros: 500_000 }));
        let t = parse_report_time(Some("2026-11-23 06:15:05.000001"), now).ok();
        assert_eq!(t, Some(Instant { secs: 1_795_414_505, micros: 1 }));
        for bad in ["2026-11-23 06:15:05", "2026-11-23", "yesterday", "2026-02-30T00:00:00", "2026-11-23T06:15:05Z"] {
            assert!(parse_report_time(Some(bad), now).is_err(), "{bad}");
        }
        assert_eq!(parse_datetime("2026-11-23 06:15:05").map(|(t, sep, _)| (t.secs, sep)), Some((1_795_414_505, ' ')));
    }
}
