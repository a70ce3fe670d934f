//! Cold moves (resize and migrate) with Nova's allocation model: the
//! control writes of a move, each one planned write.
//!
//! - [`plan_move_claim`]: the instance's current (source) allocations move
//!   to a new *migration consumer* (uuid = migration uuid, consumer type
//!   `MIGRATION`) and the instance consumer claims the destination (the new
//!   flavor's amounts), the resize's quota delta is checked against counted
//!   usage, and the request spec takes the new flavor — all in one write.
//!   Counted usage follows `INSTANCE` consumers only, so a server in
//!   `VERIFY_RESIZE` is charged for its new flavor once.
//! - [`plan_confirm_move`]: the migration consumer goes (one write).
//! - [`plan_revert_move`]: the instance consumer gets back exactly the
//!   migration consumer's allocations, the migration consumer goes and the
//!   request spec takes the old flavor back (one write). It cannot fail
//!   for capacity: the migration consumer held those resources.
//!
//! The migration consumer is written once, by the claim, with generation
//! [`MIGRATION_CONSUMER_GENERATION`]; confirm and revert expect exactly
//! that generation, so if anything else wrote to it meanwhile (a `PUT
//! /allocations/{migration}`, a confirm or revert that won a race) they
//! refuse with a conflict instead of overwriting.

use std::collections::HashMap;

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{AllocationMap, Change, ChangeSet};
use uuid::Uuid;

use crate::choice::{fits, HostChoice};
use crate::quota::{effective_limit, usage, user_override};
use crate::state::ComputeChange as C;
use crate::{
    ComputeError, ComputeNodeRef, Flavor, Timestamp, World, WorldChangeSet, CONSUMER_TYPE_INSTANCE,
    CONSUMER_TYPE_MIGRATION,
};

type Result<T> = std::result::Result<T, ComputeError>;

/// The generation the claim gives the migration consumer (placement's
/// generation of a new consumer). Confirm and revert expect it.
pub const MIGRATION_CONSUMER_GENERATION: i64 = 1;

/// A move to claim.
#[derive(Debug, Clone)]
pub struct MoveClaim {
    /// Instance moved.
    pub instance: Uuid,
    /// The migration (and its placement consumer).
    pub migration: Uuid,
    /// Flavor now.
    pub old_flavor: Flavor,
    /// Flavor after the move (the same for a migration).
    pub new_flavor: Flavor,
    /// The scheduler's choices, best first.
    pub choices: Vec<HostChoice>,
    /// The instance's cell: a cold move stays in its cell.
    pub cell: Uuid,
    /// The move's secret for the agents' disk transfer, recorded in the
    /// request spec with the claim (`None`: keep the one it has).
    pub token: Option<String>,
}

/// The outcome of a move claim.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveClaimed {
    /// Claimed on this destination.
    Claimed(ComputeNodeRef),
    /// No choice fits anymore (nothing written): Nova's `NoValidHost`.
    NoRoom,
}

/// An exceeded resource: name, requested delta, used, limit.
type Over<'a> = (&'a str, i64, i64, i64);

