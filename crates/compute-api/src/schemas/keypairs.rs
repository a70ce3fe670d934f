//! The `POST /os-keypairs` body (Nova's `schemas/keypairs.py`).
//!
//! Nova's name is `allOf: [name, keypair pattern]`; berth's validator has
//! no `allOf`, so [`create`] carries the key pair pattern (whose message
//! a bad character gets, as in Nova) and [`create_name`] the `name`
//! format (no leading or trailing whitespace), checked after it.

use serde_json::{json, Value};

use super::{envelope, name};
use crate::ComputeVersion;

/// Nova's `keypair_name_special_chars` pattern (before 2.92).
pub const KEYPAIR_NAME: &str = r"^[_\- a-zA-Z0-9]+$";
/// Nova's `keypair_name_special_chars_v292` pattern (`@` and `.` too).
pub const KEYPAIR_NAME_V292: &str = r"^[_\-\@\. a-zA-Z0-9]+$";

/// The `POST /os-keypairs` body at `version`: `name` and `public_key`;
/// 2.2 adds `type` (`ssh` or `x509`), 2.10 `user_id`; from 2.92
/// `public_key` is required and names may hold `@` and `.`.
pub fn create(version: ComputeVersion) -> Value {
    let pattern = if version.at_least(92) { KEYPAIR_NAME_V292 } else { KEYPAIR_NAME };
    let mut properties = json!({
        "name": {"type": "string", "pattern": pattern, "minLength": 1, "maxLength": 255},
        "public_key": {"type": "string"},
    });
    if version.at_least(2) {
        properties["type"] = json!({"type": "string", "enum": ["ssh", "x509"]});
    }
    if version.at_least(10) {
        properties["user_id"] = json!({"type": "string"});
    }
    let required = if version.at_least(92) { json!(["name", "public_key"]) } else { json!(["name"]) };
    envelope(
        "keypair",
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false}),
    )
}

/// The other half of Nova's `allOf`: the name is a `name` (no leading
/// or trailing whitespace).
pub fn create_name() -> Value {
    json!({
        "type": "object",
        "properties": {"keypair": {"type": "object", "properties": {"name": name()}}},
    })
}
