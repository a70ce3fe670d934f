//! The smaller compute resources: `os-server-groups`, `os-quota-sets`,
//! `os-quota-class-sets`, `limits`, `os-hypervisors`, `os-services`,
//! `os-aggregates`, `os-availability-zone`, the version documents and
//! `extensions`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::services::HostService;
use berth_compute_model::plan::{
    plan_add_aggregate_host, plan_create_aggregate, plan_create_server_group, plan_delete_aggregate,
    plan_delete_quotas, plan_delete_server_group, plan_remove_aggregate_host, plan_set_aggregate_metadata,
    plan_set_quota_class, plan_set_quotas, plan_update_aggregate,
};
use berth_compute_model::{quota, Aggregate, GroupPolicy, ServerGroup};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use crate::api::{self, authorize, authorize_on, body, is_admin, version, ComputeCtx, NovaResult};
use crate::schemas;
use crate::views::{self, aggregates as agg_view, availability_zones as az_view, hypervisors as hv_view};
use crate::views::{limits as limits_view, quotas as quota_view, server_groups as group_view, services as svc_view};

// ---------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------

/// `GET /compute/`.
pub fn versions(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(views::versions::index(&ctx.links(req))))
}

/// `GET /compute/v2.1/`.
pub fn version_show(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(views::versions::show(&ctx.links(req))))
}

/// `GET /compute/v2/`: the legacy v2.0 API's version document (the only
/// thing berth serves under `/v2`; see docs/COMPUTE.md).
pub fn version_show_v20(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(views::versions::show_v20(&ctx.links(req))))
}

/// The one network `os-networks` lists: berth has no network service,
/// so this stands for what every server is on, with no ports (servers
/// show `addresses: {}`). A boot may name it (as `networks: auto`).
pub const DEFAULT_NETWORK_ID: &str = "5d3c1f0e-8a4b-4c52-9b1e-0b3e7a9f2c10";
/// Its name (`label` in Nova's view).
pub const DEFAULT_NETWORK_LABEL: &str = "default";

/// Nova's `network_dict`: `id` and `label` from the network, every other
/// field of nova-network's view null (admins see more of them).
fn network_view(req: &Req) -> Value {
    let mut fields =
        vec!["cidr", "netmask", "gateway", "broadcast", "dns1", "dns2", "cidr_v6", "gateway_v6", "netmask_v6"];
    if is_admin(req) {
        fields.extend([
            "created_at",
            "updated_at",
            "deleted_at",
            "deleted",
            "injected",
            "bridge",
            "vlan",
            "vpn_public_address",
            "vpn_public_port",
            "vpn_private_address",
            "dhcp_start",
            "project_id",
            "host",
            "bridge_interface",
            "multi_host",
            "priority",
            "rxtx_base",
            "mtu",
            "dhcp_server",
            "enable_dhcp",
            "share_address",
        ]);
    }
    let mut view = serde_json::Map::new();
    view.insert("id".into(), Value::from(DEFAULT_NETWORK_ID));
    view.insert("label".into(), Value::from(DEFAULT_NETWORK_LABEL));
    for field in fields {
        view.insert(field.into(), Value::Null);
    }
    Value::Object(view)
}

/// `GET /os-networks` (2.1–2.35): Nova's proxy to Neutron's networks.
/// berth has no network service: the one default network.
pub fn list_networks(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-networks:list")?;
    Ok(Resp::ok(serde_json::json!({"networks": [network_view(req)]})))
}

/// `GET /os-networks/{id}` (2.1–2.35): the default network, else Nova's
/// 404.
pub fn show_network(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-networks:show")?;
    if req.param(0) != DEFAULT_NETWORK_ID {
        return Err(ApiError::not_found("Network not found"));
    }
    Ok(Resp::ok(serde_json::json!({"network": network_view(req)})))
}

/// `GET /extensions`: Nova's fixed list.
pub fn list_extensions(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:extensions")?;
    if version(req).at_least(102) {
        api::only_query(req, &[])?;
    }
    Ok(Resp::ok(views::extensions::index()))
}

