//! The boot path end to end: accept, schedule, claim, build on an agent,
//! ACTIVE; show, list, delete; capacity with reserved and overcommit;
//! scheduling failures buried in cell0; deleting while the conductor is
//! held; multi-create.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::support::{by_status, Cloud, Hosts};

#[tokio::test]
async fn boot_show_list_delete() {
    let mut cloud = Cloud::start("boot-basic", &[]).await;
    cloud.add_agent(Hosts::new("cmp", 2, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert!(server["OS-EXT-SRV-ATTR:host"].as_str().is_some_and(|h| h.starts_with("cmp")), "{server}");
    assert_eq!(server["flavor"]["vcpus"], 1, "2.47+ embeds the flavor");
    assert_eq!(server["OS-EXT-STS:power_state"], 1);
    let list = nova.get("/servers").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["servers"][0]["id"], id.as_str());
    cloud.check_invariants().await;

    let deleted = nova.delete(&format!("/servers/{id}")).await;
    assert_eq!(deleted.status, 204, "{:?}", deleted.body);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.status != 404 {
        assert!(std::time::Instant::now() < deadline, "server never went away");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "allocation released");
    cloud.check_invariants().await;
}

/// VCPU total 8, reserved 1, allocation ratio 4.0: exactly 28 one-vCPU
/// servers fit, the rest go to ERROR.
#[tokio::test]
async fn reserved_and_overcommit_admit_exactly_28() {
    let mut cloud = Cloud::start("boot-28", &[]).await;
    cloud
        .add_agent(Hosts::new(
            "big",
            1,
            &["--vcpus", "8", "--reserved-vcpus", "1", "--cpu-ratio", "4.0", "--memory-mb", "65536"],
        ))
        .await;
    let nova = cloud.nova("admin");
    let limits = json!({"quota_set": {"instances": 100, "cores": 100, "ram": 1000000}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("one", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let mut boots = Vec::new();
    for i in 0..32 {
        let nova = nova.clone();
        let (flavor, image) = (flavor.clone(), image.clone());
        boots.push(tokio::spawn(async move { nova.boot(&format!("v{i}"), &flavor, &image, json!({})).await.status }));
    }
    for boot in boots {
        assert_eq!(boot.await.expect("join"), 202);
    }
    let servers = nova.wait_all_settled().await;
    let counts = by_status(&servers);
    assert_eq!(counts.get("ACTIVE"), Some(&28), "{counts:?}");
    assert_eq!(counts.get("ERROR"), Some(&4), "{counts:?}");
    cloud.check_invariants().await;
}

/// A boot no host can take is buried in cell0: ERROR with a fault and a
/// create action, listable, deletable, and its quota freed.
#[tokio::test]
async fn unschedulable_is_buried_in_cell0() {
    let mut cloud = Cloud::start("boot-cell0", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, &["--vcpus", "2"])).await;
    let nova = cloud.nova("admin");
    assert_eq!(nova.put("/os-quota-sets/admin", &json!({"quota_set": {"cores": -1}})).await.status, 200);
    let huge = nova.flavor("huge", 64, 512, 1).await;
    let image = nova.image("img", json!({})).await;
    let id = nova.boot_id("nope", &huge, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ERROR");
    assert_eq!(server["fault"]["code"], 500, "{server}");
    assert!(server["fault"]["message"].as_str().unwrap_or("").starts_with("No valid host was found"), "{server}");
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null());
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await;
    assert_eq!(actions.status, 200, "{:?}", actions.body);
    assert_eq!(actions.body["instanceActions"][0]["action"], "create");
    let listed = nova.all_servers().await;
    assert_eq!(listed.len(), 1);
    let quota = nova.get("/os-quota-sets/admin/detail").await;
    assert_eq!(quota.body["quota_set"]["instances"]["in_use"], 1);
    cloud.check_invariants().await;
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    assert_eq!(nova.get(&format!("/servers/{id}")).await.status, 404);
    let quota = nova.get("/os-quota-sets/admin/detail").await;
    assert_eq!(quota.body["quota_set"]["instances"]["in_use"], 0, "quota freed");
    cloud.check_invariants().await;
}

async fn hold(cloud: &Cloud, point: &str, held: bool) {
    cloud.test_hook(if held { "hold" } else { "release" }, json!({"point": point})).await;
}

/// Deleting while the conductor is held before its claim leaves no
/// instance, no mapping and no allocation.
#[tokio::test]
async fn delete_during_build_leaves_nothing() {
    let mut cloud = Cloud::start("boot-del-build", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    for point in ["before-schedule", "before-claim"] {
        hold(&cloud, point, true).await;
        let id = nova.boot_id("doomed", &flavor, &image).await;
        cloud.wait_held(point, 1).await;
        assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], "BUILD");
        assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
        hold(&cloud, point, false).await;
        // The conductor goes on with the deleted boot and gives up on it.
        super::support::wait_gone(&nova, &id).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let servers = nova.all_servers().await;
            let vcpus = super::support::project_vcpus(&cloud.server, "admin").await;
            let quota = nova.get("/os-quota-sets/admin/detail").await;
            let in_use = quota.body["quota_set"]["instances"]["in_use"].clone();
            if servers.is_empty() && vcpus == 0 && in_use == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{point}: left behind: servers {servers:?}, {vcpus} vCPUs allocated, {in_use} instances in use"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
    // With the conductor running, the same host still takes a server.
    let id = nova.boot_id("fine", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&id).await["status"], "ACTIVE");
    cloud.check_invariants().await;
}

/// `min_count=3, max_count=10` where quota allows 5 and capacity fits 4:
/// the count is lowered to the quota headroom (5) at the API; the
/// scheduler cannot place all 5, so all 5 are buried in cell0 (Nova's
/// all-or-nothing), with no allocation left anywhere.
#[tokio::test]
async fn multi_create_lowered_to_quota_then_all_or_nothing() {
    let mut cloud = Cloud::start("boot-multi", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, &["--vcpus", "4", "--cpu-ratio", "1.0"])).await;
    let nova = cloud.nova("admin");
    assert_eq!(nova.put("/os-quota-sets/admin", &json!({"quota_set": {"instances": 5}})).await.status, 200);
    let flavor = nova.flavor("f", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    let answer =
        nova.boot("m", &flavor, &image, json!({"min_count": 3, "max_count": 10, "return_reservation_id": true})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let reservation = answer.body["reservation_id"].as_str().expect("reservation id").to_owned();
    let servers = nova.wait_all_settled().await;
    assert_eq!(servers.len(), 5, "lowered to the quota headroom");
    assert!(servers.iter().all(|s| s["status"] == "ERROR"), "{:?}", by_status(&servers));
    let listed = nova.get(&format!("/servers?reservation_id={reservation}")).await;
    assert_eq!(listed.body["servers"].as_array().map(Vec::len), Some(5));
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0);
    cloud.check_invariants().await;
    // Within capacity, a multi-create lands whole.
    for s in &servers {
        nova.delete(&format!("/servers/{}", s["id"].as_str().unwrap_or(""))).await;
    }
    let answer = nova.boot("ok", &flavor, &image, json!({"min_count": 4, "max_count": 4})).await;
    assert_eq!(answer.status, 202);
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&4));
    cloud.check_invariants().await;
}

