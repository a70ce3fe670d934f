//! Request schemas: equal to Nova's after the documented rewrites, at every
//! microversion; Nova's sample request bodies validate; known-bad bodies
//! are refused.

use std::path::Path;

use serde_json::{json, Map, Value};

use berth_compute_api::schemas::{
    self, aggregates, flavors, quotas, server_groups, servers, services, AZ_NAME, FLAVOR_ID, IPV4, IPV6, IP_ADDRESS,
    NAME, NAME_WITH_SPACES, PRINTABLE_TEXT,
};
use berth_compute_api::ComputeVersion;

use crate::support::{all_versions, nova_request_schema, sample_text};

fn v(minor: u16) -> ComputeVersion {
    ComputeVersion(minor)
}

/// berth's schema for Nova's `controller.method` at `version`.
fn ours(key: &str, version: ComputeVersion) -> Value {
    match key {
        "servers.create" => servers::create(version),
        "servers.update" => servers::update(version),
        "servers._start" => servers::start(),
        "servers._stop" => servers::stop(),
        "servers._reboot" => servers::reboot(),
        "flavors.create" => flavors::create(version),
        "flavors.update" => flavors::update(),
        "flavors_extraspecs.create" => flavors::extra_specs_create(),
        "flavors_extraspecs.update" => flavors::extra_spec_update(),
        "flavor_access._add_tenant_access" => flavors::add_tenant_access(),
        "flavor_access._remove_tenant_access" => flavors::remove_tenant_access(),
        "server_groups.create" => server_groups::create(version),
        "quota_sets.update" => quotas::update(version),
        "aggregates.create" => aggregates::create(),
        "aggregates.update" => aggregates::update(),
        "aggregates._add_host" => aggregates::add_host(),
        "aggregates._remove_host" => aggregates::remove_host(),
        "aggregates._set_metadata" => aggregates::set_metadata(),
        "services.update" if version.at_least(53) => services::update(),
        "services.update" => services::legacy_update(version),
        _ => panic!("no berth schema for {key}"),
    }
}

const KEYS: &[&str] = &[
    "servers.create",
    "servers.update",
    "servers._start",
    "servers._stop",
    "servers._reboot",
    "flavors.create",
    "flavors.update",
    "flavors_extraspecs.create",
    "flavors_extraspecs.update",
    "flavor_access._add_tenant_access",
    "flavor_access._remove_tenant_access",
    "server_groups.create",
    "quota_sets.update",
    "aggregates.create",
    "aggregates.update",
    "aggregates._add_host",
    "aggregates._remove_host",
    "aggregates._set_metadata",
    "services.update",
];

/// The rewrites listed in `src/schemas/mod.rs`, applied to a Nova schema.
fn rewrite(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let ip_choice = map.get("oneOf") == Some(&json!([{"format": "ipv4"}, {"format": "ipv6"}]));
            let mut out = Map::new();
            for (key, sub) in map {
                match (key.as_str(), sub.as_str()) {
                    ("format", Some("name")) => insert_pattern(&mut out, NAME),
                    ("format", Some("name_with_leading_trailing_spaces")) => insert_pattern(&mut out, NAME_WITH_SPACES),
                    ("format", Some("az_name")) => insert_pattern(&mut out, AZ_NAME),
                    ("format", Some("ipv4")) => insert_pattern(&mut out, IPV4),
                    ("format", Some("ipv6")) => insert_pattern(&mut out, IPV6),
                    ("format", Some("base64")) | ("exclusiveMinimum", _) | ("additionalItems", _) => {}
                    ("oneOf", _) if ip_choice => insert_pattern(&mut out, IP_ADDRESS),
                    ("pattern", Some("<nova:printable>")) => insert_pattern(&mut out, PRINTABLE_TEXT),
                    ("pattern", Some("^(?! )[a-zA-Z0-9. _-]+(?<! )$")) => insert_pattern(&mut out, FLAVOR_ID),
                    ("prefixItems", _) => {
                        let first = sub.as_array().and_then(|items| items.first()).cloned().unwrap_or(Value::Null);
                        out.insert("items".into(), rewrite(first));
                    }
                    _ => {
                        out.insert(key, rewrite(sub));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(rewrite).collect()),
        other => other,
    }
}

fn insert_pattern(out: &mut Map<String, Value>, pattern: &str) {
    out.insert("pattern".into(), json!(pattern));
}

/// Paths where two schemas differ, for a readable failure.
fn differences(ours: &Value, nova: &Value, path: &str, out: &mut Vec<String>) {
    match (ours, nova) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differences(x, y, &format!("{path}/{key}"), out),
                    (Some(x), None) => out.push(format!("{path}/{key}: only berth has {x}")),
                    (None, Some(y)) => out.push(format!("{path}/{key}: only Nova has {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{path}/{i}"), out);
            }
        }
        // serde_json's float parsing is not exactly rounded: allow the last bit.
        (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            if (a - b).abs() > a.abs().max(b.abs()) * 1e-12 {
                out.push(format!("{path}: berth {a} != Nova {b}"));
            }
        }
        _ if ours != nova => out.push(format!("{path}: berth {ours} != Nova {nova}")),
        _ => {}
    }
}

