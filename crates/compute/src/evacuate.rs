//! Evacuate: rebuild a server whose host is down on another host (Nova's
//! `evacuate` with the placement allocation model).
//!
//! The flow spans both kinds of database, ordered so the instance always
//! holds an allocation and only one host ever runs it:
//!
//! 1. **API checks:** vm state `active`, `stopped` or `error` with no task;
//!    the requested host exists and is not the source; the source's
//!    compute service is *down* (no heartbeat within `service_down_time`,
//!    or forced down), else 400 "Compute service of H is still in use."
//!    (Nova's `ComputeServiceInUse`).
//! 2. **cell:** the instance goes to `rebuilding` (its vm state already the
//!    one it will end in: `stopped` from 2.95 or when it was stopped, else
//!    `active`) and an `evacuation` migration is inserted `accepted`, one op.
//! 3. the scheduler proposes hosts, the source excluded (the requested host
//!    forced, as 2.56 migrate does);
//! 4. **control:** `plan_evacuate_claim`, one write: the instance consumer
//!    holds source + destination, the group's hard policy re-checked. No
//!    room: the migration goes to `error` and the server to ERROR (Nova's
//!    conductor), its allocations untouched;
//! 5. **cell:** migration `pre-migrating` with its destination, the row on
//!    the destination in `rebuild_spawning`; the destination's agent
//!    rebuilds (`rebuilt`: migration `done`, the server ACTIVE or SHUTOFF;
//!    `rebuild_failed`: the destination's share of the allocation goes, the
//!    migration `failed`, the server ERROR back on the source);
//! 6. **the source comes back:** when its agent registers (and on the
//!    sweep while it stays connected) it gets `destroy_evacuated` for every
//!    evacuation from it still `pre-migrating` or `done`; its report drops
//!    the source's share (`plan_drop_host_allocations`) and the migration
//!    goes `completed` (Nova's `_destroy_evacuated_instances`). If the
//!    source cleaned up before the rebuild finished, `rebuilt` goes straight
//!    to `completed`.
//!
//! The sweep ([`redrive_evacuations`]) finishes what a crash interrupted:
//! an `accepted` evacuation older than 10 s goes on when its claim exists,
//! else to `error`.

use std::collections::HashSet;
use std::sync::Arc;

use berth_compute_model::cell::{
    migration_status as ms, power_state, task_state, vm_state, ActionEvent, Fault, Migration, MigrationFilter,
};
use berth_compute_model::moves::MoveClaimed;
use berth_compute_model::rehome::{plan_drop_host_allocations, plan_evacuate_claim, EvacuateClaim};
use berth_compute_model::{ComputeError, World};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate, MigrationUpdate};
use uuid::Uuid;

use crate::action::{expect_task, invalid, invalid_state, statuses, MIGRATION_TYPE_EVACUATION};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::Task;
use crate::servers::Caller;
use crate::Compute;

/// The conductor's event of an evacuate action.
pub const EVENT_REBUILD_SERVER: &str = "conductor_rebuild_server";
/// The destination's event of an evacuate action.
pub const EVENT_REBUILD_INSTANCE: &str = "compute_rebuild_instance";

/// What an `evacuate` asks for (one canonical request for every
/// microversion; the API upgrades older shapes).
#[derive(Debug, Clone, PartialEq)]
pub struct EvacuateRequest {
    /// Requested destination host.
    pub host: Option<String>,
    /// The server ends SHUTOFF whatever it was (2.95).
    pub stop: bool,
}

/// The compute node uuid of `host`/`node`.
fn node_uuid(w: &World, host: &str, node: &str) -> Option<Uuid> {
    w.compute.compute_nodes.values().find(|n| n.host == host && n.node == node).map(|n| n.uuid)
}

/// Does the instance still hold allocations on the tree of `root`?
fn holds_on(w: &World, instance: &Uuid, root: &Uuid) -> bool {
    w.placement
        .consumers
        .get(instance)
        .is_some_and(|c| c.allocations.keys().any(|p| w.placement.provider(p).is_some_and(|p| p.row.root == *root)))
}

