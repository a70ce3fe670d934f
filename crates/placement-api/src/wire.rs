//! Shared wire conversions (domain -> JSON) used by several handlers.
//! Resource-specific wire shapes live next to their handlers.

use serde_json::{json, Value};

use berth_model::{Provider, ProviderRow, Uuid};

use crate::request::Req;

/// Links of a resource provider, per microversion.
pub fn provider_links(req: &Req, provider: &Provider) -> Value {
    provider_links_for(req, provider.uuid())
}

/// Links of the resource provider `uuid`, per microversion.
pub fn provider_links_for(req: &Req, uuid: Uuid) -> Value {
    let base = format!("/resource_providers/{uuid}");
    let mut links = vec![
        json!({"rel": "self", "href": base}),
        json!({"rel": "inventories", "href": format!("{base}/inventories")}),
        json!({"rel": "usages", "href": format!("{base}/usages")}),
    ];
    if req.at_least(1) {
        links.push(json!({"rel": "aggregates", "href": format!("{base}/aggregates")}));
    }
    if req.at_least(6) {
        links.push(json!({"rel": "traits", "href": format!("{base}/traits")}));
    }
    if req.at_least(11) {
        links.push(json!({"rel": "allocations", "href": format!("{base}/allocations")}));
    }
    Value::Array(links)
}

/// A resource provider as `GET /resource_providers/{uuid}` shows it.
pub fn provider(req: &Req, provider: &Provider) -> Value {
    provider_row(req, &provider.row)
}

/// A resource provider row in the `GET /resource_providers/{uuid}` shape.
pub fn provider_row(req: &Req, row: &ProviderRow) -> Value {
    let mut out = json!({
        "uuid": row.uuid.to_string(),
        "name": row.name,
        "generation": row.generation,
        "links": provider_links_for(req, row.uuid),
    });
    if req.at_least(14) {
        out["parent_provider_uuid"] = json!(row.parent.map(|p| p.to_string()));
        out["root_provider_uuid"] = json!(row.root.to_string());
    }
    out
}