/// The resize's quota check (Nova's `_check_quota_for_upsize`): only the
/// increase of cores and RAM counts, against counted usage, with Nova's
/// `TooManyInstances` text.
pub fn check_upsize_quota(world: &World, project: &str, user: &str, old: &Flavor, new: &Flavor) -> Result<()> {
    let deltas = [("cores", new.vcpus - old.vcpus), ("ram", new.memory_mb - old.memory_mb)];
    let per_user = ["cores", "instances", "ram"].iter().any(|r| user_override(world, project, user, r).is_some());
    let mut scopes: Vec<Option<&str>> = vec![None];
    if per_user {
        scopes.push(Some(user));
    }
    let mut overs: Vec<Over<'_>> = Vec::new();
    for (resource, delta) in deltas {
        if delta <= 0 {
            continue;
        }
        for scope in &scopes {
            let limit = effective_limit(world, project, *scope, resource);
            if limit < 0 {
                continue;
            }
            let used = usage(world, project, *scope, resource);
            if used + delta > limit {
                overs.push((resource, delta, used, limit));
                break;
            }
        }
    }
    if overs.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = overs.iter().map(|o| o.0).collect();
    let numbers = |pick: fn(&Over<'_>) -> i64| overs.iter().map(|o| pick(o).to_string()).collect::<Vec<_>>().join(", ");
    let names = names.join(", ");
    Err(ComputeError::OverQuota(format!(
        "Quota exceeded for {names}: Requested {}, but already used {} of {} {names}",
        numbers(|o| o.1),
        numbers(|o| o.2),
        numbers(|o| o.3),
    )))
}

/// Claim a move: quota for the resize's increase, then the first choice
/// (in the instance's cell, enabled, fitting on top of current usage —
/// the instance's source allocations stay taken by the migration
/// consumer) gets the instance consumer's allocations while the migration
/// consumer takes over the source's, and the request spec the new flavor.
/// One write; `NoRoom` writes nothing.
pub fn plan_move_claim(world: &World, claim: &MoveClaim, now: Timestamp) -> Result<(WorldChangeSet, MoveClaimed)> {
    let set = WorldChangeSet::new();
    let Some(consumer) = world.placement.consumers.get(&claim.instance) else {
        return Err(ComputeError::Conflict(format!("Instance {} has no allocations to move.", claim.instance)));
    };
    if consumer.allocations.is_empty() {
        return Err(ComputeError::Conflict(format!("Instance {} has no allocations to move.", claim.instance)));
    }
    if world.placement.consumers.contains_key(&claim.migration) {
        return Err(ComputeError::Conflict(format!("Migration {} is already claimed.", claim.migration)));
    }
    check_upsize_quota(world, &consumer.row.project_id, &consumer.row.user_id, &claim.old_flavor, &claim.new_flavor)?;
    let none: HashMap<(Uuid, &str), i64> = HashMap::new();
    let chosen = claim.choices.iter().find_map(|choice| {
        let node = world.compute.compute_nodes.get(&choice.root)?;
        if node.cell != claim.cell || world.compute.cells.get(&node.cell).is_none_or(|c| c.disabled) {
            return None;
        }
        fits(world, &choice.allocations, &none).then_some((choice, node))
    });
    let Some((choice, node)) = chosen else { return Ok((set, MoveClaimed::NoRoom)) };
    let requests = [
        ConsumerAllocations {
            consumer: claim.migration,
            project_id: consumer.row.project_id.clone(),
            user_id: consumer.row.user_id.clone(),
            generation: ConsumerGeneration::New,
            consumer_type: Some(CONSUMER_TYPE_MIGRATION.to_owned()),
            allocations: consumer.allocations.clone(),
        },
        ConsumerAllocations {
            consumer: claim.instance,
            project_id: consumer.row.project_id.clone(),
            user_id: consumer.row.user_id.clone(),
            generation: ConsumerGeneration::Is(consumer.row.generation),
            consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
            allocations: choice.allocations.clone(),
        },
    ];
    let placement = match plan_replace_allocations(&world.placement, &requests, now) {
        Ok(placement) => placement,
        // A capacity or constraint refusal here means the choice stopped
        // fitting in a way `fits` did not see: no valid host.
        Err(berth_model::allocations::AllocationError::InvalidInventory(_)) => {
            return Ok((set, MoveClaimed::NoRoom));
        }
        Err(err) => return Err(ComputeError::Conflict(format!("{err:?}"))),
    };
    let mut set = WorldChangeSet::new();
    set.placement(placement);
    if let Some(spec) = world.compute.request_specs.get(&claim.instance) {
        let token = claim.token.clone().or_else(|| spec.move_token.clone());
        if spec.flavor != claim.new_flavor || spec.move_token != token {
            let mut spec = spec.clone();
            spec.flavor = claim.new_flavor.clone();
            spec.move_token = token;
            set.compute(C::PutRequestSpec(spec));
        }
    }
    Ok((set, MoveClaimed::Claimed(node.clone())))
}

/// The migration consumer as the claim wrote it, or a conflict.
fn claimed_migration<'w>(world: &'w World, migration: &Uuid) -> Result<&'w AllocationMap> {
    let Some(consumer) = world.placement.consumers.get(migration) else {
        return Err(ComputeError::Conflict(format!(
            "The allocations of migration {migration} are gone: the move was confirmed or reverted concurrently."
        )));
    };
    if consumer.row.generation != MIGRATION_CONSUMER_GENERATION
        || consumer.row.consumer_type.as_deref() != Some(CONSUMER_TYPE_MIGRATION)
    {
        return Err(ComputeError::Conflict(format!(
            "The allocations of migration {migration} changed concurrently (consumer generation {}, expected {}).",
            consumer.row.generation, MIGRATION_CONSUMER_GENERATION
        )));
    }
    Ok(&consumer.allocations)
}

