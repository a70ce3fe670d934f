//! `berth serve` and `berth migrate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use berth_core::App;
use berth_http::{AuthMode, CorsConfig, HttpConfig, Policy, Server};
use berth_placement_api::{CandidateOptions, Placement};
use berth_store::Store;
use berth_store_sqlite::SqliteStore;

use crate::config::FileConfig;

/// Default listen address (placement's registered port).
const DEFAULT_LISTEN: &str = "127.0.0.1:8778";
/// Default data directory.
const DEFAULT_DATA_DIR: &str = "berth-data";
/// Default request body limit: 10 MiB, far above any placement request
/// (a 1,000-consumer POST /allocations is ~300 KB).
const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Default change-feed poll interval: bounds how stale another process's
/// writes can look here.
const DEFAULT_CHANGE_POLL_MS: u64 = 20;
/// NATS server of pull mode when none is given.
pub(crate) const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// Options of `berth serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeOpts {
    /// Address to listen on.
    #[arg(long, env = "BERTH_LISTEN")]
    listen: Option<String>,
    /// Directory for the embedded SQLite database.
    #[arg(long, env = "BERTH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL: `sqlite://PATH` or `postgres://USER@HOST:PORT/DB[?schema=NAME]`
    /// (default: SQLite in the data dir). Several berth processes may share
    /// one PostgreSQL database.
    #[arg(long, env = "BERTH_DATABASE")]
    database: Option<String>,
    /// oslo.policy YAML file overriding the built-in rules.
    #[arg(long, env = "BERTH_POLICY_FILE")]
    policy_file: Option<PathBuf>,
    /// Authentication: `keystone` (every token validated by Keystone, see
    /// `--keystone-*`), `noauth2` (development: X-Auth-Token
    /// user[:project]) or `trusted-headers` (behind a proxy that ran
    /// keystonemiddleware: X-User-Id/X-Project-Id/X-Roles).
    #[arg(long, env = "BERTH_AUTH")]
    auth: Option<String>,
    /// Keystone's URL (e.g. `http://keystone:5000/v3`).
    #[arg(long, env = "BERTH_KEYSTONE_URL")]
    keystone_url: Option<String>,
    /// berth's own Keystone user: it validates tokens (needs the `service`
    /// or `admin` role) and is the identity of the in-process fake hosts.
    #[arg(long, env = "BERTH_KEYSTONE_USER")]
    keystone_user: Option<String>,
    /// Password of `--keystone-user`.
    #[arg(long, env = "BERTH_KEYSTONE_PASSWORD", hide_env_values = true)]
    keystone_password: Option<String>,
    /// Project of `--keystone-user` (default `service`).
    #[arg(long, env = "BERTH_KEYSTONE_PROJECT")]
    keystone_project: Option<String>,
    /// Domain (name) of the user and project (default `Default`).
    #[arg(long, env = "BERTH_KEYSTONE_DOMAIN")]
    keystone_domain: Option<String>,
    /// Extra trusted root certificates (PEM) for an `https` Keystone
    /// (keystonemiddleware's `cafile`; the system's roots are trusted too).
    #[arg(long, env = "BERTH_KEYSTONE_CA_FILE")]
    keystone_ca_file: Option<PathBuf>,
    /// Seconds a validated token is cached (keystonemiddleware's
    /// `token_cache_time`, default 300): a revoked token keeps working
    /// here for at most this long.
    #[arg(long, env = "BERTH_TOKEN_CACHE_SECS")]
    token_cache_secs: Option<u64>,
    /// Serve TLS with this certificate chain (PEM; leaf first) on every
    /// listener. With `--tls-key`.
    #[arg(long, env = "BERTH_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, env = "BERTH_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Let noauth2 (where the token names the user and `admin` is admin)
    /// listen on a non-loopback address. Without it berth refuses: noauth2
    /// is for development and the conformance harnesses.
    #[arg(long, env = "BERTH_ALLOW_NOAUTH2_ON_NETWORK")]
    allow_noauth2_on_network: bool,
    /// Who may read `/metrics` and `/healthcheck`: `loopback-or-admin`
    /// (default), `admin`, or `anyone`.
    #[arg(long, env = "BERTH_OPERATIONAL_ACCESS", value_enum)]
    operational_access: Option<crate::services::OperationalAccess>,
    /// CORS allowed origin; empty disables CORS.
    #[arg(long, env = "BERTH_CORS_ALLOWED_ORIGIN")]
    cors_allowed_origin: Option<String>,
    /// Extra headers allowed in CORS requests (comma separated).
    #[arg(long, env = "BERTH_CORS_ALLOW_HEADERS")]
    cors_allow_headers: Option<String>,
    /// Largest accepted request body in bytes (413 above). Image data
    /// uploads are bounded by `--image-size-cap` instead.
    #[arg(long, env = "BERTH_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Directory of the image data (default `<data-dir>/images`). Several
    /// processes on one database need one shared directory.
    #[arg(long, env = "BERTH_IMAGE_STORE_DIR")]
    image_store_dir: Option<PathBuf>,
    /// Where image data lives: `file` (default, `--image-store-dir`) or an
    /// S3 object store, `s3://BUCKET[/PREFIX]` (OpenStack Swift's `s3api`
    /// or any S3-compatible store; the bucket must exist), reached at
    /// `--image-store-endpoint` with `--image-store-access-key` and
    /// `--image-store-secret-key`.
    #[arg(long, env = "BERTH_IMAGE_STORE")]
    image_store: Option<String>,
    /// The S3 endpoint of an `s3://` image store (e.g.
    /// `http://swift-proxy:8080`; AWS's when absent).
    #[arg(long, env = "BERTH_IMAGE_STORE_ENDPOINT")]
    image_store_endpoint: Option<String>,
    /// The region SigV4 signs for (default `us-east-1`, Swift s3api's
    /// default `location`).
    #[arg(long, env = "BERTH_IMAGE_STORE_REGION")]
    image_store_region: Option<String>,
    /// The access key of an `s3://` image store (Swift tempauth:
    /// `account:user`; with Keystone, an EC2 credential's access).
    #[arg(long, env = "BERTH_IMAGE_STORE_ACCESS_KEY")]
    image_store_access_key: Option<String>,
    /// Its secret key (better given in the environment or the config file
    /// than on the command line).
    #[arg(long, env = "BERTH_IMAGE_STORE_SECRET_KEY", hide_env_values = true)]
    image_store_secret_key: Option<String>,
    /// Largest image data in bytes (Glance's `image_size_cap`, default
    /// 1 TiB; 413 above).
    #[arg(long, env = "BERTH_IMAGE_SIZE_CAP")]
    image_size_cap: Option<u64>,
    /// Seconds an image upload may go without writing before a sweep
    /// takes it for dead (its process crashed): the image goes back to
    /// `queued` and its partial data is removed (default 900). The only
    /// process on an embedded database sweeps every leftover at start-up.
    #[arg(long, env = "BERTH_IMAGE_UPLOAD_IDLE_SECS")]
    image_upload_idle_secs: Option<u64>,
    /// Most images a project may have (Glance's `image_count_total`
    /// unified limit; unlimited by default, as Glance without limits).
    #[arg(long, env = "BERTH_IMAGE_COUNT_QUOTA")]
    image_count_quota: Option<u64>,
    /// Most image data a project may store, in MiB (Glance's
    /// `image_size_total` unified limit; unlimited by default).
    #[arg(long, env = "BERTH_IMAGE_SIZE_QUOTA_MIB")]
    image_size_quota_mib: Option<u64>,
    /// Seconds a connection may stay idle between requests before berth
    /// closes it (default 5, Apache's `KeepAliveTimeout`; 0 closes after
    /// every response). Clients that share one connection across forked
    /// processes (nova-scheduler, nova-conductor) depend on it.
    #[arg(long, env = "BERTH_KEEPALIVE_TIMEOUT")]
    keepalive_timeout: Option<u64>,
    /// Requests one connection may carry before berth closes it, after
    /// that request's response (default 10000; 0: no cap).
    #[arg(long, env = "BERTH_MAX_REQUESTS_PER_CONNECTION")]
    max_requests_per_connection: Option<u64>,
    /// Seconds a request's head may take to arrive, and a new connection
    /// may stay silent (default 30; at least the keep-alive timeout).
    #[arg(long, env = "BERTH_HEADER_READ_TIMEOUT")]
    header_read_timeout: Option<u64>,
    /// YAML config file (lowest precedence).
    #[arg(long, env = "BERTH_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter, e.g. `info` or `berth_compute=debug`.
    #[arg(long, env = "BERTH_LOG")]
    log: Option<String>,
    /// Log line format: `text` (key=value) or `json` (one object per line).
    #[arg(long, env = "BERTH_LOG_FORMAT")]
    log_format: Option<String>,
    /// Colour in text log lines: `auto` (only on a terminal), `always`,
    /// `never`.
    #[arg(long, env = "BERTH_LOG_COLOR", value_enum)]
    log_color: Option<crate::logging::LogColor>,
    /// How often (ms) to poll the shared database's change feed for other
    /// processes' writes (PostgreSQL only).
    #[arg(long, env = "BERTH_CHANGE_POLL_MS")]
    change_poll_ms: Option<u64>,
    /// How long (seconds) the shared database keeps change-feed entries
    /// (PostgreSQL; default 900). A process further behind reloads.
    #[arg(long, env = "BERTH_CHANGE_FEED_RETENTION_SECS")]
    change_feed_retention_secs: Option<u64>,
    /// Shuffle allocation candidates; with `limit`, return a random sample
    /// (upstream `[placement] randomize_allocation_candidates`). Default false.
    #[arg(long, env = "BERTH_RANDOMIZE_ALLOCATION_CANDIDATES", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    randomize_allocation_candidates: Option<bool>,
    /// Generate at most N allocation candidates per request, breadth-first
    /// across provider trees (upstream `[placement] max_allocation_candidates`
    /// with the breadth-first strategy). Negative or unset: unlimited.
    #[arg(long, env = "BERTH_MAX_ALLOCATION_CANDIDATES", allow_negative_numbers = true)]
    max_allocation_candidates: Option<i64>,
    /// Also serve the compute API at the root of this address (`/v2.1`,
    /// Nova's usual port 8774).
    #[arg(long, env = "BERTH_COMPUTE_LISTEN")]
    compute_listen: Option<String>,
    /// Also serve the reservation API at the root of this address (`/v1`,
    /// Blazar's usual port 1234).
    #[arg(long, env = "BERTH_RESERVATION_LISTEN")]
    reservation_listen: Option<String>,
    /// Run N fake compute hosts inside the server (the agent's code and
    /// protocol, over loopback HTTP).
    #[arg(long, env = "BERTH_FAKE_HOSTS")]
    fake_hosts: Option<usize>,
    /// How long a listing waits for one cell's database (ms, default 2000).
    #[arg(long, env = "BERTH_CELL_TIMEOUT_MS")]
    cell_timeout_ms: Option<u64>,
    /// Seconds without a heartbeat after which a compute service is down
    /// (Nova's `service_down_time`, default 60).
    #[arg(long, env = "BERTH_SERVICE_DOWN_TIME")]
    service_down_time: Option<i64>,
    /// How often the lease event runner looks for due events and host
    /// health (ms, default 1000). It also looks at once when a lease
    /// changes.
    #[arg(long, env = "BERTH_LEASE_TICK_MS")]
    lease_tick_ms: Option<u64>,
    /// Disable a host's compute service (and set `COMPUTE_STATUS_DISABLED`
    /// on its nodes) after this many consecutive failed builds (Nova's
    /// `consecutive_build_service_disable_threshold`). Default 0: never.
    #[arg(long, env = "BERTH_AUTO_DISABLE_AFTER_FAILED_BUILDS")]
    auto_disable_after_failed_builds: Option<i64>,
    /// POST each lease event (start, before end, end) here as a JSON
    /// notification (Blazar's `lease.event.*`, with the lease).
    #[arg(long, env = "BERTH_LEASE_NOTIFICATION_URL")]
    lease_notification_url: Option<String>,
    /// Default warning before a lease ends, in minutes (Blazar's
    /// `minutes_before_end_lease`, 60): when `before_end_lease` runs.
    #[arg(long, env = "BERTH_LEASE_MINUTES_BEFORE_END")]
    lease_minutes_before_end: Option<i64>,
    /// What happens at the end of a lease whose body gives no `on_end`:
    /// `delete` (Blazar's: the servers are deleted; default), `recycle`
    /// (they stay; their hosts rejoin the pool when empty) or `release`
    /// (they stay; their hosts go to general scheduling, the pool is
    /// refilled).
    #[arg(long, env = "BERTH_LEASE_ON_END")]
    lease_on_end: Option<String>,
    /// Lend the reservation pool's idle hosts to ordinary boots: a pool
    /// host that no lease needs within this many seconds takes ordinary
    /// servers; once a lease comes within it, the host takes no more and
    /// its ordinary servers live-migrate away before the lease starts.
    /// Unset: the pool takes only boots for its reservations (Blazar's).
    #[arg(long, env = "BERTH_POOL_LEND_LEAD")]
    pool_lend_lead: Option<i64>,
    /// Power management of the reservation pool: `off` (default: every
    /// host stays on) or `reservations` (idle pool hosts are switched off
    /// and switched on again before their leases; see docs/POWER.md).
    #[arg(long, env = "BERTH_POWER_POLICY")]
    power_policy: Option<String>,
    /// Command switching a pool host on, run with `sh -c` and the host
    /// name as `$1` (also in `BERTH_POWER_HOST`): an IPMI or wake-on-LAN
    /// script.
    #[arg(long, env = "BERTH_POWER_ON_CMD")]
    power_on_cmd: Option<String>,
    /// Command switching a pool host off (as `--power-on-cmd`).
    #[arg(long, env = "BERTH_POWER_OFF_CMD")]
    power_off_cmd: Option<String>,
    /// A host switched on that has not reported within this many seconds
    /// is `failed` and its leases move to other hosts (default 600).
    #[arg(long, env = "BERTH_POWER_RESUME_TIMEOUT")]
    power_resume_timeout: Option<i64>,
    /// Seconds a host takes to boot, as the policy plans it (default 300).
    #[arg(long, env = "BERTH_POWER_ON_SECS")]
    power_on_secs: Option<i64>,
    /// Seconds a pool host stays idle before it may be switched off
    /// (default 600).
    #[arg(long, env = "BERTH_SUSPEND_TIME")]
    suspend_time: Option<i64>,
    /// Extra seconds of lead before a lease start (default 300): a host is
    /// switched on at `start - (power-on secs + margin)`.
    #[arg(long, env = "BERTH_POWER_MARGIN")]
    power_margin: Option<i64>,
    /// Idle pool hosts kept on for on-demand boots (default 1).
    #[arg(long, env = "BERTH_SPARE_HOSTS")]
    spare_hosts: Option<usize>,
    /// Power-off commands per minute at most (default 60, Slurm's).
    #[arg(long, env = "BERTH_POWER_DOWN_PER_MIN")]
    power_down_per_min: Option<usize>,
    /// Power-on commands per minute at most (default 300, Slurm's).
    #[arg(long, env = "BERTH_POWER_UP_PER_MIN")]
    power_up_per_min: Option<usize>,
    /// Draw of an idle host, W (default 100), for the energy counters.
    #[arg(long, env = "BERTH_HOST_WATTS_IDLE")]
    host_watts_idle: Option<f64>,
    /// Draw of a busy host, W (default 250).
    #[arg(long, env = "BERTH_HOST_WATTS_BUSY")]
    host_watts_busy: Option<f64>,
    /// Let a resize choose the server's own host (Nova's
    /// `allow_resize_to_same_host`). Default false; migrations never do.
    #[arg(long, env = "BERTH_ALLOW_RESIZE_TO_SAME_HOST", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    allow_resize_to_same_host: Option<bool>,
    /// Run the placement/compute heal every N sweep ticks (200 ms each;
    /// default 150, 30 s; 0: only on POST /admin/v1/heal). It deletes the
    /// allocations left on INSTANCE consumers that are servers of berth's
    /// own cells and should hold none (deleted rows included); other
    /// clients' consumers are never touched.
    #[arg(long, env = "BERTH_HEAL_EVERY_TICKS")]
    heal_every_ticks: Option<u64>,
    /// The heal leaves alone what was written less than this many seconds
    /// ago (default 300).
    #[arg(long, env = "BERTH_HEAL_GRACE_SECS")]
    heal_grace_secs: Option<i64>,
    /// Seconds a shelved server keeps its host before it is offloaded
    /// (Nova's `shelved_offload_time`): 0, the default, offloads at once,
    /// -1 never.
    #[arg(long, env = "BERTH_SHELVED_OFFLOAD_TIME", allow_hyphen_values = true)]
    shelved_offload_time: Option<i64>,
    /// Seconds a finished resize or migration waits in VERIFY_RESIZE
    /// before it is confirmed automatically (Nova's
    /// `resize_confirm_window`); 0, the default, never.
    #[arg(long, env = "BERTH_RESIZE_CONFIRM_WINDOW")]
    resize_confirm_window: Option<i64>,
    /// Seconds a deleted server stays SOFT_DELETED (restorable) before it
    /// is deleted (Nova's `reclaim_instance_interval`); 0, the default,
    /// deletes at once.
    #[arg(long, env = "BERTH_RECLAIM_INSTANCE_INTERVAL")]
    reclaim_instance_interval: Option<i64>,
    /// Cell for agents that name none (default `cell1`).
    #[arg(long, env = "BERTH_DEFAULT_CELL")]
    default_cell: Option<String>,
    /// Default availability zone (default `nova`).
    #[arg(long, env = "BERTH_DEFAULT_AVAILABILITY_ZONE")]
    default_availability_zone: Option<String>,
    /// Serve the test hooks under /admin/v1/test (conductor breakpoints,
    /// clock). Never in production.
    #[arg(long, env = "BERTH_TEST_HOOKS")]
    test_hooks: bool,
    /// Scheduler: pick among this many best hosts at random (Nova's
    /// `host_subset_size`, default 1).
    #[arg(long, env = "BERTH_SCHEDULER_HOST_SUBSET_SIZE")]
    scheduler_host_subset_size: Option<usize>,
    /// Scheduler: allocation candidates considered per request (Nova's
    /// `max_placement_results`, default 1000). Each request's window of
    /// hosts starts at a random host, so a small value samples the cloud.
    #[arg(long, env = "BERTH_SCHEDULER_MAX_PLACEMENT_RESULTS")]
    scheduler_max_placement_results: Option<usize>,
    /// Scheduler: attempts per instance (alternates = this - 1; default 3).
    #[arg(long, env = "BERTH_SCHEDULER_MAX_ATTEMPTS")]
    scheduler_max_attempts: Option<usize>,
    /// Scheduler: restrict tenants to aggregates with `filter_tenant_id`.
    #[arg(long, env = "BERTH_SCHEDULER_LIMIT_TENANTS_TO_PLACEMENT_AGGREGATE")]
    scheduler_limit_tenants_to_placement_aggregate: bool,
    /// Scheduler: tenants without an aggregate get no host.
    #[arg(long, env = "BERTH_SCHEDULER_PLACEMENT_AGGREGATE_REQUIRED_FOR_TENANTS")]
    scheduler_placement_aggregate_required_for_tenants: bool,
    /// Scheduler: aggregates with `trait:X=required` metadata take only
    /// requests requiring X.
    #[arg(long, env = "BERTH_SCHEDULER_ENABLE_ISOLATED_AGGREGATE_FILTERING")]
    scheduler_enable_isolated_aggregate_filtering: bool,
    /// Scheduler: require `COMPUTE_IMAGE_TYPE_<disk_format>` on hosts.
    #[arg(long, env = "BERTH_SCHEDULER_QUERY_PLACEMENT_FOR_IMAGE_TYPE_SUPPORT")]
    scheduler_query_placement_for_image_type_support: bool,
    /// Scheduling mode: `push` (the scheduler picks a host; default) or
    /// `pull` (boots go to NATS JetStream queues and agents claim them;
    /// see docs/pull-vs-push.md).
    #[arg(long, env = "BERTH_SCHEDULING")]
    scheduling: Option<String>,
    /// NATS server of pull mode (default `nats://127.0.0.1:4222`).
    #[arg(long, env = "BERTH_NATS_URL")]
    nats_url: Option<String>,
    /// Prefix of pull mode's JetStream stream and subjects (default
    /// `berth`; tests use one each).
    #[arg(long, env = "BERTH_NATS_PREFIX")]
    nats_prefix: Option<String>,
    /// Seconds a pull-mode boot waits for a claim before it is buried in
    /// ERROR (default 120).
    #[arg(long, env = "BERTH_PULL_BUILD_TIMEOUT_SECS")]
    pull_build_timeout_secs: Option<i64>,
    /// Seconds a fetched boot may stay unacked before JetStream delivers it
    /// again (default 30).
    #[arg(long, env = "BERTH_PULL_ACK_WAIT_SECS")]
    pull_ack_wait_secs: Option<u64>,
}

