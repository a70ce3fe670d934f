//! Server views against Nova's samples and response schemas.

use serde_json::{json, Value};
use uuid::Uuid;

use berth_compute_api::views::servers::{self, HostStatus, HostStatusAccess, ServerAccess, ServerExtras};
use berth_compute_api::ComputeVersion;

use berth_compute_model::cell::Instance;

use crate::fixtures::{self, request_spec, uuid};
use crate::support::{all_versions, assert_nova_response, assert_sample, links};

const ADMIN: ServerAccess = ServerAccess {
    show_admin_fields: true,
    show_extended_attributes: true,
    show_flavor_extra_specs: true,
    host_status: HostStatusAccess::All,
};

/// A project member under Nova 34's default policy (project readers may
/// see flavor extra specs).
const MEMBER: ServerAccess = ServerAccess {
    show_admin_fields: false,
    show_extended_attributes: false,
    show_flavor_extra_specs: true,
    host_status: HostStatusAccess::UnknownOnly,
};

/// Where berth differs from the recorded samples on purpose: no networks
/// (no addresses, no security groups), no volumes, no auto disk config,
/// no root device name, and instance names made from uuids (Nova makes
/// them from integer ids).
const BERTH_DIFFERENCES: &[&str] = &[
    "/server/addresses",
    "/server/security_groups",
    "/server/os-extended-volumes:volumes_attached",
    "/server/OS-DCF:diskConfig",
    "/server/OS-EXT-SRV-ATTR:root_device_name",
    "/server/OS-EXT-SRV-ATTR:instance_name",
];

fn v(minor: u16) -> ComputeVersion {
    ComputeVersion(minor)
}

/// How one show sample was recorded: who asked, what else was known, and
/// the sample instance's own values.
struct ShowCase {
    sample: &'static str,
    minor: u16,
    access: ServerAccess,
    user: &'static str,
    /// host_status UP passed in (the admin samples).
    host_up: bool,
    /// The request spec passed in.
    request_spec: bool,
    tweak: fn(&mut Instance),
}

fn no_tweak(_: &mut Instance) {}

fn flavor_with_specs(instance: &mut Instance) {
    instance.spec.flavor.name = "m1.tiny.specs".into();
    instance.spec.flavor.extra_specs.insert("hw:numa_nodes".into(), "1".into());
}

fn zone_nova(instance: &mut Instance) {
    instance.availability_zone = Some("nova".into());
}

#[test]
fn show_matches_samples() {
    let links = links();
    let admin = |sample, minor, tweak| ShowCase {
        sample,
        minor,
        access: ADMIN,
        user: "admin",
        host_up: true,
        request_spec: false,
        tweak,
    };
    let member = |sample, minor, tweak| ShowCase {
        sample,
        minor,
        access: MEMBER,
        user: "fake",
        host_up: false,
        request_spec: minor >= 96,
        tweak,
    };
    let cases = [
        admin("servers/server-get-resp.json.tpl", 1, no_tweak),
        admin("servers/v2.3/server-get-resp.json.tpl", 3, no_tweak),
        admin("servers/v2.9/server-get-resp.json.tpl", 9, no_tweak),
        admin("servers/v2.16/server-get-resp.json.tpl", 16, no_tweak),
        admin("servers/v2.19/server-get-resp.json.tpl", 19, |i| {
            zone_nova(i);
            i.spec.display_description = Some("new-server-description".into());
            i.spec.user_data = Some(String::new());
        }),
        admin("servers/v2.47/server-get-resp.json.tpl", 47, flavor_with_specs),
        admin("servers/v2.52/server-get-resp.json.tpl", 52, |i| i.spec.tags = vec!["tag1".into(), "tag2".into()]),
        admin("servers/v2.63/server-get-resp.json.tpl", 63, flavor_with_specs),
        admin("servers/v2.71/server-get-resp.json.tpl", 71, zone_nova),
        admin("servers/v2.73/server-get-resp.json.tpl", 73, |i| {
            zone_nova(i);
            i.locked = true;
            i.locked_reason = Some("I don't want to work".into());
        }),
        member("servers/v2.90/server-get-resp.json.tpl", 90, zone_nova),
        member("servers/v2.94/server-get-resp.json.tpl", 94, zone_nova),
        member("servers/v2.96/server-get-resp.json.tpl", 96, no_tweak),
        member("servers/v2.98/server-get-resp.json.tpl", 98, no_tweak),
        member("servers/v2.100/server-get-resp.json.tpl", 100, no_tweak),
    ];
    for case in cases {
        let mut instance = fixtures::instance(case.user);
        (case.tweak)(&mut instance);
        let spec = request_spec(&instance);
        // Only the 2.71 sample's server is in a group.
        let groups: Vec<Uuid> = if case.minor == 71 { vec![uuid(9)] } else { vec![] };
        let extras = ServerExtras {
            fault: None,
            host_status: case.host_up.then_some(HostStatus::Up),
            server_groups: &groups,
            request_spec: case.request_spec.then_some(&spec),
        };
        let body = servers::show(v(case.minor), &links, &case.access, &instance, &extras);
        let mut skip = BERTH_DIFFERENCES.to_vec();
        if case.minor >= 16 {
            // Recorded from an instance whose kernel and ramdisk are null,
            // where the 2.3 sample's are "" (berth shows "").
            skip.extend(["/server/OS-EXT-SRV-ATTR:kernel_id", "/server/OS-EXT-SRV-ATTR:ramdisk_id"]);
        }
        if case.minor == 63 {
            // Booted with trusted certificates, which berth does not take.
            skip.push("/server/trusted_image_certificates");
        }
        assert_sample(&body, case.sample, &skip);
    }
}

