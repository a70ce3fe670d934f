//! Cold moves (resize, migrate) with Nova's allocation model: while a move
//! is under way the migration consumer (consumer type `MIGRATION`) holds
//! the source and the instance consumer the destination; confirm removes
//! the migration consumer, revert gives its allocations back to the
//! instance; both refuse (409) when the migration consumer changed
//! meanwhile; the resize's quota delta is admitted exactly at the edge.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use super::support::{wait_status, Cloud, Hosts, Nova};

pub(super) const FOUR: &[&str] = &["--vcpus", "4", "--cpu-ratio", "1.0", "--memory-mb", "8192", "--disk-gb", "100"];

pub(super) async fn setup(nova: &Nova) -> String {
    let limits = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    nova.image("img", json!({})).await
}

/// The migrations of a server (admin, 2.80), newest first.
pub(super) async fn migrations_of(nova: &Nova, id: &str) -> Vec<Value> {
    let answer = nova.at("2.80").get(&format!("/os-migrations?instance_uuid={id}")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["migrations"].as_array().cloned().unwrap_or_default()
}

/// A consumer's allocations as placement shows them (latest microversion).
pub(super) async fn allocations(cloud: &Cloud, consumer: &str) -> Value {
    cloud.server.client().get(&format!("/allocations/{consumer}")).await.body
}

pub(super) async fn provider_uuid(cloud: &Cloud, name: &str) -> String {
    let reply = cloud.server.client().get(&format!("/resource_providers?name={name}")).await;
    reply.body["resource_providers"][0]["uuid"].as_str().unwrap_or_else(|| panic!("no provider {name}")).to_owned()
}

/// A consumer's allocations without the providers' generations (which
/// other writes move): provider → resources.
pub(super) fn resources(allocations: &Value) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(map) = allocations["allocations"].as_object() {
        for (provider, body) in map {
            out.insert(provider.clone(), body["resources"].clone());
        }
    }
    Value::Object(out)
}

pub(super) fn vcpus_on(allocations: &Value, provider: &str) -> i64 {
    allocations["allocations"][provider]["resources"]["VCPU"].as_i64().unwrap_or(0)
}

pub(super) async fn action(nova: &Nova, id: &str, body: Value) -> u16 {
    let answer = nova.post(&format!("/servers/{id}/action"), &body).await;
    answer.status
}

