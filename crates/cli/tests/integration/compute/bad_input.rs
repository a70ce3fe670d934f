//! Bad input on every compute, image, agent and admin route: a 4xx with
//! the API's own error body (Nova's `{"badRequest": {"code", "message"}}`,
//! Glance's `{"code", "title", "message"}`, berth's `{"error": {...}}`),
//! and nothing changed anywhere (compute resources, placement, images).

use serde_json::{json, Value};

use super::support::{Cloud, Hosts, Nova};

/// One bad request and what must come back.
struct Case {
    token: &'static str,
    method: &'static str,
    /// Path after the API prefix (`/compute/v2.1`, `/image`, …).
    path: String,
    /// Raw body (sent as JSON when given).
    body: Option<String>,
    status: u16,
    /// The top-level key of Nova's error body (`badRequest`, …); empty for
    /// the other APIs.
    fault: &'static str,
}

fn case(token: &'static str, method: &'static str, path: impl Into<String>, body: Option<Value>, status: u16) -> Case {
    let fault = match status {
        400 => "badRequest",
        403 => "forbidden",
        404 => "itemNotFound",
        409 => "conflictingRequest",
        _ => "",
    };
    Case { token, method, path: path.into(), body: body.map(|b| b.to_string()), status, fault }
}

fn raw(method: &'static str, path: &str, body: &str, status: u16) -> Case {
    Case {
        token: "admin",
        method,
        path: path.to_owned(),
        body: Some(body.to_owned()),
        status,
        fault: if status == 400 { "badRequest" } else { "" },
    }
}

/// Everything a bad request could have touched, as the admin sees it.
async fn snapshot(cloud: &Cloud, nova: &Nova) -> Value {
    let mut out = serde_json::Map::new();
    for path in [
        "/servers/detail?all_tenants=1",
        "/flavors/detail?is_public=None",
        "/os-server-groups?all_projects=True",
        "/os-keypairs",
        "/os-aggregates",
        "/os-quota-sets/admin",
        "/os-quota-sets/p1",
        "/os-services",
        "/os-hypervisors/detail",
        "/os-availability-zone/detail",
    ] {
        let answer = nova.get(path).await;
        assert_eq!(answer.status, 200, "snapshot {path}: {:?}", answer.body);
        out.insert(path.to_owned(), strip_volatile(answer.body));
    }
    for flavor in ["f1", "f2"] {
        for sub in ["os-extra_specs", "os-flavor-access"] {
            let path = format!("/flavors/{flavor}/{sub}");
            out.insert(path.clone(), nova.get(&path).await.body);
        }
    }
    let placement = cloud.server.client();
    for path in ["/resource_providers", "/resource_providers?resources=VCPU:1", "/usages?project_id=admin"] {
        out.insert(format!("placement {path}"), placement.get(path).await.body);
    }
    let images = crate::support::http_client()
        .get(format!("{}/image/v2/images", cloud.server.base))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("images");
    out.insert("images".to_owned(), images.json().await.expect("images json"));
    let cells = crate::support::http_client()
        .get(format!("{}/admin/v1/cells", cloud.server.base))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("cells");
    out.insert("cells".to_owned(), cells.json().await.expect("cells json"));
    Value::Object(out)
}

/// Heartbeat times and the like move on their own.
fn strip_volatile(mut value: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("updated_at");
                map.remove("uptime");
                for v in map.values_mut() {
                    walk(v);
                }
            }
            Value::Array(list) => list.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

