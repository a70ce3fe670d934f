//! The Glance v2 subset at `/image/v2`: list (name, visibility, status,
//! owner filters; limit/marker), show, create (`queued`), delete (with its
//! data), and the schemas clients fetch; image data is [`crate::data`]'s.
//! Images carry the properties the scheduler reads (`trait:*`, `hw_*`,
//! `img_*`, `disk_format`).

use axum::http::StatusCode;
use berth_compute_model::plan::{plan_delete_image, plan_put_image};
use berth_compute_model::Image;
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use berth_compute_api::api::{self, is_admin};

use crate::views as view;
use crate::{schemas, ImageCtx};

/// Glance's `image_property_quota` default: extra properties per image.
const IMAGE_PROPERTY_QUOTA: usize = 128;

/// Glance's visibility rule ([`Image::visible_to`]) for the caller.
fn can_see(req: &Req, image: &Image) -> bool {
    image.visible_to(req.auth.project_id.as_deref(), is_admin(req))
}

/// The image the request's first path parameter names, if the caller
/// can see it (404 otherwise, as Glance hides what a caller cannot see).
pub(crate) fn find(ctx: &ImageCtx, req: &Req) -> ApiResult<Image> {
    let text = req.param(0);
    let missing = || ApiError::not_found(format!("No image found with ID {text}"));
    let id = Uuid::parse_str(text).map_err(|_| missing())?;
    let image = ctx.core.read().compute.images.get(&id).cloned().ok_or_else(missing)?;
    if !can_see(req, &image) {
        return Err(missing());
    }
    Ok(image)
}

/// `GET /image/` and `/image/versions`: Glance's version document.
pub fn versions(_: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let href = format!("{}/image/v2/", req.base_url);
    Ok(Resp::ok(json!({"versions": [
        {"id": "v2.16", "status": "CURRENT", "links": [{"rel": "self", "href": href}]},
    ]})))
}

/// `GET /image/v2/images`.
pub fn index(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let limit: usize = match req.query_one("limit") {
        None => 25,
        Some(text) => text.parse().map_err(|_| ApiError::bad_request("limit param must be an integer"))?,
    };
    let world = ctx.core.read();
    let mut images: Vec<&Image> = world
        .compute
        .images
        .values()
        .filter(|i| can_see(req, i))
        .filter(|i| req.query_one("name").is_none_or(|n| i.name.as_deref() == Some(n)))
        .filter(|i| req.query_one("visibility").is_none_or(|v| v == "all" || i.visibility == v))
        .filter(|i| req.query_one("status").is_none_or(|s| i.status == s))
        .filter(|i| req.query_one("owner").is_none_or(|o| i.owner.as_deref() == Some(o)))
        .filter(|i| {
            i.properties.get("os_hidden").is_none_or(|h| h != "true") || req.query_one("os_hidden") == Some("true")
        })
        .collect();
    // Glance's default order: created_at desc, then id.
    images.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    if let Some(marker) = req.query_one("marker") {
        let pos = images
            .iter()
            .position(|i| i.id.to_string() == marker)
            .ok_or_else(|| ApiError::bad_request(format!("Invalid marker. Image {marker} could not be found.")))?;
        images.drain(..=pos);
    }
    let more = images.len() > limit;
    images.truncate(limit);
    let page: Vec<Image> = images.into_iter().cloned().collect();
    let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let next = if more { page.last().map(|i| i.id.to_string()) } else { None };
    Ok(Resp::ok(view::list(&page, &query, next.as_deref())))
}

