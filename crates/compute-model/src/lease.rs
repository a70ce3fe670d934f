//! Reservations (Blazar's data model, berth's rules): hosts enrolled for
//! reservation, leases with their reservations, allocations and events,
//! and the derived booking index admission reads.
//!
//! A lease is one control row: its reservations, the hosts (or slots on
//! hosts) each one holds and its events travel together, so admitting,
//! updating or advancing a lease is one `PutLease` in one planned write
//! (the plans are `berth-reservation-model`'s, one floor up). Capacity
//! over time is the *peak* concurrent usage inside a window, computed from
//! [`LeaseTables::bookings`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use berth_model::Uuid;

use crate::Timestamp;

/// `physical:host`.
pub const RESOURCE_PHYSICAL_HOST: &str = "physical:host";
/// `virtual:instance`.
pub const RESOURCE_VIRTUAL_INSTANCE: &str = "virtual:instance";
/// `flavor:instance`.
pub const RESOURCE_FLAVOR_INSTANCE: &str = "flavor:instance";

/// The flavor extra spec naming the reservation (Blazar's).
pub const RESERVATION_SPEC: &str = "aggregate_instance_extra_specs:reservation";

/// A boot names a reservation by something that is no reservation id (it
/// matches no host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAReservation;

/// The reservation a boot names: its scheduler hint `reservation`, else its
/// flavor's [`RESERVATION_SPEC`].
pub fn named_reservation(spec: &crate::RequestSpec) -> Result<Option<Uuid>, NotAReservation> {
    let named =
        spec.hints.get("reservation").and_then(|v| v.first()).or_else(|| spec.flavor.extra_specs.get(RESERVATION_SPEC));
    match named {
        None => Ok(None),
        Some(text) => Uuid::parse_str(text).map(Some).map_err(|_| NotAReservation),
    }
}

/// A host enrolled for reservation (Blazar's `computehosts` row plus its
/// extra capabilities).
#[derive(Debug, Clone, PartialEq)]
pub struct ReservableHost {
    /// Blazar's integer id (shown as a string).
    pub id: i64,
    /// The compute node's name (`hypervisor_hostname`).
    pub hypervisor_hostname: String,
    /// The compute service's host.
    pub service_name: String,
    /// Physical vCPUs.
    pub vcpus: i64,
    /// RAM in MiB.
    pub memory_mb: i64,
    /// Disk in GiB.
    pub local_gb: i64,
    /// Hypervisor type (`QEMU`).
    pub hypervisor_type: String,
    /// Hypervisor version.
    pub hypervisor_version: i64,
    /// CPU info (JSON text).
    pub cpu_info: String,
    /// Availability zone ("" when none).
    pub availability_zone: String,
    /// Trust id Blazar would create (berth makes one up).
    pub trust_id: String,
    /// False while the host is down or disabled (healing).
    pub reservable: bool,
    /// Extra capabilities.
    pub extra: BTreeMap<String, String>,
    /// Power state (power management of the pool; `on` unless switched).
    pub power: HostPower,
    /// Enrolment time.
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Option<Timestamp>,
}

/// A pool host's power state (berth's extension, issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum PowerState {
    /// Running (the only state that takes boots and counts as free now).
    #[default]
    On,
    /// The power-off command was issued.
    PoweringOff,
    /// Switched off on purpose (no heartbeat expected).
    Off,
    /// The power-on command was issued; waiting for the host to report.
    PoweringOn,
    /// Did not report back within the resume timeout.
    Failed,
}

impl PowerState {
    /// Every state, in order.
    pub const ALL: [PowerState; 5] =
        [PowerState::On, PowerState::PoweringOff, PowerState::Off, PowerState::PoweringOn, PowerState::Failed];

    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "on",
            PowerState::PoweringOff => "powering-off",
            PowerState::Off => "off",
            PowerState::PoweringOn => "powering-on",
            PowerState::Failed => "failed",
        }
    }

    /// From the API's name.
    pub fn parse(s: &str) -> Option<Self> {
        PowerState::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Switched off or being switched, on purpose: the host does not
    /// heartbeat and is not taken for down.
    pub fn on_purpose(self) -> bool {
        matches!(self, PowerState::PoweringOff | PowerState::Off | PowerState::PoweringOn)
    }
}

