//! `/servers` request bodies: create, update, and the `os-start`, `os-stop`
//! and `reboot` actions (Nova's `schemas/servers.py`).
//!
//! The create schema accepts everything Nova's does, block devices and
//! personality included, so a request fails validation exactly when it
//! would fail on Nova; refusing what berth cannot do (volumes, ports, file
//! injection) is the handler's job, with a clearer message than a schema
//! error.

use serde_json::{json, Map, Value};

use super::{
    boolean, db_integer, description, envelope, hostname, metadata, name, positive_integer, tag, uuid, IPV4, IPV6,
    IP_ADDRESS,
};
use crate::ComputeVersion;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// One legacy block device mapping's properties (shared with v2).
fn legacy_block_device_properties() -> Map<String, Value> {
    object(json!({
        "virtual_name": {"type": "string", "maxLength": 255},
        "volume_id": uuid(),
        "snapshot_id": uuid(),
        "volume_size": db_integer(1),
        "device_name": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9._/-]*$"},
        "delete_on_termination": boolean(),
        "no_device": {},
        "connection_info": {"type": "string", "maxLength": 16_777_215},
    }))
}

fn block_device_mapping_v2(version: ComputeVersion) -> Value {
    let mut properties = legacy_block_device_properties();
    properties.extend(object(json!({
        "source_type": {"type": "string", "enum": ["volume", "image", "snapshot", "blank"]},
        "uuid": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9._-]*$"},
        "image_id": uuid(),
        "destination_type": {"type": "string", "enum": ["local", "volume"]},
        "guest_format": {"type": "string", "maxLength": 255},
        "device_type": {"type": "string", "maxLength": 255},
        "disk_bus": {"type": "string", "maxLength": 255},
        "boot_index": {"type": ["integer", "string", "null"], "pattern": "^-?[0-9]+$"},
    })));
    // Device tags came at 2.32, were lost at 2.33 and came back at 2.42.
    if version.0 == 32 || version.at_least(42) {
        properties.insert("tag".into(), tag());
    }
    if version.at_least(67) {
        properties.insert("volume_type".into(), json!({"type": ["string", "null"], "minLength": 0, "maxLength": 255}));
    }
    json!({"type": "array", "items": {"type": "object", "properties": properties, "additionalProperties": false}})
}

fn networks(version: ComputeVersion) -> Value {
    let mut network = object(json!({
        "fixed_ip": {"type": "string", "pattern": IP_ADDRESS},
        "port": {"type": ["string", "null"], "format": "uuid"},
        "uuid": {"type": "string"},
    }));
    // Network tags came at 2.32, were lost when 2.37 rewrote `networks`,
    // and came back at 2.42.
    if (32..37).contains(&version.0) || version.at_least(42) {
        network.insert("tag".into(), tag());
    }
    if !version.at_least(37) {
        return json!({"type": "array", "items": {"type": "object", "properties": network, "additionalProperties": false}});
    }
    network.insert("uuid".into(), uuid());
    json!({"oneOf": [
        {"type": "array", "items": {"type": "object", "properties": network, "additionalProperties": false}},
        {"type": "string", "enum": ["none", "auto"]},
    ]})
}

/// The scheduler hints Nova validates (`os:scheduler_hints` and its
/// `OS-SCH-HNT:` alias): `group`, `same_host`, `different_host` and the
/// filters' own hints; any other hint is allowed and kept.
pub fn scheduler_hints() -> Value {
    let uuid_list = json!({"type": "array", "items": uuid()});
    json!({
        "type": "object",
        "properties": {
            "group": {"oneOf": [uuid_list, uuid()]},
            "different_host": {"oneOf": [uuid(), uuid_list]},
            "same_host": {"type": ["string", "array"], "items": uuid()},
            "query": {"type": ["string", "object"]},
            "target_cell": name(),
            "different_cell": {"type": ["string", "array"], "items": {"type": "string"}},
            "build_near_host_ip": {"type": "string", "pattern": IP_ADDRESS},
            "cidr": {"type": "string", "pattern": "^/[0-9a-f.:]+$"},
        },
        "additionalProperties": true,
    })
}