/// `GET /image/v2/images/{id}`.
pub fn show(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(view::image(&find(ctx, req)?)))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `POST /image/v2/images`.
pub fn create(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::body(req, &schemas::create())?;
    let obj = body.as_object().ok_or_else(|| ApiError::bad_request("Malformed request body"))?;
    for key in obj.keys() {
        if schemas::READ_ONLY_ATTRIBUTES.contains(&key.as_str()) {
            return Err(ApiError::forbidden(format!("Attribute '{key}' is read-only.")));
        }
        if schemas::RESERVED_ATTRIBUTES.contains(&key.as_str()) {
            return Err(ApiError::forbidden(format!("Attribute '{key}' is reserved.")));
        }
    }
    let visibility = obj.get("visibility").and_then(Value::as_str).unwrap_or("shared").to_owned();
    if visibility == "public" && !is_admin(req) {
        return Err(ApiError::forbidden("You are not authorized to complete publicize_image action."));
    }
    let id = match obj.get("id").and_then(Value::as_str) {
        Some(text) => Uuid::parse_str(text).map_err(|_| ApiError::bad_request(format!("Invalid image id {text}")))?,
        None => Uuid::new_v4(),
    };
    let owner = match obj.get("owner").and_then(Value::as_str) {
        Some(owner) if is_admin(req) => Some(owner.to_owned()),
        Some(_) => return Err(ApiError::forbidden("Attribute 'owner' is reserved.")),
        None => req.auth.project_id.clone(),
    };
    let now = berth_core::now();
    let base = view::BASE_ATTRIBUTES;
    let image = Image {
        id,
        name: obj.get("name").and_then(Value::as_str).map(str::to_owned),
        // Glance: `queued` until its data is uploaded (a boot refuses it).
        status: "queued".to_owned(),
        visibility,
        protected: obj.get("protected").and_then(Value::as_bool).unwrap_or(false),
        owner,
        disk_format: obj.get("disk_format").and_then(Value::as_str).map(str::to_owned),
        container_format: obj.get("container_format").and_then(Value::as_str).map(str::to_owned),
        min_disk: obj.get("min_disk").and_then(Value::as_i64).unwrap_or(0),
        min_ram: obj.get("min_ram").and_then(Value::as_i64).unwrap_or(0),
        size: None,
        hashes: None,
        tags: obj
            .get("tags")
            .and_then(Value::as_array)
            .map(|t| t.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            .unwrap_or_default(),
        properties: obj
            .iter()
            .filter(|(k, _)| !base.contains(&k.as_str()) || *k == "os_hidden")
            .map(|(k, v)| (k.clone(), text(v)))
            .collect(),
        created_at: now,
        updated_at: now,
    };
    let extra = image.properties.keys().filter(|k| *k != "os_hidden" && !k.starts_with("os_glance")).count();
    if extra > IMAGE_PROPERTY_QUOTA {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The limit has been exceeded on the number of allowed image properties. Attempted: {extra}, \
                 Maximum: {IMAGE_PROPERTY_QUOTA}"
            ),
        ));
    }
    // Glance's database holds 32-bit integers (`_validate_db_int`).
    for key in ["min_disk", "min_ram"] {
        if obj.get(key).is_some_and(|v| v.as_i64().is_none_or(|n| n > i64::from(i32::MAX))) {
            return Err(ApiError::bad_request(format!("'{key}' value out of range, must not exceed {}.", i32::MAX)));
        }
    }
    let exists = ctx.core.read().compute.images.contains_key(&id);
    if exists {
        return Err(ApiError::conflict(format!("Image with identifier {id} already exists!")));
    }
    ctx.core.write(|w| plan_put_image(w, image.clone()).map(|set| (set, ())).map_err(api::refused))?;
    let location = format!("{}/image/v2/images/{id}", req.base_url);
    Ok(Resp::json(StatusCode::CREATED, view::image(&image)).location(location))
}

/// `DELETE /image/v2/images/{id}`.
pub fn delete(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    if !is_admin(req) && image.owner.as_deref() != req.auth.project_id.as_deref() {
        return Err(ApiError::forbidden("You are not permitted to delete this image."));
    }
    ctx.core.write(|w| plan_delete_image(w, &image.id).map(|set| (set, ())).map_err(api::refused))?;
    // Deleted first, data after: a crash between leaves an orphan file
    // the sweep removes, never an image without its data.
    ctx.store.remove(&image.id);
    Ok(Resp::no_content())
}

/// `GET /image/v2/images/{id}/tasks` (Glance 2.12): the image's import
/// tasks. berth runs none (uploads and snapshots are synchronous), so the
/// list is empty, as Glance's is for an image that was never imported.
pub fn image_tasks(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    find(ctx, req)?;
    Ok(Resp::ok(json!({"tasks": []})))
}

/// `GET /image/v2/schemas/image`.
pub fn image_schema(_: &ImageCtx, _: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(view::image_schema()))
}

/// `GET /image/v2/schemas/images`.
pub fn images_schema(_: &ImageCtx, _: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(view::images_schema()))
}