/// A pool host's power: its state and what exactly-once switching needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostPower {
    /// The state.
    pub state: PowerState,
    /// Since when.
    pub since: Timestamp,
    /// When the last power command was recorded as issued (written before
    /// the command runs; a restart never runs it again).
    pub issued_at: Option<Timestamp>,
    /// `powering-on`: the resume deadline (then `failed`); `powering-off`:
    /// when it counts as `off` even without the command's answer.
    pub deadline: Option<Timestamp>,
}

/// Lease status (Blazar's `status.lease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseStatus {
    /// Created, not started.
    Pending,
    /// Start event running.
    Starting,
    /// Started.
    Active,
    /// End event running.
    Terminating,
    /// Ended.
    Terminated,
    /// An event failed.
    Error,
}

impl LeaseStatus {
    /// Blazar's name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Pending => "PENDING",
            LeaseStatus::Starting => "STARTING",
            LeaseStatus::Active => "ACTIVE",
            LeaseStatus::Terminating => "TERMINATING",
            LeaseStatus::Terminated => "TERMINATED",
            LeaseStatus::Error => "ERROR",
        }
    }

    /// From Blazar's name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => LeaseStatus::Pending,
            "STARTING" => LeaseStatus::Starting,
            "ACTIVE" => LeaseStatus::Active,
            "TERMINATING" => LeaseStatus::Terminating,
            "TERMINATED" => LeaseStatus::Terminated,
            "ERROR" => LeaseStatus::Error,
            _ => return None,
        })
    }
}

/// Reservation status (Blazar's `status.reservation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReservationStatus {
    /// Not started.
    Pending,
    /// Started.
    Active,
    /// Ended.
    Deleted,
    /// Failed.
    Error,
}

impl ReservationStatus {
    /// Blazar's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationStatus::Pending => "pending",
            ReservationStatus::Active => "active",
            ReservationStatus::Deleted => "deleted",
            ReservationStatus::Error => "error",
        }
    }

    /// From Blazar's name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ReservationStatus::Pending,
            "active" => ReservationStatus::Active,
            "deleted" => ReservationStatus::Deleted,
            "error" => ReservationStatus::Error,
            _ => return None,
        })
    }
}

/// What a reservation books.
#[derive(Debug, Clone, PartialEq)]
pub enum ReservationKind {
    /// `physical:host`: whole hosts.
    Host {
        /// Fewest hosts.
        min: i64,
        /// Most hosts.
        max: i64,
        /// Query on hypervisor fields (Blazar's JSON language, as given).
        hypervisor_properties: String,
        /// Query on extra capabilities.
        resource_properties: String,
        /// `before_end` action (`default`, `snapshot`, `notification`).
        before_end: String,
    },
    /// `virtual:instance` / `flavor:instance`: `amount` slots.
    Instance {
        /// vCPUs per slot.
        vcpus: i64,
        /// RAM per slot.
        memory_mb: i64,
        /// Disk per slot.
        disk_gb: i64,
        /// Slots.
        amount: i64,
        /// `Some(true)`: all on one host; `Some(false)`: one per host.
        affinity: Option<bool>,
        /// Query on extra capabilities.
        resource_properties: String,
        /// The flavor the slots are shaped like (`flavor:instance`).
        source_flavor: Option<String>,
    },
}

/// What happens to a lease's hosts and servers at its end (berth's
/// extension `on_end`, from the Climate proposal's three choices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EndPolicy {
    /// The servers are deleted, the hosts return to the pool (Blazar).
    #[default]
    Delete,
    /// The servers stay; each held host carrying servers stays out of the
    /// pool (*recycling*) until its last server is gone, or until the
    /// grace ends (then its servers are deleted).
    Recycle,
    /// The servers stay; each held host carrying servers leaves the pool
    /// for general scheduling, and free matching general hosts join the
    /// pool in its place.
    Release,
}

impl EndPolicy {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndPolicy::Delete => "delete",
            EndPolicy::Recycle => "recycle",
            EndPolicy::Release => "release",
        }
    }

    /// From the API's name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "delete" => EndPolicy::Delete,
            "recycle" => EndPolicy::Recycle,
            "release" => EndPolicy::Release,
            _ => return None,
        })
    }
}

