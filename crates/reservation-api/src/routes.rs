//! The reservation API's route table (Blazar v1, paths relative to
//! `/reservation`). `.json` suffixes are accepted as Blazar does.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::Method as M;
use berth_http::routes::{Endpoint, Route};
use berth_http::{Api, ApiResult, HandlerFuture, Policy, Req, Resp, Version, VersionSpec};

use crate::handlers as leases;
use crate::ReservationCtx;

type Sync = fn(&ReservationCtx, &Req) -> ApiResult<Resp>;
type Async = fn(Arc<ReservationCtx>, Req) -> HandlerFuture;

fn v1s(method: M, handler: Sync) -> Endpoint<ReservationCtx> {
    Endpoint::sync(method, Version(1, 0), handler)
}

fn v1a(method: M, handler: Async) -> Endpoint<ReservationCtx> {
    Endpoint::async_(method, Version(1, 0), handler)
}

/// The reservation API with the policy file's `overrides`.
pub fn reservation_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ReservationCtx>> {
    let routes = vec![
        Route::new("/", vec![v1s(M::GET, leases::versions).public()]),
        Route::new("/v1", vec![v1s(M::GET, leases::version_show).public()]),
        Route::new("/v1/", vec![v1s(M::GET, leases::version_show).public()]),
        Route::new("/v1/leases", vec![v1s(M::GET, leases::list_leases), v1s(M::POST, leases::create_lease)]),
        Route::new("/v1/leases.json", vec![v1s(M::GET, leases::list_leases), v1s(M::POST, leases::create_lease)]),
        Route::new(
            "/v1/leases/{id}",
            vec![
                v1s(M::GET, leases::show_lease),
                v1s(M::PUT, leases::update_lease),
                v1a(M::DELETE, leases::delete_lease),
            ],
        ),
        Route::new("/v1/os-hosts", vec![v1s(M::GET, leases::list_hosts), v1s(M::POST, leases::create_host)]),
        Route::new("/v1/os-hosts.json", vec![v1s(M::GET, leases::list_hosts), v1s(M::POST, leases::create_host)]),
        Route::new("/v1/os-hosts/allocations", vec![v1s(M::GET, leases::list_allocations)]),
        Route::new("/v1/os-hosts/properties", vec![v1s(M::GET, leases::list_properties)]),
        Route::new("/v1/os-hosts/properties/{name}", vec![v1s(M::PATCH, leases::patch_property)]),
        Route::new(
            "/v1/os-hosts/{id}",
            vec![v1s(M::GET, leases::show_host), v1s(M::PUT, leases::update_host), v1s(M::DELETE, leases::delete_host)],
        ),
        Route::new("/v1/os-hosts/{id}/allocation", vec![v1s(M::GET, leases::host_allocation)]),
        Route::new("/v1/availability", vec![v1s(M::GET, leases::availability)]),
        Route::new("/v1/availability/hosts", vec![v1s(M::GET, leases::host_capacity)]),
    ];
    Ok(Api {
        name: "reservation",
        versions: VersionSpec::single(Version(1, 0), "reservation"),
        routes,
        policy: Arc::new(Policy::new(leases::RULES, overrides)?),
        render_error: leases::render_error,
        adjust_auth: berth_compute_api::api::adjust_auth,
        request_id_alias: None,
    })
}
