//! Boot admission, the API's one write for `POST /servers`:
//! [`plan_admit_boot`] (quota, then build requests, request specs,
//! instance mappings and group membership) and [`hold_boot`], which keeps
//! a reserved server's build requests back until its lease starts.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{
    quota, BuildRequest, ComputeError, InstanceMapping, InstanceSpec, RequestSpec, Timestamp, World, WorldChangeSet,
};

/// A boot request as the API accepted it.
#[derive(Debug, Clone)]
pub struct BootAdmission {
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// `max_count` instances, each with a fresh uuid and its spec.
    pub instances: Vec<(Uuid, InstanceSpec)>,
    /// `min_count`.
    pub min_count: i64,
    /// The request spec shared by the instances (`instance_uuid` and
    /// `num_instances` are filled in per instance).
    pub request_spec: RequestSpec,
    /// Acceptance time.
    pub now: Timestamp,
}

/// Admit a boot: lower the count to the quota headroom (refusing below
/// `min_count`), check the server group's member quota, and create the
/// build requests, request specs and instance mappings. Returns the
/// admitted instance uuids.
pub fn plan_admit_boot(world: &World, boot: &BootAdmission) -> Result<(WorldChangeSet, Vec<Uuid>)> {
    let flavor = &boot.request_spec.flavor;
    let max_count = boot.instances.len() as i64;
    let admitted = quota::admit_instances(
        world,
        &boot.project_id,
        &boot.user_id,
        flavor.vcpus,
        flavor.memory_mb,
        boot.min_count,
        max_count,
    )?;
    if let Some((_, first)) = boot.instances.first() {
        quota::check_metadata_items(world, &boot.project_id, &boot.user_id, first.metadata.len())?;
    }
    let mut set = WorldChangeSet::new();
    let instances: Vec<&(Uuid, InstanceSpec)> = boot.instances.iter().take(admitted as usize).collect();
    if let Some(group_id) = boot.request_spec.group {
        let group = world
            .compute
            .server_groups
            .get(&group_id)
            .ok_or_else(|| ComputeError::Invalid(format!("Invalid server group {group_id}")))?;
        quota::check_group_members(world, &boot.project_id, &boot.user_id, &group_id, admitted)?;
        let mut group = group.clone();
        group.members.extend(instances.iter().map(|(uuid, _)| *uuid));
        set.compute(C::PutServerGroup(group));
    }
    for (uuid, spec) in &instances {
        if world.compute.instance_mappings.contains_key(uuid) {
            return Err(ComputeError::Conflict(format!("Instance {uuid} already exists.")));
        }
        set.compute(C::PutInstanceMapping(InstanceMapping {
            instance_uuid: *uuid,
            cell: None,
            project_id: boot.project_id.clone(),
            user_id: boot.user_id.clone(),
            queued_for_delete: false,
            created_at: boot.now,
        }));
        set.compute(C::PutBuildRequest(BuildRequest {
            instance_uuid: *uuid,
            project_id: boot.project_id.clone(),
            user_id: boot.user_id.clone(),
            spec: spec.clone(),
            created_at: boot.now,
            held: false,
        }));
        let mut request_spec = boot.request_spec.clone();
        request_spec.instance_uuid = *uuid;
        request_spec.num_instances = admitted;
        set.compute(C::PutRequestSpec(request_spec));
    }
    Ok((set, instances.iter().map(|(uuid, _)| *uuid).collect()))
}

/// Hold the build requests of an admitted boot (`plan_admit_boot`'s change
/// set) back from scheduling, and add `hints` to their request specs: a
/// reserved server, admitted in the same write as its lease, waits as a
/// held build request until the lease start releases it.
pub fn hold_boot(set: &mut WorldChangeSet, hints: &BTreeMap<String, Vec<String>>) {
    for change in &mut set.changes {
        match change {
            crate::WorldChange::Compute(C::PutBuildRequest(build)) => build.held = true,
            crate::WorldChange::Compute(C::PutRequestSpec(spec)) => {
                spec.hints.extend(hints.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {}
        }
    }
}
