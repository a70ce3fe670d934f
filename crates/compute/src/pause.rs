//! Pause/unpause and suspend/resume as the host's agent reports them, and
//! the admin's `os-resetState`.
//!
//! The API's half is [`Compute::server_action`](crate::Compute::server_action):
//! the state check, the task state (`pausing`, `unpausing`, `suspending`,
//! `resuming`) and the instance action with its compute event started, in
//! one cell write. The agent's report (`paused`, `unpaused`, `suspended`,
//! `resumed`) is the other half: the vm and power states, the task
//! cleared and the event finished, again in one cell write, conditional
//! on the task state and the host (a late or repeated report changes
//! nothing).

use std::sync::Arc;

use berth_compute_model::cell::{power_state, task_state, vm_state};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::action::invalid_state;
use crate::cells::Cell;
use crate::error::ServiceError;
use crate::servers::{
    Caller, EVENT_PAUSE, EVENT_RESCUE, EVENT_RESTORE, EVENT_RESUME, EVENT_SOFT_DELETE, EVENT_SUSPEND, EVENT_UNPAUSE,
    EVENT_UNRESCUE,
};
use crate::Compute;

/// What `os-resetState` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetState {
    /// `active`.
    Active,
    /// `error`.
    Error,
}

impl Compute {
    /// An agent's `paused`, `unpaused`, `suspended`, `resumed`, `rescued`,
    /// `unrescued`, `soft_deleted` or `restored` report. A soft delete
    /// stamps `terminated_at` (Nova's `deleted_at` of a soft-deleted row:
    /// when the reclaim's interval starts); a restore clears it.
    pub(crate) async fn pause_event(
        &self,
        handle: &Arc<Cell>,
        uuid: &Uuid,
        kind: &str,
        host: &str,
    ) -> Result<bool, ServiceError> {
        let (action, event, from, to, power) = match kind {
            "paused" => ("pause", EVENT_PAUSE, task_state::PAUSING, vm_state::PAUSED, power_state::PAUSED),
            "unpaused" => ("unpause", EVENT_UNPAUSE, task_state::UNPAUSING, vm_state::ACTIVE, power_state::RUNNING),
            "suspended" => {
                ("suspend", EVENT_SUSPEND, task_state::SUSPENDING, vm_state::SUSPENDED, power_state::SUSPENDED)
            }
            "rescued" => ("rescue", EVENT_RESCUE, task_state::RESCUING, vm_state::RESCUED, power_state::RUNNING),
            "unrescued" => ("unrescue", EVENT_UNRESCUE, task_state::UNRESCUING, vm_state::ACTIVE, power_state::RUNNING),
            "soft_deleted" => {
                ("delete", EVENT_SOFT_DELETE, task_state::SOFT_DELETING, vm_state::SOFT_DELETED, power_state::SHUTDOWN)
            }
            "restored" => ("restore", EVENT_RESTORE, task_state::RESTORING, vm_state::ACTIVE, power_state::RUNNING),
            _ => ("resume", EVENT_RESUME, task_state::RESUMING, vm_state::ACTIVE, power_state::RUNNING),
        };
        let now = self.now();
        let terminated_at = match kind {
            "soft_deleted" => Some(Some(now)),
            "restored" => Some(None),
            _ => None,
        };
        let expect = Expect {
            task_states: vec![Some(from.to_owned())],
            not_deleted: true,
            host: Some(Some(host.to_owned())),
            ..Expect::default()
        };
        let update = InstanceUpdate {
            vm_state: Some(to.to_owned()),
            task_state: Some(None),
            power_state: Some(power),
            terminated_at,
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let mut ops = vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }];
        if let Some(request_id) = self.action_request_id(handle, uuid, &[action]).await {
            ops.push(self.finish_event(uuid, &request_id, event, None));
        }
        let outcomes = handle.write(ops).await?;
        Ok(outcomes.first() == Some(&CellOutcome::Done))
    }

    /// `os-resetState` (admin): the vm state becomes `active` or `error`
    /// and the task state is cleared whatever they were (Nova's
    /// `admin_state_reset`), with a `resetState` action, in one cell write.
    pub async fn reset_state(&self, uuid: &Uuid, state: ResetState, caller: &Caller) -> Result<(), ServiceError> {
        let (instance, handle) = self.placed(uuid, "os-resetState").await?;
        let now = self.now();
        let vm = match state {
            ResetState::Active => vm_state::ACTIVE,
            ResetState::Error => vm_state::ERROR,
        };
        let update = InstanceUpdate {
            vm_state: Some(vm.to_owned()),
            task_state: Some(None),
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let expect = Expect { not_deleted: true, ..Expect::default() };
        let action = caller.action(uuid, "resetState", now, Vec::new());
        let outcomes = handle
            .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(action)])
            .await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(invalid_state("os-resetState", uuid, "vm_state", &instance.vm_state));
        }
        Ok(())
    }
}
