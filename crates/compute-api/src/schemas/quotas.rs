//! The `PUT /os-quota-sets/{project_id}` body (Nova's
//! `schemas/quota_sets.py`).

use serde_json::{json, Map, Value};

use super::{boolean, envelope};
use crate::ComputeVersion;

/// One quota limit: an integer (or digit string) from -1 (unlimited) to
/// 2^31 - 1.
fn limit() -> Value {
    json!({"type": ["integer", "string"], "pattern": "^-?[0-9]+$", "minimum": -1, "maximum": 2_147_483_647})
}

/// The `PUT /os-quota-sets/{project_id}` body at `version`: `{"quota_set":
/// {resource: limit, ..., "force": bool}}` with the resources
/// [`crate::views::quotas::resources`] shows at that version (so 2.36
/// refuses the network ones and 2.57 the file-injection ones).
pub fn update(version: ComputeVersion) -> Value {
    let mut properties: Map<String, Value> =
        crate::views::quotas::resources(version).map(|r| (r.to_owned(), limit())).collect();
    properties.insert("force".into(), boolean());
    envelope("quota_set", json!({"type": "object", "properties": properties, "additionalProperties": false}))
}

/// The `PUT /os-quota-class-sets/{class}` body at `version`:
/// `{"quota_class_set": {resource: limit, ...}}` (no `force`).
pub fn class_update(version: ComputeVersion) -> Value {
    let properties: Map<String, Value> =
        crate::views::quotas::class_update_resources(version).map(|r| (r.to_owned(), limit())).collect();
    envelope("quota_class_set", json!({"type": "object", "properties": properties, "additionalProperties": false}))
}
