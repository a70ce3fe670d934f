//! Read-mostly server sub-resources: `GET /servers/{id}/diagnostics`
//! (admin) and `/servers/{id}/os-server-password` (`GET`: the password a
//! guest posted to the metadata service, which berth's fake guests never
//! do, so always `""`; `DELETE`: 204, nothing to clear).

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::servers::ServerRecord;
use berth_http::{ApiError, HandlerFuture, Req, Resp};
use serde_json::json;

use super::{server_id, visible};
use crate::api::{self, authorize_on, version, ComputeCtx};
use crate::views::diagnostics::{self as view, DiagnosticsSource};

/// `GET /servers/{id}/diagnostics`: made-up figures sized from the
/// flavor; 409 while the server has no host (Nova's `InstanceNotReady`).
pub fn diagnostics(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-server-diagnostics", record.project_id(), None)?;
        let v = version(&req);
        if v.at_least(102) {
            api::only_query(&req, &[])?;
        }
        let instance = match &record {
            ServerRecord::Placed { instance, .. } if instance.host.is_some() => instance,
            ServerRecord::Unreachable(_) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The cell holding this server is not answering; retry later.",
                ))
            }
            _ => return Err(ApiError::conflict(format!("Instance {id} is not ready"))),
        };
        let running = instance.power_state == berth_compute_model::cell::power_state::RUNNING;
        let source = DiagnosticsSource {
            running,
            uptime: instance.launched_at.filter(|_| running).map(|at| (ctx.compute.now() - at).max(0)),
            config_drive: matches!(instance.spec.config_drive.to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
            vcpus: instance.spec.flavor.vcpus,
            memory_mb: instance.spec.flavor.memory_mb,
            // berth's agents report hypervisor type `fake`.
            hypervisor: "fake",
        };
        Ok(Resp::ok(view::show(v, &source)))
    })
}

/// `GET /servers/{id}/os-server-password`: `{"password": ""}`.
pub fn show_password(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-server-password:show", record.project_id(), None)?;
        if version(&req).at_least(102) {
            api::only_query(&req, &[])?;
        }
        Ok(Resp::ok(json!({"password": ""})))
    })
}

/// `DELETE /servers/{id}/os-server-password`: 204.
pub fn clear_password(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-server-password:clear", record.project_id(), None)?;
        Ok(Resp::no_content())
    })
}
