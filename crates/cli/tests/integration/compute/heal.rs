//! The heal (reconciliation between placement and the compute API): an
//! orphaned INSTANCE allocation of a server berth created and deleted is
//! removed, one berth never created (a real Nova's, written straight
//! through the placement API) is never touched, a server whose allocation
//! was deleted gets it back exactly, a build held between its claim and
//! its cell update is never touched, nothing recent is acted on, and a dry
//! run writes nothing.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use super::support::{Cloud, Hosts};
use crate::support::Client;

async fn heal(cloud: &Cloud, body: Value) -> Value {
    let resp = crate::support::http_client()
        .post(format!("{}/admin/v1/heal", cloud.server.base))
        .header("x-auth-token", "admin")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("heal");
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.expect("heal json")
}

fn ids(report: &Value, key: &str) -> Vec<String> {
    report[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

async fn allocations(placement: &Client, consumer: &str) -> Value {
    placement.get(&format!("/allocations/{consumer}")).await.body["allocations"].clone()
}

/// Resources per provider, without generations (what a heal must restore).
fn resources(allocations: &Value) -> Value {
    let map: serde_json::Map<String, Value> = allocations
        .as_object()
        .into_iter()
        .flatten()
        .map(|(provider, entry)| (provider.clone(), entry["resources"].clone()))
        .collect();
    Value::Object(map)
}

async fn root_of(placement: &Client, host: &str) -> String {
    let reply = placement.get(&format!("/resource_providers?name={host}")).await;
    reply.body["resource_providers"][0]["uuid"].as_str().expect("provider").to_owned()
}

/// PUT allocations for a consumer that is no server.
async fn put_consumer(placement: &Client, provider: &str, consumer_type: &str) -> String {
    let consumer = Uuid::new_v4().to_string();
    let body = json!({"allocations": {provider: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
                      "project_id": "p", "user_id": "u", "consumer_generation": null,
                      "consumer_type": consumer_type});
    let reply = placement.put(&format!("/allocations/{consumer}"), &body).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    consumer
}

/// An orphan of berth's own: a server booted and deleted, whose uuid
/// then gets `INSTANCE` allocations again (a stale writer).
async fn own_orphan(cloud: &Cloud, flavor: &str, image: &str, provider: &str) -> String {
    let nova = cloud.nova("admin");
    let id = nova.boot_id("gone", flavor, image).await;
    assert_eq!(nova.wait_settled(&id).await["status"], "ACTIVE");
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    super::support::wait_gone(&nova, &id).await;
    let body = json!({"allocations": {provider: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
                      "project_id": "p", "user_id": "u", "consumer_generation": null,
                      "consumer_type": "INSTANCE"});
    let reply = cloud.server.client().put(&format!("/allocations/{id}"), &body).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    id
}

/// Boot a server held after its claim; returns its id once its
/// allocations exist.
async fn held_build(cloud: &Cloud, flavor: &str, image: &str) -> String {
    cloud.test_hook("hold", json!({"point": "after-claim"})).await;
    let id = cloud.nova("admin").boot_id("held", flavor, image).await;
    let placement = cloud.server.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    while allocations(&placement, &id).await.as_object().is_none_or(|a| a.is_empty()) {
        assert!(Instant::now() < deadline, "the held build never claimed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heal_removes_orphans_recreates_missing_allocations_and_leaves_builds_alone() {
    let mut cloud = Cloud::start("heal", &["--heal-every-ticks", "0"]).await;
    cloud.add_agent(Hosts::new("hl", 2, &[])).await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let kept = nova.boot_id("kept", &flavor, &image).await;
    let robbed = nova.boot_id("robbed", &flavor, &image).await;
    for id in [&kept, &robbed] {
        assert_eq!(nova.wait_settled(id).await["status"], "ACTIVE");
    }
    let kept_before = resources(&allocations(&placement, &kept).await);
    let robbed_before = resources(&allocations(&placement, &robbed).await);
    let root = root_of(&placement, "hl0").await;

    let orphan = own_orphan(&cloud, &flavor, &image, &root).await;
    // Another client's INSTANCE consumer (as a real Nova writes them):
    // never removed.
    let nova_instance = put_consumer(&placement, &root, "INSTANCE").await;
    let foreign = put_consumer(&placement, &root, "BACKUP_JOB").await;
    let reply = placement.call("DELETE", &format!("/allocations/{robbed}"), None).await;
    assert_eq!(reply.status, 204);
    let held = held_build(&cloud, &flavor, &image).await;
    let held_allocations = resources(&allocations(&placement, &held).await);

    // Everything is recent: the grace period (300 s) leaves it alone.
    let report = heal(&cloud, json!({})).await;
    assert_eq!(ids(&report, "orphans_removed"), Vec::<String>::new(), "{report}");
    assert_eq!(ids(&report, "allocations_created"), Vec::<String>::new(), "{report}");

    cloud.test_hook("clock", json!({"advance": 3600})).await;
    // A dry run finds the two and writes nothing.
    let report = heal(&cloud, json!({"dry_run": true})).await;
    assert_eq!(report["dry_run"], json!(true));
    assert_eq!(ids(&report, "orphans_removed"), vec![orphan.clone()], "{report}");
    assert_eq!(ids(&report, "allocations_created"), vec![robbed.clone()], "{report}");
    assert!(allocations(&placement, &orphan).await.as_object().is_some_and(|a| !a.is_empty()));
    assert_eq!(allocations(&placement, &robbed).await, json!({}));

    let report = heal(&cloud, json!({})).await;
    assert_eq!(ids(&report, "orphans_removed"), vec![orphan.clone()], "{report}");
    assert_eq!(ids(&report, "allocations_created"), vec![robbed.clone()], "{report}");
    assert_eq!(report["unresolved"], json!([]), "{report}");
    assert_eq!(allocations(&placement, &orphan).await, json!({}), "orphan removed");
    assert_eq!(resources(&allocations(&placement, &robbed).await), robbed_before, "allocation recreated exactly");
    assert_eq!(resources(&allocations(&placement, &kept).await), kept_before, "a healthy server untouched");
    assert_eq!(resources(&allocations(&placement, &held).await), held_allocations, "the build in flight untouched");
    assert!(allocations(&placement, &foreign).await.as_object().is_some_and(|a| !a.is_empty()), "foreign kept");
    assert!(
        allocations(&placement, &nova_instance).await.as_object().is_some_and(|a| !a.is_empty()),
        "another client's INSTANCE consumer kept"
    );
    assert_eq!(cloud.server.metric("berth_heal_orphans_removed_total").await, 1);
    assert_eq!(cloud.server.metric("berth_heal_allocations_created_total").await, 1);
    assert_eq!(cloud.server.metric("berth_heal_unresolved_total").await, 0);

    // A second run finds nothing; the build goes on.
    let report = heal(&cloud, json!({})).await;
    assert_eq!(ids(&report, "orphans_removed").len() + ids(&report, "allocations_created").len(), 0, "{report}");
    cloud.test_hook("release", json!({"point": "after-claim"})).await;
    assert_eq!(nova.wait_settled(&held).await["status"], "ACTIVE");
    assert_eq!(resources(&allocations(&placement, &held).await), held_allocations);

    // A server's allocation that differs from its flavor is reported, not
    // changed.
    let mut differs = allocations(&placement, &kept).await;
    let provider = differs.as_object().and_then(|a| a.keys().next().cloned()).expect("provider");
    differs[&provider]["resources"]["VCPU"] = json!(2);
    let consumer = placement.get(&format!("/allocations/{kept}")).await.body;
    let body = json!({"allocations": resources(&differs).as_object().expect("map").iter()
                          .map(|(p, r)| (p.clone(), json!({"resources": r}))).collect::<serde_json::Map<_, _>>(),
                      "project_id": consumer["project_id"], "user_id": consumer["user_id"],
                      "consumer_generation": consumer["consumer_generation"], "consumer_type": "INSTANCE"});
    assert_eq!(placement.put(&format!("/allocations/{kept}"), &body).await.status, 204);
    // And a MIGRATION consumer no migration names: reported, not removed.
    let migration = put_consumer(&placement, &provider, "MIGRATION").await;
    cloud.test_hook("clock", json!({"advance": 3600})).await;
    let report = heal(&cloud, json!({})).await;
    let kinds: Vec<(String, String)> = report["unresolved"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| (f["kind"].as_str().unwrap_or("").to_owned(), f["uuid"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(
        kinds,
        vec![("orphan_migration".to_owned(), migration.clone()), ("allocation_differs".to_owned(), kept.clone())],
        "{report}"
    );
    assert_eq!(resources(&allocations(&placement, &kept).await), resources(&differs), "reported, not changed");
    assert_ne!(allocations(&placement, &migration).await, json!({}), "reported, not removed");
    assert_eq!(cloud.server.metric("berth_heal_unresolved_total").await, 2);
    assert_eq!(placement.call("DELETE", &format!("/allocations/{migration}"), None).await.status, 204);

    // Put things back for the invariants.
    let consumer = placement.get(&format!("/allocations/{kept}")).await.body;
    let mut body = body;
    body["allocations"][&provider]["resources"]["VCPU"] = json!(1);
    body["consumer_generation"] = consumer["consumer_generation"].clone();
    assert_eq!(placement.put(&format!("/allocations/{kept}"), &body).await.status, 204);
    assert_eq!(placement.call("DELETE", &format!("/allocations/{foreign}"), None).await.status, 204);
    assert_eq!(placement.call("DELETE", &format!("/allocations/{nova_instance}"), None).await.status, 204);
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_periodic_heal_removes_an_orphan_and_never_touches_a_build_even_without_grace() {
    let mut cloud = Cloud::start("heal-periodic", &["--heal-every-ticks", "2", "--heal-grace-secs", "0"]).await;
    cloud.add_agent(Hosts::new("hp", 1, &[])).await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let root = root_of(&placement, "hp0").await;
    let nova_instance = put_consumer(&placement, &root, "INSTANCE").await;
    let orphan = own_orphan(&cloud, &flavor, &image, &root).await;
    let held = held_build(&cloud, &flavor, &image).await;
    let held_allocations = resources(&allocations(&placement, &held).await);
    let deadline = Instant::now() + Duration::from_secs(30);
    while allocations(&placement, &orphan).await != json!({}) {
        assert!(Instant::now() < deadline, "the periodic heal never removed the orphan");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The run counts what it removed when it ends, a little after the
    // allocations are gone.
    while cloud.server.metric("berth_heal_orphans_removed_total").await < 1 {
        assert!(Instant::now() < deadline, "the periodic heal never counted the orphan it removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A few more runs while the build is still held.
    let runs = cloud.server.metric("berth_heal_runs_total").await;
    while cloud.server.metric("berth_heal_runs_total").await < runs + 3 {
        assert!(Instant::now() < deadline, "the periodic heal stopped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(resources(&allocations(&placement, &held).await), held_allocations, "the build in flight untouched");
    assert!(
        allocations(&placement, &nova_instance).await.as_object().is_some_and(|a| !a.is_empty()),
        "an INSTANCE consumer berth never created survives the periodic heal"
    );
    assert_eq!(cloud.server.metric("berth_heal_orphans_removed_total").await, 1);
    assert_eq!(cloud.server.metric("berth_heal_allocations_created_total").await, 0);
    cloud.test_hook("release", json!({"point": "after-claim"})).await;
    assert_eq!(nova.wait_settled(&held).await["status"], "ACTIVE");
    assert_eq!(resources(&allocations(&placement, &held).await), held_allocations);
    assert_eq!(placement.call("DELETE", &format!("/allocations/{nova_instance}"), None).await.status, 204);
    cloud.check_invariants().await;
}

/// The control plane is killed (SIGKILL) between a build's claim and its
/// cell update: the claim (allocation, build request gone) is durable, the
/// row is still `scheduling` with no host. After the restart the sweep
/// finishes the claim's cell update once the row is older than the grace:
/// the server goes ACTIVE on the host it holds, with exactly that
/// allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_build_whose_cell_update_was_lost_in_a_crash_is_finished() {
    let mut cloud = Cloud::start("heal-lost-claim", &["--heal-every-ticks", "0"]).await;
    cloud.add_agent(Hosts::new("lc", 2, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let held = held_build(&cloud, &flavor, &image).await;
    let claimed = resources(&allocations(&cloud.server.client(), &held).await);

    cloud.restart().await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    assert_eq!(nova.get(&format!("/servers/{held}")).await.body["server"]["status"], "BUILD");
    assert_eq!(resources(&allocations(&placement, &held).await), claimed, "the claim survived the crash");
    // Past the sweep's grace for rows left in `scheduling`.
    cloud.test_hook("clock", json!({"advance": 30})).await;
    let server = nova.wait_settled(&held).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(resources(&allocations(&placement, &held).await), claimed, "the allocation it held, exactly");
    let root = root_of(&placement, server["OS-EXT-SRV-ATTR:host"].as_str().expect("host")).await;
    assert!(claimed.get(&root).is_some(), "ACTIVE on the host it holds: {server} {claimed}");
    assert_eq!(cloud.server.metric("berth_compute_lost_claims_finished_total").await, 1);
    cloud.check_invariants().await;
}
