//! Image members (`/v2/images/{id}/members[/{member}]`): the owner shares
//! a `shared` image with other projects, each member accepts or rejects
//! it, and the owner removes members. A member sees the image whatever
//! its answer ([`Image::visible_to`]); it is listed by default only once
//! accepted ([`crate::listing`]).
//!
//! Who may do what is Glance's (legacy) rule: the owner (or an admin)
//! adds and removes members, only the member itself (or an admin)
//! changes its status; members exist only on `shared` images (403).
//! Each change is one planned write against the image as it is then.

use axum::http::StatusCode;
use berth_compute_model::plan::plan_put_image;
use berth_compute_model::{Image, ImageMember};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use berth_compute_api::api::{self, is_admin};
use berth_compute_api::views::isotime;

use crate::handlers::find;
use crate::ImageCtx;

/// Glance's `image_member_quota` default: members per image.
const IMAGE_MEMBER_QUOTA: usize = 128;

const STATUSES: &[&str] = &["pending", "accepted", "rejected"];

/// One member as Glance shows it.
pub fn member_view(image_id: &Uuid, project: &str, member: &ImageMember) -> Value {
    json!({
        "member_id": project,
        "image_id": image_id.to_string(),
        "status": member.status,
        "created_at": isotime(member.created_at),
        "updated_at": isotime(member.updated_at),
        "schema": "/v2/schemas/member",
    })
}

fn is_owner(req: &Req, image: &Image) -> bool {
    image.owner.is_some() && image.owner.as_deref() == req.auth.project_id.as_deref()
}

fn only_shared(image: &Image) -> ApiResult<()> {
    if image.visibility != "shared" {
        return Err(ApiError::forbidden("Only shared images have members."));
    }
    Ok(())
}

fn body(req: &Req) -> ApiResult<serde_json::Map<String, Value>> {
    if req.body.is_empty() {
        return Err(ApiError::bad_request("Body expected in request."));
    }
    let value: Value =
        serde_json::from_slice(&req.body).map_err(|_| ApiError::bad_request("Malformed JSON in request body."))?;
    if berth_http::request::find_nul(&value).is_some() {
        return Err(ApiError::bad_request(berth_http::request::NUL_REFUSED));
    }
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request("Malformed JSON in request body.")),
    }
}

/// Change one image's members in one planned write: `change` gets the
/// image as it is now and returns the value to answer with.
fn write_members<T: Send>(
    ctx: &ImageCtx,
    id: Uuid,
    change: impl FnOnce(&mut Image) -> ApiResult<T> + Send,
) -> ApiResult<T> {
    ctx.core.write(|w| {
        let mut image =
            w.compute.images.get(&id).cloned().ok_or_else(|| ApiError::not_found(format!("Image {id} not found.")))?;
        let answer = change(&mut image)?;
        let set = plan_put_image(w, image).map_err(api::refused)?;
        Ok((set, answer))
    })
}

/// `POST /image/v2/images/{id}/members` (`{"member": "<project>"}`).
pub fn create(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let id = image.id;
    let not_allowed = || ApiError::forbidden(format!("Not allowed to create members for image {id}."));
    only_shared(&image).map_err(|_| not_allowed())?;
    if !is_admin(req) && !is_owner(req, &image) {
        return Err(not_allowed());
    }
    let body = body(req)?;
    let member = match body.get("member") {
        None => return Err(ApiError::bad_request("Member to be added not specified")),
        Some(Value::String(m)) if m.is_empty() => return Err(ApiError::bad_request("Member can't be empty")),
        Some(Value::String(m)) if m.len() > 255 => {
            return Err(ApiError::bad_request("Member id must not exceed 255 characters"))
        }
        Some(Value::String(m)) => m.clone(),
        Some(Value::Null) => return Err(ApiError::bad_request("Member can't be empty")),
        Some(_) => return Err(ApiError::bad_request("Expected a member in the form: {\"member\": \"image_id\"}")),
    };
    let view = write_members(ctx, id, |image| {
        only_shared(image).map_err(|_| not_allowed())?;
        if image.members.contains_key(&member) {
            return Err(ApiError::conflict(format!("Member {member} is duplicated for image {id}")));
        }
        if image.members.len() >= IMAGE_MEMBER_QUOTA {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Image member limit exceeded for image {id}: The limit has been exceeded on the number of \
                     allowed image members for this image. Attempted: {}, Maximum: {IMAGE_MEMBER_QUOTA}:",
                    image.members.len() + 1
                ),
            ));
        }
        let now = berth_core::now();
        let entry = ImageMember { status: "pending".to_owned(), created_at: now, updated_at: now };
        let view = member_view(&id, &member, &entry);
        image.members.insert(member.clone(), entry);
        Ok(view)
    })?;
    Ok(Resp::ok(view))
}

