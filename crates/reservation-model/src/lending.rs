//! Pool lending: the reservation pool's idle hosts serve ordinary boots
//! until a lease needs them, and are handed back empty.
//!
//! A pool host is *lent* while no booking holds it within the lending
//! lead (`LeaseTables::lent`): the scheduler and the claim let ordinary
//! boots land there (`LeaseTables::host_allows`). Once a lease that needs
//! the host comes within the lead, the host is *reclaimed*: it takes no
//! more ordinary boots, and the runner live-migrates the ordinary servers
//! it still carries ([`drain_targets`]). At the lease's start, a held host
//! that is still busy is swapped for a matching free host of the pool
//! ([`plan_start_on_free_hosts`]); when there is none, the reservation
//! keeps the host and is marked `resources_changed` (the lease
//! `degraded`), never started on a host silently shared.
//!
//! "Ordinary" servers are the instance consumers whose request spec names
//! no reservation (scheduler hint or reservation flavor): on a pool host
//! they can only be lent servers (or servers from before the host was
//! enrolled), which the pool must get rid of.

use std::collections::BTreeSet;

use berth_model::Uuid;

use berth_compute_model::lease::{named_reservation, LeaseStatus, ReservableHost};
use berth_compute_model::{
    ComputeChange, Timestamp, World, WorldChange, WorldChangeSet, CONSUMER_TYPE_INSTANCE, CONSUMER_TYPE_MIGRATION,
};

use super::{replace_hosts, ParseQuery, Result};

/// Every consumer with an allocation on a compute host's providers (its
/// nodes and their children), in uuid order.
pub fn consumers_on_host(world: &World, service_host: &str) -> BTreeSet<Uuid> {
    let mut out = BTreeSet::new();
    for node in world.compute.nodes_by_host.get(service_host).into_iter().flatten() {
        let mut stack = vec![*node];
        while let Some(p) = stack.pop() {
            let Some(provider) = world.placement.provider(&p) else { continue };
            stack.extend(provider.children.iter().copied());
            out.extend(provider.consumers.iter().copied());
        }
    }
    out
}

fn consumer_type<'w>(world: &'w World, consumer: &Uuid) -> Option<&'w str> {
    world.placement.consumers.get(consumer).and_then(|c| c.row.consumer_type.as_deref())
}

/// The servers (INSTANCE consumers) on a compute host, in uuid order.
pub fn instances_on_host(world: &World, service_host: &str) -> Vec<Uuid> {
    consumers_on_host(world, service_host)
        .into_iter()
        .filter(|c| consumer_type(world, c) == Some(CONSUMER_TYPE_INSTANCE))
        .collect()
}

/// An instance consumer whose request spec names no reservation.
fn ordinary(world: &World, consumer: &Uuid) -> bool {
    consumer_type(world, consumer) == Some(CONSUMER_TYPE_INSTANCE)
        && world.compute.request_specs.get(consumer).is_none_or(|spec| named_reservation(spec) == Ok(None))
}

/// The ordinary servers (instance consumers naming no reservation) on a
/// pool host.
pub fn ordinary_servers(world: &World, host: &ReservableHost) -> Vec<Uuid> {
    consumers_on_host(world, &host.service_name).into_iter().filter(|c| ordinary(world, c)).collect()
}

/// Is the host still carrying what a lease starting on it must not find:
/// an ordinary server, or a migration in flight (its source allocation)?
pub fn host_busy(world: &World, host: &ReservableHost) -> bool {
    consumers_on_host(world, &host.service_name)
        .iter()
        .any(|c| ordinary(world, c) || consumer_type(world, c) == Some(CONSUMER_TYPE_MIGRATION))
}

/// A reclaimed pool host with ordinary servers to move away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTarget {
    /// Pool host id.
    pub host_id: i64,
    /// Its compute service host.
    pub service_host: String,
    /// The earliest start of a booking that needs it (the drain's
    /// deadline).
    pub needed_at: Timestamp,
    /// The ordinary servers on it.
    pub servers: Vec<Uuid>,
}

