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
use serde_json::json;

use crate::paths::{target, RootApi, Target};
use crate::services::{collect_metrics, OperationalAccess, Services};

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