/// The `POST /servers` body at `version`: `{"server": {...}}` with
/// `name` and `flavorRef` required (and `networks` from 2.37), plus
/// optional `os:scheduler_hints`.
///
/// Per version: 2.19 `description`; 2.32 network and block-device `tag`
/// (block devices lose it at 2.33 and regain it at 2.42); 2.37 `networks`
/// required, `"none"`/`"auto"` or a list whose `uuid` must be a uuid;
/// 2.52 `tags`; 2.57 no `personality`; 2.63 `trusted_image_certificates`;
/// 2.67 block-device `volume_type`; 2.74 `host`, `hypervisor_hostname`;
/// 2.90 `hostname` (an RFC 1123 label); 2.94 `hostname` may be an FQDN.
pub fn create(version: ComputeVersion) -> Value {
    let mut server = object(json!({
        "name": name(),
        "imageRef": {"oneOf": [uuid(), {"type": "string", "maxLength": 0}]},
        "flavorRef": {"type": ["string", "integer"], "minLength": 1},
        "adminPass": {"type": "string"},
        "metadata": metadata(),
        "networks": networks(version),
        "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
        "accessIPv4": {"type": "string", "pattern": IPV4},
        "accessIPv6": {"type": "string", "pattern": IPV6},
        "availability_zone": name(),
        "block_device_mapping": {
            "type": "array",
            "items": {"type": "object", "properties": legacy_block_device_properties(), "additionalProperties": false},
        },
        "block_device_mapping_v2": block_device_mapping_v2(version),
        "config_drive": boolean(),
        "key_name": name(),
        "min_count": positive_integer(),
        "max_count": positive_integer(),
        "return_reservation_id": boolean(),
        "security_groups": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": name()}, "additionalProperties": false},
        },
        "user_data": {"type": "string", "maxLength": 65535},
    }));
    if !version.at_least(57) {
        server.insert(
            "personality".into(),
            json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "contents": {"type": "string"}},
                    "additionalProperties": false,
                },
            }),
        );
    }
    if version.at_least(19) {
        server.insert("description".into(), description());
    }
    if version.at_least(52) {
        server.insert("tags".into(), json!({"type": "array", "items": tag(), "maxItems": 50}));
    }
    if version.at_least(63) {
        server.insert("trusted_image_certificates".into(), trusted_image_certificates());
    }
    if version.at_least(74) {
        server.insert("host".into(), hostname());
        server.insert("hypervisor_hostname".into(), hostname());
    }
    if version.at_least(90) {
        server.insert("hostname".into(), server_hostname(version));
    }
    let required =
        if version.at_least(37) { json!(["name", "flavorRef", "networks"]) } else { json!(["name", "flavorRef"]) };
    json!({
        "type": "object",
        "properties": {
            "server": {"type": "object", "properties": server, "required": required, "additionalProperties": false},
            "os:scheduler_hints": scheduler_hints(),
            "OS-SCH-HNT:scheduler_hints": scheduler_hints(),
        },
        "required": ["server"],
        "additionalProperties": false,
    })
}

/// A server's `hostname`: an RFC 1123 label at 2.90 to 2.93, any host
/// name (FQDNs included) from 2.94.
fn server_hostname(version: ComputeVersion) -> Value {
    if version.at_least(94) {
        hostname()
    } else {
        json!({"type": "string", "pattern": "^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$", "minLength": 2, "maxLength": 63})
    }
}

