//! The compute side of `berth serve`: cells (cell0 and cell1 created on
//! first start), the compute runtime (conductor, sweep, health), the lease
//! runtime beside it (`berth-reservations`: built on the compute runtime
//! and started here, since `berth-compute` knows nothing of leases), their
//! APIs (compute, image, agent, admin, identity, reservation) and their
//! dispatch, and the in-process fake hosts of `--fake-hosts`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::http::Response;
use berth_compute::cells::{CellOpener, Cells};
use berth_compute::health::SystemClock;
use berth_compute::{Compute, ComputeConfig};
use berth_compute_api::ComputeCtx;
use berth_compute_model::plan::plan_put_cell;
use berth_compute_model::{CellMapping, CELL0_UUID};
use berth_http::{Api, Server};
use berth_image_api::ImageCtx;
use berth_reservation_api::ReservationCtx;
use berth_reservations::{ReservationConfig, Reservations};
use berth_store::{CellStore, StoreError};
use uuid::Uuid;

use crate::paths::{RootApi, Target};

/// The compute APIs of one process.
pub(crate) struct ComputeServices {
    /// The runtime.
    pub(crate) compute: Arc<Compute>,
    /// Context for the shared listener (`/compute/...`).
    ctx: Arc<ComputeCtx>,
    /// Context for `--compute-listen` (compute API at the root).
    root_ctx: Arc<ComputeCtx>,
    compute_api: Api<ComputeCtx>,
    /// Context of the image API (the control state only).
    image_ctx: Arc<ImageCtx>,
    image_api: Api<ImageCtx>,
    agent_api: Api<ComputeCtx>,
    admin_api: Api<ComputeCtx>,
    identity_api: Api<ComputeCtx>,
    /// The lease runtime.
    pub(crate) reservations: Arc<Reservations>,
    /// Context of the reservation API on the shared listener
    /// (`/reservation/...`).
    reservation_ctx: Arc<ReservationCtx>,
    /// Context for `--reservation-listen` (reservation API at the root).
    reservation_root_ctx: Arc<ReservationCtx>,
    reservation_api: Api<ReservationCtx>,
}

/// Open a cell's store from its mapping.
pub(crate) fn open_cell(mapping: &CellMapping) -> Result<Arc<dyn CellStore>, StoreError> {
    let url = mapping.database_connection.as_str();
    if let Some(path) = url.strip_prefix("sqlite://") {
        return Ok(Arc::new(berth_store_sqlite::SqliteCellStore::open(Path::new(path))?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(berth_store_postgres::PostgresCellStore::connect(url)?));
    }
    Err(StoreError::Internal(format!("unsupported cell database URL for cell {}", mapping.name)))
}

/// Where the default cells' databases go: beside the control database.
/// SQLite: `{data dir}/{name}.sqlite`; PostgreSQL: the same database, in
/// schema `{control schema or berth}_{name}`.
pub(crate) fn cell_database_template(control: Option<&str>, data_dir: &Path) -> String {
    match control {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let (base, schema) = match url.split_once("schema=") {
                Some((before, after)) => {
                    let schema = after.split('&').next().unwrap_or("berth");
                    let rest: Vec<&str> = after.split('&').skip(1).collect();
                    let mut base = before.trim_end_matches(['&', '?']).to_owned();
                    for part in rest {
                        base.push(if base.contains('?') { '&' } else { '?' });
                        base.push_str(part);
                    }
                    (base, schema.to_owned())
                }
                None => (url.to_owned(), "berth".to_owned()),
            };
            let sep = if base.contains('?') { '&' } else { '?' };
            format!("{base}{sep}schema={schema}_{{name}}")
        }
        Some(url) if url.starts_with("sqlite://") => {
            let path = Path::new(&url["sqlite://".len()..]);
            let dir = path.parent().unwrap_or(Path::new("."));
            format!("sqlite://{}/{{name}}.sqlite", dir.display())
        }
        _ => format!("sqlite://{}/{{name}}.sqlite", data_dir.display()),
    }
}

