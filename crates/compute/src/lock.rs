//! `lock` / `unlock` (Nova's `os-lock-server`). A locked server refuses
//! the state-changing actions of anyone but an admin (409 `Instance X is
//! locked`); like Nova, the API checks that on the server it has just
//! read (`compute-api`'s `check_lock`). `locked_by` is `owner` when the
//! locker's project owns the server, else `admin`; an owner cannot undo
//! an admin's lock without `unlock:unlock_override`.

use berth_compute_model::cell::ActionEvent;
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::error::ServiceError;
use crate::servers::Caller;
use crate::Compute;

impl Compute {
    /// `lock` (2.73: with a reason). An owner locking a server that is
    /// already locked changes nothing, as in Nova, so an admin's lock is
    /// never downgraded to the owner's.
    pub async fn lock_server(&self, uuid: &Uuid, reason: Option<String>, caller: &Caller) -> Result<(), ServiceError> {
        let (instance, handle) = self.placed(uuid, "lock").await?;
        let owner = instance.project_id == caller.project_id;
        if instance.locked && owner {
            return Ok(());
        }
        let locked_by = if owner { "owner" } else { "admin" };
        self.write_lock(&handle, uuid, "lock", (true, Some(locked_by.to_owned()), reason), caller).await
    }

    /// `unlock` (the API has checked `unlock_override` when needed).
    pub async fn unlock_server(&self, uuid: &Uuid, caller: &Caller) -> Result<(), ServiceError> {
        let (_, handle) = self.placed(uuid, "unlock").await?;
        self.write_lock(&handle, uuid, "unlock", (false, None, None), caller).await
    }

    async fn write_lock(
        &self,
        handle: &crate::cells::Cell,
        uuid: &Uuid,
        action: &str,
        lock: (bool, Option<String>, Option<String>),
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let event = ActionEvent {
            event: format!("api_{action}"),
            start_time: now,
            finish_time: Some(now),
            result: Some("Success".to_owned()),
            traceback: None,
            host: None,
            details: None,
        };
        let record = caller.action(uuid, action, now, vec![event]);
        let expect = Expect { not_deleted: true, ..Expect::default() };
        let update = InstanceUpdate { lock: Some(lock), updated_at: now, ..InstanceUpdate::default() };
        let ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(record)];
        if handle.write(ops).await?.first() != Some(&CellOutcome::Done) {
            return Err(ServiceError::Refused(berth_compute_model::ComputeError::NotFound(format!(
                "Instance {uuid} could not be found."
            ))));
        }
        Ok(())
    }
}
