//! Lease admission: a lease as requested ([`LeaseRequest`]) and the
//! `Admission` that chooses hosts or slots for each reservation in its
//! window (current holdings kept first; whole hosts need no overlapping
//! booking; slots need the *peak* usage in the window plus the new slots
//! within the host's capacity), the checks Blazar makes on a request, and
//! [`plan_create_lease`] / [`plan_create_lease_ending`].

use std::collections::HashMap;

use berth_compute_model::lease::{
    held_until, Booking, Demand, EventStatus, EventType, HostAllocation, Lease, LeaseEvent, LeaseStatus, LeaseTables,
    ReservableHost, Reservation, ReservationKind, ReservationStatus,
};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::query::{hypervisor_field_now, Prop, Query};
use crate::{capacity, end_policy, resources, Result};

/// Blazar's "Not enough hosts available".
pub const NOT_ENOUGH_HOSTS: &str = "Not enough hosts available";

/// One reservation as requested.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationRequest {
    /// What to book (`allocations` are chosen by admission).
    pub kind: ReservationKind,
    /// Parsed `hypervisor_properties`.
    pub hypervisor_query: Option<Query>,
    /// Parsed `resource_properties`.
    pub resource_query: Option<Query>,
}

/// A lease as requested.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRequest {
    /// Name.
    pub name: String,
    /// Owner user.
    pub user_id: String,
    /// Owner project.
    pub project_id: String,
    /// Start.
    pub start: Timestamp,
    /// End.
    pub end: Timestamp,
    /// `before_end_date`, if given.
    pub before_end: Option<Timestamp>,
    /// Reservations.
    pub reservations: Vec<ReservationRequest>,
}

/// Blazar's default `minutes_before_end_lease`.
pub const MINUTES_BEFORE_END: i64 = 60;

/// Bookings admitted earlier in the same plan (other reservations of the
/// same lease), on top of the world's.
#[derive(Default)]
pub(crate) struct Overlay(pub(crate) HashMap<i64, Vec<Booking>>);

pub(crate) struct Admission<'a> {
    pub(crate) world: &'a World,
    /// The lease being admitted or updated (its stored bookings are ignored).
    pub(crate) lease: Uuid,
    pub(crate) start: Timestamp,
    pub(crate) end: Timestamp,
    pub(crate) overlay: Overlay,
    /// Hosts that may not be chosen (healing: the lost ones).
    pub(crate) exclude: &'a [i64],
    /// Hosts enrolled in the same plan (a `release` end's refill), not in
    /// the world's tables yet.
    pub(crate) added: &'a [ReservableHost],
}

impl<'a> Admission<'a> {
    pub(crate) fn bookings(&self, host: i64) -> impl Iterator<Item = &Booking> {
        let tables = &self.world.compute.leases;
        tables
            .overlapping(host, self.start, self.end, Some(self.lease))
            .chain(self.overlay.0.get(&host).into_iter().flatten())
    }

