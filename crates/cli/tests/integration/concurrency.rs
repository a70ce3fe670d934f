//! Races over real HTTP: generation compare-and-swap and capacity checks
//! must hold under concurrent writers.

use serde_json::json;

use crate::support::{provider_with_inventory, TestServer};

/// Many writers PUT inventories with the same provider generation: exactly
/// one wins each round, the rest get 409 placement.concurrent_update.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_one_winner_per_generation() {
    let server = TestServer::start("gen-race").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "race", "VCPU", 8).await;
    for round in 0..5 {
        let current = client.get(&format!("/resource_providers/{uuid}")).await;
        let generation = current.body["generation"].as_i64().expect("generation");
        let mut tasks = Vec::new();
        for writer in 0..16 {
            let client = client.clone();
            let uuid = uuid.clone();
            tasks.push(tokio::spawn(async move {
                client
                    .put(
                        &format!("/resource_providers/{uuid}/inventories"),
                        &json!({"resource_provider_generation": generation,
                                "inventories": {"VCPU": {"total": 8 + round * 16 + writer}}}),
                    )
                    .await
            }));
        }
        let mut winners = 0;
        for task in tasks {
            let reply = task.await.expect("task");
            match reply.status {
                200 => winners += 1,
                409 => assert_eq!(reply.body["errors"][0]["code"], "placement.concurrent_update", "{:?}", reply.body),
                other => panic!("unexpected status {other}: {:?}", reply.body),
            }
        }
        assert_eq!(winners, 1, "round {round}: exactly one writer may win generation {generation}");
        let after = client.get(&format!("/resource_providers/{uuid}")).await;
        assert_eq!(after.body["generation"].as_i64(), Some(generation + 1));
    }
}

/// 50 consumers race for 10 units: exactly 10 are granted and usage never
/// exceeds capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_claims_race_for_ten_units() {
    let server = TestServer::start("claim-race").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "claims", "VCPU", 10).await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let client = client.clone();
        let uuid = uuid.clone();
        tasks.push(tokio::spawn(async move { client.claim_new(json!({uuid: {"resources": {"VCPU": 1}}})).await.1 }));
    }
    let mut granted = 0;
    for task in tasks {
        let reply = task.await.expect("task");
        match reply.status {
            204 => granted += 1,
            409 => {}
            other => panic!("unexpected status {other}: {:?}", reply.body),
        }
    }
    assert_eq!(granted, 10, "exactly the capacity must be granted");
    let usages = client.get(&format!("/resource_providers/{uuid}/usages")).await;
    assert_eq!(usages.body["usages"]["VCPU"], 10, "{:?}", usages.body);
}