/// Slots of one reservation on one host (1 for a whole host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostAllocation {
    /// Reservable host id.
    pub host_id: i64,
    /// Slots held there (whole-host reservations: 1).
    pub slots: i64,
}

/// One reservation of a lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// Reservation id.
    pub id: Uuid,
    /// Blazar's `resource_id` (the type-specific row's id).
    pub resource_id: Uuid,
    /// Status.
    pub status: ReservationStatus,
    /// A held host went away and none could replace it.
    pub missing_resources: bool,
    /// A held host was replaced by another.
    pub resources_changed: bool,
    /// What it books.
    pub kind: ReservationKind,
    /// Where, in host-id order.
    pub allocations: Vec<HostAllocation>,
    /// After a `recycle` end: the held hosts still carrying servers, out of
    /// the pool (each booked from the lease's end to `recycle_until`), in
    /// id order. Empty otherwise.
    pub recycling: Vec<i64>,
    /// When the recycling hosts' grace ends (their servers are then
    /// deleted); `None`: no grace (a host rejoins when its last server is
    /// gone).
    pub recycle_until: Option<Timestamp>,
    /// Created.
    pub created_at: Timestamp,
    /// Updated.
    pub updated_at: Option<Timestamp>,
}

impl Reservation {
    /// Blazar's `resource_type`.
    pub fn resource_type(&self) -> &'static str {
        match &self.kind {
            ReservationKind::Host { .. } => RESOURCE_PHYSICAL_HOST,
            ReservationKind::Instance { source_flavor: Some(_), .. } => RESOURCE_FLAVOR_INSTANCE,
            ReservationKind::Instance { .. } => RESOURCE_VIRTUAL_INSTANCE,
        }
    }

    /// What one allocation slot takes from a host.
    pub fn demand(&self) -> Demand {
        match &self.kind {
            ReservationKind::Host { .. } => Demand::WholeHost,
            ReservationKind::Instance { vcpus, memory_mb, disk_gb, .. } => {
                Demand::Slot { vcpus: *vcpus, memory_mb: *memory_mb, disk_gb: *disk_gb }
            }
        }
    }
}

/// What one booking takes from a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// The whole host.
    WholeHost,
    /// One instance slot.
    Slot {
        /// vCPUs.
        vcpus: i64,
        /// RAM.
        memory_mb: i64,
        /// Disk.
        disk_gb: i64,
    },
}

/// Event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// The lease ends (ordered first: at one instant ends run before starts).
    EndLease,
    /// Before the end.
    BeforeEndLease,
    /// The lease starts.
    StartLease,
}

impl EventType {
    /// Blazar's name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::StartLease => "start_lease",
            EventType::BeforeEndLease => "before_end_lease",
            EventType::EndLease => "end_lease",
        }
    }

    /// From Blazar's name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "start_lease" => EventType::StartLease,
            "before_end_lease" => EventType::BeforeEndLease,
            "end_lease" => EventType::EndLease,
            _ => return None,
        })
    }
}

/// Event status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventStatus {
    /// Not run.
    Undone,
    /// Running (after a crash: redone, idempotently).
    InProgress,
    /// Done.
    Done,
    /// Failed.
    Error,
}

impl EventStatus {
    /// Blazar's name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Undone => "UNDONE",
            EventStatus::InProgress => "IN_PROGRESS",
            EventStatus::Done => "DONE",
            EventStatus::Error => "ERROR",
        }
    }

    /// From Blazar's name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "UNDONE" => EventStatus::Undone,
            "IN_PROGRESS" => EventStatus::InProgress,
            "DONE" => EventStatus::Done,
            "ERROR" => EventStatus::Error,
            _ => return None,
        })
    }
}

/// One lease event.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseEvent {
    /// Event id.
    pub id: Uuid,
    /// Kind.
    pub event_type: EventType,
    /// When it is due.
    pub time: Timestamp,
    /// Status.
    pub status: EventStatus,
    /// Created.
    pub created_at: Timestamp,
    /// Updated.
    pub updated_at: Option<Timestamp>,
}

