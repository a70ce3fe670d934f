//! Deletes: what the control database forgets of a server, one still a
//! build request ([`plan_delete_build_request`]) or one removed from its
//! cell ([`plan_forget_instance`]; [`plan_forget_deleted`] for an agent's
//! report), and the quota mark while its cell deletes it
//! ([`plan_queue_for_delete`]).

use berth_model::{Change, ChangeSet};
use uuid::Uuid;

use crate::state::ComputeChange as C;
use crate::{World, WorldChangeSet};

fn forget_changes(world: &World, instance: &Uuid, set: &mut WorldChangeSet) {
    if world.compute.instance_mappings.contains_key(instance) {
        set.compute(C::DeleteInstanceMapping(*instance));
    }
    if world.compute.request_specs.contains_key(instance) {
        set.compute(C::DeleteRequestSpec(*instance));
    }
    if world.compute.build_requests.contains_key(instance) {
        set.compute(C::DeleteBuildRequest(*instance));
    }
    if let Some(group) = world.compute.group_of_instance.get(instance).and_then(|g| world.compute.server_groups.get(g))
    {
        let mut group = group.clone();
        group.members.retain(|m| m != instance);
        set.compute(C::PutServerGroup(group));
    }
    set.extend(crate::rehome::plan_drop_shelve_snapshot(world, instance));
    // A snapshot its host never finished (the server was deleted during
    // it): the image would stay `queued` or `saving` for ever.
    for image in super::snapshots::pending_snapshot_ids(world, instance) {
        set.compute(C::DeleteImage(image));
    }
}

/// Delete an instance that is still only a build request. Returns `false`
/// (and no changes) when the build request is gone: the instance has been
/// scheduled (or buried) meanwhile and must be deleted from its cell.
pub fn plan_delete_build_request(world: &World, instance: &Uuid) -> (WorldChangeSet, bool) {
    let mut set = WorldChangeSet::new();
    if !world.compute.build_requests.contains_key(instance) {
        return (set, false);
    }
    forget_changes(world, instance, &mut set);
    (set, true)
}

/// Forget an instance that has been removed from its cell: its placement
/// allocations, mapping, request spec and group membership go.
pub fn plan_forget_instance(world: &World, instance: &Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    if let Some(consumer) = world.placement.consumers.get(instance) {
        set.placement(ChangeSet {
            changes: vec![Change::DeleteConsumer { uuid: *instance, expected_generation: consumer.row.generation }],
        });
    }
    forget_changes(world, instance, &mut set);
    set
}

/// The control half of an agent's `deleted` report, decided and made in
/// one write: only while the instance's mapping is queued for delete (the
/// API accepted the delete and the row went `deleting`) are its
/// allocations, mapping, request spec, group membership, shelve
/// snapshot and unfinished snapshot images forgotten, together with the migration consumers of its open
/// moves (`migrations`). Otherwise nothing changes and the answer is
/// `false`: a report for a server nobody deleted takes nothing away.
pub fn plan_forget_deleted(world: &World, instance: &Uuid, migrations: &[Uuid]) -> (WorldChangeSet, bool) {
    if !world.compute.instance_mappings.get(instance).is_some_and(|m| m.queued_for_delete) {
        return (WorldChangeSet::new(), false);
    }
    let mut set = WorldChangeSet::new();
    for migration in migrations {
        set.extend(crate::moves::plan_forget_migration(world, migration));
    }
    set.extend(plan_forget_instance(world, instance));
    (set, true)
}

/// Mark an instance mapping queued for delete (no longer counted for
/// quota) while its cell deletes it.
pub fn plan_queue_for_delete(world: &World, instance: &Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    if let Some(mapping) = world.compute.instance_mappings.get(instance) {
        if !mapping.queued_for_delete {
            let mut mapping = mapping.clone();
            mapping.queued_for_delete = true;
            set.compute(C::PutInstanceMapping(mapping));
        }
    }
    set
}
