//! Layered configuration: config file < environment < command-line flags.
//! clap resolves flags over `BERTH_*` environment variables; anything still
//! unset is taken from the YAML file named by `--config`/`BERTH_CONFIG`,
//! then from the documented defaults.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// Keys accepted in the config file (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// Address to listen on.
    pub(crate) listen: Option<String>,
    /// Data directory for the embedded SQLite database.
    pub(crate) data_dir: Option<PathBuf>,
    /// Database URL (`sqlite://PATH`); default is SQLite in `data_dir`.
    pub(crate) database: Option<String>,
    /// Policy file.
    pub(crate) policy_file: Option<PathBuf>,
    /// `keystone`, `noauth2` or `trusted-headers`.
    pub(crate) auth: Option<String>,
    /// Keystone's URL (keystone auth).
    pub(crate) keystone_url: Option<String>,
    /// berth's own Keystone user (validates tokens; needs the service or admin role).
    pub(crate) keystone_user: Option<String>,
    /// Its password.
    pub(crate) keystone_password: Option<String>,
    /// Its project (default `service`).
    pub(crate) keystone_project: Option<String>,
    /// Domain of the user and project (default `Default`).
    pub(crate) keystone_domain: Option<String>,
    /// Extra trusted roots (PEM) for an `https` Keystone.
    pub(crate) keystone_ca_file: Option<PathBuf>,
    /// Seconds a validated token is cached (default 300).
    pub(crate) token_cache_secs: Option<u64>,
    /// TLS certificate chain (PEM).
    pub(crate) tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    pub(crate) tls_key: Option<PathBuf>,
    /// Let noauth2 listen on a non-loopback address.
    pub(crate) allow_noauth2_on_network: Option<bool>,
    /// Who may read /metrics and /healthcheck.
    pub(crate) operational_access: Option<crate::services::OperationalAccess>,
    /// CORS allowed origin.
    pub(crate) cors_allowed_origin: Option<String>,
    /// CORS extra allowed headers (comma separated).
    pub(crate) cors_allow_headers: Option<String>,
    /// Largest request body in bytes.
    pub(crate) max_body_bytes: Option<usize>,
    /// Directory of the image data (default `<data_dir>/images`).
    pub(crate) image_store_dir: Option<PathBuf>,
    /// `file` or `s3://BUCKET[/PREFIX]`.
    pub(crate) image_store: Option<String>,
    /// The S3 endpoint of an `s3://` image store.
    pub(crate) image_store_endpoint: Option<String>,
    /// The region it signs for (default `us-east-1`).
    pub(crate) image_store_region: Option<String>,
    /// Its access key.
    pub(crate) image_store_access_key: Option<String>,
    /// Its secret key.
    pub(crate) image_store_secret_key: Option<String>,
    /// Largest image data in bytes (Glance's `image_size_cap`).
    pub(crate) image_size_cap: Option<u64>,
    /// Seconds without a write before an upload is taken for dead.
    pub(crate) image_upload_idle_secs: Option<u64>,
    /// Most images per project (Glance's `image_count_total`).
    pub(crate) image_count_quota: Option<u64>,
    /// Most image data per project in MiB (Glance's `image_size_total`).
    pub(crate) image_size_quota_mib: Option<u64>,
    /// Idle keep-alive timeout in seconds (0: close after every response).
    pub(crate) keepalive_timeout: Option<u64>,
    /// Requests per connection before it is closed (0: no cap).
    pub(crate) max_requests_per_connection: Option<u64>,
    /// Seconds a request head may take to arrive.
    pub(crate) header_read_timeout: Option<u64>,
    /// Log filter (tracing env-filter syntax).
    pub(crate) log: Option<String>,
    /// Log line format: text or json.
    pub(crate) log_format: Option<String>,
    /// Colour in text log lines: auto, always or never.
    pub(crate) log_color: Option<crate::logging::LogColor>,
    /// Change-feed poll interval in milliseconds (PostgreSQL).
    pub(crate) change_poll_ms: Option<u64>,
    /// Change-feed retention in seconds (PostgreSQL).
    pub(crate) change_feed_retention_secs: Option<u64>,
    /// Shuffle / randomly sample allocation candidates.
    pub(crate) randomize_allocation_candidates: Option<bool>,
    /// Cap on allocation candidates generated per request (-1: unlimited).
    pub(crate) max_allocation_candidates: Option<i64>,
    /// Extra listener serving the compute API at its root (`/v2.1`).
    pub(crate) compute_listen: Option<String>,
    /// Extra listener serving the reservation API at its root (`/v1`).
    pub(crate) reservation_listen: Option<String>,
    /// Fake compute hosts run inside the server.
    pub(crate) fake_hosts: Option<usize>,
    /// Per-cell read deadline in milliseconds.
    pub(crate) cell_timeout_ms: Option<u64>,
    /// Seconds without a heartbeat before a compute service is down.
    pub(crate) service_down_time: Option<i64>,
    /// Lease event runner period in milliseconds.
    pub(crate) lease_tick_ms: Option<u64>,
    /// Consecutive failed builds after which a host's service is disabled
    /// (0: never).
    pub(crate) auto_disable_after_failed_builds: Option<i64>,
    /// Where lease event notifications are POSTed.
    pub(crate) lease_notification_url: Option<String>,
    /// Default minutes between `before_end_lease` and the end.
    pub(crate) lease_minutes_before_end: Option<i64>,
    /// Default end policy of leases (`delete`, `recycle`, `release`).
    pub(crate) lease_on_end: Option<String>,
    /// Lend idle reservation-pool hosts to ordinary boots, looking this
    /// many seconds ahead.
    pub(crate) pool_lend_lead: Option<i64>,
    /// Power management of the reservation pool: `off` or `reservations`.
    pub(crate) power_policy: Option<String>,
    /// Command switching a pool host on (`sh -c`, the host name as `$1`).
    pub(crate) power_on_cmd: Option<String>,
    /// Command switching a pool host off.
    pub(crate) power_off_cmd: Option<String>,
    /// Seconds a host switched on has to report before it is `failed`.
    pub(crate) power_resume_timeout: Option<i64>,
    /// Seconds a host takes to boot, as the policy plans it.
    pub(crate) power_on_secs: Option<i64>,
    /// Idle seconds before a pool host may be switched off.
    pub(crate) suspend_time: Option<i64>,
    /// Extra seconds of lead before a lease start.
    pub(crate) power_margin: Option<i64>,
    /// Idle pool hosts kept on for on-demand boots.
    pub(crate) spare_hosts: Option<usize>,
    /// Power-off commands per minute at most.
    pub(crate) power_down_per_min: Option<usize>,
    /// Power-on commands per minute at most.
    pub(crate) power_up_per_min: Option<usize>,
    /// Draw of an idle host (W).
    pub(crate) host_watts_idle: Option<f64>,
    /// Draw of a busy host (W).
    pub(crate) host_watts_busy: Option<f64>,
    /// Resizes may choose the server's own host.
    pub(crate) allow_resize_to_same_host: Option<bool>,
    /// Heal every N sweep ticks (0: only when asked).
    pub(crate) heal_every_ticks: Option<u64>,
    /// Seconds the heal leaves recent writes alone.
    pub(crate) heal_grace_secs: Option<i64>,
    /// Seconds before a shelved server is offloaded (0: at once, -1: never).
    pub(crate) shelved_offload_time: Option<i64>,
    /// Seconds before a finished resize is confirmed automatically (0: never).
    pub(crate) resize_confirm_window: Option<i64>,
    /// Seconds a soft-deleted server waits before it is deleted (0: no soft delete).
    pub(crate) reclaim_instance_interval: Option<i64>,
    /// Cell agents register in when they name none.
    pub(crate) default_cell: Option<String>,
    /// Default availability zone.
    pub(crate) default_availability_zone: Option<String>,
    /// Scheduler settings (Nova's `[scheduler]`/`[filter_scheduler]`).
    pub(crate) scheduler: Option<SchedulerFile>,
    /// `push` (default) or `pull` (agents take boots from NATS queues).
    pub(crate) scheduling: Option<String>,
    /// NATS server of pull mode (default `nats://127.0.0.1:4222`).
    pub(crate) nats_url: Option<String>,
    /// Prefix of pull mode's stream and subjects (default `berth`).
    pub(crate) nats_prefix: Option<String>,
    /// Seconds a pull-mode boot waits for a claim before it is buried.
    pub(crate) pull_build_timeout_secs: Option<i64>,
    /// Seconds a fetched boot may stay unacked before redelivery.
    pub(crate) pull_ack_wait_secs: Option<u64>,
}