/// Options of `berth migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct MigrateOpts {
    /// Directory for the embedded SQLite database.
    #[arg(long, env = "BERTH_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Database URL (`postgres://…` migrates a shared database; safe while
    /// other berth processes run: migrations take an advisory lock).
    #[arg(long, env = "BERTH_DATABASE")]
    database: Option<String>,
}

/// Fully resolved serve settings.
struct Settings {
    listen: SocketAddr,
    data_dir: PathBuf,
    database: Option<String>,
    http: HttpConfig,
    policy_overrides: std::collections::BTreeMap<String, String>,
    candidates: CandidateOptions,
    log: String,
    log_json: bool,
    log_color: crate::logging::LogColor,
    change_poll: std::time::Duration,
    feed_retention: Option<std::time::Duration>,
    connections: crate::connections::ConnectionLimits,
    compute: crate::compute_wiring::ComputeSettings,
    compute_listen: Option<SocketAddr>,
    reservation_listen: Option<SocketAddr>,
    fake_hosts: usize,
    /// berth's own Keystone credentials (keystone auth; also the fake hosts' identity).
    keystone: Option<berth_identity::Credentials>,
    /// Extra roots for an `https` Keystone.
    keystone_ca_file: Option<PathBuf>,
    /// The token validator (keystone auth).
    validator: Option<Arc<berth_identity::Validator>>,
    /// Who may read `/metrics` and `/healthcheck`.
    operational_access: crate::services::OperationalAccess,
    /// Certificate chain and key files (TLS on every listener).
    tls: Option<(PathBuf, PathBuf)>,
}

