//! Pure lease planning (Blazar's manager decisions, berth's rules):
//! host enrolment, lease admission and updates, events, healing, and the
//! capacity queries of the reservation API.
//!
//! Owns: every plan that takes the control `World` and returns a
//! `WorldChangeSet` for a lease or a reservable host, and the Blazar query
//! language (`Query`). The lease *types* (`Lease`, `ReservableHost`,
//! `LeaseTables`, ...) stay in `berth_compute_model::lease`, because the
//! control `World` holds them and `ComputeChange` carries them; this crate
//! sits one floor up, beside `berth-scheduler`, and depends on
//! `berth-compute-model` (never the other way round).
//!
//! Must not: do I/O, read the clock (times are arguments), use serde, or
//! depend on a runtime, store or API crate (the tidy test in
//! `crates/cli/tests/tidy.rs` checks the pure list).
//!
//! Admission is a plan like any other control write: it reads the current
//! bookings, chooses hosts (or slots on hosts) and returns one `PutLease`.
//! Because plans run one at a time on the caught-up state inside the
//! batch's transaction, two creates for the last host in a window cannot
//! both be admitted, in one process or several.
//!
//! Reserved servers (a boot admitted with its lease, held until the lease
//! starts) are [`reserved`]'s.
//!
//! Capacity over time: a whole-host booking excludes every other booking
//! of that host in an overlapping window; instance slots on a host fit when
//! the *peak* concurrent usage of the host inside the requested window plus
//! the new slots stays within the host's vCPUs, RAM and disk.
#![deny(missing_docs)]

use std::collections::HashMap;

use berth_model::Uuid;

use berth_compute_model::lease::{
    held_until, Booking, Demand, EndPolicy, EventStatus, EventType, HostAllocation, Lease, LeaseEvent, LeaseStatus,
    LeaseTables, ReservableHost, Reservation, ReservationKind, ReservationStatus, ResourceProperty,
};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};

type Result<T> = std::result::Result<T, ComputeError>;

/// Blazar's "Not enough hosts available".
pub const NOT_ENOUGH_HOSTS: &str = "Not enough hosts available";

/// Comparison operators of Blazar's query language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
}

impl Op {
    /// From its text.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "==" | "=" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            ">" => Op::Gt,
            "<=" => Op::Le,
            ">=" => Op::Ge,
            _ => return None,
        })
    }
}

/// A parsed requirement (`["==", "$vcpus", "8"]`, `["and", q1, q2]`, and
/// as extensions `["or", …]` and JSON number literals).
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// `key op "value"`: a string literal, compared as Blazar does (see
    /// [`Prop`]).
    Cmp {
        /// Operator.
        op: Op,
        /// Property (without `$`).
        key: String,
        /// Value as given.
        value: String,
    },
    /// `key op 9`: a JSON number literal (berth's extension; Blazar refuses
    /// it), compared numerically; a value that is not a number matches
    /// nothing.
    Num {
        /// Operator.
        op: Op,
        /// Property (without `$`).
        key: String,
        /// The number.
        value: f64,
    },
    /// All of.
    And(Vec<Query>),
    /// Any of.
    Or(Vec<Query>),
}

/// A property's value as Blazar holds it: hypervisor fields are columns,
/// integer ones compared as numbers by SQL (`["<", "$vcpus", "10"]` holds
/// for 8); extra capabilities are text, compared as strings by Python
/// (`["<", "$level", "9"]` holds for "10" and "2", not for "9").
#[derive(Debug, Clone, PartialEq)]
pub enum Prop {
    /// An integer column.
    Int(i64),
    /// Text.
    Text(String),
}

fn holds(op: Op, ord: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering;
    match op {
        Op::Eq => ord == Ordering::Equal,
        Op::Ne => ord != Ordering::Equal,
        Op::Lt => ord == Ordering::Less,
        Op::Gt => ord == Ordering::Greater,
        Op::Le => ord != Ordering::Greater,
        Op::Ge => ord != Ordering::Less,
    }
}

fn compare_text(op: Op, have: &Prop, want: &str) -> bool {
    match have {
        Prop::Int(n) => match want.trim().parse::<f64>() {
            Ok(w) => (*n as f64).partial_cmp(&w).is_some_and(|o| holds(op, o)),
            Err(_) => holds(op, n.to_string().as_str().cmp(want)),
        },
        Prop::Text(t) => holds(op, t.as_str().cmp(want)),
    }
}

