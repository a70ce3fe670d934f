//! The Glance v2 subset at `/image/v2`: the version document and
//! discovery (`info/import`, `info/stores`), show, create (`queued`),
//! delete (with its data), and the schemas clients fetch; the listing is
//! [`crate::listing`]'s, image data [`crate::data`]'s.
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
/// Glance's `image_tag_quota` default: tags per image.
const IMAGE_TAG_QUOTA: usize = 128;
/// Glance's reserved property namespace (`os_glance_*`).
pub const RESERVED_NAMESPACE: &str = "os_glance";

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

/// The image to read (its record or its data): one the caller can see,
/// or one an agent needs for a server on its host
/// ([`agent_needs`]); 404 otherwise.
pub(crate) fn find_readable(ctx: &ImageCtx, req: &Req) -> ApiResult<Image> {
    match find(ctx, req) {
        Ok(image) => Ok(image),
        Err(err) => {
            let id = Uuid::parse_str(req.param(0)).map_err(|_| err.clone())?;
            let image = ctx.core.read().compute.images.get(&id).cloned();
            image.filter(|i| agent_needs(ctx, req, i)).ok_or(err)
        }
    }
}

/// An agent uploading a server's snapshot (`instance_uuid`) from the
/// host the server is on, as nova-compute uploads to Glance: a caller
/// with the `service` role that may speak for that host.
pub(crate) fn agent_snapshot(ctx: &ImageCtx, req: &Req, image: &Image) -> bool {
    let Some(user) = req.auth.user_id.as_deref() else { return false };
    if !req.auth.roles.iter().any(|r| r == "service") {
        return false;
    }
    let Some(instance) = image.properties.get("instance_uuid").and_then(|u| Uuid::parse_str(u).ok()) else {
        return false;
    };
    let world = ctx.core.read();
    let Some(node) = berth_compute_model::choice::host_of_instance(&world, &instance) else { return false };
    berth_compute_model::plan::check_host_owner(&world, user, [node.host.as_str()]).is_ok()
}

/// An agent reading an image a server on its host needs (the record and
/// the data), as nova-compute reads images with its service token: the
/// server's snapshot or shelve image (`instance_uuid`), or the image a
/// server on that host was booted from. Only a caller with the `service`
/// role that may speak for the host.
pub(crate) fn agent_needs(ctx: &ImageCtx, req: &Req, image: &Image) -> bool {
    if agent_snapshot(ctx, req, image) {
        return true;
    }
    let Some(user) = req.auth.user_id.as_deref() else { return false };
    if !req.auth.roles.iter().any(|r| r == "service") {
        return false;
    }
    let world = ctx.core.read();
    world.compute.request_specs.iter().filter(|(_, spec)| spec.image.as_ref().is_some_and(|i| i.id == image.id)).any(
        |(instance, _)| {
            berth_compute_model::choice::host_of_instance(&world, instance).is_some_and(|node| {
                berth_compute_model::plan::check_host_owner(&world, user, [node.host.as_str()]).is_ok()
            })
        },
    )
}

/// Glance's version list (without the image cache, 2.17 is `CURRENT`).
const VERSIONS: &[(&str, &str)] = &[
    ("2.15", "SUPPORTED"),
    ("2.9", "SUPPORTED"),
    ("2.17", "CURRENT"),
    ("2.7", "SUPPORTED"),
    ("2.6", "SUPPORTED"),
    ("2.5", "SUPPORTED"),
    ("2.4", "SUPPORTED"),
    ("2.3", "SUPPORTED"),
    ("2.2", "SUPPORTED"),
    ("2.1", "SUPPORTED"),
    ("2.0", "SUPPORTED"),
];

fn version_list(req: &Req) -> Value {
    let href = format!("{}/image/v2/", req.base_url);
    let versions: Vec<Value> = VERSIONS
        .iter()
        .map(|(id, status)| json!({"id": format!("v{id}"), "status": status, "links": [{"rel": "self", "href": href}]}))
        .collect();
    json!({ "versions": versions })
}

