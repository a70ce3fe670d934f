//! The database becomes unreachable under load: writes get 503 with the
//! placement error body, reads keep being served from memory, and service
//! recovers without a restart when the database returns. Runs in the
//! PostgreSQL pass; the outage is made by a TCP proxy between berth and
//! PostgreSQL that the test cuts and restores.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{fresh_dir, test_database, via_proxy, Proxy, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_outage_gives_503_and_recovers() {
    let Some(direct) = test_database("outage") else {
        eprintln!("outage test needs PostgreSQL (TEST_DATABASE_URL); not run on SQLite");
        return;
    };
    let (upstream, _) = via_proxy(&direct, 0);
    let proxy = Proxy::start(upstream).await;
    let (_, proxied) = via_proxy(&direct, proxy.port);
    let server = TestServer::start_with(fresh_dir("outage"), Some(proxied)).await;
    let client = server.client();
    let create = |n: usize| {
        let client = client.clone();
        async move {
            client
                .post(
                    "/resource_providers",
                    &json!({"name": format!("o-{n}"), "uuid": uuid::Uuid::new_v4().to_string()}),
                )
                .await
        }
    };
    let mut acknowledged = Vec::new();
    for n in 0..10 {
        let r = create(n).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned());
    }

    proxy.cut();
    let mut saw_503 = 0;
    for n in 10..30 {
        let r = create(n).await;
        match r.status {
            503 => {
                saw_503 += 1;
                assert_eq!(r.body["errors"][0]["status"], 503, "{:?}", r.body);
            }
            200 => acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned()),
            other => panic!("during the outage a write must answer 503, got {other}: {:?}", r.body),
        }
        // Reads are answered from memory during the outage.
        assert_eq!(client.get("/resource_providers").await.status, 200);
    }
    assert!(saw_503 >= 19, "writes during the outage must fail with 503 (saw {saw_503})");
    let health = client.get("/healthcheck").await;
    assert_eq!(health.status, 503, "healthcheck must report the outage: {:?}", health.body);

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 100;
    loop {
        let r = create(n).await;
        n += 1;
        if r.status == 200 {
            acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned());
            break;
        }
        assert_eq!(r.status, 503, "{:?}", r.body);
        assert!(Instant::now() < deadline, "service did not recover after the database returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(client.get("/healthcheck").await.status, 200);
    // Nothing acknowledged was lost and nothing is half-written: a fresh
    // process loading from the database sees every acknowledged provider.
    let fresh = server.start_sibling().await;
    let listed = fresh.client().get("/resource_providers").await;
    let present: Vec<&str> =
        listed.body["resource_providers"].as_array().expect("list").iter().filter_map(|p| p["uuid"].as_str()).collect();
    for uuid in &acknowledged {
        assert!(present.contains(&uuid.as_str()), "acknowledged provider {uuid} lost");
    }
}
