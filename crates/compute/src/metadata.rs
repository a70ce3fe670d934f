//! A server's user metadata (`/servers/{id}/metadata`) and tags
//! (`/servers/{id}/tags`, 2.26), as Nova's `server_metadata` and
//! `server_tags` controllers change them.
//!
//! Both live on the instance row (its spec); a change is one conditional
//! cell write whose expectation is Nova's state check: metadata changes
//! take a server `active`, `paused`, `suspended` or `stopped` with no task
//! (`check_instance_state`), tags the same vm states whatever the task.
//! The write also expects the metadata (or tags) it read, so a
//! concurrent change makes it read and merge again: two merges of
//! different keys both land (Nova's `instance.save()` of a merged dict can
//! lose one). Reads need no method here: the API shows what the server
//! record holds.

use std::collections::BTreeMap;

use berth_compute_model::cell::{vm_state, Instance};
use berth_compute_model::quota::effective_limit;
use berth_compute_model::{CellMapping, ComputeError};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::action::{invalid_state, statuses};
use crate::control::read;
use crate::error::ServiceError;
use crate::servers::{Caller, ServerRecord};
use crate::Compute;

/// The vm states whose metadata and tags may change (Nova's).
const EDITABLE: &[&str] = &[vm_state::ACTIVE, vm_state::PAUSED, vm_state::SUSPENDED, vm_state::STOPPED];

/// Nova's `MAX_TAG_COUNT`.
pub const MAX_TAGS: usize = 50;

/// A change of user metadata.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataChange {
    /// `POST /metadata` and `PUT /metadata/{key}`: these items are set,
    /// the others kept.
    Merge(BTreeMap<String, String>),
    /// `PUT /metadata`: the metadata becomes exactly these items.
    Replace(BTreeMap<String, String>),
    /// `DELETE /metadata/{key}`.
    Delete(String),
}

/// A change of tags.
#[derive(Debug, Clone, PartialEq)]
pub enum TagChange {
    /// `PUT /tags/{tag}`.
    Add(String),
    /// `PUT /tags`.
    Replace(Vec<String>),
    /// `DELETE /tags/{tag}`.
    Remove(String),
    /// `DELETE /tags`.
    Clear,
}

impl TagChange {
    /// Nova's words for the action in its 409.
    fn action(&self) -> &'static str {
        match self {
            TagChange::Add(_) => "update tag",
            TagChange::Replace(_) => "update tags",
            TagChange::Remove(_) => "delete tag",
            TagChange::Clear => "delete tags",
        }
    }
}

/// What a tag change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagOutcome {
    /// The tags now (sorted).
    Changed(Vec<String>),
    /// `Add` of a tag the server already has: nothing written (Nova's 204).
    AlreadyThere,
}

/// How often a change is recomputed when a concurrent one changed the
/// row between its read and its write.
const ATTEMPTS: usize = 16;

impl Compute {
    /// Change a server's user metadata; returns the metadata now.
    pub async fn update_metadata(
        &self,
        uuid: &Uuid,
        change: MetadataChange,
        caller: &Caller,
    ) -> Result<BTreeMap<String, String>, ServiceError> {
        let action = match change {
            MetadataChange::Delete(_) => "delete metadata",
            _ => "update metadata",
        };
        let limit =
            read(&*self.control, |w| effective_limit(w, &caller.project_id, Some(&caller.user_id), "metadata_items"));
        for _ in 0..ATTEMPTS {
            let (instance, cell) = self.editable(uuid, action).await?;
            let mut metadata = instance.spec.metadata.clone();
            match &change {
                MetadataChange::Merge(items) => metadata.extend(items.clone()),
                MetadataChange::Replace(items) => metadata = items.clone(),
                MetadataChange::Delete(key) => {
                    // Nova looks the key up before the state check.
                    if metadata.remove(key).is_none() {
                        return Err(ServiceError::Refused(ComputeError::NotFound(
                            "Metadata item was not found".into(),
                        )));
                    }
                }
            }
            // Nova's `MetadataLimitExceeded` (403), for the caller's
            // project as Nova's `limit_check` counts it.
            if action == "update metadata" && limit >= 0 && metadata.len() as i64 > limit {
                return Err(ServiceError::Refused(ComputeError::OverQuota(format!(
                    "Maximum number of metadata items exceeds {limit}"
                ))));
            }
            check_state(&instance, uuid, action, true)?;
            let expect = Expect { metadata: Some(instance.spec.metadata.clone()), ..editable_expect(true) };
            let update = InstanceUpdate { metadata: Some(metadata.clone()), ..InstanceUpdate::default() };
            if self.write_edit(&cell, uuid, expect, update).await? {
                return Ok(metadata);
            }
        }
        Err(invalid_state(action, uuid, "task_state", "changing"))
    }

