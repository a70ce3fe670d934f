//! Live migration (`os-migrateLive`) with Nova's allocation model, the
//! transfer simulated by the agents.
//!
//! The flow spans both kinds of database, ordered so the instance always
//! holds an allocation and only one host runs it:
//!
//! 1. **API checks:** vm state `active` or `paused` with no task (409); a
//!    requested host exists (400 "Compute host H could not be found.").
//! 2. **cell:** the row goes to task `migrating` (conditional on no task)
//!    and a `live-migration` migration is inserted `accepted`, one op; a
//!    `live-migration` action starts.
//! 3. **conductor checks:** the requested host is not the source (Nova's
//!    `UnableToMigrateToSelf`), the source's service is up
//!    (`ComputeServiceUnavailable`); then the scheduler (the source
//!    excluded, a requested host forced) and the claim.
//! 4. **control:** `plan_move_claim` with the same flavor, one write: the
//!    source allocation moves to the migration consumer (`MIGRATION`) and
//!    the instance consumer claims the destination. A failure at 3 or 4
//!    (no host, the checks) puts the migration in `error` and clears the
//!    task; before 2.34 the API answers it as a 400 (Nova's synchronous
//!    live migration), from 2.34 it answered 202 already.
//! 5. **cell:** the migration goes `preparing` with its destination; the
//!    destination's agent prepares (`live_migration_prepared`: `running`,
//!    the source's agent gets `live_migrate`, which takes the agent's
//!    `--live-migration-ms`), then reports `live_migrated`.
//! 6. **Completion** (that report, or `force_complete`): `plan_confirm_move`
//!    drops the migration consumer, then the cell records it (`running` →
//!    `completed`, the row on the destination with no task).
//! 7. **Abort** (`DELETE /servers/{id}/migrations/{mid}`) and **failure**
//!    (`live_migration_failed` from either agent): `plan_revert_move`
//!    gives the instance exactly the migration consumer's allocation back,
//!    then the cell records it (`cancelled` or `error`, the row stays on
//!    the source with no task).
//!
//! The control write decides which ending wins (each expects the
//! migration consumer as the claim wrote it; the first removes it), and
//! the server shows ACTIVE only once its allocation is final. The sweep
//! ([`redrive_live_migrations`]) finishes what a crash interrupted: an open
//! live migration whose migration consumer is gone (older than 10 s) gets
//! the cell record its placement shows (`completed` if the instance holds
//! the destination, else `error`), an `accepted` one older than 10 s goes
//! on if claimed (else `error`), the agents' tasks of `preparing`/`running`
//! ones are offered again, and an open one whose server was deleted (its
//! migration consumer went with it) goes to `error`.

use std::collections::HashSet;
use std::sync::Arc;

use berth_compute_model::cell::{
    migration_status as ms, task_state, vm_state, ActionEvent, Migration, MigrationFilter,
};
use berth_compute_model::moves::{
    plan_confirm_move, plan_move_claim, plan_revert_move, MoveClaim, MoveClaimed, MIGRATION_CONSUMER_GENERATION,
};
use berth_compute_model::ComputeError;
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate, MigrationUpdate};
use uuid::Uuid;

use crate::action::{conflict, expect_task, invalid, invalid_state, set_task, statuses};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::{Task, TaskKind};
use crate::servers::{Caller, ServerRecord};
use crate::Compute;

/// The migration type of a live migration.
pub const MIGRATION_TYPE_LIVE: &str = "live-migration";
/// The action of a live migration.
pub const ACTION_LIVE_MIGRATION: &str = "live-migration";
/// The action of a force complete.
pub const ACTION_FORCE_COMPLETE: &str = "live_migration_force_complete";
/// The action of an abort.
pub const ACTION_CANCEL: &str = "live_migration_cancel";
/// The conductor's event of a live migration.
pub const EVENT_LIVE_MIGRATE: &str = "conductor_live_migrate_instance";
/// The source's event of a live migration.
pub const EVENT_LIVE_MIGRATION: &str = "compute_live_migration";

/// Statuses Nova lists as in progress (`GET /servers/{id}/migrations`).
pub const IN_PROGRESS: &[&str] = &[ms::QUEUED, ms::PREPARING, ms::RUNNING, ms::POST_MIGRATING];

/// What an `os-migrateLive` asks for (every microversion's shape upgraded
/// by the API: `block_migration` and `disk_over_commit` mean nothing to
/// fake hosts, 2.30's `force` only skips the filters in Nova).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMigrateRequest {
    /// Requested destination host.
    pub host: Option<String>,
    /// Before 2.34 the conductor's refusals are the API's answer (400).
    pub synchronous: bool,
}

