//! Images: create or replace, delete (protected images refused), and the
//! data's status transitions (`queued → saving → active` for an upload,
//! `queued → uploading → importing → active` for an import, or back to
//! `queued`), each a compare-and-set on the image's status.

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{ComputeError, Image, ImageHashes, Timestamp, World, WorldChangeSet};

/// Create or replace an image.
pub fn plan_put_image(world: &World, image: Image) -> Result<WorldChangeSet> {
    let _ = world;
    let mut set = WorldChangeSet::new();
    set.compute(C::PutImage(image));
    Ok(set)
}

/// Delete an image (protected images are refused with 403, as Glance).
pub fn plan_delete_image(world: &World, id: &Uuid) -> Result<WorldChangeSet> {
    let image =
        world.compute.images.get(id).ok_or_else(|| ComputeError::NotFound(format!("No image found with ID {id}")))?;
    if image.protected {
        return Err(ComputeError::Forbidden(format!("Image {id} is protected and cannot be deleted.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteImage(*id));
    Ok(set)
}

fn image<'w>(world: &'w World, id: &Uuid) -> Result<&'w Image> {
    world.compute.images.get(id).ok_or_else(|| ComputeError::NotFound(format!("No image found with ID {id}")))
}

/// Glance's refusal of a status transition (`InvalidImageStatusTransition`).
fn transition_refused(from: &str, to: &str) -> ComputeError {
    ComputeError::Conflict(format!("Image status transition from {from} to {to} is not allowed"))
}

/// An upload begins: `queued → saving`. Only a `queued` image takes data,
/// so of two uploads to one image the second finds it `saving` and is
/// refused (409), as is an upload to an `active` image.
pub fn plan_begin_image_upload(world: &World, id: &Uuid, now: Timestamp) -> Result<WorldChangeSet> {
    let current = image(world, id)?;
    if current.status != "queued" {
        return Err(transition_refused(&current.status, "saving"));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutImage(Image { status: "saving".to_owned(), updated_at: now, ..current.clone() }));
    Ok(set)
}

/// A status transition checked against the status it leaves (Glance's
/// `save(image, from_state=...)`): the interoperable import's `queued →
/// uploading` (stage) and `uploading → importing` (import). Refused (409)
/// from any other status.
pub fn plan_image_status(world: &World, id: &Uuid, from: &str, to: &str, now: Timestamp) -> Result<WorldChangeSet> {
    let current = image(world, id)?;
    if current.status != from {
        return Err(transition_refused(&current.status, to));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutImage(Image { status: to.to_owned(), updated_at: now, ..current.clone() }));
    Ok(set)
}

/// An upload or import completed (its data durably in place): `saving →
/// active` (or `importing → active`) with its size and hashes. Refused if
/// the image is gone (deleted during the upload) or no longer `saving` or
/// `importing` (the sweep gave it back).
pub fn plan_finish_image_upload(
    world: &World,
    id: &Uuid,
    size: i64,
    hashes: ImageHashes,
    now: Timestamp,
) -> Result<WorldChangeSet> {
    let current = image(world, id)?;
    if current.status != "saving" && current.status != "importing" {
        return Err(transition_refused(&current.status, "active"));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutImage(Image {
        status: "active".to_owned(),
        size: Some(size),
        hashes: Some(hashes),
        updated_at: now,
        ..current.clone()
    }));
    Ok(set)
}

/// An upload, stage or import failed or was abandoned: `saving`,
/// `uploading` or `importing` back to `queued`, without data. Nothing to
/// do for an image that is gone or in another status.
pub fn plan_abort_image_upload(world: &World, id: &Uuid, now: Timestamp) -> Result<WorldChangeSet> {
    let mut set = WorldChangeSet::new();
    let unfinished = |i: &&Image| matches!(i.status.as_str(), "saving" | "uploading" | "importing");
    if let Some(current) = world.compute.images.get(id).filter(unfinished) {
        set.compute(C::PutImage(Image {
            status: "queued".to_owned(),
            size: None,
            hashes: None,
            updated_at: now,
            ..current.clone()
        }));
    }
    Ok(set)
}