/// `GET /extensions/{alias}` (Nova's 404 has its default text).
pub fn show_extension(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:extensions")?;
    if version(req).at_least(102) {
        api::only_query(req, &[])?;
    }
    views::extensions::show(req.param(0))
        .map(Resp::ok)
        .ok_or_else(|| ApiError::not_found("The resource could not be found."))
}

// ---------------------------------------------------------------------------
// Server groups
// ---------------------------------------------------------------------------

fn live_members(ctx: &ComputeCtx, group: &ServerGroup) -> Vec<Uuid> {
    let world = ctx.core.read();
    group.members.iter().filter(|m| world.compute.instance_mappings.contains_key(m)).copied().collect()
}

/// `GET /os-server-groups`.
pub fn list_groups(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-server-groups:index")?;
    let all = req.query_one("all_projects").is_some_and(|v| api::parse_bool(v).unwrap_or(true));
    if all {
        authorize(req, "os_compute_api:os-server-groups:index:all_projects")?;
    }
    let project = api::project(req);
    let groups: Vec<ServerGroup> =
        ctx.core.read().compute.server_groups.values().filter(|g| all || g.project_id == project).cloned().collect();
    let offset: usize = req.query_one("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let (limit, _) = api::paging(req, ctx.max_limit)?;
    let page: Vec<&ServerGroup> = groups.iter().skip(offset).take(limit.unwrap_or(ctx.max_limit)).collect();
    let members: Vec<Vec<Uuid>> = page.iter().map(|g| live_members(ctx, g)).collect();
    let pairs: Vec<(&ServerGroup, &[Uuid])> = page.iter().zip(&members).map(|(g, m)| (*g, m.as_slice())).collect();
    Ok(Resp::ok(group_view::index(version(req), &pairs)))
}

fn find_group(ctx: &ComputeCtx, req: &Req) -> ApiResult<ServerGroup> {
    let text = req.param(0);
    let missing = || ApiError::not_found(format!("Instance group {text} could not be found."));
    let id = Uuid::parse_str(text).map_err(|_| missing())?;
    let group = ctx.core.read().compute.server_groups.get(&id).cloned().ok_or_else(missing)?;
    if group.project_id != api::project(req) && !is_admin(req) {
        return Err(missing());
    }
    Ok(group)
}

/// `GET /os-server-groups/{id}`.
pub fn show_group(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let group = find_group(ctx, req)?;
    authorize_on(req, "os_compute_api:os-server-groups:show", &group.project_id, None)?;
    let members = live_members(ctx, &group);
    Ok(Resp::ok(group_view::show(version(req), &group, &members)))
}

/// `POST /os-server-groups`.
pub fn create_group(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, "os_compute_api:os-server-groups:create")?;
    let body = body(req, &schemas::server_groups::create(v))?;
    let g = &body["server_group"];
    let policy_name = if v.at_least(64) {
        g["policy"].as_str().unwrap_or("").to_owned()
    } else {
        g["policies"][0].as_str().unwrap_or("").to_owned()
    };
    let policy = GroupPolicy::parse(&policy_name)
        .ok_or_else(|| ApiError::bad_request(format!("Invalid policy {policy_name}")))?;
    let max_server_per_host = g
        .get("rules")
        .and_then(|r| r.get("max_server_per_host"))
        .and_then(|m| m.as_i64().or_else(|| m.as_str().and_then(|s| s.parse().ok())));
    if max_server_per_host.is_some() && policy != GroupPolicy::AntiAffinity {
        return Err(ApiError::bad_request("Only anti-affinity policy supports rules."));
    }
    let group = ServerGroup {
        uuid: Uuid::new_v4(),
        name: g["name"].as_str().unwrap_or("").to_owned(),
        project_id: api::project(req),
        user_id: api::user(req),
        policy,
        max_server_per_host,
        members: Vec::new(),
        created_at: berth_core::now(),
    };
    ctx.core.write(|w| plan_create_server_group(w, group.clone()).map(|s| (s, ())).map_err(api::refused))?;
    Ok(Resp::ok(group_view::show(v, &group, &[])))
}