impl Compute {
    /// `evacuate` (steps 1–5 of the module doc). Returns once the
    /// destination is claimed, or the evacuation failed with a recorded
    /// error (the API still answers 200, as Nova's conductor fails
    /// asynchronously).
    pub async fn evacuate_server(
        &self,
        uuid: &Uuid,
        request: EvacuateRequest,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let action = "evacuate";
        let (instance, handle) = self.placed(uuid, action).await?;
        if let Some(host) = &request.host {
            let known = read(&*self.control, |w| w.compute.compute_nodes.values().any(|n| &n.host == host));
            if !known {
                return Err(ServiceError::Refused(ComputeError::NotFound(format!("Compute host {host} not found."))));
            }
            if instance.host.as_ref() == Some(host) {
                return Err(invalid("The target host can't be the same one.".into()));
            }
        }
        if !matches!(instance.vm_state.as_str(), vm_state::ACTIVE | vm_state::STOPPED | vm_state::ERROR) {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        let (Some(source), Some(source_node)) = (instance.host.clone(), instance.node.clone()) else {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        };
        let now = self.now();
        if self.health.is_up_at(&source, now) {
            return Err(invalid(format!("Compute service of {source} is still in use.")));
        }
        let Some(source_root) = read(&*self.control, |w| node_uuid(w, &source, &source_node)) else {
            return Err(invalid(format!("Compute host {source} could not be found.")));
        };
        let target =
            if request.stop || instance.vm_state == vm_state::STOPPED { vm_state::STOPPED } else { vm_state::ACTIVE };
        let migration = Migration {
            id: 0,
            uuid: Uuid::new_v4(),
            instance_uuid: *uuid,
            migration_type: MIGRATION_TYPE_EVACUATION.to_owned(),
            status: ms::ACCEPTED.to_owned(),
            source_compute: Some(source.clone()),
            source_node: Some(source_node.clone()),
            dest_compute: request.host.clone(),
            dest_node: None,
            dest_host: None,
            old_flavor: instance.spec.flavor.clone(),
            new_flavor: instance.spec.flavor.clone(),
            user_id: instance.user_id.clone(),
            project_id: instance.project_id.clone(),
            created_at: now,
            updated_at: Some(now),
        };
        let record = caller.action(
            uuid,
            action,
            now,
            vec![ActionEvent {
                event: EVENT_REBUILD_SERVER.to_owned(),
                start_time: now,
                finish_time: None,
                result: None,
                traceback: None,
                host: None,
                details: None,
            }],
        );
        let start = CellOp::InsertMigration {
            migration: migration.clone(),
            expect: Expect {
                host: Some(Some(source.clone())),
                ..expect_task(&[vm_state::ACTIVE, vm_state::STOPPED, vm_state::ERROR], None)
            },
            update: InstanceUpdate {
                vm_state: Some(target.to_owned()),
                task_state: Some(Some(task_state::REBUILDING.to_owned())),
                updated_at: now,
                ..InstanceUpdate::default()
            },
        };
        let outcomes = handle.write(vec![start, CellOp::StartAction(record)]).await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", "changing"));
        }
        let ignore = vec![source.clone()];
        let mut last_reason = String::new();
        for _ in 0..self.config.schedule_retries.max(1) {
            let choices = match self.choose_destination(
                uuid,
                &instance.spec.flavor,
                request.host.clone(),
                None,
                &ignore,
                self.now(),
            ) {
                Ok(choices) => choices,
                Err(reason) => {
                    last_reason = reason;
                    break;
                }
            };
            let claim = EvacuateClaim { instance: *uuid, source: source_root, choices, cell: handle.mapping.uuid };
            match write(&*self.control, |w| plan_evacuate_claim(w, &claim, self.now())) {
                Ok(MoveClaimed::Claimed(node)) => {
                    let ip = self.host_ip(&handle, &node.host).await;
                    self.begin_rebuild(&handle, &migration.uuid, uuid, &node.host, &node.node, ip).await?;
                    return Ok(());
                }
                Ok(MoveClaimed::NoRoom) => {
                    last_reason = "There are not enough hosts available.".to_owned();
                }
                Err(err) => {
                    let err: ServiceError = err.into();
                    self.fail_evacuation(&handle, &migration.uuid, uuid, &err.to_string()).await?;
                    return Err(err);
                }
            }
        }
        let message = format!("No valid host was found. {last_reason}");
        self.fail_evacuation(&handle, &migration.uuid, uuid, &message).await
    }

    /// No destination: the migration goes to `error` and the server to
    /// ERROR with a fault (Nova's conductor on `NoValidHost`); its
    /// allocations (the source's) are untouched.
    async fn fail_evacuation(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        message: &str,
    ) -> Result<(), ServiceError> {
        let request_id = self.action_request_id(handle, uuid, &["evacuate"]).await;
        let expect = expect_task(&[], Some(task_state::REBUILDING));
        let mut ops = self.error_out_ops(migration, ms::ACCEPTED, expect, uuid, (400, message, None));
        if let Some(request_id) = request_id {
            ops.push(self.finish_event(uuid, &request_id, EVENT_REBUILD_SERVER, Some(message.to_owned())));
        }
        handle.write(ops).await?;
        Ok(())
    }

