//! Pull-mode scheduling end to end: a real `berth serve --scheduling
//! pull`, real `berth agent --scheduling pull` processes and a real NATS
//! JetStream (`BERTH_TEST_NATS_URL`, else nats://127.0.0.1:4222). Each
//! test has its own stream prefix and deletes its stream at the end.

use std::time::{Duration, Instant};

use serde_json::json;

use super::support::{by_status, Cloud, Hosts, Nova};
use crate::support::Proxy;

fn nats_url() -> String {
    std::env::var("BERTH_TEST_NATS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned())
}

/// A test's queues: a random prefix, its stream deleted on drop.
struct Queues {
    url: String,
    prefix: String,
}

impl Queues {
    fn new() -> Self {
        Queues { url: nats_url(), prefix: format!("it{}", uuid::Uuid::new_v4().simple()) }
    }

    fn settings(&self) -> berth_pull::Settings {
        berth_pull::Settings { url: self.url.clone(), prefix: self.prefix.clone(), ack_wait: Duration::from_secs(3) }
    }

    /// `serve` arguments: pull mode on these queues, a 3 s ack wait and
    /// a `timeout`-second build timeout.
    fn serve_args(&self, timeout: &str) -> Vec<String> {
        [
            "--scheduling",
            "pull",
            "--nats-url",
            &self.url,
            "--nats-prefix",
            &self.prefix,
            "--pull-ack-wait-secs",
            "3",
            "--pull-build-timeout-secs",
            timeout,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `agent` arguments: pull mode on these queues, plus `extra`.
    fn agent_args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = ["--scheduling", "pull", "--nats-url", &self.url, "--nats-prefix", &self.prefix]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    async fn stats(&self) -> berth_pull::QueueStats {
        let queues = berth_pull::Queues::connect(&self.settings()).await.expect("nats");
        queues.stats().await.expect("stream stats")
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        let settings = self.settings();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                if let Ok(queues) = berth_pull::Queues::connect(&settings).await {
                    let _ = tokio::time::timeout(Duration::from_secs(5), queues.delete()).await;
                }
            });
        })
        .join();
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

async fn pull_cloud(tag: &str, queues: &Queues, timeout: &str) -> Cloud {
    Cloud::start(tag, &strs(&queues.serve_args(timeout))).await
}

#[tokio::test]
async fn boot_goes_active_through_a_pull_queue() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-boot", &queues, "60").await;
    let args = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pl", 2, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert!(server["OS-EXT-SRV-ATTR:host"].as_str().is_some_and(|h| h.starts_with("pl")), "{server}");
    // It went through the queue and one claim, not the push scheduler.
    assert_eq!(cloud.server.metric("berth_pull_published_total").await, 1);
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 1);
    assert_eq!(cloud.server.metric("berth_pull_routed_to_push_total").await, 0);
    assert_eq!(cloud.server.metric("berth_pull_queues").await, 1);
    // The message was acked: the work queue is empty, one consumer.
    let stats = queues.stats().await;
    assert_eq!((stats.consumers, stats.messages), (1, 0), "{stats:?}");
    cloud.check_invariants().await;
    // The delete reaches the host's agent (on the host's subject: see
    // `delete_travels_on_the_host_subject`).
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    super::support::wait_gone(&nova, &id).await;
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "allocation released");
    cloud.check_invariants().await;
}

