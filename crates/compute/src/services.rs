//! Compute services and hypervisors across cells: listing them (with the
//! per-cell deadline), and the operator's flags. Disabling a service also
//! puts `COMPUTE_STATUS_DISABLED` on its compute nodes' providers in the
//! same control write that bumps their generations, as nova-compute does,
//! so the scheduler excludes the host from the very next request.

use std::collections::HashMap;

use berth_compute_model::cell::{ComputeNode, Service};
use berth_compute_model::{ComputeError, World, WorldChangeSet, CELL0_UUID, COMPUTE_STATUS_DISABLED};
use berth_model::{Change, ChangeSet};
use berth_store::{CellOp, CellOutcome};
use uuid::Uuid;

use crate::control::{read, write};
use crate::error::ServiceError;
use crate::Compute;

/// One service with where it lives.
#[derive(Debug, Clone)]
pub struct HostService {
    /// Its cell.
    pub cell: Uuid,
    /// The service row.
    pub service: Service,
    /// Its compute nodes.
    pub nodes: Vec<ComputeNode>,
    /// Instances per node host (not deleted).
    pub instances: i64,
}

/// Everything `os-services` and `os-hypervisors` show.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    /// Services (with nodes) of every cell that answered.
    pub services: Vec<HostService>,
    /// Cells that did not answer in time.
    pub down_cells: Vec<Uuid>,
}

/// Has the compute node `node` reported its inventory (its provider, or
/// a provider of its tree, holds some)? Nova creates a compute node
/// record and its resource provider in the same
/// `update_available_resource`, so a hypervisor is listed only once it
/// can be scheduled to: berth's agents register their nodes first and
/// report their provider trees after, and until then the node is not a
/// hypervisor (`os-hypervisors` leaves it out; its service is listed, as
/// Nova lists a service from its start).
pub fn node_reported(world: &World, node: &Uuid) -> bool {
    let has_inventory = |uuid: &Uuid| world.placement.provider(uuid).is_some_and(|p| !p.inventories.is_empty());
    world.placement.provider(node).is_some()
        && (has_inventory(node) || world.placement.descendants(node).iter().any(has_inventory))
}

impl Compute {
    /// The compute nodes among `nodes` that reported their inventory
    /// ([`node_reported`]).
    pub fn reported_nodes(&self, nodes: impl IntoIterator<Item = Uuid>) -> std::collections::HashSet<Uuid> {
        crate::control::read(&*self.control, |w| nodes.into_iter().filter(|n| node_reported(w, n)).collect())
    }

