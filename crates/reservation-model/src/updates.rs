//! Lease updates and deletes: [`LeaseUpdate`] admitted against every
//! other lease's bookings ([`plan_update_lease`]: Blazar's rules for
//! started leases, `before_end` re-armed) and [`plan_delete_lease`].

use berth_compute_model::lease::{
    EventStatus, EventType, Lease, LeaseEvent, LeaseStatus, ReservationKind, ReservationStatus,
};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::admission::{
    check_amount, check_before_end, check_min_max, Admission, Overlay, ReservationRequest, ACTIVE_SLOTS_KEPT,
    NOT_ENOUGH_HOSTS,
};
use crate::query::Query;
use crate::{end_policy, resources, Result};

/// Changes to one existing reservation (`None`: unchanged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReservationUpdate {
    /// Reservation id.
    pub id: Uuid,
    /// New `min` (hosts).
    pub min: Option<i64>,
    /// New `max` (hosts).
    pub max: Option<i64>,
    /// New `amount` (slots).
    pub amount: Option<i64>,
    /// New `hypervisor_properties` (text, parsed).
    pub hypervisor_properties: Option<(String, Option<Query>)>,
    /// New `resource_properties` (text, parsed).
    pub resource_properties: Option<(String, Option<Query>)>,
    /// New `vcpus` per slot (instance reservations not started).
    pub vcpus: Option<i64>,
    /// New `memory_mb` per slot.
    pub memory_mb: Option<i64>,
    /// New `disk_gb` per slot.
    pub disk_gb: Option<i64>,
    /// New `affinity` (`Some(None)`: none).
    pub affinity: Option<Option<bool>>,
}

impl ReservationUpdate {
    /// Does it change an instance reservation's shape or placement rule
    /// (what Blazar allows only before the start)?
    fn reshapes_slots(&self) -> bool {
        self.resource_properties.is_some()
            || self.vcpus.is_some()
            || self.memory_mb.is_some()
            || self.disk_gb.is_some()
            || self.affinity.is_some()
    }
}

/// A lease update.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaseUpdate {
    /// New name.
    pub name: Option<String>,
    /// New start.
    pub start: Option<Timestamp>,
    /// New end.
    pub end: Option<Timestamp>,
    /// New `before_end_date`.
    pub before_end: Option<Timestamp>,
    /// Reservation changes.
    pub reservations: Vec<ReservationUpdate>,
    /// New end policy (`on_end`, `grace`), checked by
    /// [`end_policy::check_end_choice`].
    pub end_choice: Option<end_policy::EndChoice>,
}

/// The stored query texts of a reservation, parsed by the caller.
pub type ParseQuery<'a> = &'a dyn Fn(&str) -> Result<Option<Query>>;

