//! Hand-written JSON for the reservation rows (`compute_rows` kinds
//! `rsv_host`, `lease`, `rsv_property`), like [`crate::json`] for the
//! other compute rows.

use berth_compute_model::lease::{
    EndPolicy, EventStatus, EventType, HostAllocation, HostPower, Lease, LeaseEvent, LeaseStatus, PowerState,
    ReservableHost, Reservation, ReservationKind, ReservationStatus, ResourceProperty,
};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::json_fields::{b, bad, get_str_map, i, opt_i, opt_s, s, str_map, uuid, Result};

/// An enrolled host.
pub fn host(h: &ReservableHost) -> Value {
    json!({
        "id": h.id, "hypervisor_hostname": h.hypervisor_hostname, "service_name": h.service_name,
        "vcpus": h.vcpus, "memory_mb": h.memory_mb, "local_gb": h.local_gb,
        "hypervisor_type": h.hypervisor_type, "hypervisor_version": h.hypervisor_version,
        "cpu_info": h.cpu_info, "availability_zone": h.availability_zone, "trust_id": h.trust_id,
        "reservable": h.reservable, "extra": str_map(&h.extra),
        "power": {
            "state": h.power.state.as_str(), "since": h.power.since, "issued_at": h.power.issued_at,
            "deadline": h.power.deadline,
        },
        "created_at": h.created_at, "updated_at": h.updated_at,
    })
}

