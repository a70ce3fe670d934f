//! `/os-services` update bodies (Nova's `schemas/services.py`).

use serde_json::{json, Value};

use super::{boolean, hostname};
use crate::ComputeVersion;

/// The `PUT /os-services/{action}` body before 2.53, where the action is
/// `enable`, `disable`, `disable-log-reason` or (2.11+) `force-down`:
/// `host` and `binary` required, `disabled_reason` optional (the handler
/// requires it for `disable-log-reason`), and from 2.11 `forced_down`
/// (required by the handler for `force-down`).
pub fn legacy_update(version: ComputeVersion) -> Value {
    let mut body = json!({
        "type": "object",
        "properties": {
            "host": hostname(),
            "binary": {"type": "string", "minLength": 1, "maxLength": 255},
            "disabled_reason": {"type": "string", "minLength": 1, "maxLength": 255},
        },
        "required": ["host", "binary"],
        "additionalProperties": false,
    });
    if version.at_least(11) {
        if let Some(Value::Object(properties)) = body.get_mut("properties") {
            properties.insert("forced_down".into(), boolean());
        }
    }
    body
}

/// The `PUT /os-services/{service_id}` body from 2.53: any of `status`
/// (`enabled`/`disabled`), `disabled_reason`, `forced_down`.
pub fn update() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["enabled", "disabled"]},
            "disabled_reason": {"type": "string", "minLength": 1, "maxLength": 255},
            "forced_down": boolean(),
        },
        "additionalProperties": false,
    })
}