/// `DELETE /os-server-groups/{id}`.
pub fn delete_group(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let group = find_group(ctx, req)?;
    authorize_on(req, "os_compute_api:os-server-groups:delete", &group.project_id, None)?;
    ctx.core.write(|w| plan_delete_server_group(w, &group.uuid).map(|s| (s, ())).map_err(api::refused))?;
    Ok(Resp::no_content())
}

// ---------------------------------------------------------------------------
// Quotas and limits
// ---------------------------------------------------------------------------

fn quota_user(req: &Req) -> Option<String> {
    req.query_one("user_id").filter(|u| !u.is_empty()).map(str::to_owned)
}

/// `GET /os-quota-sets/{project}`.
pub fn show_quota(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let project = req.param(0).to_owned();
    authorize_on(req, "os_compute_api:os-quota-sets:show", &project, None)?;
    let user = quota_user(req);
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::show(version(req), &project, |r| {
        quota::effective_limit(&world, &project, user.as_deref(), r)
    })))
}

/// `GET /os-quota-sets/{project}/detail`.
pub fn quota_detail(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let project = req.param(0).to_owned();
    authorize_on(req, "os_compute_api:os-quota-sets:detail", &project, None)?;
    let user = quota_user(req);
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::detail(version(req), &project, |r| {
        (
            quota::effective_limit(&world, &project, user.as_deref(), r),
            quota::usage(&world, &project, user.as_deref(), r),
        )
    })))
}

/// `GET /os-quota-sets/{project}/defaults`.
pub fn quota_defaults(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let project = req.param(0).to_owned();
    authorize(req, "os_compute_api:os-quota-sets:defaults")?;
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::defaults(version(req), &project, |r| quota::default_limit(&world, r))))
}

/// `PUT /os-quota-sets/{project}`.
pub fn update_quota(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    let project = req.param(0).to_owned();
    authorize_on(req, "os_compute_api:os-quota-sets:update", &project, None)?;
    let body = body(req, &schemas::quotas::update(v))?;
    let set = body["quota_set"].as_object().cloned().unwrap_or_default();
    let force = set.get("force").is_some_and(|f| match f {
        Value::Bool(b) => *b,
        Value::String(s) => api::parse_bool(s).unwrap_or(false),
        _ => false,
    });
    let mut limits = BTreeMap::new();
    for (key, value) in &set {
        if key == "force" {
            continue;
        }
        let n = value.as_i64().or_else(|| value.as_str().and_then(|s| s.trim().parse().ok())).ok_or_else(|| {
            ApiError::bad_request(format!("Invalid input for field/attribute {key}. Value: {value}."))
        })?;
        limits.insert(key.clone(), n);
    }
    let user = quota_user(req);
    ctx.core.write(|w| {
        plan_set_quotas(w, &project, user.as_deref(), &limits, force).map(|s| (s, ())).map_err(api::refused)
    })?;
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::update(v, |r| quota::effective_limit(&world, &project, user.as_deref(), r))))
}

/// `DELETE /os-quota-sets/{project}`.
pub fn delete_quota(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let project = req.param(0).to_owned();
    authorize_on(req, "os_compute_api:os-quota-sets:delete", &project, None)?;
    let user = quota_user(req);
    ctx.core.write(|w| Ok::<_, ApiError>((plan_delete_quotas(w, &project, user.as_deref()), ())))?;
    Ok(Resp::empty(StatusCode::ACCEPTED))
}

/// A quota class's limit of `resource`: its own, else the built-in
/// default (Nova's `get_class_quotas`; for the `default` class this is
/// what every project defaults to).
fn class_limit(world: &berth_compute_model::World, class: &str, resource: &str) -> i64 {
    match world.compute.quota_classes.get(&(class.to_owned(), resource.to_owned())) {
        Some(limit) => *limit,
        None => quota::RESOURCES.iter().find(|(r, _)| *r == resource).map_or(-1, |(_, d)| *d),
    }
}