/// `GET /image/`: Glance's version document, `300 Multiple Choices` (as
/// Glance answers a request that names no version).
pub fn versions(_: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::json(StatusCode::MULTIPLE_CHOICES, version_list(req)))
}

/// `GET /image/versions`: the same list, `200` (Glance's explicit request).
pub fn versions_explicit(_: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(version_list(req)))
}

/// The import methods berth takes (Glance's `enabled_import_methods`):
/// `web-download` needs outbound network and `copy-image` several stores.
pub const IMPORT_METHODS: &[&str] = &["glance-direct"];

/// `GET /image/v2/info/import`: the import methods berth takes.
pub fn info_import(_: &ImageCtx, _: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(json!({"import-methods": {
        "description": "Import methods available.",
        "type": "array",
        "value": IMPORT_METHODS,
    }})))
}

/// `GET /image/v2/info/stores`: Glance's answer without multiple stores
/// (`enabled_backends`): berth has one store.
pub fn info_stores(_: &ImageCtx, _: &Req) -> ApiResult<Resp> {
    Err(ApiError::not_found("Multi backend is not supported at this site."))
}

/// Tags as Glance keeps them: each once, in the order first given.
pub(crate) fn unique_tags(value: Option<&Value>) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for tag in value.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_owned());
        }
    }
    tags
}

/// Glance's `image_property_quota` and `image_tag_quota` (413 past them).
pub(crate) fn check_property_quota(image: &Image) -> ApiResult<()> {
    let extra = image.properties.keys().filter(|k| *k != "os_hidden" && !k.starts_with(RESERVED_NAMESPACE)).count();
    if extra > IMAGE_PROPERTY_QUOTA {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The limit has been exceeded on the number of allowed image properties. Attempted: {extra}, \
                 Maximum: {IMAGE_PROPERTY_QUOTA}"
            ),
        ));
    }
    let n_tags = image.tags.len();
    if n_tags > IMAGE_TAG_QUOTA {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Image tag limit exceeded for image {}: The limit has been exceeded on the number of allowed image \
                 tags. Attempted: {n_tags}, Maximum: {IMAGE_TAG_QUOTA}:",
                image.id
            ),
        ));
    }
    Ok(())
}

/// `GET /image/v2/images/{id}`.
pub fn show(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(view::image(&find_readable(ctx, req)?)))
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
        if schemas::RESERVED_ATTRIBUTES.contains(&key.as_str()) || key.starts_with(RESERVED_NAMESPACE) {
            return Err(ApiError::forbidden(format!("Attribute '{key}' is reserved.")));
        }
        if key.len() > 255 {
            return Err(ApiError::bad_request("Custom property should not be greater than 255 characters."));
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
        tags: unique_tags(obj.get("tags")),
        properties: obj
            .iter()
            .filter(|(k, _)| !base.contains(&k.as_str()) || *k == "os_hidden")
            .map(|(k, v)| (k.clone(), text(v)))
            .collect(),
        members: Default::default(),
        created_at: now,
        updated_at: now,
    };
    check_property_quota(&image)?;
    // Glance's database holds 32-bit integers (`_validate_db_int`).
    for key in ["min_disk", "min_ram"] {
        if obj.get(key).is_some_and(|v| v.as_i64().is_none_or(|n| n > i64::from(i32::MAX))) {
            return Err(ApiError::bad_request(format!("'{key}' value out of range, must not exceed {}.", i32::MAX)));
        }
    }
    ctx.core.write(|w| {
        // Checked in the write that creates it: no two creates pass the
        // same id or the last quota slot.
        if w.compute.images.contains_key(&id) {
            return Err(ApiError::conflict(format!("Image with identifier {id} already exists!")));
        }
        ctx.store.quotas().check_count(w, image.owner.as_deref())?;
        plan_put_image(w, image.clone()).map(|set| (set, ())).map_err(api::refused)
    })?;
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
