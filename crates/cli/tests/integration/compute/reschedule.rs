//! Build failures and reschedules: a build that fails on its host moves to
//! the instance's next alternate (kept in its request spec by the claim)
//! without a second scheduler run; an alternate taken meanwhile is
//! skipped; with no attempt or alternate left the server goes to ERROR
//! with Nova's fault and no allocation; a host with failed builds is
//! avoided from the next request on; forced hosts and `max_attempts` 1 do
//! not reschedule; an interrupted reschedule is finished after a restart.
//!
//! Host shapes make the order of hosts deterministic: the weighers prefer
//! `big` (the bad host) over `mid` over `low`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use super::cells::admin;
use super::support::{project_vcpus, Cloud, Hosts, Nova};

const EVENT_BUILD: &str = "compute__do_build_and_run_instance";

const BIG: &[&str] = &["--vcpus", "32", "--memory-mb", "65536", "--disk-gb", "2000"];
const MID: &[&str] = &["--vcpus", "16", "--memory-mb", "32768", "--disk-gb", "1000"];
const LOW: &[&str] = &["--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "500"];

fn with<'a>(shape: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    shape.iter().chain(more).copied().collect()
}

/// `(host, result)` of every build attempt of the server's create action
/// (Nova records one `compute__do_build_and_run_instance` event per
/// attempt), in start order.
pub(super) async fn build_attempts(nova: &Nova, id: &str) -> Vec<(String, String)> {
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await;
    assert_eq!(actions.status, 200, "{:?}", actions.body);
    let create = actions.body["instanceActions"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["action"] == "create"))
        .unwrap_or_else(|| panic!("no create action: {}", actions.body));
    let request_id = create["request_id"].as_str().expect("request id");
    let action = nova.get(&format!("/servers/{id}/os-instance-actions/{request_id}")).await;
    assert_eq!(action.status, 200, "{:?}", action.body);
    // Listed in start order (start time, then insertion).
    let events = action.body["instanceAction"]["events"].as_array().cloned().unwrap_or_default();
    events
        .iter()
        .filter(|e| e["event"] == EVENT_BUILD)
        .map(|e| (e["host"].as_str().unwrap_or("").to_owned(), e["result"].as_str().unwrap_or("").to_owned()))
        .collect()
}

fn attempt(host: &str, result: &str) -> (String, String) {
    (host.to_owned(), result.to_owned())
}

async fn provider_uuid(cloud: &Cloud, name: &str) -> String {
    let reply = cloud.server.client().get(&format!("/resource_providers?name={name}")).await;
    reply.body["resource_providers"][0]["uuid"].as_str().unwrap_or_else(|| panic!("no provider {name}")).to_owned()
}

/// Consumers with allocations on the host's root provider.
async fn consumers_on(cloud: &Cloud, host: &str) -> usize {
    let uuid = provider_uuid(cloud, host).await;
    let reply = cloud.server.client().get(&format!("/resource_providers/{uuid}/allocations")).await;
    reply.body["allocations"].as_object().map_or(0, |a| a.len())
}

