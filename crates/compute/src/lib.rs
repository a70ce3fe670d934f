//! The compute control plane's runtime: everything between the compute API
//! and the databases that is not pure.
//!
//! - [`cells`]: handles on the cell databases (batched writes, per-cell
//!   read deadlines);
//! - [`health`]: service liveness, operator flags, build failures, and the
//!   [`health::Clock`];
//! - [`hub`]: the tasks waiting for each agent connected to this process;
//! - [`inflight`]: scheduling decisions whose claims are in flight,
//!   counted by the next scheduler runs;
//! - [`conductor`]: the boot pipeline (schedule → claim → cell row →
//!   agent), run by worker tasks fed from a queue;
//! - [`build`]: the boot's steps the conductor and pull mode share (the
//!   job, a scheduler round, the rows, handing builds out, burying);
//! - [`servers`]: what the API asks of servers: show, list across cells,
//!   delete, start/stop/reboot;
//! - [`agents`]: what agents ask: register, heartbeat, work, events.
//! - [`pause`]: pause/unpause and suspend/resume reports, and the admin's
//!   `os-resetState`;
//! - [`rebuild`]: rebuild in place, and the reclaim of soft-deleted
//!   servers;
//! - [`console`]: console output, asked of the host's agent;
//! - [`snapshot`]: `createImage` and `createBackup` (the image record,
//!   the host's upload, backup rotation);
//! - [`metadata`]: a server's user metadata and tags;
//! - [`pull`]: pull-mode scheduling's control-plane side: publishing
//!   boots to their queues (through a registered broker), the queues a
//!   host can take, the claim for one host, the outbox sweep;
//! - [`extension`]: the boot path's extension point ([`extension::BootExtension`],
//!   reserved servers) and the image data hook ([`extension::ImageData`]),
//!   registered by the process wiring;
//! - [`error`] and [`action`]: the error every operation returns and the
//!   pieces the instance actions share; they use no operation module.
//!
//! Control-state reads and writes go through [`control::Control`] (the
//! one write path of `berth-core`); pure decisions are made by
//! `berth-compute-model`'s plans and `berth-scheduler`.
//!
//! Leases are not this crate's: the lease runtime (`berth-reservations`)
//! takes an `Arc<Compute>` and the process wiring starts it, so nothing
//! here calls into lease code.
//!
//! It owns the compute runtime's state and background loops; it must not
//! serve HTTP (the API crates do), speak SQL (the stores do) or know leases
//! (`berth-reservations` drives it), and every control decision it makes
//! goes through one planned write.

pub mod action;
pub mod agents;
pub mod build;
pub mod cells;
pub mod conductor;
pub mod console;
pub mod control;
pub mod error;
pub mod evacuate;
pub mod extension;
pub mod guest;
pub mod heal;
pub mod health;
pub mod hub;
pub mod inflight;
pub mod live;
pub mod lock;
pub mod metadata;
pub mod moves;
pub mod pause;
pub mod pull;
pub mod rebuild;
pub mod servers;
pub mod services;
pub mod shelve;
pub mod snapshot;
pub mod timing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_compute_model::{CellMapping, Timestamp};

use crate::cells::Cells;
use crate::control::Control;
use crate::health::{Clock, Health};
use crate::hub::Hub;

