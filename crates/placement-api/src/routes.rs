//! The routing table: every path, method, handler and the microversion it
//! appears at, in one list (upstream `handler.py` ROUTE_DECLARATIONS plus
//! the `version_handler` minimums).

use axum::http::Method;
use berth_http::routes::{Endpoint, Route};

use crate::handlers::*;
use crate::microversion::Version;
use crate::Placement;

fn ep(
    method: Method,
    minor: u16,
    handler: fn(&Placement, &crate::request::Req) -> berth_http::ApiResult<berth_http::Resp>,
) -> Endpoint<Placement> {
    Endpoint::sync(method, Version(1, minor), handler)
}

/// The full table.
pub fn table() -> Vec<Route<Placement>> {
    use Method as M;
    let r = |pattern, endpoints| Route { pattern, endpoints };
    vec![
        r("/", vec![ep(M::GET, 0, root::home).public()]),
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
