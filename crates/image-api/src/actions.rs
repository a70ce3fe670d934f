//! Image tags (`PUT`/`DELETE /v2/images/{id}/tags/{tag}`) and the
//! deactivate/reactivate actions (`POST /v2/images/{id}/actions/...`,
//! the owner's or an admin's, Glance's default policy). A deactivated
//! image keeps its data, but only an admin may download it
//! ([`crate::data`]) and the compute API refuses to boot it.
//!
//! Each is one planned write against the image as it is then: a tag
//! added concurrently with another is never lost, and the status a
//! deactivation leaves is the one it checked.

use berth_compute_model::plan::plan_put_image;
use berth_compute_model::Image;
use berth_http::{ApiError, ApiResult, Req, Resp};
use uuid::Uuid;

use berth_compute_api::api::{self, is_admin};

use crate::handlers::{check_property_quota, find};
use crate::ImageCtx;

/// Change one image in one planned write (`change` returns whether it
/// changed anything; nothing is written when it did not).
fn write_image(ctx: &ImageCtx, id: Uuid, change: impl FnOnce(&mut Image) -> ApiResult<bool> + Send) -> ApiResult<()> {
    ctx.core.write(|w| {
        let mut image =
            w.compute.images.get(&id).cloned().ok_or_else(|| ApiError::not_found(format!("Image {id} not found.")))?;
        if !change(&mut image)? {
            return Ok((berth_compute_model::WorldChangeSet::new(), ()));
        }
        image.updated_at = berth_core::now();
        let set = plan_put_image(w, image).map_err(api::refused)?;
        Ok((set, ()))
    })
}

fn may_modify(req: &Req, image: &Image) -> bool {
    is_admin(req) || (image.owner.is_some() && image.owner.as_deref() == req.auth.project_id.as_deref())
}

/// `PUT /image/v2/images/{id}/tags/{tag}`.
pub fn add_tag(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let id = image.id;
    if !may_modify(req, &image) {
        return Err(ApiError::forbidden(format!("Not allowed to update tags for image {id}.")));
    }
    let tag = req.param(1).to_owned();
    if tag.chars().count() > 255 {
        return Err(ApiError::bad_request(format!(
            "Could not update image: Provided object does not match schema 'image': '{tag}' is too long"
        )));
    }
    write_image(ctx, id, |image| {
        if image.tags.contains(&tag) {
            return Ok(false);
        }
        image.tags.push(tag);
        check_property_quota(image)?;
        Ok(true)
    })?;
    Ok(Resp::no_content())
}

/// `DELETE /image/v2/images/{id}/tags/{tag}`.
pub fn delete_tag(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    let id = image.id;
    if !may_modify(req, &image) {
        return Err(ApiError::forbidden(format!("Not allowed to delete tags for image {id}.")));
    }
    let tag = req.param(1).to_owned();
    write_image(ctx, id, |image| {
        let before = image.tags.len();
        image.tags.retain(|t| *t != tag);
        if image.tags.len() == before {
            return Err(ApiError::not_found("The resource could not be found."));
        }
        Ok(true)
    })?;
    Ok(Resp::no_content())
}

/// `POST /image/v2/images/{id}/actions/deactivate`: `active →
/// deactivated` (a deactivated image stays so).
pub fn deactivate(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    transition(ctx, req, "deactivate", "active", "deactivated")
}

/// `POST /image/v2/images/{id}/actions/reactivate`: `deactivated →
/// active` (an active image stays so).
pub fn reactivate(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    transition(ctx, req, "reactivate", "deactivated", "active")
}

fn transition(ctx: &ImageCtx, req: &Req, action: &str, from: &'static str, to: &'static str) -> ApiResult<Resp> {
    let image = find(ctx, req)?;
    // Glance's default policy: an admin, or a member of the owning project.
    if !may_modify(req, &image) {
        return Err(ApiError::forbidden(format!("You are not authorized to complete {action} action.")));
    }
    let action = action.to_owned();
    write_image(ctx, image.id, move |image| {
        if image.status == to {
            return Ok(false);
        }
        if image.status != from {
            return Err(ApiError::forbidden(format!("Not allowed to {action} image in status '{}'", image.status)));
        }
        image.status = to.to_owned();
        Ok(true)
    })?;
    Ok(Resp::no_content())
}
