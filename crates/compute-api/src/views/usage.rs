//! `/os-simple-tenant-usage` and `/os-instance_usage_audit_log` bodies
//! (Nova's `simple_tenant_usage.py` `_tenant_usages_for_period` and
//! `instance_usage_audit_log.py` `_get_audit_task_logs`).
//!
//! Usage is charged per hour of the report period an instance was
//! launched and not yet terminated; times are Unix seconds with a
//! microsecond part ([`Instant`]), as a report period may be given with
//! one.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::wrap;
use berth_compute_model::Timestamp;

/// A point in time: Unix seconds and microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant {
    /// Unix seconds.
    pub secs: Timestamp,
    /// Microseconds within the second.
    pub micros: u32,
}

impl Instant {
    /// A whole second.
    pub fn at(secs: Timestamp) -> Instant {
        Instant { secs, micros: 0 }
    }

    fn as_f64(self) -> f64 {
        self.secs as f64 + f64::from(self.micros) / 1e6
    }

    /// As Nova serialises a naive `datetime`: `%Y-%m-%dT%H:%M:%S.%f`.
    pub fn strtime(self) -> String {
        let whole = super::strtime(self.secs);
        format!("{}{:06}", whole.trim_end_matches("000000"), self.micros)
    }
}

/// One instance as the report sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceUsage {
    /// The server.
    pub instance_id: Uuid,
    /// Its name.
    pub name: String,
    /// Its project.
    pub tenant_id: String,
    /// Flavor name (`""` when unknown).
    pub flavor: String,
    /// Flavor RAM (MiB).
    pub memory_mb: i64,
    /// Flavor root + ephemeral disk (GiB).
    pub local_gb: i64,
    /// Flavor vCPUs.
    pub vcpus: i64,
    /// When it was launched.
    pub launched_at: Timestamp,
    /// When it was terminated, if it was.
    pub terminated_at: Option<Timestamp>,
    /// Its vm state (shown when not terminated).
    pub vm_state: String,
}

/// Is the instance active at some point of `[start, stop]` (Nova's
/// `get_active_by_window_joined`: launched before the end, not terminated
/// before the start)?
pub fn active_in(usage: &InstanceUsage, start: Instant, stop: Instant) -> bool {
    Instant::at(usage.launched_at) < stop && usage.terminated_at.is_none_or(|t| Instant::at(t) > start)
}

/// Hours of `[start, stop]` the instance ran (Nova's `_hours_for`).
pub fn hours_for(usage: &InstanceUsage, start: Instant, stop: Instant) -> f64 {
    let launched = Instant::at(usage.launched_at);
    let terminated = usage.terminated_at.map(Instant::at);
    if terminated.is_some_and(|t| t < start) || launched > stop {
        return 0.0;
    }
    let from = launched.max(start);
    let to = terminated.map_or(stop, |t| t.min(stop));
    (to.as_f64() - from.as_f64()) / 3600.0
}

fn server_usage(usage: &InstanceUsage, start: Instant, stop: Instant, now: Timestamp) -> (f64, Value) {
    let hours = hours_for(usage, start, stop);
    let (state, uptime) = match usage.terminated_at {
        Some(end) => ("terminated".to_owned(), end - usage.launched_at),
        None => (usage.vm_state.clone(), now - usage.launched_at),
    };
    let mut info = Map::new();
    info.insert("hours".into(), json!(hours));
    info.insert("flavor".into(), json!(usage.flavor));
    info.insert("instance_id".into(), json!(usage.instance_id.to_string()));
    info.insert("name".into(), json!(usage.name));
    info.insert("tenant_id".into(), json!(usage.tenant_id));
    info.insert("memory_mb".into(), json!(usage.memory_mb));
    info.insert("local_gb".into(), json!(usage.local_gb));
    info.insert("vcpus".into(), json!(usage.vcpus));
    info.insert("started_at".into(), json!(Instant::at(usage.launched_at).strtime()));
    info.insert("ended_at".into(), usage.terminated_at.map_or(Value::Null, |t| json!(Instant::at(t).strtime())));
    info.insert("state".into(), json!(state));
    info.insert("uptime".into(), json!(uptime));
    (hours, Value::Object(info))
}