/// The `PUT /servers/{id}` body at `version`: `{"server": {...}}` with any
/// of `name`, `OS-DCF:diskConfig`, `accessIPv4`, `accessIPv6`; 2.19
/// `description`; 2.90 `hostname` (2.94: FQDNs); 2.104
/// `pinned_availability_zone` (a zone, or `null` to unpin).
pub fn update(version: ComputeVersion) -> Value {
    let mut server = object(json!({
        "name": name(),
        "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
        "accessIPv4": {"type": "string", "pattern": IPV4},
        "accessIPv6": {"type": "string", "pattern": IPV6},
    }));
    if version.at_least(19) {
        server.insert("description".into(), description());
    }
    if version.at_least(90) {
        server.insert("hostname".into(), server_hostname(version));
    }
    if version.at_least(104) {
        server.insert(
            "pinned_availability_zone".into(),
            json!({"oneOf": [{"type": "string", "minLength": 1, "maxLength": 255}, {"type": "null"}]}),
        );
    }
    envelope("server", json!({"type": "object", "properties": server, "additionalProperties": false}))
}

/// The `os-start` action body: `{"os-start": <anything>}`.
pub fn start() -> Value {
    envelope("os-start", json!({}))
}

/// The `os-stop` action body: `{"os-stop": <anything>}`.
pub fn stop() -> Value {
    envelope("os-stop", json!({}))
}

/// The `reboot` action body: `{"reboot": {"type": "SOFT" | "HARD"}}` (any
/// case Nova accepts).
pub fn reboot() -> Value {
    envelope(
        "reboot",
        json!({
            "type": "object",
            "properties": {"type": {"type": "string", "enum": ["HARD", "Hard", "hard", "SOFT", "Soft", "soft"]}},
            "required": ["type"],
            "additionalProperties": false,
        }),
    )
}

/// The `resize` action body: `{"resize": {"flavorRef": ..., "OS-DCF:diskConfig": ...}}`.
pub fn resize() -> Value {
    envelope(
        "resize",
        json!({
            "type": "object",
            "properties": {
                "flavorRef": {"type": ["string", "integer"], "minLength": 1},
                "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
            },
            "required": ["flavorRef"],
            "additionalProperties": false,
        }),
    )
}

/// The `confirmResize` action body (any value, as Nova).
pub fn confirm_resize() -> Value {
    envelope("confirmResize", json!({}))
}

/// The `revertResize` action body (any value, as Nova).
pub fn revert_resize() -> Value {
    envelope("revertResize", json!({}))
}

/// The `migrate` action body: anything before 2.56 (Nova validates from
/// 2.56 only), then `null` or `{"host": <hostname or null>}`.
pub fn migrate(v256: bool) -> Value {
    if !v256 {
        return envelope("migrate", json!({}));
    }
    let mut host = super::hostname();
    host["type"] = json!(["string", "null"]);
    envelope(
        "migrate",
        json!({
            "type": ["object", "null"],
            "properties": {"host": host},
            "additionalProperties": false,
        }),
    )
}

/// The `evacuate` action body (Nova's `schemas/evacuate.py`): before 2.14
/// `onSharedStorage` is required, 2.29–2.67 add `force`, 2.68 drops it
/// again.
pub fn evacuate(minor: u16) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("host".into(), super::hostname());
    properties.insert("adminPass".into(), json!({"type": "string"}));
    let mut body = json!({"type": "object", "additionalProperties": false});
    if minor < 14 {
        properties.insert("onSharedStorage".into(), super::boolean());
        body["required"] = json!(["onSharedStorage"]);
    } else if (29..68).contains(&minor) {
        properties.insert("force".into(), super::boolean());
    }
    body["properties"] = Value::Object(properties);
    envelope("evacuate", body)
}

