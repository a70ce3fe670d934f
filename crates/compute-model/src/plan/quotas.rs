//! Quota limits: a project's or a user's (refused below current usage
//! unless forced), their removal, and quota classes. Usage is counted, not
//! stored (`crate::quota`).

use std::collections::BTreeMap;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{quota, ComputeError, World, WorldChangeSet};

/// Set quota limits of a project (or of a user in it). Unless `force`,
/// a limit below current usage is refused, as Nova does; a user's limit
/// may not exceed the project's.
pub fn plan_set_quotas(
    world: &World,
    project: &str,
    user: Option<&str>,
    limits: &BTreeMap<String, i64>,
    force: bool,
) -> Result<WorldChangeSet> {
    let mut set = WorldChangeSet::new();
    for (resource, limit) in limits {
        if !quota::is_resource(resource) {
            return Err(ComputeError::Invalid(format!("Bad key(s) {resource} in quota_set")));
        }
        if *limit < -1 {
            return Err(ComputeError::Invalid(format!(
                "Quota limit {limit} for {resource} must be greater than or equal to -1."
            )));
        }
        if !force && *limit >= 0 {
            let used = quota::usage(world, project, user, resource);
            if used > *limit {
                return Err(ComputeError::Invalid(format!(
                    "Quota limit {limit} for {resource} must be greater than or equal to already used and reserved {used}."
                )));
            }
        }
        if let Some(_user) = user {
            let project_limit = quota::project_limit(world, project, resource);
            if project_limit >= 0 && (*limit < 0 || *limit > project_limit) {
                return Err(ComputeError::Invalid(format!(
                    "Quota limit {limit} for {resource} must be less than or equal to {project_limit}."
                )));
            }
        }
        set.compute(C::PutQuota {
            project_id: project.to_owned(),
            user_id: user.unwrap_or("").to_owned(),
            resource: resource.clone(),
            limit: *limit,
        });
    }
    Ok(set)
}

/// Remove every quota override of a project (or of a user in it).
pub fn plan_delete_quotas(world: &World, project: &str, user: Option<&str>) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    for (p, u, r) in world.compute.quotas.keys() {
        let matches = p == project
            && match user {
                Some(user) => u == user,
                None => true,
            };
        if matches {
            set.compute(C::DeleteQuota { project_id: p.clone(), user_id: u.clone(), resource: r.clone() });
        }
    }
    set
}

/// Set quota-class limits (`default` changes the defaults).
pub fn plan_set_quota_class(world: &World, class_name: &str, limits: &BTreeMap<String, i64>) -> Result<WorldChangeSet> {
    let _ = world;
    let mut set = WorldChangeSet::new();
    for (resource, limit) in limits {
        if !quota::is_resource(resource) {
            return Err(ComputeError::Invalid(format!("Bad key(s) {resource} in quota_set")));
        }
        set.compute(C::PutQuotaClass { class_name: class_name.to_owned(), resource: resource.clone(), limit: *limit });
    }
    Ok(set)
}