/// How a running live migration ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Completed,
    Cancelled,
    Failed,
}

impl Compute {
    /// `os-migrateLive` (steps 1–5 of the module doc).
    pub async fn live_migrate_server(
        &self,
        uuid: &Uuid,
        request: LiveMigrateRequest,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let action = "os-migrateLive";
        let (instance, handle) = self.placed(uuid, action).await?;
        if let Some(host) = &request.host {
            let known = read(&*self.control, |w| w.compute.compute_nodes.values().any(|n| &n.host == host));
            if !known {
                return Err(invalid(format!("Compute host {host} could not be found.")));
            }
        }
        if !matches!(instance.vm_state.as_str(), vm_state::ACTIVE | vm_state::PAUSED) {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        let (Some(source), Some(source_node)) = (instance.host.clone(), instance.node.clone()) else {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        };
        let now = self.now();
        let flavor = instance.spec.flavor.clone();
        let migration = Migration {
            id: 0,
            uuid: Uuid::new_v4(),
            instance_uuid: *uuid,
            migration_type: MIGRATION_TYPE_LIVE.to_owned(),
            status: ms::ACCEPTED.to_owned(),
            source_compute: Some(source.clone()),
            source_node: Some(source_node),
            dest_compute: request.host.clone(),
            dest_node: None,
            dest_host: None,
            old_flavor: flavor.clone(),
            new_flavor: flavor.clone(),
            user_id: instance.user_id.clone(),
            project_id: instance.project_id.clone(),
            created_at: now,
            updated_at: Some(now),
        };
        let record = caller.action(
            uuid,
            ACTION_LIVE_MIGRATION,
            now,
            vec![ActionEvent {
                event: EVENT_LIVE_MIGRATE.to_owned(),
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
                ..expect_task(&[vm_state::ACTIVE, vm_state::PAUSED], None)
            },
            update: set_task(Some(task_state::MIGRATING), now),
        };
        let outcomes = handle.write(vec![start, CellOp::StartAction(record)]).await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", "changing"));
        }
        let refuse = |message: String| (self, Arc::clone(&handle), migration.uuid, *uuid, message, request.synchronous);
        if request.host.as_deref() == Some(source.as_str()) {
            return refused(refuse(format!("Unable to migrate instance ({uuid}) to current host ({source})."))).await;
        }
        if !self.health.is_up_at(&source, now) {
            return refused(refuse(format!("Compute service of {source} is unavailable at this time."))).await;
        }
        let ignore = vec![source.clone()];
        let mut last_reason = String::new();
        for _ in 0..self.config.schedule_retries.max(1) {
            let choices = match self.choose_destination(uuid, &flavor, request.host.clone(), None, &ignore, self.now())
            {
                Ok(choices) => choices,
                Err(reason) => {
                    last_reason = reason;
                    break;
                }
            };
            let claim = MoveClaim {
                instance: *uuid,
                migration: migration.uuid,
                old_flavor: flavor.clone(),
                new_flavor: flavor.clone(),
                choices,
                cell: handle.mapping.uuid,
                token: None,
            };
            match write(&*self.control, |w| plan_move_claim(w, &claim, self.now())) {
                Ok(MoveClaimed::Claimed(node)) => {
                    let ip = self.host_ip(&handle, &node.host).await;
                    self.begin_live(&handle, &migration.uuid, uuid, &node.host, &node.node, ip).await?;
                    return Ok(());
                }
                Ok(MoveClaimed::NoRoom) => {
                    last_reason = "There are not enough hosts available.".to_owned();
                }
                Err(err) => {
                    let err: ServiceError = err.into();
                    self.fail_accepted(&handle, &migration.uuid, uuid, &err.to_string()).await?;
                    return Err(err);
                }
            }
        }
        refused(refuse(format!("No valid host was found. {last_reason}"))).await
    }

    /// A live migration refused before its claim: `error`, the row back to
    /// no task (its allocation never moved).
    async fn fail_accepted(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        message: &str,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let update = MigrationUpdate { status: Some(ms::ERROR.to_owned()), updated_at: now, ..Default::default() };
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: *migration,
            from_statuses: statuses(&[ms::ACCEPTED]),
            update,
            instance: Some((expect_task(&[], Some(task_state::MIGRATING)), set_task(None, now))),
        }];
        if let Some(request_id) = self.action_request_id(handle, uuid, &[ACTION_LIVE_MIGRATION]).await {
            ops.push(self.finish_event(uuid, &request_id, EVENT_LIVE_MIGRATE, Some(message.to_owned())));
        }
        handle.write(ops).await?;
        Ok(())
    }

    /// Step 5: claimed; the destination prepares.
    async fn begin_live(
        &self,
        handle: &Arc<Cell>,
        migration: &Uuid,
        uuid: &Uuid,
        dest: &str,
        dest_node: &str,
        dest_ip: Option<String>,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let update = MigrationUpdate {
            status: Some(ms::PREPARING.to_owned()),
            dest_compute: Some(Some(dest.to_owned())),
            dest_node: Some(Some(dest_node.to_owned())),
            dest_host: Some(dest_ip),
            updated_at: now,
            delete: false,
        };
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: *migration,
            from_statuses: statuses(&[ms::ACCEPTED]),
            update,
            instance: Some((expect_task(&[], Some(task_state::MIGRATING)), set_task(Some(task_state::MIGRATING), now))),
        }];
        if let Some(request_id) = self.action_request_id(handle, uuid, &[ACTION_LIVE_MIGRATION]).await {
            ops.push(self.finish_event(uuid, &request_id, EVENT_LIVE_MIGRATE, None));
            ops.push(CellOp::StartEvent {
                instance: *uuid,
                request_id,
                event: EVENT_LIVE_MIGRATION.to_owned(),
                host: Some(dest.to_owned()),
                at: now,
            });
        }
        let outcomes = handle.write(ops).await?;
        if outcomes.first() == Some(&CellOutcome::Done) {
            self.hub.push(Task::live(*uuid, dest, TaskKind::LiveMigrationPrepare));
        }
        Ok(())
    }

    /// The instance's live migration with Nova's (cell-local, integer) id.
    async fn live_migration(&self, handle: &Arc<Cell>, uuid: &Uuid, id: i64) -> Result<Migration, ServiceError> {
        let filter = MigrationFilter { instance_uuid: Some(*uuid), ..Default::default() };
        let rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        rows.into_iter().find(|m| m.id == id).ok_or_else(|| {
            ServiceError::Refused(ComputeError::NotFound(format!("Migration {id} not found for instance {uuid}")))
        })
    }

    /// `GET /servers/{id}/migrations`: the live migrations in progress.
    pub async fn live_migrations_in_progress(&self, uuid: &Uuid) -> Result<Vec<Migration>, ServiceError> {
        let handle = match self.get_server(uuid).await? {
            ServerRecord::Placed { cell, .. } => self.cells.get(&cell)?,
            // Still a build request: it has no migrations.
            ServerRecord::Pending(_) => return Ok(Vec::new()),
            ServerRecord::Unreachable(_) => {
                return Err(ServiceError::Unavailable("the server's cell is not answering".into()))
            }
        };
        let filter = MigrationFilter {
            instance_uuid: Some(*uuid),
            migration_type: Some(MIGRATION_TYPE_LIVE.to_owned()),
            ..Default::default()
        };
        let mut rows = self.cells.read(&handle, move |s| s.migrations(&filter)).await?;
        rows.retain(|m| IN_PROGRESS.contains(&m.status.as_str()));
        rows.sort_by_key(|m| m.id);
        Ok(rows)
    }

    /// `GET /servers/{id}/migrations/{mid}`: Nova's 404 texts when the
    /// migration is not this server's, not live, or not in progress.
    pub async fn show_live_migration(&self, uuid: &Uuid, id: i64) -> Result<Migration, ServiceError> {
        let not_found = |message: String| ServiceError::Refused(ComputeError::NotFound(message));
        let handle = match self.get_server(uuid).await? {
            ServerRecord::Placed { cell, .. } => self.cells.get(&cell)?,
            ServerRecord::Pending(_) => {
                return Err(not_found(format!("In-progress live migration {id} is not found for server {uuid}.")))
            }
            ServerRecord::Unreachable(_) => {
                return Err(ServiceError::Unavailable("the server's cell is not answering".into()))
            }
        };
        let Ok(migration) = self.live_migration(&handle, uuid, id).await else {
            return Err(not_found(format!("In-progress live migration {id} is not found for server {uuid}.")));
        };
        if migration.migration_type != MIGRATION_TYPE_LIVE {
            return Err(not_found(format!("Migration {id} for server {uuid} is not live-migration.")));
        }
        if !IN_PROGRESS.contains(&migration.status.as_str()) {
            return Err(not_found(format!("Live migration {id} for server {uuid} is not in progress.")));
        }
        Ok(migration)
    }

    /// `force_complete` (2.22): a `running` live migration completes now
    /// (the fake transfer has nothing left to converge).
    pub async fn force_complete_live_migration(
        &self,
        uuid: &Uuid,
        id: i64,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let action = "force_complete";
        let (instance, handle) = self.placed(uuid, action).await?;
        if instance.vm_state != vm_state::ACTIVE {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if instance.task_state.as_deref() != Some(task_state::MIGRATING) {
            return Err(invalid_state(action, uuid, "task_state", instance.task_state.as_deref().unwrap_or("None")));
        }
        let migration = self.live_migration(&handle, uuid, id).await.map_err(as_invalid)?;
        if migration.status != ms::RUNNING {
            return Err(invalid_migration_state(&migration, "force complete"));
        }
        self.record_action(&handle, uuid, ACTION_FORCE_COMPLETE, caller).await?;
        if !self.end_live(&handle, &migration, Outcome::Completed, None).await? {
            return Err(invalid_migration_state(&migration, "force complete"));
        }
        Ok(())
    }

    /// Abort (2.24; 2.65 also `queued` and `preparing`): the migration
    /// `cancelled`, the source allocation given back exactly.
    pub async fn abort_live_migration(
        &self,
        uuid: &Uuid,
        id: i64,
        abort_queued: bool,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let action = "abort live migration";
        let (instance, handle) = self.placed(uuid, action).await?;
        if instance.task_state.as_deref() != Some(task_state::MIGRATING) {
            return Err(invalid_state(action, uuid, "task_state", instance.task_state.as_deref().unwrap_or("None")));
        }
        let migration = self.live_migration(&handle, uuid, id).await?;
        let mut allowed = vec![ms::RUNNING];
        if abort_queued {
            allowed.extend([ms::QUEUED, ms::PREPARING]);
        }
        if migration.migration_type != MIGRATION_TYPE_LIVE || !allowed.contains(&migration.status.as_str()) {
            return Err(invalid_migration_state(&migration, "abort live migration"));
        }
        self.record_action(&handle, uuid, ACTION_CANCEL, caller).await?;
        if !self.end_live(&handle, &migration, Outcome::Cancelled, None).await? {
            return Err(invalid_migration_state(&migration, "abort live migration"));
        }
        Ok(())
    }

    async fn record_action(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        action: &str,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let record = caller.action(uuid, action, now, Vec::new());
        handle.write(vec![CellOp::StartAction(record)]).await?;
        Ok(())
    }

    /// Steps 6 and 7. The control write decides which ending wins: confirm
    /// and revert both expect the migration consumer exactly as the claim
    /// wrote it, so only the first removes it and the others find it gone
    /// (`false`). The cell then records the ending (the row still
    /// `migrating` on the source, conditional), so a server shows ACTIVE
    /// only once its allocation is final.
    async fn end_live(
        &self,
        handle: &Arc<Cell>,
        migration: &Migration,
        outcome: Outcome,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        if !self.settle_live_allocations(migration, outcome == Outcome::Completed)? {
            return Ok(false);
        }
        self.close_live_row(handle, migration, outcome, message).await?;
        Ok(true)
    }

    /// The cell half of an ending: the migration's final status and the
    /// row (on the destination for a completion, else untouched on the
    /// source), with the task cleared.
    async fn close_live_row(
        &self,
        handle: &Arc<Cell>,
        migration: &Migration,
        outcome: Outcome,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let now = self.now();
        let uuid = migration.instance_uuid;
        let source = migration.source_compute.clone().unwrap_or_default();
        let (status, instance_update) = match outcome {
            Outcome::Completed => {
                let dest = migration.dest_compute.clone().unwrap_or_default();
                let zone = read(&*self.control, |w| {
                    w.compute.availability_zone_of_host(&dest, &self.config.scheduler.default_availability_zone)
                });
                let update = InstanceUpdate {
                    task_state: Some(None),
                    host: Some(Some(dest)),
                    node: migration.dest_node.clone().map(Some),
                    availability_zone: Some(Some(zone)),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                (ms::COMPLETED, update)
            }
            Outcome::Cancelled => (ms::CANCELLED, set_task(None, now)),
            Outcome::Failed => (ms::ERROR, set_task(None, now)),
        };
        let expect = Expect { host: Some(Some(source)), ..expect_task(&[], Some(task_state::MIGRATING)) };
        let mut ops = vec![CellOp::UpdateMigration {
            uuid: migration.uuid,
            from_statuses: statuses(&[ms::QUEUED, ms::PREPARING, ms::RUNNING]),
            update: MigrationUpdate { status: Some(status.to_owned()), updated_at: now, ..Default::default() },
            instance: Some((expect, instance_update)),
        }];
        if let Some(request_id) = self.action_request_id(handle, &uuid, &[ACTION_LIVE_MIGRATION]).await {
            ops.push(self.finish_event(&uuid, &request_id, EVENT_LIVE_MIGRATION, message.map(str::to_owned)));
        }
        let outcomes = handle.write(ops).await?;
        Ok(outcomes.first() == Some(&CellOutcome::Done))
    }

    /// The control half of an ending: confirm (the migration consumer
    /// goes) or revert (the instance gets exactly its allocation back).
    /// `false` when the migration consumer is already gone (another ending
    /// won, or the server was deleted).
    fn settle_live_allocations(&self, migration: &Migration, completed: bool) -> Result<bool, ServiceError> {
        let due = read(&*self.control, |w| w.placement.consumers.get(&migration.uuid).map(|c| c.row.generation));
        match due {
            None => Ok(false),
            Some(MIGRATION_CONSUMER_GENERATION) => {
                let written = write(&*self.control, |w| {
                    let set = if completed {
                        plan_confirm_move(w, &migration.uuid)?
                    } else {
                        plan_revert_move(
                            w,
                            &migration.instance_uuid,
                            &migration.uuid,
                            &migration.old_flavor,
                            self.now(),
                        )?
                    };
                    Ok((set, ()))
                });
                match written {
                    Ok(()) => Ok(true),
                    // Removed between the read and the write: lost the race.
                    Err(_) if read(&*self.control, |w| !w.placement.consumers.contains_key(&migration.uuid)) => {
                        Ok(false)
                    }
                    Err(err) => Err(err.into()),
                }
            }
            // Changed by someone else (a `PUT /allocations` of the
            // migration consumer): left for an operator, as cold moves do.
            Some(generation) => Err(conflict(format!(
                "The allocations of migration {} changed concurrently (consumer generation {generation}).",
                migration.uuid
            ))),
        }
    }

    /// An agent's report on a live migration (`live_migration_prepared`,
    /// `live_migrated`, `live_migration_failed`).
    pub(crate) async fn live_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let filter = MigrationFilter {
            instance_uuid: Some(*uuid),
            migration_type: Some(MIGRATION_TYPE_LIVE.to_owned()),
            ..Default::default()
        };
        let rows = self.cells.read(handle, move |s| s.migrations(&filter)).await?;
        let Some(migration) = rows.into_iter().find(|m| matches!(m.status.as_str(), ms::PREPARING | ms::RUNNING))
        else {
            return Ok(false);
        };
        let source = migration.source_compute.clone().unwrap_or_default();
        let dest = migration.dest_compute.clone().unwrap_or_default();
        match kind {
            "live_migration_prepared" if migration.status == ms::PREPARING && host == dest => {
                let now = self.now();
                let op = CellOp::UpdateMigration {
                    uuid: migration.uuid,
                    from_statuses: statuses(&[ms::PREPARING]),
                    update: MigrationUpdate {
                        status: Some(ms::RUNNING.to_owned()),
                        updated_at: now,
                        ..Default::default()
                    },
                    instance: None,
                };
                let applied = handle.write(vec![op]).await?.first() == Some(&CellOutcome::Done);
                if applied {
                    self.hub.push(Task::live(*uuid, &source, TaskKind::LiveMigrate));
                }
                Ok(applied)
            }
            "live_migrated" if migration.status == ms::RUNNING && host == source => {
                self.end_live(handle, &migration, Outcome::Completed, None).await
            }
            "live_migration_failed" if host == source || host == dest => {
                self.end_live(handle, &migration, Outcome::Failed, message).await
            }
            _ => Ok(false),
        }
    }
}