    /// Step 5: the destination is claimed; the row moves there and its
    /// agent gets the rebuild.
    async fn begin_rebuild(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        dest: &str,
        dest_node: &str,
        dest_ip: Option<String>,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let zone = read(&*self.control, |w| {
            w.compute.availability_zone_of_host(dest, &self.config.scheduler.default_availability_zone)
        });
        let update = MigrationUpdate {
            status: Some(ms::PRE_MIGRATING.to_owned()),
            dest_compute: Some(Some(dest.to_owned())),
            dest_node: Some(Some(dest_node.to_owned())),
            dest_host: Some(dest_ip),
            updated_at: now,
            delete: false,
        };
        let instance = InstanceUpdate {
            task_state: Some(Some(task_state::REBUILD_SPAWNING.to_owned())),
            host: Some(Some(dest.to_owned())),
            node: Some(Some(dest_node.to_owned())),
            availability_zone: Some(Some(zone)),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: *migration,
            from_statuses: statuses(&[ms::ACCEPTED]),
            update,
            instance: Some((expect_task(&[], Some(task_state::REBUILDING)), instance)),
        }];
        if let Some(request_id) = self.action_request_id(handle, uuid, &["evacuate"]).await {
            ops.push(self.finish_event(uuid, &request_id, EVENT_REBUILD_SERVER, None));
            ops.push(CellOp::StartEvent {
                instance: *uuid,
                request_id,
                event: EVENT_REBUILD_INSTANCE.to_owned(),
                host: Some(dest.to_owned()),
                at: now,
            });
        }
        let outcomes = handle.write(ops).await?;
        if outcomes.first() == Some(&CellOutcome::Done) {
            if let Some(task) = Task::new(*uuid, dest, task_state::REBUILD_SPAWNING) {
                self.hub.push(task);
            }
        }
        Ok(())
    }

    /// The instance's unfinished evacuation (`accepted`, `pre-migrating`
    /// or `done`), newest first.
    async fn open_evacuation(&self, handle: &Arc<Cell>, uuid: &Uuid) -> Result<Option<Migration>, ServiceError> {
        let filter = MigrationFilter {
            instance_uuid: Some(*uuid),
            migration_type: Some(MIGRATION_TYPE_EVACUATION.to_owned()),
            ..Default::default()
        };
        let rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        Ok(rows.into_iter().find(|m| matches!(m.status.as_str(), ms::ACCEPTED | ms::PRE_MIGRATING | ms::DONE)))
    }

    /// An agent's report on an evacuation: `rebuilt`, `rebuild_failed`
    /// (from the destination) or `evacuated_destroyed` (from the source).
    pub(crate) async fn evacuation_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let open = self.open_evacuation(handle, uuid).await?;
        if kind != "evacuated_destroyed" && open.as_ref().is_none_or(|m| m.status != ms::PRE_MIGRATING) {
            // No evacuation rebuilding it: an in-place rebuild's report.
            return self.local_rebuild_event(handle, uuid, kind, host, message).await;
        }
        let Some(m) = open else { return Ok(false) };
        let source = m.source_compute.clone().unwrap_or_default();
        let source_node = m.source_node.clone().unwrap_or_default();
        let Some(source_root) = read(&*self.control, |w| node_uuid(w, &source, &source_node)) else {
            return Ok(false);
        };
        match kind {
            "evacuated_destroyed" => {
                if host != source || !matches!(m.status.as_str(), ms::PRE_MIGRATING | ms::DONE) {
                    return Ok(false);
                }
                write(&*self.control, |w| Ok((plan_drop_host_allocations(w, uuid, &source_root, self.now())?, ())))?;
                if m.status == ms::DONE {
                    return self.close_evacuation(handle, &m.uuid, &[ms::DONE]).await;
                }
                Ok(true)
            }
            "rebuilt" => {
                if m.status != ms::PRE_MIGRATING || m.dest_compute.as_deref() != Some(host) {
                    return Ok(false);
                }
                let id = *uuid;
                let Some(row) = self.cells.read(handle, move |s| s.instance(&id)).await? else { return Ok(false) };
                let power =
                    if row.vm_state == vm_state::STOPPED { power_state::SHUTDOWN } else { power_state::RUNNING };
                let source_cleaned = !read(&*self.control, |w| holds_on(w, uuid, &source_root));
                let to = if source_cleaned { ms::COMPLETED } else { ms::DONE };
                let now = self.now();
                let mut ops = vec![CellOp::UpdateMigration {
                    uuid: m.uuid,
                    from_statuses: statuses(&[ms::PRE_MIGRATING]),
                    update: MigrationUpdate { status: Some(to.to_owned()), updated_at: now, ..Default::default() },
                    instance: Some((
                        Expect {
                            host: Some(Some(host.to_owned())),
                            ..expect_task(&[], Some(task_state::REBUILD_SPAWNING))
                        },
                        InstanceUpdate {
                            task_state: Some(None),
                            power_state: Some(power),
                            launched_at: Some(Some(now)),
                            updated_at: now,
                            ..InstanceUpdate::default()
                        },
                    )),
                }];
                if let Some(request_id) = self.action_request_id(handle, uuid, &["evacuate"]).await {
                    ops.push(self.finish_event(uuid, &request_id, EVENT_REBUILD_INSTANCE, None));
                }
                let applied = handle.write(ops).await?.first() == Some(&CellOutcome::Done);
                if applied && !source_cleaned {
                    // The source may be back already: it cleans up now.
                    self.hub.push(Task::destroy_evacuated(*uuid, &source));
                }
                Ok(applied)
            }
            _ => {
                // `rebuild_failed`: the destination's share goes first, then
                // the row goes back to the source in ERROR.
                let dest = m.dest_compute.clone().unwrap_or_default();
                let dest_node = m.dest_node.clone().unwrap_or_default();
                if m.status != ms::PRE_MIGRATING || dest != host {
                    return Ok(false);
                }
                // Nothing goes unless the rebuild is still under way there.
                let id = *uuid;
                let row = self.cells.read(handle, move |s| s.instance(&id)).await?;
                if !row.is_some_and(|r| {
                    !r.deleted
                        && r.task_state.as_deref() == Some(task_state::REBUILD_SPAWNING)
                        && r.host.as_deref() == Some(host)
                }) {
                    return Ok(false);
                }
                if let Some(dest_root) = read(&*self.control, |w| node_uuid(w, &dest, &dest_node)) {
                    write(&*self.control, |w| Ok((plan_drop_host_allocations(w, uuid, &dest_root, self.now())?, ())))?;
                }
                let now = self.now();
                let message =
                    message.map_or_else(|| format!("Rebuild of instance {uuid} failed on {host}."), str::to_owned);
                let mut ops = vec![
                    CellOp::UpdateMigration {
                        uuid: m.uuid,
                        from_statuses: statuses(&[ms::PRE_MIGRATING]),
                        update: MigrationUpdate {
                            status: Some(ms::FAILED.to_owned()),
                            updated_at: now,
                            ..Default::default()
                        },
                        instance: Some((
                            Expect {
                                host: Some(Some(host.to_owned())),
                                ..expect_task(&[], Some(task_state::REBUILD_SPAWNING))
                            },
                            InstanceUpdate {
                                vm_state: Some(vm_state::ERROR.to_owned()),
                                task_state: Some(None),
                                host: Some(Some(source.clone())),
                                node: Some(Some(source_node.clone())),
                                updated_at: now,
                                ..InstanceUpdate::default()
                            },
                        )),
                    },
                    CellOp::AddFault(Fault {
                        instance_uuid: *uuid,
                        code: 500,
                        message: message.clone(),
                        details: message.clone(),
                        host: Some(host.to_owned()),
                        created_at: now,
                    }),
                ];
                if let Some(request_id) = self.action_request_id(handle, uuid, &["evacuate"]).await {
                    ops.push(self.finish_event(uuid, &request_id, EVENT_REBUILD_INSTANCE, Some(message)));
                }
                Ok(handle.write(ops).await?.first() == Some(&CellOutcome::Done))
            }
        }
    }

    /// The evacuation is over: `from` → `completed`.
    async fn close_evacuation(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        from: &[&str],
    ) -> Result<bool, ServiceError> {
        let op = CellOp::UpdateMigration {
            uuid: *migration,
            from_statuses: statuses(from),
            update: MigrationUpdate {
                status: Some(ms::COMPLETED.to_owned()),
                updated_at: self.now(),
                ..Default::default()
            },
            instance: None,
        };
        Ok(handle.write(vec![op]).await?.first() == Some(&CellOutcome::Done))
    }

    /// Evacuations away from `hosts` that still wait for their source:
    /// `(migration, instance, source host)`.
    async fn evacuated_from(&self, handle: &Arc<Cell>, hosts: &HashSet<String>) -> Vec<Migration> {
        let filter =
            MigrationFilter { migration_type: Some(MIGRATION_TYPE_EVACUATION.to_owned()), ..Default::default() };
        let Ok(rows) = self.cells.read(handle, move |s| s.migrations(&filter)).await else { return Vec::new() };
        rows.into_iter()
            .filter(|m| matches!(m.status.as_str(), ms::PRE_MIGRATING | ms::DONE))
            .filter(|m| m.source_compute.as_ref().is_some_and(|h| hosts.contains(h)))
            .collect()
    }

    /// A host came back (its agent registered): it destroys its copies of
    /// the instances evacuated away from it (Nova's
    /// `_destroy_evacuated_instances` in `init_host`).
    pub(crate) async fn destroy_evacuated(&self, handle: &Arc<Cell>, hosts: &[String]) {
        let hosts: HashSet<String> = hosts.iter().cloned().collect();
        for m in self.evacuated_from(handle, &hosts).await {
            if let Some(source) = &m.source_compute {
                self.hub.push(Task::destroy_evacuated(m.instance_uuid, source));
            }
        }
    }
}

