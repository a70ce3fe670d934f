//! Glance's interoperable image import with `glance-direct`:
//! `PUT /v2/images/{id}/stage` streams the data to the store's staging
//! file (`queued → uploading`, the size known), and `POST
//! /v2/images/{id}/import` moves it into the store (`uploading →
//! importing → active`, with the checksums computed from the staged
//! bytes). Methods other than `glance-direct` are refused as Glance
//! refuses a method it does not enable (`web-download` needs outbound
//! network, which berth does not assume).
//!
//! Each status change is one planned write that checks the status it
//! leaves; the staged file is written to a temporary first and renamed,
//! so no partial stage is ever importable. The sweep ([`crate::data`])
//! gives back to `queued` an image whose stage or import died with its
//! process, and removes staged data of images no longer waiting for it.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use berth_compute_model::plan::{plan_abort_image_upload, plan_finish_image_upload, plan_image_status};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use berth_compute_api::api::{self, is_admin};

use crate::data::{body_stream, Slot};
use crate::handlers::{find, IMPORT_METHODS};
use crate::ImageCtx;

fn may_modify(req: &Req, owner: Option<&str>) -> bool {
    is_admin(req) || (owner.is_some() && owner == req.auth.project_id.as_deref())
}

fn go_back(ctx: &ImageCtx, id: &Uuid) {
    let _ = ctx
        .core
        .write(|w| plan_abort_image_upload(w, id, berth_core::now()).map(|set| (set, ())).map_err(api::refused));
}

/// `PUT /image/v2/images/{id}/stage`.
pub fn stage(ctx: Arc<ImageCtx>, req: Req, body: Body) -> HandlerFuture {
    Box::pin(async move { stage_data(&ctx, &req, body).await })
}

async fn stage_data(ctx: &ImageCtx, req: &Req, body: Body) -> ApiResult<Resp> {
    crate::data::require_octet_stream(req)?;
    let image = find(ctx, req)?;
    if !may_modify(req, image.owner.as_deref()) {
        return Err(ApiError::forbidden("You are not authorized to complete modify_image action."));
    }
    let id = image.id;
    ctx.core.write(|w| {
        plan_image_status(w, &id, "queued", "uploading", berth_core::now()).map(|set| (set, ())).map_err(api::refused)
    })?;
    let declared = req.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let size = match ctx.store.receive(&id, Slot::Staged, body_stream(body), declared).await {
        Ok((size, _)) => size,
        Err(err) => {
            go_back(ctx, &id);
            return Err(err);
        }
    };
    // Glance shows the staged size while the image waits for its import.
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let recorded = ctx.core.write(|w| {
        let current = w.compute.images.get(&id).filter(|i| i.status == "uploading").cloned();
        let Some(mut image) = current else {
            return Ok((berth_compute_model::WorldChangeSet::new(), false));
        };
        image.size = Some(size);
        let set = berth_compute_model::plan::plan_put_image(w, image).map_err(api::refused)?;
        Ok::<_, ApiError>((set, true))
    })?;
    if !recorded {
        // Deleted (or given back) while staging: the data goes too.
        ctx.store.remove_slot(Slot::Staged, &id).await;
        return Err(ApiError::conflict(format!("The image {id} is no longer waiting for staged data.")));
    }
    Ok(Resp::no_content())
}

/// `POST /image/v2/images/{id}/import` (`{"method": {"name": ...}}`).
pub fn import(ctx: Arc<ImageCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move { import_data(&ctx, &req).await })
}

fn method(req: &Req) -> ApiResult<String> {
    let body: Value =
        serde_json::from_slice(&req.body).map_err(|_| ApiError::bad_request("Malformed JSON in request body."))?;
    let method =
        body.get("method").ok_or_else(|| ApiError::bad_request("Import request requires a 'method' field."))?;
    let name = method
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("Import request requires a 'name' field."))?;
    if !IMPORT_METHODS.contains(&name) {
        return Err(ApiError::bad_request(format!("Unknown import method name '{name}'.")));
    }
    Ok(name.to_owned())
}

async fn import_data(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let _ = method(req)?;
    let image = find(ctx, req)?;
    if !may_modify(req, image.owner.as_deref()) {
        return Err(ApiError::forbidden("You are not authorized to complete modify_image action."));
    }
    let id = image.id;
    ctx.core.write(|w| {
        let current =
            w.compute.images.get(&id).ok_or_else(|| ApiError::not_found(format!("No image found with ID {id}")))?;
        if current.status == "active" {
            return Err(ApiError::conflict("Image with status active cannot be target for import"));
        }
        if current.status != "uploading" {
            return Err(ApiError::conflict("Image needs to be staged before 'glance-direct' method can be used"));
        }
        if current.container_format.is_none() {
            return Err(ApiError::conflict("'container_format' needs to be set before import"));
        }
        if current.disk_format.is_none() {
            return Err(ApiError::conflict("'disk_format' needs to be set before import"));
        }
        let set = plan_image_status(w, &id, "uploading", "importing", berth_core::now()).map_err(api::refused)?;
        Ok((set, ()))
    })?;
    match finish_import(ctx, &id).await {
        Ok(()) => Ok(Resp::stream(StatusCode::ACCEPTED, Body::empty())),
        Err(err) => {
            ctx.store.remove_slot(Slot::Staged, &id).await;
            ctx.store.remove_slot(Slot::Data, &id).await;
            go_back(ctx, &id);
            Err(err)
        }
    }
}

/// Hash the staged data, move it into place, and make the image `active`.
async fn finish_import(ctx: &ImageCtx, id: &Uuid) -> ApiResult<()> {
    let (size, hashes) = ctx.store.import_staged(id).await?;
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    ctx.core.write(|w| {
        ctx.store.quotas().check_size(w, id, u64::try_from(size).unwrap_or(0))?;
        plan_finish_image_upload(w, id, size, hashes, berth_core::now()).map(|set| (set, ())).map_err(api::refused)
    })
}

/// `POST /image/v2/tasks`: Glance's legacy task API (admin only, its
/// `tasks_api_access` default). Its one use is an `import` task that
/// downloads `import_from`, which berth's import filter never passes: there
/// is no outbound network, so every task is refused as Glance refuses a
/// URI its filter rejects.
pub fn create_task(_: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    if !is_admin(req) {
        return Err(ApiError::forbidden("You are not authorized to complete tasks_api_access action."));
    }
    let body: Value =
        serde_json::from_slice(&req.body).map_err(|_| ApiError::bad_request("Malformed JSON in request body."))?;
    for param in ["type", "input"] {
        if body.get(param).is_none() {
            return Err(ApiError::bad_request(format!("Task '{param}' is required")));
        }
    }
    let source = body["input"].get("import_from").map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    Err(ApiError::bad_request(format!(
        "URI for legacy import task does not pass filtering: {}",
        source.as_deref().unwrap_or("None")
    )))
}
