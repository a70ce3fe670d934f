//! PostgreSQL itself stopped and restarted under write load. Needs a server
//! this test may stop: `scripts/test.sh` runs it as a separate step against
//! its throwaway PostgreSQL, setting `BERTH_TEST_PG_RESTART=<dir>:<port>`
//! (the dir and port `scripts/pg-throwaway.sh` printed). Without it the test
//! returns at once: other tests share the server and must not see it stop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{fresh_dir, test_database, TestServer};

fn throwaway_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-throwaway.sh")
}

fn control(args: &[&str]) {
    let status =
        std::process::Command::new("bash").arg(throwaway_script()).args(args).status().expect("run pg-throwaway.sh");
    assert!(status.success(), "pg-throwaway.sh {args:?} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restart_under_load() {
    let Ok(target) = std::env::var("BERTH_TEST_PG_RESTART") else {
        eprintln!("BERTH_TEST_PG_RESTART not set: PostgreSQL restart test not run (scripts/test.sh runs it)");
        return;
    };
    let (pg_dir, pg_port) = target.rsplit_once(':').expect("BERTH_TEST_PG_RESTART=<dir>:<port>");
    let database = test_database("pg_restart").expect("TEST_DATABASE_URL must be set too");
    let server = TestServer::start_with(fresh_dir("pg-restart"), Some(database)).await;
    let client = server.client();

    // Writers create providers continuously and record what was acknowledged.
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let statuses: Arc<Mutex<Vec<u16>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, acked, statuses, stop) = (client.clone(), acked.clone(), statuses.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let uuid = uuid::Uuid::new_v4().to_string();
                let r = client.post("/resource_providers", &json!({"name": format!("r{w}-{n}"), "uuid": uuid})).await;
                n += 1;
                statuses.lock().expect("lock").push(r.status);
                if r.status == 200 {
                    acked.lock().expect("lock").push(uuid);
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    // Writes succeed before the outage (waited for, not slept: the
    // machine may be loaded).
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().expect("lock").len() < 10 {
        assert!(Instant::now() < deadline, "writes must succeed before the outage");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    control(&["halt", pg_dir]);
    // The outage is seen: a write refused and the healthcheck failing.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !statuses.lock().expect("lock").contains(&503) || client.get("/healthcheck").await.status != 503 {
        assert!(Instant::now() < deadline, "the outage was never reported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reads are served from memory while the database is down.
    assert_eq!(client.get("/resource_providers").await.status, 200);
    control(&["resume", pg_dir, pg_port]);

    // Service recovers without a restart of berth.
    let deadline = Instant::now() + Duration::from_secs(20);
    let recovered_from = acked.lock().expect("lock").len();
    while acked.lock().expect("lock").len() <= recovered_from + 10 {
        assert!(Instant::now() < deadline, "berth did not recover after PostgreSQL came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }
    let statuses = statuses.lock().expect("lock").clone();
    let n_503 = statuses.iter().filter(|s| **s == 503).count();
    assert!(n_503 > 0, "writes during the outage must get 503");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 503), "only 200 or 503 expected, got {statuses:?}");
    assert_eq!(client.get("/healthcheck").await.status, 200);

    // Nothing acknowledged is lost, and a fresh process agrees.
    let fresh = server.start_sibling().await;
    let listed = fresh.client().get("/resource_providers").await;
    let present: std::collections::HashSet<String> = listed.body["resource_providers"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["uuid"].as_str().map(str::to_owned))
        .collect();
    let acked = acked.lock().expect("lock").clone();
    let lost: Vec<&String> = acked.iter().filter(|u| !present.contains(*u)).collect();
    assert!(lost.is_empty(), "{} acknowledged providers lost across the PostgreSQL restart", lost.len());
    eprintln!(
        "postgres restart: {} writes acknowledged, {} answered 503 during the outage, none lost",
        acked.len(),
        n_503
    );
}
