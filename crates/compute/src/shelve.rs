//! Shelve, shelve-offload and unshelve (Nova's `os-shelve` actions).
//!
//! - `shelve`: the row goes to `shelving` and its host's agent powers the
//!   server off (`shelved`: vm state `shelved`, SHELVED, allocations
//!   kept). The `<name>-shelved` snapshot image is recorded `queued`
//!   before the task (`plan_queue_shelve_snapshot`) and the host uploads
//!   the server's disk into it through the image API, as for
//!   `createImage`; the report makes sure it exists
//!   (`plan_shelve_snapshot`). With `shelved_offload_time`
//!   0 (Nova's default) the same update starts the offload
//!   (`shelving_offloading`); with N > 0 the sweep
//!   offloads servers shelved for N seconds; with -1 never.
//! - `shelveOffload` / the offload: the agent removes the server
//!   (`offloaded`); its allocations go first (`plan_offload`, control),
//!   then the row loses host and node: SHELVED_OFFLOADED. The instance
//!   mapping and request spec stay, so it still counts for `instances`
//!   quota but not for cores or RAM (counted from placement).
//! - `unshelve`: a SHELVED server is powered on by its host. A
//!   SHELVED_OFFLOADED one is scheduled again (2.77 zone, 2.91 host) and
//!   claimed by `plan_unshelve_claim`, whose one write re-checks cores and
//!   RAM quota (403 `Quota exceeded for resources: ['cores']`: the server
//!   stays SHELVED_OFFLOADED), capacity and the group's policy; then the
//!   row gets its host and the agent spawns it (`unshelved`: ACTIVE; the
//!   snapshot is deleted, as it is when the server is deleted). No
//!   valid host leaves it SHELVED_OFFLOADED with a fault (Nova's
//!   conductor).

use std::sync::Arc;

use berth_compute_model::cell::{power_state, task_state, vm_state, ActionEvent, Fault};
use berth_compute_model::moves::MoveClaimed;
use berth_compute_model::rehome::{
    check_unshelve_quota, plan_drop_shelve_snapshot, plan_offload, plan_queue_shelve_snapshot, plan_shelve_snapshot,
    plan_unshelve_claim, shelved_image_id, ShelveSnapshot, UnshelveClaim,
};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::action::{conflict, expect_task, invalid, invalid_state};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::Task;
use crate::servers::Caller;
use crate::Compute;

/// The conductor's event of an unshelve.
pub const EVENT_UNSHELVE: &str = "conductor_unshelve_instance";

/// What an `unshelve` asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnshelveRequest {
    /// 2.77: `Some(Some(zone))` pins, `Some(None)` (2.91 `null`) unpins,
    /// `None` keeps the request spec's zone.
    pub availability_zone: Option<Option<String>>,
    /// 2.91: a host to unshelve to (admin).
    pub host: Option<String>,
}

impl Compute {
    /// Put the row in `task` (from `vm_states`, no task), record `action`
    /// and hand the host's agent its task.
    async fn host_task(
        &self,
        uuid: &Uuid,
        action: &str,
        vm_states: &[&str],
        task: &str,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let (instance, handle) = self.placed(uuid, action).await?;
        if !vm_states.contains(&instance.vm_state.as_str()) {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(current) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", current));
        }
        let Some(host) = instance.host.clone() else {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        };
        let now = self.now();
        let ops = vec![
            CellOp::UpdateInstance {
                uuid: *uuid,
                expect: expect_task(vm_states, None),
                update: InstanceUpdate {
                    task_state: Some(Some(task.to_owned())),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
            },
            CellOp::StartAction(caller.action(uuid, action, now, Vec::new())),
        ];
        if handle.write(ops).await?.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", "changing"));
        }
        if let Some(task) = Task::new(*uuid, &host, task) {
            self.hub.push(task);
        }
        Ok(())
    }