/// The `os-migrateLive` action body (Nova's `schemas/migrate_server.py`):
/// `block_migration`, `disk_over_commit` and `host` required before 2.25;
/// 2.25 drops `disk_over_commit` and allows `block_migration: "auto"`;
/// 2.30–2.67 add `force`.
pub fn migrate_live(minor: u16) -> Value {
    let mut host = super::hostname();
    host["type"] = json!(["string", "null"]);
    let mut block_migration = super::boolean();
    let mut properties = serde_json::Map::new();
    if minor < 25 {
        properties.insert("disk_over_commit".into(), super::boolean());
    } else if let Some(values) = block_migration["enum"].as_array_mut() {
        values.push(json!("auto"));
    }
    properties.insert("block_migration".into(), block_migration);
    properties.insert("host".into(), host);
    if (30..68).contains(&minor) {
        properties.insert("force".into(), super::boolean());
    }
    let required = if minor < 25 {
        json!(["block_migration", "disk_over_commit", "host"])
    } else {
        json!(["block_migration", "host"])
    };
    envelope(
        "os-migrateLive",
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false}),
    )
}

/// The `force_complete` action body of a server migration (`null`).
pub fn force_complete() -> Value {
    json!({
        "type": "object",
        "properties": {"force_complete": {"type": "null"}},
        "required": ["force_complete"],
        "additionalProperties": false,
    })
}

/// The `shelve` action body (any value, as Nova).
pub fn shelve() -> Value {
    envelope("shelve", json!({}))
}

/// The `shelveOffload` action body (any value, as Nova).
pub fn shelve_offload() -> Value {
    envelope("shelveOffload", json!({}))
}

/// The `unshelve` action body: anything before 2.77; then `null` or
/// `{"availability_zone": name}` (required); from 2.91 `null` or an
/// object with an optional `availability_zone` (string or null) and
/// `host`.
pub fn unshelve(minor: u16) -> Value {
    if minor < 77 {
        return envelope("unshelve", json!({}));
    }
    if minor < 91 {
        return envelope(
            "unshelve",
            json!({
                "type": ["object", "null"],
                "properties": {"availability_zone": super::name()},
                "required": ["availability_zone"],
                "additionalProperties": false,
            }),
        );
    }
    envelope(
        "unshelve",
        json!({
            "type": ["object", "null"],
            "properties": {
                "availability_zone": {"type": ["string", "null"]},
                "host": {"type": "string"},
            },
            "additionalProperties": false,
        }),
    )
}

/// The `lock` action body: anything before 2.73; from 2.73 `null` or an
/// object with an optional `locked_reason` (1–255 characters).
pub fn lock(minor: u16) -> Value {
    if minor < 73 {
        return envelope("lock", json!({}));
    }
    envelope(
        "lock",
        json!({
            "type": ["object", "null"],
            "properties": {"locked_reason": {"type": "string", "minLength": 1, "maxLength": 255}},
            "additionalProperties": false,
        }),
    )
}

/// The `unlock` action body: `{"unlock": <anything>}`.
pub fn unlock() -> Value {
    envelope("unlock", json!({}))
}

/// The server metadata bodies: `{"metadata": {...}}` (create, update
/// all) or, `single`, `{"meta": {key: value}}` with exactly one item.
pub fn metadata_body(key: &str, single: bool) -> Value {
    let mut items = metadata();
    if single {
        items["minProperties"] = json!(1);
        items["maxProperties"] = json!(1);
    }
    envelope(key, items)
}

/// `PUT /servers/{id}/tags`: `{"tags": [tag, ...]}`, at most 50.
pub fn tags_body() -> Value {
    envelope("tags", json!({"type": "array", "items": tag(), "maxItems": 50}))
}

/// `pause`, `unpause`, `suspend`, `resume`: `{"<name>": <anything>}`.
pub fn any_action(name: &str) -> Value {
    envelope(name, json!({}))
}

/// `os-getConsoleOutput`: `{"os-getConsoleOutput": {"length": n}}`, `n`
/// an integer ≥ -1, a string of digits (any sign) or null.
pub fn console_output() -> Value {
    envelope(
        "os-getConsoleOutput",
        json!({
            "type": "object",
            "properties": {
                "length": {"type": ["integer", "string", "null"], "pattern": "^-?[0-9]+$", "minimum": -1},
            },
            "additionalProperties": false,
        }),
    )
}

