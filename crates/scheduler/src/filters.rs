//! Host filters placement cannot express (Nova's `scheduler/filters`):
//! the host must be mapped to an enabled cell, its service up and enabled
//! (`ComputeFilter`), its aggregates must match the flavor's
//! `aggregate_instance_extra_specs:` keys (`AggregateInstanceExtraSpecsFilter`,
//! scoped keys only), `same_host`/`different_host` hints hold
//! (`SameHostFilter`, `DifferentHostFilter`), and the server group's hard
//! policy holds (`ServerGroupAffinityFilter`, `ServerGroupAntiAffinityFilter`,
//! counting the instances of the same request already placed).

use std::collections::HashMap;

use berth_compute_model::choice::{group_allows, host_of_instance};
use berth_compute_model::lease::named_reservation;
use berth_compute_model::{RequestSpec, ServerGroup, Timestamp, World, CELL0_UUID};

use crate::{HostHealth, HostState, HostStatus};

/// The filters whose answer does not change while one request's instances
/// are placed, with what they read from the request worked out once per
/// scheduler run rather than once per host (a run weighs up to
/// `max_placement_results` hosts).
pub(crate) struct StaticFilters<'a> {
    world: &'a World,
    ignore_hosts: &'a [String],
    now: Timestamp,
    lend_lead: Option<Timestamp>,
    /// The reservation the request names; `Err`: a hint that is not a
    /// reservation id, which matches no host.
    reservation: Result<Option<uuid::Uuid>, ()>,
    /// The flavor's scoped `aggregate_instance_extra_specs:` keys.
    scoped: Vec<(&'a str, &'a str)>,
    /// `same_host`: the hosts of the named instances (`None`: no hint).
    same_host: Option<Vec<&'a str>>,
    /// `different_host`: the hosts of the named instances.
    different_host: Vec<&'a str>,
}

impl<'a> StaticFilters<'a> {
    pub(crate) fn new(
        world: &'a World,
        spec: &'a RequestSpec,
        ignore_hosts: &'a [String],
        now: Timestamp,
        lend_lead: Option<Timestamp>,
    ) -> Self {
        let hosts_of = |instances: &[uuid::Uuid]| -> Vec<&'a str> {
            instances.iter().filter_map(|i| host_of_instance(world, i).map(|n| n.host.as_str())).collect()
        };
        StaticFilters {
            world,
            ignore_hosts,
            now,
            lend_lead,
            reservation: named_reservation(spec).map_err(|_| ()),
            scoped: scoped_extra_specs(spec),
            same_host: (!spec.same_host.is_empty()).then(|| hosts_of(&spec.same_host)),
            different_host: hosts_of(&spec.different_host),
        }
    }

    /// Does `host` pass? Its health when it does (the weighers read its
    /// failed builds from it).
    pub(crate) fn passes(&self, host: &HostState<'_>, health: &dyn HostHealth) -> Option<HostStatus> {
        let world = self.world;
        let name = host.node.host.as_str();
        if self.ignore_hosts.iter().any(|h| h == name) {
            return None;
        }
        // Mapped to an enabled cell (a host without a host mapping is never
        // chosen: its instances would be unreachable).
        let mapping = world.compute.host_mappings.get(name)?;
        if mapping.cell == CELL0_UUID || world.compute.cells.get(&mapping.cell).is_none_or(|c| c.disabled) {
            return None;
        }
        // ComputeFilter.
        let status = health.status(name);
        if !status.up || status.disabled {
            return None;
        }
        // Blazar's filter: a host enrolled for reservations takes only
        // boots for an active reservation that holds it, and such boots go
        // nowhere else; with pool lending, a pool host no lease needs within
        // the lead time takes ordinary boots too (`LeaseTables::host_allows`).
        let Ok(reservation) = self.reservation else { return None };
        let passes = world.compute.leases.host_allows(name, reservation, self.now, self.lend_lead)
            && aggregate_extra_specs_pass(world, name, &self.scoped)
            && self.same_host.as_ref().is_none_or(|hosts| hosts.contains(&name))
            && !self.different_host.contains(&name);
        passes.then_some(status)
    }
}

/// The server group's hard policy, given the members already on each host.
pub(crate) fn group_passes(group: &ServerGroup, host: &str, members_on: &HashMap<String, i64>) -> bool {
    group_allows(group, host, members_on)
}

const SCOPE: &str = "aggregate_instance_extra_specs";

/// The flavor's `aggregate_instance_extra_specs:KEY` requirements, but
/// the reservation's (Blazar's filter checks that one).
fn scoped_extra_specs(spec: &RequestSpec) -> Vec<(&str, &str)> {
    spec.flavor
        .extra_specs
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(SCOPE).and_then(|k| k.strip_prefix(':')).map(|k| (k, v.as_str())))
        .filter(|(k, _)| *k != "reservation")
        .collect()
}

/// `AggregateInstanceExtraSpecsFilter`: every scoped key is matched by
/// the metadata of one of the host's aggregates.
fn aggregate_extra_specs_pass(world: &World, host: &str, scoped: &[(&str, &str)]) -> bool {
    if scoped.is_empty() {
        return true;
    }
    let aggregates: Vec<_> = world.compute.aggregates_of_host(host).collect();
    scoped.iter().all(|(key, wanted)| {
        aggregates.iter().filter_map(|a| a.metadata.get(*key)).any(|value| extra_spec_matches(value, wanted))
    })
}

/// Nova's `extra_specs_ops.match`: `value` (aggregate metadata) against a
/// requirement with an optional operator (`<in>`, `<or>`, `s==`, `>=`, ...).
pub(crate) fn extra_spec_matches(value: &str, requirement: &str) -> bool {
    let mut words = requirement.split_whitespace();
    let Some(op) = words.next() else { return value == requirement };
    let rest: Vec<&str> = words.collect();
    let float = |s: &str| s.parse::<f64>().ok();
    let numeric = |f: fn(f64, f64) -> bool| match (float(value), rest.first().and_then(|w| float(w))) {
        (Some(a), Some(b)) => f(a, b),
        _ => false,
    };
    match op {
        "<or>" => {
            // `<or> v1 <or> v2`: the words are `v1 <or> v2 ...`.
            rest.iter().step_by(2).any(|w| *w == value)
        }
        "<in>" => rest.first().is_some_and(|w| value.contains(w)),
        "<all-in>" => rest.iter().all(|w| value.contains(w)),
        "=" | ">=" => numeric(|a, b| a >= b),
        "==" => numeric(|a, b| a == b),
        "!=" => numeric(|a, b| a != b),
        "<=" => numeric(|a, b| a <= b),
        "s==" => rest.first() == Some(&value),
        "s!=" => rest.first().is_some_and(|w| *w != value),
        "s<" => rest.first().is_some_and(|w| value < *w),
        "s<=" => rest.first().is_some_and(|w| value <= *w),
        "s>" => rest.first().is_some_and(|w| value > *w),
        "s>=" => rest.first().is_some_and(|w| value >= *w),
        _ => value == requirement,
    }
}

#[cfg(test)]
mod tests {
    use super::extra_spec_matches as m;

    #[test]
    fn extra_spec_operators() {
        assert!(m("ssd", "ssd"));
        assert!(!m("hdd", "ssd"));
        assert!(m("4", ">= 2"));
        assert!(!m("1", ">= 2"));
        assert!(m("fast-ssd", "<in> ssd"));
        assert!(m("b", "<or> a <or> b"));
        assert!(!m("c", "<or> a <or> b"));
        assert!(m("abc", "s== abc"));
        assert!(m("2", "== 2.0"));
    }
}