/// A boxed future, for the trait objects the process wiring registers
/// (pull mode's [`pull::Broker`], the hub's [`hub::HostChannel`] and
/// [`hub::PeerChannel`]).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Settings of the compute runtime.
#[derive(Debug, Clone)]
pub struct ComputeConfig {
    /// Scheduler settings.
    pub scheduler: berth_scheduler::Config,
    /// Cell for agents that name none.
    pub default_cell: String,
    /// Scheduling rounds per boot when claims keep losing races.
    pub schedule_retries: usize,
    /// Concurrent conductor workers.
    pub conductor_workers: usize,
    /// How often the work sweep and health refresh run.
    pub sweep_interval: Duration,
    /// Nova's `service_down_time` in seconds.
    pub service_down_time: i64,
    /// Listings never return more than this (`[api] max_limit`).
    pub max_limit: usize,
    /// Where a new cell's database goes when none is given: `{name}` is
    /// replaced by the cell's name.
    pub cell_database_template: String,
    /// Disable a host's compute service after this many consecutive failed
    /// builds (Nova's `[compute] consecutive_build_service_disable_threshold`;
    /// 0: never, berth's default).
    pub auto_disable_after_failed_builds: i64,
    /// Let a resize pick the instance's own host (Nova's
    /// `allow_resize_to_same_host`, default false). Migrations never do.
    pub allow_resize_to_same_host: bool,
    /// Run the heal ([`heal::heal`]) every this many sweep ticks (0:
    /// only when asked, `POST /admin/v1/heal`).
    pub heal_every_ticks: u64,
    /// The heal acts on (and reports) only consumers and instances last
    /// written more than this many seconds ago.
    pub heal_grace_secs: i64,
    /// Seconds a shelved server keeps its host before it is offloaded
    /// (Nova's `shelved_offload_time`: 0, the default, offloads at once;
    /// -1 never).
    pub shelved_offload_time: i64,
    /// Seconds a finished resize or migration waits in `VERIFY_RESIZE`
    /// before the sweep confirms it (Nova's `resize_confirm_window`; 0,
    /// the default, never).
    pub resize_confirm_window: i64,
    /// Seconds a soft-deleted server waits before the sweep deletes it
    /// (Nova's `reclaim_instance_interval`; 0, the default: `DELETE`
    /// deletes at once and there is no soft delete).
    pub reclaim_instance_interval: i64,
}

impl Default for ComputeConfig {
    fn default() -> Self {
        ComputeConfig {
            scheduler: berth_scheduler::Config::default(),
            default_cell: "cell1".to_owned(),
            schedule_retries: 3,
            conductor_workers: 4,
            sweep_interval: Duration::from_millis(200),
            service_down_time: 60,
            max_limit: 1000,
            cell_database_template: "sqlite://berth-data/{name}.sqlite".to_owned(),
            auto_disable_after_failed_builds: 0,
            allow_resize_to_same_host: false,
            heal_every_ticks: 150,
            heal_grace_secs: 300,
            shelved_offload_time: 0,
            resize_confirm_window: 0,
            reclaim_instance_interval: 0,
        }
    }
}

/// Counters of the compute runtime (exported at `/metrics`).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Boots accepted (instances).
    pub boots_accepted: AtomicU64,
    /// Instances claimed onto a host.
    pub instances_claimed: AtomicU64,
    /// Instances buried in cell0.
    pub instances_buried: AtomicU64,
    /// Scheduler runs.
    pub scheduler_runs: AtomicU64,
    /// Claims that found their choices taken and scheduled again.
    pub claim_retries: AtomicU64,
    /// Instances that went ACTIVE.
    pub instances_active: AtomicU64,
    /// Builds that failed on their host.
    pub builds_failed: AtomicU64,
    /// Failed builds moved to an alternate host (without scheduling again).
    pub reschedules: AtomicU64,
    /// Failed builds that went to ERROR because no attempt or alternate
    /// was left.
    pub reschedules_exhausted: AtomicU64,
    /// Builds whose claim's cell update was lost, finished by the sweep.
    pub lost_claims_finished: AtomicU64,
    /// Resizes confirmed by the sweep after `resize_confirm_window`.
    pub resizes_auto_confirmed: AtomicU64,
    /// Compute services disabled after consecutive failed builds.
    pub services_auto_disabled: AtomicU64,
    /// Heal runs.
    pub heal_runs: AtomicU64,
    /// Orphaned INSTANCE consumers whose allocations the heal deleted.
    pub heal_orphans_removed: AtomicU64,
    /// Instances the heal gave their missing allocations.
    pub heal_allocations_created: AtomicU64,
    /// Findings the heal reported without fixing (summed over runs).
    pub heal_unresolved: AtomicU64,
    /// Boots (requests) that found no valid host: the on-demand demand
    /// the power pass of the reservation pool answers by waking hosts.
    pub boots_no_host: AtomicU64,
    /// When the last of them found none (the clock's seconds).
    pub last_no_host_at: std::sync::atomic::AtomicI64,
    /// Latency histograms: time to ACTIVE, scheduler runs, claims.
    pub timings: crate::timing::Timings,
}