async fn send(cloud: &Cloud, prefix: &str, case: &Case) -> (u16, Value) {
    let mut req = crate::support::http_client()
        .request(case.method.parse().expect("method"), format!("{}{prefix}{}", cloud.server.base, case.path))
        .header("x-auth-token", case.token)
        .header("accept", "application/json")
        .header("openstack-api-version", "compute 2.96");
    if let Some(body) = &case.body {
        req = req.header("content-type", "application/json").body(body.clone());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let mut cloud = Cloud::start("bad-input", &[]).await;
    cloud.add_agent(Hosts::new("bad", 2, &[])).await;
    let nova = cloud.nova("admin");
    // Something of everything, so that a bad request has things to break.
    let private = nova
        .post(
            "/flavors",
            &json!({"flavor": {"name": "f2", "id": "f2", "vcpus": 1, "ram": 256, "disk": 1,
                                              "os-flavor-access:is_public": false}}),
        )
        .await;
    assert_eq!(private.status, 200, "{:?}", private.body);
    let f1 =
        nova.post("/flavors", &json!({"flavor": {"name": "f1", "id": "f1", "vcpus": 1, "ram": 128, "disk": 1}})).await;
    assert_eq!(f1.status, 200, "{:?}", f1.body);
    let image = nova.image("img", json!({})).await;
    let server = nova.boot_id("vm", "f1", &image).await;
    assert_eq!(nova.wait_settled(&server).await["status"], "ACTIVE");
    let group = nova.post("/os-server-groups", &json!({"server_group": {"name": "g", "policy": "affinity"}})).await;
    assert_eq!(group.status, 200, "{:?}", group.body);
    let group = group.body["server_group"]["id"].as_str().expect("group id").to_owned();
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBieUUS8Ig4rsQkCiNR62QXjgraDjV4cTPo1044yaD0A test@berth";
    let kp = nova.post("/os-keypairs", &json!({"keypair": {"name": "kp", "public_key": key}})).await;
    assert_eq!(kp.status, 201, "{:?}", kp.body);
    let agg = nova.post("/os-aggregates", &json!({"aggregate": {"name": "a1"}})).await;
    assert_eq!(agg.status, 200, "{:?}", agg.body);
    let agg = agg.body["aggregate"]["id"].as_i64().expect("aggregate id");
    let services = nova.get("/os-services").await.body;
    let service = services["services"][0]["id"].as_str().expect("service uuid").to_owned();
    let hypervisors = nova.get("/os-hypervisors").await.body;
    let hypervisor = hypervisors["hypervisors"][0]["id"].as_str().expect("hypervisor uuid").to_owned();
    let unknown = "9d3b7bd6-7a43-4a41-9d1f-6b8f5d1f8a11";

    let before = snapshot(&cloud, &nova).await;
    let boot = |server: Value| Some(json!({ "server": server }));
    let good = json!({"name": "x", "flavorRef": "f1", "imageRef": image, "networks": "none"});
    let with = |key: &str, value: Value| {
        let mut s = good.clone();
        s[key] = value;
        boot(s)
    };
    let without = |key: &str| {
        let mut s = good.clone();
        s.as_object_mut().expect("object").remove(key);
        boot(s)
    };
    let s = |p: &str| p.replace("{server}", &server);
    let compute: Vec<Case> = vec![
        // servers: create
        case("admin", "POST", "/servers", without("flavorRef"), 400),
        case("admin", "POST", "/servers", with("flavorRef", json!("nope")), 400),
        case("admin", "POST", "/servers", with("imageRef", json!(unknown)), 400),
        case("admin", "POST", "/servers", with("imageRef", json!("not-a-uuid")), 400),
        case("admin", "POST", "/servers", without("imageRef"), 400),
        case("admin", "POST", "/servers", with("networks", json!("bogus")), 400),
        case("admin", "POST", "/servers", with("networks", json!([{"uuid": unknown}])), 400),
        case("admin", "POST", "/servers", with("name", json!("")), 400),
        case("admin", "POST", "/servers", with("name", json!("x".repeat(256))), 400),
        case("admin", "POST", "/servers", with("min_count", json!(0)), 400),
        case("admin", "POST", "/servers", with("min_count", json!("many")), 400),
        case("admin", "POST", "/servers", with("availability_zone", json!("no-such-zone")), 400),
        case("admin", "POST", "/servers", with("key_name", json!("nokey")), 400),
        case("admin", "POST", "/servers", with("metadata", json!({"k": 1})), 400),
        case("admin", "POST", "/servers", with("unknown_attribute", json!(1)), 400),
        case(
            "admin",
            "POST",
            "/servers",
            with(
                "block_device_mapping_v2",
                json!([{"uuid": unknown, "boot_index": 0, "source_type": "volume", "destination_type": "volume"}]),
            ),
            400,
        ),
        case(
            "admin",
            "POST",
            "/servers",
            with("min_count", json!(3)).map(|mut b| {
                b["server"]["max_count"] = json!(2);
                b
            }),
            400,
        ),
        case(
            "admin",
            "POST",
            "/servers",
            Some(json!({"server": good, "os:scheduler_hints": {"group": "not-a-uuid"}})),
            400,
        ),
        case("admin", "POST", "/servers", Some(json!({"server": good, "os:scheduler_hints": {"group": unknown}})), 400),
        case("admin", "POST", "/servers", Some(json!({"server": good, "os:scheduler_hints": {"same_host": "x"}})), 400),
        case("p1:p1", "POST", "/servers", with("flavorRef", json!("f2")), 400),
        case("p1:p1", "POST", "/servers", with("availability_zone", json!("nova:bad0")), 403),
        case("admin", "POST", "/servers", Some(json!({"notserver": {}})), 400),
        raw("POST", "/servers", "{not json", 400),
        // servers: show, list, update, delete, actions
        case("admin", "GET", format!("/servers/{unknown}"), None, 404),
        case("admin", "GET", "/servers/not-a-uuid", None, 404),
        case("p1:p1", "GET", s("/servers/{server}"), None, 404),
        case("admin", "GET", "/servers?limit=-1", None, 400),
        case("admin", "GET", "/servers?limit=abc", None, 400),
        case("admin", "GET", format!("/servers?marker={unknown}"), None, 400),
        case("admin", "GET", "/servers?sort_key=bogus", None, 400),
        case("admin", "GET", "/servers?sort_key=display_name&sort_dir=sideways", None, 400),
        case("admin", "GET", "/servers/detail?changes-since=yesterday", None, 400),
        case("admin", "GET", "/servers?name=(", None, 400),
        case("admin", "PUT", s("/servers/{server}"), Some(json!({"server": {"name": ""}})), 400),
        case("admin", "PUT", s("/servers/{server}"), Some(json!({"server": {"flavorRef": "f1"}})), 400),
        case("admin", "PUT", format!("/servers/{unknown}"), Some(json!({"server": {"name": "y"}})), 404),
        case("p1:p1", "PUT", s("/servers/{server}"), Some(json!({"server": {"name": "y"}})), 404),
        case("admin", "DELETE", format!("/servers/{unknown}"), None, 404),
        case("p1:p1", "DELETE", s("/servers/{server}"), None, 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"bogusAction": null})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"os-start": null})), 409),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"reboot": {"type": "SIDEWAYS"}})), 400),
        case("admin", "POST", format!("/servers/{unknown}/action"), Some(json!({"os-stop": null})), 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"evacuate": {}})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"evacuate": {"host": "nohost"}})), 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"evacuate": {"host": 7}})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"evacuate": {"onSharedStorage": true}})), 400),
        case("admin", "POST", format!("/servers/{unknown}/action"), Some(json!({"evacuate": {}})), 404),
        case("p1:p1", "POST", s("/servers/{server}/action"), Some(json!({"evacuate": {}})), 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"os-migrateLive": {}})), 400),
        case(
            "admin",
            "POST",
            s("/servers/{server}/action"),
            Some(json!({"os-migrateLive": {"block_migration": "maybe", "host": null}})),
            400,
        ),
        case(
            "admin",
            "POST",
            s("/servers/{server}/action"),
            Some(json!({"os-migrateLive": {"block_migration": "auto", "host": "nohost"}})),
            400,
        ),
        case(
            "admin",
            "POST",
            s("/servers/{server}/action"),
            Some(json!({"os-migrateLive": {"block_migration": "auto", "host": null, "x": 1}})),
            400,
        ),
        case(
            "p1:p1",
            "POST",
            s("/servers/{server}/action"),
            Some(json!({"os-migrateLive": {"block_migration": "auto", "host": null}})),
            404,
        ),
        case("admin", "GET", format!("/servers/{unknown}/migrations"), None, 404),
        case("admin", "GET", s("/servers/{server}/migrations/abc"), None, 404),
        case("admin", "GET", s("/servers/{server}/migrations/99"), None, 404),
        case("admin", "DELETE", s("/servers/{server}/migrations/99"), None, 409),
        case("admin", "POST", s("/servers/{server}/migrations/99/action"), Some(json!({"force_complete": null})), 409),
        case("admin", "POST", s("/servers/{server}/migrations/99/action"), Some(json!({"nope": null})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"shelve": null, "more": 1})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"shelveOffload": null})), 409),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"unshelve": null})), 409),
        case("admin", "GET", format!("/servers/{unknown}/os-instance-actions"), None, 404),
        case("admin", "GET", s("/servers/{server}/os-instance-actions/req-nope"), None, 404),
        // server metadata, tags, ips, pause/suspend, console output, resetState
        case("admin", "GET", format!("/servers/{unknown}/metadata"), None, 404),
        raw("POST", &s("/servers/{server}/metadata"), "{not json", 400),
        raw("PUT", &s("/servers/{server}/tags/x"), "{not json", 400),
        case("admin", "GET", "/servers/not-a-uuid/metadata", None, 404),
        case("p1:p1", "GET", s("/servers/{server}/metadata"), None, 404),
        case("admin", "POST", s("/servers/{server}/metadata"), Some(json!({"metadata": {"k": ["v"]}})), 400),
        case("admin", "POST", s("/servers/{server}/metadata"), Some(json!({"metadata": "k"})), 400),
        case("admin", "PUT", s("/servers/{server}/metadata/k"), Some(json!({"meta": null})), 400),
        case("admin", "PUT", s("/servers/{server}/tags"), Some(json!({"tags": [1]})), 400),
        case("admin", "PUT", s("/servers/{server}/tags/a%2Fb"), None, 400),
        case("admin", "GET", s("/servers/{server}/tags/nope"), None, 404),
        case("admin", "DELETE", s("/servers/{server}/tags/nope"), None, 404),
        case("admin", "GET", s("/servers/{server}/ips/nope"), None, 404),
        case("admin", "GET", format!("/servers/{unknown}/ips"), None, 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"unpause": null})), 409),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"resume": null})), 409),
        case("admin", "POST", format!("/servers/{unknown}/action"), Some(json!({"pause": null})), 404),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"suspend": null, "x": 1})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"os-getConsoleOutput": {"length": -7}})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"os-getConsoleOutput": "all"})), 400),
        case("admin", "POST", s("/servers/{server}/action"), Some(json!({"os-resetState": {"state": "ACTIVE"}})), 400),
        case("p1:p1", "POST", s("/servers/{server}/action"), Some(json!({"os-resetState": {"state": "error"}})), 404),
        // flavors
        case("admin", "POST", "/flavors", Some(json!({"flavor": {"vcpus": 1, "ram": 1, "disk": 1}})), 400),
        case("admin", "POST", "/flavors", Some(json!({"flavor": {"name": "z", "vcpus": 0, "ram": 1, "disk": 1}})), 400),
        case(
            "admin",
            "POST",
            "/flavors",
            Some(json!({"flavor": {"name": "z", "vcpus": 1, "ram": -1, "disk": 1}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/flavors",
            Some(json!({"flavor": {"name": "f1", "vcpus": 1, "ram": 1, "disk": 1}})),
            409,
        ),
        case(
            "admin",
            "POST",
            "/flavors",
            Some(json!({"flavor": {"name": "z", "id": "f1", "vcpus": 1, "ram": 1, "disk": 1}})),
            409,
        ),
        case("p1:p1", "POST", "/flavors", Some(json!({"flavor": {"name": "z", "vcpus": 1, "ram": 1, "disk": 1}})), 403),
        case("admin", "GET", "/flavors/nope", None, 404),
        case("p1:p1", "GET", "/flavors/f2", None, 404),
        case("admin", "GET", "/flavors?limit=-3", None, 400),
        case("admin", "GET", "/flavors?marker=nope", None, 400),
        case("admin", "PUT", "/flavors/f1", Some(json!({"flavor": {"name": "renamed"}})), 400),
        case("admin", "PUT", "/flavors/nope", Some(json!({"flavor": {"description": "d"}})), 404),
        case("admin", "DELETE", "/flavors/nope", None, 404),
        case("p1:p1", "DELETE", "/flavors/f1", None, 403),
        case(
            "admin",
            "POST",
            "/flavors/f1/os-extra_specs",
            Some(json!({"extra_specs": {"trait:NOT_A_TRAIT": "required"}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/flavors/f1/os-extra_specs",
            Some(json!({"extra_specs": {"resources:VCPU": "many"}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/flavors/f1/os-extra_specs",
            Some(json!({"extra_specs": {"hw:cpu_policy": "wobbly"}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/flavors/f1/os-extra_specs",
            Some(json!({"extra_specs": {"group_policy": "sometimes"}})),
            400,
        ),
        case("admin", "POST", "/flavors/f1/os-extra_specs", Some(json!({"extra_specs": "x"})), 400),
        case("admin", "POST", "/flavors/nope/os-extra_specs", Some(json!({"extra_specs": {"a": "b"}})), 404),
        case("admin", "PUT", "/flavors/f1/os-extra_specs/a", Some(json!({"b": "c"})), 400),
        case("admin", "PUT", "/flavors/f1/os-extra_specs/a", Some(json!({"a": "b", "c": "d"})), 400),
        case("admin", "GET", "/flavors/f1/os-extra_specs/missing", None, 404),
        case("admin", "DELETE", "/flavors/f1/os-extra_specs/missing", None, 404),
        case("p1:p1", "POST", "/flavors/f1/os-extra_specs", Some(json!({"extra_specs": {"a": "b"}})), 403),
        case("admin", "POST", "/flavors/f1/action", Some(json!({"addTenantAccess": {"tenant": "p1"}})), 409),
        case("admin", "POST", "/flavors/f2/action", Some(json!({"addTenantAccess": {}})), 400),
        case("admin", "POST", "/flavors/f2/action", Some(json!({"removeTenantAccess": {"tenant": "never"}})), 404),
        case("admin", "POST", "/flavors/f2/action", Some(json!({"bogus": {}})), 400),
        case("admin", "GET", "/flavors/f1/os-flavor-access", None, 404),
        // server groups
        case(
            "admin",
            "POST",
            "/os-server-groups",
            Some(json!({"server_group": {"name": "g2", "policy": "sideways"}})),
            400,
        ),
        case("admin", "POST", "/os-server-groups", Some(json!({"server_group": {"name": "g2"}})), 400),
        case(
            "admin",
            "POST",
            "/os-server-groups",
            Some(json!({"server_group": {"name": "", "policy": "affinity"}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/os-server-groups",
            Some(json!({"server_group": {"name": "g2", "policy": "affinity", "rules": {"max_server_per_host": 2}}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/os-server-groups",
            Some(
                json!({"server_group": {"name": "g2", "policy": "anti-affinity", "rules": {"max_server_per_host": 0}}}),
            ),
            400,
        ),
        case("admin", "GET", format!("/os-server-groups/{unknown}"), None, 404),
        case("p1:p1", "GET", format!("/os-server-groups/{group}"), None, 404),
        case("admin", "DELETE", format!("/os-server-groups/{unknown}"), None, 404),
        case("p1:p1", "DELETE", format!("/os-server-groups/{group}"), None, 404),
        case("admin", "GET", "/os-server-groups?limit=-1", None, 400),
        // key pairs
        case(
            "admin",
            "POST",
            "/os-keypairs",
            Some(json!({"keypair": {"name": "x", "public_key": "ssh-rsa JUNK"}})),
            400,
        ),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"name": "x", "public_key": 5}})), 400),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"name": 5, "public_key": key}})), 400),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"public_key": key}})), 400),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"name": "x"}})), 400),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"name": "x/y", "public_key": key}})), 400),
        case(
            "admin",
            "POST",
            "/os-keypairs",
            Some(json!({"keypair": {"name": "x", "public_key": key, "bogus": 1}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/os-keypairs",
            Some(json!({"keypair": {"name": "x", "type": "rsa", "public_key": key}})),
            400,
        ),
        case(
            "admin",
            "POST",
            "/os-keypairs",
            Some(json!({"keypair": {"name": "x", "type": "x509", "public_key": key}})),
            400,
        ),
        case("admin", "POST", "/os-keypairs", Some(json!({"keypair": {"name": "kp", "public_key": key}})), 409),
        case(
            "p1:p1",
            "POST",
            "/os-keypairs",
            Some(json!({"keypair": {"name": "x", "user_id": "admin", "public_key": key}})),
            403,
        ),
        case("admin", "GET", "/os-keypairs/nope", None, 404),
        case("admin", "DELETE", "/os-keypairs/nope", None, 404),
        case("p1:p1", "GET", "/os-keypairs/kp?user_id=admin", None, 403),
        case("p1:p1", "DELETE", "/os-keypairs/kp?user_id=admin", None, 403),
        case("p1:p1", "DELETE", "/os-keypairs/kp", None, 404),
        case("admin", "GET", "/os-keypairs?limit=-1", None, 400),
        case("admin", "GET", "/os-keypairs?marker=nope", None, 400),
        case("admin", "GET", "/os-keypairs?bogus=1", None, 400),
        case("admin", "POST", "/servers", with("key_name", json!("")), 400),
        // quotas and limits
        case("admin", "PUT", "/os-quota-sets/p1", Some(json!({"quota_set": {"instances": -2}})), 400),
        case("admin", "PUT", "/os-quota-sets/p1", Some(json!({"quota_set": {"instances": "lots"}})), 400),
        case("admin", "PUT", "/os-quota-sets/p1", Some(json!({"quota_set": {"bogus": 1}})), 400),
        case("admin", "PUT", "/os-quota-sets/admin", Some(json!({"quota_set": {"instances": 0}})), 400),
        case("p1:p1", "PUT", "/os-quota-sets/p1", Some(json!({"quota_set": {"instances": 100}})), 403),
        case("p1:p1", "GET", "/os-quota-sets/admin", None, 403),
        case("p1:p1", "DELETE", "/os-quota-sets/p1", None, 403),
        case("p1:p1", "GET", "/limits?tenant_id=admin", None, 403),
        // hypervisors, services, aggregates, zones
        case("p1:p1", "GET", "/os-hypervisors", None, 403),
        case("admin", "GET", format!("/os-hypervisors/{unknown}"), None, 404),
        case("admin", "GET", "/os-hypervisors/1", None, 400),
        case("admin", "GET", "/os-hypervisors?limit=x", None, 400),
        case("admin", "GET", "/os-hypervisors?hypervisor_hostname_pattern=zzz", None, 404),
        case("p1:p1", "GET", format!("/os-hypervisors/{hypervisor}"), None, 403),
        case("p1:p1", "GET", "/os-services", None, 403),
        case("admin", "PUT", format!("/os-services/{unknown}"), Some(json!({"status": "disabled"})), 404),
        case("admin", "PUT", format!("/os-services/{service}"), Some(json!({"status": "sleepy"})), 400),
        case(
            "admin",
            "PUT",
            format!("/os-services/{service}"),
            Some(json!({"status": "enabled", "disabled_reason": "x"})),
            400,
        ),
        case("admin", "PUT", format!("/os-services/{service}"), Some(json!({"forced_down": "maybe"})), 400),
        case("admin", "PUT", format!("/os-services/{service}"), Some(json!({})), 400),
        case("admin", "DELETE", format!("/os-services/{unknown}"), None, 404),
        case("admin", "DELETE", "/os-services/1", None, 400),
        case("p1:p1", "POST", "/os-aggregates", Some(json!({"aggregate": {"name": "a2"}})), 403),
        case("admin", "POST", "/os-aggregates", Some(json!({"aggregate": {"name": ""}})), 400),
        case("admin", "POST", "/os-aggregates", Some(json!({"aggregate": {"name": "a1"}})), 409),
        case(
            "admin",
            "POST",
            "/os-aggregates",
            Some(json!({"aggregate": {"name": "a2", "availability_zone": ""}})),
            400,
        ),
        case("admin", "GET", "/os-aggregates/999", None, 404),
        case("admin", "GET", "/os-aggregates/x", None, 400),
        case("admin", "PUT", format!("/os-aggregates/{agg}"), Some(json!({"aggregate": {}})), 400),
        case("admin", "PUT", "/os-aggregates/999", Some(json!({"aggregate": {"name": "q"}})), 404),
        case("admin", "DELETE", "/os-aggregates/999", None, 404),
        case(
            "admin",
            "POST",
            format!("/os-aggregates/{agg}/action"),
            Some(json!({"add_host": {"host": "nohost"}})),
            404,
        ),
        case(
            "admin",
            "POST",
            format!("/os-aggregates/{agg}/action"),
            Some(json!({"remove_host": {"host": "bad0"}})),
            404,
        ),
        case("admin", "POST", format!("/os-aggregates/{agg}/action"), Some(json!({"add_host": {}})), 400),
        case("admin", "POST", format!("/os-aggregates/{agg}/action"), Some(json!({"dance": {}})), 400),
        case(
            "admin",
            "POST",
            format!("/os-aggregates/{agg}/action"),
            Some(json!({"set_metadata": {"metadata": {"availability_zone": ""}}})),
            400,
        ),
        case("admin", "POST", "/os-aggregates/999/action", Some(json!({"add_host": {"host": "bad0"}})), 404),
        // an API that does not exist at this microversion
        case("admin", "GET", "/os-no-such-thing", None, 404),
    ];
    let mut failures = Vec::new();
    for c in &compute {
        let (status, body) = send(&cloud, "/compute/v2.1", c).await;
        let fault_ok = c.fault.is_empty()
            || (body[c.fault]["code"] == json!(c.status)
                && body[c.fault]["message"].as_str().is_some_and(|m| !m.is_empty()));
        if status != c.status || !fault_ok {
            failures.push(format!(
                "{} {} {:?}: got {status} {body}, want {} {}",
                c.method, c.path, c.body, c.status, c.fault
            ));
        }
    }
    // A microversion beyond the maximum, and a malformed one.
    for (header, want) in [("compute 2.999", 406), ("compute two", 400)] {
        let resp = crate::support::http_client()
            .get(format!("{}/compute/v2.1/servers", cloud.server.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", header)
            .send()
            .await
            .expect("request");
        if resp.status().as_u16() != want {
            failures.push(format!("version {header}: got {}, want {want}", resp.status()));
        }
    }

    // The image API: Glance's error body.
    let images: Vec<Case> = vec![
        case("admin", "POST", "/v2/images", Some(json!({"name": "i", "disk_format": "floppy"})), 400),
        case("admin", "POST", "/v2/images", Some(json!({"name": "i", "container_format": "crate"})), 400),
        case("admin", "POST", "/v2/images", Some(json!({"name": "i", "visibility": "everyone"})), 400),
        case("admin", "POST", "/v2/images", Some(json!({"id": "not-a-uuid"})), 400),
        case("admin", "POST", "/v2/images", Some(json!({"id": image})), 409),
        case("admin", "POST", "/v2/images", Some(json!({"name": "i", "min_ram": -1})), 400),
        case("admin", "GET", format!("/v2/images/{unknown}"), None, 404),
        case("admin", "GET", "/v2/images?limit=x", None, 400),
        case("admin", "DELETE", format!("/v2/images/{unknown}"), None, 404),
        case("p1:p1", "DELETE", format!("/v2/images/{image}"), None, 403),
        raw("POST", "/v2/images", "[1,2", 400),
    ];
    for c in &images {
        let (status, body) = send(&cloud, "/image", c).await;
        let body_ok = body["code"] == json!(c.status) && body["message"].as_str().is_some();
        if status != c.status || !body_ok {
            failures
                .push(format!("image {} {} {:?}: got {status} {body}, want {}", c.method, c.path, c.body, c.status));
        }
    }

    // berth's own APIs: `{"error": {"code", "message"}}`.
    let dup_path = cloud.server.dir.join("duplicate-cell.sqlite");
    let dup_db = format!("sqlite://{}", dup_path.display());
    let own: Vec<(&str, Case)> = vec![
        ("/agent/v1", case("p1:p1", "POST", "/register", Some(json!({"agent": "a", "hosts": []})), 403)),
        ("/agent/v1", case("admin", "POST", "/register", Some(json!({"hosts": "x"})), 400)),
        ("/agent/v1", case("admin", "POST", "/heartbeat", Some(json!({})), 400)),
        ("/agent/v1", case("admin", "GET", "/work", None, 400)),
        ("/agent/v1", case("admin", "POST", "/events", Some(json!({"events": [{"task": "x"}]})), 400)),
        ("/admin/v1", case("p1:p1", "GET", "/cells", None, 403)),
        // A duplicate name is refused before its database is opened.
        (
            "/admin/v1",
            case("admin", "POST", "/cells", Some(json!({"name": "cell1", "database_connection": dup_db})), 409),
        ),
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!({"database_connection": "x"})), 400)),
        (
            "/admin/v1",
            case("admin", "POST", "/cells", Some(json!({"name": "c9", "database_connection": "sqlite://x"})), 400),
        ),
        (
            "/admin/v1",
            case("admin", "POST", "/cells", Some(json!({"name": "c9", "database_connection": "mysql://h/db"})), 400),
        ),
        // Issue 36: a non-string connection was taken as "the default".
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!({"name": "c9", "database_connection": 5})), 400)),
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!({"name": "c9", "database_connection": null})), 400)),
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!({"name": "c9", "database_connection": ""})), 400)),
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!({"name": "c9", "database": "sqlite://x"})), 400)),
        ("/admin/v1", case("admin", "POST", "/cells", Some(json!(["c9"])), 400)),
        ("/admin/v1", case("admin", "POST", "/cells/nope/disable", None, 404)),
        ("/admin/v1", case("admin", "POST", "/cells/cell0/disable", None, 400)),
    ];
    for (prefix, c) in &own {
        let (status, body) = send(&cloud, prefix, c).await;
        let body_ok = body["error"]["code"] == json!(c.status);
        if status != c.status || !body_ok {
            failures
                .push(format!("{prefix} {} {} {:?}: got {status} {body}, want {}", c.method, c.path, c.body, c.status));
        }
    }

    assert!(failures.is_empty(), "{} bad requests answered wrongly:\n{}", failures.len(), failures.join("\n"));
    assert!(!dup_path.exists(), "a refused cell left its database behind");
    let after = snapshot(&cloud, &nova).await;
    for (key, value) in before.as_object().expect("object") {
        assert_eq!(&after[key], value, "{key} changed by a bad request");
    }
    cloud.check_invariants().await;
}