    /// `shelve`: the `<name>-shelved` image is recorded (`queued`) before
    /// the host gets its task, so the host uploads the server's disk into
    /// it; a shelve refused afterwards takes it away again.
    pub async fn shelve_server(&self, uuid: &Uuid, caller: &Caller) -> Result<(), ServiceError> {
        let from = [vm_state::ACTIVE, vm_state::STOPPED, vm_state::PAUSED, vm_state::SUSPENDED];
        let (instance, _) = self.placed(uuid, "shelve").await?;
        let mut recorded = false;
        if from.contains(&instance.vm_state.as_str()) && instance.task_state.is_none() {
            let snapshot = ShelveSnapshot {
                instance: *uuid,
                display_name: &instance.spec.display_name,
                project_id: &instance.project_id,
                user_id: &instance.user_id,
                image_ref: instance.spec.image_ref,
                image_properties: &instance.spec.image_properties,
            };
            let now = self.now();
            // A leftover of a crash is replaced: its data goes first.
            self.remove_image_data(&shelved_image_id(uuid));
            recorded = write(&*self.control, |w| Ok(plan_queue_shelve_snapshot(w, &snapshot, now)))?;
        }
        let started = self.host_task(uuid, "shelve", &from, task_state::SHELVING, caller).await;
        if started.is_err() && recorded {
            write(&*self.control, |w| Ok((plan_drop_shelve_snapshot(w, uuid), ())))?;
        }
        started
    }

    /// `shelveOffload`.
    pub async fn shelve_offload_server(&self, uuid: &Uuid, caller: &Caller) -> Result<(), ServiceError> {
        self.host_task(uuid, "shelveOffload", &[vm_state::SHELVED], task_state::SHELVING_OFFLOADING, caller).await
    }