/// The `scheduler:` section of the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SchedulerFile {
    /// `max_placement_results`.
    pub(crate) max_placement_results: Option<usize>,
    /// `host_subset_size`.
    pub(crate) host_subset_size: Option<usize>,
    /// `max_attempts`.
    pub(crate) max_attempts: Option<usize>,
    /// `ram_weight_multiplier`.
    pub(crate) ram_weight_multiplier: Option<f64>,
    /// `cpu_weight_multiplier`.
    pub(crate) cpu_weight_multiplier: Option<f64>,
    /// `disk_weight_multiplier`.
    pub(crate) disk_weight_multiplier: Option<f64>,
    /// `soft_affinity_weight_multiplier`.
    pub(crate) soft_affinity_weight_multiplier: Option<f64>,
    /// `soft_anti_affinity_weight_multiplier`.
    pub(crate) soft_anti_affinity_weight_multiplier: Option<f64>,
    /// `build_failure_weight_multiplier`.
    pub(crate) build_failure_weight_multiplier: Option<f64>,
    /// `limit_tenants_to_placement_aggregate`.
    pub(crate) limit_tenants_to_placement_aggregate: Option<bool>,
    /// `placement_aggregate_required_for_tenants`.
    pub(crate) placement_aggregate_required_for_tenants: Option<bool>,
    /// `enable_isolated_aggregate_filtering`.
    pub(crate) enable_isolated_aggregate_filtering: Option<bool>,
    /// `query_placement_for_image_type_support`.
    pub(crate) query_placement_for_image_type_support: Option<bool>,
    /// `image_metadata_prefilter`.
    pub(crate) image_metadata_prefilter: Option<bool>,
}

impl FileConfig {
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}