/// Settings of the compute side.
#[derive(Debug, Clone)]
pub(crate) struct ComputeSettings {
    pub(crate) config: ComputeConfig,
    /// Settings of the lease runtime.
    pub(crate) reservations: ReservationConfig,
    pub(crate) cell_timeout: Duration,
    /// Directory of the image data.
    pub(crate) image_store_dir: std::path::PathBuf,
    /// The object store of the image data, when not a directory.
    pub(crate) image_objects: Option<berth_image_api::objects::ObjectStoreConfig>,
    /// Largest image data in bytes.
    pub(crate) image_size_cap: u64,
    /// How long an upload may go without writing before a sweep takes it
    /// for dead.
    pub(crate) image_upload_idle: Duration,
    /// Per-project image quotas.
    pub(crate) image_quotas: berth_image_api::data::ImageQuotas,
    pub(crate) test_hooks: bool,
    /// Where the test clock keeps its offset (with test hooks).
    pub(crate) clock_file: Option<std::path::PathBuf>,
    /// Pull-mode scheduling (`--scheduling pull`); `None`: push.
    pub(crate) pull: Option<PullWiring>,
}

/// How this process reaches the pull queues.
#[derive(Debug, Clone)]
pub(crate) struct PullWiring {
    /// NATS and the queue names.
    pub(crate) nats: berth_pull::Settings,
    /// Seconds a boot may wait for a claim before it is buried.
    pub(crate) build_timeout_secs: i64,
}

/// The pull queues on NATS JetStream as `berth-compute` publishes to
/// them, and the hosts' subjects the hub sends tasks on: connected on
/// first use (the server starts with NATS down), each queue's durable
/// consumer created before its first publish (the queue-list manager's
/// set of consumers).
struct NatsBroker {
    /// The compute runtime and control state the task payloads are read
    /// from (weak: the runtime's hub holds this broker).
    compute: std::sync::Weak<Compute>,
    core: Arc<berth_core::App>,
    nats: berth_pull::Settings,
    queues: tokio::sync::OnceCell<berth_pull::Queues>,
    consumers: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// How long a host's agent has to answer that it took a task on its
/// subject before the hub queues it for the long poll instead.
const HOST_TASK_ANSWER_WAIT: Duration = Duration::from_secs(2);

impl NatsBroker {
    async fn queues(&self) -> Result<&berth_pull::Queues, String> {
        self.queues.get_or_try_init(|| berth_pull::Queues::connect(&self.nats)).await.map_err(|e| e.to_string())
    }
}

impl berth_compute::pull::Broker for NatsBroker {
    fn publish(&self, boot: berth_compute::pull::Publication) -> berth_compute::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let queues = self.queues().await?;
            let known = self.consumers.lock().unwrap_or_else(|p| p.into_inner()).contains(&boot.queue);
            if !known {
                queues.consumer(&boot.queue).await.map_err(|e| e.to_string())?;
                self.consumers.lock().unwrap_or_else(|p| p.into_inner()).insert(boot.queue.clone());
            }
            let message =
                berth_pull::Boot { instance: boot.instance, queue: boot.queue, attempt: boot.attempt, gang: boot.gang };
            queues.publish(&message).await.map(|_| ()).map_err(|e| e.to_string())
        })
    }
}

impl berth_compute::hub::HostChannel for NatsBroker {
    fn send(
        &self,
        task: &berth_compute::hub::Task,
    ) -> berth_compute::BoxFuture<'_, Result<(), berth_compute::hub::HostSendFailure>> {
        use berth_compute::hub::HostSendFailure;
        // The same JSON the long poll hands out: this path carries the
        // tasks other than a pull-mode boot (which a claim answers).
        let task = task.clone();
        let host = task.host.clone();
        Box::pin(async move {
            use berth_compute_api::handlers::agents::{task_json, task_payloads};
            let payload = match self.compute.upgrade() {
                Some(compute) => task_payloads(&compute, &self.core, std::slice::from_ref(&task)).await.remove(0),
                None => task_json(&task, None, None),
            };
            let payload = payload.to_string().into_bytes();
            let queues = self.queues().await.map_err(HostSendFailure::Unavailable)?;
            queues.send_to_host(&host, payload, HOST_TASK_ANSWER_WAIT).await.map_err(|e| match e {
                berth_pull::HostSendError::NoTaker => HostSendFailure::NoTaker,
                berth_pull::HostSendError::Unavailable(why) => HostSendFailure::Unavailable(why),
            })
        })
    }
}

/// The hub's relay to the other processes: the store's notifications.
struct StorePeers(Arc<dyn berth_store::Store>);

impl berth_compute::hub::PeerChannel for StorePeers {
    fn send(&self, payload: &str) {
        if let Err(err) = self.0.notify_peers(payload) {
            tracing::debug!(error = %err, "tasks not relayed to the other processes (their sweeps find them)");
        }
    }
}

/// How often the image store is swept (more often if uploads are taken
/// for dead sooner).
const IMAGE_SWEEP_EVERY: Duration = Duration::from_secs(5 * 60);

