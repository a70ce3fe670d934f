//! One listener, every API, as devstack lays them out: placement at the
//! root (and under `/placement`), the compute API under `/compute`, the
//! image API under `/image`, the agent API under `/agent/v1`, berth's admin
//! API under `/admin/v1`, plus `/healthcheck` and `/metrics`. Each request
//! is handed to `berth_http::dispatch` with its API and the path relative
//! to that API's root, after a read barrier (`App::sync`) so that it sees
//! every write committed, by any process, before it arrived.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Response, StatusCode};
use berth_http::{Api, Server};
use berth_placement_api::Placement;
use serde_json::json;

/// Everything the listener serves.
pub(crate) struct Services {
    pub(crate) server: Server,
    pub(crate) core: Arc<berth_core::App>,
    pub(crate) placement: Arc<Placement>,
    pub(crate) placement_api: Api<Placement>,
    pub(crate) compute: Option<crate::compute_wiring::ComputeServices>,
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

/// May this request read the operational endpoints? `Err` is the answer
/// (401 without a valid identity, 403 for a non-admin).
async fn operational_allowed(
    services: &Services,
    peer: Option<std::net::SocketAddr>,
    headers: &axum::http::HeaderMap,
) -> Result<(), Response<Body>> {
    let access = services.operational_access;
    if access == OperationalAccess::Anyone
        || (access == OperationalAccess::LoopbackOrAdmin && peer.is_some_and(|p| p.ip().is_loopback()))
    {
        return Ok(());
    }
    let status = match berth_http::identify(&services.server.config, headers).await {
        Ok(auth) if auth.roles.iter().any(|r| r == "admin") => return Ok(()),
        Ok(_) => StatusCode::FORBIDDEN,
        Err(err) => err.status,
    };
    Err(Response::builder().status(status).body(Body::empty()).unwrap_or_default())
}

/// Which API a path belongs to, and the path within it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `/healthcheck` or `/metrics`.
    Operational,
    /// Placement.
    Placement(&'a str),
    /// The compute API (`/compute...`; `rest` starts after `/compute`).
    Compute(&'a str),
    /// The image API (after `/image`).
    Image(&'a str),
    /// The agent API (after `/agent/v1`).
    Agent(&'a str),
    /// berth's admin API (after `/admin/v1`).
    Admin(&'a str),
    /// The minimal identity endpoints (after `/identity`).
    Identity(&'a str),
    /// The reservation API (after `/reservation`).
    Reservation(&'a str),
    /// The operator dashboard (after `/dashboard`).
    Dashboard(&'a str),
}

fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Route a path to its API.
pub(crate) fn target(path: &str) -> Target<'_> {
    if path == "/healthcheck" || path == "/metrics" {
        return Target::Operational;
    }
    if let Some(rest) = under(path, "/placement") {
        return Target::Placement(if rest.is_empty() { "/" } else { rest });
    }
    if let Some(rest) = under(path, "/compute") {
        return Target::Compute(rest);
    }
    if let Some(rest) = under(path, "/image") {
        return Target::Image(rest);
    }
    if let Some(rest) = under(path, "/agent/v1") {
        return Target::Agent(rest);
    }
    if let Some(rest) = under(path, "/admin/v1") {
        return Target::Admin(rest);
    }
    if let Some(rest) = under(path, "/identity") {
        return Target::Identity(rest);
    }
    if let Some(rest) = under(path, "/reservation") {
        return Target::Reservation(rest);
    }
    if let Some(rest) = under(path, "/dashboard") {
        return Target::Dashboard(rest);
    }
    Target::Placement(path)
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

/// An API served alone at the root of its own listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootApi {
    /// `--compute-listen`: Nova's `/v2.1`.
    Compute,
    /// `--reservation-listen`: Blazar's `/v1`.
    Reservation,
}

/// The axum router for one listener: every API under its prefix, or with
/// `root` one API at the root of the listener.
pub(crate) fn router(services: Arc<Services>, root: Option<RootApi>) -> axum::Router {
    axum::Router::new().fallback(move |request: axum::extract::Request| {
        let services = services.clone();
        async move {
            let path = request.uri().path().to_owned();
            // Every API request sees what any process had committed when
            // it arrived (`App::sync`); agents' calls and the operational
            // endpoints do not need to.
            if !matches!(target(&path), Target::Operational | Target::Agent(_)) || root.is_some() {
                services.core.sync();
            }
            if let Some(api) = root {
                return match &services.compute {
                    Some(compute) => compute.dispatch_root(api, &services.server, &path, request).await,
                    None => not_found(),
                };
            }
            match target(&path) {
                Target::Operational if request.method() == Method::GET => {
                    let peer = request
                        .extensions()
                        .get::<axum::extract::ConnectInfo<crate::transport::Peer>>()
                        .map(|c| c.0 .0);
                    let headers = request.headers().clone();
                    match operational_allowed(&services, peer, &headers).await {
                        Ok(()) => operational(&services, &path),
                        Err(refused) => refused,
                    }
                }
                Target::Operational => not_found(),
                Target::Dashboard(rest) => {
                    let rest = rest.to_owned();
                    crate::dashboard::serve(&services, &rest, request).await
                }
                // Keystone itself answers identity requests in keystone mode.
                Target::Identity(_) if services.keystone.is_some() => not_found(),
                Target::Placement(rest) => {
                    let rest = rest.to_owned();
                    berth_http::dispatch(&services.placement, &services.placement_api, &services.server, &rest, request)
                        .await
                }
                other => match &services.compute {
                    Some(compute) => compute.dispatch(&services.server, other, request).await,
                    None => not_found(),
                },
            }
        }
    })
}

fn not_found() -> Response<Body> {
    Response::builder().status(StatusCode::NOT_FOUND).body(Body::empty()).unwrap_or_default()
}

/// `/healthcheck` (200 when the database answers, else 503) and `/metrics`.
fn operational(services: &Services, path: &str) -> Response<Body> {
    let core = &services.core;
    if path == "/healthcheck" {
        let (status, db) = match core.ping() {
            Ok(()) => (StatusCode::OK, "ok"),
            Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        let body = json!({"status": if status == StatusCode::OK { "ok" } else { "degraded" },
                          "database": db, "backend": core.store().backend_name()});
        return Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap_or_default();
    }
    let (counters, gauges) = collect_metrics(services);
    let mut text = services.server.metrics.render(&counters, &gauges);
    if let Some(compute) = &services.compute {
        for (name, help, histogram) in compute.histograms() {
            text.push_str(&histogram.render(name, help));
        }
    }
    text.push_str(&crate::dashboard::dashboard_metrics(services));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
        .body(Body::from(text))
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_go_to_their_api() {
        assert_eq!(target("/"), Target::Placement("/"));
        assert_eq!(target("/resource_providers"), Target::Placement("/resource_providers"));
        assert_eq!(target("/placement"), Target::Placement("/"));
        assert_eq!(target("/placement/traits"), Target::Placement("/traits"));
        assert_eq!(target("/placementx"), Target::Placement("/placementx"));
        assert_eq!(target("/compute/v2.1/servers"), Target::Compute("/v2.1/servers"));
        assert_eq!(target("/compute"), Target::Compute(""));
        assert_eq!(target("/image/v2/images"), Target::Image("/v2/images"));
        assert_eq!(target("/reservation/v1/leases"), Target::Reservation("/v1/leases"));
        assert_eq!(target("/reservationx"), Target::Placement("/reservationx"));
        assert_eq!(target("/agent/v1/work"), Target::Agent("/work"));
        assert_eq!(target("/admin/v1/cells"), Target::Admin("/cells"));
        assert_eq!(target("/metrics"), Target::Operational);
        assert_eq!(target("/dashboard"), Target::Dashboard(""));
        assert_eq!(target("/dashboard/api/capacity"), Target::Dashboard("/api/capacity"));
        assert_eq!(target("/dashboardx"), Target::Placement("/dashboardx"));
    }
}
