//! Lease events: which are due ([`due_events`], ends before starts at
//! one instant), what one must wait for ([`event_blocked_by`],
//! [`start_blocked_by`]), and the writes that begin and finish one
//! ([`plan_event_begin`], [`plan_event_finish`]).

use berth_compute_model::lease::{EndPolicy, EventStatus, EventType, Lease, LeaseStatus, ReservationStatus};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::{end_policy, Result};

/// Due events, in the order they must run: by time, and at one instant
/// ends before starts. Includes events left `IN_PROGRESS` by a crash.
pub fn due_events(world: &World, now: Timestamp) -> Vec<(Uuid, Uuid, EventType, Timestamp)> {
    world
        .compute
        .leases
        .pending_events
        .iter()
        .take_while(|(time, ..)| *time <= now)
        .map(|(time, kind, lease, event)| (*lease, *event, *kind, *time))
        .collect()
}

/// What a due event must wait for, if anything (the lease to wait on):
/// a lease's own events run in order (its end never before its start or
/// its `before_end`; after an outage all three may be due at once, and a
/// start may be waiting), and a start waits for every lease whose window
/// on its hosts ended by its start to end ([`start_blocked_by`]).
pub fn event_blocked_by(world: &World, lease: &Lease, kind: EventType) -> Option<Uuid> {
    let done = |k: EventType| lease.event(k).is_none_or(|e| e.status == EventStatus::Done);
    match kind {
        EventType::StartLease => start_blocked_by(world, lease),
        EventType::BeforeEndLease => (!done(EventType::StartLease)).then_some(lease.id),
        EventType::EndLease => (!done(EventType::StartLease) || !done(EventType::BeforeEndLease)).then_some(lease.id),
    }
}

/// A lease whose end has not run yet and that holds a host `lease` needs,
/// in a window that ends by `lease`'s start: `lease` cannot start before
/// that end has run (after an outage, the servers of a whole-host lease
/// must go before the next one takes the host). A booking whose window
/// overlaps `lease`'s does not hold it back: admission let the two share
/// the host (instance slots that fit together), so each starts on time.
pub fn start_blocked_by(world: &World, lease: &Lease) -> Option<Uuid> {
    let tables = &world.compute.leases;
    for reservation in &lease.reservations {
        for a in &reservation.allocations {
            for b in tables.bookings.get(&a.host_id).into_iter().flatten() {
                if b.lease == lease.id || b.start >= lease.start || b.end > lease.start {
                    continue;
                }
                let other = tables.leases.get(&b.lease)?;
                let ended = other.event(EventType::EndLease).is_some_and(|e| e.status == EventStatus::Done);
                // A recycling host whose grace is over waits for its
                // servers to be deleted (the runner's recycle pass).
                let recycling = other.reservations.iter().any(|r| r.recycling.contains(&a.host_id));
                if (!ended && !other.is_over()) || recycling {
                    return Some(other.id);
                }
            }
        }
    }
    None
}

/// Mark an event in progress (the lease becomes STARTING / TERMINATING).
/// Redoing an event already in progress writes nothing.
pub fn plan_event_begin(
    world: &World,
    lease_id: Uuid,
    event_id: Uuid,
    now: Timestamp,
) -> Result<Option<WorldChangeSet>> {
    let Some(old) = world.compute.leases.leases.get(&lease_id) else { return Ok(None) };
    let mut lease = old.clone();
    let Some(event) = lease.events.iter_mut().find(|e| e.id == event_id) else { return Ok(None) };
    if event.status != EventStatus::Undone {
        return Ok(None);
    }
    event.status = EventStatus::InProgress;
    event.updated_at = Some(now);
    match event.event_type {
        EventType::StartLease => lease.status = LeaseStatus::Starting,
        EventType::EndLease => lease.status = LeaseStatus::Terminating,
        EventType::BeforeEndLease => {}
    }
    lease.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease));
    Ok(Some(set))
}

/// Finish an event: DONE, and the lease and its reservations move on
/// (start → ACTIVE/active, end → TERMINATED/deleted, which frees the
/// bookings). Finishing twice writes nothing.
pub fn plan_event_finish(
    world: &World,
    lease_id: Uuid,
    event_id: Uuid,
    failed: bool,
    now: Timestamp,
) -> Result<Option<WorldChangeSet>> {
    let Some(lease) = finish_lease(world, lease_id, event_id, failed, now) else { return Ok(None) };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease));
    Ok(Some(set))
}

/// [`plan_event_finish`]'s new lease row (`None`: nothing to do). A
/// `recycle` end records the held hosts still carrying servers
/// ([`end_policy::recycle_at_end`]).
pub(crate) fn finish_lease(
    world: &World,
    lease_id: Uuid,
    event_id: Uuid,
    failed: bool,
    now: Timestamp,
) -> Option<Lease> {
    let old = world.compute.leases.leases.get(&lease_id)?;
    let mut lease = old.clone();
    let event = lease.events.iter_mut().find(|e| e.id == event_id)?;
    if matches!(event.status, EventStatus::Done | EventStatus::Error) {
        return None;
    }
    event.status = if failed { EventStatus::Error } else { EventStatus::Done };
    event.updated_at = Some(now);
    let kind = event.event_type;
    if failed {
        lease.status = LeaseStatus::Error;
    } else {
        match kind {
            EventType::StartLease => {
                lease.status = LeaseStatus::Active;
                for r in &mut lease.reservations {
                    r.status = ReservationStatus::Active;
                    r.updated_at = Some(now);
                }
            }
            EventType::EndLease => {
                lease.status = LeaseStatus::Terminated;
                for r in &mut lease.reservations {
                    r.status = ReservationStatus::Deleted;
                    r.updated_at = Some(now);
                }
                // A before_end that never ran is moot now.
                for e in &mut lease.events {
                    if e.event_type == EventType::BeforeEndLease && e.status == EventStatus::Undone {
                        e.status = EventStatus::Done;
                        e.updated_at = Some(now);
                    }
                }
                if lease.on_end == EndPolicy::Recycle {
                    end_policy::recycle_at_end(world, &mut lease);
                }
            }
            EventType::BeforeEndLease => {}
        }
    }
    lease.updated_at = Some(now);
    Some(lease)
}
