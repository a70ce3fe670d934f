//! Pull mode's reschedule: a failed build goes back to its queue
//! ([`plan_requeue`]), an agent claims it from there
//! ([`plan_claim_requeued`]), or nobody does in time
//! ([`plan_expire_requeued`]).

use std::collections::HashMap;

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{Change, ChangeSet};
use uuid::Uuid;

use super::reschedule::why_exhausted;
use super::{plan_reschedule, InstanceChoices, Rescheduled, Result};
use crate::choice::{fits, host_of_instance};
use crate::state::ComputeChange as C;
use crate::{
    ComputeError, ComputeNodeRef, RequestSpec, Timestamp, World, WorldChangeSet, CELL0_UUID, CONSUMER_TYPE_INSTANCE,
};

/// Pull mode's reschedule: a build that failed on `failed_host` goes back
/// to its queue instead of to an alternate (a pull claim has none). One
/// write releases the instance's allocations, counts the attempt (the
/// failed host joins `failed_hosts`) and marks the request spec as
/// waiting on its queue (`retry.requeued_at`); the cell row stays in
/// `scheduling` on the failed host until a claim moves it. When
/// `max_attempts` attempts were made the allocations go all the same and
/// the answer is [`Rescheduled::Exhausted`].
///
/// Safe to run twice: allocations no longer on `failed_host` (a claim took
/// the requeued instance since: [`Rescheduled::Build`] there) or none at
/// all (still waiting: [`Rescheduled::Requeued`]; else exhausted or
/// buried before) write nothing and answer the earlier decision.
pub fn plan_requeue(
    world: &World,
    instance: &Uuid,
    failed_host: &str,
    max_attempts: usize,
    now: Timestamp,
) -> Result<(WorldChangeSet, Rescheduled)> {
    let mut set = WorldChangeSet::new();
    let Some(mapping) = world.compute.instance_mappings.get(instance) else { return Ok((set, Rescheduled::Gone)) };
    if mapping.cell.is_none() {
        return Ok((set, Rescheduled::Gone));
    }
    let Some(spec) = world.compute.request_specs.get(instance) else {
        // Nothing to requeue from (an old instance): as push does.
        return plan_reschedule(world, instance, failed_host, max_attempts, now);
    };
    let attempts = spec.retry.attempts();
    let exhausted = |attempts: i64| Rescheduled::Exhausted(why_exhausted(attempts, max_attempts));
    let consumer = world.placement.consumers.get(instance).filter(|c| !c.allocations.is_empty());
    let Some(consumer) = consumer else {
        return Ok((
            set,
            match spec.retry.requeued_at {
                Some(since) => Rescheduled::Requeued { attempt: attempts, since },
                None => exhausted(attempts),
            },
        ));
    };
    match host_of_instance(world, instance) {
        Some(node) if node.host != failed_host => {
            return Ok((set, Rescheduled::Build { node: node.clone(), attempt: attempts }));
        }
        Some(_) => {}
        None => return Ok((set, exhausted(attempts))),
    }
    set.placement(ChangeSet {
        changes: vec![Change::DeleteConsumer { uuid: *instance, expected_generation: consumer.row.generation }],
    });
    let mut spec = spec.clone();
    spec.retry.num_attempts = attempts;
    spec.retry.failed_hosts.push(failed_host.to_owned());
    spec.retry.alternates.clear();
    let outcome = if attempts < max_attempts as i64 {
        spec.retry.num_attempts = attempts + 1;
        spec.retry.requeued_at = Some(now);
        Rescheduled::Requeued { attempt: attempts + 1, since: now }
    } else {
        spec.retry.requeued_at = None;
        exhausted(attempts)
    };
    set.compute(C::PutRequestSpec(spec));
    Ok((set, outcome))
}

