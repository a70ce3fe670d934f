//! Cell mappings and host discovery: [`plan_put_cell`] (names unique),
//! [`plan_map_host`] (a host and its compute nodes into one cell).

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{CellMapping, ComputeError, ComputeNodeRef, HostMapping, World, WorldChangeSet};

/// Create (or update) a cell mapping; names are unique.
pub fn plan_put_cell(world: &World, cell: CellMapping) -> Result<WorldChangeSet> {
    if world.compute.cells.values().any(|c| c.name == cell.name && c.uuid != cell.uuid) {
        return Err(ComputeError::Conflict(format!("Cell {} already exists.", cell.name)));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutCell(cell));
    Ok(set)
}

/// Map a host and its compute nodes to a cell (host discovery). A host
/// already mapped to another cell is refused.
pub fn plan_map_host(world: &World, host: &str, cell: Uuid, nodes: &[(Uuid, String)]) -> Result<WorldChangeSet> {
    if !world.compute.cells.contains_key(&cell) {
        return Err(ComputeError::NotFound(format!("Cell {cell} could not be found.")));
    }
    let mut set = WorldChangeSet::new();
    match world.compute.host_mappings.get(host) {
        Some(existing) if existing.cell != cell => {
            return Err(ComputeError::Conflict(format!("Host {host} is already mapped to cell {}.", existing.cell)))
        }
        Some(_) => {}
        None => set.compute(C::PutHostMapping(HostMapping { host: host.to_owned(), cell, owner: None })),
    }
    for (uuid, node) in nodes {
        let wanted = ComputeNodeRef { uuid: *uuid, host: host.to_owned(), node: node.clone(), cell };
        if world.compute.compute_nodes.get(uuid) != Some(&wanted) {
            set.compute(C::PutComputeNode(wanted));
        }
    }
    Ok(set)
}
