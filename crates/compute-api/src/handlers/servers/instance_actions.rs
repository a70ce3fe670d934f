//! `os-instance-actions`: a server's actions, and one with its events
//! (shown as policy allows).

use std::sync::Arc;

use berth_http::{ApiError, HandlerFuture, Req, Resp};

use super::{server_id, visible};
use crate::api::{self, authorize_on, version, ComputeCtx, NovaResult};
use crate::views::instance_actions as actions_view;

/// `GET /servers/{id}/os-instance-actions`.
pub fn list_actions(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:list", record.project_id(), None)?;
        let actions = ctx.compute.instance_actions(&id).await.nova()?;
        Ok(Resp::ok(actions_view::index(v, &actions, None)))
    })
}

/// `GET /servers/{id}/os-instance-actions/{request_id}`.
pub fn show_action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let request_id = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:show", record.project_id(), None)?;
        let actions = ctx.compute.instance_actions(&id).await.nova()?;
        let action = actions.into_iter().find(|a| a.request_id == request_id).ok_or_else(|| {
            ApiError::not_found(format!("Action for request_id {request_id} on instance {id} not found"))
        })?;
        let access = actions_view::EventAccess {
            show_events: api::allowed(&req, "os_compute_api:os-instance-actions:events"),
            show_details: api::allowed(&req, "os_compute_api:os-instance-actions:events:details"),
        };
        Ok(Resp::ok(actions_view::show(v, &action, record.project_id(), &access)))
    })
}
