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

/// A write on one process becomes visible in the other's allocation
/// candidates through the change feed; each process reads its own writes
/// immediately. Prints the visibility delay (median, p99) over 50 writes —
/// a figure, not a pass/fail threshold; the test only requires visibility
/// within 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_propagate_between_processes() {
    let a = TestServer::start("mp-feed").await;
    if a.database.is_none() {
        return;
    }
    let b = a.start_sibling().await;
    let (ca, cb) = (a.client(), b.client());
    let mut delays = Vec::new();
    for round in 0..50 {
        let (writer, reader) = if round % 2 == 0 { (&ca, &cb) } else { (&cb, &ca) };
        let uuid = uuid::Uuid::new_v4().to_string();
        let r = writer.post("/resource_providers", &json!({"name": format!("feed-{round}"), "uuid": uuid})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let r = writer
            .put(
                &format!("/resource_providers/{uuid}/inventories"),
                &json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let query = format!("/allocation_candidates?resources=VCPU:1&in_tree={uuid}");
        // Read-your-writes on the writer: visible at once.
        let own = writer.get(&query).await;
        assert_eq!(own.body["allocation_requests"].as_array().map(Vec::len), Some(1), "{:?}", own.body);
        let started = Instant::now();
        loop {
            let seen = reader.get(&query).await;
            if seen.body["allocation_requests"].as_array().is_some_and(|a| !a.is_empty()) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "write never became visible: {:?}", seen.body);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        delays.push(started.elapsed());
    }
    delays.sort();
    eprintln!(
        "cross-process visibility in allocation candidates over {} writes: median {:?}, p99 {:?}, max {:?}",
        delays.len(),
        delays[delays.len() / 2],
        delays[(delays.len() * 99) / 100],
        delays[delays.len() - 1]
    );
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