/// The per-project summaries of `usages` (already in report order and
/// active in the period), in order of first appearance; with `detailed`,
/// each with its `server_usages`.
pub fn tenant_usages(
    usages: &[InstanceUsage],
    start: Instant,
    stop: Instant,
    now: Timestamp,
    detailed: bool,
) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut summaries: BTreeMap<String, (f64, f64, f64, f64, Vec<Value>)> = BTreeMap::new();
    for usage in usages {
        let (hours, info) = server_usage(usage, start, stop, now);
        let entry = summaries.entry(usage.tenant_id.clone()).or_insert_with(|| {
            order.push(usage.tenant_id.clone());
            (0.0, 0.0, 0.0, 0.0, Vec::new())
        });
        entry.0 += usage.local_gb as f64 * hours;
        entry.1 += usage.vcpus as f64 * hours;
        entry.2 += usage.memory_mb as f64 * hours;
        entry.3 += hours;
        entry.4.push(info);
    }
    order
        .into_iter()
        .filter_map(|tenant| {
            let (local_gb, vcpus, memory_mb, hours, servers) = summaries.remove(&tenant)?;
            let mut summary = Map::new();
            summary.insert("tenant_id".into(), json!(tenant));
            if detailed {
                summary.insert("server_usages".into(), Value::Array(servers));
            }
            summary.insert("total_local_gb_usage".into(), json!(local_gb));
            summary.insert("total_vcpus_usage".into(), json!(vcpus));
            summary.insert("total_memory_mb_usage".into(), json!(memory_mb));
            summary.insert("total_hours".into(), json!(hours));
            summary.insert("start".into(), json!(start.strtime()));
            summary.insert("stop".into(), json!(stop.strtime()));
            Some(Value::Object(summary))
        })
        .collect()
}

/// The `GET /os-simple-tenant-usage` body, with `tenant_usages_links`
/// when `next` is given (2.40+).
pub fn index(usages: Vec<Value>, next: Option<Value>) -> Value {
    super::list_body("tenant_usages", usages, "tenant_usages_links", next)
}

/// The `GET /os-simple-tenant-usage/{tenant_id}` body: the project's
/// summary, `{}` when it used nothing in the period.
pub fn show(usage: Option<Value>, next: Option<Value>) -> Value {
    let mut body = Map::new();
    body.insert("tenant_usage".into(), usage.unwrap_or_else(|| json!({})));
    if let Some(next) = next {
        body.insert("tenant_usage_links".into(), next);
    }
    Value::Object(body)
}

/// The audit period most recently completed before `before` (Nova's
/// `last_completed_audit_period` with its default `month` unit): from the
/// first of the month before to the first of the month, 00:00 UTC.
pub fn last_completed_month(before: Instant) -> (Timestamp, Timestamp) {
    let days = before.secs.div_euclid(86_400);
    let (year, month, _) = civil_from_days(days);
    let mut end = first_of(year, month);
    if Instant::at(end) >= before {
        let (y, m) = previous_month(year, month);
        end = first_of(y, m);
    }
    let (ey, em, _) = civil_from_days(end.div_euclid(86_400));
    let (by, bm) = previous_month(ey, em);
    (first_of(by, bm), end)
}

fn previous_month(year: i64, month: i64) -> (i64, i64) {
    if month <= 1 {
        (year - 1, 12)
    } else {
        (year, month - 1)
    }
}

fn first_of(year: i64, month: i64) -> Timestamp {
    days_from_civil(year, month, 1) * 86_400
}

/// Howard Hinnant's `days_from_civil`: days since 1970-01-01.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// Howard Hinnant's `civil_from_days`: (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Python's `str(datetime)` of a whole second: `YYYY-MM-DD HH:MM:SS`.
fn str_datetime(ts: Timestamp) -> String {
    super::strtime(ts).replacen('T', " ", 1).trim_end_matches(".000000").to_owned()
}

