//! Evacuate with Nova's allocation model: refused while the source's
//! compute service is up; once it is down the instance consumer holds
//! source + destination in one write (never nothing), the destination's
//! agent rebuilds the server, and when the source's agent comes back it
//! destroys its copy and loses its share (migration `completed`). Hard
//! anti-affinity holds when members are evacuated at the same time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{wait_status, Cloud, Hosts, Nova};

const FOUR: &[&str] = &["--vcpus", "4", "--cpu-ratio", "1.0", "--memory-mb", "8192", "--disk-gb", "100"];

async fn setup(nova: &Nova) -> String {
    let limits = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    nova.image("img", json!({})).await
}

/// The migrations of a server (admin, 2.80), newest first.
async fn migrations_of(nova: &Nova, id: &str) -> Vec<Value> {
    let answer = nova.at("2.80").get(&format!("/os-migrations?instance_uuid={id}")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["migrations"].as_array().cloned().unwrap_or_default()
}

/// Wait until the server's newest migration has `status`.
pub(super) async fn wait_migration(nova: &Nova, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let moves = migrations_of(nova, id).await;
        if moves.first().is_some_and(|m| m["status"] == status) {
            return moves[0].clone();
        }
        assert!(Instant::now() < deadline, "migration of {id} never reached {status}: {moves:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Provider names (roots) the consumer holds allocations on, sorted.
async fn hosts_allocated(cloud: &Cloud, consumer: &str) -> Vec<String> {
    let placement = cloud.server.client();
    let body = placement.get(&format!("/allocations/{consumer}")).await.body;
    let mut out = Vec::new();
    for provider in body["allocations"].as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
        let p = placement.get(&format!("/resource_providers/{provider}")).await.body;
        out.push(p["name"].as_str().unwrap_or("").to_owned());
    }
    out.sort();
    out
}

/// The `nova-compute` services as 2.53 shows them: host → (id, state).
async fn services(nova: &Nova) -> Vec<Value> {
    let answer = nova.at("2.53").get("/os-services?binary=nova-compute").await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["services"].as_array().cloned().unwrap_or_default()
}

/// Wait until every host in `down` is reported down and every host in
/// `up` up.
pub(super) async fn wait_states(nova: &Nova, down: &[&str], up: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = services(nova).await;
        let state = |h: &str| all.iter().find(|s| s["host"] == h).map(|s| s["state"].clone()).unwrap_or(Value::Null);
        if down.iter().all(|h| state(h) == "down") && up.iter().all(|h| state(h) == "up") {
            return;
        }
        assert!(Instant::now() < deadline, "services never reached down={down:?} up={up:?}: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Force a host's compute service down (2.53).
async fn force_down(nova: &Nova, host: &str) {
    let all = services(nova).await;
    let id = all.iter().find(|s| s["host"] == host).and_then(|s| s["id"].as_str()).expect("service id").to_owned();
    let answer = nova.at("2.53").put(&format!("/os-services/{id}"), &json!({"forced_down": true})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

/// Reads the consumer's allocations every 10 ms until stopped; counts the
/// reads and the reads that found no allocation at all.
struct Poller {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    empty: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Poller {
    fn start(base: &str, consumer: &str) -> Self {
        let (stop, reads, empty) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::default());
        let url = format!("{base}/allocations/{consumer}");
        let task = {
            let (stop, reads, empty): (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
                (stop.clone(), Arc::clone(&reads), Arc::clone(&empty));
            tokio::spawn(async move {
                let http = crate::support::http_client();
                while !stop.load(Ordering::SeqCst) {
                    let resp = http
                        .get(&url)
                        .header("x-auth-token", "admin")
                        .header("openstack-api-version", "placement 1.39")
                        .send()
                        .await
                        .expect("poll");
                    assert_eq!(resp.status().as_u16(), 200);
                    let body: Value = resp.json().await.expect("json");
                    reads.fetch_add(1, Ordering::SeqCst);
                    if body["allocations"].as_object().is_none_or(|m| m.is_empty()) {
                        empty.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Poller { stop, reads, empty, task }
    }

    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("poller");
        (self.reads.load(Ordering::SeqCst), self.empty.load(Ordering::SeqCst))
    }
}

/// The source's agent is killed (`kill -9`) and its service goes down when
/// the clock passes `service_down_time`; the server is evacuated (2.29:
/// it stays ACTIVE) and rebuilt on another host while the instance
/// consumer holds both hosts; the source's agent comes back, destroys its
/// copy and loses its share: one ACTIVE server, allocated on the
/// destination only, migration `completed`. A poller reading the
/// consumer's allocations every 10 ms never sees none.
#[tokio::test]
async fn evacuate_from_a_killed_host_then_the_source_comes_back() {
    let mut cloud = Cloud::start("evacuate-killed", &[]).await;
    cloud.add_agent(Hosts::new("src", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("small", 2, 1024, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "src0");
    cloud.add_agent(Hosts::new("dst", 2, FOUR)).await;
    let poller = Poller::start(&cloud.server.base, &id);

    cloud.kill_agent(0);
    let (status, _) = advance(&cloud, 120).await;
    assert_eq!(status, 200);
    wait_states(&nova, &["src0"], &["dst0", "dst1"]).await;

    let answer = nova.at("2.29").post(&format!("/servers/{id}/action"), &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.body.is_null(), "no body from 2.14: {:?}", answer.body);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let dest = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    assert!(dest.starts_with("dst"), "rebuilt on a destination: {dest}");
    let evacuation = wait_migration(&nova, &id, "done").await;
    assert_eq!(evacuation["migration_type"], "evacuation");
    assert_eq!(evacuation["source_compute"], "src0");
    assert_eq!(evacuation["dest_compute"], dest.as_str());
    // The source is still down: it keeps its share until it cleans up.
    assert_eq!(hosts_allocated(&cloud, &id).await, vec![dest.clone(), "src0".to_owned()]);
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    assert_eq!(actions["instanceActions"][0]["action"], "evacuate", "{actions}");

    cloud.restart_agent(0).await;
    wait_migration(&nova, &id, "completed").await;
    assert_eq!(hosts_allocated(&cloud, &id).await, vec![dest.clone()]);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], dest.as_str(), "exactly one copy, on the destination");
    let listed = nova.all_servers().await;
    assert_eq!(listed.len(), 1);

    let (reads, empty) = poller.finish().await;
    assert!(reads >= 10, "the poller read {reads} times");
    assert_eq!(empty, 0, "{empty} of {reads} reads found no allocation");
    cloud.check_invariants().await;
}

pub(super) async fn advance(cloud: &Cloud, seconds: i64) -> (u16, Value) {
    let reply = cloud.server.client().post("/admin/v1/test/clock", &json!({"advance": seconds})).await;
    (reply.status, reply.body)
}

/// Evacuate while the source's service is up: Nova's 400 "Compute service
/// of H is still in use." and nothing changes. Bad requests are refused
/// the same way (unknown host 404, the same host 400, not admin 403,
/// 2.29 `force` without a host 400, schema 400).
#[tokio::test]
async fn evacuate_while_the_source_is_up_is_refused() {
    let mut cloud = Cloud::start("evacuate-up", &[]).await;
    cloud.add_agent(Hosts::new("e", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let source = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let before = hosts_allocated(&cloud, &id).await;
    let path = format!("/servers/{id}/action");

    let answer = nova.post(&path, &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 400, "{:?}", answer.body);
    assert_eq!(answer.body["badRequest"]["message"], format!("Compute service of {source} is still in use."));
    for (version, body, status) in [
        ("2.96", json!({"evacuate": {"host": "nohost"}}), 404),
        ("2.96", json!({"evacuate": {"host": source}}), 400),
        ("2.96", json!({"evacuate": {"onSharedStorage": false}}), 400),
        ("2.13", json!({"evacuate": {}}), 400),
        ("2.13", json!({"evacuate": {"onSharedStorage": true, "adminPass": "x"}}), 400),
        ("2.29", json!({"evacuate": {"force": true}}), 400),
        ("2.68", json!({"evacuate": {"force": true}}), 400),
        ("2.96", json!({"evacuate": {"host": 7}}), 400),
    ] {
        let answer = nova.at(version).post(&path, &body).await;
        assert_eq!(answer.status, status, "{version} {body}: {:?}", answer.body);
    }
    let user = cloud.nova("bob:admin");
    assert_eq!(user.post(&path, &json!({"evacuate": {}})).await.status, 403);

    assert!(migrations_of(&nova, &id).await.is_empty(), "no migration recorded");
    assert_eq!(hosts_allocated(&cloud, &id).await, before);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], source.as_str());
    cloud.check_invariants().await;
}

/// Two members of a hard anti-affinity group lose their hosts (agent
/// killed, services forced down with 2.53) and are evacuated at the same
/// time, with room for both on either destination: they land on two
/// different hosts (the claim write re-checks the group, counting an
/// evacuating member on its destination). 2.95+: they end SHUTOFF. The
/// sources come back and clean up.
#[tokio::test]
async fn anti_affinity_members_evacuated_together_land_apart() {
    let mut cloud = Cloud::start("evacuate-anti", &[]).await;
    cloud.add_agent(Hosts::new("old", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let group = nova
        .at("2.64")
        .post("/os-server-groups", &json!({"server_group": {"name": "g", "policy": "anti-affinity"}}))
        .await;
    assert_eq!(group.status, 200, "{:?}", group.body);
    let group = group.body["server_group"]["id"].as_str().expect("group id").to_owned();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let answer = nova.boot(name, &flavor, &image, json!({"os:scheduler_hints": {"group": group}})).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
        ids.push(answer.body["server"]["id"].as_str().expect("id").to_owned());
    }
    for id in &ids {
        wait_status(&nova, id, "ACTIVE").await;
    }
    cloud.add_agent(Hosts::new("new", 3, FOUR)).await;
    cloud.kill_agent(0);
    force_down(&nova, "old0").await;
    force_down(&nova, "old1").await;

    let evacuate = |id: String| {
        let nova = nova.clone();
        async move { nova.post(&format!("/servers/{id}/action"), &json!({"evacuate": {}})).await }
    };
    let (first, second) = tokio::join!(evacuate(ids[0].clone()), evacuate(ids[1].clone()));
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(second.status, 200, "{:?}", second.body);
    let mut hosts = Vec::new();
    for id in &ids {
        let server = wait_status(&nova, id, "SHUTOFF").await;
        hosts.push(server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned());
        wait_migration(&nova, id, "done").await;
    }
    assert_ne!(hosts[0], hosts[1], "anti-affinity kept");
    assert!(hosts.iter().all(|h| h.starts_with("new")), "{hosts:?}");

    cloud.restart_agent(0).await;
    for (id, host) in ids.iter().zip(&hosts) {
        wait_migration(&nova, id, "completed").await;
        assert_eq!(hosts_allocated(&cloud, id).await, vec![host.clone()]);
    }
    cloud.check_invariants().await;
}

/// No host can take the server: the evacuation's migration goes to
/// `error` and the server to ERROR (Nova's conductor), keeping its
/// allocation on the source; evacuating it again once there is room works
/// (an ERROR server may be evacuated).
#[tokio::test]
async fn evacuate_without_room_errors_and_can_be_retried() {
    let mut cloud = Cloud::start("evacuate-noroom", &[]).await;
    cloud.add_agent(Hosts::new("s", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("big", 4, 1024, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    cloud.kill_agent(0);
    force_down(&nova, "s0").await;

    let answer = nova.post(&format!("/servers/{id}/action"), &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let server = wait_status(&nova, &id, "ERROR").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "s0");
    wait_migration(&nova, &id, "error").await;
    assert_eq!(hosts_allocated(&cloud, &id).await, vec!["s0".to_owned()]);

    cloud.add_agent(Hosts::new("t", 1, FOUR)).await;
    let answer = nova.at("2.94").post(&format!("/servers/{id}/action"), &json!({"evacuate": {"host": "t0"}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "t0");
    wait_migration(&nova, &id, "done").await;
    cloud.restart_agent(0).await;
    wait_migration(&nova, &id, "completed").await;
    assert_eq!(hosts_allocated(&cloud, &id).await, vec!["t0".to_owned()]);
    cloud.check_invariants().await;
}

/// A server deleted while its evacuation waits for the source: its
/// allocations (both shares) go with it, and when the source comes back
/// the evacuation is closed (`completed`) with nothing left anywhere.
#[tokio::test]
async fn delete_during_an_evacuation_then_the_source_comes_back() {
    let mut cloud = Cloud::start("evacuate-delete", &[]).await;
    cloud.add_agent(Hosts::new("x", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    cloud.add_agent(Hosts::new("y", 1, FOUR)).await;
    cloud.kill_agent(0);
    force_down(&nova, "x0").await;
    let answer = nova.post(&format!("/servers/{id}/action"), &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    wait_status(&nova, &id, "SHUTOFF").await;
    wait_migration(&nova, &id, "done").await;
    assert_eq!(hosts_allocated(&cloud, &id).await, vec!["x0".to_owned(), "y0".to_owned()]);

    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.status != 404 {
        assert!(Instant::now() < deadline, "server never went away");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(hosts_allocated(&cloud, &id).await.is_empty(), "both shares went with the server");
    cloud.restart_agent(0).await;
    wait_migration(&nova, &id, "completed").await;
    assert!(hosts_allocated(&cloud, &id).await.is_empty());
    cloud.check_invariants().await;
}

/// Two anti-affinity members evacuated at the same time to the same
/// requested host: whatever the interleaving, exactly one lands there and
/// the other is refused by the group (ERROR, its allocation still only on
/// its source), never both on one host.
#[tokio::test]
async fn anti_affinity_members_evacuated_to_one_host_never_share_it() {
    let mut cloud = Cloud::start("evacuate-anti-host", &[]).await;
    cloud.add_agent(Hosts::new("old", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let group = nova
        .at("2.64")
        .post("/os-server-groups", &json!({"server_group": {"name": "g", "policy": "anti-affinity"}}))
        .await;
    let group = group.body["server_group"]["id"].as_str().expect("group id").to_owned();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let answer = nova.boot(name, &flavor, &image, json!({"os:scheduler_hints": {"group": group}})).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
        ids.push(answer.body["server"]["id"].as_str().expect("id").to_owned());
    }
    let mut sources = Vec::new();
    for id in &ids {
        sources.push(wait_status(&nova, id, "ACTIVE").await["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned());
    }
    cloud.add_agent(Hosts::new("new", 2, FOUR)).await;
    cloud.kill_agent(0);
    force_down(&nova, "old0").await;
    force_down(&nova, "old1").await;

    let evacuate = |id: String| {
        let nova = nova.at("2.29");
        async move { nova.post(&format!("/servers/{id}/action"), &json!({"evacuate": {"host": "new0"}})).await }
    };
    let (first, second) = tokio::join!(evacuate(ids[0].clone()), evacuate(ids[1].clone()));
    assert_eq!((first.status, second.status), (200, 200), "{:?} {:?}", first.body, second.body);
    let mut on_new0 = Vec::new();
    for (id, source) in ids.iter().zip(&sources) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let server = loop {
            let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
            if server["OS-EXT-STS:task_state"].is_null()
                && matches!(server["status"].as_str(), Some("ACTIVE" | "ERROR"))
            {
                break server;
            }
            assert!(Instant::now() < deadline, "evacuation of {id} never settled: {server}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        if server["status"] == "ACTIVE" {
            assert_eq!(server["OS-EXT-SRV-ATTR:host"], "new0");
            on_new0.push(id.clone());
        } else {
            assert_eq!(server["OS-EXT-SRV-ATTR:host"], source.as_str(), "refused: still on its source");
            wait_migration(&nova, id, "error").await;
            assert_eq!(hosts_allocated(&cloud, id).await, vec![source.clone()]);
        }
    }
    assert_eq!(on_new0.len(), 1, "exactly one member on new0");

    cloud.restart_agent(0).await;
    wait_migration(&nova, &on_new0[0], "completed").await;
    assert_eq!(hosts_allocated(&cloud, &on_new0[0]).await, vec!["new0".to_owned()]);
    // The refused one is ERROR on a forced-down host: deleted locally.
    for id in ids.iter().filter(|id| **id != on_new0[0]) {
        assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
        let deadline = Instant::now() + Duration::from_secs(30);
        while nova.get(&format!("/servers/{id}")).await.status != 404 {
            assert!(Instant::now() < deadline, "server never went away");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    cloud.check_invariants().await;
}
