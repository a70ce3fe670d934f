//! A server's sub-resources: user metadata (`/servers/{id}/metadata`,
//! Nova's `server_metadata`), tags (`/servers/{id}/tags`, 2.26, Nova's
//! `server_tags`) and addresses (`/servers/{id}/ips`, Nova's `ips`).
//!
//! As in Nova, a body is validated before the server is looked up, and
//! the policy rule is checked against the server's project.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::metadata::{MetadataChange, TagChange, TagOutcome};
use berth_compute::servers::ServerRecord;
use berth_compute_model::InstanceSpec;
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::{json, Map, Value};

use super::{caller, check_lock, server_id, visible};
use crate::api::{authorize_on, body, version, ComputeCtx, NovaResult};
use crate::schemas;

const METADATA_RULE: &str = "os_compute_api:server-metadata:";
const TAGS_RULE: &str = "os_compute_api:os-server-tags:";
const IPS_RULE: &str = "os_compute_api:ips:";

/// What the server record holds (a server whose cell does not answer:
/// 503, its metadata and tags are in the cell).
fn spec_of(record: &ServerRecord) -> ApiResult<&InstanceSpec> {
    match record {
        ServerRecord::Placed { instance, .. } => Ok(&instance.spec),
        ServerRecord::Pending(build) => Ok(&build.spec),
        ServerRecord::Unreachable(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The cell holding this server is not answering; retry later.",
        )),
    }
}

fn metadata_json(metadata: &BTreeMap<String, String>) -> Value {
    Value::Object(metadata.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<String, Value>>())
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default()
}

/// From 2.102 the read endpoints take no query parameters (Nova's
/// `index_query_v2102`/`show_query_v2102`).
fn no_query(req: &Req) -> ApiResult<()> {
    if version(req).at_least(102) {
        if let Some((name, _)) = req.query.first() {
            return Err(ApiError::bad_request(format!(
                "Invalid input for query parameters {name}. Value: {name}. Additional properties are not allowed ('{name}' was unexpected)"
            )));
        }
    }
    Ok(())
}

/// `GET /servers/{id}/metadata`.
pub fn list_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        no_query(&req)?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}index"), record.project_id(), None)?;
        Ok(Resp::ok(json!({"metadata": metadata_json(&spec_of(&record)?.metadata)})))
    })
}

/// `GET /servers/{id}/metadata/{key}`.
pub fn show_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        no_query(&req)?;
        let id = server_id(&req)?;
        let key = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}show"), record.project_id(), None)?;
        let value = spec_of(&record)?
            .metadata
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found("Metadata item was not found"))?;
        Ok(Resp::ok(json!({"meta": {key: value}})))
    })
}

/// `POST /servers/{id}/metadata`: merge (200, as Nova).
pub fn create_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let body = body(&req, &schemas::servers::metadata_body("metadata", false))?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}create"), record.project_id(), None)?;
        check_lock(&req, &record)?;
        let change = MetadataChange::Merge(string_map(&body["metadata"]));
        let metadata = ctx.compute.update_metadata(&id, change, &caller(&req)).await.nova()?;
        Ok(Resp::ok(json!({"metadata": metadata_json(&metadata)})))
    })
}

/// `PUT /servers/{id}/metadata`: replace all.
pub fn update_all_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let body = body(&req, &schemas::servers::metadata_body("metadata", false))?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}update_all"), record.project_id(), None)?;
        check_lock(&req, &record)?;
        let change = MetadataChange::Replace(string_map(&body["metadata"]));
        let metadata = ctx.compute.update_metadata(&id, change, &caller(&req)).await.nova()?;
        Ok(Resp::ok(json!({"metadata": metadata_json(&metadata)})))
    })
}

/// `PUT /servers/{id}/metadata/{key}`: `{"meta": {key: value}}`.
pub fn update_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let body = body(&req, &schemas::servers::metadata_body("meta", true))?;
        let id = server_id(&req)?;
        let key = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}update"), record.project_id(), None)?;
        let items = string_map(&body["meta"]);
        if !items.contains_key(&key) {
            return Err(ApiError::bad_request("Request body and URI mismatch"));
        }
        check_lock(&req, &record)?;
        ctx.compute.update_metadata(&id, MetadataChange::Merge(items.clone()), &caller(&req)).await.nova()?;
        Ok(Resp::ok(json!({"meta": metadata_json(&items)})))
    })
}

