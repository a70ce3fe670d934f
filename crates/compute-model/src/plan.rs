//! Planning functions for control writes: each takes the current
//! [`World`] and returns the [`WorldChangeSet`] to commit, or refuses.
//! They run inside the write path, one at a time against a caught-up
//! snapshot, so what they check is what gets committed.
//!
//! The boot path is three plans:
//!
//! 1. [`plan_admit_boot`] (API): quota admission, then build requests,
//!    request specs, instance mappings and group membership, in one write;
//! 2. [`plan_claim`] (conductor): placement allocations for every instance
//!    of the request (all or nothing), the server group's hard policy
//!    re-checked against current allocations, mappings moved to the chosen
//!    cell and build requests removed, in one write;
//! 3. [`plan_bury`] (conductor, when no host fits): mappings moved to cell0,
//!    build requests removed.
//!
//! A build that fails on its host is moved to the next alternate the claim
//! kept in the request spec by [`plan_reschedule`] (allocations replaced,
//! attempt counted, in one write), or its allocations go when no attempt
//! is left.
//!
//! Deleting goes through [`plan_delete_build_request`] (not yet in a cell)
//! or [`plan_forget_instance`] (removed from its cell).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{Change, ChangeSet};
use uuid::Uuid;

use crate::choice::{fits, group_allows, group_hosts, host_of_instance, HostChoice};
use crate::state::ComputeChange as C;
use crate::{
    credential_host, credential_identity, quota, AgentCredential, Aggregate, BuildRequest, BuildRetry, CellMapping,
    ComputeError, ComputeNodeRef, Flavor, HostMapping, Image, InstanceMapping, InstanceSpec, RequestSpec, ServerGroup,
    Timestamp, World, WorldChangeSet, CELL0_UUID, CONSUMER_TYPE_INSTANCE,
};

type Result<T> = std::result::Result<T, ComputeError>;

// ---------------------------------------------------------------------------
// Boot admission
// ---------------------------------------------------------------------------

/// A boot request as the API accepted it.
#[derive(Debug, Clone)]
pub struct BootAdmission {
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// `max_count` instances, each with a fresh uuid and its spec.
    pub instances: Vec<(Uuid, InstanceSpec)>,
    /// `min_count`.
    pub min_count: i64,
    /// The request spec shared by the instances (`instance_uuid` and
    /// `num_instances` are filled in per instance).
    pub request_spec: RequestSpec,
    /// Acceptance time.
    pub now: Timestamp,
}

/// Admit a boot: lower the count to the quota headroom (refusing below
/// `min_count`), check the server group's member quota, and create the
/// build requests, request specs and instance mappings. Returns the
/// admitted instance uuids.
pub fn plan_admit_boot(world: &World, boot: &BootAdmission) -> Result<(WorldChangeSet, Vec<Uuid>)> {
    let flavor = &boot.request_spec.flavor;
    let max_count = boot.instances.len() as i64;
    let admitted = quota::admit_instances(
        world,
        &boot.project_id,
        &boot.user_id,
        flavor.vcpus,
        flavor.memory_mb,
        boot.min_count,
        max_count,
    )?;
    if let Some((_, first)) = boot.instances.first() {
        quota::check_metadata_items(world, &boot.project_id, &boot.user_id, first.metadata.len())?;
    }
    let mut set = WorldChangeSet::new();
    let instances: Vec<&(Uuid, InstanceSpec)> = boot.instances.iter().take(admitted as usize).collect();
    if let Some(group_id) = boot.request_spec.group {
        let group = world
            .compute
            .server_groups
            .get(&group_id)
            .ok_or_else(|| ComputeError::Invalid(format!("Invalid server group {group_id}")))?;
        quota::check_group_members(world, &boot.project_id, &boot.user_id, &group_id, admitted)?;
        let mut group = group.clone();
        group.members.extend(instances.iter().map(|(uuid, _)| *uuid));
        set.compute(C::PutServerGroup(group));
    }
    for (uuid, spec) in &instances {
        if world.compute.instance_mappings.contains_key(uuid) {
            return Err(ComputeError::Conflict(format!("Instance {uuid} already exists.")));
        }
        set.compute(C::PutInstanceMapping(InstanceMapping {
            instance_uuid: *uuid,
            cell: None,
            project_id: boot.project_id.clone(),
            user_id: boot.user_id.clone(),
            queued_for_delete: false,
            created_at: boot.now,
        }));
        set.compute(C::PutBuildRequest(BuildRequest {
            instance_uuid: *uuid,
            project_id: boot.project_id.clone(),
            user_id: boot.user_id.clone(),
            spec: spec.clone(),
            created_at: boot.now,
            held: false,
        }));
        let mut request_spec = boot.request_spec.clone();
        request_spec.instance_uuid = *uuid;
        request_spec.num_instances = admitted;
        set.compute(C::PutRequestSpec(request_spec));
    }
    Ok((set, instances.iter().map(|(uuid, _)| *uuid).collect()))
}

