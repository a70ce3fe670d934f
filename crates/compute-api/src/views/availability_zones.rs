//! `/os-availability-zone` bodies (Nova's `availability_zone.py`).

use serde_json::{json, Map, Value};

use berth_compute_model::cell::Service;

use super::strtime_or_null;

/// One zone of `GET /os-availability-zone/detail`.
#[derive(Debug, Clone, Copy)]
pub struct ZoneDetail<'a> {
    /// Zone name.
    pub name: &'a str,
    /// Whether the zone has an enabled service (Nova's "available" zones).
    pub available: bool,
    /// The zone's enabled services with the caller's liveness verdict, in
    /// the order to show; ignored for unavailable zones (Nova shows
    /// `hosts: null` for them).
    pub services: &'a [(&'a Service, bool)],
}

/// The `GET /os-availability-zone` body: each `(zone, available)` with
/// `hosts: null`. Nova hides the internal services' zone here; the caller
/// leaves it out.
pub fn index(zones: &[(&str, bool)]) -> Value {
    let entries: Vec<Value> = zones
        .iter()
        .map(|(name, available)| json!({"zoneName": name, "zoneState": {"available": available}, "hosts": null}))
        .collect();
    json!({"availabilityZoneInfo": entries})
}

/// The `GET /os-availability-zone/detail` body (admins): for available
/// zones, `hosts` maps each host to its services' `{available, active,
/// updated_at}` by binary (`available` = up, `active` = not disabled).
pub fn detail(zones: &[ZoneDetail<'_>]) -> Value {
    let entries: Vec<Value> = zones
        .iter()
        .map(|zone| {
            let hosts = if zone.available {
                let mut hosts: Map<String, Value> = Map::new();
                for (service, up) in zone.services {
                    let host = hosts.entry(service.host.clone()).or_insert_with(|| json!({}));
                    if let Value::Object(binaries) = host {
                        binaries.insert(
                            service.binary.clone(),
                            json!({
                                "available": up,
                                "active": !service.disabled,
                                "updated_at": strtime_or_null(super::services::updated_at(service)),
                            }),
                        );
                    }
                }
                Value::Object(hosts)
            } else {
                Value::Null
            };
            json!({"zoneName": zone.name, "zoneState": {"available": zone.available}, "hosts": hosts})
        })
        .collect();
    json!({"availabilityZoneInfo": entries})
}