/// A lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// Lease id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Owner user.
    pub user_id: String,
    /// Owner project.
    pub project_id: String,
    /// Window start (inclusive).
    pub start: Timestamp,
    /// Window end (exclusive).
    pub end: Timestamp,
    /// Trust id (made up; Blazar shows one).
    pub trust_id: String,
    /// Status.
    pub status: LeaseStatus,
    /// A reservation lost resources.
    pub degraded: bool,
    /// What happens at the end (`on_end`).
    pub on_end: EndPolicy,
    /// `grace` seconds of a `recycle` end (`None`: until the servers go).
    pub grace: Option<i64>,
    /// Reservations.
    pub reservations: Vec<Reservation>,
    /// Events.
    pub events: Vec<LeaseEvent>,
    /// Created.
    pub created_at: Timestamp,
    /// Updated.
    pub updated_at: Option<Timestamp>,
}

impl Lease {
    /// The event of a kind.
    pub fn event(&self, kind: EventType) -> Option<&LeaseEvent> {
        self.events.iter().find(|e| e.event_type == kind)
    }

    /// True once the lease no longer holds anything.
    pub fn is_over(&self) -> bool {
        matches!(self.status, LeaseStatus::Terminated)
    }
}

/// A resource property's settings (`private` hides its values from
/// non-admins).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceProperty {
    /// Id.
    pub id: Uuid,
    /// `physical:host`.
    pub resource_type: String,
    /// Name.
    pub name: String,
    /// Hidden from non-admins.
    pub private: bool,
    /// Created.
    pub created_at: Timestamp,
    /// Updated.
    pub updated_at: Option<Timestamp>,
}

/// One reservation's hold on a host during a window (derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// Lease.
    pub lease: Uuid,
    /// Reservation.
    pub reservation: Uuid,
    /// Window start.
    pub start: Timestamp,
    /// Window end.
    pub end: Timestamp,
    /// Per slot.
    pub demand: Demand,
    /// Slots.
    pub slots: i64,
}

impl Booking {
    /// True when `[start, end)` overlaps the booking's window (a window
    /// with `start == end` is its first second: [`held_until`]).
    pub fn overlaps(&self, start: Timestamp, end: Timestamp) -> bool {
        self.start < held_until(start, end) && start < held_until(self.start, self.end)
    }
}

/// The end of the time a window `[start, end)` holds a host: `end`, except
/// that a window with `start == end` (a lease that starts and ends at the
/// same minute, which Blazar accepts) holds its first second. So such a
/// lease cannot be admitted onto a host booked at that instant (Blazar
/// refuses it too, "Not enough hosts available"), and a later lease whose
/// window contains that instant does not get the host either; a lease
/// ending at the instant does not touch it (windows stay half-open).
pub fn held_until(start: Timestamp, end: Timestamp) -> Timestamp {
    if end > start {
        end
    } else {
        start.saturating_add(1)
    }
}

/// One host's bookings, sorted by start, with the running maximum of
/// their ends: the bookings overlapping `[start, end)` lie between the
/// first whose running maximum end passes `start` and the first starting
/// at or after `end`, two binary searches away. Admission and the
/// earliest-window search ask this for every host they consider, so a
/// query costs O(log n + k) (k: the bookings between those two, the
/// overlapping ones and any shorter ones nested in a long booking)
/// instead of O(n).
#[derive(Debug, Clone, Default)]
pub struct HostBookings {
    /// Sorted by `(start, end, lease, reservation)`.
    list: Vec<Booking>,
    /// `max_end[i]`: the latest end among `list[..=i]` (non-decreasing).
    max_end: Vec<Timestamp>,
}

impl HostBookings {
    fn key(b: &Booking) -> (Timestamp, Timestamp, Uuid, Uuid) {
        (b.start, b.end, b.lease, b.reservation)
    }

    fn fix_max_end(&mut self, from: usize) {
        self.max_end.truncate(from);
        let mut latest = from.checked_sub(1).map_or(Timestamp::MIN, |i| self.max_end[i]);
        for b in &self.list[from..] {
            latest = latest.max(b.end);
            self.max_end.push(latest);
        }
    }

    /// Add a booking in order (a zero-length one held for its first
    /// second, [`held_until`]).
    pub fn insert(&mut self, mut booking: Booking) {
        booking.end = held_until(booking.start, booking.end);
        let key = Self::key(&booking);
        let pos = self.list.partition_point(|b| Self::key(b) <= key);
        self.list.insert(pos, booking);
        self.fix_max_end(pos);
    }

