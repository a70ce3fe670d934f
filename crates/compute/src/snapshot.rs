//! `createImage` and `createBackup`: a server's disk becomes an image.
//!
//! The API's half ([`Compute::snapshot_server`]), in Nova's order: the
//! image record first (`queued`, one control write:
//! `plan_snapshot_image`), then the row's task state (`image_snapshot` or
//! `image_backup`, from no task and an allowed vm state) with the
//! instance action, in one conditional cell write. If that write finds the
//! server changed (a delete got there first), the image is deleted again
//! and the caller gets Nova's 409 (`Cannot 'createImage' instance ...
//! while it is in task_state deleting`). A crash between the two leaves a
//! `queued` image and no snapshot, as in Nova. A backup then rotates the
//! server's older backups of its type (`plan_rotate_backups`, one write).
//!
//! The host's half: the agent gets a `snapshot` task naming the image
//! (`plan::snapshot_image_of`: the server's snapshot under way), uploads
//! the disk through the image API (`PUT /image/v2/images/{id}/file`:
//! `queued → saving → active` with Glance's checksums) and reports
//! `snapshotted`, or `snapshot_failed` (the image is deleted, as Nova's
//! `delete_image_on_error`). Either report clears the task state and
//! finishes the action's event, conditional on the task state and host.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_compute_model::cell::{task_state, vm_state, ActionEvent};
use berth_compute_model::plan::{
    plan_delete_image, plan_rotate_backups, plan_snapshot_image, snapshot_image_of, SnapshotImage, SnapshotKind,
};
use berth_compute_model::WorldChangeSet;
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::action::{invalid, invalid_state};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::Task;
use crate::servers::Caller;
use crate::Compute;

/// The compute event of a `createImage`.
pub const EVENT_SNAPSHOT: &str = "compute_snapshot_instance";
/// The compute event of a `createBackup`.
pub const EVENT_BACKUP: &str = "compute_backup_instance";

/// A backup's type and how many of that type to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// `backup_type`.
    pub backup_type: String,
    /// `rotation`.
    pub rotation: usize,
}

/// What `createImage` / `createBackup` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The image's name.
    pub name: String,
    /// Properties for the image (they win over inherited ones).
    pub metadata: BTreeMap<String, String>,
    /// `Some` for `createBackup`.
    pub backup: Option<Backup>,
}

