//! Hypervisor, service, aggregate and availability-zone views against
//! Nova's samples and response schemas.

use serde_json::json;
use uuid::Uuid;

use berth_compute_api::views::availability_zones::{self, ZoneDetail};
use berth_compute_api::views::hypervisors::{self, HypervisorSource, HypervisorUsage};
use berth_compute_api::views::{aggregates, services};
use berth_compute_api::ComputeVersion;
use berth_compute_model::cell::Service;

use crate::fixtures::{self, compute_node, service};
use crate::support::{all_versions, assert_nova_response, assert_sample, links};

fn v(minor: u16) -> ComputeVersion {
    ComputeVersion(minor)
}

/// The usage Nova's hypervisor samples were recorded with (one m1.tiny
/// claimed, no running instance counted).
const SAMPLE_USAGE: HypervisorUsage = HypervisorUsage {
    vcpus_used: 0,
    memory_mb_used: 512,
    local_gb_used: 0,
    running_vms: 0,
    current_workload: 0,
    disk_available_least: Some(0),
};

fn sample_servers() -> Vec<(Uuid, &'static str)> {
    vec![
        (Uuid::parse_str("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa").expect("uuid"), "test_server1"),
        (Uuid::parse_str("bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb").expect("uuid"), "test_server2"),
    ]
}

#[test]
fn hypervisors_match_samples() {
    let links = links();
    let mut node = compute_node();
    node.hypervisor_hostname = "fake-mini".into();
    let svc = service(2, "compute", "nova-compute");
    let servers = sample_servers();
    let plain = HypervisorSource { node: &node, service: &svc, up: true, servers: None };
    let with = HypervisorSource { servers: Some(&servers), ..plain };
    // The paged samples (2.33+) show a second node, `host2`, before the marker.
    let mut second = compute_node();
    second.id = 2;
    second.hypervisor_hostname = "host2".into();
    let paged = HypervisorSource { node: &second, ..plain };
    for (dir, minor) in [
        ("os-hypervisors", 1),
        ("os-hypervisors/v2.28", 28),
        ("os-hypervisors/v2.53", 53),
        ("os-hypervisors/v2.88", 88),
    ] {
        let version = v(minor);
        if minor >= 53 {
            let marker = second.uuid.to_string();
            let next = links.next("os-hypervisors/detail", &[("limit", "1")], &marker);
            let detail = hypervisors::list(
                version,
                vec![hypervisors::detail_item(version, &paged, &SAMPLE_USAGE, None)],
                Some(next),
            );
            assert_sample(&detail, &format!("{dir}/hypervisors-detail-resp.json.tpl"), &[]);
            let next = links.next("os-hypervisors", &[("limit", "1")], &marker);
            let list = hypervisors::list(version, vec![hypervisors::index_item(version, &paged)], Some(next));
            assert_sample(&list, &format!("{dir}/hypervisors-list-resp.json.tpl"), &[]);
        } else {
            let detail =
                hypervisors::list(version, vec![hypervisors::detail_item(version, &plain, &SAMPLE_USAGE, None)], None);
            assert_sample(&detail, &format!("{dir}/hypervisors-detail-resp.json.tpl"), &[]);
            let list = hypervisors::list(version, vec![hypervisors::index_item(version, &plain)], None);
            assert_sample(&list, &format!("{dir}/hypervisors-list-resp.json.tpl"), &[]);
        }
        assert_sample(
            &hypervisors::show(version, &plain, &SAMPLE_USAGE, None),
            &format!("{dir}/hypervisors-show-resp.json.tpl"),
            &[],
        );
        let with_servers = hypervisors::list(version, vec![hypervisors::index_item(version, &with)], None);
        assert_sample(&with_servers, &format!("{dir}/hypervisors-with-servers-resp.json.tpl"), &[]);
        // Before 2.53 `/os-hypervisors/{name}/servers` of a node without
        // servers; from 2.53 a listing that did not ask for them.
        let asked: Option<&[(Uuid, &str)]> = if minor >= 53 { None } else { Some(&[]) };
        let without = hypervisors::list(
            version,
            vec![hypervisors::index_item(version, &HypervisorSource { servers: asked, ..plain })],
            None,
        );
        assert_sample(&without, &format!("{dir}/hypervisors-without-servers-resp.json.tpl"), &[]);
        if minor >= 53 {
            let body = hypervisors::show(version, &with, &SAMPLE_USAGE, None);
            assert_sample(&body, &format!("{dir}/hypervisors-show-with-servers-resp.json.tpl"), &[]);
            let body =
                hypervisors::list(version, vec![hypervisors::detail_item(version, &with, &SAMPLE_USAGE, None)], None);
            assert_sample(&body, &format!("{dir}/hypervisors-detail-with-servers-resp.json.tpl"), &[]);
        }
    }
    // The 2.33 samples call the second node `host1`.
    second.hypervisor_hostname = "host1".into();
    let paged = HypervisorSource { node: &second, ..plain };
    let next = links.next("os-hypervisors/detail", &[("limit", "1")], "2");
    let detail =
        hypervisors::list(v(33), vec![hypervisors::detail_item(v(33), &paged, &SAMPLE_USAGE, None)], Some(next));
    assert_sample(&detail, "os-hypervisors/v2.33/hypervisors-detail-resp.json.tpl", &[]);
    let next = links.next("os-hypervisors", &[("limit", "1")], "2");
    let list = hypervisors::list(v(33), vec![hypervisors::index_item(v(33), &paged)], Some(next));
    assert_sample(&list, "os-hypervisors/v2.33/hypervisors-list-resp.json.tpl", &[]);

    for version in all_versions() {
        for up in [true, false] {
            for servers in [None, Some(&servers[..]), Some(&[][..])] {
                let source = HypervisorSource { up, servers, ..plain };
                let next = Some(links.next("os-hypervisors", &[("limit", "1")], "x"));
                if servers.is_some() && !version.at_least(53) {
                    // Before 2.53 servers come from `/os-hypervisors/{name}/servers`,
                    // which does not page.
                    let list = hypervisors::list(version, vec![hypervisors::index_item(version, &source)], None);
                    assert_nova_response("hypervisors.servers", version, &list);
                    continue;
                }
                let list = hypervisors::list(version, vec![hypervisors::index_item(version, &source)], next.clone());
                assert_nova_response("hypervisors.index", version, &list);
                let item = hypervisors::detail_item(version, &source, &SAMPLE_USAGE, Some("up 1 day"));
                assert_nova_response("hypervisors.detail", version, &hypervisors::list(version, vec![item], next));
                assert_nova_response(
                    "hypervisors.show",
                    version,
                    &hypervisors::show(version, &source, &SAMPLE_USAGE, None),
                );
            }
        }
    }
}