/// `os-resetState`: `{"os-resetState": {"state": "active" | "error"}}`.
pub fn reset_state() -> Value {
    envelope(
        "os-resetState",
        json!({
            "type": "object",
            "properties": {"state": {"type": "string", "enum": ["active", "error"]}},
            "required": ["state"],
            "additionalProperties": false,
        }),
    )
}

/// The `rebuild` action body at `version` (Nova's `rebuild*` schemas):
/// `imageRef` required; `name`, `adminPass`, `metadata`,
/// `preserve_ephemeral`, `OS-DCF:diskConfig`, access addresses, and
/// `personality` before 2.57; 2.19 `description`; 2.54 `key_name` (null
/// removes it); 2.57 `user_data` (base64, null removes it); 2.63
/// `trusted_image_certificates`; 2.90 `hostname` (2.94: FQDNs).
pub fn rebuild(version: ComputeVersion) -> Value {
    let mut rebuild = object(json!({
        "name": name(),
        "imageRef": uuid(),
        "adminPass": {"type": "string"},
        "metadata": metadata(),
        "preserve_ephemeral": boolean(),
        "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
        "accessIPv4": {"type": "string", "pattern": IPV4},
        "accessIPv6": {"type": "string", "pattern": IPV6},
    }));
    if !version.at_least(57) {
        rebuild.insert(
            "personality".into(),
            json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "contents": {"type": "string"}},
                    "additionalProperties": false,
                },
            }),
        );
    } else {
        rebuild.insert("user_data".into(), json!({"type": ["string", "null"], "maxLength": 65535}));
    }
    if version.at_least(19) {
        rebuild.insert("description".into(), description());
    }
    if version.at_least(54) {
        rebuild.insert("key_name".into(), json!({"oneOf": [name(), {"type": "null"}]}));
    }
    if version.at_least(63) {
        rebuild.insert("trusted_image_certificates".into(), trusted_image_certificates());
    }
    if version.at_least(90) {
        rebuild.insert("hostname".into(), server_hostname(version));
    }
    envelope(
        "rebuild",
        json!({"type": "object", "properties": rebuild, "required": ["imageRef"], "additionalProperties": false}),
    )
}

/// The `rescue` action body: `{"rescue": null | {"adminPass", "rescue_image_ref"}}`.
pub fn rescue() -> Value {
    envelope(
        "rescue",
        json!({
            "type": ["object", "null"],
            "properties": {"adminPass": {"type": "string"}, "rescue_image_ref": uuid()},
            "additionalProperties": false,
        }),
    )
}

/// `addSecurityGroup` / `removeSecurityGroup`: `{name: {"name": "..."}}`.
pub fn security_group_action(action: &str) -> Value {
    envelope(
        action,
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 255}},
            "required": ["name"],
            "additionalProperties": false,
        }),
    )
}

/// `createImage`: `{"createImage": {"name", "metadata"?}}`.
pub fn create_image() -> Value {
    envelope(
        "createImage",
        json!({
            "type": "object",
            "properties": {"name": name(), "metadata": metadata()},
            "required": ["name"],
            "additionalProperties": false,
        }),
    )
}

/// `createBackup`: `{"createBackup": {"name", "backup_type", "rotation",
/// "metadata"?}}`, `rotation` Nova's `non_negative_integer`.
pub fn create_backup() -> Value {
    envelope(
        "createBackup",
        json!({
            "type": "object",
            "properties": {
                "name": name(),
                "backup_type": {"type": "string"},
                "rotation": {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 0, "minLength": 1},
                "metadata": metadata(),
            },
            "required": ["name", "backup_type", "rotation"],
            "additionalProperties": false,
        }),
    )
}

/// `trusted_image_certificates` (2.63, boot and rebuild): null or 1–50
/// distinct non-empty certificate ids.
fn trusted_image_certificates() -> Value {
    json!({
        "type": ["array", "null"],
        "minItems": 1,
        "maxItems": 50,
        "uniqueItems": true,
        "items": {"type": "string", "minLength": 1},
    })
}