/// PUT a provider sub-resource (`inventories`, `traits`, `aggregates`)
/// with the provider's current generation, again if another write moved
/// it meanwhile.
async fn put_with_generation(placement: &crate::support::Client, uuid: &str, what: &str, body: serde_json::Value) {
    for _ in 0..10 {
        let provider = placement.get(&format!("/resource_providers/{uuid}")).await;
        let mut body = body.clone();
        body["resource_provider_generation"] = provider.body["generation"].clone();
        let reply = placement.put(&format!("/resource_providers/{uuid}/{what}"), &body).await;
        if reply.status == 200 {
            return;
        }
        assert_eq!(reply.status, 409, "PUT {what} of {uuid}: {:?}", reply.body);
    }
    panic!("PUT {what} of {uuid} kept conflicting");
}

/// Hosts without local disk take `DISK_GB` from a pool shared with them
/// through an aggregate (`MISC_SHARES_VIA_AGGREGATE`, a Ceph-backed
/// cloud): every boot lands on one of the hosts, never "on" the pool,
/// and its allocation is split between the host (VCPU, MEMORY_MB) and the
/// pool (DISK_GB).
#[tokio::test]
async fn hosts_sharing_a_disk_pool_take_boots() {
    let mut cloud = Cloud::start("boot-shared-disk", &[]).await;
    cloud.add_agent(Hosts::new("rbd", 2, &["--disk-gb", "0"])).await;
    let placement = cloud.server.client();
    let created = placement.post("/resource_providers", &json!({"name": "ceph-pool"})).await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let pool = created.body["uuid"].as_str().expect("pool uuid").to_owned();
    put_with_generation(&placement, &pool, "inventories", json!({"inventories": {"DISK_GB": {"total": 1000}}})).await;
    put_with_generation(&placement, &pool, "traits", json!({"traits": ["MISC_SHARES_VIA_AGGREGATE"]})).await;
    let aggregate = uuid::Uuid::new_v4().to_string();
    let mut hosts = HashMap::new();
    for name in ["rbd0", "rbd1"] {
        let found = placement.get(&format!("/resource_providers?name={name}")).await;
        let uuid = found.body["resource_providers"][0]["uuid"].as_str().expect("host provider").to_owned();
        let inventories = placement.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
        assert!(inventories["inventories"].get("DISK_GB").is_none(), "{name} has no local disk: {inventories}");
        put_with_generation(&placement, &uuid, "aggregates", json!({"aggregates": [aggregate]})).await;
        hosts.insert(uuid, name);
    }
    put_with_generation(&placement, &pool, "aggregates", json!({"aggregates": [aggregate]})).await;

    let nova = cloud.nova("admin");
    let flavor = nova.flavor("disky", 1, 256, 10).await;
    let image = nova.image("cirros", json!({})).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(nova.boot_id(&format!("vm{i}"), &flavor, &image).await);
    }
    let mut used = HashSet::new();
    for id in &ids {
        let server = nova.wait_settled(id).await;
        assert_eq!(server["status"], "ACTIVE", "{server}");
        let host = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
        let allocations = placement.get(&format!("/allocations/{id}")).await.body["allocations"].clone();
        assert_eq!(allocations[&pool]["resources"], json!({"DISK_GB": 10}), "disk from the pool: {allocations}");
        let (node, name) = hosts.iter().find(|(_, n)| **n == host).expect("on one of the hosts");
        assert_eq!(
            allocations[node.as_str()]["resources"],
            json!({"VCPU": 1, "MEMORY_MB": 256}),
            "the rest on {name}: {allocations}"
        );
        assert_eq!(allocations.as_object().map(|a| a.len()), Some(2), "{allocations}");
        used.insert(host);
    }
    assert_eq!(used.len(), 2, "both hosts take boots: {used:?}");
    let usages = placement.get(&format!("/resource_providers/{pool}/usages")).await.body;
    assert_eq!(usages["usages"]["DISK_GB"], 40, "{usages}");
    // A cold migration: the migration consumer keeps the source's share
    // of the pool and the server takes one with the destination until the
    // confirm (as in Nova), then one share again.
    let moved = &ids[0];
    let answer = nova.post(&format!("/servers/{moved}/action"), &json!({"migrate": null})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = super::support::wait_status(&nova, moved, "VERIFY_RESIZE").await;
    assert!(server["OS-EXT-SRV-ATTR:host"].as_str().is_some_and(|h| h.starts_with("rbd")), "{server}");
    let usages = placement.get(&format!("/resource_providers/{pool}/usages")).await.body;
    assert_eq!(usages["usages"]["DISK_GB"], 50, "{usages}");
    cloud.check_invariants().await;
    let answer = nova.post(&format!("/servers/{moved}/action"), &json!({"confirmResize": null})).await;
    assert_eq!(answer.status, 204, "{:?}", answer.body);
    super::support::wait_status(&nova, moved, "ACTIVE").await;
    let usages = placement.get(&format!("/resource_providers/{pool}/usages")).await.body;
    assert_eq!(usages["usages"]["DISK_GB"], 40, "{usages}");
    // The heal finds nothing to report: a share of a sharing provider is
    // part of a server's allocation, not an allocation on another host.
    cloud.test_hook("clock", json!({"advance": 3600})).await;
    let report: serde_json::Value = crate::support::http_client()
        .post(format!("{}/admin/v1/heal", cloud.server.base))
        .header("x-auth-token", "admin")
        .json(&json!({"dry_run": true}))
        .send()
        .await
        .expect("heal")
        .json()
        .await
        .expect("heal report");
    assert_eq!(report["unresolved"], json!([]), "{report}");
    cloud.check_invariants().await;
}
