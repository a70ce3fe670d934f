//! Reservable hosts: enrolment ([`HostEnrolment`], [`plan_enrol_host`]),
//! updates and deletes, resource properties' privacy, the reservable flag
//! healing turns off, and [`host_allows`] (the scheduler's rule without
//! pool lending).

use berth_compute_model::lease::{ReservableHost, ResourceProperty};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::Result;

/// Host fields to enrol, read from the compute node by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct HostEnrolment {
    /// Compute service host.
    pub service_name: String,
    /// Node name.
    pub hypervisor_hostname: String,
    /// vCPUs.
    pub vcpus: i64,
    /// RAM.
    pub memory_mb: i64,
    /// Disk.
    pub local_gb: i64,
    /// Zone ("" for none).
    pub availability_zone: String,
    /// Extra capabilities.
    pub extra: std::collections::BTreeMap<String, String>,
    /// Trust id.
    pub trust_id: String,
}

/// Enrol a host (409 when it already is).
pub fn plan_enrol_host(world: &World, host: HostEnrolment, now: Timestamp) -> Result<(WorldChangeSet, ReservableHost)> {
    let tables = &world.compute.leases;
    if tables.host_by_service.contains_key(&host.service_name) {
        return Err(ComputeError::Conflict(format!("Host '{}' is already enrolled", host.hypervisor_hostname)));
    }
    for key in host.extra.keys() {
        if key.len() > 64 {
            return Err(ComputeError::Invalid("Extra capability key too long".into()));
        }
    }
    let row = ReservableHost {
        id: tables.max_host_id + 1,
        hypervisor_hostname: host.hypervisor_hostname,
        service_name: host.service_name,
        vcpus: host.vcpus,
        memory_mb: host.memory_mb,
        local_gb: host.local_gb,
        hypervisor_type: "QEMU".into(),
        hypervisor_version: 1,
        cpu_info: "{}".into(),
        availability_zone: host.availability_zone,
        trust_id: host.trust_id,
        reservable: true,
        extra: host.extra,
        power: Default::default(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(row.clone()));
    put_new_properties(world, row.extra.keys(), ids_from(&row), now, &mut set);
    Ok((set, row))
}

fn ids_from(host: &ReservableHost) -> Uuid {
    // Deterministic property ids: derived from the host's trust id and time
    // only to be unique enough; properties are keyed by name.
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&host.id.to_be_bytes());
    bytes[8..].copy_from_slice(&host.created_at.to_be_bytes());
    Uuid::from_bytes(bytes)
}

fn put_new_properties<'a>(
    world: &World,
    keys: impl Iterator<Item = &'a String>,
    seed: Uuid,
    now: Timestamp,
    set: &mut WorldChangeSet,
) {
    let props = &world.compute.leases.properties;
    for (n, key) in keys.enumerate() {
        let id = (berth_compute_model::lease::RESOURCE_PHYSICAL_HOST.to_string(), key.clone());
        if props.contains_key(&id) {
            continue;
        }
        let mut bytes = *seed.as_bytes();
        bytes[0] ^= n as u8;
        bytes[1] ^= (n >> 8) as u8;
        set.compute(C::PutResourceProperty(ResourceProperty {
            id: Uuid::from_bytes(bytes),
            resource_type: id.0,
            name: id.1,
            private: false,
            created_at: now,
            updated_at: None,
        }));
    }
}

/// Set extra capabilities of an enrolled host.
pub fn plan_update_host(
    world: &World,
    id: i64,
    extra: &std::collections::BTreeMap<String, String>,
    now: Timestamp,
) -> Result<(WorldChangeSet, ReservableHost)> {
    let mut host = world
        .compute
        .leases
        .hosts
        .get(&id)
        .cloned()
        .ok_or_else(|| ComputeError::NotFound(format!("Object with {{'host_id': '{id}'}} not found")))?;
    for (k, v) in extra {
        if k.len() > 64 {
            return Err(ComputeError::Invalid("Extra capability key too long".into()));
        }
        host.extra.insert(k.clone(), v.clone());
    }
    host.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(host.clone()));
    put_new_properties(world, extra.keys(), ids_from(&host), now, &mut set);
    Ok((set, host))
}

/// Remove an enrolled host: refused while a lease that has not ended
/// holds it (Blazar: "Can't delete host 1. The host is reserved.").
pub fn plan_delete_host(world: &World, id: i64) -> Result<WorldChangeSet> {
    let tables = &world.compute.leases;
    if !tables.hosts.contains_key(&id) {
        return Err(ComputeError::NotFound(format!("Object with {{'host_id': '{id}'}} not found")));
    }
    if tables.bookings.get(&id).is_some_and(|b| !b.is_empty()) {
        return Err(ComputeError::Conflict(format!("Can't delete host {id}. The host is reserved.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteReservableHost(id));
    Ok(set)
}

/// Set a resource property's `private` flag.
pub fn plan_set_property_private(
    world: &World,
    resource_type: &str,
    name: &str,
    private: bool,
    now: Timestamp,
) -> Result<(WorldChangeSet, ResourceProperty)> {
    let mut prop = world
        .compute
        .leases
        .properties
        .get(&(resource_type.to_string(), name.to_string()))
        .cloned()
        .ok_or_else(|| ComputeError::NotFound(format!("Object with {{'property_name': '{name}'}} not found")))?;
    prop.private = private;
    prop.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutResourceProperty(prop.clone()));
    Ok((set, prop))
}

/// Set a host reservable or not (healing marks a down host unreservable).
pub fn plan_set_host_reservable(world: &World, id: i64, reservable: bool, now: Timestamp) -> Option<WorldChangeSet> {
    let host = world.compute.leases.hosts.get(&id)?;
    if host.reservable == reservable {
        return None;
    }
    let mut host = host.clone();
    host.reservable = reservable;
    host.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(host));
    Some(set)
}

/// May `service_host` take a boot naming `reservation`, with no pool
/// lending? (See [`LeaseTables::host_allows`], which the scheduler and the
/// claim call with the lending lead and the time.)
///
/// [`LeaseTables::host_allows`]: berth_compute_model::lease::LeaseTables::host_allows
pub fn host_allows(world: &World, service_host: &str, reservation: Option<Uuid>) -> bool {
    world.compute.leases.host_allows(service_host, reservation, 0, None)
}