/// `PUT /image/v2/images/{id}/members/{member}` (`{"status": ...}`).
pub fn update(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let id = image.id;
    let member = req.param(1).to_owned();
    let not_allowed = || ApiError::forbidden(format!("Not allowed to update members for image {id}."));
    only_shared(&image).map_err(|_| not_allowed())?;
    if !image.members.contains_key(&member) {
        return Err(ApiError::not_found(format!("{member} not found in the member list of the image {id}.")));
    }
    if !is_admin(req) && req.auth.project_id.as_deref() != Some(member.as_str()) {
        return Err(not_allowed());
    }
    let body = body(req)?;
    let status = match body.get("status") {
        None => return Err(ApiError::bad_request("Status not specified")),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::bad_request("Expected a status in the form: {\"status\": \"status\"}")),
    };
    if !STATUSES.contains(&status.as_str()) {
        return Err(ApiError::bad_request(
            "Incorrect request: Status must be \"pending\", \"accepted\" or \"rejected\".",
        ));
    }
    let view = write_members(ctx, id, |image| {
        let entry = image
            .members
            .get_mut(&member)
            .ok_or_else(|| ApiError::not_found(format!("{member} not found in the member list of the image {id}.")))?;
        entry.status = status;
        entry.updated_at = berth_core::now();
        Ok(member_view(&id, &member, entry))
    })?;
    Ok(Resp::ok(view))
}

/// `GET /image/v2/images/{id}/members`: the owner (or an admin) sees
/// every member, a member only itself.
pub fn index(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    only_shared(&image).map_err(|e| {
        ApiError::forbidden(format!("Not allowed to list members for image {}: {}", image.id, e.detail))
    })?;
    let everyone = is_admin(req) || is_owner(req, &image);
    let members: Vec<Value> = image
        .members
        .iter()
        .filter(|(project, _)| everyone || req.auth.project_id.as_deref() == Some(project.as_str()))
        .map(|(project, m)| member_view(&image.id, project, m))
        .collect();
    Ok(Resp::ok(json!({"members": members, "schema": "/v2/schemas/members"})))
}

/// `GET /image/v2/images/{id}/members/{member}`.
pub fn show(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    only_shared(&image).map_err(|e| ApiError::not_found(e.detail))?;
    let member = req.param(1);
    let missing = || ApiError::not_found(format!("{member} not found in the member list of the image {}.", image.id));
    let allowed = is_admin(req) || is_owner(req, &image) || req.auth.project_id.as_deref() == Some(member);
    if !allowed {
        return Err(missing());
    }
    let entry = image.members.get(member).ok_or_else(missing)?;
    Ok(Resp::ok(member_view(&image.id, member, entry)))
}

/// `DELETE /image/v2/images/{id}/members/{member}`.
pub fn delete(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let id = image.id;
    let member = req.param(1).to_owned();
    let not_allowed = || ApiError::forbidden(format!("Not allowed to delete members for image {id}."));
    only_shared(&image).map_err(|_| not_allowed())?;
    if !is_admin(req) && !is_owner(req, &image) {
        return Err(not_allowed());
    }
    write_members(ctx, id, |image| {
        image
            .members
            .remove(&member)
            .map(|_| ())
            .ok_or_else(|| ApiError::not_found(format!("{member} not found in the member list of the image {id}.")))
    })?;
    Ok(Resp::no_content())
}

/// `GET /image/v2/schemas/member`.
pub fn member_schema() -> Value {
    let pattern = "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$";
    json!({
        "name": "member",
        "properties": {
            "member_id": {"type": "string", "description": "An identifier for the image member (tenantId)"},
            "image_id": {"type": "string", "description": "An identifier for the image", "pattern": pattern},
            "created_at": {"type": "string", "description": "Date and time of image member creation"},
            "updated_at": {"type": "string", "description": "Date and time of last modification of image member"},
            "status": {"type": "string", "description": "The status of this image member", "enum": STATUSES},
            "schema": {"readOnly": true, "type": "string"},
        },
        "additionalProperties": false,
    })
}

/// `GET /image/v2/schemas/members`.
pub fn members_schema() -> Value {
    json!({
        "name": "members",
        "properties": {
            "members": {"type": "array", "items": member_schema()},
            "first": {"type": "string"},
            "next": {"type": "string"},
            "schema": {"type": "string"},
        },
        "links": [
            {"rel": "first", "href": "{first}"},
            {"rel": "next", "href": "{next}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    })
}
