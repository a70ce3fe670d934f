//! Images: create or replace, delete (protected images refused).

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{ComputeError, Image, World, WorldChangeSet};

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
