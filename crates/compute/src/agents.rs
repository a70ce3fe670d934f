//! What agents ask of the control plane: register their hosts (host
//! discovery), heartbeat, take work, report what happened. Plus the sweep
//! that keeps agents fed with work committed elsewhere, the health view in
//! step with the cell databases, and interrupted reschedules finished.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::cell::{power_state, task_state, vm_state, ComputeNode, Fault, Service};
use berth_compute_model::plan::{
    check_host_owner, pending_snapshot_ids, plan_bind_hosts, plan_forget_deleted, plan_map_host,
};
use berth_compute_model::{ComputeError, WorldChangeSet};
use berth_model::{Change, ChangeSet};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::build::EVENT_BUILD;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::{Task, AGENT_TASK_STATES};
use crate::Compute;

/// A host an agent registers.
#[derive(Debug, Clone)]
pub struct HostRegistration {
    /// Service host name.
    pub host: String,
    /// Hypervisor hostname (the compute node and its provider name).
    pub node: String,
    /// Physical vCPUs.
    pub vcpus: i64,
    /// RAM MiB.
    pub memory_mb: i64,
    /// Disk GiB.
    pub local_gb: i64,
    /// Hypervisor type.
    pub hypervisor_type: String,
    /// Host IP.
    pub host_ip: String,
}

/// A registered host: where its compute node provider must be reported.
#[derive(Debug, Clone)]
pub struct RegisteredHost {
    /// Host.
    pub host: String,
    /// Node.
    pub node: String,
    /// Compute node uuid (= root provider uuid).
    pub node_uuid: Uuid,
    /// Service id in the cell.
    pub service_id: i64,
    /// Cell.
    pub cell: Uuid,
}

/// What an agent reports.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    /// Instance.
    pub instance: Uuid,
    /// Host it happened on.
    pub host: String,
    /// `spawned`, `build_failed`, `deleted`, `started`, `stopped`, `rebooted`.
    pub kind: String,
    /// Failure message.
    pub message: Option<String>,
    /// The task id it answers.
    pub task: Option<String>,
}

