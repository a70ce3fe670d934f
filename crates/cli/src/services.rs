//! What a listener serves ([`Services`]: the HTTP server, the control
//! state, placement, the compute-side APIs, the Keystone validator), who
//! may read its operational endpoints ([`OperationalAccess`]), the error
//! format of the API a path belongs to, and the process's counters and
//! gauges ([`collect_metrics`]) that `/metrics` and the dashboard read.
//! The router, the dashboard and the listener's error bodies use it.

use std::sync::Arc;

use berth_http::{Api, Server};
use berth_placement_api::Placement;

use crate::compute_wiring::ComputeServices;
use crate::paths::{target, RootApi, Target};

/// Everything the listener serves.
pub(crate) struct Services {
    pub(crate) server: Server,
    pub(crate) core: Arc<berth_core::App>,
    pub(crate) placement: Arc<Placement>,
    pub(crate) placement_api: Api<Placement>,
    pub(crate) compute: Option<ComputeServices>,
    /// The Keystone token validator (keystone auth).
    pub(crate) keystone: Option<Arc<berth_identity::Validator>>,
    /// Who may read `/metrics` and `/healthcheck`.
    pub(crate) operational_access: OperationalAccess,
}

/// Who may read `/metrics` and `/healthcheck` (`--operational-access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OperationalAccess {
    /// Callers on a loopback address, and admins from anywhere.
    #[default]
    LoopbackOrAdmin,
    /// Admins only (an admin token in the listener's auth mode).
    Admin,
    /// Anyone who can reach the listener (e.g. a load balancer's health
    /// check on another host).
    Anyone,
}

impl Services {
    /// The error renderer of the API `path` belongs to (on a listener
    /// serving `root` alone, that API's).
    pub(crate) fn error_renderer(&self, path: &str, root: Option<RootApi>) -> berth_http::ErrorRenderer {
        let placement = self.placement_api.render_error;
        let Some(compute) = &self.compute else { return placement };
        match (root, target(path)) {
            (Some(root), _) => compute.root_error_renderer(root),
            (None, Target::Placement(_) | Target::Operational | Target::Dashboard(_)) => placement,
            (None, other) => compute.error_renderer(&other).unwrap_or(placement),
        }
    }
}

/// A counter sample: name, help, value.
type Counter = (&'static str, &'static str, u64);
/// A gauge sample: name, help, value.
type Gauge = (&'static str, &'static str, f64);

/// The process's counters and gauges (beside the HTTP ones): what
/// `/metrics` renders and the dashboard's activity view reads.
pub(crate) fn collect_metrics(services: &Services) -> (Vec<Counter>, Vec<Gauge>) {
    let core = &services.core;
    let (n_providers, n_consumers) = {
        let world = core.read();
        (world.placement.providers.len() as f64, world.placement.consumers.len() as f64)
    };
    let mut counters = core.metrics.counters();
    counters.extend(services.placement.counters());
    let mut gauges = vec![
        ("berth_providers", "Resource providers in this process's snapshot.", n_providers),
        ("berth_consumers", "Consumers with allocations in this process's snapshot.", n_consumers),
        (
            "berth_change_feed_staleness_seconds",
            "Seconds since this process last caught up with the shared database's change feed (0 on SQLite).",
            core.metrics.feed_staleness_seconds(),
        ),
    ];
    if let Some(compute) = &services.compute {
        counters.extend(compute.counters());
        gauges.extend(compute.gauges());
    }
    if let Some(keystone) = &services.keystone {
        counters.push((
            "berth_keystone_token_validations_total",
            "Tokens this process asked Keystone to validate (cache misses).",
            keystone.calls(),
        ));
        counters.push((
            "berth_keystone_service_tokens_total",
            "Tokens this process issued for itself from its Keystone credentials.",
            keystone.service_tokens_issued(),
        ));
        gauges.push(("berth_keystone_cached_tokens", "Validated tokens in the cache.", keystone.cached() as f64));
    }
    (counters, gauges)
}
