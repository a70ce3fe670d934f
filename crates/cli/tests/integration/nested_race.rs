//! The nested claim race that makes the real Placement overcommit on
//! PostgreSQL: 10 writers take candidates from the nested perfload query
//! (FPGA:1 plus VCPU/MEMORY_MB in the same NUMA subtree) and claim them
//! until capacity runs out. Afterwards no provider may be over capacity.
//! Runs with one process (both backends) and with two processes sharing
//! PostgreSQL.

use serde_json::{json, Value};

use crate::support::{Client, TestServer};

async fn create(client: &Client, name: &str, parent: Option<&str>, inventories: Value, traits: &[&str]) -> String {
    let uuid = uuid::Uuid::new_v4().to_string();
    let mut body = json!({"name": name, "uuid": uuid});
    if let Some(parent) = parent {
        body["parent_provider_uuid"] = json!(parent);
    }
    assert_eq!(client.post("/resource_providers", &body).await.status, 200);
    let r = client
        .put(
            &format!("/resource_providers/{uuid}/inventories"),
            &json!({"resource_provider_generation": 0, "inventories": inventories}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    if !traits.is_empty() {
        let r = client
            .put(
                &format!("/resource_providers/{uuid}/traits"),
                &json!({"resource_provider_generation": 1, "traits": traits}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    uuid
}

/// Upstream's nested perfload tree: compute root, two NUMA nodes, FPGAs
/// and a VGPU.
async fn build_tree(client: &Client, idx: usize) {
    let root = create(
        client,
        &format!("cn{idx}"),
        None,
        json!({"DISK_GB": {"total": 20480}}),
        &["COMPUTE_VOLUME_MULTI_ATTACH"],
    )
    .await;
    let numa0 = create(
        client,
        &format!("cn{idx}-n0"),
        Some(&root),
        json!({"VCPU": {"total": 4, "reserved": 2}, "MEMORY_MB": {"total": 2048, "min_unit": 512, "step_size": 256}}),
        &["HW_NUMA_ROOT"],
    )
    .await;
    create(client, &format!("cn{idx}-n0-fpga"), Some(&numa0), json!({"FPGA": {"total": 1}}), &[]).await;
    create(client, &format!("cn{idx}-n0-vgpu"), Some(&numa0), json!({"VGPU": {"total": 8}}), &[]).await;
    let numa1 = create(
        client,
        &format!("cn{idx}-n1"),
        Some(&root),
        json!({"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024}}),
        &["HW_NUMA_ROOT", "CUSTOM_FOO"],
    )
    .await;
    for f in 0..2 {
        create(client, &format!("cn{idx}-n1-fpga{f}"), Some(&numa1), json!({"FPGA": {"total": 1}}), &[]).await;
    }
}

const QUERY: &str = "/allocation_candidates?resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH\
    &resources_COMPUTE=VCPU:1,MEMORY_MB:256&required_COMPUTE=CUSTOM_FOO\
    &resources_FPGA=FPGA:1&group_policy=none&same_subtree=_COMPUTE,_FPGA&limit=5";

/// Claim until no candidates are left; returns (granted, conflicts).
async fn claim_until_full(client: Client, worker: usize) -> (usize, usize) {
    let (mut granted, mut conflicts) = (0, 0);
    for attempt in 0..500 {
        let found = client.get(QUERY).await;
        assert_eq!(found.status, 200, "{:?}", found.body);
        let Some(requests) = found.body["allocation_requests"].as_array().filter(|r| !r.is_empty()).cloned() else {
            break;
        };
        let pick = &requests[(worker + attempt) % requests.len()];
        let (_, r) = client.claim_new(pick["allocations"].clone()).await;
        match r.status {
            204 => granted += 1,
            409 => conflicts += 1,
            other => panic!("unexpected claim status {other}: {:?}", r.body),
        }
    }
    (granted, conflicts)
}

async fn assert_no_overcommit(client: &Client) {
    let list = client.get("/resource_providers").await;
    for p in list.body["resource_providers"].as_array().expect("providers") {
        let uuid = p["uuid"].as_str().expect("uuid");
        let inv = client.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
        let usages = client.get(&format!("/resource_providers/{uuid}/usages")).await.body;
        for (class, record) in inv["inventories"].as_object().expect("inventories") {
            let capacity = (record["total"].as_f64().unwrap_or(0.0) - record["reserved"].as_f64().unwrap_or(0.0))
                * record["allocation_ratio"].as_f64().unwrap_or(1.0);
            let used = usages["usages"][class].as_f64().unwrap_or(0.0);
            assert!(
                used <= capacity.floor(),
                "provider {uuid} {class} overcommitted: used {used} > capacity {capacity}"
            );
        }
    }
}

async fn race(processes: usize) {
    let first = TestServer::start("nested-race").await;
    if processes > 1 && first.database.is_none() {
        eprintln!("two-process nested race needs PostgreSQL (TEST_DATABASE_URL); not run on SQLite");
        return;
    }
    let second = if processes > 1 { Some(first.start_sibling().await) } else { None };
    let admin = first.client();
    assert_eq!(admin.call("PUT", "/traits/CUSTOM_FOO", None).await.status, 201);
    for idx in 0..10 {
        build_tree(&admin, idx).await;
    }
    let mut clients = vec![first.client()];
    if let Some(second) = &second {
        clients.push(second.client());
        // Let the second process catch up before it serves candidates.
        for _ in 0..200 {
            if second.client().get("/resource_providers").await.body["resource_providers"].as_array().map(Vec::len)
                == Some(70)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    let mut workers = Vec::new();
    for worker in 0..10 {
        let client = clients[worker % clients.len()].clone();
        workers.push(tokio::spawn(claim_until_full(client, worker)));
    }
    let mut granted = 0;
    for w in workers {
        granted += w.await.expect("worker").0;
    }
    // Each tree's NUMA1 has 4 VCPU and 2 FPGAs under it: the FPGAs run out
    // first, so exactly 2 claims fit per tree.
    assert_eq!(granted, 20, "every FPGA in a CUSTOM_FOO subtree is claimed exactly once");
    for client in &clients {
        assert_no_overcommit(client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_claim_race_one_process() {
    race(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_claim_race_two_processes() {
    race(2).await;
}