/// Decode [`host`].
pub fn to_host(v: &Value) -> Result<ReservableHost> {
    Ok(ReservableHost {
        id: i(v, "id")?,
        hypervisor_hostname: s(v, "hypervisor_hostname")?,
        service_name: s(v, "service_name")?,
        vcpus: i(v, "vcpus")?,
        memory_mb: i(v, "memory_mb")?,
        local_gb: i(v, "local_gb")?,
        hypervisor_type: s(v, "hypervisor_type")?,
        hypervisor_version: i(v, "hypervisor_version")?,
        cpu_info: s(v, "cpu_info")?,
        availability_zone: s(v, "availability_zone")?,
        trust_id: s(v, "trust_id")?,
        reservable: b(v, "reservable")?,
        extra: get_str_map(v, "extra")?,
        power: to_power(v)?,
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// A host's power; rows written before power management load as `on`.
fn to_power(v: &Value) -> Result<HostPower> {
    let Some(p) = v.get("power").filter(|p| !p.is_null()) else { return Ok(HostPower::default()) };
    let state = s(p, "state")?;
    Ok(HostPower {
        state: PowerState::parse(&state).ok_or_else(|| bad("power.state"))?,
        since: i(p, "since")?,
        issued_at: opt_i(p, "issued_at")?,
        deadline: opt_i(p, "deadline")?,
    })
}

fn kind(k: &ReservationKind) -> Value {
    match k {
        ReservationKind::Host { min, max, hypervisor_properties, resource_properties, before_end } => json!({
            "type": "host", "min": min, "max": max, "hypervisor_properties": hypervisor_properties,
            "resource_properties": resource_properties, "before_end": before_end,
        }),
        ReservationKind::Instance {
            vcpus,
            memory_mb,
            disk_gb,
            amount,
            affinity,
            resource_properties,
            source_flavor,
        } => json!({
            "type": "instance", "vcpus": vcpus, "memory_mb": memory_mb, "disk_gb": disk_gb, "amount": amount,
            "affinity": affinity, "resource_properties": resource_properties, "source_flavor": source_flavor,
        }),
    }
}

fn to_kind(v: &Value) -> Result<ReservationKind> {
    Ok(match s(v, "type")?.as_str() {
        "host" => ReservationKind::Host {
            min: i(v, "min")?,
            max: i(v, "max")?,
            hypervisor_properties: s(v, "hypervisor_properties")?,
            resource_properties: s(v, "resource_properties")?,
            before_end: s(v, "before_end")?,
        },
        "instance" => ReservationKind::Instance {
            vcpus: i(v, "vcpus")?,
            memory_mb: i(v, "memory_mb")?,
            disk_gb: i(v, "disk_gb")?,
            amount: i(v, "amount")?,
            affinity: v.get("affinity").and_then(Value::as_bool),
            resource_properties: s(v, "resource_properties")?,
            source_flavor: opt_s(v, "source_flavor")?,
        },
        _ => return Err(bad("reservation type")),
    })
}

fn reservation(r: &Reservation) -> Value {
    json!({
        "id": r.id.to_string(), "resource_id": r.resource_id.to_string(), "status": r.status.as_str(),
        "missing_resources": r.missing_resources, "resources_changed": r.resources_changed,
        "kind": kind(&r.kind),
        "allocations": r.allocations.iter().map(|a| json!([a.host_id, a.slots])).collect::<Vec<_>>(),
        "recycling": r.recycling, "recycle_until": r.recycle_until,
        "created_at": r.created_at, "updated_at": r.updated_at,
    })
}

fn to_reservation(v: &Value) -> Result<Reservation> {
    let allocations = v
        .get("allocations")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("allocations"))?
        .iter()
        .map(|a| match (a.get(0).and_then(Value::as_i64), a.get(1).and_then(Value::as_i64)) {
            (Some(host_id), Some(slots)) => Ok(HostAllocation { host_id, slots }),
            _ => Err(bad("allocation")),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Reservation {
        id: uuid(v, "id")?,
        resource_id: uuid(v, "resource_id")?,
        status: ReservationStatus::parse(&s(v, "status")?).ok_or_else(|| bad("reservation status"))?,
        missing_resources: b(v, "missing_resources")?,
        resources_changed: b(v, "resources_changed")?,
        kind: to_kind(v.get("kind").ok_or_else(|| bad("kind"))?)?,
        allocations,
        // Rows written before end policies have neither.
        recycling: match v.get("recycling") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                list.iter().map(|h| h.as_i64().ok_or_else(|| bad("recycling"))).collect::<Result<Vec<_>>>()?
            }
            Some(_) => return Err(bad("recycling")),
        },
        recycle_until: opt_i(v, "recycle_until")?,
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

fn event(e: &LeaseEvent) -> Value {
    json!({
        "id": e.id.to_string(), "event_type": e.event_type.as_str(), "time": e.time,
        "status": e.status.as_str(), "created_at": e.created_at, "updated_at": e.updated_at,
    })
}

fn to_event(v: &Value) -> Result<LeaseEvent> {
    Ok(LeaseEvent {
        id: uuid(v, "id")?,
        event_type: EventType::parse(&s(v, "event_type")?).ok_or_else(|| bad("event type"))?,
        time: i(v, "time")?,
        status: EventStatus::parse(&s(v, "status")?).ok_or_else(|| bad("event status"))?,
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// A lease with its reservations and events.
pub fn lease(l: &Lease) -> Value {
    json!({
        "id": l.id.to_string(), "name": l.name, "user_id": l.user_id, "project_id": l.project_id,
        "start": l.start, "end": l.end, "trust_id": l.trust_id, "status": l.status.as_str(),
        "degraded": l.degraded, "on_end": l.on_end.as_str(), "grace": l.grace,
        "reservations": l.reservations.iter().map(reservation).collect::<Vec<_>>(),
        "events": l.events.iter().map(event).collect::<Vec<_>>(),
        "created_at": l.created_at, "updated_at": l.updated_at,
    })
}

fn list<T>(v: &Value, key: &str, f: fn(&Value) -> Result<T>) -> Result<Vec<T>> {
    v.get(key).and_then(Value::as_array).ok_or_else(|| bad(key))?.iter().map(f).collect()
}

/// Decode [`lease`].
pub fn to_lease(v: &Value) -> Result<Lease> {
    Ok(Lease {
        id: uuid(v, "id")?,
        name: s(v, "name")?,
        user_id: s(v, "user_id")?,
        project_id: s(v, "project_id")?,
        start: i(v, "start")?,
        end: i(v, "end")?,
        trust_id: s(v, "trust_id")?,
        status: LeaseStatus::parse(&s(v, "status")?).ok_or_else(|| bad("lease status"))?,
        degraded: b(v, "degraded")?,
        // Rows written before end policies have none: `delete`.
        on_end: match opt_s(v, "on_end")? {
            None => EndPolicy::Delete,
            Some(text) => EndPolicy::parse(&text).ok_or_else(|| bad("on_end"))?,
        },
        grace: opt_i(v, "grace")?,
        reservations: list(v, "reservations", to_reservation)?,
        events: list(v, "events", to_event)?,
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// A resource property.
pub fn property(p: &ResourceProperty) -> Value {
    json!({
        "id": p.id.to_string(), "resource_type": p.resource_type, "name": p.name, "private": p.private,
        "created_at": p.created_at, "updated_at": p.updated_at,
    })
}

/// Decode [`property`].
pub fn to_property(v: &Value) -> Result<ResourceProperty> {
    Ok(ResourceProperty {
        id: uuid(v, "id")?,
        resource_type: s(v, "resource_type")?,
        name: s(v, "name")?,
        private: b(v, "private")?,
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// Parse a lease key.
pub fn lease_key(key: &str) -> Result<Uuid> {
    Uuid::parse_str(key).map_err(|_| bad("lease key"))
}
