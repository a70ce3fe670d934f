//! `/flavors`, `os-extra_specs` and `os-flavor-access` request bodies
//! (Nova's `schemas/flavors.py`, `flavors_extraspecs.py`,
//! `flavor_access.py`).

use serde_json::{json, Value};

use super::{boolean, db_integer, envelope, name, FLAVOR_ID, METADATA_KEY, PRINTABLE_TEXT};
use crate::ComputeVersion;

fn flavor_description() -> Value {
    json!({"type": ["string", "null"], "minLength": 0, "maxLength": 65535, "pattern": PRINTABLE_TEXT})
}

/// The `POST /flavors` body at `version`: `name`, `ram`, `vcpus`, `disk`
/// required; optional `id` (string, number or `null` for a generated
/// uuid), `OS-FLV-EXT-DATA:ephemeral`, `swap`, `os-flavor-access:is_public`;
/// `rxtx_factor` before 2.102; `description` from 2.55. Integers may be
/// digit strings, as Nova accepts.
pub fn create(version: ComputeVersion) -> Value {
    let mut flavor = json!({
        "type": "object",
        "properties": {
            "name": name(),
            "id": {"type": ["string", "number", "null"], "minLength": 1, "maxLength": 255, "pattern": FLAVOR_ID},
            "ram": db_integer(1),
            "vcpus": db_integer(1),
            "disk": db_integer(0),
            "OS-FLV-EXT-DATA:ephemeral": db_integer(0),
            "swap": db_integer(0),
            "os-flavor-access:is_public": boolean(),
        },
        "required": ["name", "ram", "vcpus", "disk"],
        "additionalProperties": false,
    });
    if let Some(Value::Object(properties)) = flavor.get_mut("properties") {
        if !version.at_least(102) {
            properties.insert(
                "rxtx_factor".into(),
                json!({"type": ["number", "string"], "pattern": r"^[0-9]+(\.[0-9]+)?$", "maximum": 3.40282e38}),
            );
        }
        if version.at_least(55) {
            properties.insert("description".into(), flavor_description());
        }
    }
    envelope("flavor", flavor)
}

/// The `PUT /flavors/{id}` body (2.55+): `{"flavor": {"description": ...}}`.
pub fn update() -> Value {
    envelope(
        "flavor",
        json!({
            "type": "object",
            "properties": {"description": flavor_description()},
            "required": ["description"],
            "additionalProperties": false,
        }),
    )
}

fn extra_spec_value() -> Value {
    json!({"type": ["string", "number"], "maxLength": 255})
}

/// The `POST /flavors/{id}/os-extra_specs` body: `{"extra_specs": {key:
/// value}}` (values strings or numbers). Nova 2.86 also validates known
/// keys; that is `berth_compute_model::extra_specs`, not a schema.
pub fn extra_specs_create() -> Value {
    envelope(
        "extra_specs",
        json!({
            "type": "object",
            "patternProperties": {METADATA_KEY: extra_spec_value()},
            "additionalProperties": false,
        }),
    )
}

/// The `PUT /flavors/{id}/os-extra_specs/{key}` body: exactly one
/// `{key: value}` (the handler checks that it names the URL's key).
pub fn extra_spec_update() -> Value {
    json!({
        "type": "object",
        "patternProperties": {METADATA_KEY: extra_spec_value()},
        "additionalProperties": false,
        "minProperties": 1,
        "maxProperties": 1,
    })
}

fn tenant_action(action: &str) -> Value {
    envelope(
        action,
        json!({
            "type": "object",
            "properties": {"tenant": {"type": "string", "minLength": 1, "maxLength": 255}},
            "required": ["tenant"],
            "additionalProperties": false,
        }),
    )
}

/// The `addTenantAccess` flavor action body: `{"addTenantAccess":
/// {"tenant": project_id}}`.
pub fn add_tenant_access() -> Value {
    tenant_action("addTenantAccess")
}

/// The `removeTenantAccess` flavor action body.
pub fn remove_tenant_access() -> Value {
    tenant_action("removeTenantAccess")
}
