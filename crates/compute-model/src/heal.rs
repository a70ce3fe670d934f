//! The planned writes of the control plane's reconciliation (the heal,
//! `nova-manage placement heal_allocations` plus orphan clean-up), and the
//! classification they share with the scan that proposes them.
//!
//! The scan runs outside the write path on a snapshot and proposes fixes;
//! each fix is a planned write that re-checks, on the caught-up state
//! inside the write, everything the scan relied on. So a build claimed, a
//! server deleted or a move started between the scan and the write turns
//! the fix into a no-op ([`Healed::Skipped`]), never into damage.

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{AllocationMap, Change, ChangeSet, Timestamp};
use uuid::Uuid;

use crate::{World, WorldChangeSet, CONSUMER_TYPE_INSTANCE, CONSUMER_TYPE_MIGRATION};

/// What the heal makes of a placement consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerKind {
    /// An instance known to the control plane (mapped, or a build
    /// request), or a consumer with no allocations: nothing to do.
    Known,
    /// An `INSTANCE` consumer with no instance mapping and no build
    /// request: an orphan if berth created its server (its server was
    /// deleted), else another client's; only the cells know which, and the
    /// caller asks them (a cell row never goes while it has allocations).
    OrphanInstance,
    /// A `MIGRATION` consumer: an orphan unless an open migration has its
    /// uuid (the cells know; the caller checks).
    Migration,
    /// Another type or none: not the compute API's, left alone.
    Foreign,
}

/// Classify `consumer` on `world`.
pub fn consumer_kind(world: &World, consumer: &Uuid) -> ConsumerKind {
    let Some(row) = world.placement.consumers.get(consumer) else { return ConsumerKind::Known };
    if row.allocations.is_empty()
        || world.compute.instance_mappings.contains_key(consumer)
        || world.compute.build_requests.contains_key(consumer)
    {
        return ConsumerKind::Known;
    }
    match row.row.consumer_type.as_deref() {
        Some(CONSUMER_TYPE_INSTANCE) => ConsumerKind::OrphanInstance,
        Some(CONSUMER_TYPE_MIGRATION) => ConsumerKind::Migration,
        _ => ConsumerKind::Foreign,
    }
}

/// The outcome of one heal write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Healed {
    /// Written.
    Done,
    /// Nothing written: the state moved since the scan, or the fix no
    /// longer applies; why.
    Skipped(String),
}

/// Delete the allocations of the orphaned `INSTANCE` consumer `consumer`,
/// if it is still an orphan, still at `generation` (the scan's) and last
/// written at or before `cutoff` (the grace period).
pub fn plan_remove_orphan(
    world: &World,
    consumer: &Uuid,
    generation: i64,
    cutoff: Timestamp,
) -> (WorldChangeSet, Healed) {
    let mut set = WorldChangeSet::new();
    if consumer_kind(world, consumer) != ConsumerKind::OrphanInstance {
        return (set, Healed::Skipped("no longer an orphan".to_owned()));
    }
    let Some(row) = world.placement.consumers.get(consumer) else {
        return (set, Healed::Skipped("gone".to_owned()));
    };
    if row.row.generation != generation {
        return (set, Healed::Skipped("written since the scan".to_owned()));
    }
    if row.row.updated_at > cutoff {
        return (set, Healed::Skipped("written within the grace period".to_owned()));
    }
    set.placement(ChangeSet {
        changes: vec![Change::DeleteConsumer { uuid: *consumer, expected_generation: generation }],
    });
    (set, Healed::Done)
}

/// Give `instance` (mapped to `cell`, on the compute node `node`) the
/// allocations `allocations`, if its mapping still points there and is
/// not queued for delete, it still has no allocations, and they fit now
/// (placement's own check, exactly as a claim).
pub fn plan_heal_allocation(
    world: &World,
    instance: &Uuid,
    cell: &Uuid,
    node: &Uuid,
    allocations: &AllocationMap,
    now: Timestamp,
) -> (WorldChangeSet, Healed) {
    let mut set = WorldChangeSet::new();
    let Some(mapping) = world.compute.instance_mappings.get(instance) else {
        return (set, Healed::Skipped("instance mapping gone (deleted)".to_owned()));
    };
    if mapping.cell != Some(*cell) || mapping.queued_for_delete {
        return (set, Healed::Skipped("instance moved or is being deleted".to_owned()));
    }
    if world.compute.build_requests.contains_key(instance) {
        return (set, Healed::Skipped("still a build request".to_owned()));
    }
    if !world.compute.compute_nodes.contains_key(node) {
        return (set, Healed::Skipped(format!("compute node {node} gone")));
    }
    let generation = match world.placement.consumers.get(instance) {
        None => ConsumerGeneration::New,
        Some(consumer) if consumer.allocations.is_empty() => ConsumerGeneration::Is(consumer.row.generation),
        Some(_) => return (set, Healed::Skipped("has allocations again".to_owned())),
    };
    let request = ConsumerAllocations {
        consumer: *instance,
        project_id: mapping.project_id.clone(),
        user_id: mapping.user_id.clone(),
        generation,
        consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
        allocations: allocations.clone(),
    };
    match plan_replace_allocations(&world.placement, &[request], now) {
        Ok(placement) => {
            set.placement(placement);
            (set, Healed::Done)
        }
        Err(err) => (set, Healed::Skipped(format!("does not fit on its host: {err:?}"))),
    }
}
