//! The `POST /os-server-external-events` body (Nova's
//! `schemas/server_external_events.py`).

use serde_json::{json, Value};

use super::uuid;
use crate::ComputeVersion;

/// The event names accepted at `version` (2.51 `volume-extended`, 2.76
/// `power-update`, 2.82 `accelerator-request-bound`, 2.93
/// `volume-reimaged`).
pub fn names(version: ComputeVersion) -> Vec<&'static str> {
    let mut names = vec!["network-changed", "network-vif-plugged", "network-vif-unplugged", "network-vif-deleted"];
    for (minor, name) in
        [(51, "volume-extended"), (76, "power-update"), (82, "accelerator-request-bound"), (93, "volume-reimaged")]
    {
        if version.at_least(minor) {
            names.push(name);
        }
    }
    names
}

/// The body at `version`: `{"events": [{name, server_uuid, status?,
/// tag?}, ...]}`, at least one event.
pub fn create(version: ComputeVersion) -> Value {
    json!({
        "type": "object",
        "properties": {
            "events": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "enum": names(version)},
                        "server_uuid": uuid(),
                        "status": {"type": "string", "enum": ["failed", "completed", "in-progress"]},
                        "tag": {"type": "string", "maxLength": 255},
                    },
                    "required": ["name", "server_uuid"],
                    "additionalProperties": false,
                },
            },
        },
        "required": ["events"],
        "additionalProperties": false,
    })
}
