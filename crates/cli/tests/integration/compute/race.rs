//! Concurrent boots for scarce capacity: claims go through placement's
//! one write path, so capacity is never overcommitted and every boot
//! either lands or is buried, with no leaked allocation (two server
//! processes on PostgreSQL).

use serde_json::json;

use super::support::{by_status, Cloud, Hosts, Nova};

fn pg() -> bool {
    std::env::var("TEST_DATABASE_URL").is_ok_and(|u| !u.is_empty())
}

async fn burst(clients: &[Nova], n: usize, flavor: &str, image: &str) {
    let mut boots = Vec::new();
    for i in 0..n {
        let nova = clients[i % clients.len()].clone();
        let (flavor, image) = (flavor.to_owned(), image.to_owned());
        boots.push(tokio::spawn(async move { nova.boot(&format!("r{i}"), &flavor, &image, json!({})).await }));
    }
    for boot in boots {
        let answer = boot.await.expect("join");
        assert_eq!(answer.status, 202, "{:?}", answer.body);
    }
}

async fn cloud(tag: &str) -> (Cloud, Vec<Nova>) {
    let mut cloud = Cloud::start(tag, &[]).await;
    if pg() {
        cloud.add_process(&[]).await;
    }
    let mut clients = vec![cloud.nova("admin")];
    for sibling in &cloud.siblings {
        clients.push(Nova::new(&sibling.base, "admin"));
    }
    let unlimited = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    assert_eq!(clients[0].put("/os-quota-sets/admin", &unlimited).await.status, 200);
    (cloud, clients)
}

#[tokio::test]
async fn hundred_boots_for_the_last_slot() {
    let (mut cloud, clients) = cloud("race-last").await;
    cloud.add_agent(Hosts::new("only", 1, &["--vcpus", "1", "--cpu-ratio", "1.0"])).await;
    let flavor = clients[0].flavor("f", 1, 64, 1).await;
    let image = clients[0].image("img", json!({})).await;
    burst(&clients, 100, &flavor, &image).await;
    let servers = clients[0].wait_all_settled().await;
    let counts = by_status(&servers);
    assert_eq!(counts.get("ACTIVE"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("ERROR"), Some(&99), "{counts:?}");
    assert!(servers.iter().filter(|s| s["status"] == "ERROR").all(|s| s["OS-EXT-SRV-ATTR:host"].is_null()));
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 1, "exactly one allocation");
    cloud.check_invariants().await;
}

#[tokio::test]
async fn fifty_hosts_two_slots_150_boots() {
    let (mut cloud, clients) = cloud("race-150").await;
    cloud.add_agent(Hosts::new("s", 50, &["--vcpus", "2", "--cpu-ratio", "1.0"])).await;
    let flavor = clients[0].flavor("f", 1, 64, 1).await;
    let image = clients[0].image("img", json!({})).await;
    burst(&clients, 150, &flavor, &image).await;
    let servers = clients[0].wait_all_settled().await;
    let counts = by_status(&servers);
    assert_eq!(counts.get("ACTIVE"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("ERROR"), Some(&50), "{counts:?}");
    cloud.check_invariants().await;
}