/// Create an image as `token` with `visibility`; returns its id.
async fn image_as(cloud: &Cloud, token: &str, name: &str, visibility: &str) -> String {
    let resp = crate::support::http_client()
        .post(format!("{}/image/v2/images", cloud.server.base))
        .header("x-auth-token", token)
        .header("content-type", "application/json")
        .body(
            json!({"name": name, "disk_format": "qcow2", "container_format": "bare", "visibility": visibility})
                .to_string(),
        )
        .send()
        .await
        .expect("image create");
    assert_eq!(resp.status().as_u16(), 201, "create image {name}");
    let value: Value = resp.json().await.expect("image json");
    let id = value["id"].as_str().expect("image id").to_owned();
    cloud.nova(token).upload_image(&id, b"data".to_vec()).await;
    id
}

#[tokio::test]
async fn a_server_boots_only_from_an_image_its_project_can_see() {
    let mut cloud = Cloud::start("image-visibility", &[]).await;
    cloud.add_agent(Hosts::new("vis", 1, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 128, 1).await;
    let private = image_as(&cloud, "alice:projA", "private", "private").await;
    let shared = image_as(&cloud, "alice:projA", "shared", "shared").await;
    let community = image_as(&cloud, "alice:projA", "community", "community").await;
    let alice = cloud.nova("alice:projA");
    let bob = cloud.nova("bob:projB");

    for image in [&private, &shared] {
        assert_eq!(bob.image_get(&format!("/images/{image}")).await.status, 404, "bob cannot see {image}");
        let answer = bob.boot("stolen", &flavor, image, json!({})).await;
        assert_eq!(answer.status, 400, "bob boots {image}: {:?}", answer.body);
        assert_eq!(answer.body["badRequest"]["message"], "Can not find requested image", "{:?}", answer.body);
        // Also named by a block device mapping instead of imageRef.
        let bdm = json!([{"uuid": image, "boot_index": 0, "source_type": "image",
                          "destination_type": "local", "delete_on_termination": true}]);
        let answer = bob.boot("stolen", &flavor, "", json!({"block_device_mapping_v2": bdm})).await;
        assert_eq!(answer.status, 400, "bob boots {image} by BDM: {:?}", answer.body);
        assert_eq!(answer.body["badRequest"]["message"], "Can not find requested image", "{:?}", answer.body);
    }
    assert_eq!(bob.get("/servers").await.body["servers"], json!([]), "nothing booted for bob");

    // What each can see, each can boot: the owner its private image, anyone
    // a community one, the admin everything.
    let mut booted = Vec::new();
    for (nova, image) in [(&alice, &private), (&alice, &shared), (&bob, &community), (&admin, &private)] {
        let answer = nova.boot("ok", &flavor, image, json!({})).await;
        assert_eq!(answer.status, 202, "{} boots {image}: {:?}", nova.token, answer.body);
        booted.push((nova, answer.body["server"]["id"].as_str().expect("id").to_owned()));
    }
    for (nova, id) in &booted {
        assert_eq!(nova.wait_settled(id).await["status"], "ACTIVE");
    }
    cloud.check_invariants().await;
}

/// Send `body` (raw) to `path` (under the server root) as admin with
/// `content_type`; status and JSON body.
async fn send_raw(cloud: &Cloud, method: &str, path: &str, content_type: &str, body: String) -> (u16, Value) {
    let resp = crate::support::http_client()
        .request(method.parse().expect("method"), format!("{}{path}", cloud.server.base))
        .header("x-auth-token", "admin")
        .header("accept", "application/json")
        .header("openstack-api-version", "compute 2.96")
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// What upstream refuses is refused, with upstream's status and text, and
/// creates nothing; what upstream accepts (a lease without reservations, a
/// negative `resources:` amount in a flavor's extra specs) works.
#[tokio::test]
async fn input_upstream_refuses_is_refused_with_its_status_and_text() {
    let mut cloud = Cloud::start("upstream-refusals", &[]).await;
    cloud.add_agent(Hosts::new("ref", 1, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    let huge = json!(9_223_372_036_854_775_808u64);
    let mut failures = Vec::new();
    let want = |failures: &mut Vec<String>, what: &str, got: (u16, Value), status: u16, text: &str| {
        let body = got.1.to_string();
        if got.0 != status || !body.contains(text) {
            let shown: String = body.chars().take(300).collect();
            failures.push(format!("{what}: got {} {shown}, want {status} with {text:?}", got.0));
        }
    };

    // Compute: Nova's quota check refuses a count beyond the quota.
    let boot = nova.boot("many", &flavor, &image, json!({"min_count": huge})).await;
    want(
        &mut failures,
        "min_count 2^63",
        (boot.status, boot.body),
        403,
        "Quota exceeded for cores, instances, ram: Requested 9223372036854775807",
    );
    let boot = nova.boot("many", &flavor, &image, json!({"min_count": "9223372036854775808"})).await;
    want(
        &mut failures,
        "min_count '2^63'",
        (boot.status, boot.body),
        403,
        "Quota exceeded for cores, instances, ram: Requested 9223372036854775807",
    );
    // Nova's `format: base64`.
    let boot = nova.boot("ud", &flavor, &image, json!({"user_data": "not base64!"})).await;
    want(
        &mut failures,
        "user_data",
        (boot.status, boot.body),
        400,
        "Invalid input for field/attribute user_data. Value: not base64!. 'not base64!' is not a 'base64'",
    );
    let servers = nova.wait_all_settled().await;
    if !servers.is_empty() {
        failures.push(format!("{} servers created by refused boots", servers.len()));
    }
    for s in &servers {
        assert_eq!(nova.delete(&format!("/servers/{}", s["id"].as_str().expect("id"))).await.status, 204);
    }
    for s in &servers {
        super::support::wait_gone(&nova, s["id"].as_str().expect("id")).await;
    }
    // Lowered to the quota headroom (10 instances), as Nova does.
    let boot = nova.boot("some", &flavor, &image, json!({"min_count": 1, "max_count": huge})).await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    let servers = nova.wait_all_settled().await;
    if servers.len() != 10 {
        failures.push(format!("max_count 2^63 booted {} servers, not the 10 of the headroom", servers.len()));
    }
    for s in &servers {
        assert_eq!(nova.delete(&format!("/servers/{}", s["id"].as_str().expect("id"))).await.status, 204);
    }
    for s in &servers {
        super::support::wait_gone(&nova, s["id"].as_str().expect("id")).await;
    }

    // A negative resources: amount: Nova's API takes it and its scheduler
    // ignores it, so the flavor's own amount is requested.
    let spec = nova
        .post(&format!("/flavors/{flavor}/os-extra_specs"), &json!({"extra_specs": {"resources:VCPU": "-1"}}))
        .await;
    assert_eq!(spec.status, 200, "{:?}", spec.body);
    let id = nova.boot_id("neg", &flavor, &image).await;
    let status = nova.wait_settled(&id).await["status"].clone();
    if status != "ACTIVE" {
        failures.push(format!("a flavor with resources:VCPU=-1 booted {status}"));
    }
    let allocations = cloud.server.client().get(&format!("/allocations/{id}")).await.body;
    let vcpus: i64 = allocations["allocations"]
        .as_object()
        .expect("allocations")
        .values()
        .filter_map(|a| a["resources"]["VCPU"].as_i64())
        .sum();
    if vcpus != 1 {
        failures.push(format!("resources:VCPU=-1 allocated {vcpus} VCPU, not the flavor's 1"));
    }

    // Glance.
    let images_before = nova.image_get("/images").await.body["images"].as_array().map(Vec::len);
    let create = |extra: Value| {
        let mut body = json!({"name": "i", "disk_format": "qcow2", "container_format": "bare"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let got = send_raw(&cloud, "POST", "/image/v2/images", "application/json", create(json!({"min_disk": huge}))).await;
    want(&mut failures, "min_disk 2^63", got, 400, "'min_disk' value out of range, must not exceed 2147483647.");
    let got =
        send_raw(&cloud, "POST", "/image/v2/images", "application/json", create(json!({"min_ram": 2_147_483_648i64})))
            .await;
    want(&mut failures, "min_ram 2^31", got, 400, "'min_ram' value out of range, must not exceed 2147483647.");
    let many: serde_json::Map<String, Value> = (0..10_000).map(|i| (format!("p{i}"), json!("v"))).collect();
    let got = send_raw(&cloud, "POST", "/image/v2/images", "application/json", create(Value::Object(many))).await;
    want(
        &mut failures,
        "10,000 properties",
        got,
        413,
        "The limit has been exceeded on the number of allowed image properties. Attempted: 10000, Maximum: 128",
    );
    let enough: serde_json::Map<String, Value> = (0..128).map(|i| (format!("p{i}"), json!("v"))).collect();
    let got = send_raw(&cloud, "POST", "/image/v2/images", "application/json", create(Value::Object(enough))).await;
    let queued = got.1["id"].as_str().unwrap_or_default().to_owned();
    want(&mut failures, "128 properties", got.clone(), 201, "");
    let got = nova.boot("early", &flavor, &queued, json!({})).await;
    want(
        &mut failures,
        "boot from a queued image",
        (got.status, got.body),
        400,
        &format!("Image {queued} is not active."),
    );
    let upload = format!("/image/v2/images/{queued}/file");
    let got = send_raw(&cloud, "PUT", &upload, "application/json", "{}".into()).await;
    want(&mut failures, "upload as JSON", got, 415, "Invalid content type application/json");
    let got = send_raw(&cloud, "PUT", &upload, "application/octet-stream", "data".into()).await;
    want(&mut failures, "upload as octet-stream", got, 204, "");
    let got = send_raw(&cloud, "PUT", &upload, "application/octet-stream", "again".into()).await;
    want(
        &mut failures,
        "upload to an active image",
        got,
        409,
        "Image status transition from active to saving is not allowed",
    );
    let images_after = nova.image_get("/images").await.body["images"].as_array().map(Vec::len);
    if images_after != images_before.map(|n| n + 1) {
        failures.push(format!("images: {images_before:?} before, {images_after:?} after (only one created)"));
    }

    // Agent registration: sizes a compute node row holds.
    for vcpus in [json!(-1), huge.clone()] {
        let body = json!({"agent": "x", "hosts": [{"host": "weird0", "vcpus": vcpus, "memory_mb": 1, "local_gb": 1}]});
        let got = send_raw(&cloud, "POST", "/agent/v1/register", "application/json", body.to_string()).await;
        want(
            &mut failures,
            &format!("register vcpus {vcpus}"),
            got,
            400,
            "'vcpus' must be an integer between 0 and 2147483647",
        );
    }
    let hypervisors = nova.get("/os-hypervisors").await.body;
    if hypervisors.to_string().contains("weird0") {
        failures.push("a host with bad sizes was registered".to_owned());
    }

    // Blazar.
    let lease = |extra: Value| {
        let mut body = json!({"name": "l", "start_date": "2050-12-26 12:00", "end_date": "2050-12-27 12:00"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let leases = "/reservation/v1/leases";
    for name in ["x".repeat(81), "x".repeat(1 << 20)] {
        let got = send_raw(&cloud, "POST", leases, "application/json", lease(json!({"name": name}))).await;
        want(
            &mut failures,
            &format!("lease name of {}", name.len()),
            got,
            400,
            "Lease name must be at most 80 characters long.",
        );
    }
    for events in [json!([{"bogus": 1}]), json!(["x"]), json!([{"event_type": "explode"}]), json!("x")] {
        let got = send_raw(&cloud, "POST", leases, "application/json", lease(json!({"events": events}))).await;
        want(&mut failures, &format!("lease events {events}"), got, 400, "Malformed parameter events");
    }
    let got = send_raw(&cloud, "POST", leases, "application/json", lease(json!({"name": "x".repeat(80)}))).await;
    want(&mut failures, "lease without reservations", got.clone(), 201, "");
    let id = got.1["lease"]["id"].as_str().unwrap_or_default().to_owned();
    let got = send_raw(
        &cloud,
        "PUT",
        &format!("{leases}/{id}"),
        "application/json",
        json!({"name": "y".repeat(81)}).to_string(),
    )
    .await;
    want(&mut failures, "lease renamed too long", got, 400, "Lease name must be at most 80 characters long.");
    let listed = send_raw(&cloud, "GET", leases, "application/json", String::new()).await;
    let names: Vec<&str> = listed.1["leases"]
        .as_array()
        .map(|l| l.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    if names != ["x".repeat(80)] {
        let lengths: Vec<usize> = names.iter().map(|n| n.len()).collect();
        failures.push(format!("leases after the refusals: names of lengths {lengths:?}"));
    }

    assert!(failures.is_empty(), "{} answered wrongly:\n{}", failures.len(), failures.join("\n"));
    cloud.check_invariants().await;
}
