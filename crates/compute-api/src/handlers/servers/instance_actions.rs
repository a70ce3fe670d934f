//! `os-instance-actions`: a server's actions, and one with its events
//! (shown as policy allows).

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute_model::cell::InstanceAction;
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use uuid::Uuid;

use super::{server_id, visible};
use crate::api::{self, authorize_on, version, ComputeCtx, NovaResult};
use crate::views::instance_actions as actions_view;

/// A server's project and actions: a live one as its owner (or an admin)
/// sees it, and from 2.21 a deleted one too (Nova reads deleted instances
/// there), found in its cell.
async fn server_actions(ctx: &ComputeCtx, req: &Req, id: &Uuid) -> ApiResult<(String, Vec<InstanceAction>)> {
    match visible(ctx, req, id).await {
        Ok(record) => {
            let actions = ctx.compute.instance_actions(id).await.nova()?;
            Ok((record.project_id().to_owned(), actions))
        }
        Err(err) if err.status == StatusCode::NOT_FOUND && version(req).at_least(21) => {
            let found = ctx.compute.deleted_server_actions(id).await.nova()?;
            match found {
                Some((project, actions)) if project == api::project(req) || api::is_admin(req) => {
                    Ok((project, actions))
                }
                _ => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}

/// `GET /servers/{id}/os-instance-actions`.
pub fn list_actions(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let (project, actions) = server_actions(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:list", &project, None)?;
        Ok(Resp::ok(actions_view::index(v, &actions, None)))
    })
}

/// `GET /servers/{id}/os-instance-actions/{request_id}`.
pub fn show_action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let request_id = req.param(1).to_owned();
        let (project, actions) = server_actions(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:show", &project, None)?;
        let action = actions.into_iter().find(|a| a.request_id == request_id).ok_or_else(|| {
            ApiError::not_found(format!("Action for request_id {request_id} on instance {id} not found"))
        })?;
        let access = actions_view::EventAccess {
            show_events: api::allowed(&req, "os_compute_api:os-instance-actions:events"),
            show_details: api::allowed(&req, "os_compute_api:os-instance-actions:events:details"),
        };
        Ok(Resp::ok(actions_view::show(v, &action, &project, &access)))
    })
}