    /// `unshelve` (see the module doc).
    pub async fn unshelve_server(
        &self,
        uuid: &Uuid,
        request: UnshelveRequest,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let action = "unshelve";
        let (instance, handle) = self.placed(uuid, action).await?;
        let offloaded = instance.vm_state == vm_state::SHELVED_OFFLOADED;
        if !offloaded && instance.vm_state != vm_state::SHELVED {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
        if offloaded {
            read(&*self.control, |w| {
                check_unshelve_quota(w, &instance.project_id, &instance.user_id, &instance.spec.flavor)
            })?;
        }
        if (request.availability_zone.is_some() || request.host.is_some()) && !offloaded {
            return Err(conflict(format!(
                "Specifying an availability zone or a host when unshelving server \"{uuid}\" with status \"{}\" is \
                 not supported. The server status must be SHELVED_OFFLOADED.",
                berth_compute_model::cell::status_from_state(&instance.vm_state, None)
            )));
        }
        if !offloaded {
            return self.host_task(uuid, action, &[vm_state::SHELVED], task_state::UNSHELVING, caller).await;
        }
        let default_zone = self.config.scheduler.default_availability_zone.clone();
        let spec_zone =
            read(&*self.control, |w| w.compute.request_specs.get(uuid).and_then(|s| s.availability_zone.clone()));
        let zone_after = match &request.availability_zone {
            Some(zone) => zone.clone(),
            None => spec_zone,
        };
        read(&*self.control, |w| -> Result<(), ServiceError> {
            let zone_of = |host: &str| w.compute.availability_zone_of_host(host, &default_zone);
            if let Some(Some(zone)) = &request.availability_zone {
                if !w.compute.compute_nodes.values().any(|n| &zone_of(&n.host) == zone) {
                    return Err(invalid("The requested availability zone is not available".into()));
                }
            }
            if let Some(host) = &request.host {
                if !w.compute.compute_nodes.values().any(|n| &n.host == host) {
                    return Err(invalid(format!("Compute host {host} could not be found.")));
                }
                if let Some(zone) = &zone_after {
                    if &zone_of(host) != zone {
                        return Err(conflict(format!("Host \"{host}\" is not in the availability zone \"{zone}\".")));
                    }
                }
            }
            Ok(())
        })?;
        let now = self.now();
        let event = ActionEvent {
            event: EVENT_UNSHELVE.to_owned(),
            start_time: now,
            finish_time: None,
            result: None,
            traceback: None,
            host: None,
            details: None,
        };
        let ops = vec![
            CellOp::UpdateInstance {
                uuid: *uuid,
                expect: Expect { host: Some(None), ..expect_task(&[vm_state::SHELVED_OFFLOADED], None) },
                update: InstanceUpdate {
                    task_state: Some(Some(task_state::UNSHELVING.to_owned())),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
            },
            CellOp::StartAction(caller.action(uuid, action, now, vec![event])),
        ];
        if handle.write(ops).await?.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state(action, uuid, "task_state", "changing"));
        }
        // Tests hold here to crash between the two.
        self.hooks.pass("before-unshelve-claim").await;
        let mut last_reason = String::new();
        for _ in 0..self.config.schedule_retries.max(1) {
            let zone = Some(zone_after.clone());
            let choices =
                match self.choose_destination(uuid, &instance.spec.flavor, request.host.clone(), zone, &[], self.now())
                {
                    Ok(choices) => choices,
                    Err(reason) => {
                        last_reason = reason;
                        break;
                    }
                };
            let claim = UnshelveClaim {
                instance: *uuid,
                project_id: instance.project_id.clone(),
                user_id: instance.user_id.clone(),
                flavor: instance.spec.flavor.clone(),
                choices,
                cell: handle.mapping.uuid,
                availability_zone: request.availability_zone.clone(),
            };
            match write(&*self.control, |w| plan_unshelve_claim(w, &claim, self.now())) {
                Ok(MoveClaimed::Claimed(node)) => {
                    // Tests hold here to lose the cell update in a crash.
                    self.hooks.pass("after-unshelve-claim").await;
                    let update = crate::build::placed_on(self, &node, self.now());
                    let expect = Expect { host: Some(None), ..expect_task(&[], Some(task_state::UNSHELVING)) };
                    let mut ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }];
                    ops.push(self.finish_event(uuid, &caller.request_id, EVENT_UNSHELVE, None));
                    if handle.write(ops).await?.first() == Some(&CellOutcome::Done) {
                        if let Some(task) = Task::new(*uuid, &node.host, task_state::UNSHELVING) {
                            self.hub.push(task);
                        }
                    } else {
                        self.release_late_unshelve_claim(&handle, uuid).await;
                    }
                    return Ok(());
                }
                Ok(MoveClaimed::NoRoom) => {
                    last_reason = "There are not enough hosts available.".to_owned();
                }
                Err(err) => {
                    let err: ServiceError = err.into();
                    self.unshelve_failed(&handle, uuid, &caller.request_id, &err.to_string(), false).await?;
                    return Err(err);
                }
            }
        }
        let message = format!("No valid host was found. {last_reason}");
        self.unshelve_failed(&handle, uuid, &caller.request_id, &message, true).await
    }

    /// An unshelve that took longer than [`UNSHELVE_GRACE_SECS`] before its
    /// claim finds the row taken back by the sweep (`redrive_unshelves`:
    /// offloaded, no task, no host): its claim would be held by a server
    /// that runs nowhere, so it is released.
    async fn release_late_unshelve_claim(&self, handle: &Arc<Cell>, uuid: &Uuid) {
        let id = *uuid;
        let Ok(rows) = self.cells.read(handle, move |s| s.instances(&[id])).await else { return };
        let undone = rows.iter().any(|r| {
            !r.deleted && r.host.is_none() && r.task_state.is_none() && r.vm_state == vm_state::SHELVED_OFFLOADED
        });
        if undone {
            tracing::info!(instance = %uuid, "unshelve claimed after the sweep undid it: claim released");
            if let Err(err) = write(&*self.control, |w| Ok((plan_offload(w, uuid), ()))) {
                tracing::warn!(instance = %uuid, error = %err, "releasing a late unshelve claim failed");
            }
        }
    }

    /// The unshelve of an offloaded server did not happen: it stays
    /// SHELVED_OFFLOADED without a task (with a fault when no host was
    /// found).
    async fn unshelve_failed(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        request_id: &str,
        message: &str,
        fault: bool,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let expect = Expect { host: Some(None), ..expect_task(&[], Some(task_state::UNSHELVING)) };
        let update = InstanceUpdate { task_state: Some(None), updated_at: now, ..InstanceUpdate::default() };
        let mut ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }];
        if fault {
            ops.push(CellOp::AddFault(Fault {
                instance_uuid: *uuid,
                code: 400,
                message: message.to_owned(),
                details: message.to_owned(),
                host: None,
                created_at: now,
            }));
        }
        ops.push(self.finish_event(uuid, request_id, EVENT_UNSHELVE, Some(message.to_owned())));
        handle.write(ops).await?;
        Ok(())
    }

    /// An agent's report: `shelved`, `offloaded`, `unshelved`.
    pub(crate) async fn shelve_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
    ) -> Result<bool, ServiceError> {
        let now = self.now();
        let on_host = |task: &str| Expect { host: Some(Some(host.to_owned())), ..expect_task(&[], Some(task)) };
        let offload_now = self.config.shelved_offload_time == 0;
        let (expect, update, next) = match kind {
            "shelved" => (
                on_host(task_state::SHELVING),
                InstanceUpdate {
                    vm_state: Some(vm_state::SHELVED.to_owned()),
                    task_state: Some(offload_now.then(|| task_state::SHELVING_OFFLOADING.to_owned())),
                    power_state: Some(power_state::SHUTDOWN),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
                offload_now.then_some(task_state::SHELVING_OFFLOADING),
            ),
            "offloaded" => {
                // Only an offload under way on this host gives the
                // allocations up: a report for any other server changes
                // nothing.
                let id = *uuid;
                let row = self.cells.read(handle, move |s| s.instance(&id)).await?;
                let offloading = row.is_some_and(|r| {
                    !r.deleted
                        && r.task_state.as_deref() == Some(task_state::SHELVING_OFFLOADING)
                        && r.host.as_deref() == Some(host)
                });
                if !offloading {
                    return Ok(false);
                }
                // Allocations first: a crash before the row update leaves a
                // row the sweep hands to the agent again.
                write(&*self.control, |w| Ok((plan_offload(w, uuid), ())))?;
                (
                    on_host(task_state::SHELVING_OFFLOADING),
                    InstanceUpdate {
                        vm_state: Some(vm_state::SHELVED_OFFLOADED.to_owned()),
                        task_state: Some(None),
                        power_state: Some(power_state::SHUTDOWN),
                        host: Some(None),
                        node: Some(None),
                        updated_at: now,
                        ..InstanceUpdate::default()
                    },
                    None,
                )
            }
            _ => (
                on_host(task_state::UNSHELVING),
                InstanceUpdate {
                    vm_state: Some(vm_state::ACTIVE.to_owned()),
                    task_state: Some(None),
                    power_state: Some(power_state::RUNNING),
                    launched_at: Some(Some(now)),
                    updated_at: now,
                    ..InstanceUpdate::default()
                },
                None,
            ),
        };
        if kind == "shelved" {
            // The snapshot first: a crash before the row update leaves a
            // row the sweep hands to the agent again, which writes it again.
            self.take_shelve_snapshot(handle, uuid, host).await?;
        }
        let applied = handle.write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }]).await?.first()
            == Some(&CellOutcome::Done);
        if applied {
            if let Some(task) = next.and_then(|t| Task::new(*uuid, host, t)) {
                self.hub.push(task);
            }
            if kind == "unshelved" {
                // Nova deletes the snapshot once the server runs again.
                write(&*self.control, |w| Ok((plan_drop_shelve_snapshot(w, uuid), ())))?;
                self.remove_image_data(&shelved_image_id(uuid));
            }
        } else if kind == "shelved" {
            // Deleted meanwhile: its forget may have run before the
            // snapshot was written, so the snapshot goes here.
            let id = *uuid;
            let rows = self.cells.read(handle, move |s| s.instances(&[id])).await?;
            if rows.iter().all(|r| r.deleted) {
                write(&*self.control, |w| Ok((plan_drop_shelve_snapshot(w, uuid), ())))?;
                self.remove_image_data(&shelved_image_id(uuid));
            }
        }
        Ok(applied)
    }

    /// Record the `<name>-shelved` snapshot image of a server its agent
    /// has just shelved (none for a volume-backed one).
    async fn take_shelve_snapshot(&self, handle: &Arc<Cell>, uuid: &Uuid, host: &str) -> Result<(), ServiceError> {
        let id = *uuid;
        let rows = self.cells.read(handle, move |s| s.instances(&[id])).await?;
        // Only for the shelve under way, reported by its host: a repeated
        // report of one already done (and maybe unshelved since) or one
        // from another host takes none.
        let shelving = |r: &berth_compute_model::cell::Instance| {
            !r.deleted && r.task_state.as_deref() == Some(task_state::SHELVING) && r.host.as_deref() == Some(host)
        };
        let Some(row) = rows.into_iter().find(shelving) else { return Ok(()) };
        let snapshot = ShelveSnapshot {
            instance: *uuid,
            display_name: &row.spec.display_name,
            project_id: &row.project_id,
            user_id: &row.user_id,
            image_ref: row.spec.image_ref,
            image_properties: &row.spec.image_properties,
        };
        let now = self.now();
        write(&*self.control, |w| Ok((plan_shelve_snapshot(w, &snapshot, now), ())))?;
        Ok(())
    }
}

