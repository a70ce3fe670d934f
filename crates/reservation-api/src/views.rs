//! Response bodies: leases with their reservations and events, enrolled
//! hosts (with private extra capabilities for admins only) and resource
//! properties, keys in Blazar's order.

use berth_compute_model::lease::{
    Lease, LeaseEvent, ReservableHost, Reservation, ReservationKind, ResourceProperty, RESOURCE_PHYSICAL_HOST,
};
use berth_compute_model::World;
use berth_reservation_model as plan;
use serde_json::{json, Value};

use crate::dates::{iso, opt_stamp, stamp};

pub(crate) fn reservation_view(lease: &Lease, r: &Reservation) -> Value {
    let mut out = json!({
        "id": r.id.to_string(), "lease_id": lease.id.to_string(), "resource_id": r.resource_id.to_string(),
        "resource_type": r.resource_type(), "status": r.status.as_str(),
        "missing_resources": r.missing_resources, "resources_changed": r.resources_changed,
        "created_at": stamp(r.created_at), "updated_at": opt_stamp(r.updated_at),
    });
    let map = out.as_object_mut().expect("object");
    if matches!(r.kind, ReservationKind::Host { .. }) {
        // berth's extension (end policies): the held hosts an ended
        // `recycle` lease keeps out of the pool, and until when.
        map.insert("recycling_hosts".into(), json!(r.recycling.iter().map(i64::to_string).collect::<Vec<_>>()));
        map.insert("recycle_until".into(), json!(r.recycle_until.map(iso)));
    }
    match &r.kind {
        ReservationKind::Host { min, max, hypervisor_properties, resource_properties, before_end } => {
            map.insert("hypervisor_properties".into(), json!(hypervisor_properties));
            map.insert("resource_properties".into(), json!(resource_properties));
            map.insert("before_end".into(), json!(before_end));
            map.insert("min".into(), json!(min));
            map.insert("max".into(), json!(max));
        }
        ReservationKind::Instance {
            vcpus,
            memory_mb,
            disk_gb,
            amount,
            affinity,
            resource_properties,
            source_flavor,
        } => {
            map.insert("vcpus".into(), json!(vcpus));
            map.insert("memory_mb".into(), json!(memory_mb));
            map.insert("disk_gb".into(), json!(disk_gb));
            map.insert("amount".into(), json!(amount));
            map.insert("affinity".into(), json!(affinity));
            map.insert("resource_properties".into(), json!(resource_properties));
            map.insert("flavor_id".into(), json!(source_flavor.clone().unwrap_or_else(|| r.id.to_string())));
            // Blazar makes a Nova aggregate per instance reservation and a
            // server group when `affinity` is set; berth makes neither (it
            // places slots itself), so both are null.
            map.insert("aggregate_id".into(), Value::Null);
            map.insert("server_group_id".into(), Value::Null);
        }
    }
    out
}

pub(crate) fn event_view(lease: &Lease, e: &LeaseEvent) -> Value {
    json!({
        "id": e.id.to_string(), "lease_id": lease.id.to_string(), "event_type": e.event_type.as_str(),
        "time": iso(e.time), "status": e.status.as_str(),
        "created_at": stamp(e.created_at), "updated_at": opt_stamp(e.updated_at),
    })
}

/// A lease as Blazar shows it.
pub fn lease_view(lease: &Lease) -> Value {
    json!({
        "id": lease.id.to_string(), "name": lease.name, "user_id": lease.user_id,
        "project_id": lease.project_id, "start_date": iso(lease.start), "end_date": iso(lease.end),
        "trust_id": lease.trust_id, "status": lease.status.as_str(), "degraded": lease.degraded,
        "on_end": lease.on_end.as_str(), "grace": lease.grace,
        "created_at": stamp(lease.created_at), "updated_at": opt_stamp(lease.updated_at),
        "reservations": lease.reservations.iter().map(|r| reservation_view(lease, r)).collect::<Vec<_>>(),
        "events": lease.events.iter().map(|e| event_view(lease, e)).collect::<Vec<_>>(),
    })
}

pub(crate) fn host_view(world: &World, host: &ReservableHost, admin: bool, now: i64, lend_lead: Option<i64>) -> Value {
    // Capacity as admission reads it: the node's inventory now.
    let capacity = plan::capacity::host_capacity(world, host);
    let mut out = json!({
        "id": host.id.to_string(), "vcpus": capacity.vcpus, "cpu_info": host.cpu_info,
        "hypervisor_type": host.hypervisor_type, "hypervisor_version": host.hypervisor_version,
        "hypervisor_hostname": host.hypervisor_hostname, "service_name": host.service_name,
        "memory_mb": capacity.memory_mb, "local_gb": capacity.local_gb, "status": Value::Null,
        "availability_zone": host.availability_zone, "trust_id": host.trust_id, "reservable": host.reservable,
        "created_at": stamp(host.created_at), "updated_at": opt_stamp(host.updated_at),
    });
    let map = out.as_object_mut().expect("object");
    let props = &world.compute.leases.properties;
    for (k, v) in &host.extra {
        let private = props.get(&(RESOURCE_PHYSICAL_HOST.to_string(), k.clone())).is_some_and(|p| p.private);
        if admin || !private {
            map.insert(k.clone(), json!(v));
        }
    }
    // berth's extension, after the extra capabilities so none hides it:
    // `free`, `reserved` (a lease's window holds it) or `recycling` (an
    // ended `recycle` lease's servers still run on it).
    map.insert("pool_state".into(), json!(plan::end_policy::pool_state(world, host.id, now, lend_lead).as_str()));
    // Power management (issue 22): `on`, `powering-off`, `off`,
    // `powering-on` or `failed`.
    map.insert("power_state".into(), json!(host.power.state.as_str()));
    out
}

pub(crate) fn property_view(p: &ResourceProperty) -> Value {
    json!({
        "id": p.id.to_string(), "resource_type": p.resource_type, "property_name": p.name,
        "private": p.private, "created_at": iso(p.created_at),
        "updated_at": p.updated_at.map(iso),
    })
}