/// Two hosts of 5 vCPUs (ratio 1.0): 100 concurrent one-vCPU boots for
/// the 10 slots. Exactly 10 ACTIVE, no provider over capacity, the rest
/// ERROR (no claim within the build timeout) without allocations.
#[tokio::test]
async fn hundred_boots_for_ten_slots_never_overcommit() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-ten", &queues, "8").await;
    let args = queues.agent_args(&["--vcpus", "5", "--cpu-ratio", "1.0", "--memory-mb", "65536"]);
    cloud.add_agent(Hosts::new("ta", 1, &strs(&args))).await;
    cloud.add_agent(Hosts::new("tb", 1, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let limits = json!({"quota_set": {"instances": 200, "cores": 200, "ram": 10000000}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("one", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let mut boots = Vec::new();
    for i in 0..100 {
        let nova = nova.clone();
        let (flavor, image) = (flavor.clone(), image.clone());
        boots.push(tokio::spawn(async move { nova.boot(&format!("s{i}"), &flavor, &image, json!({})).await }));
    }
    for boot in boots {
        assert_eq!(boot.await.expect("join").status, 202);
    }
    let servers = nova.wait_all_settled().await;
    let counts = by_status(&servers);
    assert_eq!(counts.get("ACTIVE"), Some(&10), "{counts:?}");
    assert_eq!(counts.get("ERROR"), Some(&90), "{counts:?}");
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 10);
    assert_eq!(cloud.server.metric("berth_pull_timed_out_total").await, 90);
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 10, "only the ACTIVE hold vCPUs");
    // A full agent leaves the queue: refusals are bounded and stop once
    // no host fits (the 90 left are not offered to anyone any more).
    let refused = cloud.server.metric("berth_pull_claims_refused_total").await;
    assert!(refused < 1000, "{refused} refused claims");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cloud.server.metric("berth_pull_claims_refused_total").await, refused, "full agents stopped fetching");
    let stats = queues.stats().await;
    assert_eq!(stats.consumers, 1, "{stats:?}");
    cloud.check_invariants().await;
}

/// Admission is unchanged in pull mode: at 9 of 10 instances, 50
/// concurrent boots admit exactly one.
#[tokio::test]
async fn quota_edge_admits_exactly_one() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-quota", &queues, "60").await;
    let args = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pq", 4, &strs(&args))).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    assert_eq!(admin.put("/os-quota-sets/proj", &json!({"quota_set": {"instances": 10}})).await.status, 200);
    let user = cloud.nova("alice:proj");
    for i in 0..9 {
        user.boot_id(&format!("pre{i}"), &flavor, &image).await;
    }
    admin.wait_all_settled().await;
    let mut boots = Vec::new();
    for i in 0..50 {
        let nova: Nova = user.clone();
        let (flavor, image) = (flavor.clone(), image.clone());
        boots.push(tokio::spawn(async move { nova.boot(&format!("edge{i}"), &flavor, &image, json!({})).await }));
    }
    let (mut accepted, mut refused) = (0, 0);
    for boot in boots {
        match boot.await.expect("join").status {
            202 => accepted += 1,
            403 => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((accepted, refused), (1, 49));
    let servers = admin.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&10), "{:?}", by_status(&servers));
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 10);
    cloud.check_invariants().await;
}

/// An agent killed (-9) while it builds a boot it fetched and has not
/// acked: JetStream delivers the message again after the ack wait; the
/// restarted agent's claim is answered as already claimed on its host,
/// and exactly one server results.
#[tokio::test]
async fn agent_killed_before_its_ack_leaves_exactly_one_server() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-kill", &queues, "60").await;
    let args = queues.agent_args(&["--build-time-ms", "2500"]);
    cloud.add_agent(Hosts::new("pk", 1, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    // Claimed (it has its host) and building: the message is unacked.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["OS-EXT-SRV-ATTR:host"].as_str().is_some() {
            assert_eq!(server["status"], "BUILD", "{server}");
            break;
        }
        assert!(Instant::now() < deadline, "never claimed: {server}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cloud.kill_agent(0);
    assert_eq!(queues.stats().await.messages, 1, "the boot is still on its queue, unacked");
    cloud.restart_agent(0).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while queues.stats().await.messages > 0 {
        assert!(Instant::now() < deadline, "the redelivered boot was never acked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let servers = nova.all_servers().await;
    assert_eq!(servers.len(), 1, "exactly one server: {servers:?}");
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 1, "one claim placed it");
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 1);
    cloud.check_invariants().await;
}

/// What a queue cannot carry goes through the push scheduler and is
/// counted: a hard anti-affinity group, and a multi-create of 5 (all or
/// nothing).
#[tokio::test]
async fn groups_and_multi_create_are_routed_to_push_and_counted() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-route", &queues, "60").await;
    let args = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pr", 3, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let group =
        nova.post("/os-server-groups", &json!({"server_group": {"name": "g", "policy": "anti-affinity"}})).await;
    assert_eq!(group.status, 200, "{:?}", group.body);
    let group_id = group.body["server_group"]["id"].as_str().expect("group id").to_owned();
    for i in 0..3 {
        let answer =
            nova.boot(&format!("g{i}"), &flavor, &image, json!({"os:scheduler_hints": {"group": group_id}})).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
    }
    let multi = nova.boot("multi", &flavor, &image, json!({"min_count": 5, "max_count": 5})).await;
    assert_eq!(multi.status, 202, "{:?}", multi.body);
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&8), "{:?}", by_status(&servers));
    let group_hosts: std::collections::HashSet<&str> = servers
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with('g')))
        .filter_map(|s| s["OS-EXT-SRV-ATTR:host"].as_str())
        .collect();
    assert_eq!(group_hosts.len(), 3, "anti-affinity: three hosts");
    assert_eq!(cloud.server.metric("berth_pull_routed_server_group_total").await, 3);
    assert_eq!(cloud.server.metric("berth_pull_routed_multi_create_total").await, 1);
    assert_eq!(cloud.server.metric("berth_pull_published_total").await, 0);
    cloud.check_invariants().await;
}

