//! Server groups: create (under the `server_groups` quota), delete.
//! Membership is written by admission and the deletes.

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{quota, ComputeError, ServerGroup, World, WorldChangeSet};

/// Create a server group (the `server_groups` quota is checked here).
pub fn plan_create_server_group(world: &World, group: ServerGroup) -> Result<WorldChangeSet> {
    quota::check_server_groups(world, &group.project_id, &group.user_id)?;
    let mut set = WorldChangeSet::new();
    set.compute(C::PutServerGroup(group));
    Ok(set)
}

/// Delete a server group.
pub fn plan_delete_server_group(world: &World, id: &Uuid) -> Result<WorldChangeSet> {
    if !world.compute.server_groups.contains_key(id) {
        return Err(ComputeError::NotFound(format!("Instance group {id} could not be found.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteServerGroup(*id));
    Ok(set)
}
