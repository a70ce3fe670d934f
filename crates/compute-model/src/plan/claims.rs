//! Claims, the conductor's write for admitted boots: [`plan_claim`] and
//! [`plan_claim_boots`] (a batch) turn the scheduler's choices into
//! placement allocations, all or nothing per request, with the server
//! group's hard policy and the reservation pool re-checked, and keep the
//! choices not taken as alternates; [`plan_bury`] moves what fits nowhere
//! to cell0.

use std::collections::{BTreeSet, HashMap};

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use uuid::Uuid;

use super::Result;
use crate::choice::{fits, group_allows, group_hosts, HostChoice};
use crate::state::ComputeChange as C;
use crate::{
    BuildRetry, ComputeError, ComputeNodeRef, RequestSpec, Timestamp, World, WorldChangeSet, CELL0_UUID,
    CONSUMER_TYPE_INSTANCE,
};

/// The choices for one instance: the scheduler's selection first, then
/// its alternates.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceChoices {
    /// Instance.
    pub instance: Uuid,
    /// Selection, then alternates, in order of preference.
    pub choices: Vec<HostChoice>,
}

/// Where each instance of a claim went.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// `(instance, node ref)` for every claimed instance.
    pub placed: Vec<(Uuid, ComputeNodeRef)>,
    /// Instances skipped because they were deleted meanwhile (their build
    /// request is gone).
    pub gone: Vec<Uuid>,
}

/// Why a claim could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimFailure {
    /// No choice of this instance fits anymore (capacity taken, or the
    /// group policy now excludes every choice): schedule again.
    NoRoom(Uuid),
}

/// Claim placement resources for the instances of one request, all or
/// nothing. For each instance the choices are tried in order: the first
/// that still fits (capacity, counting the instances claimed before it in
/// this write) and keeps the server group's hard policy wins. Placement's
/// own allocation planner then re-checks the whole claim exactly.
pub fn plan_claim(
    world: &World,
    instances: &[InstanceChoices],
    now: Timestamp,
    lend_lead: Option<Timestamp>,
) -> Result<std::result::Result<(WorldChangeSet, Claimed), ClaimFailure>> {
    let (set, mut outcomes) = plan_claim_boots(world, &[instances], now, lend_lead)?;
    match outcomes.pop() {
        Some(Ok(claimed)) => Ok(Ok((set, claimed))),
        Some(Err(failure)) => Ok(Err(failure)),
        None => Err(ComputeError::Conflict("a claim planned no outcome".into())),
    }
}

