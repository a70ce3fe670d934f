//! One server: `GET`, `PUT` (name, description, access addresses, disk
//! config) and `DELETE
//! /servers/{id}`.

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::servers::{ServerEdit, ServerRecord};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;

use super::{
    access, access_ips, caller, check_lock, disk_config_requested, groups_of, host_status, rule, server_id, visible,
};
use crate::api::{authorize_on, body, version, ComputeCtx, NovaResult};
use crate::schemas;
use crate::views::servers::{self as view, HostStatus, ServerExtras};

fn render_show(ctx: &ComputeCtx, req: &Req, record: &ServerRecord) -> ApiResult<Value> {
    let v = version(req);
    let links = ctx.links(req);
    let access = access(req);
    let spec = ctx.core.read().compute.request_specs.get(&record.uuid()).cloned();
    let groups = groups_of(ctx, &record.uuid());
    Ok(match record {
        ServerRecord::Pending(build) => {
            let instance = view::build_request_instance(build);
            let extras = ServerExtras {
                host_status: Some(HostStatus::NoHost),
                server_groups: &groups,
                request_spec: spec.as_ref(),
                ..ServerExtras::default()
            };
            view::show(v, &links, &access, &instance, &extras)
        }
        ServerRecord::Placed { instance, fault, .. } => {
            let extras = ServerExtras {
                fault: fault.as_ref(),
                host_status: Some(host_status(ctx, instance)),
                server_groups: &groups,
                request_spec: spec.as_ref(),
            };
            view::show(v, &links, &access, instance, &extras)
        }
        ServerRecord::Unreachable(mapping) => {
            if !v.at_least(69) {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The cell holding this server is not answering; retry later.",
                ));
            }
            let spec = spec.ok_or_else(|| {
                ApiError::not_found(format!("Instance {} could not be found.", mapping.instance_uuid))
            })?;
            view::down_cell_show(v, &links, mapping, &spec, access.show_flavor_extra_specs, &groups)
        }
    })
}

/// `GET /servers/{id}`.
pub fn show(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("show"), record.project_id(), None)?;
        Ok(Resp::ok(render_show(&ctx, &req, &record)?))
    })
}

/// `PUT /servers/{id}`: name, description, `accessIPv4`/`accessIPv6`,
/// `OS-DCF:diskConfig`, and from 2.104 `pinned_availability_zone`.
pub fn update(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("update"), record.project_id(), None)?;
        let body = body(&req, &schemas::servers::update(v))?;
        let server = &body["server"];
        let (access_ip_v4, access_ip_v6) = access_ips(server)?;
        let edit = ServerEdit {
            name: server.get("name").and_then(Value::as_str).map(str::to_owned),
            description: server.get("description").map(|d| d.as_str().map(str::to_owned)),
            access_ip_v4,
            access_ip_v6,
            auto_disk_config: disk_config_requested(server),
        };
        // 2.104: unpin, or re-pin to the zone the server is in, first (a
        // 409 there changes nothing else).
        if v.at_least(104) {
            if let Some(pin) = server.get("pinned_availability_zone") {
                let zone = match &record {
                    ServerRecord::Placed { instance, .. } => instance.availability_zone.clone(),
                    _ => ctx.core.read().compute.request_specs.get(&id).and_then(|s| s.availability_zone.clone()),
                };
                ctx.compute.pin_availability_zone(&id, pin.as_str(), zone.as_deref()).nova()?;
            }
        }
        ctx.compute.update_server(&id, edit).await.nova()?;
        let record = ctx.compute.get_server(&id).await.nova()?;
        let links = ctx.links(&req);
        let access = access(&req);
        let groups = groups_of(&ctx, &id);
        // The full view (2.75) shows the pin (2.96) and the hints (2.100)
        // from the request spec, as `GET` does.
        let spec = ctx.core.read().compute.request_specs.get(&id).cloned();
        match &record {
            ServerRecord::Placed { instance, fault, .. } => {
                let extras = ServerExtras {
                    fault: fault.as_ref(),
                    host_status: Some(host_status(&ctx, instance)),
                    server_groups: &groups,
                    request_spec: spec.as_ref(),
                };
                Ok(Resp::ok(view::update(v, &links, &access, instance, &extras)))
            }
            // Still scheduling: the same reduced view, of the instance the
            // build request carries.
            ServerRecord::Pending(build) => {
                let instance = view::build_request_instance(build);
                let extras = ServerExtras {
                    host_status: Some(HostStatus::NoHost),
                    server_groups: &groups,
                    request_spec: spec.as_ref(),
                    ..ServerExtras::default()
                };
                Ok(Resp::ok(view::update(v, &links, &access, &instance, &extras)))
            }
            _ => Ok(Resp::ok(render_show(&ctx, &req, &record)?)),
        }
    })
}

/// `DELETE /servers/{id}`.
pub fn delete(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("delete"), record.project_id(), None)?;
        check_lock(&req, &record)?;
        ctx.compute.delete_server(&id, &caller(&req)).await.nova()?;
        Ok(Resp::no_content())
    })
}
