//! Cold moves: resize and migrate, confirm and revert, and the migration
//! records (Nova's `migrations`, one table per cell).
//!
//! A move spans both kinds of database, ordered so a failure at any point
//! leaves the instance with allocations:
//!
//! 1. **cell:** the instance goes to `resize_prep` (conditional on no task)
//!    and the migration row is inserted (`pre-migrating`), in one op;
//! 2. the scheduler proposes destinations for the new flavor (the source
//!    host excluded unless same-host resizes are allowed);
//! 3. **control:** `plan_move_claim`, one write: the resize's quota delta,
//!    the instance's source allocations moved to the migration consumer
//!    and the destination claimed by the instance consumer. Over quota:
//!    the migration row goes and the server is back as it was (403). No
//!    room: the migration goes to `error` with a fault (Nova's
//!    `NoValidHost`), the server stays as it was with its allocations;
//! 4. **cell:** the migration goes `migrating` with its destination and
//!    the instance `resize_migrating`; the source's agent hands it over
//!    (`resize_migrated`: `post-migrating`, the row gets the destination
//!    host and `resize_finish`), the destination's agent finishes
//!    (`resize_finished`: `finished`, vm state `resized` with the new
//!    flavor: `VERIFY_RESIZE`).
//!
//! Confirm and revert first win the migration in the cell (`finished` →
//! `confirming`/`reverting`, conditional, so only one of them can), then
//! make their control write (`plan_confirm_move`, `plan_revert_move`); if
//! that write is refused (the migration consumer changed meanwhile) the
//! cell row is put back and the caller gets a 409. The agent's report
//! finishes the move in the cell; it re-applies the control write when a
//! crash lost it (the write is a no-op once done). The server ends ACTIVE,
//! or STOPPED (powered off) when it was stopped before the move, as Nova.
//!
//! The sweep re-drives what a crash interrupted ([`redrive_moves`]): a
//! `pre-migrating` migration whose claim exists goes on to `migrating`; one
//! without a claim goes to `error` and frees the server.

use std::sync::Arc;

use berth_compute_model::cell::{
    migration_status as ms, power_state, task_state, vm_state, ActionEvent, Fault, Instance, Migration, MigrationFilter,
};
use berth_compute_model::choice::HostChoice;
use berth_compute_model::moves::{
    check_upsize_quota, plan_confirm_move, plan_forget_migration, plan_move_claim, plan_revert_move, MoveClaim,
    MoveClaimed, MIGRATION_CONSUMER_GENERATION,
};
use berth_compute_model::{ComputeError, Flavor, WorldChangeSet};
use berth_scheduler::{schedule, ScheduleRequest};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate, MigrationUpdate};
use uuid::Uuid;

use crate::action::{expect_task, invalid, invalid_state, set_task, statuses, MIGRATION_TYPE_EVACUATION};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::Task;
use crate::servers::{Caller, ServerRecord};
use crate::Compute;

/// The conductor's event of a move action.
pub const EVENT_COLD_MIGRATE: &str = "cold_migrate";
/// The source's event of a move action.
pub const EVENT_RESIZE_INSTANCE: &str = "compute_resize_instance";
/// The destination's event of a move action.
pub const EVENT_FINISH_RESIZE: &str = "compute_finish_resize";
/// The source's event of a confirm.
pub const EVENT_CONFIRM_RESIZE: &str = "compute_confirm_resize";
/// The destination's event of a revert.
pub const EVENT_REVERT_RESIZE: &str = "compute_revert_resize";
/// The source's event of a revert (its guest back).
pub const EVENT_FINISH_REVERT_RESIZE: &str = "compute_finish_revert_resize";

/// What to move.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveRequest {
    /// `resize` to a flavor (its `flavorid`).
    Resize {
        /// The new flavor's id.
        flavor_id: String,
        /// `OS-DCF:diskConfig` asked for (`Some(true)`: `AUTO`).
        auto_disk_config: Option<bool>,
    },
    /// `migrate` (admin), optionally to a host (2.56).
    Migrate {
        /// Requested destination host.
        host: Option<String>,
    },
}

impl MoveRequest {
    fn action(&self) -> &'static str {
        match self {
            MoveRequest::Resize { .. } => "resize",
            MoveRequest::Migrate { .. } => "migrate",
        }
    }
}