#[test]
fn lists_match_samples() {
    let links = links();
    let admin = fixtures::instance("admin");
    let id = admin.uuid.to_string();
    let next = |collection| Some(links.next(collection, &[("limit", "1")], &id));
    let index =
        servers::index(vec![servers::index_item(&links, admin.uuid, &admin.spec.display_name)], next("servers"));
    assert_sample(&index, "servers/servers-list-resp.json.tpl", &[]);

    let skip: Vec<String> = BERTH_DIFFERENCES.iter().map(|p| p.replace("/server/", "/servers/0/")).collect();
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let extras = ServerExtras { host_status: Some(HostStatus::Up), ..Default::default() };
    let detail =
        servers::detail(vec![servers::detail_item(v(1), &links, &ADMIN, &admin, &extras)], next("servers/detail"));
    assert_sample(&detail, "servers/servers-details-resp.json.tpl", &skip);

    let mut user = fixtures::instance("fake");
    user.spec.display_description = Some(String::new());
    user.locked_reason = Some(String::new());
    let spec = request_spec(&user);
    let extras = ServerExtras { request_spec: Some(&spec), ..Default::default() };
    let detail =
        servers::detail(vec![servers::detail_item(v(100), &links, &MEMBER, &user, &extras)], next("servers/detail"));
    assert_sample(&detail, "servers/v2.100/servers-details-resp.json.tpl", &skip);
}

#[test]
fn down_cell_stubs_match_samples() {
    let links = links();
    let mapping = fixtures::mapping("admin");
    let index = servers::index(vec![servers::down_cell_index_item(&links, &mapping)], None);
    assert_sample(&index, "servers/v2.69/servers-list-resp.json.tpl", &[]);
    let detail = servers::detail(vec![servers::down_cell_detail_item(&links, &mapping)], None);
    assert_sample(&detail, "servers/v2.69/servers-details-resp.json.tpl", &[]);

    let mut instance = fixtures::instance("admin");
    instance.spec.flavor.extra_specs.clear();
    let mut spec = request_spec(&instance);
    spec.availability_zone = None;
    let body = servers::down_cell_show(v(69), &links, &mapping, &spec, true, &[]);
    assert_sample(&body, "servers/v2.69/server-get-resp.json.tpl", &[]);
    let body = servers::down_cell_show(v(71), &links, &mapping, &spec, true, &[uuid(9)]);
    assert_sample(&body, "servers/v2.71/server-get-down-cell-resp.json.tpl", &[]);
}

#[test]
fn create_and_update_match_samples() {
    let links = links();
    let body = servers::create(&links, uuid(1), false, &[], Some("wKLKinb9u7GM"));
    assert_sample(&body, "servers/server-create-resp.json.tpl", &["/server/OS-DCF:diskConfig"]);
    assert_eq!(servers::create_reservation("r-3fhpjulh"), json!({"reservation_id": "r-3fhpjulh"}));

    let mut instance = fixtures::instance("admin");
    instance.spec.display_description = Some("Sample description".into());
    let groups = [uuid(9)];
    let extras = ServerExtras { server_groups: &groups, ..Default::default() };
    let body = servers::update(v(71), &links, &MEMBER, &instance, &extras);
    assert_sample(
        &body,
        "servers/v2.71/server-update-resp.json.tpl",
        &["/server/addresses", "/server/OS-DCF:diskConfig"],
    );
    let extras = ServerExtras { host_status: Some(HostStatus::Up), ..Default::default() };
    let body = servers::update(v(75), &links, &ADMIN, &instance, &extras);
    assert_sample(&body, "servers/v2.75/server-update-resp.json.tpl", BERTH_DIFFERENCES);
}