#[test]
fn request_schemas_equal_novas_after_the_documented_rewrites() {
    let mut compared = 0;
    for key in KEYS {
        for version in all_versions() {
            let Some(nova) = nova_request_schema(key, version) else { continue };
            let (mine, nova) = (ours(key, version), rewrite(nova));
            let mut diff = Vec::new();
            differences(&mine, &nova, "", &mut diff);
            assert!(diff.is_empty(), "{key} at {version}:\n  {}", diff.join("\n  "));
            compared += 1;
        }
    }
    assert!(compared > 1500, "only {compared} comparisons");
}

/// berth's validator skips a pattern it cannot compile, so every pattern
/// must compile with the same `regex` features the validator has.
#[test]
fn every_pattern_compiles() {
    let mut found = Vec::new();
    for version in all_versions() {
        for key in KEYS {
            berth_http::schema::collect_patterns(&ours(key, version), &mut found);
        }
    }
    found.sort();
    found.dedup();
    assert!(found.len() > 10);
    for pattern in found {
        assert!(regex::Regex::new(&pattern).is_ok(), "{pattern} does not compile");
    }
}

fn valid(schema: &Value, body: &Value) -> bool {
    berth_http::schema::validate(schema, body).is_ok()
}

/// The sample values Nova's request samples are rendered with.
fn render_request(path: &str) -> Value {
    let mut text = sample_text(path);
    let host = if path.starts_with("os-services") { "host1" } else { "http://openstack.example.com" };
    let action = if path.contains("start") { "os-start" } else { "os-stop" };
    for (name, value) in [
        ("access_ip_v4", "192.168.0.3"),
        ("access_ip_v6", "fe80::1"),
        ("action", action),
        ("availability_zone", "us-west"),
        ("binary", "nova-compute"),
        ("disabled_reason", "test2"),
        ("flavor_id", "10"),
        ("flavor_name", "test_flavor"),
        ("forced_down", "true"),
        ("host", host),
        ("host_name", "compute"),
        ("image_id", "70a599e0-31e7-49b7-b260-868f441e862b"),
        ("name", "new-server-test"),
        ("sg_uuid", "70a599e0-31e7-49b7-b260-868f441e0009"),
        ("tenant_id", "6f70656e737461636b20342065766572"),
        ("type", "HARD"),
        ("user_data", "IyEvYmluL2Jhc2gKL2Jpbi9zdQplY2hvICJJIGFtIGluIHlvdSEiCg=="),
        ("uuid", "48e6a9f6-30af-47e0-bc04-acaed113bb4e"),
        ("value1", "shared"),
        ("value2", "1"),
    ] {
        text = text.replace(&format!("%({name})s"), value);
    }
    assert!(!text.contains("%("), "{path}: unsubstituted placeholder");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The microversion a request sample was recorded at.
fn sample_version(path: &str) -> ComputeVersion {
    let from_dir = path.split('/').find_map(|part| part.strip_prefix("v2.")).and_then(|m| m.parse().ok());
    let from_name = path.rsplit_once("-v2").and_then(|(_, rest)| rest.split('.').next()).and_then(|m| m.parse().ok());
    v(from_dir.or(from_name).unwrap_or(1))
}

/// berth's schema for a request sample, by file name.
fn schema_for_sample(path: &str, version: ComputeVersion) -> Option<Value> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let schema = match name {
        n if n.starts_with("server-create-req") => servers::create(version),
        n if n.starts_with("server-update-req") || n.starts_with("server-put-req") => servers::update(version),
        "server-action-start.json.tpl" => servers::start(),
        "server-action-stop.json.tpl" => servers::stop(),
        "server-action-reboot.json.tpl" => servers::reboot(),
        "flavor-create-post-req.json.tpl" | "flavor-create-req.json.tpl" => flavors::create(version),
        "flavor-update-req.json.tpl" => flavors::update(),
        "flavor-extra-specs-create-req.json.tpl" => flavors::extra_specs_create(),
        "flavor-extra-specs-update-req.json.tpl" => flavors::extra_spec_update(),
        "flavor-access-add-tenant-req.json.tpl" => flavors::add_tenant_access(),
        "flavor-access-remove-tenant-req.json.tpl" => flavors::remove_tenant_access(),
        "server-groups-post-req.json.tpl" => server_groups::create(version),
        n if n.starts_with("quotas-update") || n.starts_with("user-quotas-update") => quotas::update(version),
        "aggregate-post-req.json.tpl" => aggregates::create(),
        "aggregate-update-post-req.json.tpl" => aggregates::update(),
        "aggregate-add-host-post-req.json.tpl" => aggregates::add_host(),
        "aggregate-remove-host-post-req.json.tpl" => aggregates::remove_host(),
        "aggregate-metadata-post-req.json.tpl" => aggregates::set_metadata(),
        n if n.starts_with("service-") && version.at_least(53) => services::update(),
        n if n.starts_with("service-") => services::legacy_update(version),
        _ => return None,
    };
    Some(schema)
}

