//! Quotas are checked and consumed in the write that creates the build
//! requests, so they are exact at the edge under concurrency (across
//! processes on PostgreSQL), and no server goes to ERROR for quota.

use serde_json::json;

use super::support::{by_status, Cloud, Hosts, Nova};

fn pg() -> bool {
    std::env::var("TEST_DATABASE_URL").is_ok_and(|u| !u.is_empty())
}

#[tokio::test]
async fn instances_quota_at_the_edge() {
    let mut cloud = Cloud::start("quota-edge", &[]).await;
    if pg() {
        cloud.add_process(&[]).await;
    }
    cloud.add_agent(Hosts::new("q", 4, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    assert_eq!(admin.put("/os-quota-sets/proj", &json!({"quota_set": {"instances": 10}})).await.status, 200);
    let user = cloud.nova("alice:proj");
    for i in 0..9 {
        user.boot_id(&format!("pre{i}"), &flavor, &image).await;
    }
    admin.wait_all_settled().await;
    let mut clients: Vec<Nova> = vec![user.clone()];
    for sibling in &cloud.siblings {
        clients.push(Nova::new(&sibling.base, "alice:proj"));
    }
    let mut boots = Vec::new();
    for i in 0..50 {
        let nova = clients[i % clients.len()].clone();
        let (flavor, image) = (flavor.clone(), image.clone());
        boots.push(tokio::spawn(async move { nova.boot(&format!("edge{i}"), &flavor, &image, json!({})).await }));
    }
    let mut accepted = 0;
    let mut refused = 0;
    for boot in boots {
        let answer = boot.await.expect("join");
        match answer.status {
            202 => accepted += 1,
            403 => {
                refused += 1;
                let message = answer.body["forbidden"]["message"].as_str().unwrap_or("");
                assert!(message.starts_with("Quota exceeded for instances"), "{:?}", answer.body);
            }
            other => panic!("unexpected {other}: {:?}", answer.body),
        }
    }
    assert_eq!((accepted, refused), (1, 49));
    let servers = admin.wait_all_settled().await;
    let counts = by_status(&servers);
    assert_eq!(counts.get("ACTIVE"), Some(&10), "{counts:?}");
    assert_eq!(counts.get("ERROR"), None, "no server goes to ERROR for quota");
    cloud.check_invariants().await;
}

#[tokio::test]
async fn cores_ram_and_group_member_quotas() {
    let mut cloud = Cloud::start("quota-cores", &[]).await;
    cloud.add_agent(Hosts::new("c", 4, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f2", 2, 256, 1).await;
    let image = admin.image("img", json!({})).await;
    let limits = json!({"quota_set": {"cores": 7, "ram": 100000, "instances": 50, "server_group_members": 2}});
    assert_eq!(admin.put("/os-quota-sets/p2", &limits).await.status, 200);
    let user = cloud.nova("bob:p2");
    // 2 vCPU each, 7 cores: a multi-create of 1..5 is lowered to 3.
    let answer = user.boot("m", &flavor, &image, json!({"min_count": 1, "max_count": 5})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let servers = admin.wait_all_settled().await;
    assert_eq!(servers.len(), 3);
    // Another one does not fit: 403 naming cores.
    let refused = user.boot("x", &flavor, &image, json!({})).await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.body["forbidden"]["message"],
        "Quota exceeded for cores: Requested 2, but already used 6 of 7 cores"
    );
    // Server group members: limit 2, the third boot into the group is refused.
    assert_eq!(admin.put("/os-quota-sets/p2", &json!({"quota_set": {"cores": 100}})).await.status, 200);
    let group =
        user.post("/os-server-groups", &json!({"server_group": {"name": "g", "policy": "soft-anti-affinity"}})).await;
    assert_eq!(group.status, 200, "{:?}", group.body);
    let g = group.body["server_group"]["id"].as_str().expect("id").to_owned();
    for i in 0..2 {
        let answer = user.boot(&format!("g{i}"), &flavor, &image, json!({"os:scheduler_hints": {"group": g}})).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
    }
    let third = user.boot("g2", &flavor, &image, json!({"os:scheduler_hints": {"group": g}})).await;
    assert_eq!(third.status, 403, "{:?}", third.body);
    assert_eq!(third.body["forbidden"]["message"], "Quota exceeded, too many servers in group");
    admin.wait_all_settled().await;
    cloud.check_invariants().await;
}
