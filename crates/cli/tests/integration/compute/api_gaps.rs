//! Issue 37, the gaps upstream Tempest found in the compute API, each
//! checked against what Nova 34 answers: success statuses, the version
//! list, the request id headers, server bodies (`OS-DCF:diskConfig`,
//! `adminPass`, access addresses), `tenant_id` without `all_tenants`, a
//! stopped server that stays stopped through a resize.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::moves::{action, setup, FOUR};
use super::support::{wait_status, Cloud, Hosts, Nova};

/// A raw request to the compute API: status, headers and JSON body.
async fn raw(nova: &Nova, method: &str, path: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = crate::support::http_client()
        .request(method.parse().expect("method"), format!("{}/compute{path}", nova.base_url()))
        .header("x-auth-token", &nova.token)
        .header("openstack-api-version", format!("compute {}", nova.version))
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.unwrap_or_default();
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `DELETE /os-aggregates/{id}` and `DELETE
/// /flavors/{id}/os-extra_specs/{key}` answer 200 with no body, as Nova;
/// `GET /compute/` lists v2.0 then v2.1; every compute answer carries
/// `x-compute-request-id` beside `x-openstack-request-id` (the same
/// `req-<uuid>`), errors included.
#[tokio::test]
async fn statuses_versions_and_request_ids_are_novas() {
    let cloud = Cloud::start("gaps-statuses", &[]).await;
    let nova = cloud.nova("admin");

    let created = nova.post("/os-aggregates", &json!({"aggregate": {"name": "gone"}})).await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let agg = created.body["aggregate"]["id"].as_i64().expect("aggregate id");
    let deleted = nova.delete(&format!("/os-aggregates/{agg}")).await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    assert_eq!(deleted.body, Value::Null, "no body");
    assert_eq!(nova.get(&format!("/os-aggregates/{agg}")).await.status, 404);

    let flavor = nova.flavor("spec", 1, 128, 1).await;
    let specs = json!({"extra_specs": {"hw:cpu_policy": "shared"}});
    assert_eq!(nova.post(&format!("/flavors/{flavor}/os-extra_specs"), &specs).await.status, 200);
    let unset = nova.delete(&format!("/flavors/{flavor}/os-extra_specs/hw:cpu_policy")).await;
    assert_eq!(unset.status, 200, "{:?}", unset.body);
    assert_eq!(unset.body, Value::Null, "no body");
    let left = nova.get(&format!("/flavors/{flavor}/os-extra_specs")).await;
    assert_eq!(left.body, json!({"extra_specs": {}}));

    let (status, _, versions) = raw(&nova, "GET", "/").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> =
        versions["versions"].as_array().expect("list").iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(ids, ["v2.0", "v2.1"], "{versions}");
    assert_eq!(versions["versions"][0]["status"], "DEPRECATED");
    assert_eq!(versions["versions"][1]["status"], "CURRENT");
    let (_, _, own) = raw(&nova, "GET", "/v2.1/").await;
    assert_eq!(own["version"]["id"], "v2.1", "{own}");

    for (method, path, expected) in
        [("GET", "/v2.1/flavors", 200), ("GET", "/v2.1/servers/nope", 404), ("GET", "/", 200)]
    {
        let (status, headers, _) = raw(&nova, method, path).await;
        assert_eq!(status, expected, "{method} {path}");
        let compute = headers.get("x-compute-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let openstack = headers.get("x-openstack-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(compute.starts_with("req-") && compute.len() == 40, "{method} {path}: {headers:?}");
        assert_eq!(compute, openstack, "{method} {path}");
    }
    // Only the compute API says `x-compute-request-id`.
    let placement = reqwest::get(format!("{}/", nova.base_url())).await.expect("placement root");
    assert!(placement.headers().get("x-openstack-request-id").is_some());
    assert!(placement.headers().get("x-compute-request-id").is_none());
    cloud.check_invariants().await;
}

/// Server bodies as Nova shows them: a given `adminPass` comes back,
/// `OS-DCF:diskConfig` is what was asked (else the image's
/// `auto_disk_config`), the access addresses are checked and IPv6 is
/// written compressed, `PUT` changes them, and a server shows the
/// security groups it was created with, changed by `addSecurityGroup` and
/// `removeSecurityGroup` (the key gone with the last one). An admin's
/// `tenant_id` without `all_tenants` is ignored.
#[tokio::test]
async fn server_bodies_and_tenant_filter_follow_nova() {
    let mut cloud = Cloud::start("gaps-bodies", &[]).await;
    cloud.add_agent(Hosts::new("g", 2, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let auto_image = admin.image("auto", json!({"auto_disk_config": "True"})).await;
    let no_auto = admin.image("no-auto", json!({"auto_disk_config": "Disabled"})).await;
    let flavor = admin.flavor("small", 1, 256, 1).await;

    // Refused before anything is made.
    for (key, bad) in [
        ("accessIPv4", "1.2.3"),
        ("accessIPv4", "::1"),
        ("accessIPv6", "1.2.3.4"),
        ("accessIPv6", "fe80::1::2"),
        ("accessIPv6", "::g"),
    ] {
        let answer = alice.boot("bad", &flavor, &image, json!({key: bad})).await;
        assert_eq!(answer.status, 400, "{key}={bad}: {:?}", answer.body);
        let message = answer.body["badRequest"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(bad), "{message}");
    }
    let answer = alice.boot("bad", &flavor, &no_auto, json!({"OS-DCF:diskConfig": "AUTO"})).await;
    assert_eq!(answer.status, 400, "{:?}", answer.body);
    assert_eq!(
        answer.body["badRequest"]["message"],
        format!("Requested image {no_auto} has automatic disk resize disabled.")
    );
    assert!(alice.get("/servers").await.body["servers"].as_array().is_some_and(Vec::is_empty));

    let extra = json!({
        "adminPass": "s3cret-Pass",
        "OS-DCF:diskConfig": "AUTO",
        "accessIPv4": "192.168.0.3",
        "accessIPv6": "0000:0000:0000:0000:0000:BABE:220.12.22.2",
        "security_groups": [{"name": "web"}],
    });
    let created = alice.boot("vm", &flavor, &image, extra).await;
    assert_eq!(created.status, 202, "{:?}", created.body);
    let body = &created.body["server"];
    assert_eq!(body["adminPass"], "s3cret-Pass");
    assert_eq!(body["OS-DCF:diskConfig"], "AUTO");
    assert_eq!(body["security_groups"], json!([{"name": "web"}]));
    let id = body["id"].as_str().expect("id").to_owned();
    let shown = wait_status(&alice, &id, "ACTIVE").await;
    assert_eq!(shown["OS-DCF:diskConfig"], "AUTO", "{shown}");
    assert_eq!(shown["accessIPv4"], "192.168.0.3");
    assert_eq!(shown["accessIPv6"], "::babe:dc0c:1602");
    assert_eq!(shown["security_groups"], json!([{"name": "web"}]), "the groups kept: {shown}");
    // addSecurityGroup / removeSecurityGroup change the list; with none
    // left the key goes (Nova: ports without groups); removing one the
    // server lacks is Nova's 404.
    let action = format!("/servers/{id}/action");
    assert_eq!(alice.post(&action, &json!({"addSecurityGroup": {"name": "db"}})).await.status, 202);
    let shown = alice.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(shown["security_groups"], json!([{"name": "web"}, {"name": "db"}]));
    assert_eq!(alice.post(&action, &json!({"addSecurityGroup": {}})).await.status, 400);
    for group in ["web", "db"] {
        assert_eq!(alice.post(&action, &json!({"removeSecurityGroup": {"name": group}})).await.status, 202);
    }
    let shown = alice.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert!(shown.get("security_groups").is_none(), "none left: {shown}");
    let missing = alice.post(&action, &json!({"removeSecurityGroup": {"name": "web"}})).await;
    assert_eq!(missing.status, 404, "{:?}", missing.body);
    assert_eq!(
        missing.body["itemNotFound"]["message"],
        format!("Security group web not associated with the instance {id}")
    );

    // Defaults: MANUAL, unless the image says auto_disk_config; a made-up
    // password; the default group echoed.
    let plain = alice.boot("plain", &flavor, &image, json!({})).await;
    assert_eq!(plain.body["server"]["OS-DCF:diskConfig"], "MANUAL");
    assert_eq!(plain.body["server"]["adminPass"].as_str().map(str::len), Some(12));
    assert_eq!(plain.body["server"]["security_groups"], json!([{"name": "default"}]));
    let from_image = alice.boot("from-image", &flavor, &auto_image, json!({})).await;
    assert_eq!(from_image.body["server"]["OS-DCF:diskConfig"], "AUTO", "{:?}", from_image.body);
    let from_image_id = from_image.body["server"]["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_status(&alice, &from_image_id, "ACTIVE").await["OS-DCF:diskConfig"], "AUTO");

    // PUT changes the disk config and the addresses, checked the same way.
    let path = format!("/servers/{id}");
    for bad in [json!({"accessIPv4": "300.1.1.1"}), json!({"accessIPv6": "nope:"})] {
        assert_eq!(alice.put(&path, &json!({"server": bad})).await.status, 400, "{bad}");
    }
    let update = json!({"server": {"OS-DCF:diskConfig": "MANUAL", "accessIPv4": "10.0.0.9", "accessIPv6": "2001:DB8:0:0:0:0:0:1"}});
    let updated = alice.put(&path, &update).await;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
    assert_eq!(updated.body["server"]["OS-DCF:diskConfig"], "MANUAL");
    let shown = alice.get(&path).await.body["server"].clone();
    assert_eq!(shown["OS-DCF:diskConfig"], "MANUAL", "{shown}");
    assert_eq!(shown["accessIPv4"], "10.0.0.9");
    assert_eq!(shown["accessIPv6"], "2001:db8::1");
    assert_eq!(shown["name"], "vm", "the name is kept");

    // An admin's own server, then `tenant_id` without `all_tenants`:
    // Nova lists the caller's own project (lp:#1185290).
    let own = admin.boot_id("admin-vm", &flavor, &image).await;
    wait_status(&admin, &own, "ACTIVE").await;
    for query in ["tenant_id=proj", "project_id=proj", "tenant_id=proj&all_tenants=0"] {
        for list in ["/servers", "/servers/detail"] {
            let listed = admin.get(&format!("{list}?{query}")).await;
            assert_eq!(listed.status, 200, "{query}");
            let ids: Vec<&str> =
                listed.body["servers"].as_array().expect("servers").iter().filter_map(|s| s["id"].as_str()).collect();
            assert_eq!(ids, [own.as_str()], "{list}?{query}");
        }
    }
    let theirs = admin.get("/servers/detail?all_tenants=1&tenant_id=proj").await.body["servers"].clone();
    assert_eq!(theirs.as_array().map(Vec::len), Some(3), "{theirs}");
    assert!(theirs.as_array().expect("list").iter().all(|s| s["tenant_id"] == "proj"));
    cloud.check_invariants().await;
}

/// Wait until the server has no task and is out of `from`; its body.
async fn wait_left(nova: &Nova, id: &str, from: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["status"] != from && server["OS-EXT-STS:task_state"].is_null() {
            return server;
        }
        assert!(Instant::now() < deadline, "server {id} never left {from}: {server}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A server stopped before a resize is still SHUTOFF (power state 4) after
/// the confirm and after a revert, as Nova keeps it; a running one comes
/// back ACTIVE. The resize's `OS-DCF:diskConfig` is kept (absent: MANUAL,
/// as Nova's `auto_disk_config or False`).
#[tokio::test]
async fn a_stopped_server_stays_stopped_through_a_resize() {
    let mut cloud = Cloud::start("gaps-resize", &[]).await;
    cloud.add_agent(Hosts::new("r", 3, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let big = nova.flavor("big", 2, 1024, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(action(&nova, &id, json!({"os-stop": null})).await, 202);
    wait_status(&nova, &id, "SHUTOFF").await;

    // Stopped, resized, confirmed: SHUTOFF.
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": big, "OS-DCF:diskConfig": "AUTO"}})).await, 202);
    let verify = wait_status(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(verify["OS-EXT-STS:power_state"], 4, "{verify}");
    assert_eq!(verify["OS-DCF:diskConfig"], "AUTO");
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    let confirmed = wait_left(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(confirmed["status"], "SHUTOFF", "{confirmed}");
    assert_eq!(confirmed["OS-EXT-STS:vm_state"], "stopped");
    assert_eq!(confirmed["OS-EXT-STS:power_state"], 4);
    assert_eq!(confirmed["flavor"]["vcpus"], 2);

    // Stopped, resized, reverted: SHUTOFF, and a resize without a disk
    // config makes it MANUAL.
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": small}})).await, 202);
    assert_eq!(wait_status(&nova, &id, "VERIFY_RESIZE").await["OS-DCF:diskConfig"], "MANUAL");
    assert_eq!(action(&nova, &id, json!({"revertResize": null})).await, 202);
    let reverted = wait_left(&nova, &id, "REVERT_RESIZE").await;
    assert_eq!(reverted["status"], "SHUTOFF", "{reverted}");
    assert_eq!(reverted["OS-EXT-STS:power_state"], 4);

    // Started again (the revert gave it back `big`), a resize and
    // confirm ends ACTIVE.
    assert_eq!(reverted["flavor"]["vcpus"], 2);
    assert_eq!(action(&nova, &id, json!({"os-start": null})).await, 202);
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": big}})).await, 400, "same flavor");
    let answer = nova.post(&format!("/servers/{id}/action"), &json!({"resize": {"flavorRef": small}})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    wait_status(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    let running = wait_left(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(running["status"], "ACTIVE", "{running}");
    assert_eq!(running["OS-EXT-STS:power_state"], 1);
    cloud.check_invariants().await;
}