fn request_samples(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("samples dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            request_samples(&path, root, out);
        } else {
            let relative = path.strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
            let name = relative.rsplit('/').next().unwrap_or_default();
            if name.contains("-req") || name.starts_with("server-action-") {
                out.push(relative);
            }
        }
    }
}

#[test]
fn nova_request_samples_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    let mut paths = Vec::new();
    request_samples(&root, &root, &mut paths);
    paths.sort();
    let mut checked = 0;
    for path in &paths {
        let version = sample_version(path);
        let Some(schema) = schema_for_sample(path, version) else { continue };
        let body = render_request(path);
        if let Err(e) = berth_http::schema::validate(&schema, &body) {
            panic!("{path} at {version}: {e}\n{body}");
        }
        checked += 1;
    }
    assert!(checked >= 60, "only {checked} request samples checked");
}

/// A field value meaning "leave the field out".
const ABSENT: &str = "<absent>";

fn server(fields: Value) -> Value {
    let mut server =
        json!({"name": "vm", "flavorRef": "1", "imageRef": "70a599e0-31e7-49b7-b260-868f441e862b", "networks": []});
    if let (Some(base), Some(extra)) = (server.as_object_mut(), fields.as_object()) {
        for (k, val) in extra {
            if val == ABSENT {
                base.remove(k);
            } else {
                base.insert(k.clone(), val.clone());
            }
        }
    }
    json!({"server": server})
}

