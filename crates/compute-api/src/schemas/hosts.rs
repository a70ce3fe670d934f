//! The `PUT /os-hosts/{host}` body (Nova's `schemas/hosts.py`).

use serde_json::{json, Value};

/// `{"status": "enable"|"disable", "maintenance_mode": ...}` (either or
/// both; the three spellings Nova takes), nothing else.
pub fn update() -> Value {
    let mode = json!({"type": "string", "enum": ["enable", "disable", "Enable", "Disable", "ENABLE", "DISABLE"]});
    json!({
        "type": "object",
        "properties": {"status": mode, "maintenance_mode": mode},
        "anyOf": [{"required": ["status"]}, {"required": ["maintenance_mode"]}],
        "additionalProperties": false,
    })
}
