//! Several berth processes on one PostgreSQL database. These run in the
//! PostgreSQL pass of scripts/test.sh; on SQLite a second process is refused
//! by the data-directory lock (checked in the store suite), so they return
//! early there.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{provider_with_inventory, Client, TestServer};

async fn wait_visible(client: &Client, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if client.get(path).await.status == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{path} never became visible on the second process");
}

/// 64 concurrent claimers, alternating between two processes, race for the
/// last 20 units: exactly 20 are granted, no 5xx, and both processes agree
/// on the final usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_over_two_processes_never_overcommit() {
    let a = TestServer::start("mp-claims").await;
    if a.database.is_none() {
        eprintln!("multi-process test needs PostgreSQL (TEST_DATABASE_URL); not run on SQLite");
        return;
    }
    let b = a.start_sibling().await;
    let (ca, cb) = (a.client(), b.client());
    let uuid = provider_with_inventory(&ca, "shared", "VCPU", 100).await;
    // Fill all but the last 20 units.
    let (filler, r) = ca.claim_new(json!({uuid.clone(): {"resources": {"VCPU": 80}}})).await;
    assert_eq!(r.status, 204, "{:?}", r.body);
    wait_visible(&cb, &format!("/allocations/{filler}")).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        let uuid = uuid.clone();
        tasks.push(tokio::spawn(async move { client.claim_new(json!({uuid: {"resources": {"VCPU": 1}}})).await.1 }));
    }
    let (mut granted, mut refused) = (0, 0);
    for task in tasks {
        let reply = task.await.expect("task");
        match reply.status {
            204 => granted += 1,
            409 => refused += 1,
            other => panic!("unexpected status {other}: {:?}", reply.body),
        }
    }
    assert_eq!((granted, refused), (20, 44), "exactly the remaining capacity must be granted");
    for client in [&ca, &cb] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let usages = client.get(&format!("/resource_providers/{uuid}/usages")).await;
            if usages.body["usages"]["VCPU"] == 100 {
                break;
            }
            assert!(Instant::now() < deadline, "process never converged: {:?}", usages.body);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A write on one process is visible to the very next request on the
/// other (the read barrier, `App::sync`), as with a stateless service over
/// one database: a provider with inventory in allocation candidates, and a
/// compute flavor, each read through the other process at once, 50 times
/// each way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_are_read_at_once_through_the_other_process() {
    let a = TestServer::start("mp-feed").await;
    if a.database.is_none() {
        return;
    }
    let b = a.start_sibling().await;
    let (ca, cb) = (a.client(), b.client());
    for round in 0..50 {
        let (writer, reader) = if round % 2 == 0 { (&ca, &cb) } else { (&cb, &ca) };
        let uuid = uuid::Uuid::new_v4().to_string();
        let r = writer.post("/resource_providers", &json!({"name": format!("feed-{round}"), "uuid": uuid})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(reader.get(&format!("/resource_providers/{uuid}")).await.status, 200, "round {round}");
        let r = writer
            .put(
                &format!("/resource_providers/{uuid}/inventories"),
                &json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let query = format!("/allocation_candidates?resources=VCPU:1&in_tree={uuid}");
        for client in [writer, reader] {
            let seen = client.get(&query).await;
            assert_eq!(
                seen.body["allocation_requests"].as_array().map(Vec::len),
                Some(1),
                "round {round}: {:?}",
                seen.body
            );
        }
        let r = writer
            .post(
                "/compute/v2.1/flavors",
                &json!({"flavor": {"name": format!("f{round}"), "vcpus": 1, "ram": 64, "disk": 1}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let id = r.body["flavor"]["id"].as_str().expect("flavor id").to_owned();
        let seen = reader.get(&format!("/compute/v2.1/flavors/{id}")).await;
        assert_eq!(seen.status, 200, "round {round}: {:?}", seen.body);
    }
}

/// With a zero retention the writer prunes the change feed while a slow
/// follower is behind: the follower must notice the gap, reload its
/// snapshot and converge (never silently miss a write).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_behind_a_pruned_feed_reloads() {
    let Some(database) = crate::support::test_database("mp-prune") else { return };
    let dir = crate::support::fresh_dir("mp-prune");
    let a = TestServer::start_with_args_in(dir.clone(), Some(database.clone()), &["--change-feed-retention-secs", "0"])
        .await;
    let b = TestServer::start_with_args_in(
        dir,
        Some(database),
        &["--change-feed-retention-secs", "0", "--change-poll-ms", "3000"],
    )
    .await;
    let (ca, cb) = (a.client(), b.client());
    // Enough writes for pruning to run (every 256 writes) before b polls.
    let mut uuids = Vec::new();
    for n in 0..600 {
        let uuid = uuid::Uuid::new_v4().to_string();
        let r = ca.post("/resource_providers", &json!({"name": format!("p-{n}"), "uuid": uuid})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        uuids.push(uuid);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = cb.get("/resource_providers").await;
        if listed.body["resource_providers"].as_array().map(Vec::len) == Some(uuids.len()) {
            break;
        }
        assert!(Instant::now() < deadline, "the follower never converged after the feed was pruned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reloads = b.metric("berth_change_feed_reloads_total").await;
    assert!(reloads >= 1, "the follower must have reloaded after the gap (metrics: {reloads})");
}
