//! The image proxy (`/images`, Nova's `images` and `image-metadata`
//! APIs, removed at 2.36): list, detail, show and delete images, and read
//! and write an image's metadata (its extra properties), answered from
//! berth's own image state as Nova answers from Glance. No policy rule
//! guards them (Nova has none); Glance's rules apply: a caller sees what
//! `Image::visible_to` lets them see (404 otherwise), and only the owner
//! or an admin deletes an image or changes its properties (403).

use std::collections::BTreeMap;

use berth_compute_model::plan::{plan_delete_image, plan_put_image};
use berth_compute_model::quota::effective_limit;
use berth_compute_model::{ComputeError, Image};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::api::{self, is_admin, ComputeCtx};
use crate::schemas;
use crate::views::{self, images as view};

fn not_found() -> ApiError {
    ApiError::not_found("Image not found.")
}

/// The image service's root, for the `alternate` links.
fn image_base(req: &Req) -> String {
    format!("{}/image", req.base_url)
}

/// The image the first path parameter names, if the caller may see it.
fn find(ctx: &ComputeCtx, req: &Req) -> ApiResult<Image> {
    let id = Uuid::parse_str(req.param(0)).map_err(|_| not_found())?;
    let image = ctx.core.read().compute.images.get(&id).cloned().ok_or_else(not_found)?;
    if !image.visible_to(req.auth.project_id.as_deref(), is_admin(req)) {
        return Err(not_found());
    }
    Ok(image)
}

/// Glance's `modify_image`/`delete_image` rule: the owner or an admin.
fn may_change(req: &Req, image: &Image) -> bool {
    is_admin(req) || (image.owner.is_some() && image.owner.as_deref() == req.auth.project_id.as_deref())
}

/// What `GET /images[/detail]` asks for: Nova's `SUPPORTED_FILTERS`
/// (and `property-*`), applied as Glance applies them.
fn matches(req: &Req, image: &Image) -> ApiResult<bool> {
    for (name, value) in &req.query {
        let keep = match name.as_str() {
            "name" => image.name.as_deref() == Some(value.as_str()),
            // The image API takes statuses in lower case.
            "status" => image.status == value.to_ascii_lowercase(),
            "changes-since" => {
                let since = api::parse_time(value)
                    .ok_or_else(|| ApiError::bad_request(format!("Invalid changes-since value: {value}")))?;
                image.updated_at >= since
            }
            // A server's id or its link.
            "server" => {
                let id = value.trim_end_matches('/').rsplit('/').next().unwrap_or(value);
                image.properties.get("instance_uuid").map(String::as_str) == Some(id)
            }
            "type" => image.properties.get("image_type") == Some(value),
            "minRam" | "minDisk" => {
                let n: i64 = value
                    .trim()
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("Invalid {name} filter value: {value}")))?;
                if name == "minRam" {
                    image.min_ram >= n
                } else {
                    image.min_disk >= n
                }
            }
            other => match other.strip_prefix("property-") {
                Some(key) => image.properties.get(key) == Some(value),
                None => true,
            },
        };
        if !keep {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The page of images the caller may see that match the query, in
/// Glance's order (newest first), and whether it needs a `next` link.
fn page(ctx: &ComputeCtx, req: &Req) -> ApiResult<(Vec<Image>, bool)> {
    let limit = match req.query_one("limit") {
        None => None,
        Some(text) => Some(
            text.trim()
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("limit param must be an integer: {text}")))?,
        ),
    };
    let world = ctx.core.read();
    let (project, admin) = (req.auth.project_id.as_deref(), is_admin(req));
    let mut images = Vec::new();
    for image in world.compute.images.values() {
        if image.visible_to(project, admin) && matches(req, image)? {
            images.push(image);
        }
    }
    images.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    if let Some(marker) = req.query_one("marker") {
        let at = images
            .iter()
            .position(|i| i.id.to_string() == marker)
            .ok_or_else(|| ApiError::bad_request(format!("marker [{marker}] not found")))?;
        images.drain(..=at);
    }
    if let Some(limit) = limit {
        images.truncate(limit.min(ctx.max_limit));
    }
    // Nova's `_get_collection_links`: a next link when a limit was given
    // and the page is full.
    let full = limit.is_some_and(|n| n > 0 && images.len() == n);
    Ok((images.into_iter().cloned().collect(), full))
}

fn listing(ctx: &ComputeCtx, req: &Req, detail: bool) -> ApiResult<Resp> {
    let (images, full) = page(ctx, req)?;
    let links = ctx.links(req);
    let base = image_base(req);
    let items: Vec<Value> = images
        .iter()
        .map(|i| if detail { view::detail(&links, &base, i) } else { view::basic(&links, &base, i) })
        .collect();
    let collection = if detail { "images/detail" } else { "images" };
    let next = match (full, images.last()) {
        (true, Some(last)) => {
            let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            Some(links.next(collection, &query, &last.id.to_string()))
        }
        _ => None,
    };
    Ok(Resp::ok(views::list_body("images", items, "images_links", next)))
}

/// `GET /images`.
pub fn index(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    listing(ctx, req, false)
}

