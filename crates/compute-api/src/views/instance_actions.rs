//! `/servers/{id}/os-instance-actions` bodies (Nova's
//! `instance_actions.py`).

use serde_json::{json, Map, Value};

use berth_compute_model::cell::{ActionEvent, InstanceAction};

use super::{host_id, list_body, opt_str, strtime, strtime_or_null, wrap};
use crate::ComputeVersion;

/// What policy lets the requester see of an action's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventAccess {
    /// `os_compute_api:os-instance-actions:events`: events with their
    /// `traceback` at every version, and their `host` from 2.62. Without
    /// it, events are shown only from 2.51, without those two.
    pub show_events: bool,
    /// `os_compute_api:os-instance-actions:events:details`: `details` from
    /// 2.84.
    pub show_details: bool,
}

/// One action: `action`, `instance_uuid`, `request_id`, `user_id`,
/// `project_id`, `start_time`, `message`, and from 2.58 `updated_at`.
pub fn action_item(version: ComputeVersion, action: &InstanceAction) -> Value {
    let mut body = Map::new();
    body.insert("action".into(), json!(action.action));
    body.insert("instance_uuid".into(), json!(action.instance_uuid.to_string()));
    body.insert("request_id".into(), json!(action.request_id));
    body.insert("user_id".into(), json!(action.user_id));
    body.insert("project_id".into(), json!(action.project_id));
    body.insert("start_time".into(), json!(strtime(action.start_time)));
    body.insert("message".into(), opt_str(action.message.as_deref()));
    if version.at_least(58) {
        body.insert("updated_at".into(), strtime_or_null(action.updated_at));
    }
    Value::Object(body)
}

/// One event: `event`, `start_time`, `finish_time`, `result`, then as
/// allowed `traceback`, `host` (2.62), `hostId` (2.62, for everyone; from
/// `project_id`, the action's project), `details` (2.84).
pub fn event_item(version: ComputeVersion, event: &ActionEvent, project_id: &str, access: &EventAccess) -> Value {
    let mut body = Map::new();
    body.insert("event".into(), json!(event.event));
    body.insert("start_time".into(), json!(strtime(event.start_time)));
    body.insert("finish_time".into(), strtime_or_null(event.finish_time));
    body.insert("result".into(), opt_str(event.result.as_deref()));
    if access.show_events {
        body.insert("traceback".into(), opt_str(event.traceback.as_deref()));
        if version.at_least(62) {
            body.insert("host".into(), opt_str(event.host.as_deref()));
        }
    }
    if version.at_least(62) {
        body.insert("hostId".into(), json!(host_id(project_id, event.host.as_deref())));
    }
    if version.at_least(84) && access.show_details {
        body.insert("details".into(), opt_str(event.details.as_deref()));
    }
    Value::Object(body)
}

/// The `GET /servers/{id}/os-instance-actions` body; `links` (a `next`
/// link, 2.58+ paging; the marker is the last action's `request_id`) when
/// `next` is given.
pub fn index(version: ComputeVersion, actions: &[InstanceAction], next: Option<Value>) -> Value {
    let items = actions.iter().map(|a| action_item(version, a)).collect();
    list_body("instanceActions", items, "links", next.filter(|_| version.at_least(58)))
}

/// The `GET /servers/{id}/os-instance-actions/{request_id}` body: the
/// action and, when visible, its `events`. `instance_project_id` stands in
/// for an action without a project (Nova's periodic-task actions).
pub fn show(
    version: ComputeVersion,
    action: &InstanceAction,
    instance_project_id: &str,
    access: &EventAccess,
) -> Value {
    let mut body = action_item(version, action);
    if access.show_events || version.at_least(51) {
        let project = if action.project_id.is_empty() { instance_project_id } else { &action.project_id };
        let events: Vec<Value> = action.events.iter().map(|e| event_item(version, e, project, access)).collect();
        if let Value::Object(map) = &mut body {
            map.insert("events".into(), Value::Array(events));
        }
    }
    wrap("instanceAction", body)
}
