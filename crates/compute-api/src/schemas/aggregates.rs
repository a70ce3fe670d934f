//! `/os-aggregates` request bodies (Nova's `schemas/aggregates.py`).

use serde_json::{json, Value};

use super::{envelope, hostname, name, name_with_spaces, AZ_NAME, METADATA_KEY};

fn availability_zone() -> Value {
    json!({"oneOf": [
        {"type": "string", "minLength": 1, "maxLength": 255, "pattern": AZ_NAME},
        {"type": "null"},
    ]})
}

/// The `POST /os-aggregates` body: `{"aggregate": {"name",
/// "availability_zone"?}}` (a zone name has no `:`; `null` means none).
pub fn create() -> Value {
    envelope(
        "aggregate",
        json!({
            "type": "object",
            "properties": {"name": name(), "availability_zone": availability_zone()},
            "required": ["name"],
            "additionalProperties": false,
        }),
    )
}

/// The `PUT /os-aggregates/{id}` body: `name` and/or `availability_zone`
/// (Nova keeps accepting names with surrounding spaces here, and trims
/// them).
pub fn update() -> Value {
    envelope(
        "aggregate",
        json!({
            "type": "object",
            "properties": {"name": name_with_spaces(), "availability_zone": availability_zone()},
            "additionalProperties": false,
            "anyOf": [{"required": ["name"]}, {"required": ["availability_zone"]}],
        }),
    )
}

fn host_action(action: &str) -> Value {
    envelope(
        action,
        json!({
            "type": "object",
            "properties": {"host": hostname()},
            "required": ["host"],
            "additionalProperties": false,
        }),
    )
}

/// The `add_host` aggregate action body: `{"add_host": {"host": name}}`.
pub fn add_host() -> Value {
    host_action("add_host")
}

/// The `remove_host` aggregate action body.
pub fn remove_host() -> Value {
    host_action("remove_host")
}

/// The `set_metadata` aggregate action body: `{"set_metadata":
/// {"metadata": {key: value or null}}}` (`null` deletes the key).
pub fn set_metadata() -> Value {
    envelope(
        "set_metadata",
        json!({
            "type": "object",
            "properties": {
                "metadata": {
                    "type": "object",
                    "patternProperties": {METADATA_KEY: {"type": ["string", "null"], "maxLength": 255}},
                    "additionalProperties": false,
                },
            },
            "required": ["metadata"],
            "additionalProperties": false,
        }),
    )
}
