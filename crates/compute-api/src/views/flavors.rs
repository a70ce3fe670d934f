//! `/flavors`, `/flavors/{id}/os-extra_specs` and `os-flavor-access`
//! bodies (Nova's `views/flavors.py` and the flavor controllers).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use berth_compute_model::Flavor;

use super::{list_body, string_map, wrap, Links};
use crate::ComputeVersion;

/// The collection segment of flavor links.
pub const COLLECTION: &str = "flavors";

/// One entry of `GET /flavors`: `id`, `name`, `links`, and from 2.55
/// `description`.
pub fn index_item(version: ComputeVersion, links: &Links, flavor: &Flavor) -> Value {
    let mut body = Map::new();
    body.insert("id".into(), json!(flavor.flavorid));
    body.insert("name".into(), json!(flavor.name));
    body.insert("links".into(), links.resource(COLLECTION, &flavor.flavorid));
    if version.at_least(55) {
        body.insert("description".into(), json!(flavor.description));
    }
    Value::Object(body)
}

/// One full flavor (`GET /flavors/detail` entry, inside of `GET
/// /flavors/{id}`, `POST /flavors`, `PUT /flavors/{id}`).
///
/// `show_extra_specs` is the caller's verdict on
/// `os_compute_api:os-flavor-extra-specs:index` and only counts from 2.61.
/// Changes: 2.55 `description`; 2.61 `extra_specs`; 2.75 `swap` is `0`
/// rather than `""` when there is none; 2.102 drops `rxtx_factor` and
/// `OS-FLV-DISABLED:disabled`.
pub fn detail_item(version: ComputeVersion, links: &Links, flavor: &Flavor, show_extra_specs: bool) -> Value {
    let mut body = Map::new();
    body.insert("id".into(), json!(flavor.flavorid));
    body.insert("name".into(), json!(flavor.name));
    body.insert("ram".into(), json!(flavor.memory_mb));
    body.insert("disk".into(), json!(flavor.root_gb));
    let swap = if flavor.swap != 0 || version.at_least(75) { json!(flavor.swap) } else { json!("") };
    body.insert("swap".into(), swap);
    body.insert("OS-FLV-EXT-DATA:ephemeral".into(), json!(flavor.ephemeral_gb));
    if !version.at_least(102) {
        body.insert("OS-FLV-DISABLED:disabled".into(), json!(flavor.disabled));
    }
    body.insert("vcpus".into(), json!(flavor.vcpus));
    body.insert("os-flavor-access:is_public".into(), json!(flavor.is_public));
    if !version.at_least(102) {
        // Nova shows `rxtx_factor or ""`: a zero factor is the empty string.
        let rxtx = if flavor.rxtx_factor == 0.0 { json!("") } else { json!(flavor.rxtx_factor) };
        body.insert("rxtx_factor".into(), rxtx);
    }
    body.insert("links".into(), links.resource(COLLECTION, &flavor.flavorid));
    if version.at_least(55) {
        body.insert("description".into(), json!(flavor.description));
    }
    if show_extra_specs && version.at_least(61) {
        body.insert("extra_specs".into(), string_map(&flavor.extra_specs));
    }
    Value::Object(body)
}

/// The `GET /flavors/{id}`, `POST /flavors` and `PUT /flavors/{id}` body.
pub fn show(version: ComputeVersion, links: &Links, flavor: &Flavor, show_extra_specs: bool) -> Value {
    wrap("flavor", detail_item(version, links, flavor, show_extra_specs))
}

/// The `GET /flavors` body (`flavors_links` when `next` is given; the
/// marker is the last flavor's `flavorid`).
pub fn index(version: ComputeVersion, links: &Links, flavors: &[Flavor], next: Option<Value>) -> Value {
    let items = flavors.iter().map(|f| index_item(version, links, f)).collect();
    list_body("flavors", items, "flavors_links", next)
}

/// The `GET /flavors/detail` body.
pub fn detail(
    version: ComputeVersion,
    links: &Links,
    flavors: &[Flavor],
    show_extra_specs: bool,
    next: Option<Value>,
) -> Value {
    let items = flavors.iter().map(|f| detail_item(version, links, f, show_extra_specs)).collect();
    list_body("flavors", items, "flavors_links", next)
}

/// The `GET`/`POST /flavors/{id}/os-extra_specs` body:
/// `{"extra_specs": {...}}`.
pub fn extra_specs(specs: &BTreeMap<String, String>) -> Value {
    wrap("extra_specs", string_map(specs))
}

/// The `GET`/`PUT /flavors/{id}/os-extra_specs/{key}` body: `{key: value}`.
pub fn extra_spec(key: &str, value: &str) -> Value {
    wrap(key, json!(value))
}

/// The `GET /flavors/{id}/os-flavor-access` body and the response of the
/// `addTenantAccess`/`removeTenantAccess` actions: one
/// `{flavor_id, tenant_id}` per project with access, in project order.
/// (Nova answers 404 for a public flavor's list; that is the caller's.)
pub fn flavor_access(flavor: &Flavor) -> Value {
    let entries: Vec<Value> =
        flavor.projects.iter().map(|p| json!({"flavor_id": flavor.flavorid, "tenant_id": p})).collect();
    json!({"flavor_access": entries})
}
