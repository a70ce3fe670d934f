//! What the instance actions (cold moves, live migration, evacuation,
//! shelve) share: their refusals ([`conflict`], [`invalid`],
//! [`invalid_state`]), the conditions and updates of their cell rows
//! ([`expect_task`], [`set_task`], [`statuses`]), and the migration type
//! an evacuation writes (which the cold moves' re-drive leaves alone).
//! It uses none of the action modules.

use berth_compute_model::ComputeError;
use berth_store::{Expect, InstanceUpdate};
use uuid::Uuid;

use crate::error::ServiceError;

/// The migration type of an evacuation.
pub const MIGRATION_TYPE_EVACUATION: &str = "evacuation";

pub(crate) fn conflict(message: String) -> ServiceError {
    ServiceError::Refused(ComputeError::Conflict(message))
}

pub(crate) fn invalid(message: String) -> ServiceError {
    ServiceError::Refused(ComputeError::Invalid(message))
}

pub(crate) fn invalid_state(action: &str, uuid: &Uuid, attr: &str, state: &str) -> ServiceError {
    conflict(format!("Cannot '{action}' instance {uuid} while it is in {attr} {state}"))
}

pub(crate) fn expect_task(vm_states: &[&str], task: Option<&str>) -> Expect {
    Expect {
        vm_states: vm_states.iter().map(|s| (*s).to_owned()).collect(),
        task_states: vec![task.map(str::to_owned)],
        not_deleted: true,
        ..Expect::default()
    }
}

pub(crate) fn set_task(task: Option<&str>, now: i64) -> InstanceUpdate {
    InstanceUpdate { task_state: Some(task.map(str::to_owned)), updated_at: now, ..InstanceUpdate::default() }
}

pub(crate) fn statuses(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}