/// Confirm a move: the migration consumer (the source's resources) goes.
pub fn plan_confirm_move(world: &World, migration: &Uuid) -> Result<WorldChangeSet> {
    claimed_migration(world, migration)?;
    let mut set = WorldChangeSet::new();
    set.placement(ChangeSet {
        changes: vec![Change::DeleteConsumer { uuid: *migration, expected_generation: MIGRATION_CONSUMER_GENERATION }],
    });
    Ok(set)
}

/// Revert a move: the instance consumer gets exactly the migration
/// consumer's allocations back, the migration consumer goes, and the
/// request spec takes the old flavor back. Capacity is not re-checked
/// against anything new: the resources were held all along (the write
/// still goes through placement's planner, which accepts it because usage
/// on every provider only shrinks or stays).
pub fn plan_revert_move(
    world: &World,
    instance: &Uuid,
    migration: &Uuid,
    old_flavor: &Flavor,
    now: Timestamp,
) -> Result<WorldChangeSet> {
    let held = claimed_migration(world, migration)?.clone();
    let Some(consumer) = world.placement.consumers.get(instance) else {
        return Err(ComputeError::Conflict(format!("Instance {instance} has no allocations.")));
    };
    let mut changes = ChangeSet::new();
    changes.push(Change::DeleteConsumer { uuid: *migration, expected_generation: MIGRATION_CONSUMER_GENERATION });
    // Plan the instance's allocations on the state without the migration
    // consumer, so the source's amounts are free for it.
    let mut without = world.placement.clone();
    without.apply(&changes);
    let request = ConsumerAllocations {
        consumer: *instance,
        project_id: consumer.row.project_id.clone(),
        user_id: consumer.row.user_id.clone(),
        generation: ConsumerGeneration::Is(consumer.row.generation),
        consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
        allocations: held,
    };
    let placement = plan_replace_allocations(&without, &[request], now)
        .map_err(|e| ComputeError::Conflict(format!("Unable to revert the allocations: {e:?}")))?;
    changes.changes.extend(placement.changes);
    let mut set = WorldChangeSet::new();
    set.placement(changes);
    if let Some(spec) = world.compute.request_specs.get(instance) {
        if spec.flavor != *old_flavor {
            let mut spec = spec.clone();
            spec.flavor = old_flavor.clone();
            set.compute(C::PutRequestSpec(spec));
        }
    }
    Ok(set)
}

/// Forget the migration consumer of an instance being deleted mid-move
/// (whatever its generation).
pub fn plan_forget_migration(world: &World, migration: &Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    if let Some(consumer) = world.placement.consumers.get(migration) {
        set.placement(ChangeSet {
            changes: vec![Change::DeleteConsumer { uuid: *migration, expected_generation: consumer.row.generation }],
        });
    }
    set
}
