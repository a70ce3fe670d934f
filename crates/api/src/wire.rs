//! Shared wire conversions (domain -> JSON) used by several handlers.
//! Resource-specific wire shapes live next to their handlers.

use serde_json::{json, Value};

use berth_model::Provider;

use crate::request::Req;

/// Links of a resource provider, per microversion.
pub fn provider_links(req: &Req, provider: &Provider) -> Value {
    let base = format!("/resource_providers/{}", provider.uuid());
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
    let mut out = json!({
        "uuid": provider.uuid().to_string(),
        "name": provider.row.name,
        "generation": provider.row.generation,
        "links": provider_links(req, provider),
    });
    if req.at_least(14) {
        out["parent_provider_uuid"] = json!(provider.row.parent.map(|p| p.to_string()));
        out["root_provider_uuid"] = json!(provider.row.root.to_string());
    }
    out
}