/// Wait until `host` holds no allocation: without a reschedule the row
/// goes to ERROR first and the allocations go right after (as before
/// reschedules existed), so a reader may see the ERROR a moment earlier.
async fn wait_no_consumers(cloud: &Cloud, host: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while consumers_on(cloud, host).await != 0 {
        assert!(Instant::now() < deadline, "{host} keeps an allocation of a failed build");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Take every free MEMORY_MB of `host` through the placement API (as
/// another service would); returns the consumers to remove afterwards.
async fn fill_memory(cloud: &Cloud, host: &str) -> Vec<Uuid> {
    let placement = cloud.server.client();
    let uuid = provider_uuid(cloud, host).await;
    let inventory = placement.get(&format!("/resource_providers/{uuid}/inventories/MEMORY_MB")).await.body;
    let capacity = ((inventory["total"].as_i64().unwrap_or(0) - inventory["reserved"].as_i64().unwrap_or(0)) as f64
        * inventory["allocation_ratio"].as_f64().unwrap_or(1.0)) as i64;
    let max_unit = inventory["max_unit"].as_i64().unwrap_or(capacity).max(1);
    let mut consumers = Vec::new();
    loop {
        let usages = placement.get(&format!("/resource_providers/{uuid}/usages")).await.body;
        let free = capacity - usages["usages"]["MEMORY_MB"].as_i64().unwrap_or(0);
        if free <= 0 {
            return consumers;
        }
        let (consumer, reply) =
            placement.claim_new(json!({uuid.clone(): {"resources": {"MEMORY_MB": free.min(max_unit)}}})).await;
        assert_eq!(reply.status, 204, "fill {host}: {:?}", reply.body);
        consumers.push(consumer);
    }
}

async fn remove_consumers(cloud: &Cloud, consumers: &[Uuid]) {
    for consumer in consumers {
        let reply = cloud.server.client().call("DELETE", &format!("/allocations/{consumer}"), None).await;
        assert_eq!(reply.status, 204, "{:?}", reply.body);
    }
}

/// Wait until the server is back in `scheduling` after a failed build
/// (held before its reschedule); returns the server.
async fn wait_rescheduling(nova: &Nova, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["OS-EXT-STS:task_state"] == "scheduling" && server["OS-EXT-SRV-ATTR:host"].is_string() {
            return server;
        }
        assert!(Instant::now() < deadline, "server {id} never failed its build: {server}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn setup(nova: &Nova) -> (String, String) {
    let limits = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    (nova.flavor("small", 1, 512, 1).await, nova.image("img", json!({})).await)
}

/// The preferred host fails the build: the server becomes ACTIVE on the
/// alternate after 2 attempts, with one scheduler run; the failed host
/// keeps no allocation; the next boot avoids the failed host at once; a
/// boot forced onto the bad host is not rescheduled.
#[tokio::test]
async fn failed_build_moves_to_the_alternate_without_scheduling_again() {
    let mut cloud = Cloud::start("resched-alt", &[]).await;
    cloud.add_agent(Hosts::new("big", 1, &with(BIG, &["--bad-hosts", "big0"]))).await;
    cloud.add_agent(Hosts::new("mid", 1, MID)).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;

    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "mid0");
    assert_eq!(build_attempts(&nova, &id).await, vec![attempt("big0", "Error"), attempt("mid0", "Success")]);
    assert_eq!(cloud.server.metric("berth_compute_scheduler_runs_total").await, 1, "no second scheduler run");
    assert_eq!(cloud.server.metric("berth_compute_reschedules_total").await, 1);
    assert_eq!(cloud.server.metric("berth_compute_builds_failed_total").await, 1);
    assert_eq!(consumers_on(&cloud, "big0").await, 0, "the failed host's allocation is gone");
    assert_eq!(consumers_on(&cloud, "mid0").await, 1);
    cloud.check_invariants().await;

    // big0 is still the roomiest host, but its failed build counts at once.
    let next = nova.boot_id("vm2", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&next).await["status"], "ACTIVE");
    assert_eq!(build_attempts(&nova, &next).await, vec![attempt("mid0", "Success")]);

    // Forced onto the bad host: no retry, ERROR with the build's own fault.
    let forced = nova.boot("vm3", &flavor, &image, json!({"availability_zone": "nova:big0"})).await;
    assert_eq!(forced.status, 202, "{:?}", forced.body);
    let forced = forced.body["server"]["id"].as_str().expect("id").to_owned();
    let server = nova.wait_settled(&forced).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    let fault = server["fault"]["message"].as_str().unwrap_or("");
    assert!(fault.contains("fake driver failure on big0"), "{server}");
    assert_eq!(build_attempts(&nova, &forced).await, vec![attempt("big0", "Error")]);
    wait_no_consumers(&cloud, "big0").await;
    assert_eq!(cloud.server.metric("berth_compute_reschedules_total").await, 1);
    cloud.check_invariants().await;
}

/// The first alternate is filled through the placement API while the
/// reschedule is held: the build goes to the next alternate. Then with
/// every alternate filled: ERROR, "Exhausted all hosts", no allocation.
#[tokio::test]
async fn alternate_taken_meanwhile_is_skipped() {
    let mut cloud = Cloud::start("resched-taken", &[]).await;
    cloud.add_agent(Hosts::new("big", 1, &with(BIG, &["--bad-hosts", "big0"]))).await;
    cloud.add_agent(Hosts::new("mid", 1, MID)).await;
    cloud.add_agent(Hosts::new("low", 1, LOW)).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;

    let (status, _) = admin(&cloud, "POST", "/test/hold", json!({"point": "before-reschedule"})).await;
    assert_eq!(status, 204);
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let held = wait_rescheduling(&nova, &id).await;
    assert_eq!(held["OS-EXT-SRV-ATTR:host"], "big0", "{held}");
    let filler = fill_memory(&cloud, "mid0").await;
    let (status, _) = admin(&cloud, "POST", "/test/release", json!({"point": "before-reschedule"})).await;
    assert_eq!(status, 204);
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "low0");
    assert_eq!(build_attempts(&nova, &id).await, vec![attempt("big0", "Error"), attempt("low0", "Success")]);
    assert_eq!(consumers_on(&cloud, "big0").await, 0);
    remove_consumers(&cloud, &filler).await;
    cloud.check_invariants().await;

    // Now both alternates of a new boot are taken before its reschedule.
    // big0 has a failed build, so force the first attempt there through a
    // fresh bad host: a new agent whose host is the roomiest.
    cloud
        .add_agent(Hosts::new(
            "huge",
            1,
            &["--vcpus", "64", "--memory-mb", "131072", "--disk-gb", "4000", "--bad-hosts", "huge0"],
        ))
        .await;
    let (status, _) = admin(&cloud, "POST", "/test/hold", json!({"point": "before-reschedule"})).await;
    assert_eq!(status, 204);
    let doomed = nova.boot_id("vm2", &flavor, &image).await;
    let held = wait_rescheduling(&nova, &doomed).await;
    assert_eq!(held["OS-EXT-SRV-ATTR:host"], "huge0", "{held}");
    let mut filler = fill_memory(&cloud, "mid0").await;
    filler.extend(fill_memory(&cloud, "low0").await);
    let (status, _) = admin(&cloud, "POST", "/test/release", json!({"point": "before-reschedule"})).await;
    assert_eq!(status, 204);
    let server = nova.wait_settled(&doomed).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    assert_eq!(
        server["fault"]["message"],
        format!(
            "Exceeded maximum number of retries. Exhausted all hosts available for retrying build failures for \
             instance {doomed}."
        )
        .as_str()
    );
    assert_eq!(build_attempts(&nova, &doomed).await, vec![attempt("huge0", "Error")]);
    for host in ["huge0", "big0"] {
        assert_eq!(consumers_on(&cloud, host).await, 0, "{host}");
    }
    assert_eq!(cloud.server.metric("berth_compute_reschedules_exhausted_total").await, 1);
    assert_eq!(cloud.server.metric("berth_compute_scheduler_runs_total").await, 2, "one per boot");
    remove_consumers(&cloud, &filler).await;
    assert_eq!(project_vcpus(&cloud.server, "admin").await, 1, "only vm1 holds resources");
    cloud.check_invariants().await;
}

/// Every host fails: ERROR after exactly `max_attempts` (3) attempts on 3
/// different hosts, Nova's fault, no allocation; the next boot starts on
/// the one host without failed builds. With `max_attempts` 1 the first
/// failure is final.
#[tokio::test]
async fn every_host_bad_errors_after_max_attempts() {
    let mut cloud = Cloud::start("resched-allbad", &[]).await;
    cloud.add_agent(Hosts::new("bad", 4, &["--bad-hosts", "bad0,bad1,bad2,bad3"])).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;

    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    let attempts = build_attempts(&nova, &id).await;
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(attempts.iter().all(|(_, result)| result == "Error"), "{attempts:?}");
    let mut tried: Vec<String> = attempts.iter().map(|(host, _)| host.clone()).collect();
    tried.sort();
    tried.dedup();
    assert_eq!(tried.len(), 3, "three different hosts: {attempts:?}");
    let message = server["fault"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts 3 for instance {id}. Last \
             exception: Build of instance {id} aborted: fake driver failure on"
        )),
        "{server}"
    );
    assert!(server["OS-EXT-SRV-ATTR:host"].is_null(), "{server}");
    assert_eq!(project_vcpus(&cloud.server, "admin").await, 0, "no allocation left");
    assert_eq!(cloud.server.metric("berth_compute_scheduler_runs_total").await, 1);
    assert_eq!(cloud.server.metric("berth_compute_reschedules_total").await, 2);
    assert_eq!(cloud.server.metric("berth_compute_reschedules_exhausted_total").await, 1);
    cloud.check_invariants().await;

    // The one host never tried is the only one without failed builds.
    let untried = ["bad0", "bad1", "bad2", "bad3"].into_iter().find(|h| !tried.iter().any(|t| t == h)).expect("one");
    let next = nova.boot_id("vm2", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&next).await["status"], "ERROR");
    assert_eq!(build_attempts(&nova, &next).await.first(), Some(&attempt(untried, "Error")));
    cloud.check_invariants().await;
}