/// Hold the build requests of an admitted boot (`plan_admit_boot`'s change
/// set) back from scheduling, and add `hints` to their request specs: a
/// reserved server, admitted in the same write as its lease, waits as a
/// held build request until the lease start releases it.
pub fn hold_boot(set: &mut WorldChangeSet, hints: &BTreeMap<String, Vec<String>>) {
    for change in &mut set.changes {
        match change {
            crate::WorldChange::Compute(C::PutBuildRequest(build)) => build.held = true,
            crate::WorldChange::Compute(C::PutRequestSpec(spec)) => {
                spec.hints.extend(hints.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------

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

/// Why an instance's build cannot be retried anymore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exhausted {
    /// `max_attempts` builds failed (Nova's `populate_retry` refusal).
    MaxAttempts {
        /// The limit.
        max_attempts: usize,
    },
    /// No alternate is left, or none still fits (Nova's conductor with an
    /// empty or fully taken host list).
    NoHostsLeft,
}

impl Exhausted {
    /// Nova's fault message (`MaxRetriesExceeded`) for `instance`; `last`
    /// is the last build failure.
    pub fn message(&self, instance: &Uuid, last: &str) -> String {
        match self {
            Exhausted::MaxAttempts { max_attempts } => format!(
                "Exceeded maximum number of retries. Exceeded max scheduling attempts {max_attempts} for instance \
                 {instance}. Last exception: {last}"
            ),
            Exhausted::NoHostsLeft => format!(
                "Exceeded maximum number of retries. Exhausted all hosts available for retrying build failures for \
                 instance {instance}."
            ),
        }
    }
}

/// What [`plan_reschedule`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Rescheduled {
    /// The instance is gone (deleted meanwhile): nothing to do.
    Gone,
    /// Build it on `node`; this is attempt number `attempt`. Also the
    /// answer when an earlier run already moved the allocations there.
    Build {
        /// Where its allocations now are.
        node: ComputeNodeRef,
        /// Attempt number (2 for the first reschedule).
        attempt: i64,
    },
    /// No attempt left; the instance holds no allocations anymore.
    Exhausted(Exhausted),
    /// Pull mode ([`plan_requeue`]): back on its queue, without
    /// allocations, as attempt number `attempt`, waiting since `since`
    /// for an agent's claim ([`plan_claim_requeued`]).
    Requeued {
        /// Attempt number the next claim builds (2 for the first requeue).
        attempt: i64,
        /// When it was requeued.
        since: Timestamp,
    },
}

/// Why a build that failed after `attempts` attempts is not retried:
/// the attempts are used up, or (with attempts left) no host is left.
fn why_exhausted(attempts: i64, max_attempts: usize) -> Exhausted {
    if attempts >= max_attempts as i64 {
        Exhausted::MaxAttempts { max_attempts }
    } else {
        Exhausted::NoHostsLeft
    }
}

/// Move an instance whose build failed on `failed_host` to its next
/// alternate, in one write: the first alternate (in order) whose node is
/// known and in the instance's cell, whose cell is enabled, that keeps the
/// server group's hard policy and that still fits replaces the instance's
/// allocations (placement's planner re-checks the whole claim, consumer
/// generation included), and the request spec counts the attempt and
/// drops the alternates used or skipped. When `max_attempts` attempts were
/// made, or no alternate fits, the allocations are deleted instead. The
/// scheduler is not asked again.
///
/// Safe to run twice: when the allocations are no longer on `failed_host`
/// (an earlier run moved them, or deleted them), nothing is written and
/// the earlier decision is returned.
pub fn plan_reschedule(
    world: &World,
    instance: &Uuid,
    failed_host: &str,
    max_attempts: usize,
    now: Timestamp,
) -> Result<(WorldChangeSet, Rescheduled)> {
    let mut set = WorldChangeSet::new();
    let Some(mapping) = world.compute.instance_mappings.get(instance) else { return Ok((set, Rescheduled::Gone)) };
    let Some(cell) = mapping.cell else { return Ok((set, Rescheduled::Gone)) };
    let mut spec = world.compute.request_specs.get(instance).cloned();
    let attempts = spec.as_ref().map_or(1, |s| s.retry.attempts());
    let exhausted_reason = |attempts: i64| why_exhausted(attempts, max_attempts);
    let Some(consumer) = world.placement.consumers.get(instance) else {
        return Ok((set, Rescheduled::Exhausted(exhausted_reason(attempts))));
    };
    match host_of_instance(world, instance) {
        Some(node) if node.host != failed_host => {
            return Ok((set, Rescheduled::Build { node: node.clone(), attempt: attempts }));
        }
        Some(_) => {}
        None => return Ok((set, Rescheduled::Exhausted(exhausted_reason(attempts)))),
    }
    let mut retry = spec.as_ref().map(|s| s.retry.clone()).unwrap_or_default();
    retry.num_attempts = attempts;
    retry.failed_hosts.push(failed_host.to_owned());
    let mut chosen: Option<(usize, &HostChoice, &ComputeNodeRef)> = None;
    if attempts < max_attempts as i64 {
        let group = world.compute.group_of_instance.get(instance).and_then(|g| world.compute.server_groups.get(g));
        let members_on = group.map(|g| group_hosts(world, g, &BTreeSet::from([*instance])));
        // The instance's own allocations are replaced, not added to: they
        // count as free for its alternate (a sharing provider may be in
        // both).
        let mut own: HashMap<(Uuid, &str), i64> = HashMap::new();
        for (provider, amounts) in &consumer.allocations {
            for (class, amount) in amounts {
                own.insert((*provider, class.as_str()), -amount);
            }
        }
        for (idx, choice) in retry.alternates.iter().enumerate() {
            let Some(node) = world.compute.compute_nodes.get(&choice.root) else { continue };
            if node.cell != cell || retry.failed_hosts.contains(&node.host) {
                continue;
            }
            if world.compute.cells.get(&node.cell).is_none_or(|c| c.disabled) {
                continue;
            }
            if let (Some(group), Some(on)) = (group, &members_on) {
                if !group_allows(group, &node.host, on) {
                    continue;
                }
            }
            if !fits(world, &choice.allocations, &own) {
                continue;
            }
            chosen = Some((idx, choice, node));
            break;
        }
    }
    let outcome = match chosen {
        Some((idx, choice, node)) => {
            let request = ConsumerAllocations {
                consumer: *instance,
                project_id: consumer.row.project_id.clone(),
                user_id: consumer.row.user_id.clone(),
                generation: ConsumerGeneration::Is(consumer.row.generation),
                consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
                allocations: choice.allocations.clone(),
            };
            let placement = plan_replace_allocations(&world.placement, &[request], now)
                .map_err(|e| ComputeError::Conflict(format!("{e:?}")))?;
            set.placement(placement);
            retry.num_attempts = attempts + 1;
            retry.alternates = retry.alternates.split_off(idx + 1);
            Rescheduled::Build { node: node.clone(), attempt: attempts + 1 }
        }
        None => {
            set.placement(ChangeSet {
                changes: vec![Change::DeleteConsumer { uuid: *instance, expected_generation: consumer.row.generation }],
            });
            retry.alternates.clear();
            Rescheduled::Exhausted(exhausted_reason(attempts))
        }
    };
    if let Some(mut spec) = spec.take() {
        spec.retry = retry;
        set.compute(C::PutRequestSpec(spec));
    }
    Ok((set, outcome))
}

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
/// checked as [`plan_claim_boots`] checks it; the request spec loses its
/// requeued mark in the same write. The attempt count stays (the requeue
/// counted it).
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

// ---------------------------------------------------------------------------
// Deletes
// ---------------------------------------------------------------------------

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
/// allocations, mapping, request spec, group membership and shelve
/// snapshot forgotten, together with the migration consumers of its open
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

// ---------------------------------------------------------------------------
// Flavors
// ---------------------------------------------------------------------------

/// What a flavor create asks for (`id` None: generate a uuid).
#[derive(Debug, Clone)]
pub struct NewFlavor {
    /// Requested flavorid (None: a new uuid string).
    pub flavorid: Option<String>,
    /// Name.
    pub name: String,
    /// RAM MiB.
    pub memory_mb: i64,
    /// vCPUs.
    pub vcpus: i64,
    /// Root disk GiB.
    pub root_gb: i64,
    /// Ephemeral GiB.
    pub ephemeral_gb: i64,
    /// Swap MiB.
    pub swap: i64,
    /// rxtx factor.
    pub rxtx_factor: f64,
    /// Public?
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

/// Create a flavor; names and ids are unique (409 as Nova).
pub fn plan_create_flavor(
    world: &World,
    new: NewFlavor,
    generated_id: Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Flavor)> {
    let flavorid = new.flavorid.unwrap_or_else(|| generated_id.to_string());
    if world.compute.flavors.values().any(|f| f.name == new.name) {
        return Err(ComputeError::Conflict(format!("Flavor with name {} already exists.", new.name)));
    }
    if world.compute.flavors.contains_key(&flavorid) {
        return Err(ComputeError::Conflict(format!("Flavor with ID {flavorid} already exists.")));
    }
    let flavor = Flavor {
        id: world.compute.max_flavor_id + 1,
        flavorid,
        name: new.name,
        memory_mb: new.memory_mb,
        vcpus: new.vcpus,
        root_gb: new.root_gb,
        ephemeral_gb: new.ephemeral_gb,
        swap: new.swap,
        rxtx_factor: new.rxtx_factor,
        vcpu_weight: None,
        disabled: false,
        is_public: new.is_public,
        description: new.description,
        extra_specs: BTreeMap::new(),
        projects: BTreeSet::new(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutFlavor(flavor.clone()));
    Ok((set, flavor))
}

fn flavor<'a>(world: &'a World, flavorid: &str) -> Result<&'a Flavor> {
    world
        .compute
        .flavors
        .get(flavorid)
        .ok_or_else(|| ComputeError::NotFound(format!("Flavor {flavorid} could not be found.")))
}

/// Change a flavor with `edit` (description, extra specs, access).
pub fn plan_edit_flavor(
    world: &World,
    flavorid: &str,
    now: Timestamp,
    edit: impl FnOnce(&mut Flavor) -> Result<()>,
) -> Result<(WorldChangeSet, Flavor)> {
    let mut flavor = flavor(world, flavorid)?.clone();
    edit(&mut flavor)?;
    flavor.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutFlavor(flavor.clone()));
    Ok((set, flavor))
}

/// Delete a flavor (existing servers keep their copy).
pub fn plan_delete_flavor(world: &World, flavorid: &str) -> Result<WorldChangeSet> {
    flavor(world, flavorid)?;
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteFlavor(flavorid.to_owned()));
    Ok(set)
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Server groups
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Quotas
// ---------------------------------------------------------------------------

/// Set quota limits of a project (or of a user in it). Unless `force`,
/// a limit below current usage is refused, as Nova does; a user's limit
/// may not exceed the project's.
pub fn plan_set_quotas(
    world: &World,
    project: &str,
    user: Option<&str>,
    limits: &BTreeMap<String, i64>,
    force: bool,
) -> Result<WorldChangeSet> {
    let mut set = WorldChangeSet::new();
    for (resource, limit) in limits {
        if !quota::is_resource(resource) {
            return Err(ComputeError::Invalid(format!("Bad key(s) {resource} in quota_set")));
        }
        if *limit < -1 {
            return Err(ComputeError::Invalid(format!(
                "Quota limit {limit} for {resource} must be greater than or equal to -1."
            )));
        }
        if !force && *limit >= 0 {
            let used = quota::usage(world, project, user, resource);
            if used > *limit {
                return Err(ComputeError::Invalid(format!(
                    "Quota limit {limit} for {resource} must be greater than or equal to already used and reserved {used}."
                )));
            }
        }
        if let Some(_user) = user {
            let project_limit = quota::project_limit(world, project, resource);
            if project_limit >= 0 && (*limit < 0 || *limit > project_limit) {
                return Err(ComputeError::Invalid(format!(
                    "Quota limit {limit} for {resource} must be less than or equal to {project_limit}."
                )));
            }
        }
        set.compute(C::PutQuota {
            project_id: project.to_owned(),
            user_id: user.unwrap_or("").to_owned(),
            resource: resource.clone(),
            limit: *limit,
        });
    }
    Ok(set)
}

/// Remove every quota override of a project (or of a user in it).
pub fn plan_delete_quotas(world: &World, project: &str, user: Option<&str>) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    for (p, u, r) in world.compute.quotas.keys() {
        let matches = p == project
            && match user {
                Some(user) => u == user,
                None => true,
            };
        if matches {
            set.compute(C::DeleteQuota { project_id: p.clone(), user_id: u.clone(), resource: r.clone() });
        }
    }
    set
}

/// Set quota-class limits (`default` changes the defaults).
pub fn plan_set_quota_class(world: &World, class_name: &str, limits: &BTreeMap<String, i64>) -> Result<WorldChangeSet> {
    let _ = world;
    let mut set = WorldChangeSet::new();
    for (resource, limit) in limits {
        if !quota::is_resource(resource) {
            return Err(ComputeError::Invalid(format!("Bad key(s) {resource} in quota_set")));
        }
        set.compute(C::PutQuotaClass { class_name: class_name.to_owned(), resource: resource.clone(), limit: *limit });
    }
    Ok(set)
}

// ---------------------------------------------------------------------------
// Aggregates (mirrored into placement aggregates)
// ---------------------------------------------------------------------------

fn aggregate(world: &World, id: i64) -> Result<&Aggregate> {
    world
        .compute
        .aggregates
        .get(&id)
        .ok_or_else(|| ComputeError::NotFound(format!("Aggregate {id} could not be found.")))
}

fn check_az_name(world: &World, name: &str, az: Option<&str>, except: Option<i64>) -> Result<()> {
    let _ = az;
    if world.compute.aggregates.values().any(|a| a.name == name && Some(a.id) != except) {
        return Err(ComputeError::Conflict(format!("Aggregate {name} already exists.")));
    }
    Ok(())
}

/// Create a host aggregate (optionally with an availability zone).
pub fn plan_create_aggregate(
    world: &World,
    name: &str,
    availability_zone: Option<&str>,
    uuid: Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    check_az_name(world, name, availability_zone, None)?;
    let mut metadata = BTreeMap::new();
    if let Some(az) = availability_zone {
        metadata.insert("availability_zone".to_owned(), az.to_owned());
    }
    let aggregate = Aggregate {
        id: world.compute.max_aggregate_id + 1,
        uuid,
        name: name.to_owned(),
        metadata,
        hosts: BTreeSet::new(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// A host's availability zones if it joined (or left) an aggregate whose
/// zone is `new_zone`: a host can be in one zone only (409 as Nova).
fn check_host_zone(world: &World, host: &str, aggregate: &Aggregate, new_zone: Option<&str>) -> Result<()> {
    let Some(new_zone) = new_zone else { return Ok(()) };
    for other in world.compute.aggregates_of_host(host) {
        if other.id == aggregate.id {
            continue;
        }
        if let Some(zone) = other.availability_zone() {
            if zone != new_zone {
                return Err(ComputeError::Conflict(format!(
                    "Cannot add host {host} in aggregate {}: host exists in availability zone {zone}",
                    aggregate.id
                )));
            }
        }
    }
    Ok(())
}

/// Update name and/or availability zone of an aggregate.
pub fn plan_update_aggregate(
    world: &World,
    id: i64,
    name: Option<&str>,
    availability_zone: Option<&str>,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if let Some(name) = name {
        check_az_name(world, name, availability_zone, Some(id))?;
        aggregate.name = name.to_owned();
    }
    if let Some(az) = availability_zone {
        for host in &aggregate.hosts {
            check_host_zone(world, host, &aggregate, Some(az))?;
        }
        aggregate.metadata.insert("availability_zone".to_owned(), az.to_owned());
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// Set (value `Some`) or remove (`None`) aggregate metadata keys.
pub fn plan_set_aggregate_metadata(
    world: &World,
    id: i64,
    metadata: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if let Some(Some(az)) = metadata.get("availability_zone") {
        if az.is_empty() {
            return Err(ComputeError::Invalid(format!(
                "Cannot update metadata of aggregate {id}. Reason: Aggregate {} does not support empty named \
                 availability zone.",
                aggregate.name
            )));
        }
        for host in &aggregate.hosts {
            check_host_zone(world, host, &aggregate, Some(az))?;
        }
    }
    for (key, value) in metadata {
        match value {
            Some(value) => aggregate.metadata.insert(key.clone(), value.clone()),
            None => aggregate.metadata.remove(key),
        };
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// Change the placement aggregates of every compute node of `host`: add
/// or remove `aggregate` (what Nova's report client does on
/// `aggregate_add_host`/`_remove_host`).
fn mirror_host_aggregate(
    world: &World,
    host: &str,
    aggregate: Uuid,
    add: bool,
    now: Timestamp,
    set: &mut WorldChangeSet,
) {
    let Some(nodes) = world.compute.nodes_by_host.get(host) else { return };
    let mut placement = ChangeSet::new();
    for node in nodes {
        let Some(provider) = world.placement.provider(node) else { continue };
        let mut aggregates = provider.aggregates.clone();
        let changed = if add { aggregates.insert(aggregate) } else { aggregates.remove(&aggregate) };
        if !changed {
            continue;
        }
        let mut row = provider.row.clone();
        row.generation += 1;
        row.updated_at = now;
        placement.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
        placement.push(Change::SetProviderAggregates { provider: *node, aggregates });
    }
    set.placement(placement);
}

/// Add a host to an aggregate (and its compute nodes to the placement
/// aggregate).
pub fn plan_add_aggregate_host(
    world: &World,
    id: i64,
    host: &str,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if !world.compute.host_mappings.contains_key(host) {
        return Err(ComputeError::NotFound(format!("Compute host {host} could not be found.")));
    }
    if aggregate.hosts.contains(host) {
        return Err(ComputeError::Conflict(format!("Aggregate {id} already has host {host}.")));
    }
    check_host_zone(world, host, &aggregate, aggregate.availability_zone())?;
    aggregate.hosts.insert(host.to_owned());
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    mirror_host_aggregate(world, host, aggregate.uuid, true, now, &mut set);
    Ok((set, aggregate))
}

/// Remove a host from an aggregate (and from the placement aggregate).
pub fn plan_remove_aggregate_host(
    world: &World,
    id: i64,
    host: &str,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if !aggregate.hosts.remove(host) {
        return Err(ComputeError::NotFound(format!("Cannot remove host {host} in aggregate {id}")));
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    mirror_host_aggregate(world, host, aggregate.uuid, false, now, &mut set);
    Ok((set, aggregate))
}

/// Delete an empty aggregate (409 while it has hosts, as Nova's
/// `InvalidAggregateActionDelete`).
pub fn plan_delete_aggregate(world: &World, id: i64) -> Result<WorldChangeSet> {
    let aggregate = aggregate(world, id)?;
    if !aggregate.hosts.is_empty() {
        return Err(ComputeError::Invalid(format!(
            "Cannot delete aggregate {id}. Reason: Host aggregate is not empty."
        )));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteAggregate(id));
    Ok(set)
}

// ---------------------------------------------------------------------------
// Cells and hosts
// ---------------------------------------------------------------------------

/// Create (or update) a cell mapping; names are unique.
pub fn plan_put_cell(world: &World, cell: CellMapping) -> Result<WorldChangeSet> {
    if world.compute.cells.values().any(|c| c.name == cell.name && c.uuid != cell.uuid) {
        return Err(ComputeError::Conflict(format!("Cell {} already exists.", cell.name)));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutCell(cell));
    Ok(set)
}

/// Map a host and its compute nodes to a cell (host discovery). A host
/// already mapped to another cell is refused.
pub fn plan_map_host(world: &World, host: &str, cell: Uuid, nodes: &[(Uuid, String)]) -> Result<WorldChangeSet> {
    if !world.compute.cells.contains_key(&cell) {
        return Err(ComputeError::NotFound(format!("Cell {cell} could not be found.")));
    }
    let mut set = WorldChangeSet::new();
    match world.compute.host_mappings.get(host) {
        Some(existing) if existing.cell != cell => {
            return Err(ComputeError::Conflict(format!("Host {host} is already mapped to cell {}.", existing.cell)))
        }
        Some(_) => {}
        None => set.compute(C::PutHostMapping(HostMapping { host: host.to_owned(), cell, owner: None })),
    }
    for (uuid, node) in nodes {
        let wanted = ComputeNodeRef { uuid: *uuid, host: host.to_owned(), node: node.clone(), cell };
        if world.compute.compute_nodes.get(uuid) != Some(&wanted) {
            set.compute(C::PutComputeNode(wanted));
        }
    }
    Ok(set)
}

/// Bind `hosts` to the agent identity `owner` in `cell` before an agent
/// registers them: a host bound to another identity is refused (403), a
/// host mapped to another cell too (409); an unbound or unknown host is
/// mapped and bound. Checked and written in one planned write, so two
/// identities racing for a new host cannot both win.
pub fn plan_bind_hosts(world: &World, hosts: &[String], cell: Uuid, owner: &str) -> Result<WorldChangeSet> {
    if !world.compute.cells.contains_key(&cell) {
        return Err(ComputeError::NotFound(format!("Cell {cell} could not be found.")));
    }
    check_host_owner(world, owner, hosts.iter().map(String::as_str))?;
    let mut set = WorldChangeSet::new();
    for host in hosts {
        if let Some(m) = world.compute.host_mappings.get(host) {
            if m.cell != cell {
                return Err(ComputeError::Conflict(format!("Host {host} is already mapped to another cell.")));
            }
            if m.owner.as_deref() == Some(owner) {
                continue;
            }
        }
        set.compute(C::PutHostMapping(HostMapping { host: host.clone(), cell, owner: Some(owner.to_owned()) }));
    }
    Ok(set)
}

/// Unbind a host from its agent identity (admin): the next registration
/// binds it to whoever registers it.
pub fn plan_unbind_host(world: &World, host: &str) -> Result<WorldChangeSet> {
    let mapping = world
        .compute
        .host_mappings
        .get(host)
        .ok_or_else(|| ComputeError::NotFound(format!("Compute host {host} could not be found.")))?;
    let mut set = WorldChangeSet::new();
    if mapping.owner.is_some() {
        set.compute(C::PutHostMapping(HostMapping { owner: None, ..mapping.clone() }));
    }
    Ok(set)
}

/// Refuse (403) when any of `hosts` is bound to an identity other than
/// `caller`: the identity of its mapping, or its agent credential's once
/// one was issued (even before the host registered). A credential's
/// identity speaks only for its own host. Unknown and unbound hosts pass.
pub fn check_host_owner<'a>(world: &World, caller: &str, hosts: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for host in hosts {
        if let Some(own) = credential_host(caller) {
            if own != host {
                return Err(ComputeError::Forbidden(format!(
                    "The agent credential of host {own} cannot speak for host {host}."
                )));
            }
        }
        // Compared without building the identity or copying the owner: an
        // agent's long poll checks all its hosts (thousands) each time.
        let bound_elsewhere = if world.compute.agent_credentials.contains_key(host) {
            credential_host(caller) != Some(host)
        } else {
            world.compute.host_mappings.get(host).and_then(|m| m.owner.as_deref()).is_some_and(|owner| owner != caller)
        };
        if bound_elsewhere {
            return Err(ComputeError::Forbidden(format!("Host {host} is bound to another agent identity.")));
        }
    }
    Ok(())
}

/// The longest host name an agent credential is issued for (Nova's
/// `services.host` column).
const MAX_HOST_NAME: usize = 255;

/// Issue (or rotate) `host`'s agent credential: only the digest of its
/// secret is kept. A mapped host is bound to the credential's identity at
/// once, so from this write on only the credential speaks for it.
pub fn plan_issue_agent_credential(world: &World, host: &str, digest: &str, now: i64) -> Result<WorldChangeSet> {
    if host.is_empty()
        || host.len() > MAX_HOST_NAME
        || host.contains(':')
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ComputeError::Invalid(format!(
            "Invalid host name: 1 to {MAX_HOST_NAME} characters, no ':', spaces or control characters."
        )));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAgentCredential(AgentCredential {
        host: host.to_owned(),
        digest: digest.to_owned(),
        created_at: now,
    }));
    if let Some(mapping) = world.compute.host_mappings.get(host) {
        let identity = credential_identity(host);
        if mapping.owner.as_deref() != Some(identity.as_str()) {
            set.compute(C::PutHostMapping(HostMapping { owner: Some(identity), ..mapping.clone() }));
        }
    }
    Ok(set)
}

/// Revoke `host`'s agent credential; a host bound to it is unbound (the
/// next registration binds it to whoever registers it).
pub fn plan_revoke_agent_credential(world: &World, host: &str) -> Result<WorldChangeSet> {
    if !world.compute.agent_credentials.contains_key(host) {
        return Err(ComputeError::NotFound(format!("Host {host} has no agent credential.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteAgentCredential(host.to_owned()));
    if let Some(mapping) = world.compute.host_mappings.get(host) {
        if mapping.owner.as_deref() == Some(credential_identity(host).as_str()) {
            set.compute(C::PutHostMapping(HostMapping { owner: None, ..mapping.clone() }));
        }
    }
    Ok(set)
}

/// Whether `digest` (of a presented secret) is `host`'s credential.
/// Compared in constant time.
pub fn agent_credential_matches(world: &World, host: &str, digest: &str) -> bool {
    world.compute.agent_credentials.get(host).is_some_and(|c| {
        c.digest.len() == digest.len()
            && c.digest.bytes().zip(digest.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use berth_model::{AllocationMap, Inventory, ProviderRow};

    use super::*;
    use crate::{ComputeChange, GroupPolicy};

    use crate::world::tests::flavor;

    fn spec(name: &str) -> InstanceSpec {
        InstanceSpec {
            display_name: name.into(),
            display_description: None,
            hostname: name.into(),
            image_ref: None,
            image_properties: BTreeMap::new(),
            flavor: flavor(1, 512),
            metadata: BTreeMap::new(),
            key_name: None,
            availability_zone: None,
            reservation_id: "r-1".into(),
            launch_index: 0,
            config_drive: String::new(),
            user_data: None,
            access_ip_v4: None,
            access_ip_v6: None,
            tags: vec![],
            scheduler_hints: BTreeMap::new(),
        }
    }

    fn request_spec(group: Option<Uuid>) -> RequestSpec {
        RequestSpec {
            instance_uuid: Uuid::nil(),
            project_id: "p".into(),
            user_id: "u".into(),
            flavor: flavor(1, 512),
            image: None,
            num_instances: 1,
            availability_zone: None,
            force_host: None,
            force_node: None,
            group,
            same_host: vec![],
            different_host: vec![],
            hints: BTreeMap::new(),
            reservation_id: "r-1".into(),
            retry: BuildRetry::default(),
        }
    }

    /// A world with one cell and `hosts` compute nodes of 4 VCPU each.
    pub(crate) fn world_with_hosts(hosts: usize) -> (World, Vec<Uuid>) {
        let mut world = World::with_standard_data(0);
        let cell = Uuid::new_v4();
        let mut set = WorldChangeSet::new();
        set.compute(ComputeChange::PutCell(CellMapping {
            uuid: cell,
            name: "cell1".into(),
            database_connection: "sqlite://x".into(),
            disabled: false,
        }));
        let mut roots = Vec::new();
        for i in 0..hosts {
            let uuid = Uuid::new_v4();
            roots.push(uuid);
            let mut placement = ChangeSet::new();
            placement.push(Change::PutProvider {
                row: ProviderRow {
                    id: i as i64 + 1,
                    uuid,
                    name: format!("h{i}"),
                    generation: 0,
                    parent: None,
                    root: uuid,
                    created_at: 0,
                    updated_at: 0,
                },
                expected_generation: None,
            });
            let inv =
                Inventory { total: 4, reserved: 0, min_unit: 1, max_unit: 4, step_size: 1, allocation_ratio: 1.0 };
            placement.push(Change::SetInventories { provider: uuid, inventories: [("VCPU".to_owned(), inv)].into() });
            set.placement(placement);
            set.compute(ComputeChange::PutHostMapping(HostMapping { host: format!("h{i}"), cell, owner: None }));
            set.compute(ComputeChange::PutComputeNode(ComputeNodeRef {
                uuid,
                host: format!("h{i}"),
                node: format!("h{i}"),
                cell,
            }));
        }
        world.apply(&set);
        (world, roots)
    }

    pub(crate) fn admit(world: &mut World, n: usize, group: Option<Uuid>) -> Vec<Uuid> {
        let boot = BootAdmission {
            project_id: "p".into(),
            user_id: "u".into(),
            instances: (0..n).map(|i| (Uuid::new_v4(), spec(&format!("vm{i}")))).collect(),
            min_count: n as i64,
            request_spec: request_spec(group),
            now: 1,
        };
        let (set, admitted) = plan_admit_boot(world, &boot).expect("admitted");
        world.apply(&set);
        admitted
    }

    pub(crate) fn choice(root: Uuid, vcpus: i64) -> HostChoice {
        let mut allocations = AllocationMap::new();
        allocations.entry(root).or_default().insert("VCPU".into(), vcpus);
        HostChoice { root, allocations }
    }

    #[test]
    fn quota_admission_lowers_to_headroom_and_refuses_below_min() {
        let (mut world, _) = world_with_hosts(1);
        let mut limits = BTreeMap::new();
        limits.insert("instances".to_owned(), 3);
        world.apply(&plan_set_quotas(&world, "p", None, &limits, false).expect("quota"));
        admit(&mut world, 2, None);
        let boot = BootAdmission {
            project_id: "p".into(),
            user_id: "u".into(),
            instances: (0..5).map(|i| (Uuid::new_v4(), spec(&format!("m{i}")))).collect(),
            min_count: 1,
            request_spec: request_spec(None),
            now: 1,
        };
        let (_, admitted) = plan_admit_boot(&world, &boot).expect("lowered");
        assert_eq!(admitted.len(), 1, "max_count lowered to the headroom");
        let strict = BootAdmission { min_count: 2, ..boot };
        let err = plan_admit_boot(&world, &strict).unwrap_err();
        assert_eq!(
            err,
            ComputeError::OverQuota(
                "Quota exceeded for instances: Requested 2-5, but already used 2 of 3 instances".into()
            )
        );
    }

    #[test]
    fn claim_tries_alternates_and_is_all_or_nothing() {
        let (mut world, roots) = world_with_hosts(2);
        let instances = admit(&mut world, 2, None);
        // Both want 3 of 4 VCPU on host 0 first; the second must fall back.
        let claims: Vec<InstanceChoices> = instances
            .iter()
            .map(|i| InstanceChoices { instance: *i, choices: vec![choice(roots[0], 3), choice(roots[1], 3)] })
            .collect();
        let (set, claimed) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
        assert_eq!(claimed.placed[0].1.uuid, roots[0]);
        assert_eq!(claimed.placed[1].1.uuid, roots[1]);
        world.apply(&set);
        assert!(world.compute.build_requests.is_empty());
        assert!(world.compute.instance_mappings.values().all(|m| m.cell.is_some()));

        // No room for two more 3-VCPU instances: nothing is claimed.
        let more = admit(&mut world, 2, None);
        let claims: Vec<InstanceChoices> = more
            .iter()
            .map(|i| InstanceChoices { instance: *i, choices: vec![choice(roots[0], 1), choice(roots[1], 3)] })
            .collect();
        assert_eq!(plan_claim(&world, &claims, 3, None).expect("plan"), Err(ClaimFailure::NoRoom(more[1])));
    }

    /// Instances' VCPU per root provider.
    fn vcpus_on(world: &World, instance: &Uuid) -> Vec<(Uuid, i64)> {
        let Some(consumer) = world.placement.consumers.get(instance) else { return Vec::new() };
        consumer.allocations.iter().map(|(p, a)| (*p, a.get("VCPU").copied().unwrap_or(0))).collect()
    }

    /// One instance claimed on host 0 with hosts 1 and 2 as alternates.
    fn claimed_with_alternates(world: &mut World, roots: &[Uuid]) -> Uuid {
        let instance = admit(world, 1, None)[0];
        let claims = vec![InstanceChoices {
            instance,
            choices: vec![choice(roots[0], 2), choice(roots[1], 2), choice(roots[2], 2)],
        }];
        let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        instance
    }

    #[test]
    fn claim_keeps_the_alternates_and_reschedule_consumes_them() {
        let (mut world, roots) = world_with_hosts(3);
        let instance = claimed_with_alternates(&mut world, &roots);
        let retry = &world.compute.request_specs[&instance].retry;
        assert_eq!(retry.num_attempts, 1);
        assert_eq!(retry.alternates, vec![choice(roots[1], 2), choice(roots[2], 2)]);

        // Failed on h0: one write replaces the allocation by host 1's.
        let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
        assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[1]].clone(), attempt: 2 });
        world.apply(&set);
        assert_eq!(vcpus_on(&world, &instance), vec![(roots[1], 2)], "never on both hosts");
        let retry = &world.compute.request_specs[&instance].retry;
        assert_eq!((retry.num_attempts, retry.failed_hosts.clone()), (2, vec!["h0".to_owned()]));
        assert_eq!(retry.alternates, vec![choice(roots[2], 2)]);

        // The same report again: nothing written, the same answer.
        let (again, decided) = plan_reschedule(&world, &instance, "h0", 3, 4).expect("plan");
        assert!(again.is_empty());
        assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[1]].clone(), attempt: 2 });

        // Failed on h1 too: host 2, the last attempt.
        let (set, decided) = plan_reschedule(&world, &instance, "h1", 3, 5).expect("plan");
        assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[2]].clone(), attempt: 3 });
        world.apply(&set);
        // And on h2: max_attempts reached, no allocation left.
        let (set, decided) = plan_reschedule(&world, &instance, "h2", 3, 6).expect("plan");
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
        world.apply(&set);
        assert!(!world.placement.consumers.contains_key(&instance));
        assert!(world.compute.request_specs[&instance].retry.alternates.is_empty());
        let (again, decided) = plan_reschedule(&world, &instance, "h2", 3, 7).expect("plan");
        assert!(again.is_empty());
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
    }

    #[test]
    fn reschedule_skips_an_alternate_taken_meanwhile() {
        let (mut world, roots) = world_with_hosts(3);
        let instance = claimed_with_alternates(&mut world, &roots);
        // Someone else takes 3 of host 1's 4 VCPU.
        let other = admit(&mut world, 1, None)[0];
        let claims = vec![InstanceChoices { instance: other, choices: vec![choice(roots[1], 3)] }];
        let (set, _) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
        assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[2]].clone(), attempt: 2 });
        world.apply(&set);
        assert_eq!(vcpus_on(&world, &instance), vec![(roots[2], 2)]);
        assert!(world.compute.request_specs[&instance].retry.alternates.is_empty(), "host 1 was skipped for good");

        // Host 2 fails too and nothing is left: the allocations go.
        let (set, decided) = plan_reschedule(&world, &instance, "h2", 3, 4).expect("plan");
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::NoHostsLeft));
        world.apply(&set);
        assert!(!world.placement.consumers.contains_key(&instance));
        assert!(Exhausted::NoHostsLeft
            .message(&instance, "boom")
            .starts_with("Exceeded maximum number of retries. Exhausted all hosts available"));
    }

    /// One instance claimed on host 0 alone (a pull claim: no alternates).
    fn claimed_alone(world: &mut World, root: Uuid) -> Uuid {
        let instance = admit(world, 1, None)[0];
        let claims = vec![InstanceChoices { instance, choices: vec![choice(root, 2)] }];
        let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        instance
    }

    fn claim_requeued(world: &World, instance: Uuid, root: Uuid) -> (WorldChangeSet, RequeueClaim) {
        plan_claim_requeued(world, &InstanceChoices { instance, choices: vec![choice(root, 2)] }, 5, None)
            .expect("plan")
    }

    #[test]
    fn requeue_releases_counts_and_a_claim_on_another_host_takes_it_once() {
        let (mut world, roots) = world_with_hosts(3);
        let instance = claimed_alone(&mut world, roots[0]);
        let nodes: Vec<ComputeNodeRef> = roots.iter().map(|r| world.compute.compute_nodes[r].clone()).collect();
        let node = |i: usize| nodes[i].clone();

        // Failed on h0: allocations released, attempt 2 waiting.
        let (set, decided) = plan_requeue(&world, &instance, "h0", 3, 3).expect("plan");
        assert_eq!(decided, Rescheduled::Requeued { attempt: 2, since: 3 });
        world.apply(&set);
        assert!(vcpus_on(&world, &instance).is_empty(), "no allocations while queued");
        assert_eq!(world.compute.counted("p", None).cores, 1, "counted as pending (its flavor) for quota");
        let retry = &world.compute.request_specs[&instance].retry;
        assert_eq!(
            (retry.num_attempts, retry.failed_hosts.clone(), retry.requeued_at),
            (2, vec!["h0".into()], Some(3))
        );
        // The same report again: nothing written, still waiting.
        let (again, decided) = plan_requeue(&world, &instance, "h0", 3, 4).expect("plan");
        assert!(again.is_empty());
        assert_eq!(decided, Rescheduled::Requeued { attempt: 2, since: 3 });

        // The failed host may not take it back; another host does, once.
        let (set, claimed) = claim_requeued(&world, instance, roots[0]);
        assert_eq!((set.is_empty(), claimed), (true, RequeueClaim::NoRoom));
        let (set, claimed) = claim_requeued(&world, instance, roots[1]);
        assert_eq!(claimed, RequeueClaim::Placed(node(1)));
        world.apply(&set);
        assert_eq!(vcpus_on(&world, &instance), vec![(roots[1], 2)]);
        assert_eq!(world.compute.request_specs[&instance].retry.requeued_at, None);
        assert_eq!(world.compute.counted("p", None).cores, 2, "counted by its allocations only");
        let (set, claimed) = claim_requeued(&world, instance, roots[2]);
        assert_eq!((set.is_empty(), claimed), (true, RequeueClaim::Gone), "a racing agent gets gone");
        // A re-drive of the first failure (a crash before the row moved)
        // answers the build on the new host.
        let (again, decided) = plan_requeue(&world, &instance, "h0", 3, 6).expect("plan");
        assert!(again.is_empty());
        assert_eq!(decided, Rescheduled::Build { node: node(1), attempt: 2 });

        // Fails on h1 (attempt 3), then on h2: max_attempts, nothing held.
        let (set, decided) = plan_requeue(&world, &instance, "h1", 3, 7).expect("plan");
        assert_eq!(decided, Rescheduled::Requeued { attempt: 3, since: 7 });
        world.apply(&set);
        let (set, _) = claim_requeued(&world, instance, roots[2]);
        world.apply(&set);
        let (set, decided) = plan_requeue(&world, &instance, "h2", 3, 8).expect("plan");
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
        world.apply(&set);
        assert!(vcpus_on(&world, &instance).is_empty());
        let retry = &world.compute.request_specs[&instance].retry;
        assert_eq!((retry.num_attempts, retry.failed_hosts.len(), retry.requeued_at), (3, 3, None));
        let (again, decided) = plan_requeue(&world, &instance, "h2", 3, 9).expect("plan");
        assert!(again.is_empty());
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
    }

    #[test]
    fn an_expired_requeue_is_claimed_by_nobody_and_a_deleted_one_is_gone() {
        let (mut world, roots) = world_with_hosts(2);
        let instance = claimed_alone(&mut world, roots[0]);
        let (set, _) = plan_requeue(&world, &instance, "h0", 3, 3).expect("plan");
        world.apply(&set);
        assert!(!plan_expire_requeued(&world, &instance, 2).1, "another requeue's timeout");
        let (set, expired) = plan_expire_requeued(&world, &instance, 3);
        assert!(expired);
        world.apply(&set);
        assert!(!plan_expire_requeued(&world, &instance, 3).1, "once");
        assert_eq!(world.compute.counted("p", None), Default::default(), "given up: nothing counted");
        assert_eq!(claim_requeued(&world, instance, roots[1]).1, RequeueClaim::Gone);
        let (set, decided) = plan_requeue(&world, &instance, "h0", 3, 4).expect("plan");
        assert!(set.is_empty());
        assert_eq!(decided, Rescheduled::Exhausted(Exhausted::NoHostsLeft));

        let other = claimed_alone(&mut world, roots[0]);
        let (set, _) = plan_requeue(&world, &other, "h0", 3, 3).expect("plan");
        world.apply(&set);
        world.apply(&plan_forget_instance(&world, &other));
        assert_eq!(claim_requeued(&world, other, roots[1]).1, RequeueClaim::Gone);
        assert_eq!(world.compute.counted("p", None), Default::default(), "forgotten: nothing counted");
    }

    #[test]
    fn reschedule_of_a_deleted_instance_does_nothing() {
        let (mut world, roots) = world_with_hosts(3);
        let instance = claimed_with_alternates(&mut world, &roots);
        world.apply(&plan_forget_instance(&world, &instance));
        let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
        assert!(set.is_empty());
        assert_eq!(decided, Rescheduled::Gone);
    }

    #[test]
    fn claim_keeps_hard_anti_affinity() {
        let (mut world, roots) = world_with_hosts(2);
        let group = ServerGroup {
            uuid: Uuid::new_v4(),
            name: "g".into(),
            project_id: "p".into(),
            user_id: "u".into(),
            policy: GroupPolicy::AntiAffinity,
            max_server_per_host: None,
            members: vec![],
            created_at: 0,
        };
        world.apply(&plan_create_server_group(&world, group.clone()).expect("group"));
        let first = admit(&mut world, 1, Some(group.uuid));
        let second = admit(&mut world, 1, Some(group.uuid));
        let claim = |instance: Uuid| vec![InstanceChoices { instance, choices: vec![choice(roots[0], 1)] }];
        let (set, _) = plan_claim(&world, &claim(first[0]), 2, None).expect("plan").expect("fits");
        world.apply(&set);
        // The second was scheduled concurrently onto the same host: refused.
        assert_eq!(plan_claim(&world, &claim(second[0]), 2, None).expect("plan"), Err(ClaimFailure::NoRoom(second[0])));
        let alternate =
            vec![InstanceChoices { instance: second[0], choices: vec![choice(roots[0], 1), choice(roots[1], 1)] }];
        let (_, claimed) = plan_claim(&world, &alternate, 2, None).expect("plan").expect("fits");
        assert_eq!(claimed.placed[0].1.uuid, roots[1]);
    }

    #[test]
    fn delete_pending_and_forget() {
        let (mut world, roots) = world_with_hosts(1);
        let instances = admit(&mut world, 2, None);
        let (set, deleted) = plan_delete_build_request(&world, &instances[0]);
        assert!(deleted);
        world.apply(&set);
        assert_eq!(world.compute.instance_count("p", None), 1);
        let claims = vec![InstanceChoices { instance: instances[1], choices: vec![choice(roots[0], 1)] }];
        let (set, _) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        assert!(!plan_delete_build_request(&world, &instances[1]).1, "scheduled: delete goes to the cell");
        world.apply(&plan_forget_instance(&world, &instances[1]));
        assert!(world.placement.consumers.is_empty());
        assert!(world.compute.instance_mappings.is_empty());
        assert_eq!(world.compute.counted("p", None), Default::default());
    }

    #[test]
    fn a_deleted_report_forgets_only_an_instance_queued_for_delete() {
        let (mut world, roots) = world_with_hosts(1);
        let instance = claimed_instance(&mut world, roots[0], 1);
        let migration = Uuid::new_v4();
        put_consumer(&mut world, migration, roots[0], Some("MIGRATION"), 10);
        let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
        assert!(!applies && set.is_empty(), "nobody deleted it: nothing changes");
        world.apply(&plan_queue_for_delete(&world, &instance));
        let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
        assert!(applies);
        world.apply(&set);
        assert!(world.placement.consumers.is_empty(), "instance and migration consumers gone");
        assert!(world.compute.instance_mappings.is_empty() && world.compute.request_specs.is_empty());
        let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
        assert!(!applies && set.is_empty(), "a repeated report changes nothing");
    }

    // -- heal (crate::heal): the plans re-check what the scan saw ----------

    fn claimed_instance(world: &mut World, root: Uuid, vcpus: i64) -> Uuid {
        let instance = admit(world, 1, None)[0];
        let claims = [InstanceChoices { instance, choices: vec![choice(root, vcpus)] }];
        let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        instance
    }

    fn put_consumer(world: &mut World, consumer: Uuid, root: Uuid, consumer_type: Option<&str>, now: i64) {
        let mut allocations = AllocationMap::new();
        allocations.entry(root).or_default().insert("VCPU".into(), 1);
        let request = ConsumerAllocations {
            consumer,
            project_id: "p".into(),
            user_id: "u".into(),
            generation: ConsumerGeneration::New,
            consumer_type: consumer_type.map(str::to_owned),
            allocations,
        };
        let mut set = WorldChangeSet::new();
        set.placement(plan_replace_allocations(&world.placement, &[request], now).expect("fits"));
        world.apply(&set);
    }

    #[test]
    fn heal_removes_an_orphan_only_when_still_orphaned_unchanged_and_old() {
        use crate::heal::{consumer_kind, plan_remove_orphan, ConsumerKind, Healed};
        let (mut world, roots) = world_with_hosts(1);
        let instance = claimed_instance(&mut world, roots[0], 1);
        let (orphan, migration, foreign) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        put_consumer(&mut world, orphan, roots[0], Some(CONSUMER_TYPE_INSTANCE), 10);
        put_consumer(&mut world, migration, roots[0], Some("MIGRATION"), 10);
        put_consumer(&mut world, foreign, roots[0], None, 10);
        assert_eq!(consumer_kind(&world, &instance), ConsumerKind::Known);
        assert_eq!(consumer_kind(&world, &orphan), ConsumerKind::OrphanInstance);
        assert_eq!(consumer_kind(&world, &migration), ConsumerKind::Migration);
        assert_eq!(consumer_kind(&world, &foreign), ConsumerKind::Foreign);
        let generation = world.placement.consumers[&orphan].row.generation;

        let (set, healed) = plan_remove_orphan(&world, &orphan, generation, 9);
        assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "inside the grace period");
        let (set, healed) = plan_remove_orphan(&world, &orphan, generation + 1, 20);
        assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "written since the scan");
        let (set, healed) = plan_remove_orphan(&world, &instance, 1, 20);
        assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "a mapped instance is never an orphan");
        let (set, healed) = plan_remove_orphan(&world, &orphan, generation, 20);
        assert_eq!(healed, Healed::Done);
        world.apply(&set);
        assert!(!world.placement.consumers.contains_key(&orphan));
        assert!(world.placement.consumers.contains_key(&instance));
    }

    #[test]
    fn heal_allocation_needs_the_mapping_no_allocations_and_room() {
        use crate::heal::{plan_heal_allocation, Healed};
        let (mut world, roots) = world_with_hosts(1);
        let instance = claimed_instance(&mut world, roots[0], 3);
        let cell = world.compute.instance_mappings[&instance].cell.expect("cell");
        let wanted = choice(roots[0], 3).allocations;
        let (_, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &wanted, 5);
        assert!(matches!(healed, Healed::Skipped(_)), "it has allocations");

        let generation = world.placement.consumers[&instance].row.generation;
        let mut gone = WorldChangeSet::new();
        gone.placement(ChangeSet {
            changes: vec![Change::DeleteConsumer { uuid: instance, expected_generation: generation }],
        });
        world.apply(&gone);
        let too_big = choice(roots[0], 5).allocations;
        let (set, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &too_big, 5);
        assert!(set.is_empty() && matches!(healed, Healed::Skipped(ref why) if why.starts_with("does not fit")));
        let (_, healed) = plan_heal_allocation(&world, &instance, &Uuid::new_v4(), &roots[0], &wanted, 5);
        assert!(matches!(healed, Healed::Skipped(_)), "mapped to another cell");

        let mut queued = world.clone();
        queued.apply(&plan_queue_for_delete(&queued, &instance));
        let (_, healed) = plan_heal_allocation(&queued, &instance, &cell, &roots[0], &wanted, 5);
        assert!(matches!(healed, Healed::Skipped(_)), "being deleted");

        let (set, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &wanted, 5);
        assert_eq!(healed, Healed::Done);
        world.apply(&set);
        let consumer = &world.placement.consumers[&instance];
        assert_eq!(consumer.allocations, wanted);
        assert_eq!(consumer.row.consumer_type.as_deref(), Some(CONSUMER_TYPE_INSTANCE));
        assert_eq!(world.compute.counted("p", None).cores, 3, "counted again for quota");
    }

    #[test]
    fn an_agent_credential_binds_its_host_and_speaks_only_for_it() {
        let (mut world, _) = world_with_hosts(2);
        let cell = *world.compute.cells.keys().next().expect("cell");
        // A mapped host bound to a noauth2 identity moves to the credential;
        // each binding change gives the state a new owners epoch (the
        // agents' long poll remembers its check by it), and a clone keeps it.
        let epoch = world.compute.owners_epoch;
        assert_eq!(world.clone().compute.owners_epoch, epoch);
        world.apply(&plan_bind_hosts(&world, &["h0".into()], cell, "admin").expect("bind"));
        let bound = world.compute.owners_epoch;
        assert_ne!(bound, epoch);
        world.apply(&plan_issue_agent_credential(&world, "h0", "abcd", 7).expect("issue"));
        assert_ne!(world.compute.owners_epoch, bound);
        assert_ne!(World::default().compute.owners_epoch, world.compute.owners_epoch, "a fresh state, a fresh epoch");
        assert_eq!(world.compute.host_mappings["h0"].owner.as_deref(), Some("berth-agent:h0"));
        assert!(check_host_owner(&world, "admin", ["h0"]).is_err(), "the old identity lost the host");
        assert!(check_host_owner(&world, "berth-agent:h0", ["h0"]).is_ok());
        assert!(agent_credential_matches(&world, "h0", "abcd"));
        assert!(!agent_credential_matches(&world, "h0", "abce"));
        assert!(!agent_credential_matches(&world, "h1", "abcd"));
        // A credential never speaks for another host, bound or not.
        assert!(matches!(check_host_owner(&world, "berth-agent:h0", ["h1"]), Err(ComputeError::Forbidden(_))));
        assert!(plan_bind_hosts(&world, &["new".into()], cell, "berth-agent:h0").is_err());
        // A host not yet registered is bound to its credential already.
        world.apply(&plan_issue_agent_credential(&world, "later", "ffff", 8).expect("issue"));
        assert!(matches!(plan_bind_hosts(&world, &["later".into()], cell, "admin"), Err(ComputeError::Forbidden(_))));
        assert!(plan_bind_hosts(&world, &["later".into()], cell, "berth-agent:later").is_ok());
        // Bad host names are refused.
        for bad in ["", "a:b", "a b", &"x".repeat(256)] {
            assert!(
                matches!(plan_issue_agent_credential(&world, bad, "00", 1), Err(ComputeError::Invalid(_))),
                "{bad:?}"
            );
        }
        // Revoking unbinds the host; anyone may register it again.
        world.apply(&plan_revoke_agent_credential(&world, "h0").expect("revoke"));
        assert_eq!(world.compute.host_mappings["h0"].owner, None);
        assert!(check_host_owner(&world, "admin", ["h0"]).is_ok());
        assert!(matches!(plan_revoke_agent_credential(&world, "h0"), Err(ComputeError::NotFound(_))));
    }
}