/// Open the image store and sweep it: at start-up, the only process on an
/// embedded database takes every leftover at once (no upload can be in
/// progress); processes sharing a database take only idle ones. A thread
/// sweeps again periodically.
fn start_image_store(
    core: &Arc<berth_core::App>,
    settings: &ComputeSettings,
) -> anyhow::Result<Arc<berth_image_api::data::ImageStore>> {
    let store = match &settings.image_objects {
        Some(objects) => berth_image_api::data::ImageStore::open_objects(
            objects,
            settings.image_size_cap,
            settings.image_upload_idle,
        )?,
        None => berth_image_api::data::ImageStore::open(settings.image_store_dir.clone(), settings.image_size_cap)?,
    };
    let store = Arc::new(store.with_quotas(settings.image_quotas));
    let upload_idle = settings.image_upload_idle;
    let idle = if core.store().shared() { upload_idle } else { Duration::ZERO };
    let report = store.sweep(core, idle);
    tracing::info!(store = %store.describe(), ?report, "image store swept");
    let (core, swept) = (core.clone(), store.clone());
    let spawned = std::thread::Builder::new().name("berth-image-sweep".into()).spawn(move || loop {
        std::thread::sleep(IMAGE_SWEEP_EVERY.min(upload_idle).max(Duration::from_secs(1)));
        let report = swept.sweep(&core, upload_idle);
        if report != berth_image_api::data::SweepReport::default() {
            tracing::info!(?report, "image store swept");
        }
    });
    if let Err(err) = spawned {
        tracing::warn!(error = %err, "no periodic image sweep");
    }
    Ok(store)
}

/// The image store as the compute runtime's image data hook (backups
/// rotated out, snapshots dropped, images deleted through the proxy).
struct StoreImageData(Arc<berth_image_api::data::ImageStore>);

impl berth_compute::extension::ImageData for StoreImageData {
    fn remove(&self, image: &uuid::Uuid) {
        self.0.remove(image);
    }
}

impl ComputeServices {
    /// The validator of the per-host agent credentials berth issues.
    pub(crate) fn agent_credentials(&self) -> Arc<dyn berth_http::TokenValidator> {
        Arc::new(berth_compute_api::handlers::credentials::AgentCredentials::new(self.ctx.core.clone()))
    }

