//! Flavor, extra-spec, flavor-access, server-group, quota-set and limits
//! views against Nova's samples and response schemas.

use std::collections::BTreeMap;

use serde_json::json;
use uuid::Uuid;

use berth_compute_api::views::{flavors, limits, quotas, server_groups};
use berth_compute_api::ComputeVersion;
use berth_compute_model::{quota, Flavor, GroupPolicy};

use crate::fixtures::{self, flavor_tiny, uuid};
use crate::support::{all_versions, assert_nova_response, assert_sample, links, PROJECT};

fn v(minor: u16) -> ComputeVersion {
    ComputeVersion(minor)
}

fn specs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn flavor(flavorid: &str, name: &str, ram: i64, vcpus: i64, disk: i64) -> Flavor {
    Flavor { flavorid: flavorid.into(), name: name.into(), memory_mb: ram, vcpus, root_gb: disk, ..flavor_tiny() }
}

/// The flavors Nova's flavor samples list.
fn nova_flavors(with_description: bool) -> Vec<Flavor> {
    let mut list = vec![
        flavor("1", "m1.tiny", 512, 1, 1),
        flavor("2", "m1.small", 2048, 1, 20),
        flavor("3", "m1.medium", 4096, 2, 40),
        flavor("4", "m1.large", 8192, 4, 80),
        flavor("5", "m1.xlarge", 16384, 8, 160),
        Flavor { extra_specs: specs(&[("hw:numa_nodes", "1")]), ..flavor("6", "m1.tiny.specs", 512, 1, 1) },
    ];
    if with_description {
        list.push(Flavor {
            description: Some("test description".into()),
            extra_specs: specs(&[("hw:cpu_policy", "shared"), ("hw:numa_nodes", "1")]),
            ..flavor("7", "m1.small.description", 2048, 1, 20)
        });
    }
    list
}

#[test]
fn flavors_match_samples() {
    let links = links();
    for (dir, minor) in
        [("flavors", 1), ("flavors/v2.55", 55), ("flavors/v2.61", 61), ("flavors/v2.75", 75), ("flavors/v2.102", 102)]
    {
        let all = nova_flavors(minor >= 55);
        let index = flavors::index(v(minor), &links, &all, None);
        assert_sample(&index, &format!("{dir}/flavors-list-resp.json.tpl"), &[]);
        let detail = flavors::detail(v(minor), &links, &all, true, None);
        assert_sample(&detail, &format!("{dir}/flavors-detail-resp.json.tpl"), &[]);
        let shown = if minor >= 55 { all.last().cloned() } else { all.first().cloned() };
        let body = flavors::show(v(minor), &links, &shown.expect("a flavor"), true);
        assert_sample(&body, &format!("{dir}/flavor-get-resp.json.tpl"), &[]);
    }

    let created = |description: Option<&str>| Flavor {
        rxtx_factor: 2.0,
        description: description.map(str::to_owned),
        ..flavor("10", "test_flavor", 1024, 2, 10)
    };
    let body = flavors::show(v(1), &links, &created(None), true);
    assert_sample(&body, "flavor-manage/flavor-create-post-resp.json.tpl", &[]);
    let body = flavors::show(v(75), &links, &created(Some("test description")), true);
    assert_sample(&body, "flavor-manage/v2.75/flavor-create-post-resp.json.tpl", &[]);
    let updated = Flavor { description: Some("updated description".into()), ..flavor_tiny() };
    let body = flavors::show(v(102), &links, &updated, true);
    assert_sample(&body, "flavor-manage/v2.102/flavor-update-resp.json.tpl", &[]);

    let extra = specs(&[("hw:cpu_policy", "shared"), ("hw:numa_nodes", "1")]);
    assert_sample(&flavors::extra_specs(&extra), "flavor-extra-specs/flavor-extra-specs-list-resp.json.tpl", &[]);
    assert_sample(&flavors::extra_specs(&extra), "flavor-extra-specs/flavor-extra-specs-create-resp.json.tpl", &[]);
    assert_sample(
        &flavors::extra_spec("hw:numa_nodes", "1"),
        "flavor-extra-specs/flavor-extra-specs-get-resp.json.tpl",
        &[],
    );
    assert_sample(
        &flavors::extra_spec("hw:numa_nodes", "2"),
        "flavor-extra-specs/flavor-extra-specs-update-resp.json.tpl",
        &[],
    );

    let mut private = Flavor { is_public: false, ..flavor("10", "test_flavor", 1024, 2, 10) };
    private.projects.insert(PROJECT.into());
    assert_sample(&flavors::flavor_access(&private), "flavor-access/flavor-access-list-resp.json.tpl", &[]);
    assert_sample(&flavors::flavor_access(&private), "flavor-access/flavor-access-add-tenant-resp.json.tpl", &[]);
    private.projects.clear();
    assert_sample(&flavors::flavor_access(&private), "flavor-access/flavor-access-remove-tenant-resp.json.tpl", &[]);
}