/// Named points where a test can hold the conductor (only with
/// `serve --test-hooks`).
#[derive(Debug, Default)]
pub struct TestHooks {
    held: std::sync::Mutex<std::collections::HashSet<String>>,
    released: tokio::sync::Notify,
    waiting: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl TestHooks {
    /// Hold every boot at `point` until released.
    pub fn hold(&self, point: &str) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).insert(point.to_owned());
    }

    /// Release `point`.
    pub fn release(&self, point: &str) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(point);
        self.released.notify_waiters();
    }

    /// Wait while `point` is held.
    pub async fn pass(&self, point: &str) {
        // Counted while held; the guard uncounts even if the caller is
        // dropped while waiting (a listing whose client went away).
        struct Counted<'a>(&'a TestHooks, &'a str);
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                if let Some(n) = self.0.waiting.lock().unwrap_or_else(|p| p.into_inner()).get_mut(self.1) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        let mut counted: Option<Counted<'_>> = None;
        loop {
            let released = self.released.notified();
            if !self.held.lock().unwrap_or_else(|p| p.into_inner()).contains(point) {
                return;
            }
            if counted.is_none() {
                *self.waiting.lock().unwrap_or_else(|p| p.into_inner()).entry(point.to_owned()).or_default() += 1;
                counted = Some(Counted(self, point));
            }
            released.await;
        }
    }

    /// How many callers are held at `point` now (tests wait for this
    /// instead of guessing how long a request takes to get there).
    pub fn waiting(&self, point: &str) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).get(point).copied().unwrap_or(0)
    }
}

/// The compute runtime.
pub struct Compute {
    /// Control state (placement + compute tables).
    pub control: Arc<dyn Control>,
    /// Cell databases.
    pub cells: Cells,
    /// Agents' work.
    pub hub: Hub,
    /// Host health.
    pub health: Health,
    /// When unknown hosts' health was last read from their cells
    /// ([`Compute::learn_unknown_hosts`]); held while reading.
    health_learned: tokio::sync::Mutex<Option<std::time::Instant>>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Settings.
    pub config: ComputeConfig,
    /// Counters.
    pub metrics: Metrics,
    /// Test breakpoints.
    pub hooks: TestHooks,
    /// Scheduling decisions whose claims are in flight.
    pub in_flight: inflight::InFlight,
    /// Pull-mode scheduling (off unless a broker is registered).
    pub pull: pull::Pull,
    /// When this process started (its clock): hosts get `service_down_time`
    /// to report before lease healing may judge them down.
    pub started_at: Timestamp,
    /// A periodic heal is running (the sweep does not start another).
    heal_running: std::sync::atomic::AtomicBool,
    seed: AtomicU64,
    /// The request id of each build handed to an agent (the create
    /// action's), so its `spawned`/`build_failed` report needs no cell
    /// read to find it ([`Compute::build_request_id`]).
    build_request_ids: Mutex<std::collections::HashMap<uuid::Uuid, String>>,
    /// Each agent's last passed check of its whole host set: the caller,
    /// the set (held, so its address is not reused) and the bindings'
    /// epoch it was checked against ([`Compute::check_agent_hosts`]).
    agent_hosts_checked: Mutex<std::collections::HashMap<String, agents::HostsChecked>>,
    /// Takes boots over in their admission write (reserved servers);
    /// registered once by the process wiring.
    boot_extension: std::sync::OnceLock<Arc<dyn extension::BootExtension>>,
    /// Removes the data of images the runtime deletes; registered once by
    /// the process wiring.
    image_data: std::sync::OnceLock<Arc<dyn extension::ImageData>>,
    /// API requests waiting for an agent's console output, by task id.
    console_waiters: console::Waiters,
    jobs: tokio::sync::mpsc::UnboundedSender<build::BootJob>,
    jobs_rx: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<build::BootJob>>>,
}