/// Every way berth can show a server, at every microversion, is a body
/// Nova's own response schema accepts.
#[test]
fn every_version_fits_nova_response_schemas() {
    let links = links();
    let active = fixtures::instance("fake");
    let (errored, fault) = fixtures::errored();
    let building = servers::build_request_instance(&fixtures::build_request());
    let mut deleted = fixtures::instance("fake");
    deleted.deleted = true;
    deleted.terminated_at = Some(fixtures::T0 + 100);
    let spec = request_spec(&active);
    let mapping = fixtures::mapping("fake");
    let groups = [uuid(9)];
    let accesses = [
        ADMIN,
        MEMBER,
        ServerAccess { host_status: HostStatusAccess::Hidden, show_flavor_extra_specs: false, ..MEMBER },
    ];
    for version in all_versions() {
        for access in &accesses {
            let mut details = Vec::new();
            for (instance, fault) in [(&active, None), (&errored, Some(&fault)), (&building, None), (&deleted, None)] {
                let shown = ServerExtras {
                    fault,
                    host_status: Some(if instance.host.is_some() { HostStatus::Up } else { HostStatus::NoHost }),
                    server_groups: &groups,
                    request_spec: Some(&spec),
                };
                assert_nova_response(
                    "servers.show",
                    version,
                    &servers::show(version, &links, access, instance, &shown),
                );
                assert_nova_response(
                    "servers.update",
                    version,
                    &servers::update(version, &links, access, instance, &shown),
                );
                details.push(servers::detail_item(version, &links, access, instance, &shown));
            }
            let mut index: Vec<Value> = vec![servers::index_item(&links, active.uuid, "a")];
            if version.at_least(69) {
                details.push(servers::down_cell_detail_item(&links, &mapping));
                index.push(servers::down_cell_index_item(&links, &mapping));
                let stub =
                    servers::down_cell_show(version, &links, &mapping, &spec, access.show_flavor_extra_specs, &groups);
                assert_nova_response("servers.show", version, &stub);
            }
            let next = Some(links.next("servers/detail", &[("limit", "5")], &active.uuid.to_string()));
            assert_nova_response("servers.detail", version, &servers::detail(details, next.clone()));
            assert_nova_response("servers.index", version, &servers::index(index, next));
        }
        let created = servers::create(&links, active.uuid, false, &["default", "web"], Some("pass"));
        assert_nova_response("servers.create", version, &created);
        assert_nova_response("servers.create", version, &servers::create_reservation("r-3fhpjulh"));
    }
}

/// The response-schema oracle has teeth: a body missing a required key, or
/// with a key Nova does not have, is refused.
#[test]
fn nova_response_schemas_refuse_wrong_bodies() {
    let links = links();
    let active = fixtures::instance("fake");
    let body = servers::show(v(100), &links, &MEMBER, &active, &ServerExtras::default());
    let schema = crate::support::nova_response_schema("servers.show", v(100));
    assert!(berth_http::schema::validate(&schema, &body).is_ok());
    let mut missing = body.clone();
    if let Some(server) = missing["server"].as_object_mut() {
        server.remove("scheduler_hints");
    }
    assert!(berth_http::schema::validate(&schema, &missing).is_err());
    assert_eq!(body["server"]["server_groups"], json!([]));
    let mut extra = body;
    extra["server"]["not_nova"] = json!(1);
    assert!(berth_http::schema::validate(&schema, &extra).is_err());
    // `server_groups` belongs to show, not to detail listings.
    let detail = servers::detail_item(v(100), &links, &MEMBER, &active, &ServerExtras::default());
    assert!(detail.get("server_groups").is_none());
}