/// Claim several boot requests in one write (the conductor's batch), each
/// all or nothing as [`plan_claim`] claims one: a request whose instances
/// do not all fit is left out (its outcome is [`ClaimFailure::NoRoom`])
/// and takes nothing from the requests after it. The requests are
/// checked in order, each counting the capacity and group members taken
/// by the ones claimed before it; placement's allocation planner then
/// re-checks every claimed allocation exactly, in the one change set.
///
/// The reservation pool's rule is checked again here too
/// ([`crate::lease::LeaseTables::host_allows`] at `now`, with the pool
/// lending lead `lend_lead`): the scheduler's answer may be a moment old,
/// and a lease that came within the lead time since must not find a new
/// ordinary server on its host.
pub fn plan_claim_boots(
    world: &World,
    boots: &[&[InstanceChoices]],
    now: Timestamp,
    lend_lead: Option<Timestamp>,
) -> Result<(WorldChangeSet, Vec<std::result::Result<Claimed, ClaimFailure>>)> {
    let mut extra: HashMap<(Uuid, &str), i64> = HashMap::new();
    let mut requests: Vec<ConsumerAllocations> = Vec::new();
    let mut placed_all: Vec<(Uuid, ComputeNodeRef)> = Vec::new();
    let mut specs: Vec<RequestSpec> = Vec::new();
    let mut outcomes = Vec::with_capacity(boots.len());
    let claiming: BTreeSet<Uuid> = boots.iter().flat_map(|b| b.iter().map(|i| i.instance)).collect();
    // Hosts of the group members, plus the ones chosen in this write.
    let mut group_state: HashMap<Uuid, HashMap<String, i64>> = HashMap::new();
    for instances in boots {
        // What this request takes, kept only if all of it fits.
        let mut boot_extra = extra.clone();
        let mut boot_groups = group_state.clone();
        let mut boot_requests: Vec<ConsumerAllocations> = Vec::new();
        let mut boot_specs: Vec<RequestSpec> = Vec::new();
        let mut placed: Vec<(Uuid, ComputeNodeRef)> = Vec::new();
        let mut gone = Vec::new();
        let mut failure = None;
        for choices in *instances {
            let Some(build) = world.compute.build_requests.get(&choices.instance) else {
                gone.push(choices.instance);
                continue;
            };
            let group =
                world.compute.group_of_instance.get(&choices.instance).and_then(|g| world.compute.server_groups.get(g));
            if let Some(group) = group {
                boot_groups.entry(group.uuid).or_insert_with(|| group_hosts(world, group, &claiming));
            }
            let named = world.compute.request_specs.get(&choices.instance).map(crate::lease::named_reservation);
            let mut chosen = None;
            for (idx, choice) in choices.choices.iter().enumerate() {
                let Some(node) = world.compute.compute_nodes.get(&choice.root) else { continue };
                if world.compute.cells.get(&node.cell).is_none_or(|c| c.disabled) {
                    continue;
                }
                let pool_allows = match named {
                    Some(Ok(reservation)) => world.compute.leases.host_allows(&node.host, reservation, now, lend_lead),
                    Some(Err(_)) => false,
                    // No request spec (an old build request): the
                    // scheduler's filter was the only check, as before.
                    None => true,
                };
                if !pool_allows {
                    continue;
                }
                if let Some(group) = group {
                    if !group_allows(group, &node.host, &boot_groups[&group.uuid]) {
                        continue;
                    }
                }
                if !fits(world, &choice.allocations, &boot_extra) {
                    continue;
                }
                chosen = Some((idx, choice, node));
                break;
            }
            let Some((taken, choice, node)) = chosen else {
                failure = Some(ClaimFailure::NoRoom(choices.instance));
                break;
            };
            for (provider, amounts) in &choice.allocations {
                for (class, amount) in amounts {
                    *boot_extra.entry((*provider, class.as_str())).or_insert(0) += amount;
                }
            }
            if let Some(group) = group {
                *boot_groups.entry(group.uuid).or_default().entry(node.host.clone()).or_insert(0) += 1;
            }
            boot_requests.push(ConsumerAllocations {
                consumer: choices.instance,
                project_id: build.project_id.clone(),
                user_id: build.user_id.clone(),
                generation: ConsumerGeneration::New,
                consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
                allocations: choice.allocations.clone(),
            });
            placed.push((choices.instance, node.clone()));
            // The choices after the one claimed are the instance's alternates
            // should its build fail: kept in its request spec, in this write.
            let alternates: Vec<HostChoice> = choices.choices[taken + 1..].to_vec();
            if let Some(spec) = world.compute.request_specs.get(&choices.instance) {
                if !alternates.is_empty() || spec.retry != BuildRetry::default() {
                    let mut spec = spec.clone();
                    spec.retry =
                        BuildRetry { num_attempts: 1, failed_hosts: Vec::new(), alternates, requeued_at: None };
                    boot_specs.push(spec);
                }
            }
        }
        if let Some(failure) = failure {
            outcomes.push(Err(failure));
            continue;
        }
        extra = boot_extra;
        group_state = boot_groups;
        requests.extend(boot_requests);
        specs.extend(boot_specs);
        placed_all.extend(placed.iter().cloned());
        outcomes.push(Ok(Claimed { placed, gone }));
    }
    let mut set = WorldChangeSet::new();
    if !requests.is_empty() {
        let placement = plan_replace_allocations(&world.placement, &requests, now)
            .map_err(|e| ComputeError::Conflict(format!("{e:?}")))?;
        set.placement(placement);
    }
    for (instance, node) in &placed_all {
        if let Some(mapping) = world.compute.instance_mappings.get(instance) {
            let mut mapping = mapping.clone();
            mapping.cell = Some(node.cell);
            set.compute(C::PutInstanceMapping(mapping));
        }
        set.compute(C::DeleteBuildRequest(*instance));
    }
    for spec in specs {
        set.compute(C::PutRequestSpec(spec));
    }
    Ok((set, outcomes))
}

/// Bury instances that could not be scheduled in cell0: their mappings
/// point at cell0 and their build requests go (the caller writes their
/// ERROR rows into cell0 first). Instances already deleted are skipped.
pub fn plan_bury(world: &World, instances: &[Uuid]) -> (WorldChangeSet, Vec<Uuid>) {
    let mut set = WorldChangeSet::new();
    let mut buried = Vec::new();
    for instance in instances {
        if !world.compute.build_requests.contains_key(instance) {
            continue;
        }
        if let Some(mapping) = world.compute.instance_mappings.get(instance) {
            let mut mapping = mapping.clone();
            mapping.cell = Some(CELL0_UUID);
            set.compute(C::PutInstanceMapping(mapping));
        }
        set.compute(C::DeleteBuildRequest(*instance));
        buried.push(*instance);
    }
    (set, buried)
}