    pub(crate) fn matching_hosts(&self, request: &ReservationRequest) -> Vec<&'a ReservableHost> {
        let tables: &'a LeaseTables = &self.world.compute.leases;
        tables
            .hosts
            .values()
            .chain(self.added.iter())
            .filter(|h| h.reservable && !self.exclude.contains(&h.id))
            .filter(|h| {
                request.hypervisor_query.as_ref().is_none_or(|q| q.matches(&|k| hypervisor_field_now(self.world, h, k)))
            })
            .filter(|h| {
                request.resource_query.as_ref().is_none_or(|q| q.matches(&|k| h.extra.get(k).cloned().map(Prop::Text)))
            })
            .collect()
    }

    /// Whole host free in the window.
    fn host_free(&self, host: i64) -> bool {
        self.bookings(host).next().is_none()
    }

    /// How many more `(vcpus, memory_mb, disk_gb)` slots fit on a host for
    /// the whole window: its capacity now ([`capacity::host_capacity`])
    /// minus the peak concurrent usage.
    pub(crate) fn free_slots(&self, host: &ReservableHost, need: (i64, i64, i64)) -> i64 {
        let Some(peak) = self.peak_usage(host.id) else { return 0 };
        let cap = capacity::host_capacity(self.world, host);
        let fit = |cap: i64, used: i64, per: i64| if per <= 0 { i64::MAX } else { ((cap - used) / per).max(0) };
        fit(cap.vcpus, peak.0, need.0).min(fit(cap.memory_mb, peak.1, need.1)).min(fit(cap.local_gb, peak.2, need.2))
    }

    /// The peak concurrent `(vcpus, memory_mb, disk_gb)` of the slots
    /// booked on a host inside the window, each resource on its own (`None`:
    /// a whole-host booking overlaps). A sweep over the overlapping
    /// bookings' starts and ends: O(k log k) for k of them.
    fn peak_usage(&self, host: i64) -> Option<(i64, i64, i64)> {
        let mut steps: Vec<(Timestamp, i64, i64, i64)> = Vec::new();
        // Zero-length windows hold their first second, here as everywhere.
        let window_end = held_until(self.start, self.end);
        for b in self.bookings(host) {
            let Demand::Slot { vcpus, memory_mb, disk_gb } = b.demand else { return None };
            let used = (vcpus * b.slots, memory_mb * b.slots, disk_gb * b.slots);
            steps.push((b.start.max(self.start), used.0, used.1, used.2));
            let end = held_until(b.start, b.end);
            if end < window_end {
                steps.push((end, -used.0, -used.1, -used.2));
            }
        }
        steps.sort_unstable_by_key(|s| s.0);
        let (mut used, mut peak) = ((0i64, 0i64, 0i64), (0i64, 0i64, 0i64));
        for (idx, (t, v, m, d)) in steps.iter().enumerate() {
            used = (used.0 + v, used.1 + m, used.2 + d);
            // Usage at an instant counts every step taken at it.
            if steps.get(idx + 1).is_none_or(|next| next.0 != *t) {
                peak = (peak.0.max(used.0), peak.1.max(used.1), peak.2.max(used.2));
            }
        }
        Some(peak)
    }

    /// Choose allocations for one reservation, keeping `keep` (the current
    /// allocations of an updated reservation) first where they still fit.
    pub(crate) fn allocate(
        &mut self,
        reservation: Uuid,
        request: &ReservationRequest,
        keep: &[HostAllocation],
        active: bool,
    ) -> Result<Vec<HostAllocation>> {
        let hosts = self.matching_hosts(request);
        self.allocate_among(reservation, request, &hosts, keep, active)
    }

    /// [`Admission::allocate`] with the matching hosts already chosen (in
    /// id order).
    pub(crate) fn allocate_among(
        &mut self,
        reservation: Uuid,
        request: &ReservationRequest,
        hosts: &[&ReservableHost],
        keep: &[HostAllocation],
        active: bool,
    ) -> Result<Vec<HostAllocation>> {
        let mut chosen: Vec<HostAllocation> = Vec::new();
        let demand;
        match &request.kind {
            ReservationKind::Host { min, max, .. } => {
                demand = Demand::WholeHost;
                let mut order: Vec<&ReservableHost> = Vec::new();
                for a in keep {
                    if let Some(h) = hosts.iter().find(|h| h.id == a.host_id) {
                        order.push(h);
                    } else if active {
                        return Err(ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
                    }
                }
                order.extend(hosts.iter().filter(|h| !keep.iter().any(|a| a.host_id == h.id)));
                for h in order {
                    if chosen.len() as i64 >= *max {
                        break;
                    }
                    if self.host_free(h.id) {
                        chosen.push(HostAllocation { host_id: h.id, slots: 1 });
                    } else if active && keep.iter().any(|a| a.host_id == h.id) {
                        return Err(ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
                    }
                }
                if (chosen.len() as i64) < *min {
                    return Err(ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
                }
            }
            ReservationKind::Instance { vcpus, memory_mb, disk_gb, amount, affinity, .. } => {
                demand = Demand::Slot { vcpus: *vcpus, memory_mb: *memory_mb, disk_gb: *disk_gb };
                let need = (*vcpus, *memory_mb, *disk_gb);
                // Current hosts first, in their order; the free slots of a
                // host are computed only when it is reached, so a request
                // that fits early looks at few hosts.
                let mut order: Vec<&ReservableHost> = hosts.to_vec();
                order.sort_by_key(|h| (keep.iter().position(|a| a.host_id == h.id).unwrap_or(usize::MAX), h.id));
                let mut free = order.into_iter().map(|h| (h, self.free_slots(h, need))).filter(|(_, n)| *n > 0);
                let mut left = *amount;
                match affinity {
                    Some(true) => {
                        let host = free
                            .find(|(_, n)| *n >= left)
                            .ok_or_else(|| ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()))?;
                        chosen.push(HostAllocation { host_id: host.0.id, slots: left });
                        left = 0;
                    }
                    Some(false) => {
                        while left > 0 {
                            let Some((h, _)) = free.next() else { break };
                            chosen.push(HostAllocation { host_id: h.id, slots: 1 });
                            left -= 1;
                        }
                    }
                    None => {
                        while left > 0 {
                            let Some((h, n)) = free.next() else { break };
                            let take = n.min(left);
                            chosen.push(HostAllocation { host_id: h.id, slots: take });
                            left -= take;
                        }
                    }
                }
                if left > 0 {
                    return Err(ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
                }
            }
        }
        chosen.sort_by_key(|a| a.host_id);
        for a in &chosen {
            self.overlay.0.entry(a.host_id).or_default().push(Booking {
                lease: self.lease,
                reservation,
                start: self.start,
                end: self.end,
                demand,
                slots: a.slots,
            });
        }
        Ok(chosen)
    }
}

/// Blazar's refusal to take slots back from an active instance reservation.
pub const ACTIVE_SLOTS_KEPT: &str = "Instance reservation doesn't allow to reduce/replace reserved instance slots \
                                     when the reservation is in active status.";

/// A host reservation's `min` and `max`, checked as Blazar does (400).
pub fn check_min_max(min: i64, max: i64) -> Result<()> {
    if min < 1 || max < 1 {
        return Err(ComputeError::Invalid(
            "Malformed parameter min and max (must be greater than or equal to 1)".into(),
        ));
    }
    if max < min {
        return Err(ComputeError::Invalid(
            "Invalid values for min/max of hosts. Max must be equal to or larger than min.".into(),
        ));
    }
    Ok(())
}

/// An instance reservation's `amount`, checked as Blazar does (400).
pub fn check_amount(amount: i64) -> Result<()> {
    if amount < 1 {
        return Err(ComputeError::Invalid("amount must be >= 1".into()));
    }
    Ok(())
}

fn check_window(start: Timestamp, end: Timestamp) -> Result<()> {
    if end <= start {
        return Err(ComputeError::Invalid("End date must be later than start date.".into()));
    }
    Ok(())
}

fn before_end_time(start: Timestamp, end: Timestamp, before_end: Option<Timestamp>) -> Timestamp {
    before_end.unwrap_or(end - MINUTES_BEFORE_END * 60).max(start)
}

pub(crate) fn check_before_end(start: Timestamp, end: Timestamp, before_end: Option<Timestamp>) -> Result<()> {
    if let Some(t) = before_end {
        if t < start || t > end {
            return Err(ComputeError::Invalid("Before end date must be between lease start and end dates".into()));
        }
    }
    Ok(())
}

/// Admit a new lease: choose hosts or slots for every reservation in the
/// window, or refuse (`Conflict`: not enough hosts) with nothing written.
/// `ids` hands out fresh uuids (lease first).
pub fn plan_create_lease(
    world: &World,
    request: &LeaseRequest,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Lease)> {
    plan_create_lease_ending(world, request, end_policy::EndChoice::default(), ids, now)
}

/// [`plan_create_lease`] with an end policy (`on_end`, `grace`), checked
/// first ([`end_policy::check_end_choice`]).
pub fn plan_create_lease_ending(
    world: &World,
    request: &LeaseRequest,
    choice: end_policy::EndChoice,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Lease)> {
    end_policy::check_choice_for(request.reservations.iter().map(|r| &r.kind), choice)?;
    check_window(request.start, request.end)?;
    check_before_end(request.start, request.end, request.before_end)?;
    let id = ids();
    let mut admission = Admission {
        world,
        lease: id,
        start: request.start,
        end: request.end,
        overlay: Overlay::default(),
        exclude: &[],
        added: &[],
    };
    let mut reservations = Vec::new();
    for r in &request.reservations {
        let rid = ids();
        let allocations = admission.allocate(rid, r, &[], false)?;
        reservations.push(Reservation {
            id: rid,
            resource_id: ids(),
            status: ReservationStatus::Pending,
            missing_resources: false,
            resources_changed: false,
            kind: r.kind.clone(),
            allocations,
            recycling: Vec::new(),
            recycle_until: None,
            created_at: now,
            // Blazar writes the lease and its reservations again at once
            // (status, flavor), so both show an `updated_at` from creation.
            updated_at: Some(now),
        });
    }
    let events = vec![
        LeaseEvent {
            id: ids(),
            event_type: EventType::StartLease,
            time: request.start,
            status: EventStatus::Undone,
            created_at: now,
            updated_at: None,
        },
        LeaseEvent {
            id: ids(),
            event_type: EventType::BeforeEndLease,
            time: before_end_time(request.start, request.end, request.before_end),
            status: EventStatus::Undone,
            created_at: now,
            updated_at: None,
        },
        LeaseEvent {
            id: ids(),
            event_type: EventType::EndLease,
            time: request.end,
            status: EventStatus::Undone,
            created_at: now,
            updated_at: None,
        },
    ];
    let lease = Lease {
        id,
        name: request.name.clone(),
        user_id: request.user_id.clone(),
        project_id: request.project_id.clone(),
        start: request.start,
        end: request.end,
        trust_id: ids().simple().to_string(),
        status: LeaseStatus::Pending,
        degraded: false,
        on_end: choice.on_end,
        grace: choice.grace,
        reservations,
        events,
        created_at: now,
        updated_at: Some(now),
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease.clone()));
    resources::sync(world, None, Some(&lease), ids, now, &mut set)?;
    Ok((set, lease))
}