/// Admit an update of a lease: the new shape is admitted against every
/// *other* lease's bookings (so a lease never conflicts with itself), its
/// current hosts or slots kept first. Shrinking therefore always succeeds.
/// Started leases keep Blazar's rules: the start cannot move, hosts cannot
/// be taken away, `amount` only grows.
pub fn plan_update_lease(
    world: &World,
    lease_id: Uuid,
    update: &LeaseUpdate,
    parse: ParseQuery<'_>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Lease)> {
    let old = world
        .compute
        .leases
        .leases
        .get(&lease_id)
        .ok_or_else(|| ComputeError::NotFound(format!("Object with {{'lease_id': '{lease_id}'}} not found")))?;
    let mut lease = old.clone();
    if let Some(name) = &update.name {
        lease.name = name.clone();
    }
    if let Some(choice) = update.end_choice {
        if old.is_over() || matches!(old.status, LeaseStatus::Terminating) {
            return Err(ComputeError::Invalid("The end policy of an ended lease cannot change".into()));
        }
        end_policy::check_end_choice(&lease, choice)?;
        lease.on_end = choice.on_end;
        lease.grace = choice.grace;
    }
    let only_name =
        update.start.is_none() && update.end.is_none() && update.before_end.is_none() && update.reservations.is_empty();
    if only_name {
        lease.updated_at = Some(now);
        let mut set = WorldChangeSet::new();
        set.compute(C::PutLease(lease.clone()));
        return Ok((set, lease));
    }
    let started = old.start <= now && !matches!(old.status, LeaseStatus::Pending);
    let start = update.start.unwrap_or(old.start);
    let end = update.end.unwrap_or(old.end);
    // Blazar's checks, in its order, against the current minute (its "now"
    // is truncated like a `now` date): a start or end at the current minute
    // is accepted, and an end equal to the start too (the lease ends at the
    // next pass of the event runner). berth adds two: a lease that has
    // begun to start (its start event ran) keeps its start even within its
    // first minute, and one that ended stays ended.
    let minute = now - now.rem_euclid(60);
    if (old.start < minute || started) && start != old.start {
        return Err(ComputeError::Invalid("Cannot modify the start date of already started leases".into()));
    }
    if old.start > minute && start < minute {
        return Err(ComputeError::Invalid("Start date must be later than current date".into()));
    }
    if old.end < minute || old.is_over() {
        return Err(ComputeError::Invalid("Terminated leases can only be renamed".into()));
    }
    if end < minute || end < start {
        return Err(ComputeError::Invalid("End date must be later than current and start date".into()));
    }
    check_before_end(start, end, update.before_end)?;
    for u in &update.reservations {
        if !old.reservations.iter().any(|r| r.id == u.id) {
            return Err(ComputeError::Invalid(format!(
                "Please enter valid reservation IDs. Invalid reservation IDs are: {}",
                u.id
            )));
        }
    }
    lease.start = start;
    lease.end = end;
    let mut admission =
        Admission { world, lease: lease_id, start, end, overlay: Overlay::default(), exclude: &[], added: &[] };
    for reservation in &mut lease.reservations {
        let change = update.reservations.iter().find(|u| u.id == reservation.id);
        let (mut hyp_text, mut res_text) = (String::new(), String::new());
        match &mut reservation.kind {
            ReservationKind::Host { min, max, hypervisor_properties, resource_properties, .. } => {
                if let Some(c) = change {
                    *min = c.min.unwrap_or(*min);
                    *max = c.max.unwrap_or(*max);
                    if let Some((text, _)) = &c.hypervisor_properties {
                        *hypervisor_properties = text.clone();
                    }
                    if let Some((text, _)) = &c.resource_properties {
                        *resource_properties = text.clone();
                    }
                    // `amount` means nothing here; Blazar ignores it.
                }
                check_min_max(*min, *max)?;
                if started && (*max as usize) < reservation.allocations.len() {
                    // Blazar: a started reservation cannot give hosts back.
                    return Err(ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
                }
                hyp_text.clone_from(hypervisor_properties);
                res_text.clone_from(resource_properties);
            }
            ReservationKind::Instance { vcpus, memory_mb, disk_gb, amount, affinity, resource_properties, .. } => {
                // Blazar's update_reservation, in its order.
                let extends = start < old.start || end > old.end;
                if started && change.is_some_and(ReservationUpdate::reshapes_slots) {
                    return Err(ComputeError::Conflict("An active reservation only accepts to update amount.".into()));
                }
                let touches = change.is_some_and(|c| c.reshapes_slots() || c.amount.is_some());
                if reservation.status == ReservationStatus::Error && (touches || extends) {
                    return Err(ComputeError::Conflict(
                        "An error reservation doesn't accept an updating request.".into(),
                    ));
                }
                if let Some(c) = change {
                    if let Some(n) = c.amount {
                        check_amount(n)?;
                        if started && n < *amount {
                            return Err(ComputeError::Conflict(ACTIVE_SLOTS_KEPT.into()));
                        }
                        *amount = n;
                    }
                    if let Some((text, _)) = &c.resource_properties {
                        *resource_properties = text.clone();
                    }
                    *vcpus = c.vcpus.unwrap_or(*vcpus);
                    *memory_mb = c.memory_mb.unwrap_or(*memory_mb);
                    *disk_gb = c.disk_gb.unwrap_or(*disk_gb);
                    *affinity = c.affinity.unwrap_or(*affinity);
                    // `min` and `max` mean nothing here; Blazar ignores them.
                }
                res_text.clone_from(resource_properties);
            }
        }
        let request = ReservationRequest {
            kind: reservation.kind.clone(),
            hypervisor_query: parse(&hyp_text)?,
            resource_query: parse(&res_text)?,
        };
        reservation.allocations =
            admission.allocate(reservation.id, &request, &reservation.allocations.clone(), started)?;
        reservation.updated_at = Some(now);
    }
    for event in &mut lease.events {
        if event.event_type == EventType::BeforeEndLease {
            rearm_before_end(event, old.end, start, end, update.before_end, ids, now);
            continue;
        }
        if event.status != EventStatus::Undone {
            continue;
        }
        let time = if event.event_type == EventType::StartLease { start } else { end };
        if time != event.time {
            event.time = time;
            event.updated_at = Some(now);
        }
    }
    lease.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease.clone()));
    resources::sync(world, Some(old), Some(&lease), ids, now, &mut set)?;
    Ok((set, lease))
}

/// Blazar's `_update_before_end_event`, on every update that is not a
/// rename: the `before_end_lease` event moves to `before_end` when given,
/// else keeps its distance to the end (`new end - (old end - its time)`),
/// never before the start, whatever its status; a DONE one is armed again
/// (UNDONE), so a prolonged lease warns (or snapshots) again, at once when
/// that time has passed already. The armed-again event is a new
/// occurrence with a new id: its snapshots and its notification are its
/// own, not repeats of the first run's. One in progress only moves (as in
/// Blazar, it is not armed again when it finishes).
fn rearm_before_end(
    event: &mut LeaseEvent,
    old_end: Timestamp,
    start: Timestamp,
    end: Timestamp,
    before_end: Option<Timestamp>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) {
    let time = before_end.unwrap_or(end - (old_end - event.time)).max(start);
    let rearm = event.status == EventStatus::Done;
    if rearm {
        event.id = ids();
        event.status = EventStatus::Undone;
    }
    if rearm || time != event.time {
        event.time = time;
        event.updated_at = Some(now);
    }
}

/// Delete a lease row and its reservations' flavors, classes and
/// inventories (the runtime has ended an active lease first: a reservation
/// inventory still in use is a conflict).
pub fn plan_delete_lease(world: &World, lease_id: Uuid) -> Result<WorldChangeSet> {
    let Some(old) = world.compute.leases.leases.get(&lease_id) else {
        return Err(ComputeError::NotFound(format!("Object with {{'lease_id': '{lease_id}'}} not found")));
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteLease(lease_id));
    // Nothing is created for a deleted lease, so no id is ever asked for.
    resources::sync(world, Some(old), None, &mut Uuid::nil, 0, &mut set)?;
    Ok(set)
}
