//! Images: create or replace, delete (protected images refused), and the
//! upload's status transitions (`queued → saving → active`, or back to
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

/// An upload completed (its data durably in place): `saving → active`
/// with its size and hashes. Refused if the image is gone (deleted during
/// the upload) or no longer `saving` (the sweep gave it back).
pub fn plan_finish_image_upload(
    world: &World,
    id: &Uuid,
    size: i64,
    hashes: ImageHashes,
    now: Timestamp,
) -> Result<WorldChangeSet> {
    let current = image(world, id)?;
    if current.status != "saving" {
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

/// An upload failed or was abandoned: `saving → queued`, without data.
/// Nothing to do for an image that is gone or not `saving`.
pub fn plan_abort_image_upload(world: &World, id: &Uuid, now: Timestamp) -> Result<WorldChangeSet> {
    let mut set = WorldChangeSet::new();
    if let Some(current) = world.compute.images.get(id).filter(|i| i.status == "saving") {
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
