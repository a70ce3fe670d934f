//! Rebuild in place (Nova's `rebuild` action) and the periodic reclaim of
//! soft-deleted servers.
//!
//! A rebuild is two writes of one cell row, each conditional on what the
//! one before left:
//!
//! 1. **API:** the vm state (`active`, `stopped` or `error`) and no task
//!    checked, the new image, name, metadata, key pair, user data (what
//!    the request changes) written with the task `rebuild_spawning` and
//!    the `rebuild` action with its `compute_rebuild_instance` event, in
//!    one cell write on the server's host; the host's agent gets a
//!    `rebuild` task (the task an evacuation's destination gets: the
//!    agent re-spawns the guest from the row's image either way).
//! 2. **agent:** `rebuilt` clears the task, keeps a stopped server
//!    stopped (Nova powers it off again) and makes any other `active`;
//!    `rebuild_failed` leaves it in `error` with a fault. Both finish the
//!    event, and both are conditional on the task and the host, so a
//!    delete that arrived meanwhile (task `deleting`) wins and the late
//!    report changes nothing.
//!
//! The request spec takes the new image and key (what a later move or
//! unshelve builds from) after the cell write succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_compute_model::cell::{power_state, task_state, vm_state, ActionEvent, Fault};
use berth_compute_model::quota::effective_limit;
use berth_compute_model::{ComputeChange, ComputeError, ImageRef, WorldChangeSet};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::action::invalid_state;
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::evacuate::EVENT_REBUILD_INSTANCE;
use crate::hub::Task;
use crate::servers::{Caller, DeleteMode, ServerRecord};
use crate::Compute;

/// What a rebuild changes (the API has checked and resolved it).
#[derive(Debug, Clone)]
pub struct RebuildRequest {
    /// The image, as the request spec keeps it.
    pub image: ImageRef,
    /// New display name.
    pub name: Option<String>,
    /// New description (`Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// New user metadata (replaces the old).
    pub metadata: Option<BTreeMap<String, String>>,
    /// New `accessIPv4`.
    pub access_ip_v4: Option<String>,
    /// New `accessIPv6`.
    pub access_ip_v6: Option<String>,
    /// New `OS-DCF:diskConfig` (`AUTO`: true).
    pub auto_disk_config: Option<bool>,
    /// New key pair `(name, public key)`; `Some(None)` removes it (2.54).
    pub key_pair: Option<Option<(String, String)>>,
    /// New `user_data`; `Some(None)` removes it (2.57).
    pub user_data: Option<Option<String>>,
    /// New `hostname` (2.90).
    pub hostname: Option<String>,
}