/// With `shelved_offload_time` N > 0: offload servers shelved (no task)
/// for at least N seconds (Nova's `_poll_shelved_instances`).
pub(crate) async fn offload_due(compute: &Compute, handle: &Arc<Cell>) {
    let after = compute.config.shelved_offload_time;
    if after <= 0 {
        return;
    }
    let Some(rows) = resting_in(compute, handle, vm_state::SHELVED).await else { return };
    let now = compute.now();
    for row in rows {
        if row.updated_at.unwrap_or(row.created_at) + after > now {
            continue;
        }
        let Some(host) = row.host.clone() else { continue };
        let op = CellOp::UpdateInstance {
            uuid: row.uuid,
            expect: expect_task(&[vm_state::SHELVED], None),
            update: InstanceUpdate {
                task_state: Some(Some(task_state::SHELVING_OFFLOADING.to_owned())),
                updated_at: now,
                ..InstanceUpdate::default()
            },
        };
        if let Ok(outcomes) = handle.write(vec![op]).await {
            if outcomes.first() == Some(&CellOutcome::Done) {
                if let Some(task) = Task::new(row.uuid, &host, task_state::SHELVING_OFFLOADING) {
                    compute.hub.push(task);
                }
            }
        }
    }
}

/// Seconds a row may stay `unshelving` with no host before the sweep takes
/// the unshelve for interrupted (scheduling and the claim take
/// milliseconds; this is far beyond a slow one).
pub const UNSHELVE_GRACE_SECS: i64 = 60;

