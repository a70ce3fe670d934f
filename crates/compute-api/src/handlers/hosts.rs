//! Host-level admin reads Nova keeps for old microversions: `/os-hosts`
//! (until 2.42) and the `/os-hypervisors` routes it replaced with query
//! parameters or detail fields: `statistics` and `{id}/uptime` (until
//! 2.87), `{hostname}/search` and `{hostname}/servers` (until 2.52).
//!
//! berth's hosts are fake hypervisors: enabling or disabling a host
//! through `PUT /os-hosts/{host}` sets its compute service's status (what
//! the libvirt driver does); maintenance mode and the power actions
//! answer 501, as Nova with a driver that has none.

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::servers::{ListRequest, Listed};
use berth_compute::services::HostService;
use berth_compute_model::cell::{ComputeNode, Instance, InstanceFilter};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use super::resources::{powered_service, usage_of, zone_of};
use crate::api::{authorize, body, version, ComputeCtx, NovaResult};
use crate::schemas;
use crate::views::hosts::{self as view, InstanceSize, Statistics};
use crate::views::hypervisors::{self as hv_view, HypervisorSource};

/// The servers (not deleted) on `host`, of every project.
pub(crate) async fn instances_on(ctx: &ComputeCtx, host: &str) -> ApiResult<Vec<Instance>> {
    let request = ListRequest {
        filter: InstanceFilter { host: Some(host.to_owned()), ..InstanceFilter::default() },
        sort: Vec::new(),
        limit: 100_000,
        marker: None,
        down_cell_stubs: false,
        brief: false,
    };
    let listed = ctx.compute.list_servers(&request).await.nova()?;
    Ok(listed
        .into_iter()
        .filter_map(|l| match l {
            Listed::Placed(instance, _) => Some(instance),
            _ => None,
        })
        .collect())
}

/// `(uuid, name)` of `instances`: a hypervisor's servers are those of its
/// host (Nova's `instance_get_all_by_host(compute_node.host)`).
pub(crate) fn servers_of(instances: &[Instance]) -> Vec<(Uuid, &str)> {
    instances.iter().map(|i| (i.uuid, i.spec.display_name.as_str())).collect()
}

fn not_mapped(host: &str) -> ApiError {
    ApiError::not_found(format!("Host '{host}' is not mapped to any cell"))
}

async fn compute_service(ctx: &ComputeCtx, host: &str) -> ApiResult<HostService> {
    let overview = ctx.compute.overview().await;
    overview
        .services
        .into_iter()
        .find(|s| s.service.binary == "nova-compute" && s.service.host == host)
        .ok_or_else(|| not_mapped(host))
}

// ---------------------------------------------------------------------------
// os-hosts
// ---------------------------------------------------------------------------

/// `GET /os-hosts` (`?zone=`): the hosts of enabled services.
pub fn list_hosts(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hosts:list")?;
        let zone = req.query_one("zone").filter(|z| !z.is_empty()).map(str::to_owned);
        let overview = ctx.compute.overview().await;
        let items: Vec<Value> = overview
            .services
            .iter()
            .filter(|s| !s.service.disabled)
            .filter_map(|s| {
                let service_zone = if s.service.binary == "nova-compute" {
                    zone_of(&ctx, &s.service.host)
                } else {
                    "internal".to_owned()
                };
                if zone.as_ref().is_some_and(|z| *z != service_zone) {
                    return None;
                }
                let topic = s.service.binary.strip_prefix("nova-").unwrap_or(&s.service.binary);
                Some(view::index_item(&s.service.host, topic, &service_zone))
            })
            .collect();
        Ok(Resp::ok(view::index(items)))
    })
}

/// `GET /os-hosts/{host}`: the first node's totals and use, and the sizes
/// of the servers on the host, summed and per project.
pub fn show_host(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hosts:show")?;
        let host = req.param(0).to_owned();
        let service = compute_service(&ctx, &host).await?;
        let node = service
            .nodes
            .first()
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("Compute host {host} could not be found.")))?;
        let used = usage_of(&ctx, &node, service.instances);
        let sizes: Vec<InstanceSize> = instances_on(&ctx, &host)
            .await?
            .iter()
            .map(|i| InstanceSize {
                project_id: i.project_id.clone(),
                vcpus: i.spec.flavor.vcpus,
                memory_mb: i.spec.flavor.memory_mb,
                disk_gb: i.spec.flavor.root_gb + i.spec.flavor.ephemeral_gb,
            })
            .collect();
        Ok(Resp::ok(view::show(&host, &node, &used, &sizes)))
    })
}

fn not_supported() -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, "The requested functionality is not supported.")
}

/// `PUT /os-hosts/{host}`: `status` enables or disables the host's compute
/// service; `maintenance_mode` is not supported (501, before anything
/// changes).
pub fn update_host(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hosts:update")?;
        let body = body(&req, &schemas::hosts::update())?;
        let host = req.param(0).to_owned();
        let service = compute_service(&ctx, &host).await?;
        if body.get("maintenance_mode").is_some() {
            return Err(not_supported());
        }
        let enable = body["status"].as_str().is_some_and(|s| s.eq_ignore_ascii_case("enable"));
        let reason = if enable { None } else { Some("Disabled through os-hosts".to_owned()) };
        ctx.compute.set_service(&service, Some(!enable), Some(reason), None).await.nova()?;
        Ok(Resp::ok(view::update(&host, Some(if enable { "enabled" } else { "disabled" }), None)))
    })
}