fn resolve(opts: ServeOpts) -> anyhow::Result<Settings> {
    let file = FileConfig::load(opts.config.as_deref())?;
    let power = power_config(&opts, &file)?;
    let power_on_cmd = opts.power_on_cmd.clone().or_else(|| file.power_on_cmd.clone());
    let power_off_cmd = opts.power_off_cmd.clone().or_else(|| file.power_off_cmd.clone());
    let listen = opts.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen.parse().with_context(|| format!("invalid --listen address {listen:?}"))?;
    let data_dir = opts.data_dir.or(file.data_dir).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let policy = match opts.policy_file.or(file.policy_file) {
        Some(path) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading policy {}", path.display()))?;
            Policy::overrides_from_text(&text).with_context(|| format!("parsing policy {}", path.display()))?
        }
        None => Default::default(),
    };
    let auth_mode = match opts.auth.or(file.auth).as_deref().unwrap_or("noauth2") {
        "noauth2" => AuthMode::NoAuth2,
        "trusted-headers" => AuthMode::TrustedHeaders,
        "keystone" => AuthMode::Keystone,
        other => anyhow::bail!("unknown --auth {other:?}; expected keystone, noauth2 or trusted-headers"),
    };
    let keystone = crate::keystone::credentials(
        opts.keystone_url.or(file.keystone_url).as_deref(),
        opts.keystone_user.or(file.keystone_user).as_deref(),
        opts.keystone_password.or(file.keystone_password).as_deref(),
        opts.keystone_project.or(file.keystone_project).as_deref(),
        opts.keystone_domain.or(file.keystone_domain).as_deref(),
    )?;
    if auth_mode == AuthMode::Keystone && keystone.is_none() {
        anyhow::bail!("--auth keystone needs --keystone-url, --keystone-user and --keystone-password");
    }
    let listen_addrs = [Some(listen.to_string()), opts.compute_listen.clone(), opts.reservation_listen.clone()];
    if auth_mode == AuthMode::NoAuth2
        && !(opts.allow_noauth2_on_network || file.allow_noauth2_on_network.unwrap_or(false))
    {
        for addr in listen_addrs.iter().flatten() {
            let loopback = addr.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_loopback());
            if !loopback {
                anyhow::bail!(
                    "refusing to serve noauth2 on {addr}: in noauth2 the token names the user and `admin` is an \
                     admin, so anyone who can reach the address is admin. Use --auth keystone, listen on \
                     127.0.0.1, or pass --allow-noauth2-on-network if you mean it"
                );
            }
        }
    }
    let token_cache = std::time::Duration::from_secs(opts.token_cache_secs.or(file.token_cache_secs).unwrap_or(300));
    let keystone_ca_file = opts.keystone_ca_file.or(file.keystone_ca_file);
    let validator = match (&keystone, auth_mode) {
        (Some(creds), AuthMode::Keystone) => Some(Arc::new(berth_identity::Validator::new(
            berth_identity::client(std::time::Duration::from_secs(10), keystone_ca_file.as_deref())?,
            creds.clone(),
            token_cache,
        ))),
        _ => None,
    };
    let origin = opts.cors_allowed_origin.or(file.cors_allowed_origin).unwrap_or_default();
    let cors = if origin.trim().is_empty() {
        None
    } else {
        let headers = opts.cors_allow_headers.or(file.cors_allow_headers).unwrap_or_default();
        Some(CorsConfig {
            allowed_origins: origin.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
            allow_headers: headers.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
        })
    };
    let candidates = CandidateOptions {
        randomize: opts.randomize_allocation_candidates.or(file.randomize_allocation_candidates).unwrap_or(false),
        max_candidates: match opts.max_allocation_candidates.or(file.max_allocation_candidates) {
            None => None,
            Some(n) if n < 0 => None,
            Some(0) => anyhow::bail!("--max-allocation-candidates must be at least 1 (or -1 for unlimited)"),
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        },
    };
    let database = opts.database.or(file.database);
    let sched_file = file.scheduler.unwrap_or_default();
    let defaults = berth_scheduler::Config::default();
    let scheduler = berth_scheduler::Config {
        max_placement_results: opts
            .scheduler_max_placement_results
            .or(sched_file.max_placement_results)
            .unwrap_or(defaults.max_placement_results)
            .max(1),
        host_subset_size: opts
            .scheduler_host_subset_size
            .or(sched_file.host_subset_size)
            .unwrap_or(defaults.host_subset_size),
        max_attempts: opts.scheduler_max_attempts.or(sched_file.max_attempts).unwrap_or(defaults.max_attempts),
        ram_weight_multiplier: sched_file.ram_weight_multiplier.unwrap_or(defaults.ram_weight_multiplier),
        cpu_weight_multiplier: sched_file.cpu_weight_multiplier.unwrap_or(defaults.cpu_weight_multiplier),
        disk_weight_multiplier: sched_file.disk_weight_multiplier.unwrap_or(defaults.disk_weight_multiplier),
        soft_affinity_weight_multiplier: sched_file
            .soft_affinity_weight_multiplier
            .unwrap_or(defaults.soft_affinity_weight_multiplier),
        soft_anti_affinity_weight_multiplier: sched_file
            .soft_anti_affinity_weight_multiplier
            .unwrap_or(defaults.soft_anti_affinity_weight_multiplier),
        build_failure_weight_multiplier: sched_file
            .build_failure_weight_multiplier
            .unwrap_or(defaults.build_failure_weight_multiplier),
        limit_tenants_to_placement_aggregate: opts.scheduler_limit_tenants_to_placement_aggregate
            || sched_file.limit_tenants_to_placement_aggregate.unwrap_or(false),
        placement_aggregate_required_for_tenants: opts.scheduler_placement_aggregate_required_for_tenants
            || sched_file.placement_aggregate_required_for_tenants.unwrap_or(false),
        enable_isolated_aggregate_filtering: opts.scheduler_enable_isolated_aggregate_filtering
            || sched_file.enable_isolated_aggregate_filtering.unwrap_or(false),
        query_placement_for_image_type_support: opts.scheduler_query_placement_for_image_type_support
            || sched_file.query_placement_for_image_type_support.unwrap_or(false),
        image_metadata_prefilter: sched_file.image_metadata_prefilter.unwrap_or(false),
        default_availability_zone: opts
            .default_availability_zone
            .or(file.default_availability_zone)
            .unwrap_or(defaults.default_availability_zone),
        pool_lend_lead: match opts.pool_lend_lead.or(file.pool_lend_lead) {
            Some(lead) if lead <= 0 => anyhow::bail!("--pool-lend-lead must be a positive number of seconds"),
            lead => lead,
        },
    };
    let compute_config = berth_compute::ComputeConfig {
        scheduler,
        default_cell: opts.default_cell.or(file.default_cell).unwrap_or_else(|| "cell1".to_owned()),
        service_down_time: opts.service_down_time.or(file.service_down_time).unwrap_or(60),
        auto_disable_after_failed_builds: opts
            .auto_disable_after_failed_builds
            .or(file.auto_disable_after_failed_builds)
            .unwrap_or(0)
            .max(0),
        allow_resize_to_same_host: opts.allow_resize_to_same_host.or(file.allow_resize_to_same_host).unwrap_or(false),
        heal_every_ticks: opts.heal_every_ticks.or(file.heal_every_ticks).unwrap_or(150),
        heal_grace_secs: opts.heal_grace_secs.or(file.heal_grace_secs).unwrap_or(300).max(0),
        shelved_offload_time: opts.shelved_offload_time.or(file.shelved_offload_time).unwrap_or(0).max(-1),
        resize_confirm_window: opts.resize_confirm_window.or(file.resize_confirm_window).unwrap_or(0).max(0),
        reclaim_instance_interval: opts
            .reclaim_instance_interval
            .or(file.reclaim_instance_interval)
            .unwrap_or(0)
            .max(0),
        cell_database_template: crate::compute_wiring::cell_database_template(database.as_deref(), &data_dir),
        ..berth_compute::ComputeConfig::default()
    };
    let address = |text: Option<String>, flag: &str| -> anyhow::Result<Option<SocketAddr>> {
        text.map(|t| t.parse::<SocketAddr>().with_context(|| format!("invalid --{flag} address {t:?}"))).transpose()
    };
    let compute_listen = address(opts.compute_listen.or(file.compute_listen), "compute-listen")?;
    let reservation_listen = address(opts.reservation_listen.or(file.reservation_listen), "reservation-listen")?;
    let reservations = berth_reservations::ReservationConfig {
        notification_url: opts.lease_notification_url.or(file.lease_notification_url),
        minutes_before_end: opts.lease_minutes_before_end.or(file.lease_minutes_before_end).unwrap_or(60).max(0),
        on_end: match opts.lease_on_end.or(file.lease_on_end) {
            None => berth_compute_model::lease::EndPolicy::Delete,
            Some(text) => berth_compute_model::lease::EndPolicy::parse(&text)
                .with_context(|| format!("invalid --lease-on-end {text:?} (one of delete, recycle, release)"))?,
        },
        lease_tick: std::time::Duration::from_millis(opts.lease_tick_ms.or(file.lease_tick_ms).unwrap_or(1000).max(1)),
        power,
        power_on_cmd,
        power_off_cmd,
    };
    let compute = crate::compute_wiring::ComputeSettings {
        config: compute_config,
        reservations,
        cell_timeout: std::time::Duration::from_millis(opts.cell_timeout_ms.or(file.cell_timeout_ms).unwrap_or(2000)),
        image_store_dir: opts.image_store_dir.or(file.image_store_dir).unwrap_or_else(|| data_dir.join("images")),
        image_objects: match opts.image_store.or(file.image_store).as_deref() {
            None | Some("file") => None,
            Some(url) if url.starts_with("s3://") => Some(berth_image_api::objects::ObjectStoreConfig {
                url: url.to_owned(),
                endpoint: opts.image_store_endpoint.or(file.image_store_endpoint),
                region: opts.image_store_region.or(file.image_store_region),
                access_key: opts.image_store_access_key.or(file.image_store_access_key),
                secret_key: opts.image_store_secret_key.or(file.image_store_secret_key),
            }),
            Some(other) => anyhow::bail!("invalid --image-store {other:?} (file, or s3://BUCKET[/PREFIX])"),
        },
        image_size_cap: opts
            .image_size_cap
            .or(file.image_size_cap)
            .unwrap_or(berth_image_api::data::DEFAULT_IMAGE_SIZE_CAP),
        image_upload_idle: std::time::Duration::from_secs(
            opts.image_upload_idle_secs.or(file.image_upload_idle_secs).unwrap_or(900),
        ),
        image_quotas: berth_image_api::data::ImageQuotas {
            count_total: opts.image_count_quota.or(file.image_count_quota),
            size_total_mib: opts.image_size_quota_mib.or(file.image_size_quota_mib),
        },
        test_hooks: opts.test_hooks,
        clock_file: opts.test_hooks.then(|| data_dir.join("test-clock-offset")),
        pull: match opts.scheduling.or(file.scheduling).as_deref().unwrap_or("push") {
            "push" => None,
            "pull" => Some(crate::compute_wiring::PullWiring {
                nats: berth_pull::Settings {
                    url: opts.nats_url.or(file.nats_url).unwrap_or_else(|| DEFAULT_NATS_URL.to_owned()),
                    prefix: opts.nats_prefix.or(file.nats_prefix).unwrap_or_else(|| "berth".to_owned()),
                    ack_wait: std::time::Duration::from_secs(
                        opts.pull_ack_wait_secs.or(file.pull_ack_wait_secs).unwrap_or(30).max(1),
                    ),
                },
                build_timeout_secs: opts.pull_build_timeout_secs.or(file.pull_build_timeout_secs).unwrap_or(120).max(1),
            }),
            other => anyhow::bail!("invalid --scheduling {other:?} (push or pull)"),
        },
    };
    Ok(Settings {
        compute,
        compute_listen,
        reservation_listen,
        fake_hosts: opts.fake_hosts.or(file.fake_hosts).unwrap_or(0),
        listen,
        data_dir,
        database,
        keystone,
        keystone_ca_file,
        validator: validator.clone(),
        operational_access: opts.operational_access.or(file.operational_access).unwrap_or_default(),
        tls: match (opts.tls_cert.or(file.tls_cert), opts.tls_key.or(file.tls_key)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => anyhow::bail!("TLS needs both a certificate (--tls-cert) and its key (--tls-key)"),
        },
        http: HttpConfig {
            auth_mode,
            validator: validator
                .map(|v| Arc::new(crate::keystone::KeystoneAuth(v)) as Arc<dyn berth_http::TokenValidator>),
            // Set once the compute runtime (which holds the credentials) runs.
            agent_credentials: None,
            cors,
            max_body_bytes: opts.max_body_bytes.or(file.max_body_bytes).unwrap_or(DEFAULT_MAX_BODY_BYTES),
        },
        policy_overrides: policy,
        candidates,
        log: opts.log.or(file.log).unwrap_or_else(|| "info".to_owned()),
        log_json: match opts.log_format.or(file.log_format).as_deref().unwrap_or("text") {
            "text" => false,
            "json" => true,
            other => anyhow::bail!("unknown --log-format {other:?}; expected text or json"),
        },
        log_color: opts.log_color.or(file.log_color).unwrap_or_default(),
        feed_retention: opts
            .change_feed_retention_secs
            .or(file.change_feed_retention_secs)
            .map(std::time::Duration::from_secs),
        change_poll: std::time::Duration::from_millis(
            opts.change_poll_ms.or(file.change_poll_ms).unwrap_or(DEFAULT_CHANGE_POLL_MS),
        ),
        connections: crate::connections::ConnectionLimits {
            keepalive_timeout: std::time::Duration::from_secs(
                opts.keepalive_timeout
                    .or(file.keepalive_timeout)
                    .unwrap_or(crate::connections::DEFAULT_KEEPALIVE_TIMEOUT_SECS),
            ),
            max_requests: opts
                .max_requests_per_connection
                .or(file.max_requests_per_connection)
                .unwrap_or(crate::connections::DEFAULT_MAX_REQUESTS_PER_CONNECTION),
            header_read_timeout: std::time::Duration::from_secs(
                match opts.header_read_timeout.or(file.header_read_timeout) {
                    Some(0) => anyhow::bail!("--header-read-timeout must be at least 1 second"),
                    Some(secs) => secs,
                    None => crate::connections::DEFAULT_HEADER_READ_TIMEOUT_SECS,
                },
            ),
        },
    })
}

