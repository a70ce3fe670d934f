//! Shelve, shelve-offload and unshelve: with `shelved_offload_time` 0
//! (Nova's default) a shelved server is offloaded at once, its allocations
//! released and its host cleared, so it counts for `instances` but not for
//! cores or RAM; unshelve schedules it again and checks cores/RAM quota in
//! the claim write (403, Nova's text, the server stays offloaded).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{wait_status, Cloud, Hosts, Nova};

const FOUR: &[&str] = &["--vcpus", "4", "--cpu-ratio", "1.0", "--memory-mb", "8192", "--disk-gb", "100"];

async fn allocated(cloud: &Cloud, consumer: &str) -> usize {
    let body = cloud.server.client().get(&format!("/allocations/{consumer}")).await.body;
    body["allocations"].as_object().map_or(0, |m| m.len())
}

async fn in_use(nova: &Nova, resource: &str) -> i64 {
    let detail = nova.get("/os-quota-sets/admin/detail").await.body;
    detail["quota_set"][resource]["in_use"].as_i64().expect("in_use")
}

/// The shelve snapshots of server `id` in the image API.
async fn snapshots_of(nova: &Nova, id: &str) -> Vec<Value> {
    let answer = nova.image_get("/images").await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let images = answer.body["images"].as_array().cloned().unwrap_or_default();
    images.into_iter().filter(|i| i["instance_uuid"] == id).collect()
}