/// `GET /os-quota-class-sets/{class}`.
pub fn show_quota_class(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-quota-class-sets:show")?;
    let v = version(req);
    if v.at_least(102) {
        api::only_query(req, &[])?;
    }
    let class = req.param(0).to_owned();
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::class_set(v, Some(&class), |r| class_limit(&world, &class, r))))
}

/// `PUT /os-quota-class-sets/{class}`: set the class's limits (`default`
/// changes every project's defaults).
pub fn update_quota_class(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-quota-class-sets:update")?;
    let v = version(req);
    let class = req.param(0).to_owned();
    if class.chars().count() > 255 {
        return Err(ApiError::bad_request("Invalid input received: quota_class_name has more than 255 characters."));
    }
    let body = body(req, &schemas::quotas::class_update(v))?;
    let mut limits = BTreeMap::new();
    for (key, value) in body["quota_class_set"].as_object().cloned().unwrap_or_default() {
        let n = value.as_i64().or_else(|| value.as_str().and_then(|s| s.trim().parse().ok())).ok_or_else(|| {
            ApiError::bad_request(format!("Invalid input for field/attribute {key}. Value: {value}."))
        })?;
        limits.insert(key, n);
    }
    ctx.core.write(|w| plan_set_quota_class(w, &class, &limits).map(|s| (s, ())).map_err(api::refused))?;
    let world = ctx.core.read();
    Ok(Resp::ok(quota_view::class_set(v, None, |r| class_limit(&world, &class, r))))
}

/// `GET /limits`.
pub fn limits(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:limits")?;
    let project = match req.query_one("tenant_id") {
        Some(other) if other != api::project(req) => {
            authorize(req, "os_compute_api:limits:other_project")?;
            other.to_owned()
        }
        _ => api::project(req),
    };
    let world = ctx.core.read();
    Ok(Resp::ok(limits_view::show(
        version(req),
        |r| quota::project_limit(&world, &project, r),
        |r| quota::usage(&world, &project, None, r),
    )))
}

// ---------------------------------------------------------------------------
// Services and hypervisors
// ---------------------------------------------------------------------------

pub(crate) fn zone_of(ctx: &ComputeCtx, host: &str) -> String {
    ctx.core.read().compute.availability_zone_of_host(host, &ctx.compute.config.scheduler.default_availability_zone)
}

pub(crate) fn is_up(ctx: &ComputeCtx, host: &str) -> bool {
    ctx.compute.health.is_up_at(host, ctx.compute.now())
}

/// A hypervisor's service as `os-hypervisors` shows it: a reservation pool
/// host switched off on purpose (power management) is `down` and
/// `disabled` with the power state as the reason, as Nova shows a host an
/// operator took down.
pub(crate) fn powered_service(
    ctx: &ComputeCtx,
    service: &berth_compute_model::cell::Service,
) -> (berth_compute_model::cell::Service, bool) {
    let up = is_up(ctx, &service.host);
    let power = berth_compute::control::read(&*ctx.compute.control, |w| {
        w.compute.leases.host_of_service(&service.host).map(|h| h.power.state)
    });
    match power {
        Some(state) if state != berth_compute_model::lease::PowerState::On => {
            let mut shown = service.clone();
            shown.disabled = true;
            shown.disabled_reason = Some(format!("power management: {}", state.as_str()));
            (shown, false)
        }
        _ => (service.clone(), up),
    }
}

/// `GET /os-services`.
pub fn list_services(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-services:list")?;
        let v = version(&req);
        let overview = ctx.compute.overview().await;
        let items: Vec<Value> = overview
            .services
            .iter()
            .filter(|s| req.query_one("host").is_none_or(|h| s.service.host == h))
            .filter(|s| req.query_one("binary").is_none_or(|b| s.service.binary == b))
            .map(|s| svc_view::item(v, &s.service, &zone_of(&ctx, &s.service.host), is_up(&ctx, &s.service.host)))
            .collect();
        Ok(Resp::ok(svc_view::index(items)))
    })
}

async fn service_by_host(ctx: &ComputeCtx, host: &str, binary: &str) -> ApiResult<HostService> {
    let overview = ctx.compute.overview().await;
    overview
        .services
        .into_iter()
        .find(|s| s.service.host == host && s.service.binary == binary)
        .ok_or_else(|| ApiError::not_found(format!("Service {binary} on host {host} could not be found.")))
}