impl Compute {
    /// Where one instance that exists could go now (resize, migration,
    /// live migration, evacuation, unshelve): the scheduler on a copy of
    /// its request spec, for one instance, with `flavor`, the requested
    /// `host` forced, the spec's zone replaced when `zone` is given, the
    /// `ignore` hosts left out, and only hosts of the instance's cell
    /// considered (Nova's `requested_destination.cell`). The choices, best first, or the reason there
    /// are none (the detail of Nova's "No valid host was found.").
    pub(crate) fn choose_destination(
        &self,
        instance: &Uuid,
        flavor: &Flavor,
        host: Option<String>,
        zone: Option<Option<String>>,
        ignore: &[String],
        now: berth_compute_model::Timestamp,
    ) -> Result<Vec<HostChoice>, String> {
        let seed = self.next_seed();
        let health = self.health.at(now);
        let choices = read(&*self.control, |w| -> Result<Vec<HostChoice>, String> {
            let Some(spec) = w.compute.request_specs.get(instance) else {
                return Err("The instance has no request spec.".to_owned());
            };
            // A move stays in the instance's cell (Nova's
            // `requested_destination.cell`; cross-cell moves are not
            // supported): hosts of other cells are never considered.
            let Some(cell) = w.compute.instance_mappings.get(instance).and_then(|m| m.cell) else {
                return Err("The instance is not mapped to a cell.".to_owned());
            };
            let mut spec = spec.clone();
            spec.flavor = flavor.clone();
            spec.num_instances = 1;
            if let Some(zone) = zone {
                spec.availability_zone = zone;
            }
            spec.force_host = host;
            spec.force_node = None;
            let instances = [*instance];
            let request = ScheduleRequest {
                ignore_hosts: ignore,
                cell: Some(cell),
                now,
                ..ScheduleRequest::new(&spec, &instances, seed)
            };
            match schedule(w, &request, &health, &self.config.scheduler) {
                Ok((mut choices, _)) => Ok(choices.pop().map(|c| c.choices).unwrap_or_default()),
                Err(no_host) => Err(no_host.0),
            }
        })?;
        if choices.is_empty() {
            return Err("There are not enough hosts available.".to_owned());
        }
        Ok(choices)
    }

    /// The placed instance and its cell, or the API's refusal.
    pub(crate) async fn placed(&self, uuid: &Uuid, action: &str) -> Result<(Instance, Arc<Cell>), ServiceError> {
        match self.get_server(uuid).await? {
            ServerRecord::Placed { instance, cell, .. } => Ok((instance, self.cells.get(&cell)?)),
            ServerRecord::Pending(build) => Err(invalid_state(action, uuid, "vm_state", build.shown_state().0)),
            ServerRecord::Unreachable(_) => Err(ServiceError::Unavailable("the server's cell is not answering".into())),
        }
    }

