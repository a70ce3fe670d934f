//! `/os-quota-sets` bodies (Nova's `quota_sets.py` `_format_quota_set`).
//!
//! The limits and usages come from the caller (berth counts usage, as
//! Nova's `DbQuotaDriver` with placement does: there are never
//! reservations, so `reserved` is always 0).

use serde_json::{json, Map, Value};

use super::wrap;
use crate::ComputeVersion;

/// Every quota resource Nova shows, in its order (sorted by name). berth's
/// model also knows `networks`, which Nova dropped from the API in Train.
pub const RESOURCES: &[&str] = &[
    "cores",
    "fixed_ips",
    "floating_ips",
    "injected_file_content_bytes",
    "injected_file_path_bytes",
    "injected_files",
    "instances",
    "key_pairs",
    "metadata_items",
    "ram",
    "security_group_rules",
    "security_groups",
    "server_group_members",
    "server_groups",
];

/// Network resources hidden from 2.36 (the network proxy APIs went away).
pub const HIDDEN_FROM_2_36: &[&str] = &["fixed_ips", "floating_ips", "security_group_rules", "security_groups"];
/// File-injection resources also hidden from 2.57 (personality went away).
pub const HIDDEN_FROM_2_57: &[&str] = &["injected_file_content_bytes", "injected_file_path_bytes", "injected_files"];

/// The quota resources shown (and accepted by updates) at `version`.
pub fn resources(version: ComputeVersion) -> impl Iterator<Item = &'static str> {
    RESOURCES.iter().copied().filter(move |r| {
        !(version.at_least(36) && HIDDEN_FROM_2_36.contains(r) || version.at_least(57) && HIDDEN_FROM_2_57.contains(r))
    })
}

fn quota_set(version: ComputeVersion, project_id: Option<&str>, value: impl Fn(&str) -> Value) -> Value {
    let mut body = Map::new();
    if let Some(id) = project_id {
        body.insert("id".into(), json!(id));
    }
    for resource in resources(version) {
        body.insert(resource.into(), value(resource));
    }
    wrap("quota_set", Value::Object(body))
}

/// The `GET /os-quota-sets/{project_id}` body (also with `?user_id=`):
/// `id`, then each shown resource's effective limit (`-1` = unlimited).
pub fn show(version: ComputeVersion, project_id: &str, limit: impl Fn(&str) -> i64) -> Value {
    quota_set(version, Some(project_id), |r| json!(limit(r)))
}

/// The `GET /os-quota-sets/{project_id}/defaults` body: the default limits
/// (quota class `default`, else built-in), with the project's `id`.
pub fn defaults(version: ComputeVersion, project_id: &str, default_limit: impl Fn(&str) -> i64) -> Value {
    quota_set(version, Some(project_id), |r| json!(default_limit(r)))
}

/// The `PUT /os-quota-sets/{project_id}` body: like [`show`] without `id`
/// (Nova has left it out since v2).
pub fn update(version: ComputeVersion, limit: impl Fn(&str) -> i64) -> Value {
    quota_set(version, None, |r| json!(limit(r)))
}

/// The `GET /os-quota-sets/{project_id}/detail` body: per resource
/// `{limit, in_use, reserved: 0}`; `usage` returns `(limit, in_use)`.
pub fn detail(version: ComputeVersion, project_id: &str, usage: impl Fn(&str) -> (i64, i64)) -> Value {
    quota_set(version, Some(project_id), |r| {
        let (limit, in_use) = usage(r);
        json!({"limit": limit, "in_use": in_use, "reserved": 0})
    })
}

/// The quota-class resources shown at `version` (Nova's
/// `quota_classes.py`, whose cut-offs differ from quota sets'): before
/// 2.50 everything but the server-group ones; from 2.50 the server-group
/// ones and no network ones; from 2.57 no file-injection ones either.
pub fn class_resources(version: ComputeVersion) -> impl Iterator<Item = &'static str> {
    RESOURCES.iter().copied().filter(move |r| {
        if version.at_least(50) {
            !(HIDDEN_FROM_2_36.contains(r) || version.at_least(57) && HIDDEN_FROM_2_57.contains(r))
        } else {
            !matches!(*r, "server_groups" | "server_group_members")
        }
    })
}

/// The resources a quota-class update takes at `version` (before 2.50 all
/// of them, the server-group ones included though not shown).
pub fn class_update_resources(version: ComputeVersion) -> impl Iterator<Item = &'static str> {
    RESOURCES.iter().copied().filter(move |r| {
        !(version.at_least(50) && HIDDEN_FROM_2_36.contains(r) || version.at_least(57) && HIDDEN_FROM_2_57.contains(r))
    })
}

/// The `GET /os-quota-class-sets/{class}` body (with the class as `id`)
/// and the `PUT` body (`class` `None`: no `id`).
pub fn class_set(version: ComputeVersion, class: Option<&str>, limit: impl Fn(&str) -> i64) -> Value {
    let mut body = Map::new();
    if let Some(id) = class {
        body.insert("id".into(), json!(id));
    }
    for resource in class_resources(version) {
        body.insert(resource.into(), json!(limit(resource)));
    }
    wrap("quota_class_set", Value::Object(body))
}