/// A requeued instance still waiting for a claim: no allocations, its
/// mapping in a cell and not queued for delete, its request spec marked
/// requeued. Returns its request spec and its cell.
pub fn requeue_waiting<'w>(world: &'w World, instance: &Uuid) -> Option<(&'w RequestSpec, Uuid)> {
    let mapping = world.compute.instance_mappings.get(instance).filter(|m| !m.queued_for_delete)?;
    let cell = mapping.cell.filter(|c| *c != CELL0_UUID)?;
    let spec = world.compute.request_specs.get(instance).filter(|s| s.retry.requeued_at.is_some())?;
    if world.placement.consumers.get(instance).is_some_and(|c| !c.allocations.is_empty()) {
        return None;
    }
    Some((spec, cell))
}

/// What [`plan_claim_requeued`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum RequeueClaim {
    /// Allocated on this node; the requeued mark is gone.
    Placed(ComputeNodeRef),
    /// Not waiting any more (claimed by another agent, buried, deleted).
    Gone,
    /// Waiting, but no choice fits (or a choice is a host whose build of
    /// it failed, in another cell, or refused by the reservation pool).
    NoRoom,
}

/// Claim a requeued instance ([`plan_requeue`]) on the first of `choices`
/// that still fits, in one write: its allocations are created only while
/// it still has none and is still marked requeued (a second agent racing
/// gets [`RequeueClaim::Gone`]), never on a host in its `failed_hosts` nor
/// outside its cell (its row is there), with the reservation pool's rule
/// checked as [`plan_claim_boots`](super::plan_claim_boots) checks it;
/// the request spec loses its requeued mark in the same write. The attempt
/// count stays (the requeue counted it).
pub fn plan_claim_requeued(
    world: &World,
    choices: &InstanceChoices,
    now: Timestamp,
    lend_lead: Option<Timestamp>,
) -> Result<(WorldChangeSet, RequeueClaim)> {
    let mut set = WorldChangeSet::new();
    let instance = &choices.instance;
    let Some((spec, cell)) = requeue_waiting(world, instance) else { return Ok((set, RequeueClaim::Gone)) };
    let named = crate::lease::named_reservation(spec);
    let chosen = choices.choices.iter().find_map(|choice| {
        let node = world.compute.compute_nodes.get(&choice.root)?;
        let allowed = node.cell == cell
            && !spec.retry.failed_hosts.contains(&node.host)
            && world.compute.cells.get(&node.cell).is_some_and(|c| !c.disabled)
            && match named {
                Ok(reservation) => world.compute.leases.host_allows(&node.host, reservation, now, lend_lead),
                Err(_) => false,
            }
            && fits(world, &choice.allocations, &HashMap::new());
        allowed.then_some((choice, node))
    });
    let Some((choice, node)) = chosen else { return Ok((set, RequeueClaim::NoRoom)) };
    let generation = match world.placement.consumers.get(instance) {
        Some(consumer) => ConsumerGeneration::Is(consumer.row.generation),
        None => ConsumerGeneration::New,
    };
    let request = ConsumerAllocations {
        consumer: *instance,
        project_id: spec.project_id.clone(),
        user_id: spec.user_id.clone(),
        generation,
        consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
        allocations: choice.allocations.clone(),
    };
    let placement = plan_replace_allocations(&world.placement, &[request], now)
        .map_err(|e| ComputeError::Conflict(format!("{e:?}")))?;
    set.placement(placement);
    let mut spec = spec.clone();
    spec.retry.requeued_at = None;
    set.compute(C::PutRequestSpec(spec));
    Ok((set, RequeueClaim::Placed(node.clone())))
}

/// Give up on a requeued instance nobody claimed since `since` (the pull
/// build timeout): its requeued mark goes, in one write, only while it is
/// still waiting from that same requeue (a claim or a later requeue
/// wins). Returns whether it was given up; the caller then puts the row in
/// ERROR.
pub fn plan_expire_requeued(world: &World, instance: &Uuid, since: Timestamp) -> (WorldChangeSet, bool) {
    let mut set = WorldChangeSet::new();
    match requeue_waiting(world, instance) {
        Some((spec, _)) if spec.retry.requeued_at == Some(since) => {
            let mut spec = spec.clone();
            spec.retry.requeued_at = None;
            set.compute(C::PutRequestSpec(spec));
            (set, true)
        }
        _ => (set, false),
    }
}