impl Compute {
    /// `createImage` or `createBackup` (see the module doc): returns the
    /// new image's id.
    pub async fn snapshot_server(
        &self,
        uuid: &Uuid,
        request: SnapshotRequest,
        caller: &Caller,
    ) -> Result<Uuid, ServiceError> {
        let (action, task, event) = match request.backup {
            None => ("createImage", task_state::IMAGE_SNAPSHOT, EVENT_SNAPSHOT),
            Some(_) => ("createBackup", task_state::IMAGE_BACKUP, EVENT_BACKUP),
        };
        let vm_states: &[&str] = match request.backup {
            None => &[vm_state::ACTIVE, vm_state::STOPPED, vm_state::PAUSED, vm_state::SUSPENDED],
            Some(_) => &[vm_state::ACTIVE, vm_state::STOPPED],
        };
        let (instance, handle) = self.placed(uuid, action).await?;
        // Nova's `check_instance_state`: the vm state, then the task state.
        if !vm_states.contains(&instance.vm_state.as_str()) {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        }
        if let Some(current) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", current));
        }
        let Some(host) = instance.host.clone() else {
            return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
        };
        if request.backup.is_some() && instance.spec.image_ref.is_none() {
            return Err(invalid("Backup is not supported for volume-backed instances.".into()));
        }
        let kind = match &request.backup {
            None => SnapshotKind::Snapshot,
            Some(b) => SnapshotKind::Backup { backup_type: b.backup_type.clone() },
        };
        let image_id = Uuid::new_v4();
        let snapshot = SnapshotImage {
            id: image_id,
            name: &request.name,
            kind,
            instance: *uuid,
            instance_project: &instance.project_id,
            caller_project: &caller.project_id,
            caller_user: &caller.user_id,
            image_ref: instance.spec.image_ref,
            image_properties: &instance.spec.image_properties,
            metadata: &request.metadata,
        };
        let now = self.now();
        write(&*self.control, |w| Ok((plan_snapshot_image(w, &snapshot, now)?, ())))?;
        let started = ActionEvent {
            event: event.to_owned(),
            start_time: now,
            finish_time: None,
            result: None,
            traceback: None,
            host: Some(host.clone()),
            details: None,
        };
        let expect = Expect {
            vm_states: vm_states.iter().map(|s| (*s).to_owned()).collect(),
            task_states: vec![None],
            not_deleted: true,
            host: Some(Some(host.clone())),
            ..Expect::default()
        };
        let update =
            InstanceUpdate { task_state: Some(Some(task.to_owned())), updated_at: now, ..InstanceUpdate::default() };
        let ops = vec![
            CellOp::UpdateInstance { uuid: *uuid, expect, update },
            CellOp::StartAction(caller.action(uuid, action, now, vec![started])),
        ];
        // Tests hold here to delete the server in between.
        self.hooks.pass("before-snapshot-task").await;
        let outcome = handle.write(ops).await;
        if !matches!(outcome.as_ref().map(|o| o.first()), Ok(Some(CellOutcome::Done))) {
            // Nova: the image goes again, and the server's state is the
            // refusal.
            self.drop_image(&image_id);
            outcome?;
            let id = *uuid;
            let rows = self.cells.read(&handle, move |s| s.instances(&[id])).await?;
            let row = rows.into_iter().find(|r| !r.deleted);
            return Err(match row {
                None => invalid_state(action, uuid, "vm_state", vm_state::DELETED),
                Some(r) => match &r.task_state {
                    Some(t) => invalid_state(action, uuid, "task_state", t),
                    None => invalid_state(action, uuid, "vm_state", &r.vm_state),
                },
            });
        }
        if let Some(backup) = &request.backup {
            self.rotate_backups(uuid, backup, &image_id);
        }
        if let Some(task) = Task::new(*uuid, &host, task) {
            self.hub.push(task);
        }
        Ok(image_id)
    }

    /// Nova's `_rotate_backups`, one planned write on the current images.
    fn rotate_backups(&self, uuid: &Uuid, backup: &Backup, newest: &Uuid) {
        let rotated = write(&*self.control, |w| {
            let (set, gone) = plan_rotate_backups(w, uuid, &backup.backup_type, backup.rotation, newest);
            Ok((set, gone))
        });
        match rotated {
            Ok(gone) => {
                for id in gone {
                    tracing::info!(instance = %uuid, image = %id, "backup rotated out");
                    self.remove_image_data(&id);
                }
            }
            Err(err) => tracing::warn!(instance = %uuid, error = %err, "backups not rotated"),
        }
    }

    /// Delete an image this runtime made (and its data), if it is still
    /// there and not `active`.
    fn drop_image(&self, image: &Uuid) {
        let dropped = write(&*self.control, |w| {
            let unfinished = w.compute.images.get(image).is_some_and(|i| i.status != "active");
            if !unfinished {
                return Ok((WorldChangeSet::new(), false));
            }
            Ok((plan_delete_image(w, image)?, true))
        });
        match dropped {
            Ok(true) => self.remove_image_data(image),
            Ok(false) => {}
            Err(err) => tracing::warn!(image = %image, error = %err, "snapshot image not deleted"),
        }
    }

    /// The image the snapshot task of `instance` uploads to, if one is
    /// under way (the agent API puts it in the task).
    pub fn snapshot_image(&self, instance: &Uuid) -> Option<Uuid> {
        read(&*self.control, |w| snapshot_image_of(w, instance))
    }

    /// An agent's `snapshotted` or `snapshot_failed` report.
    pub(crate) async fn snapshot_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
        message: Option<&str>,
    ) -> Result<bool, ServiceError> {
        let failed = kind == "snapshot_failed";
        let image = self.snapshot_image(uuid);
        if failed {
            if let Some(image) = image {
                self.drop_image(&image);
            }
        }
        let now = self.now();
        let expect = Expect {
            task_states: vec![Some(task_state::IMAGE_SNAPSHOT.to_owned()), Some(task_state::IMAGE_BACKUP.to_owned())],
            not_deleted: true,
            host: Some(Some(host.to_owned())),
            ..Expect::default()
        };
        let update = InstanceUpdate { task_state: Some(None), updated_at: now, ..InstanceUpdate::default() };
        let mut ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }];
        let error = failed.then(|| message.unwrap_or("The snapshot failed on the host.").to_owned());
        let id = *uuid;
        let actions = self.cells.read(handle, move |s| s.instance_actions(&id)).await.unwrap_or_default();
        if let Some(action) = actions.iter().rev().find(|a| matches!(a.action.as_str(), "createImage" | "createBackup"))
        {
            let event = if action.action == "createBackup" { EVENT_BACKUP } else { EVENT_SNAPSHOT };
            ops.push(self.finish_event(uuid, &action.request_id, event, error));
        }
        let applied = handle.write(ops).await?.first() == Some(&CellOutcome::Done);
        if !applied {
            // The server went meanwhile (or this report is late): an upload
            // that did not finish leaves no image behind.
            if let Some(image) = image {
                self.drop_image(&image);
            }
        }
        Ok(applied)
    }
}