/// `PUT /os-services/{id}` (2.53+) and the legacy `PUT
/// /os-services/{disable,enable,disable-log-reason,force-down}`.
pub fn update_service(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-services:update")?;
        let v = version(&req);
        let id = req.param(0).to_owned();
        let legacy = matches!(id.as_str(), "disable" | "enable" | "disable-log-reason" | "force-down");
        if legacy && v.at_least(53) {
            return Err(ApiError::not_found("The resource could not be found."));
        }
        if legacy {
            let body = body(&req, &schemas::services::legacy_update(v))?;
            let host = body["host"].as_str().unwrap_or("").to_owned();
            let binary = body["binary"].as_str().unwrap_or("nova-compute").to_owned();
            let target = service_by_host(&ctx, &host, &binary).await?;
            let (disabled, reason, forced) = match id.as_str() {
                "disable" => (Some(true), None, None),
                "enable" => (Some(false), Some(None), None),
                "disable-log-reason" => (Some(true), Some(body["disabled_reason"].as_str().map(str::to_owned)), None),
                _ => (None, None, Some(body["forced_down"].as_bool().unwrap_or(false))),
            };
            let service = ctx.compute.set_service(&target, disabled, reason, forced).await.nova()?;
            let view = if id == "force-down" {
                svc_view::legacy_forced_down(&service.host, &service.binary, service.forced_down)
            } else {
                svc_view::legacy_status(
                    &service.host,
                    &service.binary,
                    service.disabled,
                    service.disabled_reason.as_deref(),
                )
            };
            return Ok(Resp::ok(view));
        }
        if !v.at_least(53) {
            return Err(ApiError::not_found("The resource could not be found."));
        }
        let body = body(&req, &schemas::services::update())?;
        service_id_valid(v, &id)?;
        let target = ctx.compute.find_service(&id).await.nova()?;
        let disabled = match body.get("status").and_then(Value::as_str) {
            Some("disabled") => Some(true),
            Some("enabled") => Some(false),
            _ => None,
        };
        let reason = body.get("disabled_reason").and_then(Value::as_str).map(str::to_owned);
        if reason.is_some() && disabled != Some(true) {
            return Err(ApiError::bad_request("Specifying 'disabled_reason' with status 'enabled' is invalid."));
        }
        let reason = match disabled {
            Some(true) => Some(reason),
            Some(false) => Some(None),
            None => None,
        };
        let forced = body.get("forced_down").and_then(Value::as_bool);
        if disabled.is_none() && forced.is_none() {
            return Err(ApiError::bad_request(
                "No updates were requested. Fields 'status' or 'forced_down' should be specified.",
            ));
        }
        let service = ctx.compute.set_service(&target, disabled, reason, forced).await.nova()?;
        Ok(Resp::ok(svc_view::update(v, &service, &zone_of(&ctx, &service.host), is_up(&ctx, &service.host))))
    })
}

/// Service ids are UUIDs from 2.53 on, integers before (Nova's checks).
fn service_id_valid(v: crate::ComputeVersion, id: &str) -> ApiResult<()> {
    if v.at_least(53) {
        Uuid::parse_str(id).map(|_| ()).map_err(|_| ApiError::bad_request(format!("Invalid uuid {id}")))
    } else {
        id.parse::<i64>()
            .map(|_| ())
            .map_err(|_| ApiError::bad_request("Invalid input received: id must be an integer"))
    }
}

/// `DELETE /os-services/{id}`.
pub fn delete_service(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-services:delete")?;
        service_id_valid(version(&req), req.param(0))?;
        let target = ctx.compute.find_service(req.param(0)).await.nova()?;
        ctx.compute.delete_service(&target).await.nova()?;
        Ok(Resp::no_content())
    })
}