/// `GET /os-hosts/{host}/{reboot,shutdown,startup}`: 404 for an unknown
/// host, else 501.
pub fn host_power_action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let action = req.path.rsplit('/').next().unwrap_or("").to_owned();
        let rule = match action.as_str() {
            "reboot" => "os_compute_api:os-hosts:reboot",
            "shutdown" => "os_compute_api:os-hosts:shutdown",
            _ => "os_compute_api:os-hosts:start",
        };
        authorize(&req, rule)?;
        compute_service(&ctx, req.param(0)).await?;
        Err(not_supported())
    })
}

// ---------------------------------------------------------------------------
// Hypervisor routes of older microversions
// ---------------------------------------------------------------------------

/// The reported hypervisors of nova-compute services, with their services.
async fn hypervisor_nodes(ctx: &ComputeCtx) -> Vec<(HostService, ComputeNode)> {
    let overview = ctx.compute.overview().await;
    let reported = ctx.compute.reported_nodes(overview.services.iter().flat_map(|s| s.nodes.iter().map(|n| n.uuid)));
    let mut nodes: Vec<(HostService, ComputeNode)> = overview
        .services
        .iter()
        .filter(|s| s.service.binary == "nova-compute")
        .flat_map(|s| s.nodes.iter().map(move |n| (s.clone(), n.clone())))
        .filter(|(_, n)| reported.contains(&n.uuid))
        .collect();
    nodes.sort_by_key(|(_, n)| n.id);
    nodes
}

/// `GET /os-hypervisors/statistics` (2.1–2.87): totals over the
/// hypervisors of enabled compute services.
pub fn hypervisor_statistics(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hypervisors:statistics")?;
        let mut stats = Statistics::default();
        for (service, node) in hypervisor_nodes(&ctx).await {
            let (shown, _) = powered_service(&ctx, &service.service);
            if shown.disabled {
                continue;
            }
            stats.add(&node, &usage_of(&ctx, &node, service.instances));
        }
        Ok(Resp::ok(view::statistics(&stats)))
    })
}

/// `GET /os-hypervisors/{id}/uptime` (2.1–2.87): the hypervisor with the
/// host's uptime; 400 when its service is down.
pub fn hypervisor_uptime(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hypervisors:uptime")?;
        let v = version(&req);
        let id = req.param(0).to_owned();
        let missing = || ApiError::not_found(format!("Hypervisor with ID '{id}' could not be found."));
        if v.at_least(53) {
            Uuid::parse_str(&id).map_err(|_| ApiError::bad_request(format!("Invalid uuid {id}")))?;
        } else if id.parse::<i64>().is_err() {
            return Err(missing());
        }
        let (service, node) = hypervisor_nodes(&ctx)
            .await
            .into_iter()
            .find(|(_, n)| if v.at_least(53) { n.uuid.to_string() == id } else { n.id.to_string() == id })
            .ok_or_else(missing)?;
        let (shown, up) = powered_service(&ctx, &service.service);
        if !up {
            return Err(ApiError::bad_request(format!(
                "Compute service of {} is unavailable at this time.",
                node.host
            )));
        }
        let source = HypervisorSource { node: &node, service: &shown, up, servers: None };
        let mut item = hv_view::index_item(v, &source);
        let since = service.service.created_at;
        if let Some(body) = item.as_object_mut() {
            body.insert("uptime".into(), Value::String(view::uptime_text(since, ctx.compute.now())));
        }
        Ok(Resp::ok(crate::views::wrap("hypervisor", item)))
    })
}

/// `GET /os-hypervisors/{pattern}/search` and `/{pattern}/servers`
/// (2.1–2.52): the hypervisors whose hostname contains the pattern (404
/// when none), with their servers for `/servers`.
fn search(ctx: Arc<ComputeCtx>, req: Req, with_servers: bool) -> HandlerFuture {
    Box::pin(async move {
        authorize(
            &req,
            if with_servers { "os_compute_api:os-hypervisors:servers" } else { "os_compute_api:os-hypervisors:search" },
        )?;
        let v = version(&req);
        let pattern = req.param(0).to_owned();
        let found: Vec<(HostService, ComputeNode)> = hypervisor_nodes(&ctx)
            .await
            .into_iter()
            .filter(|(_, n)| n.hypervisor_hostname.contains(pattern.as_str()))
            .collect();
        if found.is_empty() {
            return Err(ApiError::not_found(format!("No hypervisor matching '{pattern}' could be found.")));
        }
        let mut items = Vec::new();
        for (service, node) in &found {
            let (shown, up) = powered_service(&ctx, &service.service);
            let instances = if with_servers { instances_on(&ctx, &node.host).await? } else { Vec::new() };
            let servers = servers_of(&instances);
            let source = HypervisorSource { node, service: &shown, up, servers: with_servers.then_some(&servers[..]) };
            items.push(hv_view::index_item(v, &source));
        }
        Ok(Resp::ok(hv_view::list(v, items, None)))
    })
}

/// `GET /os-hypervisors/{pattern}/search`.
pub fn search_hypervisors(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    search(ctx, req, false)
}

/// `GET /os-hypervisors/{pattern}/servers`.
pub fn hypervisor_servers(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    search(ctx, req, true)
}
