//! Server groups: hard policies hold under concurrent boots because they
//! are checked in the same write as the claim.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::support::{by_status, Cloud, Hosts, Nova};

async fn group(nova: &Nova, policy: &str, rules: Value) -> String {
    let answer = nova
        .post("/os-server-groups", &json!({"server_group": {"name": policy, "policy": policy, "rules": rules}}))
        .await;
    assert_eq!(answer.status, 200, "create group: {:?}", answer.body);
    answer.body["server_group"]["id"].as_str().expect("group id").to_owned()
}

async fn concurrent_members(nova: &Nova, n: usize, flavor: &str, image: &str, group: &str) {
    let mut boots = Vec::new();
    for i in 0..n {
        let (nova, flavor, image, group) = (nova.clone(), flavor.to_owned(), image.to_owned(), group.to_owned());
        boots.push(tokio::spawn(async move {
            nova.boot(&format!("m{i}"), &flavor, &image, json!({"os:scheduler_hints": {"group": group}})).await.status
        }));
    }
    for boot in boots {
        assert_eq!(boot.await.expect("join"), 202);
    }
}

fn hosts_of(servers: &[Value]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for s in servers.iter().filter(|s| s["status"] == "ACTIVE") {
        *out.entry(s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("").to_owned()).or_insert(0) += 1;
    }
    out
}

async fn delete_all(nova: &Nova) {
    for s in nova.all_servers().await {
        nova.delete(&format!("/servers/{}", s["id"].as_str().unwrap_or(""))).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !nova.all_servers().await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "servers not deleted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn anti_affinity_under_concurrency() {
    let mut cloud = Cloud::start("groups-anti", &[]).await;
    cloud.add_agent(Hosts::new("aa", 9, &[])).await;
    let nova = cloud.nova("admin");
    let big = json!({"quota_set": {"instances": 100, "cores": 1000, "ram": 10000000, "server_group_members": 100}});
    assert_eq!(nova.put("/os-quota-sets/admin", &big).await.status, 200);
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;

    // 10 members on 9 hosts in one request: all 10 ERROR, nothing allocated.
    let g = group(&nova, "anti-affinity", json!({})).await;
    let answer = nova
        .boot("multi", &flavor, &image, json!({"min_count": 10, "max_count": 10, "os:scheduler_hints": {"group": g}}))
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ERROR"), Some(&10), "{:?}", by_status(&servers));
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0);
    cloud.check_invariants().await;
    delete_all(&nova).await;

    // 10 concurrent single boots: exactly 9 ACTIVE on 9 distinct hosts.
    let g = group(&nova, "anti-affinity", json!({})).await;
    concurrent_members(&nova, 10, &flavor, &image, &g).await;
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&9), "{:?}", by_status(&servers));
    let hosts = hosts_of(&servers);
    assert_eq!(hosts.len(), 9);
    assert!(hosts.values().all(|n| *n == 1));
    cloud.check_invariants().await;
    delete_all(&nova).await;

    // max_server_per_host=2: all 10 ACTIVE, at most 2 per host.
    let g = group(&nova, "anti-affinity", json!({"max_server_per_host": 2})).await;
    concurrent_members(&nova, 10, &flavor, &image, &g).await;
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&10), "{:?}", by_status(&servers));
    assert!(hosts_of(&servers).values().all(|n| *n <= 2));
    cloud.check_invariants().await;
}

#[tokio::test]
async fn affinity_under_concurrency() {
    let mut cloud = Cloud::start("groups-aff", &[]).await;
    cloud.add_agent(Hosts::new("af", 4, &["--vcpus", "4", "--cpu-ratio", "1.0"])).await;
    let nova = cloud.nova("admin");
    let big = json!({"quota_set": {"instances": 100, "cores": 1000, "ram": 10000000, "server_group_members": 100}});
    assert_eq!(nova.put("/os-quota-sets/admin", &big).await.status, 200);
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let g = group(&nova, "affinity", json!({})).await;
    // 6 concurrent members on an empty cluster: all on one host, which
    // holds 4; the other 2 fail.
    concurrent_members(&nova, 6, &flavor, &image, &g).await;
    let servers = nova.wait_all_settled().await;
    let hosts = hosts_of(&servers);
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&4), "{:?}", by_status(&servers));
    assert_eq!(by_status(&servers).get("ERROR"), Some(&2));
    let group_body = nova.get(&format!("/os-server-groups/{g}")).await.body;
    let members: HashSet<&str> =
        group_body["server_group"]["members"].as_array().expect("members").iter().filter_map(Value::as_str).collect();
    assert_eq!(members.len(), 6, "every member is in the group, ERROR ones too");
    cloud.check_invariants().await;
}
