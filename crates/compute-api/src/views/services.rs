//! `/os-services` bodies (Nova's `services.py`).

use serde_json::{json, Map, Value};

use berth_compute_model::cell::Service;

use super::{strtime_or_null, wrap};
use crate::ComputeVersion;

/// One service of `GET /os-services` (and the 2.53+ `PUT` response):
/// `binary`, `host`, `id` (the integer id before 2.53, the uuid from 2.53),
/// `zone` (the caller's: the host's availability zone, `internal` for
/// non-compute services), `status` (`enabled`/`disabled`), `state`
/// (`up`/`down`, the caller's liveness verdict), `updated_at`,
/// `disabled_reason`, and from 2.11 `forced_down`.
/// `updated_at` is [`updated_at`].
pub fn item(version: ComputeVersion, service: &Service, zone: &str, up: bool) -> Value {
    let mut body = Map::new();
    body.insert("binary".into(), json!(service.binary));
    body.insert("host".into(), json!(service.host));
    let id = if version.at_least(53) { json!(service.uuid.to_string()) } else { json!(service.id) };
    body.insert("id".into(), id);
    body.insert("zone".into(), json!(zone));
    body.insert("status".into(), json!(if service.disabled { "disabled" } else { "enabled" }));
    body.insert("state".into(), json!(if up { "up" } else { "down" }));
    body.insert("updated_at".into(), strtime_or_null(updated_at(service)));
    body.insert("disabled_reason".into(), json!(service.disabled_reason));
    if version.at_least(11) {
        body.insert("forced_down".into(), json!(service.forced_down));
    }
    Value::Object(body)
}

/// When a service was last heard from: Nova shows the row's `updated_at`,
/// which every heartbeat bumps; berth records heartbeats in
/// `last_seen_up`, so this is the later of the two.
pub fn updated_at(service: &Service) -> Option<berth_compute_model::Timestamp> {
    service.last_seen_up.max(service.updated_at)
}

/// A compute service in a cell that did not answer (2.69+): `binary`,
/// `host`, `status: UNKNOWN`, from the host mapping.
pub fn down_cell_item(host: &str) -> Value {
    json!({"binary": "nova-compute", "host": host, "status": "UNKNOWN"})
}

/// The `GET /os-services` body.
pub fn index(items: Vec<Value>) -> Value {
    wrap("services", Value::Array(items))
}

/// The `PUT /os-services/{service_id}` body (2.53+): the updated service.
pub fn update(version: ComputeVersion, service: &Service, zone: &str, up: bool) -> Value {
    wrap("service", item(version, service, zone, up))
}

/// The body of the legacy `PUT /os-services/enable`, `/disable` and
/// `/disable-log-reason` (before 2.53): `host`, `binary`, `status`, and
/// `disabled_reason` when one was given.
pub fn legacy_status(host: &str, binary: &str, disabled: bool, disabled_reason: Option<&str>) -> Value {
    let mut body = Map::new();
    body.insert("host".into(), json!(host));
    body.insert("binary".into(), json!(binary));
    body.insert("status".into(), json!(if disabled { "disabled" } else { "enabled" }));
    if let Some(reason) = disabled_reason.filter(|r| !r.is_empty()) {
        body.insert("disabled_reason".into(), json!(reason));
    }
    wrap("service", Value::Object(body))
}

/// The body of the legacy `PUT /os-services/force-down` (2.11 to 2.52).
pub fn legacy_forced_down(host: &str, binary: &str, forced_down: bool) -> Value {
    json!({"service": {"host": host, "binary": binary, "forced_down": forced_down}})
}