fn compare_number(op: Op, have: &Prop, want: f64) -> bool {
    let have = match have {
        Prop::Int(n) => *n as f64,
        Prop::Text(t) => match t.trim().parse::<f64>() {
            Ok(v) => v,
            Err(_) => return false,
        },
    };
    have.partial_cmp(&want).is_some_and(|o| holds(op, o))
}

impl Query {
    /// True when `lookup` (property → value) satisfies the query. A missing
    /// property satisfies nothing.
    pub fn matches(&self, lookup: &dyn Fn(&str) -> Option<Prop>) -> bool {
        match self {
            Query::Cmp { op, key, value } => lookup(key).is_some_and(|have| compare_text(*op, &have, value)),
            Query::Num { op, key, value } => lookup(key).is_some_and(|have| compare_number(*op, &have, *value)),
            Query::And(list) => list.iter().all(|q| q.matches(lookup)),
            Query::Or(list) => list.iter().any(|q| q.matches(lookup)),
        }
    }

    /// The property names used.
    pub fn keys(&self, out: &mut Vec<String>) {
        match self {
            Query::Cmp { key, .. } | Query::Num { key, .. } => out.push(key.clone()),
            Query::And(list) | Query::Or(list) => list.iter().for_each(|q| q.keys(out)),
        }
    }
}

/// A hypervisor field of an enrolled host, for `hypervisor_properties`.
pub fn hypervisor_field(host: &ReservableHost, key: &str) -> Option<Prop> {
    Some(match key {
        "vcpus" => Prop::Int(host.vcpus),
        "memory_mb" => Prop::Int(host.memory_mb),
        "local_gb" => Prop::Int(host.local_gb),
        "hypervisor_type" => Prop::Text(host.hypervisor_type.clone()),
        "hypervisor_version" => Prop::Int(host.hypervisor_version),
        "hypervisor_hostname" => Prop::Text(host.hypervisor_hostname.clone()),
        "service_name" => Prop::Text(host.service_name.clone()),
        "cpu_info" => Prop::Text(host.cpu_info.clone()),
        "availability_zone" => Prop::Text(host.availability_zone.clone()),
        _ => return None,
    })
}

/// [`hypervisor_field`] with `vcpus`, `memory_mb` and `local_gb` as the
/// host has them now ([`capacity::host_capacity`]).
fn hypervisor_field_now(world: &World, host: &ReservableHost, key: &str) -> Option<Prop> {
    let now = || capacity::host_capacity(world, host);
    Some(match key {
        "vcpus" => Prop::Int(now().vcpus),
        "memory_mb" => Prop::Int(now().memory_mb),
        "local_gb" => Prop::Int(now().local_gb),
        _ => return hypervisor_field(host, key),
    })
}

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
struct Overlay(HashMap<i64, Vec<Booking>>);

struct Admission<'a> {
    world: &'a World,
    /// The lease being admitted or updated (its stored bookings are ignored).
    lease: Uuid,
    start: Timestamp,
    end: Timestamp,
    overlay: Overlay,
    /// Hosts that may not be chosen (healing: the lost ones).
    exclude: &'a [i64],
    /// Hosts enrolled in the same plan (a `release` end's refill), not in
    /// the world's tables yet.
    added: &'a [ReservableHost],
}

impl<'a> Admission<'a> {
    fn bookings(&self, host: i64) -> impl Iterator<Item = &Booking> {
        let tables = &self.world.compute.leases;
        tables
            .overlapping(host, self.start, self.end, Some(self.lease))
            .chain(self.overlay.0.get(&host).into_iter().flatten())
    }

