//! Bad input gets a 4xx in placement's error format and changes nothing.

use serde_json::json;

use crate::support::{assert_error, provider_with_inventory, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = TestServer::start("bad-input").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "victim", "VCPU", 4).await;
    let before_list = client.get("/resource_providers").await.body;
    let before_inv = client.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
    let inv_path = format!("/resource_providers/{uuid}/inventories");
    let json_ct = [("content-type", "application/json"), ("openstack-api-version", "placement latest")];

    // Malformed JSON.
    let r = client.raw("POST", "/resource_providers", &json_ct, b"{\"name\": ".to_vec()).await;
    assert_error(&r, 400, "malformed json");
    let r = client.raw("PUT", &inv_path, &json_ct, b"[1, 2".to_vec()).await;
    assert_error(&r, 400, "malformed json on inventories");
    // Wrong types.
    let r = client.post("/resource_providers", &json!({"name": 12})).await;
    assert_error(&r, 400, "name is a number");
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": "one", "inventories": {"VCPU": {"total": 1}}}))
        .await;
    assert_error(&r, 400, "generation is a string");
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": 1, "inventories": {"VCPU": {"total": "lots"}}}))
        .await;
    assert_error(&r, 400, "total is a string");
    // Unknown fields.
    let r = client.post("/resource_providers", &json!({"name": "x", "colour": "blue"})).await;
    assert_error(&r, 400, "unknown field");
    // Invalid UUIDs.
    let r = client.post("/resource_providers", &json!({"name": "y", "uuid": "not-a-uuid"})).await;
    assert_error(&r, 400, "bad uuid in body");
    let r = client.get("/resource_providers?uuid=not-a-uuid").await;
    assert_error(&r, 400, "bad uuid in query");
    let r = client
        .put(
            "/allocations/not-a-uuid",
            &json!({"allocations": {uuid.clone(): {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
                    "consumer_generation": null, "consumer_type": "INSTANCE"}),
        )
        .await;
    assert!(r.status == 400 || r.status == 404, "bad consumer uuid: {:?}", r);
    // Bad microversion headers.
    let r = client.raw("GET", "/resource_providers", &[("openstack-api-version", "placement 1.999")], vec![]).await;
    assert_error(&r, 406, "too new microversion");
    let r = client.raw("GET", "/resource_providers", &[("openstack-api-version", "placement one.two")], vec![]).await;
    assert_error(&r, 400, "garbage microversion");
    // Bad query strings.
    let r = client.get("/resource_providers?resources=VCPU:-1").await;
    assert_error(&r, 400, "negative resource amount");
    let r = client.get("/resource_providers?member_of=in:").await;
    assert_error(&r, 400, "empty member_of");
    // Oversized body (the default limit is 10 MiB).
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(11 * 1024 * 1024));
    let r = client.raw("POST", "/resource_providers", &json_ct, huge.into_bytes()).await;
    assert_error(&r, 413, "oversized body");
    // Capacity and generation violations are 409, not 500.
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": 99, "inventories": {"VCPU": {"total": 1}}}))
        .await;
    assert_error(&r, 409, "stale generation");

    let after_list = client.get("/resource_providers").await.body;
    let after_inv = client.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
    assert_eq!(before_list, after_list, "bad input changed the provider list");
    assert_eq!(before_inv, after_inv, "bad input changed inventories");
}