/// The sweep's part for evacuations in one cell: sources connected here
/// get (again) their clean-up task; a `done` evacuation whose source
/// already lost its share is completed; an `accepted` one older than 10 s
/// goes on to its claimed destination, or to `error` when it has none.
pub(crate) async fn redrive_evacuations(compute: &Compute, handle: &Arc<Cell>, local: &HashSet<String>) {
    for m in compute.evacuated_from(handle, local).await {
        let (Some(source), Some(node)) = (m.source_compute.as_deref(), m.source_node.as_deref()) else { continue };
        // Deleted meanwhile (its allocations went with it): nothing is left
        // for the source to clean up, and its reports would be dropped.
        if !read(&*compute.control, |w| w.compute.instance_mappings.contains_key(&m.instance_uuid)) {
            if let Err(err) = compute.close_evacuation(handle, &m.uuid, &[ms::PRE_MIGRATING, ms::DONE]).await {
                tracing::warn!(migration = %m.uuid, error = %err, "closing the evacuation of a deleted server failed");
            }
            continue;
        }
        let cleaned = read(&*compute.control, |w| {
            node_uuid(w, source, node).is_some_and(|root| !holds_on(w, &m.instance_uuid, &root))
        });
        if cleaned && m.status == ms::DONE {
            if let Err(err) = compute.close_evacuation(handle, &m.uuid, &[ms::DONE]).await {
                tracing::warn!(migration = %m.uuid, error = %err, "completing an evacuation failed");
            }
        } else if !cleaned {
            compute.hub.offer(Task::destroy_evacuated(m.instance_uuid, source));
        }
    }
    let filter = MigrationFilter {
        migration_type: Some(MIGRATION_TYPE_EVACUATION.to_owned()),
        status: Some(ms::ACCEPTED.to_owned()),
        ..Default::default()
    };
    let Ok(rows) = compute.cells.read(handle, move |s| s.migrations(&filter)).await else { return };
    let now = compute.now();
    for m in rows {
        if m.updated_at.unwrap_or(m.created_at) + 10 > now {
            continue;
        }
        let (source, node) = (m.source_compute.clone().unwrap_or_default(), m.source_node.clone().unwrap_or_default());
        let claimed = read(&*compute.control, |w| {
            let root = node_uuid(w, &source, &node)?;
            let consumer = w.placement.consumers.get(&m.instance_uuid)?;
            consumer.allocations.keys().find_map(|p| {
                let r = w.placement.provider(p)?.row.root;
                (r != root).then(|| w.compute.compute_nodes.get(&r).cloned()).flatten()
            })
        });
        let result = match claimed {
            Some(dest) => {
                let ip = compute.host_ip(handle, &dest.host).await;
                compute.begin_rebuild(handle, &m.uuid, &m.instance_uuid, &dest.host, &dest.node, ip).await
            }
            None => {
                compute
                    .fail_evacuation(
                        handle,
                        &m.uuid,
                        &m.instance_uuid,
                        "The evacuation was interrupted before its claim.",
                    )
                    .await
            }
        };
        if let Err(err) = result {
            tracing::warn!(migration = %m.uuid, error = %err, "re-driving an interrupted evacuation failed");
        }
    }
}