    /// Change a server's tags.
    pub async fn update_tags(&self, uuid: &Uuid, change: TagChange) -> Result<TagOutcome, ServiceError> {
        let action = change.action();
        for _ in 0..ATTEMPTS {
            let (instance, cell) = self.editable(uuid, action).await?;
            check_state(&instance, uuid, action, false)?;
            let mut tags = instance.spec.tags.clone();
            match &change {
                TagChange::Add(tag) => {
                    if tags.len() >= MAX_TAGS {
                        return Err(ServiceError::Refused(ComputeError::Invalid(format!(
                            "The number of tags exceeded the per-server limit {MAX_TAGS}"
                        ))));
                    }
                    if tags.contains(tag) {
                        return Ok(TagOutcome::AlreadyThere);
                    }
                    tags.push(tag.clone());
                }
                TagChange::Replace(list) => tags = list.clone(),
                TagChange::Remove(tag) => {
                    let before = tags.len();
                    tags.retain(|t| t != tag);
                    if tags.len() == before {
                        return Err(ServiceError::Refused(ComputeError::NotFound(format!(
                            "Instance {uuid} has no tag '{tag}'"
                        ))));
                    }
                }
                TagChange::Clear => tags.clear(),
            }
            tags.sort();
            tags.dedup();
            let expect = Expect { tags: Some(instance.spec.tags.clone()), ..editable_expect(false) };
            let update = InstanceUpdate { tags: Some(tags.clone()), ..InstanceUpdate::default() };
            if self.write_edit(&cell, uuid, expect, update).await? {
                return Ok(TagOutcome::Changed(tags));
            }
        }
        Err(invalid_state(action, uuid, "task_state", "changing"))
    }

    /// The placed server to edit (a server still being scheduled is in
    /// vm state `building`: 409).
    /// `addSecurityGroup` (`add`) or `removeSecurityGroup`: the server's
    /// list of security group names, changed in one write conditional on
    /// the list read (a concurrent change makes it read again). Adding a
    /// group the server has changes nothing; removing one it lacks is
    /// Nova's 404. No state check, as Nova (it asks Neutron's ports).
    pub async fn change_security_group(&self, uuid: &Uuid, name: &str, add: bool) -> Result<(), ServiceError> {
        for _ in 0..ATTEMPTS {
            let (instance, cell) =
                self.editable(uuid, if add { "addSecurityGroup" } else { "removeSecurityGroup" }).await?;
            let mut groups = instance.spec.security_groups.clone();
            let present = groups.iter().any(|g| g == name);
            match (add, present) {
                (true, true) => return Ok(()),
                (true, false) => groups.push(name.to_owned()),
                (false, true) => groups.retain(|g| g != name),
                (false, false) => {
                    return Err(ServiceError::Refused(ComputeError::NotFound(format!(
                        "Security group {name} not associated with the instance {uuid}"
                    ))))
                }
            }
            let expect = Expect {
                security_groups: Some(instance.spec.security_groups.clone()),
                not_deleted: true,
                ..Expect::default()
            };
            let update = InstanceUpdate { security_groups: Some(groups), ..InstanceUpdate::default() };
            if self.write_edit(&cell, uuid, expect, update).await? {
                return Ok(());
            }
        }
        Err(ServiceError::Refused(ComputeError::Conflict(format!(
            "Instance {uuid} changed repeatedly while its security groups were changed; retry."
        ))))
    }

    async fn editable(&self, uuid: &Uuid, action: &str) -> Result<(Instance, CellMapping), ServiceError> {
        match self.get_server(uuid).await? {
            ServerRecord::Placed { instance, cell, .. } => Ok((instance, cell)),
            ServerRecord::Pending(build) => Err(invalid_state(action, uuid, "vm_state", build.shown_state().0)),
            ServerRecord::Unreachable(_) => Err(ServiceError::Unavailable("the server's cell is not answering".into())),
        }
    }

    /// One conditional write of `update`: true when applied, false when
    /// the row changed since it was read (the caller reads again: a
    /// server that left the editable states is then its 409).
    async fn write_edit(
        &self,
        cell: &CellMapping,
        uuid: &Uuid,
        expect: Expect,
        mut update: InstanceUpdate,
    ) -> Result<bool, ServiceError> {
        update.updated_at = self.now();
        let outcomes =
            self.cells.get(cell)?.write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }]).await?;
        match outcomes.first() {
            Some(CellOutcome::Done) => Ok(true),
            Some(CellOutcome::Missing) => {
                Err(ServiceError::Refused(ComputeError::NotFound(format!("Instance {uuid} could not be found."))))
            }
            _ => Ok(false),
        }
    }
}

/// What an edit expects besides the value it read: Nova's vm states, and
/// for metadata no task.
fn editable_expect(no_task: bool) -> Expect {
    Expect {
        vm_states: statuses(EDITABLE),
        task_states: if no_task { vec![None] } else { Vec::new() },
        not_deleted: true,
        ..Expect::default()
    }
}

/// Nova's `check_instance_state` (vm state, then, for metadata, no task).
fn check_state(instance: &Instance, uuid: &Uuid, action: &str, no_task: bool) -> Result<(), ServiceError> {
    if !EDITABLE.contains(&instance.vm_state.as_str()) {
        return Err(invalid_state(action, uuid, "vm_state", &instance.vm_state));
    }
    if no_task {
        if let Some(task) = &instance.task_state {
            return Err(invalid_state(action, uuid, "task_state", task));
        }
    }
    Ok(())
}
