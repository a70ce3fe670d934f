//! `/os-server-groups` bodies (Nova's `server_groups.py`
//! `_format_server_group`).

use serde_json::{json, Map, Value};
use uuid::Uuid;

use berth_compute_model::{GroupPolicy, ServerGroup};

use super::wrap;
use crate::ComputeVersion;

/// One server group. `members` are the members to show: Nova lists only
/// members that are not deleted, which the caller knows.
///
/// Before 2.64 the policy is a one-element `policies` list followed by an
/// empty `metadata`; from 2.64 it is `policy` plus `rules`
/// (`max_server_per_host` for anti-affinity when set, else `{}`). From
/// 2.13 `project_id` and `user_id` follow the members.
pub fn item(version: ComputeVersion, group: &ServerGroup, members: &[Uuid]) -> Value {
    let mut body = Map::new();
    body.insert("id".into(), json!(group.uuid.to_string()));
    body.insert("name".into(), json!(group.name));
    if version.at_least(64) {
        body.insert("policy".into(), json!(group.policy.as_str()));
        let mut rules = Map::new();
        if let (GroupPolicy::AntiAffinity, Some(max)) = (group.policy, group.max_server_per_host) {
            rules.insert("max_server_per_host".into(), json!(max));
        }
        body.insert("rules".into(), Value::Object(rules));
    } else {
        body.insert("policies".into(), json!([group.policy.as_str()]));
        body.insert("metadata".into(), json!({}));
    }
    body.insert("members".into(), Value::Array(members.iter().map(|m| json!(m.to_string())).collect()));
    if version.at_least(13) {
        body.insert("project_id".into(), json!(group.project_id));
        body.insert("user_id".into(), json!(group.user_id));
    }
    Value::Object(body)
}

/// The `GET /os-server-groups/{id}` and `POST /os-server-groups` body.
pub fn show(version: ComputeVersion, group: &ServerGroup, members: &[Uuid]) -> Value {
    wrap("server_group", item(version, group, members))
}

/// The `GET /os-server-groups` body, from `(group, members to show)` pairs.
/// (Nova pages this listing with `limit`/`offset` but never adds links.)
pub fn index(version: ComputeVersion, groups: &[(&ServerGroup, &[Uuid])]) -> Value {
    let items = groups.iter().map(|(group, members)| item(version, group, members)).collect();
    wrap("server_groups", Value::Array(items))
}
