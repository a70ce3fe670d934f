//! The `POST /os-server-groups` body (Nova's `schemas/server_groups.py`).

use serde_json::{json, Value};

use super::{envelope, name, positive_integer};
use crate::ComputeVersion;

/// The `POST /os-server-groups` body at `version`.
///
/// Before 2.64: `{"server_group": {"name", "policies": [policy]}}`, one
/// policy, `affinity` or `anti-affinity` (2.15 adds the soft ones). From
/// 2.64: `{"server_group": {"name", "policy", "rules"?}}` where `rules`
/// may hold `max_server_per_host` (the handler allows it only with
/// `anti-affinity`, as Nova does).
pub fn create(version: ComputeVersion) -> Value {
    let policies: Vec<&str> = if version.at_least(15) {
        vec!["anti-affinity", "affinity", "soft-anti-affinity", "soft-affinity"]
    } else {
        vec!["anti-affinity", "affinity"]
    };
    let group = if version.at_least(64) {
        json!({
            "type": "object",
            "properties": {
                "name": name(),
                "policy": {"type": "string", "enum": policies},
                "rules": {
                    "type": "object",
                    "properties": {"max_server_per_host": positive_integer()},
                    "additionalProperties": false,
                },
            },
            "required": ["name", "policy"],
            "additionalProperties": false,
        })
    } else {
        json!({
            "type": "object",
            "properties": {
                "name": name(),
                "policies": {
                    "type": "array",
                    "items": {"type": "string", "enum": policies},
                    "uniqueItems": true,
                    "minItems": 1,
                    "maxItems": 1,
                },
            },
            "required": ["name", "policies"],
            "additionalProperties": false,
        })
    };
    envelope("server_group", group)
}