pub(crate) fn usage_of(
    ctx: &ComputeCtx,
    node: &berth_compute_model::cell::ComputeNode,
    running: i64,
) -> hv_view::HypervisorUsage {
    let world = ctx.core.read();
    let mut usage = hv_view::HypervisorUsage { running_vms: running, ..Default::default() };
    let mut providers = vec![node.uuid];
    providers.extend(world.placement.descendants(&node.uuid));
    for uuid in providers {
        if let Some(p) = world.placement.provider(&uuid) {
            usage.vcpus_used += p.used("VCPU") + p.used("PCPU");
            usage.memory_mb_used += p.used("MEMORY_MB");
            usage.local_gb_used += p.used("DISK_GB");
        }
    }
    usage
}

fn hypervisors(ctx: Arc<ComputeCtx>, req: Req, detail: bool) -> HandlerFuture {
    Box::pin(async move {
        authorize(
            &req,
            if detail { "os_compute_api:os-hypervisors:list-detail" } else { "os_compute_api:os-hypervisors:list" },
        )?;
        let v = version(&req);
        let overview = ctx.compute.overview().await;
        let pattern = req.query_one("hypervisor_hostname_pattern").map(str::to_owned);
        let with_servers =
            v.at_least(53) && req.query_one("with_servers").is_some_and(|w| api::parse_bool(w).unwrap_or(false));
        let mut items = Vec::new();
        // A node is a hypervisor once its inventory is reported.
        let reported =
            ctx.compute.reported_nodes(overview.services.iter().flat_map(|s| s.nodes.iter().map(|n| n.uuid)));
        let mut entries: Vec<(&HostService, &berth_compute_model::cell::ComputeNode)> = overview
            .services
            .iter()
            .filter(|s| s.service.binary == "nova-compute")
            .flat_map(|s| s.nodes.iter().map(move |n| (s, n)))
            .filter(|(_, n)| reported.contains(&n.uuid))
            .filter(|(_, n)| pattern.as_ref().is_none_or(|p| n.hypervisor_hostname.contains(p.as_str())))
            .collect();
        if let Some(pattern) = pattern.as_ref().filter(|_| v.at_least(53)) {
            if entries.is_empty() {
                return Err(ApiError::not_found(format!("No hypervisor matching '{pattern}' could be found.")));
            }
        }
        entries.sort_by_key(|(_, n)| if v.at_least(53) { (0, n.uuid.to_string()) } else { (n.id, String::new()) });
        let (limit, marker) = api::paging(&req, ctx.max_limit)?;
        if let Some(marker) = &marker {
            let pos = entries
                .iter()
                .position(|(_, n)| n.uuid.to_string() == *marker || n.id.to_string() == *marker)
                .ok_or_else(|| ApiError::bad_request(format!("marker [{marker}] not found")))?;
            entries.drain(..=pos);
        }
        entries.truncate(limit.unwrap_or(ctx.max_limit));
        for (service, node) in &entries {
            let (shown, up) = powered_service(&ctx, &service.service);
            let instances = if with_servers { super::hosts::instances_on(&ctx, &node.host).await? } else { Vec::new() };
            let servers = super::hosts::servers_of(&instances);
            let source =
                hv_view::HypervisorSource { node, service: &shown, up, servers: with_servers.then_some(&servers[..]) };
            if detail {
                let usage = usage_of(&ctx, node, service.instances);
                items.push(hv_view::detail_item(v, &source, &usage, None));
            } else {
                items.push(hv_view::index_item(v, &source));
            }
        }
        let next = match entries.last() {
            Some((_, n)) if views::page_is_full(entries.len(), limit, ctx.max_limit) && limit.is_some() => {
                let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let marker = if v.at_least(53) { n.uuid.to_string() } else { n.id.to_string() };
                Some(ctx.links(&req).next(
                    if detail { "os-hypervisors/detail" } else { "os-hypervisors" },
                    &query,
                    &marker,
                ))
            }
            _ => None,
        };
        Ok(Resp::ok(hv_view::list(v, items, next)))
    })
}

/// `GET /os-hypervisors`.
pub fn list_hypervisors(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    hypervisors(ctx, req, false)
}

/// `GET /os-hypervisors/detail`.
pub fn detail_hypervisors(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    hypervisors(ctx, req, true)
}