#[test]
fn server_bodies_by_version() {
    let create = |minor| servers::create(v(minor));
    assert!(valid(&create(37), &server(json!({}))));
    assert!(valid(&create(1), &server(json!({}))));
    assert!(valid(&create(37), &server(json!({"networks": "none"}))));
    assert!(!valid(&create(37), &server(json!({"networks": ABSENT}))), "networks are required from 2.37");
    assert!(valid(&create(36), &server(json!({"networks": ABSENT}))));
    assert!(valid(&create(37), &server(json!({"networks": "auto"}))));
    assert!(!valid(&create(37), &server(json!({"networks": "some"}))));
    assert!(!valid(&create(36), &server(json!({"networks": "none"}))), "\"none\" is 2.37+");
    assert!(valid(&create(37), &server(json!({"networks": [{"uuid": "70a599e0-31e7-49b7-b260-868f441e862b"}]}))));
    assert!(!valid(&create(37), &server(json!({"networks": [{"uuid": "not-a-uuid"}]}))));
    assert!(valid(&create(37), &server(json!({"networks": [{"fixed_ip": "10.0.0.2"}]}))));
    assert!(!valid(&create(37), &server(json!({"networks": [{"fixed_ip": "10.0.0.256"}]}))));
    assert!(!valid(&create(37), &server(json!({"name": ABSENT}))), "name is required");
    assert!(!valid(&create(37), &server(json!({"name": " vm"}))), "no leading whitespace");
    assert!(!valid(&create(37), &server(json!({"name": "vm\n"}))));
    assert!(valid(&create(37), &server(json!({"name": "vm with spaces ü"}))));
    assert!(!valid(&create(37), &server(json!({"imageRef": "cirros"}))));
    assert!(valid(&create(37), &server(json!({"imageRef": ""}))), "empty imageRef: boot from volume");
    assert!(!valid(&create(37), &server(json!({"flavorRef": ""}))));
    assert!(valid(&create(37), &server(json!({"min_count": 2, "max_count": "3", "return_reservation_id": "True"}))));
    assert!(!valid(&create(37), &server(json!({"min_count": 0}))));
    assert!(!valid(&create(37), &server(json!({"max_count": "two"}))));
    assert!(!valid(&create(37), &server(json!({"return_reservation_id": "maybe"}))));
    assert!(valid(
        &create(37),
        &server(json!({"availability_zone": "az1:host1", "key_name": "k", "metadata": {"a": "b"}}))
    ));
    assert!(!valid(&create(37), &server(json!({"metadata": {"a": 1}}))));
    assert!(!valid(&create(37), &server(json!({"metadata": {"a/b": "c"}}))));
    assert!(!valid(&create(18), &server(json!({"description": "d"}))), "description is 2.19+");
    assert!(valid(&create(19), &server(json!({"description": null}))));
    assert!(!valid(&create(19), &server(json!({"description": "two\nlines"}))));
    assert!(!valid(&create(51), &server(json!({"tags": ["a"]}))), "tags are 2.52+");
    assert!(valid(&create(52), &server(json!({"tags": ["a", "b"]}))));
    assert!(!valid(&create(52), &server(json!({"tags": ["a/b"]}))));
    assert!(valid(&create(56), &server(json!({"personality": [{"path": "/etc/motd", "contents": "aGk="}]}))));
    assert!(!valid(&create(57), &server(json!({"personality": []}))), "personality is gone at 2.57");
    assert!(!valid(&create(89), &server(json!({"hostname": "vm1"}))), "hostname is 2.90+");
    assert!(valid(&create(90), &server(json!({"hostname": "vm-1"}))));
    assert!(!valid(&create(90), &server(json!({"hostname": "vm.example.com"}))), "2.90 wants a label");
    assert!(valid(&create(94), &server(json!({"hostname": "vm.example.com"}))), "2.94 takes an FQDN");
    assert!(!valid(&create(94), &server(json!({"hostname": "vm example"}))));
    assert!(valid(&create(74), &server(json!({"host": "compute1", "hypervisor_hostname": "node1"}))));
    assert!(!valid(&create(73), &server(json!({"host": "compute1"}))));
    assert!(!valid(&create(37), &server(json!({"unknown": 1}))));

    let hints = |h: Value| {
        let mut body = server(json!({}));
        body["os:scheduler_hints"] = h;
        body
    };
    let id = "70a599e0-31e7-49b7-b260-868f441e862b";
    assert!(valid(&create(37), &hints(json!({"group": id, "same_host": [id], "different_host": id, "custom": "x"}))));
    assert!(valid(&create(37), &hints(json!({"group": [id], "different_host": [id, id], "same_host": id}))));
    assert!(!valid(&create(37), &hints(json!({"group": "not-a-uuid"}))));
    assert!(!valid(&create(37), &hints(json!({"same_host": ["nope"]}))));
    assert!(!valid(&create(37), &hints(json!("group"))));
    let mut legacy = server(json!({}));
    legacy["OS-SCH-HNT:scheduler_hints"] = json!({"group": id});
    assert!(valid(&create(37), &legacy));

    let update = |minor| servers::update(v(minor));
    assert!(valid(&update(1), &json!({"server": {"name": "new", "accessIPv4": "1.2.3.4", "accessIPv6": "::1"}})));
    assert!(!valid(&update(1), &json!({"server": {"accessIPv4": "1.2.3"}})));
    assert!(!valid(&update(1), &json!({"server": {"accessIPv6": "zz"}})));
    assert!(!valid(&update(18), &json!({"server": {"description": "d"}})));
    assert!(valid(&update(19), &json!({"server": {"description": "d"}})));
    assert!(!valid(&update(103), &json!({"server": {"pinned_availability_zone": "az"}})));
    assert!(valid(&update(104), &json!({"server": {"pinned_availability_zone": null}})));
    assert!(valid(&update(104), &json!({"server": {"pinned_availability_zone": "az"}})));
    assert!(!valid(&update(104), &json!({"server": {"pinned_availability_zone": ""}})));
    assert!(!valid(&update(19), &json!({"name": "x"})));

    assert!(valid(&servers::start(), &json!({"os-start": null})));
    assert!(!valid(&servers::start(), &json!({"os-start": null, "x": 1})));
    assert!(valid(&servers::stop(), &json!({"os-stop": {}})));
    assert!(valid(&servers::reboot(), &json!({"reboot": {"type": "soft"}})));
    assert!(!valid(&servers::reboot(), &json!({"reboot": {"type": "medium"}})));
    assert!(!valid(&servers::reboot(), &json!({"reboot": {}})));
}