    /// `resize` / `migrate`: start a cold move (steps 1–4 of the module
    /// doc). Returns once the destination is claimed (or the move failed
    /// with a recorded error, as Nova reports `NoValidHost` through the
    /// migration and the instance's fault).
    pub async fn move_server(&self, uuid: &Uuid, request: MoveRequest, caller: &Caller) -> Result<(), ServiceError> {
        let action = request.action();
        let (instance, handle) = self.placed(uuid, action).await?;
        if !matches!(instance.vm_state.as_str(), vm_state::ACTIVE | vm_state::STOPPED) {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        let (Some(source), Some(source_node)) = (instance.host.clone(), instance.node.clone()) else {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        };
        let old_flavor = instance.spec.flavor.clone();
        let (new_flavor, dest_host) = read(&*self.control, |w| -> Result<(Flavor, Option<String>), ServiceError> {
            match &request {
                MoveRequest::Resize { flavor_id, .. } => {
                    let not_found = || invalid(format!("Flavor {flavor_id} could not be found."));
                    let flavor = w.compute.flavors.get(flavor_id).ok_or_else(not_found)?;
                    if flavor.flavorid == old_flavor.flavorid {
                        return Err(invalid("When resizing, instances must change flavor!".into()));
                    }
                    if flavor.disabled {
                        return Err(not_found());
                    }
                    if flavor.root_gb == 0 && old_flavor.root_gb != 0 {
                        return Err(invalid(
                            "Server disk was unable to be resized because: Resize to zero disk flavor is not allowed."
                                .into(),
                        ));
                    }
                    check_upsize_quota(w, &instance.project_id, &instance.user_id, &old_flavor, flavor)?;
                    Ok((flavor.clone(), None))
                }
                MoveRequest::Migrate { host } => {
                    if let Some(host) = host {
                        if *host == source {
                            return Err(invalid("Cannot migrate to the host where the server exists.".into()));
                        }
                        if !w.compute.compute_nodes.values().any(|n| &n.host == host) {
                            return Err(invalid(format!("Compute host {host} could not be found.")));
                        }
                    }
                    Ok((old_flavor.clone(), host.clone()))
                }
            }
        })?;
        let now = self.now();
        let migration = Migration {
            id: 0,
            uuid: Uuid::new_v4(),
            instance_uuid: *uuid,
            migration_type: if matches!(request, MoveRequest::Resize { .. }) { "resize" } else { "migration" }
                .to_owned(),
            status: ms::PRE_MIGRATING.to_owned(),
            source_compute: Some(source.clone()),
            source_node: Some(source_node),
            dest_compute: None,
            dest_node: None,
            dest_host: None,
            old_flavor: old_flavor.clone(),
            new_flavor: new_flavor.clone(),
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
                event: EVENT_COLD_MIGRATE.to_owned(),
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
            expect: expect_task(&[vm_state::ACTIVE, vm_state::STOPPED], None),
            update: InstanceUpdate {
                task_state: Some(Some(task_state::RESIZE_PREP.to_owned())),
                progress: Some(0),
                // Nova's `API.resize` (migrate included) sets
                // `auto_disk_config = auto_disk_config or False`.
                auto_disk_config: Some(match &request {
                    MoveRequest::Resize { auto_disk_config, .. } => auto_disk_config.unwrap_or(false),
                    MoveRequest::Migrate { .. } => false,
                }),
                updated_at: now,
                ..InstanceUpdate::default()
            },
        };
        let outcomes = handle.write(vec![start, CellOp::StartAction(record)]).await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", "changing"));
        }
        let same_host = matches!(request, MoveRequest::Resize { .. }) && self.config.allow_resize_to_same_host;
        let ignore: Vec<String> = if same_host { Vec::new() } else { vec![source.clone()] };
        let mut last_reason = String::new();
        for _ in 0..self.config.schedule_retries.max(1) {
            let choices = match self.choose_destination(uuid, &new_flavor, dest_host.clone(), None, &ignore, now) {
                Ok(choices) => choices,
                Err(reason) => {
                    last_reason = reason;
                    break;
                }
            };
            let cell = handle.mapping.uuid;
            let claim = MoveClaim {
                instance: *uuid,
                migration: migration.uuid,
                old_flavor: old_flavor.clone(),
                new_flavor: new_flavor.clone(),
                choices,
                cell,
                // The agents' disk transfer secret: 244 random bits.
                token: Some(format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())),
            };
            let claimed = write(&*self.control, |w| plan_move_claim(w, &claim, self.now()));
            match claimed {
                Ok(MoveClaimed::Claimed(node)) => {
                    let dest_ip = self.host_ip(&handle, &node.host).await;
                    self.begin_migrating(&handle, &migration.uuid, uuid, &source, &node.host, &node.node, dest_ip)
                        .await?;
                    return Ok(());
                }
                Ok(MoveClaimed::NoRoom) => {
                    last_reason = "There are not enough hosts available.".to_owned();
                    continue;
                }
                Err(crate::control::WriteError::Refused(err @ ComputeError::OverQuota(_))) => {
                    // Refused before anything moved: the migration goes and
                    // the server is as it was.
                    let update = MigrationUpdate { delete: true, updated_at: now, ..MigrationUpdate::default() };
                    let back = (expect_task(&[], Some(task_state::RESIZE_PREP)), set_task(None, self.now()));
                    handle
                        .write(vec![
                            CellOp::UpdateMigration {
                                uuid: migration.uuid,
                                from_statuses: statuses(&[ms::PRE_MIGRATING]),
                                update,
                                instance: Some(back),
                            },
                            self.finish_event(uuid, &caller.request_id, EVENT_COLD_MIGRATE, Some(err.to_string())),
                        ])
                        .await?;
                    return Err(ServiceError::Refused(err));
                }
                Err(err) => {
                    let err: ServiceError = err.into();
                    self.fail_move(&handle, &migration.uuid, uuid, &caller.request_id, &err.to_string()).await?;
                    return Err(err);
                }
            }
        }
        let message = format!("No valid host was found. {last_reason}");
        self.fail_move(&handle, &migration.uuid, uuid, &caller.request_id, &message).await?;
        Ok(())
    }

    pub(crate) async fn host_ip(&self, handle: &Arc<Cell>, host: &str) -> Option<String> {
        let nodes = self.cells.read(handle, |s| s.compute_nodes()).await.ok()?;
        nodes.into_iter().find(|n| n.host == host).map(|n| n.host_ip)
    }

    pub(crate) fn finish_event(&self, uuid: &Uuid, request_id: &str, event: &str, error: Option<String>) -> CellOp {
        CellOp::FinishEvent {
            instance: *uuid,
            request_id: request_id.to_owned(),
            event: event.to_owned(),
            result: if error.is_some() { "Error" } else { "Success" }.to_owned(),
            traceback: error,
            at: self.now(),
        }
    }

    /// The migration goes to `error`, the instance back to no task with a
    /// fault (Nova's `_set_vm_state_and_notify`); its allocations were
    /// never moved.
    async fn fail_move(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        request_id: &str,
        message: &str,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let update = MigrationUpdate { status: Some(ms::ERROR.to_owned()), updated_at: now, ..Default::default() };
        let back = (expect_task(&[], Some(task_state::RESIZE_PREP)), set_task(None, now));
        handle
            .write(vec![
                CellOp::UpdateMigration {
                    uuid: *migration,
                    from_statuses: statuses(&[ms::PRE_MIGRATING]),
                    update,
                    instance: Some(back),
                },
                CellOp::AddFault(Fault {
                    instance_uuid: *uuid,
                    code: 400,
                    message: message.to_owned(),
                    details: message.to_owned(),
                    host: None,
                    created_at: now,
                }),
                self.finish_event(uuid, request_id, EVENT_COLD_MIGRATE, Some(message.to_owned())),
            ])
            .await?;
        Ok(())
    }

    /// Step 4: the claim is made; the source's agent gets the hand-over.
    #[expect(clippy::too_many_arguments, reason = "the move's coordinates, each needed once")]
    async fn begin_migrating(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        source: &str,
        dest: &str,
        dest_node: &str,
        dest_ip: Option<String>,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let update = MigrationUpdate {
            status: Some(ms::MIGRATING.to_owned()),
            dest_compute: Some(Some(dest.to_owned())),
            dest_node: Some(Some(dest_node.to_owned())),
            dest_host: Some(dest_ip),
            updated_at: now,
            delete: false,
        };
        let instance =
            (expect_task(&[], Some(task_state::RESIZE_PREP)), set_task(Some(task_state::RESIZE_MIGRATING), now));
        let request_id = self.move_request_id(handle, uuid).await;
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: *migration,
            from_statuses: statuses(&[ms::PRE_MIGRATING]),
            update,
            instance: Some(instance),
        }];
        if let Some(request_id) = &request_id {
            ops.push(self.finish_event(uuid, request_id, EVENT_COLD_MIGRATE, None));
            ops.push(CellOp::StartEvent {
                instance: *uuid,
                request_id: request_id.clone(),
                event: EVENT_RESIZE_INSTANCE.to_owned(),
                host: Some(source.to_owned()),
                at: now,
            });
        }
        let outcomes = handle.write(ops).await?;
        if outcomes.first() == Some(&CellOutcome::Done) {
            if let Some(task) = Task::new(*uuid, source, task_state::RESIZE_MIGRATING) {
                self.hub.push(task);
            }
        }
        Ok(())
    }

    /// The request id of the instance's latest move action.
    async fn move_request_id(&self, handle: &Arc<Cell>, uuid: &Uuid) -> Option<String> {
        self.action_request_id(handle, uuid, &["resize", "migrate", "confirmResize", "revertResize"]).await
    }

    pub(crate) async fn action_request_id(&self, handle: &Arc<Cell>, uuid: &Uuid, names: &[&str]) -> Option<String> {
        let id = *uuid;
        let actions = self.cells.read(handle, move |s| s.instance_actions(&id)).await.ok()?;
        actions.into_iter().rev().find(|a| names.contains(&a.action.as_str())).map(|a| a.request_id)
    }

    /// The instance's newest migration in `status`.
    async fn migration_in(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        status: &str,
    ) -> Result<Option<Migration>, ServiceError> {
        let filter =
            MigrationFilter { instance_uuid: Some(*uuid), status: Some(status.to_owned()), ..Default::default() };
        let rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        Ok(rows.into_iter().max_by_key(|m| (m.created_at, m.id)))
    }

    /// The ops that error a move out (Nova's migration `error` and
    /// `_set_vm_state_and_notify`): the migration from `from` to `error`
    /// and, when the row is as `expect` says, the server to ERROR with no
    /// task, both in the migration's conditional op; the fault.
    pub(crate) fn error_out_ops(
        &self,
        migration: &Uuid,
        from: &str,
        expect: Expect,
        uuid: &Uuid,
        (code, message, host): (i64, &str, Option<&str>),
    ) -> Vec<CellOp> {
        let now = self.now();
        let instance = InstanceUpdate {
            vm_state: Some(vm_state::ERROR.to_owned()),
            task_state: Some(None),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        vec![
            CellOp::UpdateMigration {
                uuid: *migration,
                from_statuses: statuses(&[from]),
                update: MigrationUpdate { status: Some(ms::ERROR.to_owned()), updated_at: now, ..Default::default() },
                instance: Some((expect, instance)),
            },
            CellOp::AddFault(Fault {
                instance_uuid: *uuid,
                code,
                message: message.to_owned(),
                details: message.to_owned(),
                host: host.map(str::to_owned),
                created_at: now,
            }),
        ]
    }

    /// `confirmResize` (`confirm: true`) or `revertResize`.
    pub async fn finish_move(&self, uuid: &Uuid, confirm: bool, caller: &Caller) -> Result<(), ServiceError> {
        let action = if confirm { "confirmResize" } else { "revertResize" };
        let (instance, handle) = self.placed(uuid, action).await?;
        if instance.vm_state != vm_state::RESIZED {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        let Some(migration) = self.migration_in(&handle, uuid, ms::FINISHED).await? else {
            return Err(invalid("Instance has not been resized.".into()));
        };
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        let now = self.now();
        let (to, task) = if confirm {
            (ms::CONFIRMING, task_state::RESIZE_CONFIRMING)
        } else {
            (ms::REVERTING, task_state::RESIZE_REVERTING)
        };
        let record = caller.action(uuid, action, now, Vec::new());
        let win = CellOp::UpdateMigration {
            uuid: migration.uuid,
            from_statuses: statuses(&[ms::FINISHED]),
            update: MigrationUpdate { status: Some(to.to_owned()), updated_at: now, ..Default::default() },
            instance: Some((expect_task(&[vm_state::RESIZED], None), set_task(Some(task), now))),
        };
        let outcomes = handle.write(vec![win]).await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        // Tests hold here while the sweep hands the task to the agent.
        self.hooks.pass("before-finish-move-write").await;
        let written = write(&*self.control, |w| {
            let set = if confirm {
                plan_confirm_move(w, &migration.uuid)?
            } else {
                plan_revert_move(w, uuid, &migration.uuid, &migration.old_flavor, self.now())?
            };
            Ok((set, ()))
        });
        // Once the cell row says `confirming`/`reverting`, the sweep may
        // hand the task to the agent, whose report makes this same control
        // write when it is still due (crash recovery). If that report won
        // the race, the migration consumer is gone because of this very
        // confirm or revert (the cell win above is exclusive): done, not a
        // conflict. Putting the row back then would strand the server in
        // VERIFY_RESIZE with nothing left to confirm.
        let done_by_agent =
            written.is_err() && read(&*self.control, |w| !w.placement.consumers.contains_key(&migration.uuid));
        if let (Err(err), false) = (written, done_by_agent) {
            // Put the migration back as it was: nothing was changed in
            // placement, and the caller learns why.
            let back = CellOp::UpdateMigration {
                uuid: migration.uuid,
                from_statuses: statuses(&[to]),
                update: MigrationUpdate {
                    status: Some(ms::FINISHED.to_owned()),
                    updated_at: self.now(),
                    ..Default::default()
                },
                instance: Some((expect_task(&[vm_state::RESIZED], Some(task)), set_task(None, self.now()))),
            };
            handle.write(vec![back]).await?;
            return Err(err.into());
        }
        let (host, event) = if confirm {
            (migration.source_compute.clone(), EVENT_CONFIRM_RESIZE)
        } else {
            (migration.dest_compute.clone(), EVENT_REVERT_RESIZE)
        };
        let mut record = record;
        record.events.push(ActionEvent {
            event: event.to_owned(),
            start_time: now,
            finish_time: None,
            result: None,
            traceback: None,
            host: host.clone(),
            details: None,
        });
        handle.write(vec![CellOp::StartAction(record)]).await?;
        if let Some(task) = host.and_then(|h| Task::new(*uuid, &h, task)) {
            self.hub.push(task);
        }
        Ok(())
    }

    /// An agent's report on a move (`resize_migrated`, `resize_finished`,
    /// `resize_confirmed`, `resize_reverted`).
    ///
    /// A revert between two hosts is two reports, as Nova's
    /// `revert_resize` and `finish_revert_resize`: the destination's
    /// (its copy gone) moves the row back to the source with the old
    /// flavor, the migration to `reverted` and the task to the source,
    /// the row still `resize_reverting`; the source's (its guest back)
    /// ends the task. Until it does, the sweep offers the source its task
    /// again, so a lost one is not a server stranded with no guest.
    pub(crate) async fn move_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
    ) -> Result<bool, ServiceError> {
        let (from, task) = match kind {
            "resize_migrated" => (ms::MIGRATING, task_state::RESIZE_MIGRATING),
            "resize_finished" => (ms::POST_MIGRATING, task_state::RESIZE_FINISH),
            "resize_confirmed" => (ms::CONFIRMING, task_state::RESIZE_CONFIRMING),
            _ => (ms::REVERTING, task_state::RESIZE_REVERTING),
        };
        let Some(migration) = self.migration_in(handle, uuid, from).await? else {
            if kind == "resize_reverted" {
                return self.source_reverted(handle, uuid, host).await;
            }
            return Ok(false);
        };
        let now = self.now();
        let request_id = self.move_request_id(handle, uuid).await;
        let source = migration.source_compute.clone().unwrap_or_default();
        let dest = migration.dest_compute.clone().unwrap_or_default();
        let reporter = if kind == "resize_migrated" || kind == "resize_confirmed" { &source } else { &dest };
        if host != reporter {
            return Ok(false);
        }
        // Confirm and revert made their control write in the API; a crash
        // may have lost it, so it is made here when still due (a no-op
        // once done: the migration consumer is gone).
        if kind == "resize_confirmed" || kind == "resize_reverted" {
            let due = read(&*self.control, |w| w.placement.consumers.get(&migration.uuid).map(|c| c.row.generation));
            match due {
                Some(MIGRATION_CONSUMER_GENERATION) => {
                    let written = write(&*self.control, |w| {
                        let set = if kind == "resize_confirmed" {
                            plan_confirm_move(w, &migration.uuid)?
                        } else {
                            plan_revert_move(w, uuid, &migration.uuid, &migration.old_flavor, self.now())?
                        };
                        Ok((set, ()))
                    });
                    // The API's own write of this confirm or revert may
                    // have landed since the read above (it races this
                    // report, see `finish_move`): the consumer is gone
                    // because of it, so the write is done, not failed.
                    // Failing the report here left the server in
                    // `resize_confirming` until the sweep's resend.
                    if let Err(err) = written {
                        if read(&*self.control, |w| w.placement.consumers.contains_key(&migration.uuid)) {
                            return Err(err.into());
                        }
                    }
                }
                // Changed by someone else: leave the row for an operator.
                Some(_) => return Ok(false),
                None => {}
            }
        }
        // A server stopped before the move stays stopped: Nova's confirm
        // sets STOPPED when the guest is powered off, its revert powers on
        // only when `old_vm_state` was not STOPPED. A server in
        // VERIFY_RESIZE cannot be started or stopped, so its power state
        // is still the one it had before the move.
        let (end_vm_state, end_power_state) = if kind == "resize_confirmed" || kind == "resize_reverted" {
            let id = *uuid;
            let row = self.cells.read(handle, move |s| s.instance(&id)).await?;
            if row.is_some_and(|r| r.power_state == power_state::SHUTDOWN) {
                (vm_state::STOPPED, power_state::SHUTDOWN)
            } else {
                (vm_state::ACTIVE, power_state::RUNNING)
            }
        } else {
            (vm_state::ACTIVE, power_state::RUNNING)
        };
        let (to, instance_update, event, next) = match kind {
            "resize_migrated" => (
                ms::POST_MIGRATING,
                InstanceUpdate {
                    task_state: Some(Some(task_state::RESIZE_FINISH.to_owned())),
                    host: Some(Some(dest.clone())),
                    node: migration.dest_node.clone().map(Some),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
                EVENT_RESIZE_INSTANCE,
                Some((dest.clone(), task_state::RESIZE_FINISH, EVENT_FINISH_RESIZE)),
            ),
            "resize_finished" => (
                ms::FINISHED,
                InstanceUpdate {
                    vm_state: Some(vm_state::RESIZED.to_owned()),
                    task_state: Some(None),
                    flavor: Some(migration.new_flavor.clone()),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
                EVENT_FINISH_RESIZE,
                None,
            ),
            "resize_confirmed" => (
                ms::CONFIRMED,
                InstanceUpdate {
                    vm_state: Some(end_vm_state.to_owned()),
                    task_state: Some(None),
                    power_state: Some(end_power_state),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
                EVENT_CONFIRM_RESIZE,
                None,
            ),
            // Back on the source with the old flavor. Between two hosts
            // the task stays open there until the source's own report
            // (`source_reverted`); on one host this report ends it.
            _ => {
                let two_hosts = !source.is_empty() && source != dest;
                let mut update = InstanceUpdate {
                    host: Some(Some(source.clone())),
                    node: migration.source_node.clone().map(Some),
                    flavor: Some(migration.old_flavor.clone()),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                if !two_hosts {
                    update.vm_state = Some(end_vm_state.to_owned());
                    update.task_state = Some(None);
                    update.power_state = Some(end_power_state);
                }
                let next =
                    two_hosts.then(|| (source.clone(), task_state::RESIZE_REVERTING, EVENT_FINISH_REVERT_RESIZE));
                (ms::REVERTED, update, EVENT_REVERT_RESIZE, next)
            }
        };
        // The row names the source until the hand-over, the destination
        // after it (a confirm is reported by the source while the row
        // already names the destination).
        let row_host = if kind == "resize_migrated" { &source } else { &dest };
        let expect = Expect { host: Some(Some(row_host.clone())), ..expect_task(&[], Some(task)) };
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: migration.uuid,
            from_statuses: statuses(&[from]),
            update: MigrationUpdate { status: Some(to.to_owned()), updated_at: now, ..Default::default() },
            instance: Some((expect, instance_update)),
        }];
        if let Some(request_id) = &request_id {
            ops.push(self.finish_event(uuid, request_id, event, None));
            if let Some((host, _, next_event)) = &next {
                ops.push(CellOp::StartEvent {
                    instance: *uuid,
                    request_id: request_id.clone(),
                    event: (*next_event).to_owned(),
                    host: Some(host.clone()),
                    at: now,
                });
            }
        }
        let outcomes = handle.write(ops).await?;
        let applied = outcomes.first() == Some(&CellOutcome::Done);
        if applied {
            // The next step's host gets its task (a revert's source: the
            // same task, which its agent tells apart by the migration it
            // names).
            if let Some((host, task, _)) = next {
                if let Some(task) = Task::new(*uuid, &host, task) {
                    self.hub.push(task);
                }
            }
        }
        Ok(applied)
    }

    /// An agent's report that a step of a cold move failed
    /// (`move_failed`, naming the step's task): the server goes to ERROR
    /// with the failure as its fault and the migration to `error`, in one
    /// cell write, as Nova's `_error_out_instance_on_exception`. A
    /// hand-over that failed on the source first gives the server's
    /// allocations back to the source, where its guest still is; after the
    /// hand-over both hosts' stay held (the disk on the source, the row on
    /// the destination) until the server is deleted, which frees both.
    pub(crate) async fn move_failed(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        host: &str,
        task: Option<&str>,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let id = *uuid;
        let Some(row) = self.cells.read(handle, move |s| s.instance(&id)).await? else { return Ok(false) };
        // The step: the task's state (`instance:state@host`), else the row's.
        let step = task
            .and_then(|t| t.split_once(':'))
            .and_then(|(_, rest)| rest.rsplit_once('@'))
            .map(|(state, _)| state.to_owned())
            .or_else(|| row.task_state.clone());
        let Some(step) = step else { return Ok(false) };
        let filter = MigrationFilter { instance_uuid: Some(*uuid), ..Default::default() };
        let mut rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        rows.sort_by_key(|m| std::cmp::Reverse((m.created_at, m.id)));
        let in_status = |status: &str| rows.iter().find(|m| m.status == status).cloned();
        let source_of = |m: &Migration| m.source_compute.clone().unwrap_or_default();
        let dest_of = |m: &Migration| m.dest_compute.clone().unwrap_or_default();
        // (migration, the reporter and the row's host, the step's event)
        let found = match step.as_str() {
            task_state::RESIZE_MIGRATING => {
                in_status(ms::MIGRATING).map(|m| (source_of(&m), source_of(&m), EVENT_RESIZE_INSTANCE, m))
            }
            task_state::RESIZE_FINISH => {
                in_status(ms::POST_MIGRATING).map(|m| (dest_of(&m), dest_of(&m), EVENT_FINISH_RESIZE, m))
            }
            task_state::RESIZE_CONFIRMING => {
                in_status(ms::CONFIRMING).map(|m| (source_of(&m), dest_of(&m), EVENT_CONFIRM_RESIZE, m))
            }
            task_state::RESIZE_REVERTING => match in_status(ms::REVERTING) {
                Some(m) => Some((dest_of(&m), dest_of(&m), EVENT_REVERT_RESIZE, m)),
                None => in_status(ms::REVERTED).map(|m| (source_of(&m), source_of(&m), EVENT_FINISH_REVERT_RESIZE, m)),
            },
            _ => None,
        };
        let Some((reporter, row_host, event, migration)) = found else { return Ok(false) };
        if host != reporter
            || row.host.as_deref() != Some(row_host.as_str())
            || row.task_state.as_deref() != Some(&step)
        {
            return Ok(false);
        }
        // Failed before the guest left the source: its allocations go back
        // there (the same write as a revert's, when still due).
        if step == task_state::RESIZE_MIGRATING {
            let due = read(&*self.control, |w| w.placement.consumers.get(&migration.uuid).map(|c| c.row.generation));
            if due == Some(MIGRATION_CONSUMER_GENERATION) {
                write(&*self.control, |w| {
                    Ok((plan_revert_move(w, uuid, &migration.uuid, &migration.old_flavor, self.now())?, ()))
                })?;
            }
        }
        let message = message
            .filter(|m| !m.is_empty())
            .map_or_else(|| format!("The move of instance {uuid} failed on {host}."), str::to_owned);
        let expect = Expect { host: Some(Some(row_host)), ..expect_task(&[], Some(&step)) };
        let mut ops = self.error_out_ops(&migration.uuid, &migration.status, expect, uuid, (500, &message, Some(host)));
        if let Some(request_id) = self.move_request_id(handle, uuid).await {
            ops.push(self.finish_event(uuid, &request_id, event, Some(message)));
        }
        let applied = handle.write(ops).await?.first() == Some(&CellOutcome::Done);
        if applied {
            tracing::warn!(instance = %uuid, %host, step, "a step of a cold move failed: the server is in ERROR");
        }
        Ok(applied)
    }

    /// The source's report of a revert between two hosts (its guest back,
    /// after the destination's report moved the row there): the task
    /// ends, the server as it was before the move.
    async fn source_reverted(&self, handle: &Arc<Cell>, uuid: &Uuid, host: &str) -> Result<bool, ServiceError> {
        let Some(migration) = self.migration_in(handle, uuid, ms::REVERTED).await? else { return Ok(false) };
        let source = migration.source_compute.clone().unwrap_or_default();
        if host != source || migration.dest_compute.as_deref() == Some(source.as_str()) {
            return Ok(false);
        }
        let id = *uuid;
        let row = self.cells.read(handle, move |s| s.instance(&id)).await?;
        let stopped = row.is_some_and(|r| r.power_state == power_state::SHUTDOWN);
        let (vm, power) =
            if stopped { (vm_state::STOPPED, power_state::SHUTDOWN) } else { (vm_state::ACTIVE, power_state::RUNNING) };
        let now = self.now();
        let expect =
            Expect { host: Some(Some(source.clone())), ..expect_task(&[], Some(task_state::RESIZE_REVERTING)) };
        let update = InstanceUpdate {
            vm_state: Some(vm.to_owned()),
            task_state: Some(None),
            power_state: Some(power),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let mut ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }];
        if let Some(request_id) = self.move_request_id(handle, uuid).await {
            ops.push(self.finish_event(uuid, &request_id, EVENT_FINISH_REVERT_RESIZE, None));
        }
        Ok(handle.write(ops).await?.first() == Some(&CellOutcome::Done))
    }

    /// Migrations across every cell matching `filter`, newest first
    /// (`created_at`, then `id`, descending). A cell that does not answer
    /// is skipped.
    pub async fn list_migrations(&self, filter: &MigrationFilter) -> Result<Vec<Migration>, ServiceError> {
        let mut out = Vec::new();
        for mapping in self.cell_mappings() {
            let Ok(handle) = self.cells.get(&mapping) else { continue };
            let filter = filter.clone();
            match self.cells.read(&handle, move |s| s.migrations(&filter)).await {
                Ok(rows) => out.extend(rows),
                Err(err) => tracing::warn!(cell = %mapping.name, error = %err, "migrations of a cell skipped"),
            }
        }
        out.sort_by_key(|m| std::cmp::Reverse((m.created_at, m.id, m.uuid)));
        Ok(out)
    }

    /// An instance's migrations whose consumers may still hold a host:
    /// those not over, and those that failed (`error`: a cold move that
    /// failed after its hand-over keeps its source until the delete);
    /// not the confirmed or reverted ones.
    pub(crate) async fn open_migrations(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
    ) -> Result<Vec<Migration>, ServiceError> {
        let filter = MigrationFilter { instance_uuid: Some(*uuid), ..Default::default() };
        let rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        Ok(rows.into_iter().filter(|m| !matches!(m.status.as_str(), ms::CONFIRMED | ms::REVERTED)).collect())
    }

    /// Migration consumers of an instance being deleted (a move not
    /// over, or one that failed holding its source), so the delete
    /// forgets them with the instance.
    pub(crate) async fn forget_migrations(&self, handle: &Arc<Cell>, uuid: &Uuid) -> Result<(), ServiceError> {
        let open: Vec<Uuid> = self.open_migrations(handle, uuid).await?.iter().map(|m| m.uuid).collect();
        if open.is_empty() {
            return Ok(());
        }
        write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            for m in &open {
                set.extend(plan_forget_migration(w, m));
            }
            Ok((set, ()))
        })?;
        Ok(())
    }
}