    /// Learn from their cells the health of hosts this process has no
    /// record of although they are mapped: hosts that registered with
    /// another process sharing the database. Without it, a scheduler here
    /// took such hosts for down until the next sweep merged their service
    /// rows, and boots it scheduled meanwhile ended in ERROR. Cheap when
    /// every mapped host is known (a count), and at most once a second
    /// otherwise.
    pub(crate) async fn learn_unknown_hosts(&self) {
        let mapped = || read(&*self.control, |w| w.compute.host_mappings.len());
        if self.health.known() >= mapped() {
            return;
        }
        // One reader at a time; the others wait for what it learns.
        let mut last = self.health_learned.lock().await;
        if self.health.known() >= mapped() || last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
            return;
        }
        *last = Some(std::time::Instant::now());
        let cells: std::collections::BTreeSet<Uuid> = read(&*self.control, |w| {
            w.compute.host_mappings.values().filter(|m| !self.health.is_known(&m.host)).map(|m| m.cell).collect()
        });
        for cell in cells {
            let Some(mapping) = self.cell(&cell) else { continue };
            let Ok(handle) = self.cells.get(&mapping) else { continue };
            if let Ok(services) = self.cells.read(&handle, |s| s.services()).await {
                self.health.merge_services(&services);
            }
        }
    }

    /// Services and compute nodes of every cell (cells that do not answer
    /// within the deadline are reported, not waited for).
    pub async fn overview(&self) -> Overview {
        let mut out = Overview::default();
        for mapping in self.cell_mappings() {
            if mapping.uuid == CELL0_UUID {
                continue;
            }
            let Ok(handle) = self.cells.get(&mapping) else {
                out.down_cells.push(mapping.uuid);
                continue;
            };
            let read = self
                .cells
                .read(&handle, |s| Ok((s.services()?, s.compute_nodes()?, s.instance_counts_by_host()?)))
                .await;
            let Ok((services, nodes, counts)) = read else {
                out.down_cells.push(mapping.uuid);
                continue;
            };
            self.health.merge_services(&services);
            let counts: HashMap<String, i64> = counts.into_iter().collect();
            let mut by_host: HashMap<String, Vec<ComputeNode>> = HashMap::new();
            for node in nodes {
                by_host.entry(node.host.clone()).or_default().push(node);
            }
            for service in services {
                let nodes = by_host.remove(&service.host).unwrap_or_default();
                let instances = counts.get(&service.host).copied().unwrap_or(0);
                out.services.push(HostService { cell: mapping.uuid, service, nodes, instances });
            }
        }
        out.services.sort_by_key(|s| (s.service.host.clone(), s.service.id));
        out
    }

    /// Find a service by id: a uuid (2.53+) or a cell-local integer id.
    pub async fn find_service(&self, id: &str) -> Result<HostService, ServiceError> {
        let overview = self.overview().await;
        let found = overview.services.into_iter().find(|s| match Uuid::parse_str(id) {
            Ok(uuid) => s.service.uuid == uuid,
            Err(_) => id.parse::<i64>().is_ok_and(|n| n == s.service.id),
        });
        found.ok_or_else(|| ServiceError::Refused(ComputeError::NotFound(format!("Service {id} could not be found."))))
    }

    /// Change a service's operator flags. Disabling (or enabling) also
    /// sets (or clears) `COMPUTE_STATUS_DISABLED` on its compute nodes.
    pub async fn set_service(
        &self,
        target: &HostService,
        disabled: Option<bool>,
        disabled_reason: Option<Option<String>>,
        forced_down: Option<bool>,
    ) -> Result<Service, ServiceError> {
        let cell =
            self.cell(&target.cell).ok_or_else(|| ServiceError::Internal(format!("cell {} vanished", target.cell)))?;
        let now = self.now();
        let op = CellOp::UpdateService {
            id: target.service.id,
            disabled,
            disabled_reason: disabled_reason.clone(),
            forced_down,
            updated_at: now,
        };
        let outcomes = self.cells.get(&cell)?.write(vec![op]).await?;
        if outcomes.first() == Some(&CellOutcome::Missing) {
            return Err(ServiceError::Refused(ComputeError::NotFound(format!(
                "Service {} could not be found.",
                target.service.uuid
            ))));
        }
        if let Some(disabled) = disabled {
            let nodes: Vec<Uuid> = target.nodes.iter().map(|n| n.uuid).collect();
            write(&*self.control, |w| {
                let mut placement = ChangeSet::new();
                for node in &nodes {
                    let Some(provider) = w.placement.provider(node) else { continue };
                    let mut traits = provider.traits.clone();
                    let changed = if disabled {
                        traits.insert(COMPUTE_STATUS_DISABLED.to_owned())
                    } else {
                        traits.remove(COMPUTE_STATUS_DISABLED)
                    };
                    if !changed {
                        continue;
                    }
                    let mut row = provider.row.clone();
                    row.generation += 1;
                    row.updated_at = now;
                    placement.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
                    placement.push(Change::SetProviderTraits { provider: *node, traits });
                }
                Ok((WorldChangeSet::from(placement), ()))
            })?;
        }
        let mut service = target.service.clone();
        if let Some(d) = disabled {
            service.disabled = d;
        }
        if let Some(r) = disabled_reason {
            service.disabled_reason = r;
        }
        if let Some(f) = forced_down {
            service.forced_down = f;
        }
        service.updated_at = Some(now);
        self.health.set_flags(&service.host, service.disabled, service.forced_down);
        Ok(service)
    }

    /// Disable `host`'s compute service after `failures` consecutive failed
    /// builds, as `set_service` does (service row, then
    /// `COMPUTE_STATUS_DISABLED` on its nodes in one control write). A
    /// failure here is logged: the build failure itself was handled.
    pub(crate) async fn auto_disable(&self, host: &str, failures: i64) {
        let Some(cell_id) = crate::control::read(&*self.control, |w| w.compute.cell_of_host(host)) else { return };
        let Some(mapping) = self.cell(&cell_id) else { return };
        let Ok(handle) = self.cells.get(&mapping) else { return };
        let found = self.cells.read(&handle, |s| Ok((s.services()?, s.compute_nodes()?))).await;
        let Ok((services, nodes)) = found else { return };
        let Some(service) = services.into_iter().find(|s| s.binary == "nova-compute" && s.host == host) else {
            return;
        };
        let nodes: Vec<ComputeNode> = nodes.into_iter().filter(|n| n.host == host).collect();
        let target = HostService { cell: cell_id, service, nodes, instances: 0 };
        let reason = format!("Auto-disabled due to {failures} build failures");
        match self.set_service(&target, Some(true), Some(Some(reason)), None).await {
            Ok(_) => {
                self.metrics.services_auto_disabled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(host, failures, "compute service disabled after consecutive failed builds");
            }
            Err(err) => tracing::warn!(host, error = %err, "auto-disabling a failing host failed"),
        }
    }

    /// Delete a compute service (refused while its host has instances).
    pub async fn delete_service(&self, target: &HostService) -> Result<(), ServiceError> {
        if target.instances > 0 {
            return Err(ServiceError::Refused(ComputeError::Conflict(format!(
                "Unable to delete compute service that is hosting instances. Migrate or delete the instances first and try again: {}",
                target.service.host
            ))));
        }
        let cell =
            self.cell(&target.cell).ok_or_else(|| ServiceError::Internal(format!("cell {} vanished", target.cell)))?;
        self.cells.get(&cell)?.write(vec![CellOp::DeleteService(target.service.id)]).await?;
        let host = target.service.host.clone();
        write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            if w.compute.host_mappings.contains_key(&host) {
                set.compute(berth_compute_model::ComputeChange::DeleteHostMapping(host.clone()));
            }
            for node in w.compute.nodes_by_host.get(&host).into_iter().flatten() {
                set.compute(berth_compute_model::ComputeChange::DeleteComputeNode(*node));
            }
            Ok((set, ()))
        })?;
        Ok(())
    }
}