impl std::fmt::Debug for Compute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compute").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Compute {
    /// Build the runtime (nothing runs until [`Compute::start`]).
    pub fn new(control: Arc<dyn Control>, cells: Cells, clock: Arc<dyn Clock>, config: ComputeConfig) -> Arc<Self> {
        let (jobs, jobs_rx) = tokio::sync::mpsc::unbounded_channel();
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        let started_at = clock.now();
        Arc::new(Compute {
            started_at,
            control,
            cells,
            hub: Hub::default(),
            health: Health::new(config.service_down_time),
            health_learned: tokio::sync::Mutex::new(None),
            clock,
            metrics: Metrics::default(),
            hooks: TestHooks::default(),
            in_flight: inflight::InFlight::default(),
            pull: pull::Pull::default(),
            heal_running: std::sync::atomic::AtomicBool::new(false),
            seed: AtomicU64::new(seed),
            build_request_ids: Mutex::new(std::collections::HashMap::new()),
            agent_hosts_checked: Mutex::new(std::collections::HashMap::new()),
            boot_extension: std::sync::OnceLock::new(),
            image_data: std::sync::OnceLock::new(),
            console_waiters: console::Waiters::default(),
            jobs,
            jobs_rx: std::sync::Mutex::new(Some(jobs_rx)),
            config,
        })
    }

    /// Start the conductor workers, the work sweep and the health refresh
    /// on the current tokio runtime, and pick up boots that were accepted
    /// but never scheduled (a previous process stopped).
    pub fn start(self: &Arc<Self>) {
        let rx = self.jobs_rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rx) = rx {
            conductor::spawn_workers(self.clone(), rx);
        }
        agents::spawn_sweep(self.clone());
        conductor::resume_pending(self);
    }

    /// Register the boot extension (once; a second call is ignored and
    /// returns false).
    pub fn set_boot_extension(&self, extension: Arc<dyn extension::BootExtension>) -> bool {
        self.boot_extension.set(extension).is_ok()
    }

    /// Register what removes image data (once; a second call is ignored
    /// and returns false).
    pub fn set_image_data(&self, data: Arc<dyn extension::ImageData>) -> bool {
        self.image_data.set(data).is_ok()
    }

    /// Remove the data of an image just deleted (nothing without a
    /// registered store: its sweep removes the file).
    pub fn remove_image_data(&self, image: &uuid::Uuid) {
        if let Some(data) = self.image_data.get() {
            data.remove(image);
        }
    }

    /// The registered boot extension, if any.
    pub fn boot_extension(&self) -> Option<&Arc<dyn extension::BootExtension>> {
        self.boot_extension.get()
    }

    /// Now.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Move the clock (test hooks). The lease runner notices at its next
    /// tick, not at once: after a jump every host looks down until its
    /// next heartbeat, and tests rely on heartbeats usually coming first.
    pub fn advance_clock(&self, seconds: i64) {
        self.clock.advance(seconds);
    }

    /// The database URL of a new cell called `name`.
    pub fn default_cell_database(&self, name: &str) -> String {
        self.config.cell_database_template.replace("{name}", name)
    }

    /// A fresh seed for the scheduler.
    pub fn next_seed(&self) -> u64 {
        self.seed.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
    }

    /// Every cell mapping, cell0 first.
    pub fn cell_mappings(&self) -> Vec<CellMapping> {
        control::read(&*self.control, |w| {
            let mut cells: Vec<CellMapping> = w.compute.cells.values().cloned().collect();
            cells.sort_by_key(|c| (c.uuid != berth_compute_model::CELL0_UUID, c.name.clone()));
            cells
        })
    }

    /// The cell mapping called `name`.
    pub fn cell_by_name(&self, name: &str) -> Option<CellMapping> {
        control::read(&*self.control, |w| w.compute.cells.values().find(|c| c.name == name).cloned())
    }

    /// The cell mapping with id `uuid`.
    pub fn cell(&self, uuid: &uuid::Uuid) -> Option<CellMapping> {
        control::read(&*self.control, |w| w.compute.cells.get(uuid).cloned())
    }
}