/// Confirms the cold moves that have waited in `VERIFY_RESIZE` (their
/// migration `finished`) for `resize_confirm_window` seconds, as Nova's
/// `_poll_unconfirmed_resizes` does: the confirm of the API, recorded as
/// the server's owner's `confirmResize`. Each confirm first wins the
/// migration in the cell, so processes sweeping at once, or a user
/// confirming or reverting meanwhile, never confirm twice.
pub(crate) async fn confirm_due(compute: &Compute, handle: &Arc<Cell>) {
    let window = compute.config.resize_confirm_window;
    if window <= 0 {
        return;
    }
    let filter = MigrationFilter { status: Some(ms::FINISHED.to_owned()), ..Default::default() };
    let Ok(rows) = compute.cells.read(handle, move |s| s.migrations(&filter)).await else { return };
    let now = compute.now();
    for migration in rows {
        // Timestamps are whole seconds, truncated: the move may have
        // finished up to a second after its stamp, so only a stamp more
        // than `window` seconds old is sure to have waited the window.
        if now - migration.updated_at.unwrap_or(migration.created_at) <= window {
            continue;
        }
        let caller = Caller {
            request_id: format!("req-{}", Uuid::new_v4()),
            user_id: migration.user_id.clone(),
            project_id: migration.project_id.clone(),
        };
        match compute.finish_move(&migration.instance_uuid, true, &caller).await {
            Ok(()) => {
                compute.metrics.resizes_auto_confirmed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(instance = %migration.instance_uuid, migration = %migration.uuid, "resize confirmed after resize_confirm_window");
            }
            Err(err) => {
                tracing::warn!(instance = %migration.instance_uuid, error = %err, "automatic resize confirm failed")
            }
        }
    }
}