#[tokio::test]
async fn max_attempts_one_does_not_reschedule() {
    let mut cloud = Cloud::start("resched-one", &["--scheduler-max-attempts", "1"]).await;
    cloud.add_agent(Hosts::new("big", 1, &with(BIG, &["--bad-hosts", "big0"]))).await;
    cloud.add_agent(Hosts::new("mid", 1, MID)).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ERROR", "{server}");
    assert!(server["fault"]["message"].as_str().unwrap_or("").contains("fake driver failure on big0"), "{server}");
    assert_eq!(build_attempts(&nova, &id).await, vec![attempt("big0", "Error")]);
    wait_no_consumers(&cloud, "big0").await;
    assert_eq!(project_vcpus(&cloud.server, "admin").await, 0);
    assert_eq!(cloud.server.metric("berth_compute_reschedules_total").await, 0);
    cloud.check_invariants().await;
}

/// The server process dies between the failed build and its reschedule:
/// the alternates are in the request spec, so the restarted process
/// finishes the reschedule (its sweep) without running the scheduler.
#[tokio::test]
async fn reschedule_survives_a_restart() {
    let mut cloud = Cloud::start("resched-restart", &[]).await;
    cloud.add_agent(Hosts::new("big", 1, &with(BIG, &["--bad-hosts", "big0"]))).await;
    cloud.add_agent(Hosts::new("mid", 1, MID)).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;
    let (status, _) = admin(&cloud, "POST", "/test/hold", json!({"point": "before-reschedule"})).await;
    assert_eq!(status, 204);
    let id = nova.boot_id("vm1", &flavor, &image).await;
    wait_rescheduling(&nova, &id).await;

    cloud.restart().await;
    let nova = cloud.nova("admin");
    let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(server["OS-EXT-STS:task_state"], "scheduling", "{server}");
    // Past the grace period the sweep takes the reschedule over.
    let (status, _) = admin(&cloud, "POST", "/test/clock", json!({"advance": 11})).await;
    assert_eq!(status, 200);
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "mid0");
    assert_eq!(build_attempts(&nova, &id).await, vec![attempt("big0", "Error"), attempt("mid0", "Success")]);
    assert_eq!(cloud.server.metric("berth_compute_scheduler_runs_total").await, 0, "not scheduled again");
    assert_eq!(consumers_on(&cloud, "big0").await, 0);
    cloud.check_invariants().await;
}