/// Wait until the server has no snapshot: an unshelve drops it right
/// after the row goes ACTIVE (one more write), so it is waited for.
async fn wait_no_snapshot(nova: &Nova, id: &str, why: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !snapshots_of(nova, id).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "{why}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

async fn action(nova: &Nova, id: &str, body: Value) -> (u16, Value) {
    let answer = nova.post(&format!("/servers/{id}/action"), &body).await;
    (answer.status, answer.body)
}

/// Shelve goes straight to SHELVED_OFFLOADED (allocations gone, no host,
/// instances still counted, cores not); unshelve puts it on a host again
/// with its allocations (ACTIVE). Wrong states are 409s, bad bodies 400s.
#[tokio::test]
async fn shelve_offloads_at_once_and_unshelve_reschedules() {
    let mut cloud = Cloud::start("shelve-offload", &[]).await;
    cloud.add_agent(Hosts::new("s", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = nova.image("img", json!({})).await;
    let flavor = nova.flavor("small", 2, 1024, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(in_use(&nova, "cores").await, 2);

    assert_eq!(action(&nova, &id, json!({"unshelve": null})).await.0, 409, "not shelved");
    assert_eq!(action(&nova, &id, json!({"shelveOffload": null})).await.0, 409, "not shelved");
    assert_eq!(action(&nova, &id, json!({"shelve": null, "extra": 1})).await.0, 400);
    let (status, body) = action(&nova, &id, json!({"shelve": null})).await;
    assert_eq!(status, 202, "{body:?}");
    let server = wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null(), "host cleared: {server}");
    assert_eq!(allocated(&cloud, &id).await, 0, "allocations released");
    assert_eq!(in_use(&nova, "instances").await, 1);
    assert_eq!(in_use(&nova, "cores").await, 0);
    assert_eq!(in_use(&nova, "ram").await, 0);
    assert_eq!(action(&nova, &id, json!({"shelve": null})).await.0, 409);
    let snapshots = snapshots_of(&nova, &id).await;
    assert_eq!(snapshots.len(), 1, "one shelve snapshot: {snapshots:?}");
    let snapshot = &snapshots[0];
    assert_eq!(snapshot["name"], "vm-shelved");
    assert_eq!(snapshot["image_type"], "snapshot");
    assert_eq!(snapshot["base_image_ref"], image.as_str());
    assert_eq!(snapshot["status"], "active");
    assert_eq!(snapshot["visibility"], "private");
    cloud.check_invariants().await;

    // 2.77: the zone must exist (400) and be given as a string.
    let v277 = nova.at("2.77");
    let path = format!("/servers/{id}/action");
    assert_eq!(v277.post(&path, &json!({"unshelve": {}})).await.status, 400);
    assert_eq!(v277.post(&path, &json!({"unshelve": {"availability_zone": "nowhere"}})).await.status, 400);
    // 2.91: an unknown host is a 400.
    assert_eq!(nova.at("2.91").post(&path, &json!({"unshelve": {"host": "nohost"}})).await.status, 400);
    let user = cloud.nova("bob:admin");
    assert_eq!(user.at("2.91").post(&path, &json!({"unshelve": {"host": "s1"}})).await.status, 403);
    let server = wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null());

    let answer = nova.at("2.91").post(&path, &json!({"unshelve": {"host": "s1", "availability_zone": null}})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "s1");
    assert_eq!(allocated(&cloud, &id).await, 1);
    assert_eq!(in_use(&nova, "cores").await, 2);
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    let names: Vec<&str> =
        actions["instanceActions"].as_array().expect("actions").iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(names, ["unshelve", "shelve", "create"]);
    wait_no_snapshot(&nova, &id, "the snapshot goes with the unshelve").await;
    cloud.check_invariants().await;
}

/// An offloaded server does not count cores, so its project can use them
/// meanwhile; unshelving it then is over quota: 403 with Nova's text, the
/// server stays SHELVED_OFFLOADED without allocations. Once cores are
/// free again the unshelve succeeds.
#[tokio::test]
async fn unshelve_over_quota_is_refused_and_nothing_changes() {
    let mut cloud = Cloud::start("shelve-quota", &[]).await;
    cloud.add_agent(Hosts::new("q", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = nova.image("img", json!({})).await;
    let limits = json!({"quota_set": {"cores": 4, "instances": 10, "ram": -1}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("two", 2, 512, 1).await;
    let first = nova.boot_id("first", &flavor, &image).await;
    wait_status(&nova, &first, "ACTIVE").await;
    assert_eq!(action(&nova, &first, json!({"shelve": {}})).await.0, 202);
    wait_status(&nova, &first, "SHELVED_OFFLOADED").await;
    let second = nova.boot_id("second", &flavor, &image).await;
    let third = nova.boot_id("third", &flavor, &image).await;
    wait_status(&nova, &second, "ACTIVE").await;
    wait_status(&nova, &third, "ACTIVE").await;
    assert_eq!(in_use(&nova, "cores").await, 4);

    let (status, body) = action(&nova, &first, json!({"unshelve": null})).await;
    assert_eq!(status, 403, "{body:?}");
    assert_eq!(body["forbidden"]["message"], "Quota exceeded for resources: ['cores']");
    let server = wait_status(&nova, &first, "SHELVED_OFFLOADED").await;
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null());
    assert_eq!(allocated(&cloud, &first).await, 0);
    assert_eq!(in_use(&nova, "cores").await, 4);
    cloud.check_invariants().await;

    assert_eq!(nova.delete(&format!("/servers/{third}")).await.status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    while in_use(&nova, "cores").await > 2 {
        assert!(Instant::now() < deadline, "delete never released its cores");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(action(&nova, &first, json!({"unshelve": null})).await.0, 202);
    wait_status(&nova, &first, "ACTIVE").await;
    assert_eq!(in_use(&nova, "cores").await, 4);
    cloud.check_invariants().await;
}

/// With `--shelved-offload-time -1` a shelved server keeps its host and
/// allocations (SHELVED); unshelve powers it on there; a zone or host is
/// then a 409; `shelveOffload` (admin) offloads it.
#[tokio::test]
async fn shelved_without_offload_keeps_its_host() {
    let mut cloud = Cloud::start("shelve-keep", &["--shelved-offload-time", "-1"]).await;
    cloud.add_agent(Hosts::new("k", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = nova.image("img", json!({})).await;
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &flavor, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let host = server["OS-EXT-SRV-ATTR:host"].clone();

    assert_eq!(action(&nova, &id, json!({"shelve": null})).await.0, 202);
    let server = wait_status(&nova, &id, "SHELVED").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], host);
    assert_eq!(allocated(&cloud, &id).await, 1, "allocations kept while SHELVED");
    let answer = nova
        .at("2.77")
        .post(&format!("/servers/{id}/action"), &json!({"unshelve": {"availability_zone": "nova"}}))
        .await;
    assert_eq!(answer.status, 409, "{:?}", answer.body);
    assert_eq!(snapshots_of(&nova, &id).await.len(), 1, "a snapshot while SHELVED too");
    assert_eq!(action(&nova, &id, json!({"unshelve": null})).await.0, 202);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], host);
    wait_no_snapshot(&nova, &id, "powered on: the snapshot is gone").await;

    assert_eq!(action(&nova, &id, json!({"shelve": null})).await.0, 202);
    wait_status(&nova, &id, "SHELVED").await;
    let user = cloud.nova("bob:admin");
    assert_eq!(user.post(&format!("/servers/{id}/action"), &json!({"shelveOffload": null})).await.status, 403);
    assert_eq!(action(&nova, &id, json!({"shelveOffload": null})).await.0, 202);
    wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    assert_eq!(allocated(&cloud, &id).await, 0);
    assert_eq!(snapshots_of(&nova, &id).await.len(), 1);

    // Deleting a shelved server deletes its snapshot (Nova's API does).
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    assert_eq!(nova.get(&format!("/servers/{id}")).await.status, 404);
    assert!(snapshots_of(&nova, &id).await.is_empty(), "the snapshot goes with the server");
    cloud.check_invariants().await;
}

/// The control plane is killed (SIGKILL) after an unshelve's claim and
/// before its cell update: the claim survives, the row is `unshelving`
/// with no host. After the restart the sweep puts the server on the host
/// it holds (ACTIVE, exactly that allocation). A second server whose
/// unshelve was interrupted before any claim stays offloaded, with no
/// task and no allocation, and can be unshelved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unshelve_interrupted_by_a_crash_is_finished_or_undone() {
    let mut cloud = Cloud::start("shelve-crash", &["--service-down-time", "600"]).await;
    cloud.add_agent(Hosts::new("u", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = nova.image("img", json!({})).await;
    let flavor = nova.flavor("small", 1, 1024, 1).await;
    let claimed = nova.boot_id("claimed", &flavor, &image).await;
    let unclaimed = nova.boot_id("unclaimed", &flavor, &image).await;
    for id in [&claimed, &unclaimed] {
        wait_status(&nova, id, "ACTIVE").await;
        assert_eq!(action(&nova, id, json!({"shelve": null})).await.0, 202);
        wait_status(&nova, id, "SHELVED_OFFLOADED").await;
    }

    // One held after its claim, one before it (at the scheduler).
    cloud.test_hook("hold", json!({"point": "after-unshelve-claim"})).await;
    let call = {
        let (nova, id) = (cloud.nova("admin"), claimed.clone());
        tokio::spawn(async move { action(&nova, &id, json!({"unshelve": null})).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while allocated(&cloud, &claimed).await == 0 {
        assert!(Instant::now() < deadline, "the held unshelve never claimed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let held = cloud.server.client().get(&format!("/allocations/{claimed}")).await.body["allocations"].clone();
    cloud.test_hook("hold", json!({"point": "before-unshelve-claim"})).await;
    let second = {
        let (nova, id) = (cloud.nova("admin"), unclaimed.clone());
        tokio::spawn(async move { action(&nova, &id, json!({"unshelve": null})).await })
    };
    while nova.get(&format!("/servers/{unclaimed}")).await.body["server"]["OS-EXT-STS:task_state"] != "unshelving" {
        assert!(Instant::now() < deadline, "the second unshelve never started");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The calls in flight die with the process.
    call.abort();
    second.abort();
    cloud.restart().await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    let row = nova.get(&format!("/servers/{claimed}")).await.body["server"].clone();
    assert_eq!(row["OS-EXT-STS:task_state"], "unshelving", "{row}");
    let resources = |allocations: &Value| -> Value {
        allocations.as_object().into_iter().flatten().map(|(rp, a)| (rp.clone(), a["resources"].clone())).collect()
    };
    let held = resources(&held);
    assert_eq!(resources(&placement.get(&format!("/allocations/{claimed}")).await.body["allocations"]), held);

    cloud.test_hook("clock", json!({"advance": 90})).await;
    let server = wait_status(&nova, &claimed, "ACTIVE").await;
    let host = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let root = placement.get(&format!("/resource_providers?name={host}")).await.body["resource_providers"][0]["uuid"]
        .as_str()
        .expect("provider")
        .to_owned();
    let now = resources(&placement.get(&format!("/allocations/{claimed}")).await.body["allocations"]);
    assert_eq!(now, held, "the allocation it held, exactly");
    assert!(held.get(&root).is_some(), "ACTIVE on the host it holds: {host} {held}");
    let offloaded = wait_status(&nova, &unclaimed, "SHELVED_OFFLOADED").await;
    assert!(offloaded["OS-EXT-SRV-ATTR:host"].is_null(), "{offloaded}");
    assert_eq!(allocated(&cloud, &unclaimed).await, 0);
    assert_eq!(action(&nova, &unclaimed, json!({"unshelve": null})).await.0, 202, "it can be unshelved again");
    wait_status(&nova, &unclaimed, "ACTIVE").await;
    assert_eq!(allocated(&cloud, &unclaimed).await, 1);
    cloud.check_invariants().await;
}

/// An unshelve held before its claim for longer than the sweep's grace:
/// the sweep takes it for interrupted and puts the server back offloaded.
/// When the held unshelve then claims, its cell update finds the row
/// taken back and it releases the claim: no allocation is left on a
/// server that runs nowhere, and the server can be unshelved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unshelve_slower_than_the_grace_releases_its_late_claim() {
    let mut cloud = Cloud::start("shelve-late", &["--service-down-time", "600"]).await;
    cloud.add_agent(Hosts::new("l", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = nova.image("img", json!({})).await;
    let flavor = nova.flavor("small", 1, 1024, 1).await;
    let id = nova.boot_id("late", &flavor, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(action(&nova, &id, json!({"shelve": null})).await.0, 202);
    wait_status(&nova, &id, "SHELVED_OFFLOADED").await;

    cloud.test_hook("hold", json!({"point": "before-unshelve-claim"})).await;
    let call = {
        let (nova, id) = (cloud.nova("admin"), id.clone());
        tokio::spawn(async move { action(&nova, &id, json!({"unshelve": null})).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.body["server"]["OS-EXT-STS:task_state"] != "unshelving" {
        assert!(Instant::now() < deadline, "the unshelve never started");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    cloud.test_hook("clock", json!({"advance": 90})).await;
    wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    cloud.test_hook("release", json!({"point": "before-unshelve-claim"})).await;
    assert_eq!(call.await.expect("the held unshelve").0, 202);
    let server = wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null(), "{server}");
    assert_eq!(allocated(&cloud, &id).await, 0, "the late claim was released");
    assert_eq!(action(&nova, &id, json!({"unshelve": null})).await.0, 202, "it can be unshelved again");
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(allocated(&cloud, &id).await, 1);
    cloud.check_invariants().await;
}