fn sample_services() -> Vec<(Service, &'static str, bool)> {
    let mut list = Vec::new();
    for (id, host, binary, reason, up, zone) in [
        (1, "host1", "nova-scheduler", Some("test1"), true, "internal"),
        (2, "host1", "nova-compute", Some("test2"), true, "nova"),
        (3, "host2", "nova-scheduler", None, false, "internal"),
        (4, "host2", "nova-compute", Some("test4"), false, "nova"),
    ] {
        let mut svc = service(id, host, binary);
        svc.disabled = reason.is_some();
        svc.disabled_reason = reason.map(str::to_owned);
        list.push((svc, zone, up));
    }
    list
}

#[test]
fn services_match_samples() {
    let list = sample_services();
    for (dir, minor) in [("os-services", 1), ("os-services/v2.11", 11), ("os-services/v2.53", 53)] {
        let items = list.iter().map(|(svc, zone, up)| services::item(v(minor), svc, zone, *up)).collect();
        assert_sample(&services::index(items), &format!("{dir}/services-list-get-resp.json.tpl"), &[]);
    }
    let down = services::index(vec![services::down_cell_item("host1"), services::down_cell_item("host2")]);
    assert_sample(&down, "os-services/v2.69/services-list-get-resp.json.tpl", &[]);

    assert_sample(
        &services::legacy_status("host1", "nova-compute", false, None),
        "os-services/service-enable-put-resp.json.tpl",
        &[],
    );
    assert_sample(
        &services::legacy_status("host1", "nova-compute", true, None),
        "os-services/service-disable-put-resp.json.tpl",
        &[],
    );
    assert_sample(
        &services::legacy_status("host1", "nova-compute", true, Some("test2")),
        "os-services/service-disable-log-put-resp.json.tpl",
        &[],
    );
    assert_sample(
        &services::legacy_forced_down("host1", "nova-compute", true),
        "os-services/v2.11/service-force-down-put-resp.json.tpl",
        &[],
    );

    let mut svc = list[1].0.clone();
    svc.uuid = Uuid::parse_str("e81d66a4-ddd3-4aba-8a84-171d1cb4d339").expect("uuid");
    svc.forced_down = true;
    assert_sample(
        &services::update(v(53), &svc, "nova", false),
        "os-services/v2.53/service-force-down-put-resp.json.tpl",
        &[],
    );
    svc.forced_down = false;
    svc.disabled_reason = Some("maintenance".into());
    assert_sample(
        &services::update(v(53), &svc, "nova", true),
        "os-services/v2.53/service-disable-log-put-resp.json.tpl",
        &[],
    );

    for version in all_versions() {
        let mut items: Vec<_> = list.iter().map(|(svc, zone, up)| services::item(version, svc, zone, *up)).collect();
        if version.at_least(69) {
            items.push(services::down_cell_item("host3"));
        }
        assert_nova_response("services.index", version, &services::index(items));
        let body = if version.at_least(53) {
            services::update(version, &svc, "nova", true)
        } else {
            services::legacy_status("host1", "nova-compute", true, Some("why"))
        };
        assert_nova_response("services.update", version, &body);
    }
    // The later of the heartbeat and the row's update time is shown.
    let shown = services::item(v(1), &list[0].0, "internal", true);
    assert_eq!(shown["updated_at"], json!("2023-11-14T22:14:20.000000"));
}