pub(crate) fn open_store(
    database: Option<&str>,
    data_dir: &std::path::Path,
    feed_retention: Option<std::time::Duration>,
) -> anyhow::Result<Arc<dyn Store>> {
    match database {
        None | Some("") => Ok(Arc::new(SqliteStore::open_dir(data_dir)?)),
        Some(url) if url.starts_with("sqlite://") => {
            let path = PathBuf::from(&url["sqlite://".len()..]);
            Ok(Arc::new(SqliteStore::open_path(&path)?))
        }
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let store = berth_store_postgres::PostgresStore::connect(url)?;
            let retention = feed_retention.unwrap_or(berth_store_postgres::DEFAULT_FEED_RETENTION);
            Ok(Arc::new(store.with_feed_retention(retention)))
        }
        Some(_) => anyhow::bail!("unsupported --database URL: expected sqlite://PATH or postgres://…"),
    }
}

pub(crate) fn run(opts: ServeOpts) -> anyhow::Result<()> {
    let settings = resolve(opts)?;
    crate::logging::init(&settings.log, settings.log_json, settings.log_color);
    // The store and the initial snapshot are built before the async
    // runtime starts: the store API is blocking.
    let store = open_store(settings.database.as_deref(), &settings.data_dir, settings.feed_retention)?;
    let follows_others = store.backend_name() != "sqlite";
    let app = Arc::new(App::new(store)?);
    if follows_others {
        spawn_change_follower(app.clone(), settings.change_poll);
    }
    // Every API checks the policy file's rules against its own defaults.
    let placement_api = berth_placement_api::api(&settings.policy_overrides)?;
    let placement = Arc::new(Placement::new(app.clone(), settings.candidates.clone()));
    crate::compute_wiring::ensure_default_cells(&app, &settings.compute.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let compute = crate::compute_wiring::ComputeServices::start(
            app.clone(),
            settings.compute.clone(),
            &settings.policy_overrides,
        )?;
        let mut http = settings.http.clone();
        http.agent_credentials = Some(compute.agent_credentials());
        let services = Arc::new(crate::services::Services {
            server: Server { config: http, metrics: Default::default() },
            core: app,
            placement,
            placement_api,
            compute: Some(compute),
            keystone: settings.validator.clone(),
            operational_access: settings.operational_access,
        });
        let tls = settings.tls.as_ref().map(|(cert, key)| crate::transport::tls_acceptor(cert, key)).transpose()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let local = listener.local_addr()?;
        tracing::info!(listen = %local, scheme, data_dir = %settings.data_dir.display(), "berth serving");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let own_listeners = [
            (settings.compute_listen, crate::paths::RootApi::Compute, "the compute API at /v2.1"),
            (settings.reservation_listen, crate::paths::RootApi::Reservation, "the reservation API at /v1"),
        ];
        for (addr, api, what) in own_listeners {
            let Some(addr) = addr else { continue };
            let own = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
            tracing::info!(listen = %own.local_addr()?, scheme, "berth serving {what}");
            let router = crate::router::router(services.clone(), Some(api));
            let own = crate::transport::ErrorBodies::new(own, services.clone(), Some(api), tls.clone())?;
            let mut stop = stop_rx.clone();
            let limits = settings.connections;
            tokio::spawn(crate::connections::serve(own, router, limits, async move {
                let _ = stop.changed().await;
            }));
        }
        if settings.http.auth_mode == AuthMode::NoAuth2 {
            tracing::warn!(
                "AUTH IS OFF (noauth2): every X-Auth-Token is believed, `admin` is an admin and X-Roles / \
                 X-Project-Id are honoured. For development and conformance runs only; deployments use \
                 --auth keystone"
            );
        }
        if let Some(validator) = &settings.validator {
            // A misconfigured service user shows at start, not on the first request.
            validator.check_service_credentials().await.context("berth's own Keystone credentials")?;
            tracing::info!("tokens are validated by Keystone");
        }
        if settings.fake_hosts > 0 {
            // The in-process hosts authenticate like any agent: in keystone
            // mode with berth's own Keystone user.
            let auth = match (&settings.keystone, settings.http.auth_mode) {
                (Some(creds), AuthMode::Keystone) => {
                    berth_agent::AgentAuth::Keystone(Arc::new(berth_identity::Session::new(
                        berth_identity::client(
                            std::time::Duration::from_secs(10),
                            settings.keystone_ca_file.as_deref(),
                        )?,
                        creds.clone(),
                    )))
                }
                // Behind an authenticating proxy the in-process hosts speak
                // to this process directly, as the proxy would.
                (_, AuthMode::TrustedHeaders) => berth_agent::AgentAuth::TrustedHeaders {
                    user: "berth-fake-hosts".to_owned(),
                    roles: "service".to_owned(),
                },
                _ => berth_agent::AgentAuth::Token("admin".to_owned()),
            };
            // Over loopback; with TLS they trust the certificates of
            // --tls-cert (include the CA in that file).
            let config = berth_agent::AgentConfig {
                url: format!("{scheme}://127.0.0.1:{}", local.port()),
                ca_file: settings.tls.as_ref().map(|(cert, _)| cert.clone()),
                auth,
                agent_id: format!("fake-hosts-{}", std::process::id()),
                prefix: "fake-".to_owned(),
                count: settings.fake_hosts,
                first_index: 0,
                cell: None,
                shape: berth_agent::HostShape::default(),
                build_time: std::time::Duration::ZERO,
                fail_rate: 0.0,
                bad_hosts: Vec::new(),
                live_migration_time: std::time::Duration::ZERO,
                report_interval: std::time::Duration::from_secs(10),
                request_timeout: std::time::Duration::from_secs(30),
                concurrency: 8,
                layout_updates: None,
                reshape_gate: None,
                power_dir: None,
                power_on_time: std::time::Duration::ZERO,
                pull: settings.compute.pull.as_ref().map(|pull| berth_agent::pull::PullConfig {
                    nats: pull.nats.clone(),
                    max_in_flight: 64,
                    nak_delay: std::time::Duration::from_millis(500),
                    refresh: std::time::Duration::from_millis(250),
                }),
                driver: None,
                host: None,
                sync_interval: std::time::Duration::from_secs(10),
                running_deleted: berth_agent::RunningDeleted::default(),
                host_ip: None,
            };
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                if let Err(err) = berth_agent::run(config, async move {
                    let _ = stop.changed().await;
                })
                .await
                {
                    tracing::error!(error = %err, "in-process fake hosts failed");
                }
            });
        }
        // On a signal the in-process hosts stop first (their long polls
        // end), then the listeners drain.
        let router = crate::router::router(services.clone(), None);
        crate::connections::serve(
            crate::transport::ErrorBodies::new(listener, services, None, tls)?,
            router,
            settings.connections,
            async move {
                shutdown_signal().await;
                let _ = stop_tx.send(true);
            },
        )
        .await;
        tracing::info!("berth stopped");
        Ok(())
    })
}

