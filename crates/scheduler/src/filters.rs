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

use crate::{HostHealth, HostState};

/// The filters whose answer does not change while one request's instances
/// are placed.
pub(crate) fn passes_static(
    world: &World,
    host: &HostState<'_>,
    spec: &RequestSpec,
    health: &dyn HostHealth,
    ignore_hosts: &[String],
    now: Timestamp,
    lend_lead: Option<Timestamp>,
) -> bool {
    let name = host.node.host.as_str();
    if ignore_hosts.iter().any(|h| h == name) {
        return false;
    }
    // Mapped to an enabled cell (a host without a host mapping is never
    // chosen: its instances would be unreachable).
    let Some(mapping) = world.compute.host_mappings.get(name) else { return false };
    if mapping.cell == CELL0_UUID || world.compute.cells.get(&mapping.cell).is_none_or(|c| c.disabled) {
        return false;
    }
    // ComputeFilter.
    if !health.is_up(name) || health.is_disabled(name) {
        return false;
    }
    reservation_pass(world, name, spec, now, lend_lead)
        && aggregate_extra_specs_pass(world, name, spec)
        && same_host_pass(world, name, spec)
        && different_host_pass(world, name, spec)
}

/// The server group's hard policy, given the members already on each host.
pub(crate) fn group_passes(group: &ServerGroup, host: &str, members_on: &HashMap<String, i64>) -> bool {
    group_allows(group, host, members_on)
}

fn same_host_pass(world: &World, host: &str, spec: &RequestSpec) -> bool {
    spec.same_host.is_empty()
        || spec.same_host.iter().any(|i| host_of_instance(world, i).is_some_and(|n| n.host == host))
}

fn different_host_pass(world: &World, host: &str, spec: &RequestSpec) -> bool {
    !spec.different_host.iter().any(|i| host_of_instance(world, i).is_some_and(|n| n.host == host))
}

/// Blazar's filter: a host enrolled for reservations takes only boots for
/// an active reservation that holds it (scheduler hint `reservation`, or a
/// reservation flavor's `aggregate_instance_extra_specs:reservation`), and
/// such boots go nowhere else; with pool lending, a pool host no lease
/// needs within the lead time takes ordinary boots too
/// (`LeaseTables::host_allows`).
fn reservation_pass(
    world: &World,
    host: &str,
    spec: &RequestSpec,
    now: Timestamp,
    lend_lead: Option<Timestamp>,
) -> bool {
    match named_reservation(spec) {
        Ok(reservation) => world.compute.leases.host_allows(host, reservation, now, lend_lead),
        // A hint that is not a reservation id matches no host.
        Err(_) => false,
    }
}

const SCOPE: &str = "aggregate_instance_extra_specs";

fn aggregate_extra_specs_pass(world: &World, host: &str, spec: &RequestSpec) -> bool {
    let scoped: Vec<(&str, &str)> = spec
        .flavor
        .extra_specs
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(SCOPE).and_then(|k| k.strip_prefix(':')).map(|k| (k, v.as_str())))
        .filter(|(k, _)| *k != "reservation")
        .collect();
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