/// Finish unshelves a crash interrupted between the claim and the cell
/// update: a row `unshelving` with no host for [`UNSHELVE_GRACE_SECS`]. If
/// its instance consumer holds one of this cell's compute nodes, the claim
/// was written: the row gets that host (as `unshelve_server` would have)
/// and the host its task. With no allocations the claim never happened:
/// the server stays offloaded with no task (the unshelve failed; it can be
/// asked again). Both writes are conditional on the row being unchanged.
pub(crate) async fn redrive_unshelves(compute: &Compute, handle: &Arc<Cell>) {
    let Ok(rows) = compute.cells.read(handle, |s| s.instances_with_tasks(&[task_state::UNSHELVING])).await else {
        return;
    };
    let now = compute.now();
    let cell = handle.mapping.uuid;
    for row in rows {
        if row.deleted || row.host.is_some() || now - row.updated_at.unwrap_or(row.created_at) <= UNSHELVE_GRACE_SECS {
            continue;
        }
        let node = read(&*compute.control, |w| {
            berth_compute_model::choice::host_of_instance(w, &row.uuid).filter(|n| n.cell == cell).cloned()
        });
        let request_id = compute.action_request_id(handle, &row.uuid, &["unshelve"]).await;
        let expect = Expect { host: Some(None), ..expect_task(&[], Some(task_state::UNSHELVING)) };
        let (update, error) = match &node {
            Some(node) => (crate::build::placed_on(compute, node, now), None),
            None => (
                InstanceUpdate { task_state: Some(None), updated_at: now, ..InstanceUpdate::default() },
                Some("The unshelve was interrupted before a host was claimed.".to_owned()),
            ),
        };
        let mut ops = vec![CellOp::UpdateInstance { uuid: row.uuid, expect, update }];
        if let Some(request_id) = &request_id {
            ops.push(compute.finish_event(&row.uuid, request_id, EVENT_UNSHELVE, error.clone()));
        }
        let Ok(outcomes) = handle.write(ops).await else { continue };
        if outcomes.first() != Some(&CellOutcome::Done) {
            continue;
        }
        match node {
            Some(node) => {
                tracing::info!(instance = %row.uuid, host = %node.host, "finished an unshelve whose cell update was lost");
                if let Some(task) = Task::new(row.uuid, &node.host, task_state::UNSHELVING) {
                    compute.hub.push(task);
                }
            }
            None => {
                tracing::info!(instance = %row.uuid, "an interrupted unshelve without a claim: the server stays offloaded")
            }
        }
    }
}

/// Up to 1,000 live servers of a cell in `vm_state` with no task (the
/// periodic passes' candidates: offload, reclaim); `None` when the cell
/// cannot be read now (the next pass tries again).
pub(crate) async fn resting_in(
    compute: &Compute,
    handle: &Arc<Cell>,
    vm_state: &str,
) -> Option<Vec<berth_compute_model::cell::Instance>> {
    let query = berth_compute_model::cell::InstanceQuery {
        filter: berth_compute_model::cell::InstanceFilter {
            vm_states: Some(vec![vm_state.to_owned()]),
            task_states: Some(Vec::new()),
            deleted: Some(false),
            ..Default::default()
        },
        sort: Vec::new(),
        marker: None,
        limit: 1000,
        brief: false,
    };
    compute.cells.read(handle, move |s| s.list_instances(&query)).await.ok()
}
