//! The routing table: every path, method, handler and the microversion it
//! appears at, in one list (upstream `handler.py` ROUTE_DECLARATIONS plus
//! the `version_handler` minimums).

use axum::http::Method;

use crate::error::ApiResult;
use crate::handlers::*;
use crate::microversion::Version;
use crate::request::{Req, Resp};
use crate::App;

/// A handler function.
pub type Handler = fn(&App, &Req) -> ApiResult<Resp>;

/// One method on a route.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// HTTP method.
    pub method: Method,
    /// Lowest microversion serving it (404 below).
    pub min_version: Version,
    /// The handler.
    pub handler: Handler,
    /// Does not need authentication (only the root document).
    pub public: bool,
}

/// A path pattern with its methods.
#[derive(Debug)]
pub struct Route {
    /// Pattern; `{name}` segments capture.
    pub pattern: &'static str,
    /// Methods in `Allow` order.
    pub endpoints: Vec<Endpoint>,
}

fn ep(method: Method, minor: u16, handler: Handler) -> Endpoint {
    Endpoint { method, min_version: Version(1, minor), handler, public: false }
}

/// The full table.
pub fn table() -> Vec<Route> {
    use Method as M;
    let r = |pattern, endpoints| Route { pattern, endpoints };
    vec![
        r("/", vec![Endpoint { method: M::GET, min_version: Version(1, 0), handler: root::home, public: true }]),
        r(
            "/resource_classes",
            vec![
                ep(M::GET, 2, resource_classes::list_resource_classes),
                ep(M::POST, 2, resource_classes::create_resource_class),
            ],
        ),
        r(
            "/resource_classes/{name}",
            vec![
                ep(M::GET, 2, resource_classes::get_resource_class),
                ep(M::PUT, 2, resource_classes::update_resource_class),
                ep(M::DELETE, 2, resource_classes::delete_resource_class),
            ],
        ),
        r(
            "/resource_providers",
            vec![
                ep(M::GET, 0, resource_providers::list_resource_providers),
                ep(M::POST, 0, resource_providers::create_resource_provider),
            ],
        ),
        r(
            "/resource_providers/{uuid}",
            vec![
                ep(M::GET, 0, resource_providers::get_resource_provider),
                ep(M::DELETE, 0, resource_providers::delete_resource_provider),
                ep(M::PUT, 0, resource_providers::update_resource_provider),
            ],
        ),
        r(
            "/resource_providers/{uuid}/inventories",
            vec![
                ep(M::GET, 0, inventories::get_inventories),
                ep(M::POST, 0, inventories::create_inventory),
                ep(M::PUT, 0, inventories::set_inventories),
                ep(M::DELETE, 0, inventories::delete_inventories),
            ],
        ),
        r(
            "/resource_providers/{uuid}/inventories/{resource_class}",
            vec![
                ep(M::GET, 0, inventories::get_inventory),
                ep(M::PUT, 0, inventories::update_inventory),
                ep(M::DELETE, 0, inventories::delete_inventory),
            ],
        ),
        r("/resource_providers/{uuid}/usages", vec![ep(M::GET, 0, usages::list_usages)]),
        r(
            "/resource_providers/{uuid}/aggregates",
            vec![ep(M::GET, 1, aggregates::get_aggregates), ep(M::PUT, 1, aggregates::set_aggregates)],
        ),
        r("/resource_providers/{uuid}/allocations", vec![ep(M::GET, 0, allocations::list_for_resource_provider)]),
        r("/allocations", vec![ep(M::POST, 13, allocations::set_allocations)]),
        r(
            "/allocations/{consumer_uuid}",
            vec![
                ep(M::GET, 0, allocations::list_for_consumer),
                ep(M::PUT, 0, allocations::set_allocations_for_consumer),
                ep(M::DELETE, 0, allocations::delete_allocations),
            ],
        ),
        r("/allocation_candidates", vec![ep(M::GET, 10, allocation_candidates::list_allocation_candidates)]),
        r("/traits", vec![ep(M::GET, 6, traits::list_traits)]),
        r(
            "/traits/{name}",
            vec![
                ep(M::GET, 6, traits::get_trait),
                ep(M::PUT, 6, traits::put_trait),
                ep(M::DELETE, 6, traits::delete_trait),
            ],
        ),
        r(
            "/resource_providers/{uuid}/traits",
            vec![
                ep(M::GET, 6, traits::list_traits_for_resource_provider),
                ep(M::PUT, 6, traits::update_traits_for_resource_provider),
                ep(M::DELETE, 6, traits::delete_traits_for_resource_provider),
            ],
        ),
        r("/usages", vec![ep(M::GET, 9, usages::get_total_usages)]),
        r("/reshaper", vec![ep(M::POST, 30, reshaper::reshape)]),
    ]
}

/// Result of matching a path.
#[derive(Debug)]
pub enum Match<'a> {
    /// No route has this path.
    NotFound,
    /// The path matched; `endpoint` is None when the method is not allowed.
    Found {
        /// The matched route.
        route: &'a Route,
        /// The endpoint for the method, if any.
        endpoint: Option<&'a Endpoint>,
        /// Decoded captures.
        params: Vec<String>,
    },
}

/// Match `path` and `method` against the table.
pub fn find<'a>(table: &'a [Route], method: &Method, path: &str) -> Match<'a> {
    let path = if path.is_empty() { "/" } else { path };
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for route in table {
        let pattern: Vec<&str> = route.pattern.split('/').skip(1).collect();
        if pattern.len() != segments.len() {
            continue;
        }
        let mut params = Vec::new();
        let mut ok = true;
        for (want, got) in pattern.iter().zip(&segments) {
            if want.starts_with('{') {
                if got.is_empty() {
                    ok = false;
                    break;
                }
                params.push(percent_encoding::percent_decode_str(got).decode_utf8_lossy().into_owned());
            } else if want != got {
                ok = false;
                break;
            }
        }
        if ok {
            let endpoint = route.endpoints.iter().find(|e| e.method == *method);
            return Match::Found { route, endpoint, params };
        }
    }
    Match::NotFound
}
