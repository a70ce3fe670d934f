//! Quotas by counting, as Nova's `DbQuotaDriver` with
//! `count_usage_from_placement`: limits come from per-user overrides, then
//! per-project overrides, then the `default` quota class, then built-in
//! defaults; usage is counted, never reserved:
//!
//! - `instances`: instance mappings of the project (or user) not queued
//!   for deletion, which includes instances still only build requests;
//! - `cores` and `ram`: placement usage (`VCPU` + `PCPU`, `MEMORY_MB`) of
//!   the project's `INSTANCE` consumers, plus the flavors of its pending
//!   build requests (not yet claimed). Migration consumers are not counted,
//!   so a server in VERIFY_RESIZE is not charged twice;
//! - `server_groups`: groups of the project (or user);
//! - `server_group_members`: members of one group owned by the user;
//! - `key_pairs`: key pairs of the user, checked against the user's limit
//!   (its override, else the project's). As in Nova, their usage is shown
//!   as 0 and not checked when a limit is set.
//!
//! Checks run inside the write that consumes the quota (see
//! [`crate::plan`]), so they are exact under concurrency.

use crate::{ComputeError, World};

/// Every quota resource with Nova's default limit, in the order the API
/// lists them.
pub const RESOURCES: &[(&str, i64)] = &[
    ("cores", 20),
    ("fixed_ips", -1),
    ("floating_ips", -1),
    ("injected_file_content_bytes", 10240),
    ("injected_file_path_bytes", 255),
    ("injected_files", 5),
    ("instances", 10),
    ("key_pairs", 100),
    ("metadata_items", 128),
    ("networks", -1),
    ("ram", 51200),
    ("security_group_rules", -1),
    ("security_groups", -1),
    ("server_group_members", 10),
    ("server_groups", 10),
];

/// Is `name` a quota resource?
pub fn is_resource(name: &str) -> bool {
    RESOURCES.iter().any(|(r, _)| *r == name)
}

/// The default limit of `resource`: the `default` quota class, else the
/// built-in default.
pub fn default_limit(world: &World, resource: &str) -> i64 {
    if let Some(limit) = world.compute.quota_classes.get(&("default".to_owned(), resource.to_owned())) {
        return *limit;
    }
    RESOURCES.iter().find(|(r, _)| *r == resource).map_or(-1, |(_, d)| *d)
}

/// The project-wide limit of `resource`.
pub fn project_limit(world: &World, project: &str, resource: &str) -> i64 {
    world
        .compute
        .quotas
        .get(&(project.to_owned(), String::new(), resource.to_owned()))
        .copied()
        .unwrap_or_else(|| default_limit(world, resource))
}

/// The per-user override of `resource`, if one is set.
pub fn user_override(world: &World, project: &str, user: &str, resource: &str) -> Option<i64> {
    if user.is_empty() {
        return None;
    }
    world.compute.quotas.get(&(project.to_owned(), user.to_owned(), resource.to_owned())).copied()
}

/// The limit that applies to `user` in `project`: the user override if
/// set, else the project's.
pub fn effective_limit(world: &World, project: &str, user: Option<&str>, resource: &str) -> i64 {
    user.and_then(|u| user_override(world, project, u, resource))
        .unwrap_or_else(|| project_limit(world, project, resource))
}

/// Counted usage of `resource` by `project` (or by `user` within it).
pub fn usage(world: &World, project: &str, user: Option<&str>, resource: &str) -> i64 {
    let compute = &world.compute;
    match resource {
        "instances" => compute.instance_count(project, user),
        "cores" => compute.counted(project, user).cores,
        "ram" => compute.counted(project, user).ram,
        "server_groups" => compute
            .server_groups
            .values()
            .filter(|g| g.project_id == project && user.is_none_or(|u| g.user_id == u))
            .count() as i64,
        _ => 0,
    }
}

/// The amounts a boot of `count` instances of a flavor asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deltas {
    /// Instances.
    pub instances: i64,
    /// vCPUs.
    pub cores: i64,
    /// RAM in MiB.
    pub ram: i64,
}

impl Deltas {
    /// Deltas of `count` instances with `vcpus` and `ram` each.
    pub fn of(count: i64, vcpus: i64, ram: i64) -> Self {
        // Saturating: a request's count may be any positive integer.
        Deltas { instances: count, cores: count.saturating_mul(vcpus), ram: count.saturating_mul(ram) }
    }

    fn get(&self, resource: &str) -> i64 {
        match resource {
            "instances" => self.instances,
            "cores" => self.cores,
            _ => self.ram,
        }
    }
}

