//! The reservation (Blazar) runtime: the lease event runner, lease healing,
//! event notifications, and the parser of Blazar's requirement language.
//!
//! - [`runner`]: the loop that begins, acts on and finishes due lease
//!   events, and heals leases whose hosts went down;
//! - [`query`]: `hypervisor_properties` / `resource_properties` text to the
//!   pure [`berth_reservation_model::Query`].
//!
//! Owns: [`Reservations`], the lease runtime's state (its wake-up signal,
//! counters, suspect hosts, failed notifications) and settings
//! ([`ReservationConfig`]). Decisions are `berth-reservation-model`'s plans;
//! writes go through the compute runtime's control write path.
//!
//! Must not: know HTTP or the wire format (the API's lease view reaches
//! notifications as a plain function given to [`Reservations::new`]), or
//! talk to a store directly.
//!
//! # Why the compute runtime does not know about leases
//!
//! The dependency points one way: this crate takes an `Arc<Compute>` (to
//! read and write the control state, delete a lease's servers, read host
//! health and the clock) and `berth-compute` knows nothing of leases.
//! `Compute::start` no longer spawns the lease loop; the process wiring
//! (`berth-cli`) builds a [`Reservations`] beside the `Compute` and calls
//! [`Reservations::start`]. The API wakes the loop with
//! [`Reservations::leases_changed`].

pub mod lending;
pub mod power;

pub use berth_reservation_model::end_policy::{pool_state, PoolState};
pub use berth_reservation_model::power::{PowerConfig, PowerPolicy};
pub mod query;
pub mod runner;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_compute::Compute;
use berth_compute_model::lease::{EndPolicy, Lease};

/// Renders a lease for notifications (the API's view).
pub type LeasePayload = fn(&Lease) -> serde_json::Value;

/// Settings of the lease runtime.
#[derive(Debug, Clone)]
pub struct ReservationConfig {
    /// How often the lease runner looks for due events and down hosts.
    pub lease_tick: Duration,
    /// Lease event notifications are POSTed here (Blazar's
    /// `lease.event.*` notifications, as a webhook); none when unset.
    pub notification_url: Option<String>,
    /// Blazar's `minutes_before_end_lease`: the default `before_end_date`
    /// is this long before the end (the grace between the warning, with
    /// its notification or snapshots, and the end).
    pub minutes_before_end: i64,
    /// The end policy of a lease whose body gives no `on_end`
    /// (`--lease-on-end`; default `delete`, Blazar's behaviour).
    pub on_end: EndPolicy,
    /// Power management of the pool (`--power-policy` and friends).
    pub power: berth_reservation_model::power::PowerConfig,
    /// `--power-on-cmd`: run with `sh -c`, the host name as `$1`.
    pub power_on_cmd: Option<String>,
    /// `--power-off-cmd`: run with `sh -c`, the host name as `$1`.
    pub power_off_cmd: Option<String>,
}

impl Default for ReservationConfig {
    fn default() -> Self {
        ReservationConfig {
            lease_tick: Duration::from_secs(1),
            notification_url: None,
            minutes_before_end: 60,
            on_end: EndPolicy::Delete,
            power: Default::default(),
            power_on_cmd: None,
            power_off_cmd: None,
        }
    }
}

/// The lease runtime of one process.
pub struct Reservations {
    /// The compute runtime (control state, servers, health, clock).
    pub compute: Arc<Compute>,
    /// Settings.
    pub config: ReservationConfig,
    /// Counters of the lease runner.
    pub metrics: LeaseMetrics,
    /// Renders a lease for notifications (a bare id without it).
    payload: Option<LeasePayload>,
    /// Failed deliveries per event (given up after a few ticks).
    notify_failures: Mutex<HashMap<uuid::Uuid, u32>>,
    wake: tokio::sync::Notify,
    /// Enrolled hosts seen down at the last healing pass (not yet made
    /// unreservable).
    suspects: Mutex<BTreeSet<i64>>,
    /// Reclaimed pool hosts still carrying lent servers at the last drain
    /// pass.
    draining: Mutex<BTreeSet<i64>>,
    /// Lease starts checked (`start_on_free_hosts`) and not finished yet:
    /// the most held hosts a check found late (counted once, when the
    /// start finishes, however often it was retried).
    start_checks: Mutex<HashMap<uuid::Uuid, usize>>,
    /// Power management counters and energy.
    pub power_metrics: power::PowerMetrics,
    /// The power pass's idle times and last pass.
    power_state: Mutex<power::PowerRun>,
}