/// A refusal of the conductor's checks: recorded on the migration, and
/// the API's answer only for a synchronous (pre-2.34) request.
async fn refused(
    (compute, handle, migration, uuid, message, synchronous): (&Compute, Arc<Cell>, Uuid, Uuid, String, bool),
) -> Result<(), ServiceError> {
    compute.fail_accepted(&handle, &migration, &uuid, &message).await?;
    if synchronous {
        Err(invalid(message))
    } else {
        Ok(())
    }
}

/// Nova's `InvalidMigrationState` (400).
fn invalid_migration_state(migration: &Migration, method: &str) -> ServiceError {
    invalid(format!(
        "Migration {} state of instance {} is {}. Cannot {method} while the migration is in this state.",
        migration.id, migration.instance_uuid, migration.status
    ))
}

/// `force_complete` answers an unknown migration with 400.
fn as_invalid(err: ServiceError) -> ServiceError {
    match err {
        ServiceError::Refused(ComputeError::NotFound(message)) => invalid(message),
        other => other,
    }
}

/// The sweep's part (module doc): finish what a crash interrupted and
/// offer the local agents their live-migration tasks again.
pub(crate) async fn redrive_live_migrations(compute: &Compute, handle: &Arc<Cell>, local: &HashSet<String>) {
    let now = compute.now();
    let mut rows: Vec<Migration> = Vec::new();
    for status in [ms::ACCEPTED, ms::QUEUED, ms::PREPARING, ms::RUNNING] {
        let filter = MigrationFilter {
            migration_type: Some(MIGRATION_TYPE_LIVE.to_owned()),
            status: Some(status.to_owned()),
            ..Default::default()
        };
        let Ok(found) = compute.cells.read(handle, move |s| s.migrations(&filter)).await else { return };
        rows.extend(found);
    }
    for m in rows {
        let (held, mapped) = read(&*compute.control, |w| {
            (w.placement.consumers.contains_key(&m.uuid), w.compute.instance_mappings.contains_key(&m.instance_uuid))
        });
        if !mapped {
            // Deleted mid-migration (the delete forgot the migration
            // consumer with the instance): nothing is left to move.
            let close = CellOp::UpdateMigration {
                uuid: m.uuid,
                from_statuses: statuses(&[m.status.as_str()]),
                update: MigrationUpdate { status: Some(ms::ERROR.to_owned()), updated_at: now, ..Default::default() },
                instance: None,
            };
            if let Err(err) = handle.write(vec![close]).await {
                tracing::warn!(migration = %m.uuid, error = %err, "closing the live migration of a deleted server failed");
            }
            continue;
        }
        let stale = m.updated_at.unwrap_or(m.created_at) + 10 <= now;
        let claimed = matches!(m.status.as_str(), ms::QUEUED | ms::PREPARING | ms::RUNNING);
        if claimed && !held && stale {
            // Ended in placement, the cell write lost: where the instance
            // consumer is says which ending it was.
            let dest = m.dest_compute.clone();
            let completed = read(&*compute.control, |w| {
                berth_compute_model::choice::host_of_instance(w, &m.instance_uuid)
                    .is_some_and(|n| Some(&n.host) == dest.as_ref())
            });
            let outcome = if completed { Outcome::Completed } else { Outcome::Failed };
            let message =
                (!completed).then_some("The live migration was interrupted after its allocation was given back.");
            if let Err(err) = compute.close_live_row(handle, &m, outcome, message).await {
                tracing::warn!(migration = %m.uuid, error = %err, "closing an interrupted live migration failed");
            }
            continue;
        }
        let result = match m.status.as_str() {
            ms::ACCEPTED if stale => {
                let claimed = read(&*compute.control, |w| {
                    held.then(|| berth_compute_model::choice::host_of_instance(w, &m.instance_uuid).cloned()).flatten()
                });
                match claimed {
                    Some(node) => {
                        let ip = compute.host_ip(handle, &node.host).await;
                        compute.begin_live(handle, &m.uuid, &m.instance_uuid, &node.host, &node.node, ip).await
                    }
                    None => {
                        let message = "The live migration was interrupted before its claim.";
                        compute.fail_accepted(handle, &m.uuid, &m.instance_uuid, message).await
                    }
                }
            }
            ms::PREPARING if held => {
                if let Some(dest) = m.dest_compute.as_deref().filter(|d| local.contains(*d)) {
                    compute.hub.offer(Task::live(m.instance_uuid, dest, TaskKind::LiveMigrationPrepare));
                }
                Ok(())
            }
            ms::RUNNING if held => {
                if let Some(source) = m.source_compute.as_deref().filter(|s| local.contains(*s)) {
                    compute.hub.offer(Task::live(m.instance_uuid, source, TaskKind::LiveMigrate));
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(err) = result {
            tracing::warn!(migration = %m.uuid, error = %err, "re-driving a live migration failed");
        }
    }
}