#[test]
fn aggregates_match_samples() {
    let bare = fixtures::aggregate(&[]);
    let with_host = fixtures::aggregate(&["compute"]);
    for (dir, minor) in [("os-aggregates", 1), ("os-aggregates/v2.41", 41)] {
        let version = v(minor);
        assert_sample(&aggregates::create(version, &bare), &format!("{dir}/aggregate-post-resp.json.tpl"), &[]);
        assert_sample(&aggregates::show(version, &bare), &format!("{dir}/aggregates-get-resp.json.tpl"), &[]);
        assert_sample(
            &aggregates::index(version, std::slice::from_ref(&with_host)),
            &format!("{dir}/aggregates-list-get-resp.json.tpl"),
            &[],
        );
        assert_sample(
            &aggregates::show(version, &with_host),
            &format!("{dir}/aggregates-add-host-post-resp.json.tpl"),
            &[],
        );
        assert_sample(
            &aggregates::show(version, &bare),
            &format!("{dir}/aggregates-remove-host-post-resp.json.tpl"),
            &[],
        );
        let mut updated = bare.clone();
        updated.name = "newname".into();
        updated.metadata.insert("availability_zone".into(), "nova2".into());
        updated.updated_at = Some(fixtures::T0 + 1);
        assert_sample(&aggregates::show(version, &updated), &format!("{dir}/aggregate-update-post-resp.json.tpl"), &[]);
        let mut tagged = bare.clone();
        tagged.metadata.insert("key".into(), "value".into());
        tagged.updated_at = Some(fixtures::T0 + 1);
        assert_sample(
            &aggregates::show(version, &tagged),
            &format!("{dir}/aggregates-metadata-post-resp.json.tpl"),
            &[],
        );
    }
    let mut no_zone = with_host.clone();
    no_zone.metadata.clear();
    for version in all_versions() {
        for aggregate in [&bare, &with_host, &no_zone] {
            let shown = aggregates::show(version, aggregate);
            for key in [
                "aggregates.show",
                "aggregates.update",
                "aggregates._add_host",
                "aggregates._remove_host",
                "aggregates._set_metadata",
            ] {
                assert_nova_response(key, version, &shown);
            }
            assert_nova_response("aggregates.create", version, &aggregates::create(version, aggregate));
        }
        assert_nova_response(
            "aggregates.index",
            version,
            &aggregates::index(version, &[bare.clone(), no_zone.clone()]),
        );
    }
}

#[test]
fn availability_zones_match_samples() {
    let body = availability_zones::index(&[("nova", true)]);
    assert_sample(&body, "os-availability-zone/availability-zone-list-resp.json.tpl", &[]);
    let conductor = service(1, "conductor", "nova-conductor");
    let scheduler = service(2, "scheduler", "nova-scheduler");
    let compute = service(3, "compute", "nova-compute");
    let internal = [(&conductor, true), (&scheduler, true)];
    let nova = [(&compute, true)];
    let body = availability_zones::detail(&[
        ZoneDetail { name: "internal", available: true, services: &internal },
        ZoneDetail { name: "nova", available: true, services: &nova },
    ]);
    assert_sample(&body, "os-availability-zone/availability-zone-detail-resp.json.tpl", &[]);
    let with_down = availability_zones::detail(&[
        ZoneDetail { name: "nova", available: true, services: &nova },
        ZoneDetail { name: "empty", available: false, services: &[] },
    ]);
    for version in all_versions() {
        assert_nova_response(
            "availability_zone.index",
            version,
            &availability_zones::index(&[("nova", true), ("b", false)]),
        );
        assert_nova_response("availability_zone.detail", version, &body);
        assert_nova_response("availability_zone.detail", version, &with_down);
    }
    assert_eq!(with_down["availabilityZoneInfo"][1]["hosts"], serde_json::Value::Null);
}