    /// Build the compute side on `core` (inside the tokio runtime): make
    /// sure cell0 and cell1 exist, open the cells, start the runtime.
    pub(crate) fn start(
        core: Arc<berth_core::App>,
        settings: ComputeSettings,
        overrides: &BTreeMap<String, String>,
    ) -> anyhow::Result<Self> {
        let image_store = start_image_store(&core, &settings)?;
        let opener: CellOpener = Arc::new(open_cell);
        let cells = Cells::new(opener, settings.cell_timeout);
        let clock = Arc::new(match &settings.clock_file {
            Some(file) => SystemClock::persisted(file.clone()),
            None => SystemClock::default(),
        });
        let compute = Compute::new(core.clone(), cells, clock, settings.config.clone());
        compute.set_image_data(Arc::new(StoreImageData(image_store.clone())));
        if let Some(pull) = &settings.pull {
            // Before `start`: boots resumed at start-up are published too.
            let broker = Arc::new(NatsBroker {
                compute: Arc::downgrade(&compute),
                core: core.clone(),
                nats: pull.nats.clone(),
                queues: tokio::sync::OnceCell::new(),
                consumers: std::sync::Mutex::default(),
            });
            compute.set_pull_broker(broker.clone(), pull.build_timeout_secs);
            // Tasks for pulling agents' hosts go on the hosts' subjects.
            compute.hub.set_host_channel(broker);
            berth_compute::pull::spawn_outbox(compute.clone(), Duration::from_secs(1));
            tracing::info!(nats = %pull.nats.url, prefix = %pull.nats.prefix, "pull-mode scheduling");
        }
        if core.store().shared() {
            // Several processes on one database: a task for an agent that
            // long-polls another process goes there now, not at that
            // process's next sweep.
            let store = core.store().clone();
            compute.hub.set_peer_channel(Arc::new(StorePeers(store.clone())));
            let receiver = compute.clone();
            store.listen_peers(Box::new(move |payload| {
                receiver.hub.receive_relayed(payload);
            }));
        }
        compute.start();
        let reservations =
            Reservations::new(compute.clone(), settings.reservations.clone(), Some(berth_reservation_api::lease_view));
        reservations.start();
        // Reserved servers: the boot path admits their lease in the boot's
        // own write (berth-compute knows only held build requests).
        compute.set_boot_extension(Arc::new(berth_reservation_api::reserved::ReservedServers {
            reservations: reservations.clone(),
        }));
        let max_limit = settings.config.max_limit;
        let ctx = |prefix: &'static str| {
            Arc::new(ComputeCtx {
                compute: compute.clone(),
                core: core.clone(),
                prefix,
                max_limit,
                test_hooks: settings.test_hooks,
            })
        };
        let reservation_ctx = |prefix: &'static str| {
            Arc::new(ReservationCtx { reservations: reservations.clone(), core: core.clone(), prefix })
        };
        Ok(ComputeServices {
            reservation_ctx: reservation_ctx("/reservation"),
            reservation_root_ctx: reservation_ctx(""),
            reservations: reservations.clone(),
            ctx: ctx("/compute"),
            root_ctx: ctx(""),
            compute: compute.clone(),
            compute_api: berth_compute_api::routes::compute_api(overrides)?,
            image_ctx: Arc::new(ImageCtx { core: core.clone(), store: image_store }),
            image_api: berth_image_api::image_api(overrides)?,
            agent_api: berth_compute_api::routes::agent_api(overrides)?,
            admin_api: berth_compute_api::routes::admin_api(overrides)?,
            identity_api: berth_compute_api::routes::identity_api(overrides)?,
            reservation_api: berth_reservation_api::reservation_api(overrides)?,
        })
    }

    /// Dispatch a request for one of the compute-side APIs.
    pub(crate) async fn dispatch(
        &self,
        server: &Server,
        target: Target<'_>,
        request: axum::extract::Request,
    ) -> Response<Body> {
        let (api, rest) = match target {
            Target::Compute(rest) => (&self.compute_api, strip_project(rest)),
            Target::Image(rest) => {
                let rest = if rest.is_empty() { "/" } else { rest };
                return berth_http::dispatch(&self.image_ctx, &self.image_api, server, rest, request).await;
            }
            Target::Agent(rest) => (&self.agent_api, rest.to_owned()),
            Target::Admin(rest) => (&self.admin_api, rest.to_owned()),
            Target::Identity(rest) => (&self.identity_api, rest.to_owned()),
            Target::Reservation(rest) => {
                let rest = if rest.is_empty() { "/" } else { rest };
                return berth_http::dispatch(&self.reservation_ctx, &self.reservation_api, server, rest, request).await;
            }
            Target::Operational | Target::Placement(_) | Target::Dashboard(_) => {
                return Response::builder().status(404).body(Body::empty()).unwrap_or_default()
            }
        };
        let rest = if rest.is_empty() { "/".to_owned() } else { rest };
        berth_http::dispatch(&self.ctx, api, server, &rest, request).await
    }

    /// The error renderer of the compute-side API of `target`.
    pub(crate) fn error_renderer(&self, target: &Target<'_>) -> Option<berth_http::ErrorRenderer> {
        let api = match target {
            Target::Compute(_) => &self.compute_api,
            Target::Image(_) => return Some(self.image_api.render_error),
            Target::Agent(_) => &self.agent_api,
            Target::Admin(_) => &self.admin_api,
            Target::Identity(_) => &self.identity_api,
            Target::Reservation(_) => return Some(self.reservation_api.render_error),
            Target::Operational | Target::Placement(_) | Target::Dashboard(_) => return None,
        };
        Some(api.render_error)
    }

    /// The error renderer of the API served alone on a listener.
    pub(crate) fn root_error_renderer(&self, api: RootApi) -> berth_http::ErrorRenderer {
        match api {
            RootApi::Compute => self.compute_api.render_error,
            RootApi::Reservation => self.reservation_api.render_error,
        }
    }

    /// Dispatch a request on a listener of its own (`--compute-listen`,
    /// `--reservation-listen`).
    pub(crate) async fn dispatch_root(
        &self,
        api: RootApi,
        server: &Server,
        path: &str,
        request: axum::extract::Request,
    ) -> Response<Body> {
        match api {
            RootApi::Compute => {
                let rest = strip_project(path);
                let rest = if rest.is_empty() { "/" } else { &rest };
                berth_http::dispatch(&self.root_ctx, &self.compute_api, server, rest, request).await
            }
            RootApi::Reservation => {
                let rest = if path.is_empty() { "/" } else { path };
                berth_http::dispatch(&self.reservation_root_ctx, &self.reservation_api, server, rest, request).await
            }
        }
    }

    /// Counters for `/metrics`.
    pub(crate) fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.compute.metrics;
        let mut counters = vec![
            (
                "berth_compute_boots_accepted_total",
                "Instances accepted by POST /servers.",
                m.boots_accepted.load(Relaxed),
            ),
            (
                "berth_compute_instances_claimed_total",
                "Instances claimed onto a host.",
                m.instances_claimed.load(Relaxed),
            ),
            ("berth_compute_instances_buried_total", "Instances buried in cell0.", m.instances_buried.load(Relaxed)),
            ("berth_compute_scheduler_runs_total", "Scheduler runs.", m.scheduler_runs.load(Relaxed)),
            (
                "berth_compute_claim_retries_total",
                "Claims whose choices were taken meanwhile and were scheduled again.",
                m.claim_retries.load(Relaxed),
            ),
            ("berth_compute_instances_active_total", "Instances that went ACTIVE.", m.instances_active.load(Relaxed)),
            ("berth_compute_builds_failed_total", "Builds that failed on their host.", m.builds_failed.load(Relaxed)),
            (
                "berth_lease_events_done_total",
                "Lease events (start, before end, end) finished by this process.",
                self.reservations.metrics.events_done.load(Relaxed),
            ),
            (
                "berth_lease_hosts_healed_total",
                "Leases healed because a host they held went down.",
                self.reservations.metrics.hosts_healed.load(Relaxed),
            ),
            (
                "berth_lease_notifications_sent_total",
                "Lease event notifications delivered to --lease-notification-url.",
                self.reservations.metrics.notifications_sent.load(Relaxed),
            ),
            (
                "berth_lease_notifications_failed_total",
                "Lease event notifications given up after five failed attempts.",
                self.reservations.metrics.notifications_failed.load(Relaxed),
            ),
            (
                "berth_lease_pool_hosts_released_total",
                "Pool hosts handed to general scheduling by release lease ends.",
                self.reservations.metrics.hosts_released.load(Relaxed),
            ),
            (
                "berth_lease_pool_refills_total",
                "General hosts enrolled to refill the pool after release lease ends.",
                self.reservations.metrics.pool_refills.load(Relaxed),
            ),
            (
                "berth_lease_moved_off_ended_hosts_total",
                "Leases moved off a host a recycle or release end kept busy.",
                self.reservations.metrics.leases_moved_off_ended_hosts.load(Relaxed),
            ),
            (
                "berth_pool_drains_started_total",
                "Reclaimed pool hosts (a lease needs them within --pool-lend-lead) that carried lent servers.",
                self.reservations.metrics.drains_started.load(Relaxed),
            ),
            (
                "berth_pool_hosts_reclaimed_total",
                "Reclaimed pool hosts emptied of their lent servers.",
                self.reservations.metrics.hosts_reclaimed.load(Relaxed),
            ),
            (
                "berth_pool_drain_migrations_total",
                "Live migrations started to move lent servers off reclaimed pool hosts.",
                self.reservations.metrics.drain_migrations.load(Relaxed),
            ),
            (
                "berth_pool_drains_late_total",
                "Held hosts still carrying other servers at their lease's start with no free host to replace them.",
                self.reservations.metrics.drains_late.load(Relaxed),
            ),
            (
                "berth_lease_hosts_swapped_total",
                "Held hosts still busy at their lease's start, replaced by free matching hosts.",
                self.reservations.metrics.hosts_swapped.load(Relaxed),
            ),
            (
                "berth_lease_starts_late_total",
                "Lease starts with a held host still busy and no free host to replace it (degraded).",
                self.reservations.metrics.starts_late.load(Relaxed),
            ),
            (
                "berth_lease_starts_on_time_total",
                "Lease starts whose held hosts were all empty.",
                self.reservations.metrics.starts_on_time.load(Relaxed),
            ),
            (
                "berth_power_ups_total",
                "Power-on commands issued to reservation pool hosts.",
                self.reservations.power_metrics.power_ups.load(Relaxed),
            ),
            (
                "berth_power_downs_total",
                "Power-off commands issued to reservation pool hosts.",
                self.reservations.power_metrics.power_downs.load(Relaxed),
            ),
            (
                "berth_power_failures_total",
                "Pool hosts switched on that did not come back (resume timeout or failed power-on command).",
                self.reservations.power_metrics.failures.load(Relaxed),
            ),
            (
                "berth_power_command_errors_total",
                "Power commands that exited non-zero, timed out or could not run.",
                self.reservations.power_metrics.command_errors.load(Relaxed),
            ),
            (
                "berth_power_ondemand_waits_total",
                "Boots that found no valid host while pool hosts were off or powering on (each wakes a host).",
                self.reservations.power_metrics.ondemand_waits.load(Relaxed),
            ),
            (
                "berth_power_ondemand_wait_seconds_total",
                "Seconds from such a boot to the pool host woken for it being on, summed.",
                self.reservations.power_metrics.ondemand_wait_secs.load(Relaxed),
            ),
            (
                "berth_compute_boots_no_host_total",
                "Boots that found no valid host (NoValidHost).",
                m.boots_no_host.load(Relaxed),
            ),
            (
                "berth_compute_reschedules_total",
                "Failed builds moved to an alternate host without scheduling again.",
                m.reschedules.load(Relaxed),
            ),
            (
                "berth_compute_reschedules_exhausted_total",
                "Failed builds that went to ERROR with no attempt or alternate left.",
                m.reschedules_exhausted.load(Relaxed),
            ),
            (
                "berth_compute_lost_claims_finished_total",
                "Builds whose claim's cell update was lost (crash, cell outage), finished by the sweep.",
                m.lost_claims_finished.load(Relaxed),
            ),
            (
                "berth_compute_tasks_relayed_total",
                "Agent tasks relayed to the other processes on the database: no agent connected here serves the host.",
                self.compute.hub.metrics.relayed.load(Relaxed),
            ),
            (
                "berth_compute_tasks_relayed_in_total",
                "Agent tasks other processes relayed here that went to an agent connected here.",
                self.compute.hub.metrics.relayed_in.load(Relaxed),
            ),
            (
                "berth_compute_resizes_auto_confirmed_total",
                "Resizes and migrations confirmed after resize_confirm_window.",
                m.resizes_auto_confirmed.load(Relaxed),
            ),
            (
                "berth_compute_services_auto_disabled_total",
                "Compute services disabled after consecutive failed builds.",
                m.services_auto_disabled.load(Relaxed),
            ),
            ("berth_heal_runs_total", "Heal runs (periodic and POST /admin/v1/heal).", m.heal_runs.load(Relaxed)),
            (
                "berth_heal_orphans_removed_total",
                "Orphaned INSTANCE consumers whose allocations the heal deleted.",
                m.heal_orphans_removed.load(Relaxed),
            ),
            (
                "berth_heal_allocations_created_total",
                "Instances the heal gave the allocations of their flavor.",
                m.heal_allocations_created.load(Relaxed),
            ),
            (
                "berth_heal_unresolved_total",
                "Heal findings reported without a fix (summed over runs).",
                m.heal_unresolved.load(Relaxed),
            ),
        ];
        counters.extend(self.pull_counters());
        counters
    }

    /// Pull mode's counters (none in push mode).
    fn pull_counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let pull = &self.compute.pull;
        if !pull.enabled() {
            return Vec::new();
        }
        let m = &pull.metrics;
        let hub = &self.compute.hub.metrics;
        let routed = m.routed_to_push.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let reason = |r: &str| routed.get(r).copied().unwrap_or(0);
        vec![
            ("berth_pull_published_total", "Boots published to their pull queue.", m.published.load(Relaxed)),
            (
                "berth_pull_publish_failures_total",
                "Publishes that failed (the outbox sweep retries).",
                m.publish_failures.load(Relaxed),
            ),
            ("berth_pull_claims_total", "Pull claims that placed an instance.", m.claims.load(Relaxed)),
            (
                "berth_pull_claims_refused_total",
                "Pull claims refused: the host cannot take the boot now.",
                m.claims_refused.load(Relaxed),
            ),
            (
                "berth_pull_claims_gone_total",
                "Pull claims for boots claimed elsewhere, buried or deleted.",
                m.claims_gone.load(Relaxed),
            ),
            (
                "berth_pull_timed_out_total",
                "Boots buried because no host claimed them within --pull-build-timeout-secs.",
                m.timed_out.load(Relaxed),
            ),
            (
                "berth_pull_requeued_total",
                "Failed builds put back on their pull queue as their next attempt (counted against max_attempts).",
                m.requeued.load(Relaxed),
            ),
            (
                "berth_pull_requeued_claims_total",
                "Pull claims that placed a requeued build (also in berth_pull_claims_total).",
                m.requeued_claims.load(Relaxed),
            ),
            (
                "berth_pull_queue_evaluations_total",
                "Queue evaluations (one placement query and the filters over all hosts, shared by agents for 200 ms).",
                m.queue_evaluations.load(Relaxed),
            ),
            (
                "berth_pull_routed_to_push_total",
                "Boots a pull queue cannot carry, scheduled by the push scheduler.",
                routed.values().sum(),
            ),
            (
                "berth_pull_host_published_total",
                "Tasks (deletes, power, moves, builds routed to push) an agent took on its host's NATS subject.",
                hub.host_published.load(Relaxed),
            ),
            (
                "berth_pull_host_fallbacks_total",
                "Tasks for a pulling agent connected here that its host's subject did not take: sent by long poll.",
                hub.host_fallbacks.load(Relaxed),
            ),
            (
                "berth_pull_host_unanswered_total",
                "Tasks for hosts of agents not connected here that no agent took on the host's subject.",
                hub.host_unanswered.load(Relaxed),
            ),
            (
                "berth_pull_routed_server_group_total",
                "Boots routed to push: a server group whose policy is gone.",
                reason("server_group"),
            ),
            ("berth_pull_routed_affinity_total", "Boots routed to push: hard affinity group.", reason("affinity")),
            (
                "berth_pull_routed_soft_policy_total",
                "Boots routed to push: soft-affinity or soft-anti-affinity group (weighers).",
                reason("soft_policy"),
            ),
            (
                "berth_pull_routed_server_group_multi_create_total",
                "Boots routed to push: a multi-create into a server group.",
                reason("server_group_multi_create"),
            ),
            ("berth_pull_routed_forced_host_total", "Boots routed to push: forced host.", reason("forced_host")),
            (
                "berth_pull_routed_host_hints_total",
                "Boots routed to push: same_host/different_host hints.",
                reason("host_hints"),
            ),
        ]
    }

    /// Gauges for `/metrics`.
    /// The compute runtime's latency histograms: name, help, histogram.
    pub(crate) fn histograms(&self) -> [(&'static str, &'static str, &berth_compute::timing::Histogram); 3] {
        let t = &self.compute.metrics.timings;
        [
            (
                "berth_compute_time_to_active_seconds",
                "From POST /servers accepting a boot to the instance going ACTIVE (boots accepted by this process).",
                &t.time_to_active,
            ),
            ("berth_compute_scheduler_seconds", "One scheduler run for one boot request (or a batch).", &t.scheduler),
            (
                "berth_compute_claim_seconds",
                "One claim: the planned write of the chosen allocations, to durable.",
                &t.claim,
            ),
        ]
    }

    pub(crate) fn gauges(&self) -> Vec<(&'static str, &'static str, f64)> {
        let world = self.compute.control.as_ref();
        let (pending, mappings) = berth_compute::control::read(world, |w| {
            (w.compute.build_requests.len() as f64, w.compute.instance_mappings.len() as f64)
        });
        let pool = self.reservations.pool_gauges();
        let power: Vec<usize> = self.reservations.power_gauges().into_iter().map(|(_, n)| n).collect();
        let wh = self.reservations.energy_wh();
        let energy: f64 = wh.iter().sum();
        let mut pull = Vec::new();
        if self.compute.pull.enabled() {
            pull.push(("berth_pull_queues", "Pull queues in use (one durable consumer each).", {
                self.compute.pull.queues().len() as f64
            }));
            pull.push((
                "berth_pull_requeued_waiting",
                "Requeued failed builds waiting for a claim (known to this process).",
                self.compute.pull.requeued_waiting() as f64,
            ));
        }
        let mut gauges = vec![
            (
                "berth_lease_pool_hosts_recycling",
                "Pool hosts kept out of the pool by an ended recycle lease whose servers still run.",
                self.reservations.recycling_hosts() as f64,
            ),
            ("berth_compute_build_requests", "Boots accepted and not yet scheduled.", pending),
            ("berth_compute_instance_mappings", "Instance mappings (servers) in the control database.", mappings),
            ("berth_pool_hosts", "Hosts enrolled in the reservation pool.", pool.hosts as f64),
            (
                "berth_pool_hosts_lent",
                "Pool hosts lent to ordinary boots now (no lease needs them within --pool-lend-lead).",
                pool.lent as f64,
            ),
            ("berth_pool_lent_servers", "Ordinary servers on pool hosts now (lending on).", pool.lent_servers as f64),
            (
                "berth_pool_hosts_draining",
                "Reclaimed pool hosts still carrying ordinary servers (being drained).",
                pool.draining as f64,
            ),
            ("berth_lease_events_due", "Lease events due and not finished yet.", pool.events_due as f64),
            ("berth_power_hosts_on", "Pool hosts powered on.", power[0] as f64),
            ("berth_power_hosts_powering_off", "Pool hosts being switched off.", power[1] as f64),
            ("berth_power_hosts_off", "Pool hosts switched off (on purpose).", power[2] as f64),
            ("berth_power_hosts_powering_on", "Pool hosts being switched on.", power[3] as f64),
            ("berth_power_hosts_failed", "Pool hosts that did not come back after a power-on.", power[4] as f64),
            ("berth_power_energy_wh_total", "Energy drawn by pool hosts (Wh, from --host-watts-idle/busy).", energy),
            ("berth_power_energy_off_state_wh_total", "Energy drawn by pool hosts while off (always 0).", wh[2]),
        ];
        gauges.extend(pull);
        gauges
    }
}

