//! End-of-lease policies (issue 21, item 2) end to end on the test clock:
//! `on_end: recycle` with a grace that ends in a delete, `recycle` without
//! grace (the host rejoins the pool when its last server is deleted; the
//! server-wide `--lease-on-end` default), `release` (the busy host goes to
//! general scheduling and a free general host refills the pool), and bad
//! `on_end` / `grace` values (400 in Blazar's format, nothing written).
//! `delete` (Blazar's behaviour) is `leases::a_lease_starts_routes_boots_and_ends`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::leases::{advance, assert_blazar_error, wait_lease};
use super::support::{wait_gone, wait_status, Cloud, Hosts, Nova};
use crate::support::{Client, TestServer};

/// 2040-01-01 00:00 UTC.
const Y2040: i64 = 2_208_988_800;

fn rsv(server: &TestServer) -> Client {
    let mut client = server.client();
    client.token = "admin".to_owned();
    client
}

/// Move the test clock so that the server's "now" is `at`.
async fn clock_to(server: &TestServer, at: i64) {
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let offset: i64 = std::fs::read_to_string(server.dir.join("test-clock-offset"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    advance(server, at - wall - offset).await;
}

async fn enrol(client: &Client, name: &str) -> String {
    let reply = client.post("/reservation/v1/os-hosts", &json!({"name": name})).await;
    assert_eq!(reply.status, 201, "enrol {name}: {:?}", reply.body);
    reply.body["host"]["id"].as_str().unwrap().to_owned()
}

fn host_lease(name: &str, start: &str, end: &str, count: i64, extra: Value) -> Value {
    let mut body = json!({"name": name, "start_date": start, "end_date": end, "events": [], "reservations": [
        {"resource_type": "physical:host", "min": count, "max": count,
         "hypervisor_properties": "", "resource_properties": ""}]});
    body.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    body
}

/// `os-hosts`: hypervisor host name → (id, pool_state).
async fn pool(client: &Client) -> Vec<(String, String, String)> {
    let reply = client.get("/reservation/v1/os-hosts").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let mut out: Vec<(String, String, String)> = reply.body["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["hypervisor_hostname"].as_str().unwrap().to_owned(),
                h["id"].as_str().unwrap().to_owned(),
                h["pool_state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn wait_pool_state(client: &Client, host: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hosts = pool(client).await;
        if hosts.iter().any(|(name, _, s)| name == host && s == state) {
            return;
        }
        assert!(Instant::now() < deadline, "host {host} never {state}: {hosts:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Boot a server into a reservation; returns its id and host.
async fn boot_in(nova: &Nova, name: &str, flavor: &str, image: &str, rid: &str) -> (String, String) {
    let reply = nova.boot(name, flavor, image, json!({"os:scheduler_hints": {"reservation": rid}})).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let id = reply.body["server"]["id"].as_str().unwrap().to_owned();
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], json!("ACTIVE"), "{server}");
    (id, server["OS-EXT-SRV-ATTR:host"].as_str().unwrap().to_owned())
}

async fn server_status(nova: &Nova, id: &str) -> Value {
    nova.get(&format!("/servers/{id}")).await.body["server"]["status"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recycle_with_a_grace_keeps_the_servers_then_deletes_them() {
    let mut cloud = Cloud::start("rsv-recycle-grace", &[]).await;
    cloud.add_agent(Hosts::new("r", 2, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server);
    let nova = cloud.nova("admin");
    for host in ["r0", "r1"] {
        enrol(&admin, host).await;
    }
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;

    let body = host_lease("rec", "2040-01-01 01:00", "2040-01-01 02:00", 1, json!({"on_end": "recycle", "grace": 600}));
    let reply = admin.post("/reservation/v1/leases", &body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!((&reply.body["lease"]["on_end"], &reply.body["lease"]["grace"]), (&json!("recycle"), &json!(600)));
    let id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let rid = reply.body["lease"]["reservations"][0]["id"].as_str().unwrap().to_owned();

    // 01:30: the lease is active; a server runs on its host.
    clock_to(&cloud.server, Y2040 + 5400).await;
    wait_lease(&admin, &id, "ACTIVE").await;
    assert!(pool(&admin).await.iter().any(|(_, _, s)| s == "reserved"), "{:?}", pool(&admin).await);
    let (server, held) = boot_in(&nova, "kept", &flavor, &image, &rid).await;
    let other = if held == "r0" { "r1" } else { "r0" };

    // 02:01: the lease has ended, the server runs on, its host recycles.
    clock_to(&cloud.server, Y2040 + 2 * 3600 + 60).await;
    let ended = wait_lease(&admin, &id, "TERMINATED").await;
    assert_eq!(server_status(&nova, &server).await, json!("ACTIVE"));
    let hosts = pool(&admin).await;
    let held_id = hosts.iter().find(|(name, ..)| *name == held).unwrap().1.clone();
    assert!(hosts.contains(&(held.clone(), held_id.clone(), "recycling".into())), "{hosts:?}");
    assert!(hosts.iter().any(|(name, _, s)| name == other && s == "free"), "{hosts:?}");
    let reservation = &ended["reservations"][0];
    assert_eq!(reservation["recycling_hosts"], json!([held_id]), "{ended}");
    assert_eq!(reservation["recycle_until"], json!("2040-01-01T02:10:00.000000"), "{ended}");
    assert_eq!(cloud.server.metric("berth_lease_pool_hosts_recycling").await, 1);
    // No other lease can take the recycling host; the free one can be had.
    let both = host_lease("both", "2040-01-01 02:02", "2040-01-01 03:00", 2, json!({}));
    assert_blazar_error(&admin.post("/reservation/v1/leases", &both).await, 409, "Not enough hosts available");
    let one = admin
        .post("/reservation/v1/leases", &host_lease("one", "2040-01-01 02:02", "2040-01-01 03:00", 1, json!({})))
        .await;
    assert_eq!(one.status, 201, "{:?}", one.body);
    let allocations = admin.get("/reservation/v1/os-hosts/allocations").await.body;
    let one_id = one.body["lease"]["id"].clone();
    let taken: Vec<&Value> = allocations["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["reservations"].as_array().unwrap().iter().any(|r| r["lease_id"] == one_id))
        .collect();
    assert_eq!(taken.len(), 1, "{allocations}");
    assert_ne!(taken[0]["resource_id"], json!(held_id), "the recycling host was not given: {allocations}");

    // 02:11: the grace is over: the server is deleted, the host rejoins.
    clock_to(&cloud.server, Y2040 + 2 * 3600 + 660).await;
    wait_gone(&nova, &server).await;
    wait_pool_state(&admin, &held, "free").await;
    let ended = admin.get(&format!("/reservation/v1/leases/{id}")).await.body["lease"].clone();
    assert_eq!(ended["reservations"][0]["recycling_hosts"], json!([]), "{ended}");
    assert_eq!(cloud.server.metric("berth_lease_pool_hosts_recycling").await, 0);
    let later = host_lease("later", "2040-01-01 03:00", "2040-01-01 04:00", 2, json!({}));
    assert_eq!(admin.post("/reservation/v1/leases", &later).await.status, 201, "both hosts are back");
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recycle_without_grace_rejoins_when_the_last_server_is_deleted() {
    // The server-wide default: bodies without `on_end` recycle.
    let mut cloud = Cloud::start("rsv-recycle", &["--lease-on-end", "recycle"]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server);
    let nova = cloud.nova("admin");
    enrol(&admin, "r0").await;
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;

    let reply = admin
        .post("/reservation/v1/leases", &host_lease("rec", "2040-01-01 01:00", "2040-01-01 02:00", 1, json!({})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!((&reply.body["lease"]["on_end"], &reply.body["lease"]["grace"]), (&json!("recycle"), &Value::Null));
    let id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let rid = reply.body["lease"]["reservations"][0]["id"].as_str().unwrap().to_owned();
    clock_to(&cloud.server, Y2040 + 5400).await;
    wait_lease(&admin, &id, "ACTIVE").await;
    let (first, _) = boot_in(&nova, "first", &flavor, &image, &rid).await;
    let (second, _) = boot_in(&nova, "second", &flavor, &image, &rid).await;

    clock_to(&cloud.server, Y2040 + 2 * 3600 + 60).await;
    let ended = wait_lease(&admin, &id, "TERMINATED").await;
    assert_eq!(ended["reservations"][0]["recycle_until"], Value::Null, "{ended}");
    wait_pool_state(&admin, "r0", "recycling").await;
    for server in [&first, &second] {
        assert_eq!(server_status(&nova, server).await, json!("ACTIVE"));
    }
    // Far in the future too: the host is out of the pool until it is empty.
    let far = host_lease("far", "2045-01-01 00:00", "2045-01-02 00:00", 1, json!({"on_end": "delete"}));
    assert_blazar_error(&admin.post("/reservation/v1/leases", &far).await, 409, "Not enough hosts available");

    assert_eq!(nova.delete(&format!("/servers/{first}")).await.status, 204);
    wait_gone(&nova, &first).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pool(&admin).await[0].2, "recycling", "one server is left");
    assert_eq!(nova.delete(&format!("/servers/{second}")).await.status, 204);
    wait_gone(&nova, &second).await;
    wait_pool_state(&admin, "r0", "free").await;
    let reply = admin.post("/reservation/v1/leases", &far).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.body["lease"]["on_end"], json!("delete"));
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_hands_the_busy_host_to_general_scheduling_and_refills_the_pool() {
    let mut cloud = Cloud::start("rsv-release", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    cloud.add_agent(Hosts::new("g", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server);
    let nova = cloud.nova("admin");
    let r0 = enrol(&admin, "r0").await;
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;

    let body = host_lease("rel", "2040-01-01 01:00", "2040-01-01 02:00", 1, json!({"on_end": "release"}));
    let reply = admin.post("/reservation/v1/leases", &body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let rid = reply.body["lease"]["reservations"][0]["id"].as_str().unwrap().to_owned();
    clock_to(&cloud.server, Y2040 + 5400).await;
    wait_lease(&admin, &id, "ACTIVE").await;
    let (server, host) = boot_in(&nova, "kept", &flavor, &image, &rid).await;
    assert_eq!(host, "r0");

    // Up to the end in two steps, so the hosts' heartbeats are current when
    // the end looks for a free general host that is up.
    clock_to(&cloud.server, Y2040 + 2 * 3600 - 5).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    clock_to(&cloud.server, Y2040 + 2 * 3600 + 5).await;
    wait_lease(&admin, &id, "TERMINATED").await;
    assert_eq!(server_status(&nova, &server).await, json!("ACTIVE"));
    let hosts = pool(&admin).await;
    assert_eq!(hosts.len(), 1, "the pool keeps its size: {hosts:?}");
    assert_eq!(hosts[0].0, "g0", "g0 refilled the pool: {hosts:?}");
    assert_ne!(hosts[0].1, r0);
    assert_eq!(hosts[0].2, "free");
    assert_eq!(cloud.server.metric("berth_lease_pool_hosts_released_total").await, 1);
    assert_eq!(cloud.server.metric("berth_lease_pool_refills_total").await, 1);

    // r0 now takes ordinary boots (g0, in the pool, takes none).
    for i in 0..2 {
        let sid = nova.boot_id(&format!("general{i}"), &flavor, &image).await;
        let settled = nova.wait_settled(&sid).await;
        assert_eq!(settled["status"], json!("ACTIVE"), "{settled}");
        assert_eq!(settled["OS-EXT-SRV-ATTR:host"], json!("r0"), "{settled}");
    }
    // And the refilled pool takes leases.
    let next = host_lease("next", "2040-01-01 03:00", "2040-01-01 04:00", 1, json!({}));
    assert_eq!(admin.post("/reservation/v1/leases", &next).await.status, 201);

    // The kept server is an ordinary one now: it migrates to a general
    // host (its ended reservation's hint would have the pool rule refuse).
    cloud.add_agent(Hosts::new("h", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let moved = nova.at("2.56").post(&format!("/servers/{server}/action"), &json!({"migrate": {"host": "h0"}})).await;
    assert_eq!(moved.status, 202, "{:?}", moved.body);
    let verify = wait_status(&nova, &server, "VERIFY_RESIZE").await;
    assert_eq!(verify["OS-EXT-SRV-ATTR:host"], json!("h0"), "{verify}");
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_end_policies_are_refused_with_nothing_written() {
    let mut cloud = Cloud::start("rsv-end-bad", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4"])).await;
    let admin = rsv(&cloud.server);
    enrol(&admin, "r0").await;
    let window = ("2050-01-01 10:00", "2050-01-01 11:00");
    let cases = [
        (json!({"on_end": "explode"}), "Malformed parameter on_end"),
        (json!({"on_end": 5}), "Malformed parameter on_end"),
        (json!({"on_end": "recycle", "grace": "soon"}), "Malformed parameter grace"),
        (json!({"on_end": "recycle", "grace": 1.5}), "Malformed parameter grace"),
        (json!({"on_end": "recycle", "grace": true}), "Malformed parameter grace"),
        (json!({"on_end": "recycle", "grace": -1}), "Malformed parameter grace"),
        (json!({"on_end": "delete", "grace": 60}), "grace is only allowed with on_end 'recycle'"),
        (json!({"on_end": "release", "grace": 60}), "grace is only allowed with on_end 'recycle'"),
        (json!({"grace": 60}), "grace is only allowed with on_end 'recycle'"),
    ];
    for (extra, text) in cases {
        let reply =
            admin.post("/reservation/v1/leases", &host_lease("bad", window.0, window.1, 1, extra.clone())).await;
        assert_blazar_error(&reply, 400, text);
    }
    let slots = json!({"name": "slots", "start_date": window.0, "end_date": window.1, "on_end": "recycle",
        "reservations": [{"resource_type": "virtual:instance", "amount": 1, "vcpus": 1, "memory_mb": 128,
                          "disk_gb": 1, "affinity": null, "resource_properties": ""}]});
    assert_blazar_error(
        &admin.post("/reservation/v1/leases", &slots).await,
        400,
        "apply to physical:host reservations only",
    );
    let listed = admin.get("/reservation/v1/leases").await.body["leases"].clone();
    assert_eq!(listed, json!([]), "nothing written");

    // A lease that has not ended takes a new policy; bad ones change nothing.
    let reply = admin.post("/reservation/v1/leases", &host_lease("ok", window.0, window.1, 1, json!({}))).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!((&reply.body["lease"]["on_end"], &reply.body["lease"]["grace"]), (&json!("delete"), &Value::Null));
    let path = format!("/reservation/v1/leases/{}", reply.body["lease"]["id"].as_str().unwrap());
    assert_blazar_error(&admin.put(&path, &json!({"on_end": "nope"})).await, 400, "Malformed parameter on_end");
    assert_blazar_error(&admin.put(&path, &json!({"grace": 30})).await, 400, "grace is only allowed");
    assert_eq!(admin.get(&path).await.body["lease"]["on_end"], json!("delete"));
    let reply = admin.put(&path, &json!({"on_end": "recycle", "grace": "120"})).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!((&reply.body["lease"]["on_end"], &reply.body["lease"]["grace"]), (&json!("recycle"), &json!(120)));
    let reply = admin.put(&path, &json!({"grace": 30})).await;
    assert_eq!(reply.body["lease"]["grace"], json!(30), "{:?}", reply.body);
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_recycling_lease_deletes_its_servers_first() {
    let mut cloud = Cloud::start("rsv-recycle-delete", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server);
    let nova = cloud.nova("admin");
    enrol(&admin, "r0").await;
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    let body = host_lease("rec", "2040-01-01 01:00", "2040-01-01 02:00", 1, json!({"on_end": "recycle"}));
    let reply = admin.post("/reservation/v1/leases", &body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let rid = reply.body["lease"]["reservations"][0]["id"].as_str().unwrap().to_owned();
    clock_to(&cloud.server, Y2040 + 5400).await;
    wait_lease(&admin, &id, "ACTIVE").await;
    let (server, _) = boot_in(&nova, "kept", &flavor, &image, &rid).await;
    clock_to(&cloud.server, Y2040 + 2 * 3600 + 60).await;
    wait_lease(&admin, &id, "TERMINATED").await;
    wait_pool_state(&admin, "r0", "recycling").await;
    assert_eq!(server_status(&nova, &server).await, json!("ACTIVE"));

    // No host rejoins the pool carrying a server of a deleted lease.
    let reply = admin.call("DELETE", &format!("/reservation/v1/leases/{id}"), None).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    wait_gone(&nova, &server).await;
    assert_eq!(pool(&admin).await[0].2, "free");
    cloud.check_invariants().await;
}