    fn matching_hosts(&self, request: &ReservationRequest) -> Vec<&'a ReservableHost> {
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
    fn free_slots(&self, host: &ReservableHost, need: (i64, i64, i64)) -> i64 {
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
    fn allocate(
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
    fn allocate_among(
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

fn check_before_end(start: Timestamp, end: Timestamp, before_end: Option<Timestamp>) -> Result<()> {
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

/// Host fields to enrol, read from the compute node by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct HostEnrolment {
    /// Compute service host.
    pub service_name: String,
    /// Node name.
    pub hypervisor_hostname: String,
    /// vCPUs.
    pub vcpus: i64,
    /// RAM.
    pub memory_mb: i64,
    /// Disk.
    pub local_gb: i64,
    /// Zone ("" for none).
    pub availability_zone: String,
    /// Extra capabilities.
    pub extra: std::collections::BTreeMap<String, String>,
    /// Trust id.
    pub trust_id: String,
}

/// Enrol a host (409 when it already is).
pub fn plan_enrol_host(world: &World, host: HostEnrolment, now: Timestamp) -> Result<(WorldChangeSet, ReservableHost)> {
    let tables = &world.compute.leases;
    if tables.host_by_service.contains_key(&host.service_name) {
        return Err(ComputeError::Conflict(format!("Host '{}' is already enrolled", host.hypervisor_hostname)));
    }
    for key in host.extra.keys() {
        if key.len() > 64 {
            return Err(ComputeError::Invalid("Extra capability key too long".into()));
        }
    }
    let row = ReservableHost {
        id: tables.max_host_id + 1,
        hypervisor_hostname: host.hypervisor_hostname,
        service_name: host.service_name,
        vcpus: host.vcpus,
        memory_mb: host.memory_mb,
        local_gb: host.local_gb,
        hypervisor_type: "QEMU".into(),
        hypervisor_version: 1,
        cpu_info: "{}".into(),
        availability_zone: host.availability_zone,
        trust_id: host.trust_id,
        reservable: true,
        extra: host.extra,
        power: Default::default(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(row.clone()));
    put_new_properties(world, row.extra.keys(), ids_from(&row), now, &mut set);
    Ok((set, row))
}

fn ids_from(host: &ReservableHost) -> Uuid {
    // Deterministic property ids: derived from the host's trust id and time
    // only to be unique enough; properties are keyed by name.
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&host.id.to_be_bytes());
    bytes[8..].copy_from_slice(&host.created_at.to_be_bytes());
    Uuid::from_bytes(bytes)
}

fn put_new_properties<'a>(
    world: &World,
    keys: impl Iterator<Item = &'a String>,
    seed: Uuid,
    now: Timestamp,
    set: &mut WorldChangeSet,
) {
    let props = &world.compute.leases.properties;
    for (n, key) in keys.enumerate() {
        let id = (berth_compute_model::lease::RESOURCE_PHYSICAL_HOST.to_string(), key.clone());
        if props.contains_key(&id) {
            continue;
        }
        let mut bytes = *seed.as_bytes();
        bytes[0] ^= n as u8;
        bytes[1] ^= (n >> 8) as u8;
        set.compute(C::PutResourceProperty(ResourceProperty {
            id: Uuid::from_bytes(bytes),
            resource_type: id.0,
            name: id.1,
            private: false,
            created_at: now,
            updated_at: None,
        }));
    }
}

/// Set extra capabilities of an enrolled host.
pub fn plan_update_host(
    world: &World,
    id: i64,
    extra: &std::collections::BTreeMap<String, String>,
    now: Timestamp,
) -> Result<(WorldChangeSet, ReservableHost)> {
    let mut host = world
        .compute
        .leases
        .hosts
        .get(&id)
        .cloned()
        .ok_or_else(|| ComputeError::NotFound(format!("Object with {{'host_id': '{id}'}} not found")))?;
    for (k, v) in extra {
        if k.len() > 64 {
            return Err(ComputeError::Invalid("Extra capability key too long".into()));
        }
        host.extra.insert(k.clone(), v.clone());
    }
    host.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(host.clone()));
    put_new_properties(world, extra.keys(), ids_from(&host), now, &mut set);
    Ok((set, host))
}

/// Remove an enrolled host: refused while a lease that has not ended
/// holds it (Blazar: "Can't delete host 1. The host is reserved.").
pub fn plan_delete_host(world: &World, id: i64) -> Result<WorldChangeSet> {
    let tables = &world.compute.leases;
    if !tables.hosts.contains_key(&id) {
        return Err(ComputeError::NotFound(format!("Object with {{'host_id': '{id}'}} not found")));
    }
    if tables.bookings.get(&id).is_some_and(|b| !b.is_empty()) {
        return Err(ComputeError::Conflict(format!("Can't delete host {id}. The host is reserved.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteReservableHost(id));
    Ok(set)
}

/// Set a resource property's `private` flag.
pub fn plan_set_property_private(
    world: &World,
    resource_type: &str,
    name: &str,
    private: bool,
    now: Timestamp,
) -> Result<(WorldChangeSet, ResourceProperty)> {
    let mut prop = world
        .compute
        .leases
        .properties
        .get(&(resource_type.to_string(), name.to_string()))
        .cloned()
        .ok_or_else(|| ComputeError::NotFound(format!("Object with {{'property_name': '{name}'}} not found")))?;
    prop.private = private;
    prop.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutResourceProperty(prop.clone()));
    Ok((set, prop))
}

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

/// Set a host reservable or not (healing marks a down host unreservable).
pub fn plan_set_host_reservable(world: &World, id: i64, reservable: bool, now: Timestamp) -> Option<WorldChangeSet> {
    let host = world.compute.leases.hosts.get(&id)?;
    if host.reservable == reservable {
        return None;
    }
    let mut host = host.clone();
    host.reservable = reservable;
    host.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(host));
    Some(set)
}

/// May `service_host` take a boot naming `reservation`, with no pool
/// lending? (See [`LeaseTables::host_allows`], which the scheduler and the
/// claim call with the lending lead and the time.)
pub fn host_allows(world: &World, service_host: &str, reservation: Option<Uuid>) -> bool {
    world.compute.leases.host_allows(service_host, reservation, 0, None)
}

/// Earliest start `>= from` at which `request` (one reservation, for
/// `duration` seconds) would be admitted, looking no further than
/// `horizon`, and the hosts it would get there.
///
/// A request can only become admissible when a booking on a matching host
/// ends (a window that starts later only loses bookings at their ends), so
/// the candidate starts are `from` and those ends. Whole hosts: a host is
/// busy for the starts in `(booking.start - duration, booking.end)`; one
/// sweep over these intervals, merged per host, counts the free hosts at
/// every candidate and goes straight to the first one with `min` free
/// (O(B log B) for B bookings on matching hosts). Slots: a host's free
/// slots are computed again only at the ends of its own bookings (they
/// cannot grow elsewhere); their running tally skips the candidates that
/// cannot hold the amount (O(B log B + H) plus O(H) per candidate that
/// passes the tally but not the exact check). Either way the answer is
/// checked by the admission itself.
pub fn earliest_window(
    world: &World,
    request: &ReservationRequest,
    duration: Timestamp,
    from: Timestamp,
    horizon: Timestamp,
) -> Option<(Timestamp, Vec<HostAllocation>)> {
    let tables = &world.compute.leases;
    let probe = |start: Timestamp| Admission {
        world,
        lease: Uuid::nil(),
        start,
        end: start + duration,
        overlay: Overlay::default(),
        exclude: &[],
        added: &[],
    };
    let hosts = probe(from).matching_hosts(request);
    let try_at = |start: Timestamp| {
        probe(start).allocate_among(Uuid::nil(), request, &hosts, &[], false).ok().map(|a| (start, a))
    };
    if let Some(found) = try_at(from) {
        return Some(found);
    }
    let lists = || hosts.iter().filter_map(|h| tables.bookings.get(&h.id));
    match &request.kind {
        ReservationKind::Host { min, .. } => {
            // Per host, the merged open intervals of busy starts.
            let (mut opens, mut closes): (Vec<Timestamp>, Vec<Timestamp>) = (Vec::new(), Vec::new());
            for list in lists() {
                let mut current: Option<(Timestamp, Timestamp)> = None;
                for b in list.iter() {
                    let (open, close) = (b.start - duration, b.end);
                    match &mut current {
                        Some((_, c)) if open < *c => *c = (*c).max(close),
                        _ => {
                            if let Some((o, c)) = current.replace((open, close)) {
                                opens.push(o);
                                closes.push(c);
                            }
                        }
                    }
                }
                if let Some((o, c)) = current {
                    opens.push(o);
                    closes.push(c);
                }
            }
            opens.sort_unstable();
            closes.sort_unstable();
            let mut starts: Vec<Timestamp> = closes.iter().copied().filter(|t| *t > from && *t <= horizon).collect();
            starts.dedup();
            let (mut n_opened, mut n_closed) = (0usize, 0usize);
            for start in starts {
                // Busy at `start`: opened before it and not closed by it.
                while n_opened < opens.len() && opens[n_opened] < start {
                    n_opened += 1;
                }
                while n_closed < closes.len() && closes[n_closed] <= start {
                    n_closed += 1;
                }
                let n_free = hosts.len() - (n_opened - n_closed);
                if n_free as i64 >= *min {
                    if let Some(found) = try_at(start) {
                        return Some(found);
                    }
                }
            }
            None
        }
        ReservationKind::Instance { vcpus, memory_mb, disk_gb, amount, affinity, .. } => {
            let need = (*vcpus, *memory_mb, *disk_gb);
            let free_at = |host: &ReservableHost, start: Timestamp| probe(start).free_slots(host, need).min(*amount);
            // Every booking end on a matching host, by time, with its host.
            let mut ends: Vec<(Timestamp, usize)> = hosts
                .iter()
                .enumerate()
                .filter_map(|(idx, h)| tables.bookings.get(&h.id).map(|list| (idx, list)))
                .flat_map(|(idx, list)| list.iter().map(move |b| (b.end, idx)))
                .filter(|(t, _)| *t > from && *t <= horizon)
                .collect();
            ends.sort_unstable();
            // A bound on each host's free slots (capped at `amount`): exact
            // where last computed, and a host's free slots only grow at the
            // end of one of its own bookings, where it is computed again.
            // While the bounds cannot hold the request, no host is looked
            // at twice; when they can, all are made exact and the
            // admission decides.
            let mut tally = SlotTally::default();
            let mut bound: Vec<i64> = hosts.iter().map(|h| free_at(h, from)).collect();
            bound.iter().for_each(|n| tally.add(*n, *amount, 1));
            for group in ends.chunk_by(|a, b| a.0 == b.0) {
                let start = group[0].0;
                for &(_, idx) in group {
                    let n = free_at(hosts[idx], start);
                    tally.add(bound[idx], *amount, -1);
                    tally.add(n, *amount, 1);
                    bound[idx] = n;
                }
                if !tally.holds(*amount, *affinity) {
                    continue;
                }
                tally = SlotTally::default();
                for (idx, h) in hosts.iter().enumerate() {
                    bound[idx] = free_at(h, start);
                    tally.add(bound[idx], *amount, 1);
                }
                if tally.holds(*amount, *affinity) {
                    if let Some(found) = try_at(start) {
                        return Some(found);
                    }
                }
            }
            None
        }
    }
}

/// Free slots over a set of hosts (each capped at the amount asked): what
/// decides whether a slot reservation fits.
#[derive(Default)]
struct SlotTally {
    /// Sum of the free slots.
    sum: i64,
    /// Hosts with a free slot.
    n_some: i64,
    /// Hosts with the whole amount free.
    n_all: i64,
}

impl SlotTally {
    fn add(&mut self, free: i64, amount: i64, sign: i64) {
        self.sum += sign * free;
        self.n_some += sign * i64::from(free > 0);
        self.n_all += sign * i64::from(free >= amount && free > 0);
    }

    /// Admission's rule: all on one host, one per host, or anywhere.
    fn holds(&self, amount: i64, affinity: Option<bool>) -> bool {
        match affinity {
            Some(true) => self.n_all > 0,
            Some(false) => self.n_some >= amount,
            None => self.sum >= amount,
        }
    }
}

/// Leases whose bookings overlap `[start, end)` on hosts `request` could
/// use: what blocks an admission (dry run).
pub fn blocking_leases(world: &World, request: &ReservationRequest, start: Timestamp, end: Timestamp) -> Vec<Uuid> {
    let admission =
        Admission { world, lease: Uuid::nil(), start, end, overlay: Overlay::default(), exclude: &[], added: &[] };
    let mut out: Vec<Uuid> = Vec::new();
    for h in admission.matching_hosts(request) {
        for b in admission.bookings(h.id) {
            if !out.contains(&b.lease) {
                out.push(b.lease);
            }
        }
    }
    out
}

pub mod capacity;
pub mod end_policy;
pub mod lending;
pub mod power;
pub mod reserved;
pub mod resources;

#[cfg(test)]
mod tests;