    /// Drop every booking of a lease.
    pub fn remove_lease(&mut self, lease: Uuid) {
        let Some(first) = self.list.iter().position(|b| b.lease == lease) else { return };
        self.list.retain(|b| b.lease != lease);
        self.fix_max_end(first);
    }

    /// All bookings, by start.
    pub fn iter(&self) -> std::slice::Iter<'_, Booking> {
        self.list.iter()
    }

    /// No booking.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How many bookings.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The bookings overlapping `[start, end)`, by start (a zero-length
    /// window asks for its instant, [`held_until`]).
    pub fn overlapping(&self, start: Timestamp, end: Timestamp) -> impl Iterator<Item = &Booking> {
        let end = held_until(start, end);
        // Every booking before `first` ends by `start`.
        let first = self.max_end.partition_point(|t| *t <= start);
        let last = self.list.partition_point(|b| b.start < end).max(first);
        self.list[first..last].iter().filter(move |b| b.end > start)
    }
}

impl<'a> IntoIterator for &'a HostBookings {
    type Item = &'a Booking;
    type IntoIter = std::slice::Iter<'a, Booking>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// The reservation tables, part of [`crate::ComputeState`].
#[derive(Debug, Clone, Default)]
pub struct LeaseTables {
    /// Enrolled hosts by id.
    pub hosts: BTreeMap<i64, ReservableHost>,
    /// Leases by id.
    pub leases: BTreeMap<Uuid, Lease>,
    /// Resource properties by `(resource_type, name)`.
    pub properties: BTreeMap<(String, String), ResourceProperty>,
    /// Highest host id handed out.
    pub max_host_id: i64,
    /// Derived: host id by compute service host.
    pub host_by_service: HashMap<String, i64>,
    /// Derived: bookings per host id (leases not terminated), sorted by
    /// start.
    pub bookings: HashMap<i64, HostBookings>,
    /// Derived: reservation id → lease id.
    pub lease_of_reservation: HashMap<Uuid, Uuid>,
    /// Derived: the events still to run (`UNDONE` or `IN_PROGRESS`) of
    /// leases neither terminated nor failed, by `(time, kind, lease,
    /// event)`: the due ones are a prefix, found without a scan of every
    /// lease (the runner looks each time a lease changes).
    pub pending_events: BTreeSet<(Timestamp, EventType, Uuid, Uuid)>,
}

impl LeaseTables {
    pub(crate) fn put_host(&mut self, host: &ReservableHost) {
        self.max_host_id = self.max_host_id.max(host.id);
        if let Some(old) = self.hosts.insert(host.id, host.clone()) {
            self.host_by_service.remove(&old.service_name);
        }
        self.host_by_service.insert(host.service_name.clone(), host.id);
    }

    pub(crate) fn delete_host(&mut self, id: i64) {
        if let Some(old) = self.hosts.remove(&id) {
            self.host_by_service.remove(&old.service_name);
        }
    }

    pub(crate) fn put_lease(&mut self, lease: &Lease) {
        self.delete_lease(lease.id);
        for reservation in &lease.reservations {
            self.lease_of_reservation.insert(reservation.id, lease.id);
            // Recycling hosts stay booked, whole, past the end.
            for host_id in &reservation.recycling {
                self.bookings.entry(*host_id).or_default().insert(Booking {
                    lease: lease.id,
                    reservation: reservation.id,
                    start: lease.end,
                    end: reservation.recycle_until.unwrap_or(Timestamp::MAX),
                    demand: Demand::WholeHost,
                    slots: 1,
                });
            }
            if lease.is_over() || reservation.status == ReservationStatus::Deleted {
                continue;
            }
            let demand = reservation.demand();
            for a in &reservation.allocations {
                self.bookings.entry(a.host_id).or_default().insert(Booking {
                    lease: lease.id,
                    reservation: reservation.id,
                    start: lease.start,
                    end: lease.end,
                    demand,
                    slots: a.slots,
                });
            }
        }
        if !matches!(lease.status, LeaseStatus::Terminated | LeaseStatus::Error) {
            for e in lease.events.iter().filter(|e| matches!(e.status, EventStatus::Undone | EventStatus::InProgress)) {
                self.pending_events.insert((e.time, e.event_type, lease.id, e.id));
            }
        }
        self.leases.insert(lease.id, lease.clone());
    }