/// Resize onto another host: VERIFY_RESIZE with the migration consumer on
/// the source (old flavor, MIGRATION) and the instance on the destination
/// (new flavor); confirm leaves only the instance; the migration is
/// `confirmed`. Then an admin `migrate` to a named host and its confirm.
/// Bad requests are refused with Nova's statuses.
#[tokio::test]
async fn resize_to_another_host_then_confirm_and_migrate() {
    let mut cloud = Cloud::start("moves-resize", &[]).await;
    cloud.add_agent(Hosts::new("m", 3, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let big = nova.flavor("big", 2, 1024, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let source = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let before = allocations(&cloud, &id).await;

    // Bad input first: nothing changes.
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": small}})).await, 400);
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": "nope"}})).await, 400);
    assert_eq!(action(&nova, &id, json!({"resize": {}})).await, 400);
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 409);
    assert_eq!(action(&nova, &id, json!({"revertResize": null})).await, 409);
    assert_eq!(
        nova.at("2.56").post(&format!("/servers/{id}/action"), &json!({"migrate": {"host": source}})).await.status,
        400
    );
    assert_eq!(
        nova.at("2.56").post(&format!("/servers/{id}/action"), &json!({"migrate": {"host": "nohost"}})).await.status,
        400
    );
    let user = cloud.nova("bob:admin");
    assert_eq!(
        user.at("2.56").post(&format!("/servers/{id}/action"), &json!({"migrate": {"host": "m1"}})).await.status,
        403
    );
    assert!(migrations_of(&nova, &id).await.is_empty());
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before));

    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": big}})).await, 202);
    let server = wait_status(&nova, &id, "VERIFY_RESIZE").await;
    let dest = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    assert_ne!(dest, source, "resize chose another host");
    assert_eq!(server["flavor"]["vcpus"], 2, "the new flavor shows: {server}");
    let moves = migrations_of(&nova, &id).await;
    assert_eq!(moves.len(), 1);
    let migration = moves[0].clone();
    assert_eq!(migration["status"], "finished");
    assert_eq!(migration["migration_type"], "resize");
    assert_eq!(migration["source_compute"], source.as_str());
    assert_eq!(migration["dest_compute"], dest.as_str());
    let migration_id = migration["uuid"].as_str().expect("uuid").to_owned();
    let (source_rp, dest_rp) = (provider_uuid(&cloud, &source).await, provider_uuid(&cloud, &dest).await);
    let held = allocations(&cloud, &migration_id).await;
    assert_eq!(held["consumer_type"], "MIGRATION", "{held}");
    assert_eq!(resources(&held), resources(&before), "the migration holds exactly the source's old allocation");
    let instance = allocations(&cloud, &id).await;
    assert_eq!(instance["consumer_type"], "INSTANCE");
    assert_eq!((vcpus_on(&instance, &dest_rp), vcpus_on(&instance, &source_rp)), (2, 0));
    // The old-style 2.1 listing has no uuid nor type; 2.59 has both.
    let old = nova.at("2.1").get("/os-migrations").await.body["migrations"][0].clone();
    assert!(old.get("uuid").is_none() && old.get("migration_type").is_none(), "{old}");
    assert_eq!(nova.get(&format!("/servers/{id}/migrations")).await.body, json!({"migrations": []}));
    cloud.check_invariants().await;

    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], dest.as_str());
    assert!(allocations(&cloud, &migration_id).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
    assert_eq!(vcpus_on(&allocations(&cloud, &id).await, &dest_rp), 2);
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "confirmed");
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 409, "nothing left to confirm");

    // Admin migrate to a named host (2.56), then confirm.
    let target = ["m0", "m1", "m2"].into_iter().find(|h| *h != dest).expect("a third host").to_owned();
    let answer = nova.at("2.56").post(&format!("/servers/{id}/action"), &json!({"migrate": {"host": target}})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = wait_status(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], target.as_str());
    let moves = migrations_of(&nova, &id).await;
    assert_eq!(
        (moves[0]["migration_type"].as_str(), moves[0]["status"].as_str()),
        (Some("migration"), Some("finished"))
    );
    assert_eq!(moves[0]["old_instance_type_id"], moves[0]["new_instance_type_id"]);
    cloud.check_invariants().await;
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "confirmed");
    // Paging (2.59): one per page, newest first, with a next link.
    let page = nova.at("2.59").get("/os-migrations?limit=1").await.body;
    assert_eq!(page["migrations"].as_array().map(Vec::len), Some(1));
    assert!(page["migrations_links"][0]["href"].as_str().is_some_and(|h| h.contains("marker=")), "{page}");
    let marker = page["migrations"][0]["uuid"].as_str().expect("uuid");
    let next = nova.at("2.59").get(&format!("/os-migrations?limit=5&marker={marker}")).await.body;
    assert_eq!(next["migrations"][0]["uuid"], migration_id.as_str());
    assert_eq!(nova.at("2.59").get(&format!("/os-migrations?marker={}", Uuid::new_v4())).await.status, 400);
    assert_eq!(nova.at("2.59").get("/os-migrations?bogus=1").await.status, 400);
    cloud.check_invariants().await;
}

