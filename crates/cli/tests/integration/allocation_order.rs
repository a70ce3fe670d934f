//! Allocations are listed in the order the real Placement lists them (see
//! scripts/allocation-order.py, which compares the two side by side):
//! a consumer's providers and classes in the order they were written, a
//! provider's consumers by (class id, amount, write order) — and that order
//! survives a restart.

use serde_json::{json, Value};

use crate::support::{Client, TestServer};

const FFFF: &str = "ffffffff-ffff-4fff-8fff-ffffffffffff";
const ZERO: &str = "00000000-0000-4000-8000-000000000000";
const EIGHT: &str = "88888888-8888-4888-8888-888888888888";

fn consumer(n: u8) -> String {
    format!("{n:08x}-1111-4111-8111-111111111111")
}

fn keys(value: &Value) -> Vec<String> {
    value.as_object().expect("object").keys().cloned().collect()
}

async fn put(client: &Client, consumer: &str, allocations: Value) {
    let r = client
        .put(
            &format!("/allocations/{consumer}"),
            &json!({"allocations": allocations, "project_id": "p", "user_id": "u",
                    "consumer_generation": Value::Null, "consumer_type": "INSTANCE"}),
        )
        .await;
    if r.status == 409 {
        // Re-writes need the current generation.
        let current = client.get(&format!("/allocations/{consumer}")).await.body["consumer_generation"].clone();
        let r = client
            .put(
                &format!("/allocations/{consumer}"),
                &json!({"allocations": allocations, "project_id": "p", "user_id": "u",
                        "consumer_generation": current, "consumer_type": "INSTANCE"}),
            )
            .await;
        assert_eq!(r.status, 204, "{:?}", r.body);
        return;
    }
    assert_eq!(r.status, 204, "{:?}", r.body);
}

/// What the orders look like now, as comparable strings.
async fn observe(client: &Client) -> Vec<String> {
    let mut out = Vec::new();
    let a = client.get(&format!("/allocations/{}", consumer(0xA))).await.body;
    out.push(format!("A providers {:?}", keys(&a["allocations"])));
    for p in keys(&a["allocations"]) {
        out.push(format!("A {p} classes {:?}", keys(&a["allocations"][&p]["resources"])));
    }
    for p in [ZERO, EIGHT] {
        let listing = client.get(&format!("/resource_providers/{p}/allocations")).await.body;
        out.push(format!("{p} consumers {:?}", keys(&listing["allocations"])));
        for c in keys(&listing["allocations"]) {
            out.push(format!("{p} {c} classes {:?}", keys(&listing["allocations"][&c]["resources"])));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_keep_upstream_order_across_restarts() {
    let server = TestServer::start("alloc-order").await;
    let client = server.client();
    for (uuid, name) in [(FFFF, "ffff"), (ZERO, "zero"), (EIGHT, "eight")] {
        let r = client.post("/resource_providers", &json!({"uuid": uuid, "name": name})).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let r = client
            .put(
                &format!("/resource_providers/{uuid}/inventories"),
                &json!({"resource_provider_generation": 0, "inventories": {
                    "VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}, "DISK_GB": {"total": 1000}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    // A consumer: providers and classes in body order, re-written in
    // another order.
    put(
        &client,
        &consumer(0xA),
        json!({FFFF: {"resources": {"MEMORY_MB": 64, "VCPU": 1}}, ZERO: {"resources": {"VCPU": 1}}}),
    )
    .await;
    let first = observe(&client).await;
    assert_eq!(first[0], format!("A providers [{FFFF:?}, {ZERO:?}]"));
    assert_eq!(first[1], format!("A {FFFF} classes [\"MEMORY_MB\", \"VCPU\"]"));
    put(
        &client,
        &consumer(0xA),
        json!({ZERO: {"resources": {"DISK_GB": 5, "VCPU": 1}}, FFFF: {"resources": {"VCPU": 2, "MEMORY_MB": 64}}}),
    )
    .await;
    // On EIGHT: Q1 VCPU 3, Q2 VCPU 1, Q3 VCPU 2 (written in that order),
    // Q4 MEMORY_MB only (written first): by class id, then amount.
    put(&client, &consumer(4), json!({EIGHT: {"resources": {"MEMORY_MB": 128}}})).await;
    for (n, vcpu) in [(1u8, 3), (2, 1), (3, 2)] {
        put(&client, &consumer(n), json!({EIGHT: {"resources": {"MEMORY_MB": 256, "VCPU": vcpu}}})).await;
    }
    // Equal amounts: write order; a re-write moves a consumer back.
    for n in [5u8, 6, 7] {
        put(&client, &consumer(n), json!({ZERO: {"resources": {"VCPU": 1}}})).await;
    }
    put(&client, &consumer(5), json!({ZERO: {"resources": {"VCPU": 1}}})).await;

    let before = observe(&client).await;
    let expect_eight: Vec<String> = [2u8, 3, 1, 4].iter().map(|n| consumer(*n)).collect();
    assert!(before.contains(&format!("{EIGHT} consumers {expect_eight:?}")), "{before:#?}");
    assert!(
        before.contains(&format!("{EIGHT} {} classes [\"VCPU\", \"MEMORY_MB\"]", consumer(1))),
        "a provider's listing has classes in class-id order: {before:#?}"
    );
    // On ZERO: A holds VCPU 1 and DISK_GB 5, written before 6, 7, 5.
    let expect_zero: Vec<String> = [0xAu8, 6, 7, 5].iter().map(|n| consumer(*n)).collect();
    assert!(before.contains(&format!("{ZERO} consumers {expect_zero:?}")), "{before:#?}");
    assert_eq!(before[0], format!("A providers [{ZERO:?}, {FFFF:?}]"));
    assert_eq!(before[2], format!("A {FFFF} classes [\"VCPU\", \"MEMORY_MB\"]"));

    let server = server.restart_after_kill9().await;
    assert_eq!(observe(&server.client()).await, before, "the order after a restart");
}