/// Finish moves a crash interrupted between the cell and the control
/// write: a `pre-migrating` migration older than 10 s whose claim exists
/// goes on to `migrating` (and the source's agent gets its task); one
/// without a claim goes to `error` and the server back to no task.
pub(crate) async fn redrive_moves(compute: &Compute, handle: &Arc<Cell>) {
    let filter = MigrationFilter { status: Some(ms::PRE_MIGRATING.to_owned()), ..Default::default() };
    let Ok(rows) = compute.cells.read(handle, move |s| s.migrations(&filter)).await else { return };
    let now = compute.now();
    // Evacuations have their own re-drive (`evacuate::redrive_evacuations`).
    for m in rows.into_iter().filter(|m| m.migration_type != MIGRATION_TYPE_EVACUATION) {
        if m.updated_at.unwrap_or(m.created_at) + 10 > now {
            continue;
        }
        let claimed = read(&*compute.control, |w| {
            w.placement
                .consumers
                .contains_key(&m.uuid)
                .then(|| berth_compute_model::choice::host_of_instance(w, &m.instance_uuid).cloned())
                .flatten()
        });
        let request_id = compute.move_request_id(handle, &m.instance_uuid).await.unwrap_or_default();
        let result = match claimed {
            Some(node) => {
                let source = m.source_compute.clone().unwrap_or_default();
                let ip = compute.host_ip(handle, &node.host).await;
                compute.begin_migrating(handle, &m.uuid, &m.instance_uuid, &source, &node.host, &node.node, ip).await
            }
            None => {
                let message = "The move was interrupted before its claim.";
                compute.fail_move(handle, &m.uuid, &m.instance_uuid, &request_id, message).await
            }
        };
        if let Err(err) = result {
            tracing::warn!(migration = %m.uuid, error = %err, "re-driving an interrupted move failed");
        }
    }
}