/// `GET /images/detail`.
pub fn detail(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    listing(ctx, req, true)
}

/// `GET /images/{id}`.
pub fn show(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    Ok(Resp::ok(json!({"image": view::detail(&ctx.links(req), &image_base(req), &image)})))
}

/// `DELETE /images/{id}` (204). The image's data goes with it (the
/// runtime's image data hook, or the image store's sweep).
pub fn delete(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    if !may_change(req, &image) {
        return Err(ApiError::forbidden("You are not allowed to delete the image."));
    }
    ctx.core.write(|w| match plan_delete_image(w, &image.id) {
        Ok(set) => Ok((set, ())),
        Err(ComputeError::NotFound(_)) => Err(not_found()),
        Err(ComputeError::Forbidden(_)) => Err(ApiError::forbidden("You are not allowed to delete the image.")),
        Err(other) => Err(api::refused(other)),
    })?;
    ctx.compute.remove_image_data(&image.id);
    Ok(Resp::no_content())
}

fn metadata_json(metadata: &BTreeMap<String, String>) -> Value {
    Value::Object(metadata.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// The image's metadata as the proxy shows it.
fn properties(image: &Image) -> BTreeMap<String, String> {
    view::metadata(image).into_iter().map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned())).collect()
}

/// Nova's `check_img_metadata_properties_quota`: at most
/// `metadata_items` properties (403).
pub(crate) fn check_quota(world: &berth_compute_model::World, req: &Req, n: usize) -> ApiResult<()> {
    let limit = effective_limit(world, &api::project(req), Some(&api::user(req)), "metadata_items");
    if limit >= 0 && n as i64 > limit {
        return Err(ApiError::forbidden("Image metadata limit exceeded"));
    }
    Ok(())
}

/// Change the image's metadata with `change` in one planned write on the
/// current image (a concurrent change is never lost); answers what
/// `change` returns.
fn change_metadata(
    ctx: &ComputeCtx,
    req: &Req,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> ApiResult<Value> + Send,
) -> ApiResult<Value> {
    let id = find(ctx, req)?.id;
    let now = berth_core::now();
    ctx.core.write(|w| {
        let current = w.compute.images.get(&id).ok_or_else(not_found)?;
        if !current.visible_to(req.auth.project_id.as_deref(), is_admin(req)) {
            return Err(not_found());
        }
        if !may_change(req, current) {
            return Err(ApiError::forbidden(format!("Not authorized for image {id}.")));
        }
        let mut metadata = properties(current);
        let answer = change(&mut metadata)?;
        check_quota(w, req, metadata.len())?;
        let mut image = current.clone();
        // `os_hidden` is a Glance attribute, not metadata: it stays.
        image.properties.retain(|k, _| k == "os_hidden");
        image.properties.extend(metadata);
        image.updated_at = now;
        let set = plan_put_image(w, image).map_err(api::refused)?;
        Ok((set, answer))
    })
}

/// `GET /images/{id}/metadata`.
pub fn list_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    Ok(Resp::ok(json!({"metadata": metadata_json(&properties(&image))})))
}

/// `GET /images/{id}/metadata/{key}`.
pub fn show_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let key = req.param(1);
    match properties(&image).get(key) {
        Some(value) => Ok(Resp::ok(json!({"meta": {key: value}}))),
        None => Err(ApiError::not_found("The resource could not be found.")),
    }
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default()
}

/// `POST /images/{id}/metadata`: merge.
pub fn create_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::body(req, &schemas::servers::metadata_body("metadata", false))?;
    let given = string_map(&body["metadata"]);
    let merged = change_metadata(ctx, req, move |metadata| {
        metadata.extend(given);
        Ok(metadata_json(metadata))
    })?;
    Ok(Resp::ok(json!({"metadata": merged})))
}

/// `PUT /images/{id}/metadata`: replace all.
pub fn update_all_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::body(req, &schemas::servers::metadata_body("metadata", false))?;
    let given = string_map(&body["metadata"]);
    let answer = metadata_json(&given);
    change_metadata(ctx, req, move |metadata| {
        *metadata = given;
        Ok(Value::Null)
    })?;
    Ok(Resp::ok(json!({"metadata": answer})))
}

/// `PUT /images/{id}/metadata/{key}`.
pub fn update_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::body(req, &schemas::servers::metadata_body("meta", true))?;
    let key = req.param(1).to_owned();
    let given = string_map(&body["meta"]);
    let Some(value) = given.get(&key).cloned() else {
        return Err(ApiError::bad_request("Request body and URI mismatch"));
    };
    let answer = json!({"meta": {key.clone(): value.clone()}});
    change_metadata(ctx, req, move |metadata| {
        metadata.insert(key, value);
        Ok(Value::Null)
    })?;
    Ok(Resp::ok(answer))
}

/// `DELETE /images/{id}/metadata/{key}` (204).
pub fn delete_metadata(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let key = req.param(1).to_owned();
    change_metadata(ctx, req, move |metadata| match metadata.remove(&key) {
        Some(_) => Ok(Value::Null),
        None => Err(ApiError::not_found("Invalid metadata key")),
    })?;
    Ok(Resp::no_content())
}