/// NATS unreachable from the server: boots are accepted as usual (202,
/// no 5xx) and stay in BUILD; once NATS is back the outbox sweep publishes
/// them and they go ACTIVE, each once.
#[tokio::test]
async fn nats_down_boots_wait_in_build_and_go_when_it_is_back() {
    let queues = Queues::new();
    let upstream = queues.url.trim_start_matches("nats://").to_owned();
    let proxy = Proxy::start(upstream).await;
    let via_proxy = format!("nats://127.0.0.1:{}", proxy.port);
    let mut args = queues.serve_args("120");
    let at = args.iter().position(|a| a == "--nats-url").expect("flag") + 1;
    args[at] = via_proxy;
    let mut cloud = Cloud::start("pull-down", &strs(&args)).await;
    let agent = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pd", 2, &strs(&agent))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    proxy.cut();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(nova.boot_id(&format!("d{i}"), &flavor, &image).await);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while cloud.server.metric("berth_pull_publish_failures_total").await == 0 {
        assert!(Instant::now() < deadline, "publishing never failed with NATS cut off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in &ids {
        let server = nova.get(&format!("/servers/{id}")).await;
        assert_eq!(server.status, 200, "{:?}", server.body);
        assert_eq!(server.body["server"]["status"], "BUILD", "{:?}", server.body);
    }
    assert_eq!(nova.get("/servers/detail").await.status, 200, "the API answers while NATS is down");
    proxy.restore();
    for id in &ids {
        let server = nova.wait_settled(id).await;
        assert_eq!(server["status"], "ACTIVE", "{server}");
    }
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 3);
    assert_eq!(nova.all_servers().await.len(), 3);
    cloud.check_invariants().await;
}

/// An ACTIVE server booted through a pull queue and its allocations.
async fn booted(nova: &Nova, cloud: &Cloud, host: &str) -> String {
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], host, "{server}");
    let allocations = cloud.server.client().get(&format!("/allocations/{id}")).await.body["allocations"].clone();
    assert_eq!(allocations.as_object().map(|a| a.len()), Some(1), "{allocations}");
    id
}

/// Deleted: 404, no allocations, no usage.
async fn assert_deleted(nova: &Nova, cloud: &Cloud, id: &str) {
    super::support::wait_gone(nova, id).await;
    let allocations = cloud.server.client().get(&format!("/allocations/{id}")).await.body["allocations"].clone();
    assert_eq!(allocations, json!({}), "allocations released");
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "usage released");
}

/// A delete in pull mode travels on the host's NATS subject
/// `{prefix}.host.{host}`: an observer subscribed there beside the agent
/// sees the task the long poll would have handed out, the agent takes it
/// from there (counted), and the server is gone with its allocations.
#[tokio::test]
async fn delete_travels_on_the_host_subject() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-hostsub", &queues, "60").await;
    let args = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("ph", 1, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let id = booted(&nova, &cloud, "ph0").await;
    // The build came with the claim, not on the host's subject.
    assert_eq!(cloud.server.metric("berth_pull_host_published_total").await, 0);
    let nats = berth_pull::Queues::connect(&queues.settings()).await.expect("nats");
    let mut observed = nats.host_tasks(&["ph0".to_owned()]).await.expect("subscribe to the host subject");
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    let seen = tokio::time::timeout(Duration::from_secs(10), observed.next())
        .await
        .expect("no task on the host subject within 10 s")
        .expect("subscription open");
    assert_eq!(seen.host, "ph0");
    let task: serde_json::Value = serde_json::from_slice(&seen.payload).expect("task JSON");
    assert_eq!(
        task,
        json!({"id": format!("{id}:deleting@ph0"), "kind": "delete", "instance": id, "host": "ph0"}),
        "the long poll's task JSON"
    );
    assert_deleted(&nova, &cloud, &id).await;
    assert_eq!(cloud.server.metric("berth_pull_host_published_total").await, 1, "the agent took it there");
    assert_eq!(cloud.server.metric("berth_pull_host_fallbacks_total").await, 0, "not through the long poll");
    cloud.check_invariants().await;
}

/// The server cut off from NATS after the boot: the host's subject takes
/// nothing, the delete falls back to the agent API's long poll (counted)
/// and the server is gone all the same.
#[tokio::test]
async fn delete_falls_back_to_the_long_poll_without_the_host_subject() {
    let queues = Queues::new();
    let upstream = queues.url.trim_start_matches("nats://").to_owned();
    let proxy = Proxy::start(upstream).await;
    let mut args = queues.serve_args("60");
    let at = args.iter().position(|a| a == "--nats-url").expect("flag") + 1;
    args[at] = format!("nats://127.0.0.1:{}", proxy.port);
    let mut cloud = Cloud::start("pull-hostfall", &strs(&args)).await;
    let agent = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pf", 1, &strs(&agent))).await;
    let nova = cloud.nova("admin");
    let id = booted(&nova, &cloud, "pf0").await;
    proxy.cut();
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    assert_deleted(&nova, &cloud, &id).await;
    assert_eq!(cloud.server.metric("berth_pull_host_fallbacks_total").await, 1, "sent by long poll");
    assert_eq!(cloud.server.metric("berth_pull_host_published_total").await, 0);
    cloud.check_invariants().await;
}
