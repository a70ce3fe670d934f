//! Instance-action, version-document and Glance image views.

use serde_json::{json, Value};

use berth_compute_api::views::instance_actions::{self, EventAccess};
use berth_compute_api::views::{versions, Links};
use berth_compute_api::ComputeVersion;
use berth_compute_model::cell::InstanceAction;

use crate::fixtures::{self, action};
use crate::support::{all_versions, assert_nova_response, assert_sample, links, HOST};

fn v(minor: u16) -> ComputeVersion {
    ComputeVersion(minor)
}

const ADMIN: EventAccess = EventAccess { show_events: true, show_details: true };
const MEMBER: EventAccess = EventAccess { show_events: false, show_details: false };

fn actions() -> Vec<InstanceAction> {
    let stop = action(false);
    let create = InstanceAction {
        action: "create".into(),
        request_id: format!("req-{}", fixtures::uuid(601)),
        start_time: fixtures::T0 - 100,
        ..action(false)
    };
    vec![stop, create]
}

#[test]
fn instance_actions_match_samples() {
    let links = links();
    let stop = action(true);
    let project = &stop.project_id;
    for (dir, minor) in [
        ("os-instance-actions", 1),
        ("os-instance-actions/v2.21", 21),
        ("os-instance-actions/v2.51", 51),
        ("os-instance-actions/v2.58", 58),
        ("os-instance-actions/v2.62", 62),
        ("os-instance-actions/v2.66", 66),
        ("os-instance-actions/v2.84", 84),
    ] {
        let version = v(minor);
        assert_sample(
            &instance_actions::show(version, &stop, project, &ADMIN),
            &format!("{dir}/instance-action-get-resp.json.tpl"),
            &[],
        );
        assert_sample(
            &instance_actions::index(version, &actions(), None),
            &format!("{dir}/instance-actions-list-resp.json.tpl"),
            &[],
        );
        if minor >= 51 {
            let body = instance_actions::show(version, &stop, project, &MEMBER);
            assert_sample(&body, &format!("{dir}/instance-action-get-non-admin-resp.json.tpl"), &[]);
        }
        if minor >= 58 {
            let all = actions();
            let id = all[0].instance_uuid.to_string();
            let next = links.next(&format!("servers/{id}/os-instance-actions"), &[("limit", "1")], &all[0].request_id);
            let body = instance_actions::index(version, &all[..1], Some(next));
            assert_sample(&body, &format!("{dir}/instance-actions-list-with-limit-resp.json.tpl"), &[]);
            let body = instance_actions::index(version, &all[1..], None);
            assert_sample(&body, &format!("{dir}/instance-actions-list-with-marker-resp.json.tpl"), &[]);
        }
    }
    for version in all_versions() {
        for access in [ADMIN, MEMBER, EventAccess { show_events: false, show_details: true }] {
            let body = instance_actions::show(version, &stop, project, &access);
            assert_nova_response("instance_actions.show", version, &body);
        }
        let next = links.next("servers/x/os-instance-actions", &[("limit", "2")], "req-1");
        assert_nova_response(
            "instance_actions.index",
            version,
            &instance_actions::index(version, &actions(), Some(next)),
        );
    }
    // Events are hidden from non-admins before 2.51; hostId is 2.62+.
    assert!(instance_actions::show(v(50), &stop, project, &MEMBER)["instanceAction"].get("events").is_none());
    let event = &instance_actions::show(v(62), &stop, project, &ADMIN)["instanceAction"]["events"][0];
    assert_eq!(event["host"], json!("compute"));
    assert_eq!(event["hostId"].as_str().map(str::len), Some(56));
}

#[test]
fn version_documents_match_samples() {
    let root = Links::new(HOST, None);
    // v2.0 first, then v2.1, as Nova lists them (v2.0 is not served).
    let index = versions::index(&root);
    let sample = crate::support::template("versions/versions-get-resp.json.tpl");
    assert_eq!(index["versions"][0]["id"], json!("v2.0"));
    assert_eq!(index["versions"].as_array().map(Vec::len), Some(2));
    let text = serde_json::to_string(&sample).unwrap_or_default().replace("%(max_api_version)s", "2.104");
    let expected: Value = serde_json::from_str(&text.replace("%(host)s", HOST)).unwrap_or_default();
    assert_eq!(index, expected);
    assert_sample(&versions::show(&root), "versions/v21-version-get-resp.json.tpl", &[]);
    for version in all_versions() {
        assert_nova_response("versionsV21.show", version, &versions::show(&root));
    }
    let prefixed = Links::new("http://h:8080/compute", Some("p"));
    assert_eq!(versions::show(&prefixed)["version"]["links"][0]["href"], json!("http://h:8080/compute/v2.1/"));
}