#[test]
fn flavor_version_rules() {
    let links = links();
    let tiny = Flavor { extra_specs: specs(&[("a", "b")]), ..flavor_tiny() };
    let body = flavors::show(v(74), &links, &tiny, true);
    assert_eq!(body["flavor"]["swap"], json!(""), "no swap is \"\" before 2.75");
    assert!(body["flavor"].get("extra_specs").is_some());
    assert_eq!(flavors::show(v(75), &links, &tiny, true)["flavor"]["swap"], json!(0));
    assert!(flavors::show(v(60), &links, &tiny, true)["flavor"].get("extra_specs").is_none(), "extra_specs is 2.61+");
    assert!(flavors::show(v(61), &links, &tiny, false)["flavor"].get("extra_specs").is_none(), "policy hides them");
    let modern = flavors::show(v(102), &links, &tiny, false);
    assert!(
        modern["flavor"].get("rxtx_factor").is_none() && modern["flavor"].get("OS-FLV-DISABLED:disabled").is_none()
    );
    let with_swap = Flavor { swap: 512, ..flavor_tiny() };
    assert_eq!(flavors::show(v(1), &links, &with_swap, false)["flavor"]["swap"], json!(512));
}

#[test]
fn flavors_fit_nova_response_schemas() {
    let links = links();
    let all = nova_flavors(true);
    let next = links.next("flavors", &[("limit", "7")], "5");
    for version in all_versions() {
        for see in [true, false] {
            assert_nova_response("flavors.index", version, &flavors::index(version, &links, &all, Some(next.clone())));
            assert_nova_response(
                "flavors.detail",
                version,
                &flavors::detail(version, &links, &all, see, Some(next.clone())),
            );
            let body = flavors::show(version, &links, &all[6], see);
            assert_nova_response("flavors.show", version, &body);
            assert_nova_response("flavors.create", version, &body);
            if version.at_least(55) {
                assert_nova_response("flavors.update", version, &body);
            }
        }
        let extra = specs(&[("hw:numa_nodes", "1")]);
        assert_nova_response("flavors_extraspecs.index", version, &flavors::extra_specs(&extra));
        assert_nova_response("flavors_extraspecs.create", version, &flavors::extra_specs(&extra));
        assert_nova_response("flavors_extraspecs.show", version, &flavors::extra_spec("hw:numa_nodes", "1"));
        assert_nova_response("flavors_extraspecs.update", version, &flavors::extra_spec("hw:numa_nodes", "1"));
        let mut private = Flavor { is_public: false, ..flavor_tiny() };
        private.projects.extend(["p1".to_owned(), "p2".to_owned()]);
        assert_nova_response("flavor_access.index", version, &flavors::flavor_access(&private));
        assert_nova_response("flavor_access._add_tenant_access", version, &flavors::flavor_access(&private));
    }
}

