//! Flavors: create (names and ids unique), edit, delete.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{ComputeError, Flavor, Timestamp, World, WorldChangeSet};

/// What a flavor create asks for (`id` None: generate a uuid).
#[derive(Debug, Clone)]
pub struct NewFlavor {
    /// Requested flavorid (None: a new uuid string).
    pub flavorid: Option<String>,
    /// Name.
    pub name: String,
    /// RAM MiB.
    pub memory_mb: i64,
    /// vCPUs.
    pub vcpus: i64,
    /// Root disk GiB.
    pub root_gb: i64,
    /// Ephemeral GiB.
    pub ephemeral_gb: i64,
    /// Swap MiB.
    pub swap: i64,
    /// rxtx factor.
    pub rxtx_factor: f64,
    /// Public?
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

/// Create a flavor; names and ids are unique (409 as Nova).
pub fn plan_create_flavor(
    world: &World,
    new: NewFlavor,
    generated_id: Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, Flavor)> {
    let flavorid = new.flavorid.unwrap_or_else(|| generated_id.to_string());
    if world.compute.flavors.values().any(|f| f.name == new.name) {
        return Err(ComputeError::Conflict(format!("Flavor with name {} already exists.", new.name)));
    }
    if world.compute.flavors.contains_key(&flavorid) {
        return Err(ComputeError::Conflict(format!("Flavor with ID {flavorid} already exists.")));
    }
    let flavor = Flavor {
        id: world.compute.max_flavor_id + 1,
        flavorid,
        name: new.name,
        memory_mb: new.memory_mb,
        vcpus: new.vcpus,
        root_gb: new.root_gb,
        ephemeral_gb: new.ephemeral_gb,
        swap: new.swap,
        rxtx_factor: new.rxtx_factor,
        vcpu_weight: None,
        disabled: false,
        is_public: new.is_public,
        description: new.description,
        extra_specs: BTreeMap::new(),
        projects: BTreeSet::new(),
        created_at: now,
        updated_at: None,
    };
    let mut set = WorldChangeSet::new();
    set.compute(C::PutFlavor(flavor.clone()));
    Ok((set, flavor))
}

fn flavor<'a>(world: &'a World, flavorid: &str) -> Result<&'a Flavor> {
    world
        .compute
        .flavors
        .get(flavorid)
        .ok_or_else(|| ComputeError::NotFound(format!("Flavor {flavorid} could not be found.")))
}

/// Change a flavor with `edit` (description, extra specs, access).
pub fn plan_edit_flavor(
    world: &World,
    flavorid: &str,
    now: Timestamp,
    edit: impl FnOnce(&mut Flavor) -> Result<()>,
) -> Result<(WorldChangeSet, Flavor)> {
    let mut flavor = flavor(world, flavorid)?.clone();
    edit(&mut flavor)?;
    flavor.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutFlavor(flavor.clone()));
    Ok((set, flavor))
}

/// Delete a flavor (existing servers keep their copy).
pub fn plan_delete_flavor(world: &World, flavorid: &str) -> Result<WorldChangeSet> {
    flavor(world, flavorid)?;
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteFlavor(flavorid.to_owned()));
    Ok(set)
}