/// How many of `min_count..=max_count` instances of a flavor fit the quota
/// of `project`/`user` now. Refuses with Nova's `TooManyInstances` message
/// when not even `min_count` fit. Mirrors `check_num_instances_quota`
/// (per-user limits apply only when the user has an override for one of
/// instances, cores or ram).
pub fn admit_instances(
    world: &World,
    project: &str,
    user: &str,
    vcpus: i64,
    ram: i64,
    min_count: i64,
    max_count: i64,
) -> Result<i64, ComputeError> {
    const CHECKED: [&str; 3] = ["cores", "instances", "ram"];
    let per_user = CHECKED.iter().any(|r| user_override(world, project, user, r).is_some());
    // Each scope (project, and user when it has overrides) gives a limit
    // and a usage per resource; the headroom is the tightest of them.
    let mut scopes: Vec<Option<&str>> = vec![None];
    if per_user {
        scopes.push(Some(user));
    }
    let over = |count: i64| -> Vec<(&'static str, i64, i64)> {
        let deltas = Deltas::of(count, vcpus, ram);
        let mut overs = Vec::new();
        for resource in CHECKED {
            for scope in &scopes {
                let limit = effective_limit(world, project, *scope, resource);
                if limit < 0 {
                    continue;
                }
                let used = usage(world, project, *scope, resource);
                if used.saturating_add(deltas.get(resource)) > limit {
                    overs.push((resource, limit, used));
                    break;
                }
            }
        }
        overs
    };
    if over(max_count).is_empty() {
        return Ok(max_count);
    }
    // Headroom: the most instances every scope and resource still allows.
    let mut allowed = max_count;
    for resource in CHECKED {
        let per_instance = match resource {
            "instances" => 1,
            "cores" => vcpus,
            _ => ram,
        };
        if per_instance <= 0 {
            continue;
        }
        for scope in &scopes {
            let limit = effective_limit(world, project, *scope, resource);
            if limit < 0 {
                continue;
            }
            let headroom = (limit - usage(world, project, *scope, resource)).max(0);
            allowed = allowed.min(headroom / per_instance);
        }
    }
    if allowed >= min_count && allowed > 0 {
        return Ok(allowed);
    }
    let overs = over(if allowed > 0 { min_count } else { max_count.max(1) });
    let requested = if min_count == max_count { min_count.to_string() } else { format!("{min_count}-{max_count}") };
    let deltas = Deltas::of(max_count, vcpus, ram);
    let reqs: Vec<String> = overs
        .iter()
        .map(|(r, _, _)| if *r == "instances" { requested.clone() } else { deltas.get(r).to_string() })
        .collect();
    let names: Vec<&str> = overs.iter().map(|(r, _, _)| *r).collect();
    let useds: Vec<String> = overs.iter().map(|(_, _, u)| u.to_string()).collect();
    let limits: Vec<String> = overs.iter().map(|(_, l, _)| l.to_string()).collect();
    let names = names.join(", ");
    Err(ComputeError::OverQuota(format!(
        "Quota exceeded for {names}: Requested {}, but already used {} of {} {names}",
        reqs.join(", "),
        useds.join(", "),
        limits.join(", ")
    )))
}

/// Check that `adding` more members owned by `user` fit group `group`'s
/// `server_group_members` quota.
pub fn check_group_members(
    world: &World,
    project: &str,
    user: &str,
    group: &uuid::Uuid,
    adding: i64,
) -> Result<(), ComputeError> {
    let limit = effective_limit(world, project, Some(user), "server_group_members");
    if limit < 0 {
        return Ok(());
    }
    let Some(g) = world.compute.server_groups.get(group) else { return Ok(()) };
    let mine = g
        .members
        .iter()
        .filter(|m| world.compute.instance_mappings.get(*m).is_some_and(|im| im.user_id == user))
        .count() as i64;
    if mine + adding > limit {
        return Err(ComputeError::OverQuota("Quota exceeded, too many servers in group".into()));
    }
    Ok(())
}

/// Check that one more server group fits the `server_groups` quota.
pub fn check_server_groups(world: &World, project: &str, user: &str) -> Result<(), ComputeError> {
    for scope in [None, Some(user)] {
        let limit = effective_limit(world, project, scope, "server_groups");
        if limit >= 0 && usage(world, project, scope, "server_groups") + 1 > limit {
            return Err(ComputeError::OverQuota("Quota exceeded, too many server groups.".into()));
        }
    }
    Ok(())
}

/// Check that one more key pair of `user` fits the `key_pairs` limit
/// that applies to them in `project` (Nova's `check_deltas(context,
/// {'key_pairs': 1}, user_id)`: the count is per user).
pub fn check_key_pairs(world: &World, project: &str, user: &str) -> Result<(), ComputeError> {
    let limit = effective_limit(world, project, Some(user), "key_pairs");
    if limit >= 0 && world.compute.key_pairs_of(user).count() as i64 + 1 > limit {
        return Err(ComputeError::OverQuota("Quota exceeded, too many key pairs.".into()));
    }
    Ok(())
}

/// Check a metadata map against `metadata_items`.
pub fn check_metadata_items(world: &World, project: &str, user: &str, items: usize) -> Result<(), ComputeError> {
    let limit = effective_limit(world, project, Some(user), "metadata_items");
    if limit >= 0 && items as i64 > limit {
        return Err(ComputeError::OverQuota(format!(
            "Quota exceeded for metadata_items: Requested {items}, but already used 0 of {limit} metadata_items"
        )));
    }
    Ok(())
}

/// Check a boot's or rebuild's personality files (before 2.57) as Nova's
/// `_check_injected_file_quota`: their number against `injected_files`,
/// then the longest path and content (as sent, base64) against
/// `injected_file_path_bytes` and `injected_file_content_bytes`, the path
/// reported first. Limits only: nothing is counted or consumed.
pub fn check_injected_files(
    world: &World,
    project: &str,
    user: &str,
    files: &[(usize, usize)],
) -> Result<(), ComputeError> {
    if files.is_empty() {
        return Ok(());
    }
    let over = |resource: &str, value: usize| {
        let limit = effective_limit(world, project, Some(user), resource);
        (limit >= 0 && value as i64 > limit).then_some(limit)
    };
    if over("injected_files", files.len()).is_some() {
        return Err(ComputeError::OverQuota("Personality file limit exceeded".into()));
    }
    let max_path = files.iter().map(|f| f.0).max().unwrap_or(0);
    let max_content = files.iter().map(|f| f.1).max().unwrap_or(0);
    if let Some(limit) = over("injected_file_path_bytes", max_path) {
        return Err(ComputeError::OverQuota(format!("Personality file path exceeds maximum {limit}")));
    }
    if let Some(limit) = over("injected_file_content_bytes", max_content) {
        return Err(ComputeError::OverQuota(format!("Personality file content exceeds maximum {limit}")));
    }
    Ok(())
}