    pub(crate) fn delete_lease(&mut self, id: Uuid) {
        let Some(old) = self.leases.remove(&id) else { return };
        for e in &old.events {
            self.pending_events.remove(&(e.time, e.event_type, id, e.id));
        }
        for reservation in &old.reservations {
            self.lease_of_reservation.remove(&reservation.id);
            let hosts = reservation.allocations.iter().map(|a| a.host_id).chain(reservation.recycling.iter().copied());
            for host_id in hosts {
                if let Some(list) = self.bookings.get_mut(&host_id) {
                    list.remove_lease(id);
                    if list.is_empty() {
                        self.bookings.remove(&host_id);
                    }
                }
            }
        }
    }

    /// The lease and reservation with this reservation id.
    pub fn reservation(&self, id: Uuid) -> Option<(&Lease, &Reservation)> {
        let lease = self.leases.get(self.lease_of_reservation.get(&id)?)?;
        Some((lease, lease.reservations.iter().find(|r| r.id == id)?))
    }

    /// Is the pool host lent to general scheduling at `now`? With lending
    /// on (`lend_lead`: how far ahead the pool looks), a pool host is lent
    /// while no booking holds it in `[now, now + lend_lead]`; once a lease
    /// that needs it comes within the lead time it is being reclaimed
    /// (drained) and takes no more ordinary boots.
    pub fn lent(&self, host_id: i64, now: Timestamp, lend_lead: Option<Timestamp>) -> bool {
        let Some(lead) = lend_lead else { return false };
        // Reclaimed from `start - lead` on, that instant included.
        self.overlapping(host_id, now, now.saturating_add(lead.max(0)).saturating_add(1), None).next().is_none()
    }

    /// When a booking next holds the pool host, from `now` (the start of
    /// the first booking not over; `Timestamp::MAX` when none).
    pub fn next_needed(&self, host_id: i64, now: Timestamp) -> Timestamp {
        self.overlapping(host_id, now, Timestamp::MAX, None).map(|b| b.start).min().unwrap_or(Timestamp::MAX)
    }

    /// May `service_host` take a boot naming `reservation` (the scheduler
    /// hint or the reservation flavor's spec) at `now`? A host outside the
    /// pool takes only boots that name no reservation; a pool host takes
    /// boots for an active reservation holding it, and, while it is lent
    /// ([`LeaseTables::lent`]), ordinary boots; a pool host that is not
    /// powered `on` takes nothing. The scheduler filters with
    /// it and the claim checks it again in its planned write, so a boot
    /// scheduled a moment before a lease came within the lead time never
    /// lands on the reclaimed host.
    pub fn host_allows(
        &self,
        service_host: &str,
        reservation: Option<Uuid>,
        now: Timestamp,
        lend_lead: Option<Timestamp>,
    ) -> bool {
        let enrolled = self.host_by_service.get(service_host).copied();
        if enrolled.is_some_and(|id| self.hosts.get(&id).is_some_and(|h| h.power.state != PowerState::On)) {
            return false;
        }
        match (enrolled, reservation) {
            (None, None) => true,
            (None, Some(_)) => false,
            (Some(host_id), None) => self.lent(host_id, now, lend_lead),
            (Some(host_id), Some(rid)) => self.reservation(rid).is_some_and(|(lease, r)| {
                lease.status == LeaseStatus::Active
                    && r.status == ReservationStatus::Active
                    && r.allocations.iter().any(|a| a.host_id == host_id)
            }),
        }
    }

    /// The enrolled host of a compute service host.
    pub fn host_of_service(&self, service_host: &str) -> Option<&ReservableHost> {
        self.hosts.get(self.host_by_service.get(service_host)?)
    }

    /// Bookings on a host overlapping `[start, end)`, ignoring `except`.
    pub fn overlapping(
        &self,
        host_id: i64,
        start: Timestamp,
        end: Timestamp,
        except: Option<Uuid>,
    ) -> impl Iterator<Item = &Booking> {
        self.bookings
            .get(&host_id)
            .into_iter()
            .flat_map(move |list| list.overlapping(start, end))
            .filter(move |b| Some(b.lease) != except)
    }
}