/// `DELETE /servers/{id}/metadata/{key}` (204).
pub fn delete_metadata(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let key = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{METADATA_RULE}delete"), record.project_id(), None)?;
        // Nova looks the key up before the lock and state checks.
        if !spec_of(&record)?.metadata.contains_key(&key) {
            return Err(ApiError::not_found("Metadata item was not found"));
        }
        check_lock(&req, &record)?;
        ctx.compute.update_metadata(&id, MetadataChange::Delete(key), &caller(&req)).await.nova()?;
        Ok(Resp::no_content())
    })
}

/// `GET /servers/{id}/tags`.
pub fn list_tags(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}index"), record.project_id(), None)?;
        Ok(Resp::ok(json!({"tags": spec_of(&record)?.tags})))
    })
}

/// `GET /servers/{id}/tags/{tag}`: 204 when the server has it.
pub fn show_tag(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let tag = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}show"), record.project_id(), None)?;
        if !spec_of(&record)?.tags.contains(&tag) {
            return Err(ApiError::not_found(format!("Server {id} has no tag '{tag}'")));
        }
        Ok(Resp::no_content())
    })
}

/// `PUT /servers/{id}/tags/{tag}`: 201 with a `Location`, or 204 when the
/// server already has it.
pub fn add_tag(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        // Nova's body schema is `null`: no body, or JSON null.
        if !req.body.iter().all(u8::is_ascii_whitespace) {
            body(&req, &json!({"type": "null"}))?;
        }
        let id = server_id(&req)?;
        let tag = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}update"), record.project_id(), None)?;
        if let ServerRecord::Placed { instance, .. } = &record {
            // Nova checks the state before the tag's format.
            if !["active", "paused", "suspended", "stopped"].contains(&instance.vm_state.as_str()) {
                return Err(ApiError::conflict(format!(
                    "Cannot 'update tag' instance {id} while it is in vm_state {}",
                    instance.vm_state
                )));
            }
        }
        if let Err(e) = berth_http::schema::validate(&schemas::tag(), &json!(tag)) {
            return Err(ApiError::bad_request(format!(
                "Tag '{tag}' is invalid. It must be a non empty string without characters '/' and ','. Validation error message: {}",
                e.message
            )));
        }
        match ctx.compute.update_tags(&id, TagChange::Add(tag.clone())).await.nova()? {
            TagOutcome::AlreadyThere => Ok(Resp::no_content()),
            TagOutcome::Changed(_) => {
                let location =
                    format!("{}/servers/{id}/tags/{}", ctx.links(&req).versioned_base(), encode_segment(&tag));
                Ok(Resp::empty(StatusCode::CREATED).header("location", location))
            }
        }
    })
}

/// `PUT /servers/{id}/tags`: replace all.
pub fn replace_tags(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let body = body(&req, &schemas::servers::tags_body())?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}update_all"), record.project_id(), None)?;
        let tags: Vec<String> = body["tags"]
            .as_array()
            .map(|list| list.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        match ctx.compute.update_tags(&id, TagChange::Replace(tags)).await.nova()? {
            TagOutcome::Changed(tags) => Ok(Resp::ok(json!({"tags": tags}))),
            TagOutcome::AlreadyThere => Ok(Resp::no_content()),
        }
    })
}

/// `DELETE /servers/{id}/tags/{tag}` (204).
pub fn delete_tag(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let tag = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}delete"), record.project_id(), None)?;
        ctx.compute.update_tags(&id, TagChange::Remove(tag)).await.nova()?;
        Ok(Resp::no_content())
    })
}

/// `DELETE /servers/{id}/tags` (204).
pub fn delete_all_tags(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{TAGS_RULE}delete_all"), record.project_id(), None)?;
        ctx.compute.update_tags(&id, TagChange::Clear).await.nova()?;
        Ok(Resp::no_content())
    })
}

/// `GET /servers/{id}/ips`: berth has no network service, so a server has
/// no ports and no addresses (Nova's answer for a server booted with
/// `networks: none`).
pub fn list_ips(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        no_query(&req)?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{IPS_RULE}index"), record.project_id(), None)?;
        Ok(Resp::ok(json!({"addresses": {}})))
    })
}

/// `GET /servers/{id}/ips/{network}`: a server is a member of no network.
pub fn show_ips(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        no_query(&req)?;
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &format!("{IPS_RULE}show"), record.project_id(), None)?;
        Err(ApiError::not_found("Instance is not a member of specified network"))
    })
}

/// Percent-encode one path segment for a `Location` header.
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
