//! Push mode's reschedule: a build that failed on its host moves to the
//! next alternate its claim kept ([`plan_reschedule`], one write, the
//! scheduler not asked again), or gives up ([`Exhausted`], with Nova's
//! messages). [`Rescheduled`] is also pull mode's answer.

use std::collections::{BTreeSet, HashMap};

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{Change, ChangeSet};
use uuid::Uuid;

use super::Result;
use crate::choice::{fits, group_allows, group_hosts, host_of_instance, HostChoice};
use crate::state::ComputeChange as C;
use crate::{ComputeError, ComputeNodeRef, Timestamp, World, WorldChangeSet, CONSUMER_TYPE_INSTANCE};

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
    /// Pull mode ([`plan_requeue`](super::plan_requeue)): back on its
    /// queue, without allocations, as attempt number `attempt`, waiting
    /// since `since` for an agent's claim
    /// ([`plan_claim_requeued`](super::plan_claim_requeued)).
    Requeued {
        /// Attempt number the next claim builds (2 for the first requeue).
        attempt: i64,
        /// When it was requeued.
        since: Timestamp,
    },
}

/// Why a build that failed after `attempts` attempts is not retried:
/// the attempts are used up, or (with attempts left) no host is left.
pub(super) fn why_exhausted(attempts: i64, max_attempts: usize) -> Exhausted {
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