/// With `--auto-disable-after-failed-builds 1` the first failed build
/// disables the host's service and puts `COMPUTE_STATUS_DISABLED` on its
/// node; the build itself is rescheduled.
#[tokio::test]
async fn failing_host_is_auto_disabled_when_asked() {
    let mut cloud = Cloud::start("resched-disable", &["--auto-disable-after-failed-builds", "1"]).await;
    cloud.add_agent(Hosts::new("big", 1, &with(BIG, &["--bad-hosts", "big0"]))).await;
    cloud.add_agent(Hosts::new("mid", 1, MID)).await;
    let nova = cloud.nova("admin");
    let (flavor, image) = setup(&nova).await;
    let id = nova.boot_id("vm1", &flavor, &image).await;
    let server = nova.wait_settled(&id).await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "mid0");
    let services = nova.get("/os-services?binary=nova-compute&host=big0").await;
    assert_eq!(services.status, 200, "{:?}", services.body);
    let service = &services.body["services"][0];
    assert_eq!(service["status"], "disabled", "{service}");
    assert_eq!(service["disabled_reason"], "Auto-disabled due to 1 build failures");
    let uuid = provider_uuid(&cloud, "big0").await;
    let traits = cloud.server.client().get(&format!("/resource_providers/{uuid}/traits")).await.body;
    assert!(traits["traits"].as_array().is_some_and(|t| t.iter().any(|t| t == "COMPUTE_STATUS_DISABLED")), "{traits}");
    assert_eq!(cloud.server.metric("berth_compute_services_auto_disabled_total").await, 1);
    cloud.check_invariants().await;
}