impl Compute {
    /// Register an agent's hosts in `cell` (default: the configured
    /// default cell): services and compute nodes in the cell database,
    /// host mappings and compute-node references in the control database.
    /// `pulls`: the agent takes tasks on its hosts' NATS subjects (pull
    /// mode; see [`crate::hub`]).
    pub async fn register_agent(
        &self,
        agent: &str,
        owner: &str,
        cell_name: Option<&str>,
        hosts: &[HostRegistration],
        pulls: bool,
    ) -> Result<Vec<RegisteredHost>, ServiceError> {
        let name = cell_name.unwrap_or(&self.config.default_cell);
        let cell = self
            .cell_by_name(name)
            .ok_or_else(|| ServiceError::Refused(ComputeError::NotFound(format!("Cell {name} could not be found."))))?;
        if cell.uuid == berth_compute_model::CELL0_UUID {
            return Err(ServiceError::Refused(ComputeError::Invalid("Hosts cannot be mapped to cell0.".into())));
        }
        // The hosts are bound to the registering identity first, in one
        // planned write: a host bound to another identity (403) or mapped
        // to another cell (409) is refused before anything is written.
        let names: Vec<String> = hosts.iter().map(|h| h.host.clone()).collect();
        write(&*self.control, |w| Ok((plan_bind_hosts(w, &names, cell.uuid, owner)?, ())))?;
        let handle = self.cells.get(&cell)?;
        let (services, nodes) = self.cells.read(&handle, |s| Ok((s.services()?, s.compute_nodes()?))).await?;
        let services: HashMap<String, Service> =
            services.into_iter().filter(|s| s.binary == "nova-compute").map(|s| (s.host.clone(), s)).collect();
        let nodes: HashMap<(String, String), ComputeNode> =
            nodes.into_iter().map(|n| ((n.host.clone(), n.hypervisor_hostname.clone()), n)).collect();
        let now = self.now();
        let mut ops = Vec::new();
        let mut wanted = Vec::new();
        for host in hosts {
            let service = services.get(&host.host).cloned().unwrap_or(Service {
                id: 0,
                uuid: Uuid::new_v4(),
                host: host.host.clone(),
                binary: "nova-compute".to_owned(),
                disabled: false,
                disabled_reason: None,
                forced_down: false,
                last_seen_up: Some(now),
                created_at: now,
                updated_at: Some(now),
            });
            let existing = nodes.get(&(host.host.clone(), host.node.clone()));
            let node = ComputeNode {
                id: existing.map_or(0, |n| n.id),
                uuid: existing.map_or_else(Uuid::new_v4, |n| n.uuid),
                host: host.host.clone(),
                hypervisor_hostname: host.node.clone(),
                hypervisor_type: host.hypervisor_type.clone(),
                hypervisor_version: 1000,
                host_ip: host.host_ip.clone(),
                vcpus: host.vcpus,
                memory_mb: host.memory_mb,
                local_gb: host.local_gb,
                cpu_info: "{}".to_owned(),
                created_at: existing.map_or(now, |n| n.created_at),
                updated_at: Some(now),
            };
            wanted.push((host.host.clone(), host.node.clone(), node.uuid));
            ops.push(CellOp::EnsureService(service));
            ops.push(CellOp::EnsureComputeNode(node));
        }
        let outcomes = handle.write(ops).await?;
        let service_ids: Vec<i64> =
            outcomes.iter().step_by(2).map(|o| if let CellOutcome::Id(id) = o { *id } else { 0 }).collect();
        write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            for (host, node, uuid) in &wanted {
                set.extend(plan_map_host(w, host, cell.uuid, &[(*uuid, node.clone())])?);
            }
            Ok((set, ()))
        })?;
        let names: Vec<String> = hosts.iter().map(|h| h.host.clone()).collect();
        self.hub.register(agent, &names, pulls);
        for (name, service) in &services {
            self.health.set_flags(name, service.disabled, service.forced_down);
        }
        for name in &names {
            self.health.heartbeat(name, now);
        }
        // A host back from the dead first destroys what was evacuated away
        // from it while it was down.
        self.destroy_evacuated(&handle, &names).await;
        Ok(wanted
            .into_iter()
            .zip(service_ids)
            .map(|((host, node, node_uuid), service_id)| RegisteredHost {
                host,
                node,
                node_uuid,
                service_id,
                cell: cell.uuid,
            })
            .collect())
    }

    /// Refuse (403) a caller that is not the identity `hosts` are bound to.
    pub fn check_agent_identity<'a>(
        &self,
        caller: &str,
        hosts: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ServiceError> {
        read(&*self.control, |w| check_host_owner(w, caller, hosts)).map_err(ServiceError::Refused)
    }

    /// Refuse (403) a caller that is not the identity all of `agent`'s
    /// registered hosts are bound to (its long poll). A check that passed
    /// is remembered until the agent's host set or any host binding
    /// changes, so an agent's poll does not look up its thousands of
    /// hosts each time.
    pub fn check_agent_hosts(&self, agent: &str, caller: &str) -> Result<(), ServiceError> {
        let Some(hosts) = self.hub.hosts_of(agent) else { return Ok(()) };
        read(&*self.control, |w| {
            let epoch = w.compute.owners_epoch;
            let lock = || self.agent_hosts_checked.lock().unwrap_or_else(|p| p.into_inner());
            if lock()
                .get(agent)
                .is_some_and(|c| c.epoch == epoch && c.caller == caller && Arc::ptr_eq(&c.hosts, &hosts))
            {
                return Ok(());
            }
            check_host_owner(w, caller, hosts.iter().map(String::as_str))?;
            let mut checked = lock();
            if checked.len() >= 10_000 {
                checked.clear();
            }
            checked.insert(agent.to_owned(), HostsChecked { caller: caller.to_owned(), hosts: hosts.clone(), epoch });
            Ok(())
        })
        .map_err(ServiceError::Refused)
    }

    /// Heartbeats of an agent's hosts. `false` when the agent is not
    /// registered with this process (it must register again).
    pub async fn heartbeat(&self, agent: &str, caller: &str, hosts: &[String]) -> Result<bool, ServiceError> {
        self.check_agent_identity(caller, hosts.iter().map(String::as_str))?;
        if !self.hub.knows(agent) {
            return Ok(false);
        }
        let now = self.now();
        for host in hosts {
            self.health.heartbeat(host, now);
        }
        let by_cell: HashMap<Uuid, Vec<String>> = read(&*self.control, |w| {
            let mut out: HashMap<Uuid, Vec<String>> = HashMap::new();
            for host in hosts {
                if let Some(cell) = w.compute.cell_of_host(host) {
                    out.entry(cell).or_default().push(host.clone());
                }
            }
            out
        });
        for (cell_id, hosts) in by_cell {
            if let Some(mapping) = self.cell(&cell_id) {
                self.cells.get(&mapping)?.write(vec![CellOp::Heartbeat { hosts, at: now }]).await?;
            }
        }
        Ok(true)
    }

    /// Apply what an agent reports. Each event's result says whether it
    /// took effect (a transition conditional on the task state is refused
    /// when the instance moved on, e.g. was deleted while building).
    ///
    /// The events of one host are applied in the order given (its failed
    /// build count depends on it); different hosts' events are applied
    /// concurrently, so their cell writes share commits instead of each
    /// waiting for the one before (an agent posts the events of many hosts
    /// at once and waits for the answer before posting more).
    pub async fn agent_events(&self, events: &[AgentEvent]) -> Vec<Result<bool, ServiceError>> {
        let mut by_host: Vec<(&str, Vec<usize>)> = Vec::new();
        let mut slot_of_host: HashMap<&str, usize> = HashMap::new();
        for (idx, event) in events.iter().enumerate() {
            let slot = *slot_of_host.entry(event.host.as_str()).or_insert_with(|| {
                by_host.push((event.host.as_str(), Vec::new()));
                by_host.len() - 1
            });
            by_host[slot].1.push(idx);
        }
        let runs = by_host.into_iter().map(|(_, indexes)| async move {
            let mut done = Vec::with_capacity(indexes.len());
            for idx in indexes {
                let event = &events[idx];
                done.push((idx, self.agent_event(event).await));
                if let Some(task) = &event.task {
                    self.hub.completed(task);
                }
            }
            done
        });
        let mut out: Vec<Option<Result<bool, ServiceError>>> = events.iter().map(|_| None).collect();
        for (idx, result) in crate::servers::join_all(runs.collect()).await.into_iter().flatten() {
            out[idx] = Some(result);
        }
        out.into_iter().map(|r| r.unwrap_or(Ok(false))).collect()
    }

    /// Remember the request id of a build handed to an agent.
    pub(crate) fn remember_build_request_id(&self, instance: Uuid, request_id: &str) {
        let mut ids = self.build_request_ids.lock().unwrap_or_else(|p| p.into_inner());
        // Builds whose report never comes (deleted while building, agent
        // gone) would stay forever: start over past a bound; a forgotten
        // id is read from the cell instead.
        if ids.len() >= 65_536 {
            ids.clear();
        }
        ids.insert(instance, request_id.to_owned());
    }

    /// The request id of an instance's create action, for finishing its
    /// build event: remembered when the build was handed out, else read
    /// from the cell. `done`: the build is over (forget it).
    async fn build_request_id(&self, handle: &Arc<crate::cells::Cell>, uuid: &Uuid, done: bool) -> Option<String> {
        let remembered = {
            let mut ids = self.build_request_ids.lock().unwrap_or_else(|p| p.into_inner());
            if done {
                ids.remove(uuid)
            } else {
                ids.get(uuid).cloned()
            }
        };
        match remembered {
            Some(id) => Some(id),
            None => self.create_request_id(handle, uuid).await,
        }
    }

    async fn agent_event(&self, event: &AgentEvent) -> Result<bool, ServiceError> {
        let uuid = event.instance;
        if event.kind == "console_output" {
            // An answer, not a transition: nothing is written.
            return Ok(self.console_answered(event));
        }
        let mapped = || read(&*self.control, |w| w.compute.instance_mappings.get(&uuid).and_then(|m| m.cell));
        // Another process may have claimed it and handed it out (relayed
        // here): its claim may be newer than this process's snapshot.
        let Some(cell_id) = mapped().or_else(|| {
            self.control.sync();
            mapped()
        }) else {
            // Forgotten already (deleted): nothing to do.
            return Ok(false);
        };
        let cell = self.cell(&cell_id).ok_or_else(|| ServiceError::Internal(format!("cell {cell_id} vanished")))?;
        let handle = self.cells.get(&cell)?;
        let now = self.now();
        let reschedule = event.kind == "build_failed" && self.may_reschedule(&uuid);
        // Only build reports finish a build event; a rescheduled build
        // starts another under the same request id.
        let request_id = match event.kind.as_str() {
            "spawned" | "build_failed" => self.build_request_id(&handle, &uuid, !reschedule).await,
            _ => None,
        };
        let expect = |task: &[&str]| Expect {
            task_states: task.iter().map(|t| Some((*t).to_owned())).collect(),
            not_deleted: true,
            ..Expect::default()
        };
        // A build's outcome is only taken from the host building it (a late
        // or repeated report from a host the instance was rescheduled away
        // from is a mismatch).
        let from_host = |task: &[&str]| Expect { host: Some(Some(event.host.clone())), ..expect(task) };
        let finish = |result: &str, traceback: Option<String>| {
            request_id.as_ref().map(|request_id| CellOp::FinishEvent {
                instance: uuid,
                request_id: request_id.clone(),
                event: EVENT_BUILD.to_owned(),
                result: result.to_owned(),
                traceback,
                at: now,
            })
        };
        if matches!(event.kind.as_str(), "resize_migrated" | "resize_finished" | "resize_confirmed" | "resize_reverted")
        {
            return self.move_event(&handle, &uuid, &event.kind, &event.host).await;
        }
        if event.kind == "move_failed" {
            return self
                .move_failed(&handle, &uuid, &event.host, event.task.as_deref(), event.message.as_deref())
                .await;
        }
        if matches!(event.kind.as_str(), "rebuilt" | "rebuild_failed" | "evacuated_destroyed") {
            return self.evacuation_event(&handle, &uuid, &event.kind, &event.host, event.message.as_deref()).await;
        }
        if matches!(event.kind.as_str(), "live_migration_prepared" | "live_migrated" | "live_migration_failed") {
            return self.live_event(&handle, &uuid, &event.kind, &event.host, event.message.as_deref()).await;
        }
        if matches!(event.kind.as_str(), "shelved" | "offloaded" | "unshelved") {
            return self.shelve_event(&handle, &uuid, &event.kind, &event.host).await;
        }
        if matches!(event.kind.as_str(), "snapshotted" | "snapshot_failed") {
            return self.snapshot_event(&handle, &uuid, &event.kind, &event.host, event.message.as_deref()).await;
        }
        if matches!(
            event.kind.as_str(),
            "paused" | "unpaused" | "suspended" | "resumed" | "rescued" | "unrescued" | "soft_deleted" | "restored"
        ) {
            return self.pause_event(&handle, &uuid, &event.kind, &event.host).await;
        }
        let mut ops = Vec::new();
        match event.kind.as_str() {
            "spawned" => {
                let update = InstanceUpdate {
                    vm_state: Some(vm_state::ACTIVE.to_owned()),
                    task_state: Some(None),
                    power_state: Some(power_state::RUNNING),
                    launched_at: Some(Some(now)),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect: from_host(&[task_state::SPAWNING]), update });
                ops.extend(finish("Success", None));
            }
            "build_failed" if reschedule => {
                // Back to `scheduling`, keeping the failed host on the row
                // until the reschedule write has moved the allocations: it
                // is how a re-drive after a crash knows where the build
                // failed (`conductor::redrive_reschedules`).
                let update = InstanceUpdate {
                    task_state: Some(Some(task_state::SCHEDULING.to_owned())),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect: from_host(&[task_state::SPAWNING]), update });
                ops.extend(finish("Error", Some(failure_message(event))));
            }
            "build_failed" => {
                let message = failure_message(event);
                let update = InstanceUpdate {
                    vm_state: Some(vm_state::ERROR.to_owned()),
                    task_state: Some(None),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect: from_host(&[task_state::SPAWNING]), update });
                ops.push(CellOp::AddFault(Fault {
                    instance_uuid: uuid,
                    code: 500,
                    message: message.clone(),
                    details: message.clone(),
                    host: Some(event.host.clone()),
                    created_at: now,
                }));
                ops.extend(finish("Error", Some(message)));
            }
            "deleted" => return self.instance_deleted(&handle, uuid, &event.host).await,
            "started" | "stopped" | "rebooted" => {
                let (from, to, power): (&[&str], &str, i64) = match event.kind.as_str() {
                    "started" => (&[task_state::POWERING_ON], vm_state::ACTIVE, power_state::RUNNING),
                    "stopped" => (&[task_state::POWERING_OFF], vm_state::STOPPED, power_state::SHUTDOWN),
                    _ => (&[task_state::REBOOTING, task_state::REBOOTING_HARD], vm_state::ACTIVE, power_state::RUNNING),
                };
                let update = InstanceUpdate {
                    vm_state: Some(to.to_owned()),
                    task_state: Some(None),
                    power_state: Some(power),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect: from_host(from), update });
            }
            "powered_off" => {
                // The hypervisor's word that a guest shut itself down (the
                // agent's power sync, as Nova's `_sync_power_states` stops
                // an ACTIVE instance found SHUTDOWN): taken only for an
                // ACTIVE row with no task on the reporting host, so a stop,
                // a reboot or a move in flight is never overtaken.
                let update = InstanceUpdate {
                    vm_state: Some(vm_state::STOPPED.to_owned()),
                    task_state: Some(None),
                    power_state: Some(power_state::SHUTDOWN),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                let expect = Expect {
                    vm_states: vec![vm_state::ACTIVE.to_owned()],
                    task_states: vec![None],
                    not_deleted: true,
                    host: Some(Some(event.host.clone())),
                    ..Expect::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect, update });
            }
            "powered_on" => {
                // A guest started behind berth's back (found running by the
                // power sync) on a STOPPED server with no task: stopped
                // again, as Nova's `_sync_power_states` force-stops it. The
                // stop is this write's task state; the task goes to the
                // host once it is written.
                let update = InstanceUpdate {
                    task_state: Some(Some(task_state::POWERING_OFF.to_owned())),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                let expect = Expect {
                    vm_states: vec![vm_state::STOPPED.to_owned()],
                    task_states: vec![None],
                    not_deleted: true,
                    host: Some(Some(event.host.clone())),
                    ..Expect::default()
                };
                ops.push(CellOp::UpdateInstance { uuid, expect, update });
            }
            other => {
                return Err(ServiceError::Refused(ComputeError::Invalid(format!("Unknown event kind {other}."))));
            }
        }
        let outcomes = handle.write(ops).await?;
        let applied = outcomes.first() == Some(&CellOutcome::Done);
        match event.kind.as_str() {
            "spawned" if applied => {
                self.health.build_succeeded(&event.host);
                self.metrics.instances_active.fetch_add(1, Ordering::Relaxed);
                self.metrics.timings.finished(uuid, true);
            }
            "build_failed" if applied => {
                let failures = self.health.build_failed(&event.host);
                self.metrics.builds_failed.fetch_add(1, Ordering::Relaxed);
                self.metrics.timings.finished(uuid, false);
                let threshold = self.config.auto_disable_after_failed_builds;
                if threshold > 0 && failures == threshold {
                    self.auto_disable(&event.host, failures).await;
                }
                if reschedule {
                    crate::conductor::reschedule(self, &handle, uuid, &event.host, &failure_message(event), request_id)
                        .await?;
                    return Ok(true);
                }
                // The host keeps nothing of a failed build.
                write(&*self.control, |w| {
                    let mut set = WorldChangeSet::new();
                    if let Some(consumer) = w.placement.consumers.get(&uuid) {
                        set.placement(ChangeSet {
                            changes: vec![Change::DeleteConsumer {
                                uuid,
                                expected_generation: consumer.row.generation,
                            }],
                        });
                    }
                    Ok((set, ()))
                })?;
            }
            "powered_on" if applied => {
                if let Some(task) = Task::new(uuid, &event.host, task_state::POWERING_OFF) {
                    self.hub.push(task);
                }
            }
            "spawned" | "build_failed" if !applied => {
                // The instance moved on while building (deleted): hand the
                // delete to the agent now that the build is done.
                let id = uuid;
                if let Ok(Some(row)) = self.cells.read(&handle, move |s| s.instance(&id)).await {
                    if let (Some(task), Some(host)) = (row.task_state.as_deref(), row.host.as_deref()) {
                        if let Some(task) = Task::new(uuid, host, task) {
                            self.hub.push(task);
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(applied)
    }

    /// An agent destroyed an instance it was told to delete. Applies only
    /// to a row that is `deleting` on the reporting host (or on a source or
    /// destination of one of its open moves); anything else changes
    /// nothing. Then one control write decides and forgets (allocations,
    /// mapping, quota, open moves' consumers: `plan_forget_deleted`, only
    /// while the mapping is queued for delete), before the row is
    /// soft-deleted, conditionally on still `deleting` on that host.
    async fn instance_deleted(
        &self,
        handle: &Arc<crate::cells::Cell>,
        uuid: Uuid,
        host: &str,
    ) -> Result<bool, ServiceError> {
        let id = uuid;
        let Some(row) = self.cells.read(handle, move |s| s.instance(&id)).await? else { return Ok(false) };
        if row.deleted || row.task_state.as_deref() != Some(task_state::DELETING) {
            return Ok(false);
        }
        let migrations = self.open_migrations(handle, &uuid).await?;
        let on_host = row.host.as_deref() == Some(host)
            || migrations
                .iter()
                .any(|m| m.source_compute.as_deref() == Some(host) || m.dest_compute.as_deref() == Some(host));
        if !on_host {
            return Ok(false);
        }
        let migrations: Vec<Uuid> = migrations.iter().map(|m| m.uuid).collect();
        let forgotten = write(&*self.control, |w| {
            let (set, applies) = plan_forget_deleted(w, &uuid, &migrations);
            Ok((set, applies.then(|| pending_snapshot_ids(w, &uuid))))
        })?;
        let Some(unfinished) = forgotten else { return Ok(false) };
        for image in &unfinished {
            self.remove_image_data(image);
        }
        let now = self.now();
        let update = InstanceUpdate {
            vm_state: Some(vm_state::DELETED.to_owned()),
            task_state: Some(None),
            power_state: Some(power_state::NOSTATE),
            terminated_at: Some(Some(now)),
            deleted_at: Some(now),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let expect = Expect {
            task_states: vec![Some(task_state::DELETING.to_owned())],
            not_deleted: true,
            host: Some(row.host.clone()),
            ..Expect::default()
        };
        let outcomes = handle.write(vec![CellOp::UpdateInstance { uuid, expect, update }]).await?;
        Ok(outcomes.first() == Some(&CellOutcome::Done))
    }

    /// Is a failed build of `instance` rescheduled? Not with
    /// `max_attempts` 1 nor onto a forced host or node (Nova's
    /// `populate_retry`).
    fn may_reschedule(&self, instance: &Uuid) -> bool {
        self.config.scheduler.max_attempts > 1
            && read(&*self.control, |w| {
                w.compute.request_specs.get(instance).is_some_and(|s| s.force_host.is_none() && s.force_node.is_none())
            })
    }

    pub(crate) async fn create_request_id(&self, handle: &Arc<crate::cells::Cell>, uuid: &Uuid) -> Option<String> {
        let id = *uuid;
        let actions = self.cells.read(handle, move |s| s.instance_actions(&id)).await.ok()?;
        actions.into_iter().find(|a| a.action == "create").map(|a| a.request_id)
    }
}

impl Compute {
    /// Of `instances` (guests running on `host`), those whose server was
    /// deleted while on that host: a row of one of the cells, deleted,
    /// naming `host` (Nova's `_running_deleted_instances`). A cell that
    /// does not answer names none.
    pub async fn deleted_guests(&self, host: &str, instances: &[Uuid]) -> Vec<Uuid> {
        let mut out = Vec::new();
        if instances.is_empty() {
            return out;
        }
        for mapping in self.cell_mappings() {
            if mapping.uuid == berth_compute_model::CELL0_UUID {
                continue;
            }
            let Ok(handle) = self.cells.get(&mapping) else { continue };
            let ids = instances.to_vec();
            let Ok(rows) = self.cells.read(&handle, move |s| s.instances(&ids)).await else { continue };
            out.extend(rows.into_iter().filter(|r| r.deleted && r.host.as_deref() == Some(host)).map(|r| r.uuid));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn failure_message(event: &AgentEvent) -> String {
    event.message.clone().unwrap_or_else(|| format!("Build of instance {} failed on {}.", event.instance, event.host))
}

/// Start the periodic sweep: re-offer agent work found in the cells for
/// hosts served by agents connected here, and refresh host health from
/// the cells' service rows (other processes' heartbeats, operator flags);
/// every `heal_every_ticks` ticks, run the heal ([`crate::heal`]).
pub(crate) fn spawn_sweep(compute: Arc<Compute>) {
    tokio::spawn(async move {
        let mut ticks: u64 = 0;
        loop {
            tokio::time::sleep(compute.config.sweep_interval).await;
            ticks += 1;
            let refresh_health = ticks % 10 == 1;
            let every = compute.config.heal_every_ticks;
            // In its own task, so a long heal (many instances) does not
            // delay the work sweep; never two at once.
            if every > 0 && ticks.is_multiple_of(every) && !compute.heal_running.swap(true, Ordering::SeqCst) {
                let compute = compute.clone();
                tokio::spawn(async move {
                    crate::heal::heal(&compute, false).await;
                    compute.heal_running.store(false, Ordering::SeqCst);
                });
            }
            let local: HashSet<String> = compute.hub.local_hosts();
            if local.is_empty() && !refresh_health {
                continue;
            }
            for mapping in compute.cell_mappings() {
                if mapping.uuid == berth_compute_model::CELL0_UUID {
                    continue;
                }
                let Ok(handle) = compute.cells.get(&mapping) else { continue };
                if !local.is_empty() {
                    let rows = compute.cells.read(&handle, |s| s.instances_with_tasks(AGENT_TASK_STATES)).await;
                    if let Ok(rows) = rows {
                        for row in rows {
                            let (Some(host), Some(task)) = (row.host.as_deref(), row.task_state.as_deref()) else {
                                continue;
                            };
                            // A confirm cleans up the source, which the row
                            // no longer names: the migration does.
                            let source;
                            let host = if task == berth_compute_model::cell::task_state::RESIZE_CONFIRMING {
                                source = confirming_source(&compute, &handle, &row.uuid).await;
                                match source.as_deref() {
                                    Some(source) => source,
                                    None => continue,
                                }
                            } else {
                                host
                            };
                            if local.contains(host) {
                                if let Some(task) = Task::new(row.uuid, host, task) {
                                    compute.hub.offer(task);
                                }
                            }
                        }
                    }
                }
                if refresh_health {
                    if let Ok(services) = compute.cells.read(&handle, |s| s.services()).await {
                        compute.health.merge_services(&services);
                    }
                    crate::conductor::redrive_reschedules(&compute, &handle).await;
                    crate::moves::redrive_moves(&compute, &handle).await;
                    crate::evacuate::redrive_evacuations(&compute, &handle, &local).await;
                    crate::live::redrive_live_migrations(&compute, &handle, &local).await;
                    crate::shelve::offload_due(&compute, &handle).await;
                    crate::rebuild::reclaim_due(&compute, &handle).await;
                    crate::moves::confirm_due(&compute, &handle).await;
                    crate::shelve::redrive_unshelves(&compute, &handle).await;
                }
            }
        }
    });
}

/// The source host of an instance's confirming move.
async fn confirming_source(compute: &Compute, handle: &Arc<crate::cells::Cell>, uuid: &Uuid) -> Option<String> {
    let filter = berth_compute_model::cell::MigrationFilter {
        instance_uuid: Some(*uuid),
        status: Some(berth_compute_model::cell::migration_status::CONFIRMING.to_owned()),
        ..Default::default()
    };
    let rows = compute.cells.read(handle, move |s| s.migrations(&filter)).await.ok()?;
    rows.into_iter().next().and_then(|m| m.source_compute)
}

/// A passed check of an agent's host set ([`Compute::check_agent_hosts`]).
#[derive(Debug)]
pub(crate) struct HostsChecked {
    caller: String,
    hosts: Arc<HashSet<String>>,
    epoch: berth_compute_model::OwnersEpoch,
}