/// The audit log of a period no host has run the usage audit for (berth
/// runs none, as Nova with its default `instance_usage_audit = False`):
/// every compute host is in `hosts_not_run`. `key` is
/// `instance_usage_audit_logs` (list) or `instance_usage_audit_log` (show).
pub fn audit_log(key: &str, period: (Timestamp, Timestamp), hosts: &[String]) -> Value {
    let done = if hosts.is_empty() { "ALL".to_owned() } else { format!("0 of {}", hosts.len()) };
    wrap(
        key,
        json!({
            "period_beginning": str_datetime(period.0),
            "period_ending": str_datetime(period.1),
            "num_hosts": hosts.len(),
            "num_hosts_done": 0,
            "num_hosts_running": 0,
            "num_hosts_not_run": hosts.len(),
            "hosts_not_run": hosts,
            "total_instances": 0,
            "total_errors": 0,
            "overall_status": format!("{done} hosts done. 0 errors."),
            "log": {},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(launched_at: Timestamp, terminated_at: Option<Timestamp>) -> InstanceUsage {
        InstanceUsage {
            instance_id: Uuid::nil(),
            name: "vm".into(),
            tenant_id: "p".into(),
            flavor: "small".into(),
            memory_mb: 512,
            local_gb: 2,
            vcpus: 2,
            launched_at,
            terminated_at,
            vm_state: "active".into(),
        }
    }

    #[test]
    fn hours_are_charged_inside_the_period_only() {
        let (start, stop) = (Instant::at(3600), Instant::at(4 * 3600));
        assert_eq!(hours_for(&usage(0, None), start, stop), 3.0);
        assert_eq!(hours_for(&usage(7200, None), start, stop), 2.0);
        assert_eq!(hours_for(&usage(0, Some(7200)), start, stop), 1.0);
        assert_eq!(hours_for(&usage(0, Some(1800)), start, stop), 0.0);
        assert_eq!(hours_for(&usage(5 * 3600, None), start, stop), 0.0);
        assert!(!active_in(&usage(0, Some(1800)), start, stop));
        assert!(!active_in(&usage(4 * 3600, None), start, stop));
        assert!(active_in(&usage(0, Some(7200)), start, stop));
    }

    #[test]
    fn summaries_add_up_per_project() {
        let (start, stop) = (Instant::at(0), Instant::at(7200));
        let list = tenant_usages(&[usage(0, None), usage(3600, Some(5400))], start, stop, 10_000, true);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["total_hours"], json!(2.5));
        assert_eq!(list[0]["total_vcpus_usage"], json!(5.0));
        assert_eq!(list[0]["server_usages"][1]["state"], "terminated");
        assert_eq!(list[0]["server_usages"][1]["uptime"], 1800);
        assert_eq!(list[0]["start"], "1970-01-01T00:00:00.000000");
        let brief = tenant_usages(&[usage(0, None)], start, stop, 10_000, false);
        assert!(brief[0].get("server_usages").is_none());
    }

    #[test]
    fn audit_periods_are_the_last_completed_month() {
        // 2026-11-23T06:15:05Z: October 2026.
        let (begin, end) = last_completed_month(Instant::at(1_795_414_505));
        assert_eq!(str_datetime(begin), "2026-10-01 00:00:00");
        assert_eq!(str_datetime(end), "2026-11-01 00:00:00");
        // Exactly on the first: the month before that.
        let (begin, end) = last_completed_month(Instant::at(end));
        assert_eq!(
            (str_datetime(begin), str_datetime(end)),
            ("2026-09-01 00:00:00".into(), "2026-10-01 00:00:00".into())
        );
        // January: December of the year before.
        let jan = days_from_civil(2027, 1, 15) * 86_400;
        let (begin, end) = last_completed_month(Instant::at(jan));
        assert_eq!(
            (str_datetime(begin), str_datetime(end)),
            ("2026-12-01 00:00:00".into(), "2027-01-01 00:00:00".into())
        );
        assert_eq!(Instant { secs: 0, micros: 42 }.strtime(), "1970-01-01T00:00:00.000042");
    }
}