impl std::fmt::Debug for Reservations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservations").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Reservations {
    /// Build the lease runtime over `compute` (nothing runs until
    /// [`Reservations::start`]).
    pub fn new(compute: Arc<Compute>, config: ReservationConfig, payload: Option<LeasePayload>) -> Arc<Self> {
        Arc::new(Reservations {
            compute,
            config,
            metrics: LeaseMetrics::default(),
            payload,
            notify_failures: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            suspects: Mutex::default(),
            draining: Mutex::default(),
            start_checks: Mutex::default(),
            power_metrics: power::PowerMetrics::default(),
            power_state: Mutex::default(),
        })
    }

    /// Pool hosts recycling now (kept out of the pool by an ended
    /// `recycle` lease whose servers still run on them).
    pub fn recycling_hosts(&self) -> usize {
        berth_compute::control::read(&*self.compute.control, berth_reservation_model::end_policy::recycling_host_count)
    }

    /// Start the lease loop on the current tokio runtime.
    pub fn start(self: &Arc<Self>) {
        spawn_lease_runner(self.clone());
    }
}

/// Counters of the lease runner.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    /// Events finished.
    pub events_done: std::sync::atomic::AtomicU64,
    /// Host health changes handled.
    pub hosts_healed: std::sync::atomic::AtomicU64,
    /// Event notifications delivered.
    pub notifications_sent: std::sync::atomic::AtomicU64,
    /// Event notifications given up.
    pub notifications_failed: std::sync::atomic::AtomicU64,
    /// Pool hosts handed to general scheduling by `release` ends.
    pub hosts_released: std::sync::atomic::AtomicU64,
    /// General hosts enrolled to refill the pool after a `release` end.
    pub pool_refills: std::sync::atomic::AtomicU64,
    /// Leases moved off a host a `recycle` or `release` end kept busy.
    pub leases_moved_off_ended_hosts: std::sync::atomic::AtomicU64,
    /// Pool lending: reclaimed hosts that had lent servers to move away.
    pub drains_started: std::sync::atomic::AtomicU64,
    /// Pool lending: reclaimed hosts emptied of their lent servers.
    pub hosts_reclaimed: std::sync::atomic::AtomicU64,
    /// Pool lending: live migrations started by drains.
    pub drain_migrations: std::sync::atomic::AtomicU64,
    /// Pool lending: held hosts still busy at their lease's start and
    /// kept (the start degraded).
    pub drains_late: std::sync::atomic::AtomicU64,
    /// Held hosts still busy at their lease's start and swapped for free
    /// ones.
    pub hosts_swapped: std::sync::atomic::AtomicU64,
    /// Lease starts whose held hosts were all empty (or replaced by empty
    /// ones).
    pub starts_on_time: std::sync::atomic::AtomicU64,
    /// Lease starts with a held host still busy and nothing to replace it
    /// (degraded).
    pub starts_late: std::sync::atomic::AtomicU64,
}

/// Run the lease loop on the current runtime.
fn spawn_lease_runner(reservations: Arc<Reservations>) {
    tokio::spawn(async move {
        let mut healed_at: Option<tokio::time::Instant> = None;
        loop {
            // Host health moves with time and heartbeats, not with leases:
            // healing looks at every enrolled host, so it runs once per
            // tick however often leases change (a thousand creates a
            // second each wake the runner). Not at once when the test
            // clock jumps either: hosts look down until their next
            // heartbeat.
            let tick = reservations.config.lease_tick;
            let now = reservations.compute.now();
            if healed_at.is_none_or(|at| at.elapsed() >= tick) {
                reservations.heal_leases(now);
                reservations.drain_reclaimed_hosts(now).await;
                reservations.power_pass(now).await;
                healed_at = Some(tokio::time::Instant::now());
            }
            reservations.recycle_pass(now).await;
            reservations.run_due_events(now).await;
            let _ = tokio::time::timeout(tick, reservations.wake.notified()).await;
        }
    });
}