/// With `--allow-resize-to-same-host` on a single host: a resize with room
/// only for the new flavor fails cleanly (server ACTIVE, allocation
/// untouched, migration `error`); with room for both, both allocations
/// coexist on the host until confirm.
#[tokio::test]
async fn same_host_resize_needs_room_for_both() {
    let mut cloud = Cloud::start("moves-same", &["--allow-resize-to-same-host"]).await;
    cloud.add_agent(Hosts::new("s", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let two = nova.flavor("two", 2, 512, 1).await;
    let three = nova.flavor("three", 3, 512, 1).await;
    let one = nova.flavor("one", 1, 512, 1).await;
    let id = nova.boot_id("vm", &two, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    let before = allocations(&cloud, &id).await;
    let rp = provider_uuid(&cloud, "s0").await;

    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": three}})).await, 202);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["flavor"]["vcpus"], 2);
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before), "the original allocation is untouched");
    let moves = migrations_of(&nova, &id).await;
    assert_eq!(moves[0]["status"], "error");
    let failed = moves[0]["uuid"].as_str().expect("uuid");
    assert!(allocations(&cloud, failed).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
    let fault = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    assert_eq!(fault["instanceActions"][0]["action"], "resize", "{fault}");
    assert_eq!(fault["instanceActions"][0]["message"], "Error", "{fault}");

    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": one}})).await, 202);
    let server = wait_status(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "s0");
    let migration = migrations_of(&nova, &id).await[0].clone();
    let held = allocations(&cloud, migration["uuid"].as_str().expect("uuid")).await;
    assert_eq!(vcpus_on(&held, &rp), 2, "migration holds the old flavor");
    assert_eq!(vcpus_on(&allocations(&cloud, &id).await, &rp), 1, "instance holds the new flavor");
    let usages = cloud.server.client().get(&format!("/resource_providers/{rp}/usages")).await.body;
    assert_eq!(usages["usages"]["VCPU"], 3);
    cloud.check_invariants().await;
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    wait_status(&nova, &id, "ACTIVE").await;
    let usages = cloud.server.client().get(&format!("/resource_providers/{rp}/usages")).await.body;
    assert_eq!(usages["usages"]["VCPU"], 1);
    cloud.check_invariants().await;
}

/// Revert after the rest of the source filled up: the migration consumer
/// still holds the source, so the revert succeeds and restores exactly the
/// original allocation and flavor.
#[tokio::test]
async fn revert_after_the_source_filled_up_restores_the_allocation() {
    let mut cloud = Cloud::start("moves-revert", &[]).await;
    cloud.add_agent(Hosts::new("r", 2, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let two = nova.flavor("two", 2, 512, 1).await;
    let three = nova.flavor("three", 3, 1024, 1).await;
    let id = nova.boot_id("vm", &two, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let source = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let before = allocations(&cloud, &id).await;
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": three}})).await, 202);
    wait_status(&nova, &id, "VERIFY_RESIZE").await;

    // Fill the rest of the source's VCPU.
    let placement = cloud.server.client();
    let rp = provider_uuid(&cloud, &source).await;
    let (filler, reply) = placement.claim_new(json!({rp.clone(): {"resources": {"VCPU": 2}}})).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    let usages = placement.get(&format!("/resource_providers/{rp}/usages")).await.body;
    assert_eq!(usages["usages"]["VCPU"], 4, "source full");

    assert_eq!(action(&nova, &id, json!({"revertResize": null})).await, 202);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], source.as_str());
    assert_eq!(server["flavor"]["vcpus"], 2);
    let after = allocations(&cloud, &id).await;
    assert_eq!(resources(&after), resources(&before), "exactly the original allocation");
    let migration = migrations_of(&nova, &id).await[0].clone();
    assert_eq!(migration["status"], "reverted");
    assert!(allocations(&cloud, migration["uuid"].as_str().expect("uuid")).await["allocations"]
        .as_object()
        .is_none_or(|a| a.is_empty()));
    assert_eq!(cloud.server.client().call("DELETE", &format!("/allocations/{filler}"), None).await.status, 204);
    cloud.check_invariants().await;
}

/// A step of a cold move that fails on its host (the destination cannot
/// take the guest in) leaves the server in ERROR with the failure as its
/// fault, the migration `error` and the step's action event `Error`, as
/// Nova does; the source stays held (the guest's disk is there) until the
/// delete, which frees both hosts.
#[tokio::test]
async fn a_move_step_that_fails_leaves_the_server_in_error_and_its_delete_frees_both_hosts() {
    let mut cloud = Cloud::start("moves-fail", &[]).await;
    cloud.add_agent(Hosts::new("g", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    let mut bad = FOUR.to_vec();
    bad.extend(["--bad-hosts", "b0"]);
    cloud.add_agent(Hosts::new("b", 1, &bad)).await;

    let answer = nova.at("2.56").post(&format!("/servers/{id}/action"), &json!({"migrate": {"host": "b0"}})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = wait_status(&nova, &id, "ERROR").await;
    assert_eq!(server["OS-EXT-STS:task_state"], Value::Null, "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "b0", "the row names the destination it failed on");
    let fault = &server["fault"];
    assert_eq!(fault["code"], 500, "{server}");
    assert!(fault["message"].as_str().is_some_and(|m| m.contains("fake driver failure on b0")), "{server}");
    let migration = migrations_of(&nova, &id).await[0].clone();
    assert_eq!(migration["status"], "error", "{migration}");
    let events = nova.get(&format!("/servers/{id}/os-instance-actions/{}", migration_request(&nova, &id).await)).await;
    let finish = events.body["instanceAction"]["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["event"] == "compute_finish_resize").cloned())
        .expect("the finish step's event");
    assert_eq!(finish["result"], "Error", "{finish}");
    // Both hosts held: the instance on the destination, the migration on
    // the source.
    let (g0, b0) = (provider_uuid(&cloud, "g0").await, provider_uuid(&cloud, "b0").await);
    let migration_id = migration["uuid"].as_str().expect("uuid").to_owned();
    assert_eq!(vcpus_on(&allocations(&cloud, &id).await, &b0), 1);
    assert_eq!(vcpus_on(&allocations(&cloud, &migration_id).await, &g0), 1);
    cloud.check_invariants().await;
    // Nothing to confirm or revert in ERROR.
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 409);
    assert_eq!(action(&nova, &id, json!({"revertResize": null})).await, 409);

    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    super::support::wait_gone(&nova, &id).await;
    let placement = cloud.server.client();
    for rp in [&g0, &b0] {
        let usages = placement.get(&format!("/resource_providers/{rp}/usages")).await.body;
        assert_eq!(usages["usages"]["VCPU"], 0, "{rp} freed: {usages}");
    }
    assert!(allocations(&cloud, &migration_id).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
    cloud.check_invariants().await;
}

/// The request id of a server's latest move action.
async fn migration_request(nova: &Nova, id: &str) -> String {
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    actions["instanceActions"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["action"] == "migrate"))
        .and_then(|a| a["request_id"].as_str())
        .expect("a migrate action")
        .to_owned()
}

/// Confirm and revert refuse (409) when the migration consumer changed
/// under them, and never overwrite it; a confirm racing a revert: exactly
/// one wins.
#[tokio::test]
async fn confirm_racing_an_allocation_change_fails_visibly() {
    let mut cloud = Cloud::start("moves-race", &[]).await;
    cloud.add_agent(Hosts::new("c", 3, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let one = nova.flavor("one", 1, 512, 1).await;
    let two = nova.flavor("two", 2, 512, 1).await;
    let id = nova.boot_id("vm", &one, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": two}})).await, 202);
    wait_status(&nova, &id, "VERIFY_RESIZE").await;
    let migration = migrations_of(&nova, &id).await[0]["uuid"].as_str().expect("uuid").to_owned();
    let held = allocations(&cloud, &migration).await;
    // Someone rewrites the migration consumer (same amounts): generation 2.
    let body = json!({"allocations": held["allocations"], "project_id": held["project_id"],
                      "user_id": held["user_id"], "consumer_generation": 1, "consumer_type": "MIGRATION"});
    assert_eq!(cloud.server.client().put(&format!("/allocations/{migration}"), &body).await.status, 204);
    let answer = nova.post(&format!("/servers/{id}/action"), &json!({"confirmResize": null})).await;
    assert_eq!(answer.status, 409, "{:?}", answer.body);
    assert!(answer.body["conflictingRequest"]["message"].as_str().is_some_and(|m| m.contains("changed concurrently")));
    assert_eq!(action(&nova, &id, json!({"revertResize": null})).await, 409);
    let still = allocations(&cloud, &migration).await;
    assert_eq!(resources(&still), resources(&held), "never overwritten");
    assert_eq!(still["consumer_generation"], 2);
    let server = wait_status(&nova, &id, "VERIFY_RESIZE").await;
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "finished");
    assert_eq!(server["flavor"]["vcpus"], 2);
    // Deleting the server forgets both consumers.
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.status != 404 {
        assert!(Instant::now() < deadline, "delete never finished");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(allocations(&cloud, &migration).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
    cloud.check_invariants().await;

    // Confirm and revert at once: one wins, the other is refused.
    let id = nova.boot_id("vm2", &one, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    let before = allocations(&cloud, &id).await;
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": two}})).await, 202);
    wait_status(&nova, &id, "VERIFY_RESIZE").await;
    let path = format!("/servers/{id}/action");
    let (confirm, revert) = (json!({"confirmResize": null}), json!({"revertResize": null}));
    let (a, b) = tokio::join!(nova.post(&path, &confirm), nova.post(&path, &revert));
    let won: Vec<bool> = [a.status, b.status].iter().map(|s| *s == 202 || *s == 204).collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "exactly one wins: {} {}", a.status, b.status);
    assert!([a.status, b.status].iter().all(|s| [202, 204, 400, 409].contains(s)), "{a:?} {b:?}");
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let status = migrations_of(&nova, &id).await[0]["status"].as_str().unwrap_or("").to_owned();
    if won[0] {
        assert_eq!(status, "confirmed");
        assert_eq!(server["flavor"]["vcpus"], 2);
    } else {
        assert_eq!(status, "reverted");
        assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before));
    }
    cloud.check_invariants().await;
}

/// Resizes up at the cores quota edge, in parallel: exactly what fits is
/// admitted; the rest get 403 with Nova's text and stay ACTIVE with their
/// allocation.
#[tokio::test]
async fn resize_up_at_the_quota_edge_admits_exactly_what_fits() {
    let mut cloud = Cloud::start("moves-quota", &[]).await;
    cloud.add_agent(Hosts::new("q", 4, &["--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "100"])).await;
    let admin = cloud.nova("admin");
    let image = admin.image("img", json!({})).await;
    let one = admin.flavor("one", 1, 256, 1).await;
    let two = admin.flavor("two", 2, 256, 1).await;
    assert_eq!(admin.put("/os-quota-sets/proj", &json!({"quota_set": {"cores": 9}})).await.status, 200);
    let user = cloud.nova("alice:proj");
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(user.boot_id(&format!("q{i}"), &one, &image).await);
    }
    for id in &ids {
        wait_status(&user, id, "ACTIVE").await;
    }
    // 6 cores used of 9: three resizes of +1 fit.
    let mut tasks = Vec::new();
    for id in &ids {
        let (user, id, two) = (user.clone(), id.clone(), two.clone());
        tasks.push(tokio::spawn(async move {
            (id.clone(), user.post(&format!("/servers/{id}/action"), &json!({"resize": {"flavorRef": two}})).await)
        }));
    }
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        let (id, answer) = task.await.expect("join");
        match answer.status {
            202 => admitted.push(id),
            403 => {
                let message = answer.body["forbidden"]["message"].as_str().unwrap_or("");
                assert!(message.starts_with("Quota exceeded for cores: Requested 1, but already used"), "{message}");
                refused.push(id);
            }
            other => panic!("unexpected {other}: {:?}", answer.body),
        }
    }
    assert_eq!((admitted.len(), refused.len()), (3, 3));
    for id in &refused {
        let server = wait_status(&user, id, "ACTIVE").await;
        assert_eq!(server["flavor"]["vcpus"], 1);
        let alloc = allocations(&cloud, id).await;
        let total: i64 = alloc["allocations"]
            .as_object()
            .map(|a| a.values().map(|r| r["resources"]["VCPU"].as_i64().unwrap_or(0)).sum())
            .unwrap_or(0);
        assert_eq!(total, 1, "refused resize keeps its allocation");
        assert!(migrations_of(&admin, id).await.is_empty(), "no migration record for a refused resize");
    }
    for id in &admitted {
        wait_status(&user, id, "VERIFY_RESIZE").await;
    }
    let quota = admin.get("/os-quota-sets/proj/detail").await.body;
    assert_eq!(quota["quota_set"]["cores"]["in_use"], 9, "VERIFY_RESIZE is charged once: {quota}");
    cloud.check_invariants().await;
    for id in &admitted {
        assert_eq!(action(&user, id, json!({"confirmResize": null})).await, 204);
        wait_status(&user, id, "ACTIVE").await;
    }
    cloud.check_invariants().await;
}

/// With `--resize-confirm-window 3`: a resize left in `VERIFY_RESIZE` is
/// confirmed by the sweep once the window has passed (the migration
/// `confirmed`, its consumer gone, a `confirmResize` action in the
/// owner's name); one the user reverts within the window stays reverted.
#[tokio::test]
async fn a_resize_left_unconfirmed_is_confirmed_after_the_window() {
    let mut cloud = Cloud::start("moves-window", &["--resize-confirm-window", "3"]).await;
    cloud.add_agent(Hosts::new("w", 3, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let big = nova.flavor("big", 2, 1024, 1).await;
    let left = nova.boot_id("left", &small, &image).await;
    let reverted = nova.boot_id("reverted", &small, &image).await;
    wait_status(&nova, &left, "ACTIVE").await;
    wait_status(&nova, &reverted, "ACTIVE").await;

    let began = Instant::now();
    assert_eq!(action(&nova, &left, json!({"resize": {"flavorRef": big}})).await, 202);
    assert_eq!(action(&nova, &reverted, json!({"resize": {"flavorRef": big}})).await, 202);
    wait_status(&nova, &left, "VERIFY_RESIZE").await;
    wait_status(&nova, &reverted, "VERIFY_RESIZE").await;
    assert_eq!(action(&nova, &reverted, json!({"revertResize": null})).await, 202);
    let migration = migrations_of(&nova, &left).await[0]["uuid"].as_str().expect("uuid").to_owned();

    let server = wait_status(&nova, &left, "ACTIVE").await;
    assert!(began.elapsed() >= Duration::from_secs(3), "confirmed before the window had passed");
    assert_eq!(server["flavor"]["vcpus"], 2, "the new flavor stays: {server}");
    assert_eq!(migrations_of(&nova, &left).await[0]["status"], "confirmed");
    assert!(allocations(&cloud, &migration).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
    let actions = nova.get(&format!("/servers/{left}/os-instance-actions")).await.body;
    let confirm = actions["instanceActions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["action"] == "confirmResize")
        .unwrap_or_else(|| panic!("no confirmResize action: {actions}"))
        .clone();
    assert_eq!(confirm["user_id"], server["user_id"], "{confirm}");

    let server = wait_status(&nova, &reverted, "ACTIVE").await;
    assert_eq!(server["flavor"]["vcpus"], 1, "the revert stands: {server}");
    assert_eq!(migrations_of(&nova, &reverted).await[0]["status"], "reverted");
    assert!(cloud.server.metric("berth_compute_resizes_auto_confirmed_total").await >= 1);
    cloud.check_invariants().await;
}

/// A confirm and a revert whose control write is held after their cell
/// win: the sweep hands the task to the agent meanwhile, and the agent's
/// report makes the control write itself (its crash recovery). When the
/// API's write then finds the migration consumer gone, that is its own
/// move done, not a conflict: 204/202, the migration ends confirmed or
/// reverted, and the server is never left in VERIFY_RESIZE.
#[tokio::test]
async fn a_confirm_or_revert_overtaken_by_the_agents_report_still_succeeds() {
    let mut cloud = Cloud::start("moves-overtaken", &[]).await;
    cloud.add_agent(Hosts::new("o", 3, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let big = nova.flavor("big", 2, 1024, 1).await;
    for (name, confirm) in [("confirmed", true), ("reverted", false)] {
        let id = nova.boot_id(name, &small, &image).await;
        wait_status(&nova, &id, "ACTIVE").await;
        assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": big}})).await, 202);
        wait_status(&nova, &id, "VERIFY_RESIZE").await;
        let migration = migrations_of(&nova, &id).await[0]["uuid"].as_str().expect("uuid").to_owned();

        cloud.test_hook("hold", json!({"point": "before-finish-move-write"})).await;
        let body = if confirm { json!({"confirmResize": null}) } else { json!({"revertResize": null}) };
        let call = {
            let (nova, id) = (cloud.nova("admin"), id.clone());
            tokio::spawn(async move { action(&nova, &id, body).await })
        };
        // The agent finishes the move while the API is held.
        let deadline = Instant::now() + Duration::from_secs(30);
        while migrations_of(&nova, &id).await[0]["status"] != name {
            assert!(Instant::now() < deadline, "the agent never finished the held {name} move");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        cloud.test_hook("release", json!({"point": "before-finish-move-write"})).await;
        let status = call.await.expect("the held call");
        assert_eq!(status, if confirm { 204 } else { 202 }, "{name}: the API reports its own move as done");
        let server = wait_status(&nova, &id, "ACTIVE").await;
        assert_eq!(server["flavor"]["vcpus"], if confirm { 2 } else { 1 }, "{server}");
        assert_eq!(migrations_of(&nova, &id).await[0]["status"], name);
        assert!(allocations(&cloud, &migration).await["allocations"].as_object().is_none_or(|a| a.is_empty()));
        cloud.check_invariants().await;
    }
}