/// `GET /os-hypervisors/{id}`.
pub fn show_hypervisor(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-hypervisors:show")?;
        let v = version(&req);
        let id = req.param(0).to_owned();
        if v.at_least(53) && Uuid::parse_str(&id).is_err() {
            return Err(ApiError::bad_request(format!("Invalid uuid {id}")));
        }
        let overview = ctx.compute.overview().await;
        let found = overview.services.iter().find_map(|s| {
            s.nodes
                .iter()
                .find(|n| n.uuid.to_string() == id || (!v.at_least(53) && n.id.to_string() == id))
                .map(|n| (s, n))
        });
        let found = found.filter(|(_, n)| !ctx.compute.reported_nodes([n.uuid]).is_empty());
        let Some((service, node)) = found else {
            return Err(ApiError::not_found(format!("Hypervisor with ID {id} could not be found.")));
        };
        let (shown, up) = powered_service(&ctx, &service.service);
        let usage = usage_of(&ctx, node, service.instances);
        let source = hv_view::HypervisorSource { node, service: &shown, up, servers: None };
        Ok(Resp::ok(hv_view::show(v, &source, &usage, None)))
    })
}

/// `GET /os-availability-zone` and `/detail`.
fn zones(ctx: Arc<ComputeCtx>, req: Req, detail: bool) -> HandlerFuture {
    Box::pin(async move {
        authorize(
            &req,
            if detail {
                "os_compute_api:os-availability-zone:detail"
            } else {
                "os_compute_api:os-availability-zone:list"
            },
        )?;
        let overview = ctx.compute.overview().await;
        let default = ctx.compute.config.scheduler.default_availability_zone.clone();
        let mut by_zone: BTreeMap<String, Vec<(&berth_compute_model::cell::Service, bool)>> = BTreeMap::new();
        let mut unavailable: BTreeSet<String> = BTreeSet::new();
        for s in overview.services.iter().filter(|s| s.service.binary == "nova-compute") {
            let zone = zone_of(&ctx, &s.service.host);
            if s.service.disabled {
                unavailable.insert(zone);
                continue;
            }
            by_zone.entry(zone).or_default().push((&s.service, is_up(&ctx, &s.service.host)));
        }
        // Zones defined by aggregates without enabled hosts are not available.
        for zone in ctx.core.read().compute.aggregates.values().filter_map(|a| a.availability_zone()) {
            if !by_zone.contains_key(zone) {
                unavailable.insert(zone.to_owned());
            }
        }
        let _ = default;
        if detail {
            let mut details: Vec<az_view::ZoneDetail<'_>> = by_zone
                .iter()
                .map(|(name, services)| az_view::ZoneDetail { name, available: true, services })
                .collect();
            let empty: Vec<(&berth_compute_model::cell::Service, bool)> = Vec::new();
            for name in unavailable.iter().filter(|z| !by_zone.contains_key(*z)) {
                details.push(az_view::ZoneDetail { name, available: false, services: &empty });
            }
            return Ok(Resp::ok(az_view::detail(&details)));
        }
        let mut list: Vec<(&str, bool)> = by_zone.keys().map(|z| (z.as_str(), true)).collect();
        list.extend(unavailable.iter().filter(|z| !by_zone.contains_key(*z)).map(|z| (z.as_str(), false)));
        Ok(Resp::ok(az_view::index(&list)))
    })
}

/// `GET /os-availability-zone`.
pub fn list_zones(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    zones(ctx, req, false)
}

/// `GET /os-availability-zone/detail`.
pub fn detail_zones(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    zones(ctx, req, true)
}

// ---------------------------------------------------------------------------
// Aggregates
// ---------------------------------------------------------------------------

fn aggregate_id(req: &Req) -> ApiResult<i64> {
    let text = req.param(0);
    text.parse().map_err(|_| ApiError::bad_request("Invalid input received: id must be an integer"))
}

fn find_aggregate(ctx: &ComputeCtx, id: i64) -> ApiResult<Aggregate> {
    ctx.core
        .read()
        .compute
        .aggregates
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Aggregate {id} could not be found.")))
}

