//! Host aggregates, mirrored into placement aggregates: create, update,
//! metadata (a host is in one availability zone only), hosts added and
//! removed, delete.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{Change, ChangeSet};
use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{Aggregate, ComputeError, Timestamp, World, WorldChangeSet};

fn aggregate(world: &World, id: i64) -> Result<&Aggregate> {
    world
        .compute
        .aggregates
        .get(&id)
        .ok_or_else(|| ComputeError::NotFound(format!("Aggregate {id} could not be found.")))
}

fn check_az_name(world: &World, name: &str, az: Option<&str>, except: Option<i64>) -> Result<()> {
    let _ = az;
    if world.compute.aggregates.values().any(|a| a.name == name && Some(a.id) != except) {
        return Err(ComputeError::Conflict(format!("Aggregate {name} already exists.")));
    }
    Ok(())
}

/// Create a host aggregate (optionally with an availability zone).
pub fn plan_create_aggregate(
    world: &World,
    name: &str,
    availability_zone: Option<&str>,
    uuid: Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    check_az_name(world, name, availability_zone, None)?;
    let mut metadata = BTreeMap::new();
    if let Some(az) = availability_zone {
        metadata.insert("availability_zone".to_owned(), az.to_owned());
    }
    let aggregate = Aggregate {
        id: world.compute.max_aggregate_id + 1,
        uuid,
        name: name.to_owned(),
        metadata,
        hosts: BTreeSet::new(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// A host's availability zones if it joined (or left) an aggregate whose
/// zone is `new_zone`: a host can be in one zone only (409 as Nova).
fn check_host_zone(world: &World, host: &str, aggregate: &Aggregate, new_zone: Option<&str>) -> Result<()> {
    let Some(new_zone) = new_zone else { return Ok(()) };
    for other in world.compute.aggregates_of_host(host) {
        if other.id == aggregate.id {
            continue;
        }
        if let Some(zone) = other.availability_zone() {
            if zone != new_zone {
                return Err(ComputeError::Conflict(format!(
                    "Cannot add host {host} in aggregate {}: host exists in availability zone {zone}",
                    aggregate.id
                )));
            }
        }
    }
    Ok(())
}

/// Update name and/or availability zone of an aggregate.
pub fn plan_update_aggregate(
    world: &World,
    id: i64,
    name: Option<&str>,
    availability_zone: Option<&str>,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if let Some(name) = name {
        check_az_name(world, name, availability_zone, Some(id))?;
        aggregate.name = name.to_owned();
    }
    if let Some(az) = availability_zone {
        for host in &aggregate.hosts {
            check_host_zone(world, host, &aggregate, Some(az))?;
        }
        aggregate.metadata.insert("availability_zone".to_owned(), az.to_owned());
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// Set (value `Some`) or remove (`None`) aggregate metadata keys.
pub fn plan_set_aggregate_metadata(
    world: &World,
    id: i64,
    metadata: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if let Some(Some(az)) = metadata.get("availability_zone") {
        if az.is_empty() {
            return Err(ComputeError::Invalid(format!(
                "Cannot update metadata of aggregate {id}. Reason: Aggregate {} does not support empty named \
                 availability zone.",
                aggregate.name
            )));
        }
        for host in &aggregate.hosts {
            check_host_zone(world, host, &aggregate, Some(az))?;
        }
    }
    for (key, value) in metadata {
        match value {
            Some(value) => aggregate.metadata.insert(key.clone(), value.clone()),
            None => aggregate.metadata.remove(key),
        };
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    Ok((set, aggregate))
}

/// Change the placement aggregates of every compute node of `host`: add
/// or remove `aggregate` (what Nova's report client does on
/// `aggregate_add_host`/`_remove_host`).
fn mirror_host_aggregate(
    world: &World,
    host: &str,
    aggregate: Uuid,
    add: bool,
    now: Timestamp,
    set: &mut WorldChangeSet,
) {
    let Some(nodes) = world.compute.nodes_by_host.get(host) else { return };
    let mut placement = ChangeSet::new();
    for node in nodes {
        let Some(provider) = world.placement.provider(node) else { continue };
        let mut aggregates = provider.aggregates.clone();
        let changed = if add { aggregates.insert(aggregate) } else { aggregates.remove(&aggregate) };
        if !changed {
            continue;
        }
        let mut row = provider.row.clone();
        row.generation += 1;
        row.updated_at = now;
        placement.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
        placement.push(Change::SetProviderAggregates { provider: *node, aggregates });
    }
    set.placement(placement);
}

/// Add a host to an aggregate (and its compute nodes to the placement
/// aggregate).
pub fn plan_add_aggregate_host(
    world: &World,
    id: i64,
    host: &str,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if !world.compute.host_mappings.contains_key(host) {
        return Err(ComputeError::NotFound(format!("Compute host {host} could not be found.")));
    }
    if aggregate.hosts.contains(host) {
        return Err(ComputeError::Conflict(format!("Aggregate {id} already has host {host}.")));
    }
    check_host_zone(world, host, &aggregate, aggregate.availability_zone())?;
    aggregate.hosts.insert(host.to_owned());
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    mirror_host_aggregate(world, host, aggregate.uuid, true, now, &mut set);
    Ok((set, aggregate))
}

/// Remove a host from an aggregate (and from the placement aggregate).
pub fn plan_remove_aggregate_host(
    world: &World,
    id: i64,
    host: &str,
    now: Timestamp,
) -> Result<(WorldChangeSet, Aggregate)> {
    let mut aggregate = aggregate(world, id)?.clone();
    if !aggregate.hosts.remove(host) {
        return Err(ComputeError::NotFound(format!("Cannot remove host {host} in aggregate {id}")));
    }
    aggregate.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAggregate(aggregate.clone()));
    mirror_host_aggregate(world, host, aggregate.uuid, false, now, &mut set);
    Ok((set, aggregate))
}

/// Delete an empty aggregate (409 while it has hosts, as Nova's
/// `InvalidAggregateActionDelete`).
pub fn plan_delete_aggregate(world: &World, id: i64) -> Result<WorldChangeSet> {
    let aggregate = aggregate(world, id)?;
    if !aggregate.hosts.is_empty() {
        return Err(ComputeError::Invalid(format!(
            "Cannot delete aggregate {id}. Reason: Host aggregate is not empty."
        )));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteAggregate(id));
    Ok(set)
}