#[test]
fn server_groups_match_samples() {
    let member = [uuid(1)];
    let mut group = fixtures::group(GroupPolicy::AntiAffinity, Some(3));
    let body = server_groups::show(v(64), &group, &[]);
    assert_sample(&body, "os-server-groups/v2.64/server-groups-get-resp.json.tpl", &[]);
    assert_sample(&body, "os-server-groups/v2.64/server-groups-post-resp.json.tpl", &[]);
    assert_sample(
        &server_groups::index(v(64), &[(&group, &[])]),
        "os-server-groups/v2.64/server-groups-list-resp.json.tpl",
        &[],
    );
    group.max_server_per_host = None;
    assert_sample(&server_groups::show(v(1), &group, &[]), "os-server-groups/server-groups-get-resp.json.tpl", &[]);
    assert_sample(
        &server_groups::index(v(13), &[(&group, &[])]),
        "os-server-groups/v2.13/server-groups-list-resp.json.tpl",
        &[],
    );
    for version in all_versions() {
        for policy in
            [GroupPolicy::Affinity, GroupPolicy::AntiAffinity, GroupPolicy::SoftAffinity, GroupPolicy::SoftAntiAffinity]
        {
            let group = fixtures::group(policy, Some(2).filter(|_| policy == GroupPolicy::AntiAffinity));
            let members: &[Uuid] = &member;
            assert_nova_response("server_groups.show", version, &server_groups::show(version, &group, members));
            assert_nova_response("server_groups.create", version, &server_groups::show(version, &group, &[]));
            assert_nova_response("server_groups.index", version, &server_groups::index(version, &[(&group, members)]));
        }
    }
    let rules = server_groups::show(v(64), &fixtures::group(GroupPolicy::Affinity, None), &[]);
    assert_eq!(rules["server_group"]["rules"], json!({}));
}

fn default_limit(resource: &str) -> i64 {
    quota::RESOURCES.iter().find(|(r, _)| *r == resource).map_or(-1, |(_, limit)| *limit)
}

#[test]
fn quotas_match_samples() {
    for (dir, minor) in [("os-quota-sets", 1), ("os-quota-sets/v2.36", 36), ("os-quota-sets/v2.57", 57)] {
        let version = v(minor);
        assert_sample(
            &quotas::show(version, "fake_tenant", default_limit),
            &format!("{dir}/quotas-show-get-resp.json.tpl"),
            &[],
        );
        assert_sample(
            &quotas::show(version, "fake_tenant", default_limit),
            &format!("{dir}/user-quotas-show-get-resp.json.tpl"),
            &[],
        );
        assert_sample(
            &quotas::defaults(version, "fake_tenant", default_limit),
            &format!("{dir}/quotas-show-defaults-get-resp.json.tpl"),
            &[],
        );
        let detail = quotas::detail(version, "fake_tenant", |r| (default_limit(r), 0));
        assert_sample(&detail, &format!("{dir}/quotas-show-detail-get-resp.json.tpl"), &[]);
        // What each update sample raised.
        let (raised, to) = match minor {
            1 => ("cores", 45),
            36 => ("instances", 45),
            _ => ("instances", 20),
        };
        let updated = |r: &str| if r == raised { to } else { default_limit(r) };
        let force = |r: &str| if r == "instances" { 45 } else { default_limit(r) };
        let user = |r: &str| if r == "instances" { 9 } else { default_limit(r) };
        assert_sample(&quotas::update(version, updated), &format!("{dir}/quotas-update-post-resp.json.tpl"), &[]);
        assert_sample(&quotas::update(version, force), &format!("{dir}/quotas-update-force-post-resp.json.tpl"), &[]);
        assert_sample(&quotas::update(version, user), &format!("{dir}/user-quotas-update-post-resp.json.tpl"), &[]);
    }
    for version in all_versions() {
        assert_nova_response("quota_sets.show", version, &quotas::show(version, PROJECT, default_limit));
        assert_nova_response("quota_sets.defaults", version, &quotas::defaults(version, PROJECT, default_limit));
        assert_nova_response(
            "quota_sets.detail",
            version,
            &quotas::detail(version, PROJECT, |r| (default_limit(r), 1)),
        );
        assert_nova_response("quota_sets.update", version, &quotas::update(version, default_limit));
    }
}

#[test]
fn limits_match_samples() {
    for (sample, minor) in [
        ("limits/limit-get-resp.json.tpl", 1),
        ("limits/v2.36/limit-get-resp.json.tpl", 36),
        ("limits/v2.39/limit-get-resp.json.tpl", 39),
        ("limits/v2.57/limit-get-resp.json.tpl", 57),
    ] {
        assert_sample(&limits::show(v(minor), default_limit, |_| 0), sample, &[]);
    }
    for version in all_versions() {
        assert_nova_response("limits.index", version, &limits::show(version, default_limit, |_| 3));
    }
}