/// The pool hosts no longer lent at `now` (a booking holds them within
/// `lend_lead`) that still carry ordinary servers, by deadline.
pub fn drain_targets(world: &World, now: Timestamp, lend_lead: Timestamp) -> Vec<DrainTarget> {
    let tables = &world.compute.leases;
    let mut out = Vec::new();
    let horizon = now.saturating_add(lend_lead.max(0)).saturating_add(1);
    for (host_id, bookings) in &tables.bookings {
        let Some(needed_at) = bookings.overlapping(now, horizon).map(|b| b.start).min() else { continue };
        let Some(host) = tables.hosts.get(host_id) else { continue };
        let servers = ordinary_servers(world, host);
        if !servers.is_empty() {
            out.push(DrainTarget { host_id: *host_id, service_host: host.service_name.clone(), needed_at, servers });
        }
    }
    out.sort_by_key(|t| (t.needed_at, t.host_id));
    out
}

/// How many pool hosts are lent at `now`.
pub fn lent_hosts(world: &World, now: Timestamp, lend_lead: Option<Timestamp>) -> usize {
    let tables = &world.compute.leases;
    tables
        .hosts
        .values()
        .filter(|h| {
            h.reservable
                && h.power.state == berth_compute_model::lease::PowerState::On
                && tables.lent(h.id, now, lend_lead)
        })
        .count()
}

/// What [`plan_start_on_free_hosts`] did to a starting lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartReport {
    /// Busy held hosts swapped for free ones: `(busy, replacement)`.
    pub replaced: Vec<(i64, i64)>,
    /// Busy held hosts nothing could replace (kept; the reservation is
    /// marked `resources_changed`, the lease `degraded`).
    pub late: Vec<i64>,
}

/// Before a lease starts: every held host that is still busy
/// ([`host_busy`]) is replaced by a matching pool host that is free for
/// the window and empty now, in one write; a busy host nothing can
/// replace stays held and the reservation is marked `resources_changed`
/// (the lease `degraded`). `None` when every held host is empty.
pub fn plan_start_on_free_hosts(
    world: &World,
    lease_id: Uuid,
    parse: ParseQuery<'_>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<Option<(WorldChangeSet, StartReport)>> {
    let tables = &world.compute.leases;
    let Some(lease) = tables.leases.get(&lease_id) else { return Ok(None) };
    if !matches!(lease.status, LeaseStatus::Pending | LeaseStatus::Starting) {
        return Ok(None);
    }
    let held: BTreeSet<i64> = lease.reservations.iter().flat_map(|r| r.allocations.iter().map(|a| a.host_id)).collect();
    let busy: Vec<i64> =
        held.iter().copied().filter(|id| tables.hosts.get(id).is_some_and(|h| host_busy(world, h))).collect();
    if busy.is_empty() {
        return Ok(None);
    }
    // Replacements must be empty now, not only free in the window.
    let avoid: Vec<i64> = tables.hosts.values().filter(|h| host_busy(world, h)).map(|h| h.id).collect();
    let Some((set, late)) = replace_hosts(world, lease_id, &busy, &avoid, true, parse, ids, now)? else {
        return Ok(None);
    };
    let mut report = StartReport { replaced: Vec::new(), late };

    let after: BTreeSet<i64> = set
        .changes
        .iter()
        .filter_map(|c| match c {
            WorldChange::Compute(ComputeChange::PutLease(l)) if l.id == lease_id => Some(l),
            _ => None,
        })
        .flat_map(|l| l.reservations.iter().flat_map(|r| r.allocations.iter().map(|a| a.host_id)))
        .collect();
    let mut added = after.difference(&held).copied();
    for host in busy.iter().filter(|h| !report.late.contains(h)) {
        if let Some(new_host) = added.next() {
            report.replaced.push((*host, new_host));
        }
    }
    Ok(Some((set, report)))
}
