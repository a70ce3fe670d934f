//! Healing: a lease's lost hosts replaced by free matching ones for its
//! window, or dropped and the lease degraded ([`plan_heal_host`]; the
//! decision `heal_lease` is shared with end policies and lending).

use berth_compute_model::lease::{Booking, Lease, LeaseStatus, ReservableHost, ReservationKind};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::admission::{Admission, Overlay, ReservationRequest};
use crate::updates::ParseQuery;
use crate::{resources, Result};

/// Mark a held host lost for `lease`'s reservations: replaced by a free
/// matching host for the window when one exists (`resources_changed`), else
/// dropped (`missing_resources`, the lease `degraded`).
pub fn plan_heal_host(
    world: &World,
    lease_id: Uuid,
    lost_host: i64,
    parse: ParseQuery<'_>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<Option<WorldChangeSet>> {
    Ok(replace_hosts(world, lease_id, &[lost_host], &[lost_host], false, parse, ids, now)?.map(|(set, _)| set))
}

/// Replace the `lost` hosts of a lease's reservations by free matching
/// hosts for its window (never one of `avoid`), marking the reservation
/// `resources_changed`. A host nothing can replace is dropped
/// (`missing_resources`) or, with `keep_missing`, kept and marked
/// `resources_changed`; either way the lease is `degraded`. Returns the
/// write and the hosts that found no replacement.
#[expect(clippy::too_many_arguments, reason = "the healing plan's inputs, each needed")]
pub(crate) fn replace_hosts(
    world: &World,
    lease_id: Uuid,
    lost: &[i64],
    avoid: &[i64],
    keep_missing: bool,
    parse: ParseQuery<'_>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<Option<(WorldChangeSet, Vec<i64>)>> {
    let Some(old) = world.compute.leases.leases.get(&lease_id) else { return Ok(None) };
    let Some((lease, unreplaced)) = heal_lease(world, old, lost, avoid, keep_missing, &[], &[], parse, now)? else {
        return Ok(None);
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease.clone()));
    resources::sync(world, Some(old), Some(&lease), ids, now, &mut set)?;
    Ok(Some((set, unreplaced)))
}

/// [`replace_hosts`]'s decision, on a lease row given (perhaps already
/// changed by the same plan): the new row and the hosts that found no
/// replacement. `added`: hosts enrolled in the same plan (a `release`
/// end's refill); `extra`: bookings made earlier in the same plan, by
/// host. `None`: nothing to heal.
#[expect(clippy::too_many_arguments, reason = "the healing plan's inputs, each needed")]
pub(crate) fn heal_lease(
    world: &World,
    old: &Lease,
    lost: &[i64],
    avoid: &[i64],
    keep_missing: bool,
    added: &[ReservableHost],
    extra: &[(i64, Booking)],
    parse: ParseQuery<'_>,
    now: Timestamp,
) -> Result<Option<(Lease, Vec<i64>)>> {
    let lease_id = old.id;
    // A lease whose end is due keeps its hosts: its end deletes the
    // servers on them (a time jump, or an outage, can make every host
    // look down at once).
    if old.end <= now || !matches!(old.status, LeaseStatus::Pending | LeaseStatus::Starting | LeaseStatus::Active) {
        return Ok(None);
    }
    let mut lease = old.clone();
    let mut admission = Admission {
        world,
        lease: lease_id,
        start: lease.start,
        end: lease.end,
        overlay: Overlay::default(),
        exclude: avoid,
        added,
    };
    for (host, booking) in extra {
        admission.overlay.0.entry(*host).or_default().push(*booking);
    }
    // The lease's other holdings stay booked.
    for reservation in &lease.reservations {
        for a in reservation.allocations.iter().filter(|a| !lost.contains(&a.host_id)) {
            admission.overlay.0.entry(a.host_id).or_default().push(Booking {
                lease: lease_id,
                reservation: reservation.id,
                start: lease.start,
                end: lease.end,
                demand: reservation.demand(),
                slots: a.slots,
            });
        }
    }
    let mut changed = false;
    let mut unreplaced = Vec::new();
    for &lost_host in lost {
        for reservation in &mut lease.reservations {
            let Some(pos) = reservation.allocations.iter().position(|a| a.host_id == lost_host) else { continue };
            changed = true;
            let lost = reservation.allocations.remove(pos);
            let (hyp, res) = match &reservation.kind {
                ReservationKind::Host { hypervisor_properties, resource_properties, .. } => {
                    (hypervisor_properties.clone(), resource_properties.clone())
                }
                ReservationKind::Instance { resource_properties, .. } => (String::new(), resource_properties.clone()),
            };
            let mut kind = reservation.kind.clone();
            match &mut kind {
                ReservationKind::Host { min, max, .. } => {
                    *min = 1;
                    *max = 1;
                }
                ReservationKind::Instance { amount, affinity, .. } => {
                    *amount = lost.slots;
                    // One replacement host takes all the lost slots.
                    if *affinity == Some(false) && lost.slots == 1 {
                        *affinity = None;
                    }
                }
            }
            let request = ReservationRequest { kind, hypervisor_query: parse(&hyp)?, resource_query: parse(&res)? };
            match admission.allocate(reservation.id, &request, &[], false) {
                Ok(more) => {
                    reservation.allocations.extend(more);
                    reservation.resources_changed = true;
                }
                Err(_) if keep_missing => {
                    reservation.allocations.push(lost);
                    reservation.resources_changed = true;
                    lease.degraded = true;
                    unreplaced.push(lost_host);
                }
                Err(_) => {
                    reservation.missing_resources = true;
                    lease.degraded = true;
                    unreplaced.push(lost_host);
                }
            }
            reservation.allocations.sort_by_key(|a| a.host_id);
            reservation.updated_at = Some(now);
        }
    }
    if !changed {
        return Ok(None);
    }
    lease.updated_at = Some(now);
    Ok(Some((lease, unreplaced)))
}