#[test]
fn policy_and_state_rules() {
    let links = links();
    let (errored, fault) = fixtures::errored();
    let extras = ServerExtras { fault: Some(&fault), ..Default::default() };
    let admin = servers::show(v(2), &links, &ADMIN, &errored, &extras);
    assert_eq!(admin["server"]["fault"]["details"], json!(fault.details), "admins see a 500 fault's details");
    assert!(admin["server"].get("progress").is_none(), "ERROR servers have no progress");
    let member = servers::show(v(2), &links, &MEMBER, &errored, &extras);
    assert!(member["server"]["fault"].get("details").is_none(), "non-admins do not see a 500 fault's details");
    assert_eq!(member["server"]["fault"]["created"], json!("2023-11-14T22:13:21Z"));
    let mut not_500 = fault.clone();
    not_500.code = 409;
    let member = servers::show(v(2), &links, &MEMBER, &errored, &ServerExtras { fault: Some(&not_500), ..extras });
    assert!(member["server"]["fault"].get("details").is_some());

    // host_status: unknown-only shows only UNKNOWN.
    let active = fixtures::instance("fake");
    let with = |status| ServerExtras { host_status: Some(status), ..Default::default() };
    let shown = servers::show(v(16), &links, &MEMBER, &active, &with(HostStatus::Up));
    assert!(shown["server"].get("host_status").is_none());
    let shown = servers::show(v(16), &links, &MEMBER, &active, &with(HostStatus::Unknown));
    assert_eq!(shown["server"]["host_status"], json!("UNKNOWN"));
    let shown = servers::show(v(15), &links, &ADMIN, &active, &with(HostStatus::Up));
    assert!(shown["server"].get("host_status").is_none(), "host_status is 2.16+");

    // Flavor: a link before 2.47, embedded after, extra specs by policy.
    let mut active = fixtures::instance("fake");
    active.spec.flavor.extra_specs.insert("hw:numa_nodes".into(), "1".into());
    let old = servers::show(v(46), &links, &ADMIN, &active, &ServerExtras::default());
    assert_eq!(
        old["server"]["flavor"]["links"][0]["href"],
        json!(format!("{}/flavors/1", crate::support::HOST.to_owned() + "/" + crate::support::PROJECT))
    );
    let new = servers::show(v(47), &links, &ADMIN, &active, &ServerExtras::default());
    assert_eq!(new["server"]["flavor"]["extra_specs"], json!({"hw:numa_nodes": "1"}));
    let no_specs = ServerAccess { show_flavor_extra_specs: false, ..MEMBER };
    let new = servers::show(v(47), &links, &no_specs, &active, &ServerExtras::default());
    assert!(new["server"]["flavor"].get("extra_specs").is_none());

    // 2.98 shows only the image properties Nova knows.
    let shown = servers::show(v(98), &links, &MEMBER, &active, &ServerExtras::default());
    assert_eq!(shown["server"]["image"]["properties"], json!({"architecture": "x86_64", "auto_disk_config": "True"}));
    // 2.100 without a request spec: empty hints, no pinned zone.
    let shown = servers::show(v(100), &links, &MEMBER, &active, &ServerExtras::default());
    assert_eq!(shown["server"]["scheduler_hints"], json!({}));
    assert_eq!(shown["server"]["pinned_availability_zone"], Value::Null);
    // 2.90: non-admins see the hostname.
    assert_eq!(shown["server"]["OS-EXT-SRV-ATTR:hostname"], json!("new-server-test"));
    assert!(shown["server"].get("OS-EXT-SRV-ATTR:host").is_none());

    // A build request: BUILD, no host, no launch time.
    let building = servers::build_request_instance(&fixtures::build_request());
    let shown = servers::show(v(1), &links, &ADMIN, &building, &ServerExtras::default());
    assert_eq!(shown["server"]["status"], json!("BUILD"));
    assert_eq!(shown["server"]["hostId"], json!(""));
    assert_eq!(shown["server"]["OS-EXT-STS:task_state"], json!("scheduling"));
    assert_eq!(shown["server"]["OS-SRV-USG:launched_at"], Value::Null);
    assert_eq!(shown["server"]["progress"], json!(0));

    // Before 2.75 the update response is the reduced view.
    let updated = servers::update(v(74), &links, &ADMIN, &active, &ServerExtras::default());
    for key in ["OS-EXT-AZ:availability_zone", "key_name", "OS-EXT-SRV-ATTR:host", "OS-EXT-STS:vm_state"] {
        assert!(updated["server"].get(key).is_none(), "{key} in a 2.74 update response");
    }
    let updated = servers::update(v(75), &links, &ADMIN, &active, &ServerExtras::default());
    assert!(updated["server"].get("OS-EXT-SRV-ATTR:host").is_some());
}