/// Nova accepts `/v2.1/{project_id}/...`: drop the project segment. A
/// first segment that names one of the compute API's collections (any
/// route's first segment after `/v2.1/`) is not a project id.
fn strip_project(rest: &str) -> String {
    let Some(after) = rest.strip_prefix("/v2.1/") else { return rest.to_owned() };
    let mut parts = after.splitn(2, '/');
    let first = parts.next().unwrap_or("");
    match parts.next() {
        Some(tail) if !first.is_empty() && !berth_compute_api::routes::is_collection(first) => {
            format!("/v2.1/{tail}")
        }
        _ => rest.to_owned(),
    }
}

/// Create cell0 and cell1 on first start (Nova's `map_cell0` and
/// `create_cell`), opening (and migrating) their databases first. Runs
/// before the async runtime starts (the store clients block).
pub(crate) fn ensure_default_cells(core: &berth_core::App, config: &ComputeConfig) -> anyhow::Result<()> {
    let existing: Vec<CellMapping> = core.read().compute.cells.values().cloned().collect();
    let mut wanted = Vec::new();
    if !existing.iter().any(|c| c.uuid == CELL0_UUID) {
        wanted.push(CellMapping {
            uuid: CELL0_UUID,
            name: "cell0".to_owned(),
            database_connection: config.cell_database_template.replace("{name}", "cell0"),
            disabled: false,
        });
    }
    if !existing.iter().any(|c| c.name == config.default_cell) && existing.len() <= 1 {
        wanted.push(CellMapping {
            uuid: Uuid::new_v4(),
            name: config.default_cell.clone(),
            database_connection: config.cell_database_template.replace("{name}", &config.default_cell),
            disabled: false,
        });
    }
    for cell in wanted {
        open_cell(&cell).with_context(|| format!("opening the database of {}", cell.name))?;
        core.write(|w| plan_put_cell(w, cell.clone()).map(|s| (s, ())).map_err(|e| anyhow_store(e.to_string())))
            .map_err(|e| anyhow::anyhow!("creating cell {}: {e}", cell.name))?;
        tracing::info!(cell = %cell.name, "cell created");
    }
    Ok(())
}

