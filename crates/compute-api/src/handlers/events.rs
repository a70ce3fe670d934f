//! `POST /os-server-external-events`: what Neutron, Cinder, Ironic and
//! Cyborg tell Nova about its servers. berth has none of those services,
//! so an accepted event changes nothing; the answer is Nova's: each event
//! echoed with a `status` and `code` (200 accepted, 404 unknown server,
//! 422 server without a host, 400 missing a required `tag`), and 207
//! when any was not accepted.

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::servers::ServerRecord;
use berth_http::{HandlerFuture, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::api::{authorize, body, version, ComputeCtx};
use crate::schemas;

/// Events Nova drops without a `tag`.
const TAG_REQUIRED: &[&str] = &["volume-extended", "power-update", "accelerator-request-bound"];

/// `POST /os-server-external-events`.
pub fn create_events(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        authorize(&req, "os_compute_api:os-server-external-events:create")?;
        let body = body(&req, &schemas::events::create(version(&req)))?;
        let mut all_accepted = true;
        let mut answered = Vec::new();
        for event in body["events"].as_array().cloned().unwrap_or_default() {
            let uuid = event["server_uuid"].as_str().and_then(|u| Uuid::parse_str(u).ok());
            let host = match uuid {
                Some(uuid) => match ctx.compute.get_server(&uuid).await {
                    Ok(ServerRecord::Placed { instance, .. }) => Some(instance.host),
                    Ok(ServerRecord::Pending(_)) => Some(None),
                    _ => None,
                },
                None => None,
            };
            let name = event["name"].as_str().unwrap_or_default();
            let (status, code) = match host {
                None => ("failed", 404),
                Some(_) if TAG_REQUIRED.contains(&name) && event.get("tag").is_none() => ("failed", 400),
                Some(Some(_)) => ("completed", 200),
                Some(None) => ("failed", 422),
            };
            all_accepted &= code == 200;
            let mut shown = event.clone();
            if let Value::Object(map) = &mut shown {
                map.insert("status".into(), json!(status));
                map.insert("code".into(), json!(code));
            }
            answered.push(shown);
        }
        let status = if all_accepted { StatusCode::OK } else { StatusCode::MULTI_STATUS };
        Ok(Resp::json(status, json!({"events": answered})))
    })
}
