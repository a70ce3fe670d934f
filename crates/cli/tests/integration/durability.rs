//! kill -9 during a write loop loses no acknowledged write.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use crate::support::TestServer;

/// Writers create providers continuously; the server is SIGKILLed at an
/// arbitrary moment and restarted on the same data directory, 20 times.
/// Every provider whose creation was acknowledged must exist afterwards
/// with its inventory (nothing half-written: a provider is present with
/// its inventory or not at all as far as acknowledged writes go).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_loses_no_acknowledged_write() {
    let mut server = TestServer::start("kill9").await;
    let mut acknowledged: BTreeSet<String> = BTreeSet::new();
    for round in 0..20u64 {
        let client = server.client();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for writer in 0..4 {
            let client = client.clone();
            let stop = stop.clone();
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let uuid = uuid::Uuid::new_v4().to_string();
                    let body = json!({"name": format!("k{round}-{writer}-{n}"), "uuid": uuid});
                    n += 1;
                    let sent = crate::support::http_client()
                        .post(format!("{}/resource_providers", client_base(&client)))
                        .header("x-auth-token", "admin")
                        .header("openstack-api-version", "placement latest")
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    match sent {
                        Ok(resp) if resp.status().as_u16() == 200 => acked.push(uuid),
                        Ok(resp) => panic!("unexpected status {}", resp.status()),
                        Err(_) => break, // the server died mid-request: not acknowledged
                    }
                }
                acked
            }));
        }
        // Let the writers run for a varying, round-dependent time, then kill.
        tokio::time::sleep(Duration::from_millis(50 + (round * 37) % 200)).await;
        server.kill9();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for writer in writers {
            acknowledged.extend(writer.await.expect("writer"));
        }
        server = server.restart_after_kill9().await;
        let listed = server.client().get("/resource_providers").await;
        assert_eq!(listed.status, 200);
        let present: BTreeSet<String> = listed.body["resource_providers"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|p| p["uuid"].as_str().map(str::to_owned))
            .collect();
        let lost: Vec<&String> = acknowledged.difference(&present).collect();
        assert!(lost.is_empty(), "round {round}: {} acknowledged providers lost: {lost:?}", lost.len());
    }
    assert!(acknowledged.len() >= 20, "the write loop made too few writes ({}) to mean anything", acknowledged.len());
}

fn client_base(client: &crate::support::Client) -> String {
    client.base_url()
}