/// Keep this process's snapshot fresh with writes made by other processes
/// sharing the database. Runs on its own thread: the store API is blocking.
fn spawn_change_follower(app: Arc<App>, interval: std::time::Duration) {
    let spawned = std::thread::Builder::new().name("berth-change-feed".into()).spawn(move || loop {
        std::thread::sleep(interval);
        if let Err(err) = app.catch_up() {
            tracing::warn!(error = %err, "change feed poll failed");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    });
    if let Err(err) = spawned {
        tracing::error!(error = %err, "cannot start the change feed follower");
    }
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

pub(crate) fn migrate(opts: MigrateOpts) -> anyhow::Result<()> {
    match opts.database.as_deref() {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            // Connecting applies pending migrations under the advisory lock.
            berth_store_postgres::PostgresStore::connect(url)?;
            eprintln!("berth: the PostgreSQL database is at the current schema");
        }
        Some(url) if !url.is_empty() && !url.starts_with("sqlite://") => {
            anyhow::bail!("unsupported --database URL: expected sqlite://PATH or postgres://…")
        }
        Some(url) if url.starts_with("sqlite://") => {
            let mut store = SqliteStore::open_path(std::path::Path::new(&url["sqlite://".len()..]))?;
            store.migrate()?;
            eprintln!("berth: {url} is at the current schema");
        }
        _ => {
            let mut store = SqliteStore::open_dir(&opts.data_dir)?;
            store.migrate()?;
            eprintln!("berth: {} is at the current schema", opts.data_dir.display());
        }
    }
    Ok(())
}

/// The power management flags (over the config file's keys), checked.
fn power_config(opts: &ServeOpts, file: &FileConfig) -> anyhow::Result<berth_reservations::PowerConfig> {
    use berth_reservations::{PowerConfig, PowerPolicy};
    let d = PowerConfig::default();
    let policy = match opts.power_policy.as_ref().or(file.power_policy.as_ref()) {
        None => PowerPolicy::Off,
        Some(text) => PowerPolicy::parse(text)
            .with_context(|| format!("invalid --power-policy {text:?} (one of off, reservations)"))?,
    };
    let secs = |v: Option<i64>, default: i64, flag: &str| -> anyhow::Result<i64> {
        match v {
            Some(v) if v < 0 => anyhow::bail!("--{flag} must be a number of seconds >= 0"),
            v => Ok(v.unwrap_or(default)),
        }
    };
    let per_min = |v: Option<usize>, default: usize, flag: &str| -> anyhow::Result<usize> {
        match v {
            Some(0) => anyhow::bail!("--{flag} must be at least 1"),
            v => Ok(v.unwrap_or(default)),
        }
    };
    let watts = |v: Option<f64>, default: f64, flag: &str| -> anyhow::Result<f64> {
        match v {
            Some(v) if !(v.is_finite() && v >= 0.0) => anyhow::bail!("--{flag} must be a number of watts >= 0"),
            v => Ok(v.unwrap_or(default)),
        }
    };
    Ok(PowerConfig {
        policy,
        suspend_time: secs(opts.suspend_time.or(file.suspend_time), d.suspend_time, "suspend-time")?,
        power_on_secs: secs(opts.power_on_secs.or(file.power_on_secs), d.power_on_secs, "power-on-secs")?,
        margin: secs(opts.power_margin.or(file.power_margin), d.margin, "power-margin")?,
        spare_hosts: opts.spare_hosts.or(file.spare_hosts).unwrap_or(d.spare_hosts),
        resume_timeout: secs(
            opts.power_resume_timeout.or(file.power_resume_timeout),
            d.resume_timeout,
            "power-resume-timeout",
        )?,
        down_per_min: per_min(
            opts.power_down_per_min.or(file.power_down_per_min),
            d.down_per_min,
            "power-down-per-min",
        )?,
        up_per_min: per_min(opts.power_up_per_min.or(file.power_up_per_min), d.up_per_min, "power-up-per-min")?,
        watts_idle: watts(opts.host_watts_idle.or(file.host_watts_idle), d.watts_idle, "host-watts-idle")?,
        watts_busy: watts(opts.host_watts_busy.or(file.host_watts_busy), d.watts_busy, "host-watts-busy")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        opts: ServeOpts,
    }

    /// Configuration precedence is file < environment < flags, and unset
    /// values fall back to the documented defaults.
    #[test]
    fn config_precedence() {
        let dir = std::env::temp_dir().join(format!("berth-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("berth.yaml");
        std::fs::write(
            &file,
            "listen: 127.0.0.1:1111\ndata_dir: /from/file\nmax_body_bytes: 1234\nauth: trusted-headers\n",
        )
        .expect("write config");
        // Only this test touches BERTH_* variables.
        std::env::set_var("BERTH_DATA_DIR", "/from/env");
        std::env::set_var("BERTH_MAX_BODY_BYTES", "5678");
        let parsed = Wrapper::try_parse_from([
            "berth",
            "--config",
            file.to_str().expect("utf8 path"),
            "--max-body-bytes",
            "9999",
        ])
        .expect("parse");
        let settings = resolve(parsed.opts).expect("resolve");
        std::env::remove_var("BERTH_DATA_DIR");
        std::env::remove_var("BERTH_MAX_BODY_BYTES");
        assert_eq!(settings.listen.to_string(), "127.0.0.1:1111", "file value used when nothing overrides it");
        assert_eq!(settings.data_dir, PathBuf::from("/from/env"), "environment beats file");
        assert_eq!(settings.http.max_body_bytes, 9999, "flag beats environment");
        assert_eq!(settings.http.auth_mode, AuthMode::TrustedHeaders);
        assert!(settings.http.cors.is_none(), "CORS is off by default");

        std::fs::write(&file, "listen: 127.0.0.1:1111\nbogus_key: 1\n").expect("write config");
        let parsed = Wrapper::try_parse_from(["berth", "--config", file.to_str().expect("utf8 path")]).expect("parse");
        assert!(resolve(parsed.opts).is_err(), "unknown config keys are rejected");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The allocation-candidate options: defaults, flags, -1 as unlimited,
    /// 0 refused, and the config-file keys.
    #[test]
    fn candidate_options() {
        let resolve_args = |args: &[&str]| {
            let mut all = vec!["berth"];
            all.extend_from_slice(args);
            resolve(Wrapper::try_parse_from(all).expect("parse").opts).map(|s| s.candidates)
        };
        let defaults = resolve_args(&[]).expect("resolve");
        assert_eq!(defaults, CandidateOptions { randomize: false, max_candidates: None });
        let set =
            resolve_args(&["--randomize-allocation-candidates", "--max-allocation-candidates", "50"]).expect("ok");
        assert_eq!(set, CandidateOptions { randomize: true, max_candidates: Some(50) });
        let off = resolve_args(&["--randomize-allocation-candidates=false", "--max-allocation-candidates", "-1"]);
        assert_eq!(off.expect("ok"), CandidateOptions { randomize: false, max_candidates: None });
        assert!(resolve_args(&["--max-allocation-candidates", "0"]).is_err(), "0 would return nothing");
        let dir = std::env::temp_dir().join(format!("berth-candidates-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("berth.yaml");
        std::fs::write(&file, "randomize_allocation_candidates: true\nmax_allocation_candidates: 7\n").expect("write");
        let from_file = resolve_args(&["--config", file.to_str().expect("utf8 path")]).expect("ok");
        assert_eq!(from_file, CandidateOptions { randomize: true, max_candidates: Some(7) });
        let overridden =
            resolve_args(&["--config", file.to_str().expect("utf8 path"), "--max-allocation-candidates", "9"]);
        assert_eq!(overridden.expect("ok").max_candidates, Some(9), "flag beats file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every power management flag has its config-file key; flags beat
    /// the file; bad values in the file are refused as the flags' are.
    #[test]
    fn power_config_file_keys() {
        use berth_reservations::{PowerConfig, PowerPolicy};
        let dir = std::env::temp_dir().join(format!("berth-power-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("berth.yaml");
        let path = file.to_str().expect("utf8 path").to_owned();
        let resolve_args = |args: &[&str]| {
            let mut all = vec!["berth", "--config", &path];
            all.extend_from_slice(args);
            resolve(Wrapper::try_parse_from(all).expect("parse").opts).map(|s| s.compute.reservations)
        };
        std::fs::write(
            &file,
            "power_policy: reservations\npower_on_cmd: wake.sh\npower_off_cmd: sleep.sh\n\
             power_resume_timeout: 901\npower_on_secs: 902\nsuspend_time: 903\npower_margin: 904\n\
             spare_hosts: 5\npower_down_per_min: 6\npower_up_per_min: 7\nhost_watts_idle: 80.5\n\
             host_watts_busy: 300\n",
        )
        .expect("write config");
        let from_file = resolve_args(&[]).expect("resolve");
        assert_eq!(
            from_file.power,
            PowerConfig {
                policy: PowerPolicy::Reservations,
                suspend_time: 903,
                power_on_secs: 902,
                margin: 904,
                spare_hosts: 5,
                resume_timeout: 901,
                down_per_min: 6,
                up_per_min: 7,
                watts_idle: 80.5,
                watts_busy: 300.0,
            }
        );
        assert_eq!(from_file.power_on_cmd.as_deref(), Some("wake.sh"));
        assert_eq!(from_file.power_off_cmd.as_deref(), Some("sleep.sh"));
        let flags =
            resolve_args(&["--power-policy", "off", "--spare-hosts", "2", "--power-off-cmd", "x.sh"]).expect("resolve");
        assert_eq!(flags.power.policy, PowerPolicy::Off, "flag beats file");
        assert_eq!((flags.power.spare_hosts, flags.power.suspend_time), (2, 903));
        assert_eq!(flags.power_off_cmd.as_deref(), Some("x.sh"));
        for bad in
            ["power_policy: sometimes\n", "suspend_time: -1\n", "power_down_per_min: 0\n", "host_watts_idle: -3\n"]
        {
            std::fs::write(&file, bad).expect("write config");
            assert!(resolve_args(&[]).is_err(), "{bad:?} is refused");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