fn anyhow_store(message: String) -> StoreError {
    StoreError::Internal(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_cell_databases_sit_beside_the_control_database() {
        let dir = Path::new("/var/lib/berth");
        assert_eq!(cell_database_template(None, dir), "sqlite:///var/lib/berth/{name}.sqlite");
        assert_eq!(
            cell_database_template(Some("postgres://u@h:5432/db?schema=prod"), dir),
            "postgres://u@h:5432/db?schema=prod_{name}"
        );
        assert_eq!(cell_database_template(Some("postgres://u@h/db"), dir), "postgres://u@h/db?schema=berth_{name}");
        assert_eq!(
            cell_database_template(Some("postgres://u@h/db?sslmode=disable&schema=s1"), dir),
            "postgres://u@h/db?sslmode=disable&schema=s1_{name}"
        );
    }

    #[test]
    fn project_segments_are_dropped() {
        assert_eq!(strip_project("/v2.1/servers"), "/v2.1/servers");
        assert_eq!(strip_project("/v2.1/abc123/servers/detail"), "/v2.1/servers/detail");
        assert_eq!(strip_project("/v2.1/flavors/1"), "/v2.1/flavors/1");
        assert_eq!(strip_project("/v2.1/"), "/v2.1/");
        // Every collection is one, the newer ones included.
        assert_eq!(strip_project("/v2.1/os-simple-tenant-usage/"), "/v2.1/os-simple-tenant-usage/");
        assert_eq!(strip_project("/v2.1/extensions/os-consoles"), "/v2.1/extensions/os-consoles");
        assert_eq!(strip_project("/v2.1/abc123/os-hosts/h1"), "/v2.1/os-hosts/h1");
    }
}