#[test]
fn other_bodies() {
    let flavor = |fields: Value| {
        let mut body = json!({"name": "f", "ram": 512, "vcpus": 1, "disk": 1});
        if let (Some(base), Some(extra)) = (body.as_object_mut(), fields.as_object()) {
            base.extend(extra.clone());
        }
        json!({"flavor": body})
    };
    let create = |minor| flavors::create(v(minor));
    assert!(valid(
        &create(1),
        &flavor(json!({"id": "m1.a b", "swap": "0", "rxtx_factor": 1.5, "os-flavor-access:is_public": "false"}))
    ));
    assert!(valid(&create(1), &flavor(json!({"id": null}))), "null id: generated");
    assert!(!valid(&create(1), &flavor(json!({"id": " a"}))));
    assert!(!valid(&create(1), &flavor(json!({"id": "a "}))));
    assert!(!valid(&create(1), &flavor(json!({"ram": 0}))));
    assert!(!valid(&create(1), &flavor(json!({"disk": -1}))));
    assert!(!valid(&create(1), &flavor(json!({"vcpus": "two"}))));
    assert!(!valid(&create(54), &flavor(json!({"description": "d"}))));
    assert!(valid(&create(55), &flavor(json!({"description": "d"}))));
    assert!(!valid(&create(102), &flavor(json!({"rxtx_factor": 1.0}))), "rxtx_factor is gone at 2.102");
    assert!(valid(&flavors::update(), &json!({"flavor": {"description": null}})));
    assert!(!valid(&flavors::update(), &json!({"flavor": {}})));
    assert!(valid(
        &flavors::extra_specs_create(),
        &json!({"extra_specs": {"hw:numa_nodes": "1", "quota:cpu_shares": 5}})
    ));
    assert!(!valid(&flavors::extra_specs_create(), &json!({"extra_specs": {"a/b": "1"}})));
    assert!(!valid(&flavors::extra_specs_create(), &json!({"extra_specs": {"a": true}})));
    assert!(valid(&flavors::extra_spec_update(), &json!({"hw:numa_nodes": "2"})));
    assert!(!valid(&flavors::extra_spec_update(), &json!({"a": "1", "b": "2"})));
    assert!(!valid(&flavors::extra_spec_update(), &json!({})));
    assert!(valid(&flavors::add_tenant_access(), &json!({"addTenantAccess": {"tenant": "p"}})));
    assert!(!valid(&flavors::add_tenant_access(), &json!({"addTenantAccess": {"tenant": ""}})));
    assert!(!valid(&flavors::remove_tenant_access(), &json!({"addTenantAccess": {"tenant": "p"}})));

    let group = |minor| server_groups::create(v(minor));
    assert!(valid(&group(1), &json!({"server_group": {"name": "g", "policies": ["affinity"]}})));
    assert!(!valid(&group(14), &json!({"server_group": {"name": "g", "policies": ["soft-affinity"]}})));
    assert!(valid(&group(15), &json!({"server_group": {"name": "g", "policies": ["soft-affinity"]}})));
    assert!(!valid(&group(15), &json!({"server_group": {"name": "g", "policies": ["affinity", "anti-affinity"]}})));
    assert!(!valid(&group(15), &json!({"server_group": {"name": "g", "policies": []}})));
    assert!(!valid(&group(64), &json!({"server_group": {"name": "g", "policies": ["affinity"]}})));
    assert!(valid(
        &group(64),
        &json!({"server_group": {"name": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": "2"}}})
    ));
    assert!(!valid(
        &group(64),
        &json!({"server_group": {"name": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": 0}}})
    ));
    assert!(!valid(&group(64), &json!({"server_group": {"name": "g", "policy": "bogus"}})));

    let quota = |minor| quotas::update(v(minor));
    assert!(valid(&quota(1), &json!({"quota_set": {"fixed_ips": -1, "instances": "20", "force": "True"}})));
    assert!(!valid(&quota(36), &json!({"quota_set": {"fixed_ips": -1}})), "network quotas are gone at 2.36");
    assert!(valid(&quota(56), &json!({"quota_set": {"injected_files": 3}})));
    assert!(!valid(&quota(57), &json!({"quota_set": {"injected_files": 3}})), "injected files are gone at 2.57");
    assert!(!valid(&quota(57), &json!({"quota_set": {"instances": -2}})));
    assert!(!valid(&quota(57), &json!({"quota_set": {"instances": "many"}})));
    assert!(!valid(&quota(57), &json!({"quota_set": {"force": "perhaps"}})));
    assert!(!valid(&quota(57), &json!({"quota_set": {"networks": 1}})));

    assert!(valid(&aggregates::create(), &json!({"aggregate": {"name": "agg", "availability_zone": null}})));
    assert!(!valid(&aggregates::create(), &json!({"aggregate": {"name": "agg", "availability_zone": "a:b"}})));
    assert!(!valid(&aggregates::create(), &json!({"aggregate": {"name": " agg"}})));
    assert!(valid(&aggregates::update(), &json!({"aggregate": {"name": " agg "}})), "update trims names");
    assert!(!valid(&aggregates::update(), &json!({"aggregate": {}})));
    assert!(valid(&aggregates::add_host(), &json!({"add_host": {"host": "compute-1.example"}})));
    assert!(!valid(&aggregates::add_host(), &json!({"add_host": {"host": "bad host"}})));
    assert!(!valid(&aggregates::remove_host(), &json!({"remove_host": {}})));
    assert!(valid(&aggregates::set_metadata(), &json!({"set_metadata": {"metadata": {"ssd": "true", "old": null}}})));
    assert!(!valid(&aggregates::set_metadata(), &json!({"set_metadata": {"metadata": {"ssd": 1}}})));

    assert!(valid(
        &services::legacy_update(v(1)),
        &json!({"host": "h", "binary": "nova-compute", "disabled_reason": "x"})
    ));
    assert!(!valid(&services::legacy_update(v(10)), &json!({"host": "h", "binary": "b", "forced_down": true})));
    assert!(valid(&services::legacy_update(v(11)), &json!({"host": "h", "binary": "b", "forced_down": "yes"})));
    assert!(!valid(&services::legacy_update(v(11)), &json!({"binary": "b"})));
    assert!(valid(
        &services::update(),
        &json!({"status": "disabled", "disabled_reason": "maint", "forced_down": false})
    ));
    assert!(valid(&services::update(), &json!({})));
    assert!(!valid(&services::update(), &json!({"status": "off"})));
    assert!(!valid(&services::update(), &json!({"host": "h"})));

    assert!(schemas::boolean()["enum"].as_array().is_some_and(|e| e.len() == 22));
}