impl Compute {
    /// `rebuild`: step 1 of the module doc.
    pub async fn rebuild_server(
        &self,
        uuid: &Uuid,
        request: RebuildRequest,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let (instance, handle) = self.placed(uuid, "rebuild").await?;
        let allowed = [vm_state::ACTIVE, vm_state::STOPPED, vm_state::ERROR];
        if !allowed.contains(&instance.vm_state.as_str()) {
            return Err(invalid_state("rebuild", uuid, "vm_state", &instance.vm_state));
        }
        if let Some(task) = &instance.task_state {
            return Err(invalid_state("rebuild", uuid, "task_state", task));
        }
        let Some(host) = instance.host.clone() else {
            return Err(invalid_state("rebuild", uuid, "vm_state", &instance.vm_state));
        };
        if let Some(metadata) = &request.metadata {
            // Nova's `MetadataLimitExceeded` (403), as for a boot.
            let limit = read(&*self.control, |w| {
                effective_limit(w, &caller.project_id, Some(&caller.user_id), "metadata_items")
            });
            if limit >= 0 && metadata.len() as i64 > limit {
                return Err(ServiceError::Refused(ComputeError::OverQuota(format!(
                    "Maximum number of metadata items exceeds {limit}"
                ))));
            }
        }
        let now = self.now();
        let expect = Expect {
            vm_states: vec![instance.vm_state.clone()],
            task_states: vec![None],
            not_deleted: true,
            host: Some(Some(host.clone())),
            ..Expect::default()
        };
        let update = InstanceUpdate {
            task_state: Some(Some(task_state::REBUILD_SPAWNING.to_owned())),
            progress: Some(0),
            image: Some((Some(request.image.id), request.image.properties.clone())),
            display_name: request.name.clone(),
            display_description: request.description.clone(),
            metadata: request.metadata.clone(),
            access_ip_v4: request.access_ip_v4.clone().map(Some),
            access_ip_v6: request.access_ip_v6.clone().map(Some),
            auto_disk_config: request.auto_disk_config,
            key_pair: request.key_pair.clone().map(|k| k.unzip()),
            user_data: request.user_data.clone(),
            hostname: request.hostname.clone(),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let event = ActionEvent {
            event: EVENT_REBUILD_INSTANCE.to_owned(),
            start_time: now,
            finish_time: None,
            result: None,
            traceback: None,
            host: Some(host.clone()),
            details: None,
        };
        let action = caller.action(uuid, "rebuild", now, vec![event]);
        let outcomes = handle
            .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(action)])
            .await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            // A delete or another action won the row first.
            return Err(match self.get_server(uuid).await? {
                ServerRecord::Placed { instance, .. } => match &instance.task_state {
                    Some(task) => invalid_state("rebuild", uuid, "task_state", task),
                    None => invalid_state("rebuild", uuid, "vm_state", &instance.vm_state),
                },
                _ => invalid_state("rebuild", uuid, "task_state", "changing"),
            });
        }
        let spec_image = request.image.clone();
        let key = request.key_pair.clone();
        write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            if let Some(spec) = w.compute.request_specs.get(uuid) {
                let mut spec = spec.clone();
                spec.image = Some(spec_image.clone());
                if let Some(key) = &key {
                    spec.key_data = key.as_ref().map(|(_, data)| data.clone());
                }
                set.compute(ComputeChange::PutRequestSpec(spec));
            }
            Ok((set, ()))
        })?;
        if let Some(task) = Task::new(*uuid, &host, task_state::REBUILD_SPAWNING) {
            self.hub.push(task);
        }
        Ok(())
    }

    /// An agent's `rebuilt` or `rebuild_failed` for an in-place rebuild
    /// (step 2 of the module doc).
    pub(crate) async fn local_rebuild_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let id = *uuid;
        let Some(row) = self.cells.read(handle, move |s| s.instance(&id)).await? else { return Ok(false) };
        if row.deleted
            || row.task_state.as_deref() != Some(task_state::REBUILD_SPAWNING)
            || row.host.as_deref() != Some(host)
        {
            return Ok(false);
        }
        let now = self.now();
        let expect = Expect {
            vm_states: vec![row.vm_state.clone()],
            task_states: vec![Some(task_state::REBUILD_SPAWNING.to_owned())],
            not_deleted: true,
            host: Some(Some(host.to_owned())),
            ..Expect::default()
        };
        let request_id = self.action_request_id(handle, uuid, &["rebuild"]).await;
        let mut ops = Vec::new();
        let error = if kind == "rebuilt" {
            let (vm, power) = if row.vm_state == vm_state::STOPPED {
                (vm_state::STOPPED, power_state::SHUTDOWN)
            } else {
                (vm_state::ACTIVE, power_state::RUNNING)
            };
            let update = InstanceUpdate {
                vm_state: Some(vm.to_owned()),
                task_state: Some(None),
                power_state: Some(power),
                progress: Some(100),
                launched_at: Some(Some(now)),
                updated_at: now,
                ..InstanceUpdate::default()
            };
            ops.push(CellOp::UpdateInstance { uuid: *uuid, expect, update });
            None
        } else {
            let message =
                message.map_or_else(|| format!("Rebuild of instance {uuid} failed on {host}."), str::to_owned);
            let update = InstanceUpdate {
                vm_state: Some(vm_state::ERROR.to_owned()),
                task_state: Some(None),
                updated_at: now,
                ..InstanceUpdate::default()
            };
            ops.push(CellOp::UpdateInstance { uuid: *uuid, expect, update });
            ops.push(CellOp::AddFault(Fault {
                instance_uuid: *uuid,
                code: 500,
                message: message.clone(),
                details: message.clone(),
                host: Some(host.to_owned()),
                created_at: now,
            }));
            Some(message)
        };
        if let Some(request_id) = &request_id {
            ops.push(self.finish_event(uuid, request_id, EVENT_REBUILD_INSTANCE, error));
        }
        Ok(handle.write(ops).await?.first() == Some(&CellOutcome::Done))
    }
}

/// With `reclaim_instance_interval` N > 0: delete the servers soft-deleted
/// (no task) at least N seconds ago (Nova's `_reclaim_queued_deletes`).
/// Each delete is one write conditional on the row still being
/// soft-deleted with no task, so a restore that came first keeps its
/// server, and one that comes after finds it deleting (409) or gone (404).
pub(crate) async fn reclaim_due(compute: &Compute, handle: &Arc<Cell>) {
    let after = compute.config.reclaim_instance_interval;
    if after <= 0 {
        return;
    }
    let Some(rows) = crate::shelve::resting_in(compute, handle, vm_state::SOFT_DELETED).await else { return };
    let now = compute.now();
    for row in rows {
        let since = row.terminated_at.or(row.updated_at).unwrap_or(row.created_at);
        // Whole seconds, truncated: only a stamp more than N seconds old
        // has surely waited N.
        if now - since <= after {
            continue;
        }
        let caller = Caller {
            request_id: format!("req-{}", Uuid::new_v4()),
            user_id: row.user_id.clone(),
            project_id: row.project_id.clone(),
        };
        match compute.delete_as(&row.uuid, &caller, DeleteMode::Reclaim).await {
            Ok(()) => tracing::info!(instance = %row.uuid, "reclaimed a soft-deleted server"),
            Err(err) => tracing::warn!(instance = %row.uuid, error = %err, "periodic reclaim failed"),
        }
    }
}