/// `GET /os-aggregates`.
pub fn list_aggregates(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-aggregates:index")?;
    let aggregates: Vec<Aggregate> = ctx.core.read().compute.aggregates.values().cloned().collect();
    Ok(Resp::ok(agg_view::index(version(req), &aggregates)))
}

/// `POST /os-aggregates`.
pub fn create_aggregate(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-aggregates:create")?;
    let body = body(req, &schemas::aggregates::create())?;
    let a = &body["aggregate"];
    let name = a["name"].as_str().unwrap_or("").trim().to_owned();
    let zone = a.get("availability_zone").and_then(Value::as_str).map(str::to_owned);
    let now = berth_core::now();
    let aggregate = ctx
        .core
        .write(|w| plan_create_aggregate(w, &name, zone.as_deref(), Uuid::new_v4(), now).map_err(api::refused))?;
    Ok(Resp::ok(agg_view::create(version(req), &aggregate)))
}

/// `GET /os-aggregates/{id}`.
pub fn show_aggregate(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-aggregates:show")?;
    let aggregate = find_aggregate(ctx, aggregate_id(req)?)?;
    Ok(Resp::ok(agg_view::show(version(req), &aggregate)))
}

/// `PUT /os-aggregates/{id}`.
pub fn update_aggregate(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-aggregates:update")?;
    let id = aggregate_id(req)?;
    let body = body(req, &schemas::aggregates::update())?;
    let a = &body["aggregate"];
    let name = a.get("name").and_then(Value::as_str).map(|s| s.trim().to_owned());
    let zone = a.get("availability_zone").and_then(Value::as_str).map(str::to_owned);
    let now = berth_core::now();
    let aggregate = ctx
        .core
        .write(|w| plan_update_aggregate(w, id, name.as_deref(), zone.as_deref(), now).map_err(api::refused))?;
    Ok(Resp::ok(agg_view::show(version(req), &aggregate)))
}

/// `DELETE /os-aggregates/{id}`.
pub fn delete_aggregate(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-aggregates:delete")?;
    let id = aggregate_id(req)?;
    ctx.core.write(|w| plan_delete_aggregate(w, id).map(|s| (s, ())).map_err(api::refused))?;
    // Nova answers 200 with no body (no `@wsgi.response` on the method).
    Ok(Resp::empty(StatusCode::OK))
}

/// `POST /os-aggregates/{id}/action`: `add_host`, `remove_host`,
/// `set_metadata`.
pub fn aggregate_action(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let id = aggregate_id(req)?;
    let value: Value = crate::api::parse_body(req)?;
    let now = berth_core::now();
    let aggregate = if value.get("add_host").is_some() {
        authorize(req, "os_compute_api:os-aggregates:add_host")?;
        let body = body(req, &schemas::aggregates::add_host())?;
        let host = body["add_host"]["host"].as_str().unwrap_or("").to_owned();
        ctx.core.write(|w| plan_add_aggregate_host(w, id, &host, now).map_err(api::refused))?
    } else if value.get("remove_host").is_some() {
        authorize(req, "os_compute_api:os-aggregates:remove_host")?;
        let body = body(req, &schemas::aggregates::remove_host())?;
        let host = body["remove_host"]["host"].as_str().unwrap_or("").to_owned();
        ctx.core.write(|w| plan_remove_aggregate_host(w, id, &host, now).map_err(api::refused))?
    } else if value.get("set_metadata").is_some() {
        authorize(req, "os_compute_api:os-aggregates:set_metadata")?;
        let body = body(req, &schemas::aggregates::set_metadata())?;
        let metadata: BTreeMap<String, Option<String>> = body["set_metadata"]["metadata"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            match v {
                                Value::Null => None,
                                Value::String(s) => Some(s.clone()),
                                other => Some(other.to_string()),
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        ctx.core.write(|w| plan_set_aggregate_metadata(w, id, &metadata, now).map_err(api::refused))?
    } else {
        return Err(ApiError::bad_request("Invalid request body: unknown aggregate action"));
    };
    Ok(Resp::ok(agg_view::show(version(req), &aggregate)))
}
