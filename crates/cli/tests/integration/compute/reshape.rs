//! Reshaping a host's provider tree under load: an agent moves VGPU from
//! the compute node provider to two pGPU children (`--vgpu-layout-file`
//! re-read on SIGHUP, or at start) while servers hold VGPU, in one `POST
//! /reshaper` that moves their allocations too. Readers running
//! concurrently never see VGPU in both places or in neither; a conflicting
//! write in the middle makes the agent refresh and retry; a reshape that
//! cannot fit stops the agent with an error naming the provider.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{Cloud, Hosts, Nova};
use crate::support::Client;

const VGPUS: i64 = 8;
const PER_SERVER: i64 = 2;

/// A cloud with one agent (`{prefix}0`, 8 VGPUs on the root, layout read
/// from a file) and three ACTIVE servers holding 2 VGPUs each.
struct Setup {
    cloud: Cloud,
    nova: Nova,
    placement: Client,
    root: String,
    servers: Vec<String>,
    layout_file: std::path::PathBuf,
    hold_file: std::path::PathBuf,
    log: std::path::PathBuf,
    hosts: Hosts,
}

async fn setup(tag: &str, prefix: &str) -> Setup {
    let mut cloud = Cloud::start(tag, &[]).await;
    let dir = cloud.server.dir.clone();
    let layout_file = dir.join("vgpu-layout");
    let hold_file = dir.join("hold-reshape");
    let log = dir.join("agent.log");
    std::fs::write(&layout_file, "root\n").expect("layout file");
    let (layout_arg, hold_arg) = (layout_file.display().to_string(), hold_file.display().to_string());
    let vgpus = VGPUS.to_string();
    let args = ["--vgpus", &vgpus, "--vgpu-layout-file", &layout_arg, "--test-hold-reshape-file", &hold_arg];
    let hosts = Hosts::new(prefix, 1, &args).logged_to(&log);
    cloud.add_agent(hosts.clone()).await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    let flavor = nova.flavor("vgpu", 1, 512, 1).await;
    let specs = json!({"extra_specs": {"resources:VGPU": PER_SERVER.to_string()}});
    let answer = nova.post(&format!("/flavors/{flavor}/os-extra_specs"), &specs).await;
    assert_eq!(answer.status, 200, "extra specs: {:?}", answer.body);
    let image = nova.image("cirros", json!({})).await;
    let mut servers = Vec::new();
    for idx in 0..3 {
        servers.push(nova.boot_id(&format!("vgpu-{idx}"), &flavor, &image).await);
    }
    for id in &servers {
        let server = nova.wait_settled(id).await;
        assert_eq!(server["status"], "ACTIVE", "{server}");
    }
    let root = provider_uuid(&placement, &format!("{prefix}0")).await.expect("root provider");
    assert_eq!(vgpu_total(&placement, &root).await, Some(VGPUS));
    Setup { cloud, nova, placement, root, servers, layout_file, hold_file, log, hosts }
}

async fn provider_uuid(placement: &Client, name: &str) -> Option<String> {
    let reply = placement.get(&format!("/resource_providers?name={name}")).await;
    reply.body["resource_providers"].as_array()?.first()?["uuid"].as_str().map(str::to_owned)
}

/// The provider's VGPU total (`None`: no VGPU inventory or no provider).
async fn vgpu_total(placement: &Client, uuid: &str) -> Option<i64> {
    let reply = placement.get(&format!("/resource_providers/{uuid}/inventories")).await;
    reply.body["inventories"]["VGPU"]["total"].as_i64()
}

/// Class -> amount over every provider, and the providers holding VGPU.
async fn allocations_of(placement: &Client, consumer: &str) -> (BTreeMap<String, i64>, Vec<String>) {
    let reply = placement.get(&format!("/allocations/{consumer}")).await;
    let mut sums = BTreeMap::new();
    let mut vgpu_on = Vec::new();
    for (provider, entry) in reply.body["allocations"].as_object().into_iter().flatten() {
        for (class, amount) in entry["resources"].as_object().into_iter().flatten() {
            *sums.entry(class.clone()).or_insert(0) += amount.as_i64().unwrap_or(0);
            if class == "VGPU" {
                vgpu_on.push(provider.clone());
            }
        }
    }
    (sums, vgpu_on)
}

async fn wait_for_log(log: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "agent never logged {needle:?}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Readers that run until `stop`: allocation candidates for VGPU:1 (one
/// consistent snapshot per answer: VGPU capacity and usage summed over
/// the provider summaries are constant) and the inventories of the root
/// and its children one by one (linearizable: once any read saw the new
/// layout, no later read sees the old one). Returns observations made.
fn spawn_observers(
    placement: Client,
    root: String,
    children: Vec<String>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, usize)> {
    tokio::spawn(async move {
        let (mut snapshots, mut reads) = (0, 0);
        let mut after = false;
        let mut child_uuids: Vec<Option<String>> = vec![None; children.len()];
        while !stop.load(Ordering::Relaxed) {
            let reply = placement.get("/allocation_candidates?resources=VGPU:1").await;
            assert_eq!(reply.status, 200, "{:?}", reply.body);
            let summaries = reply.body["provider_summaries"].as_object().cloned().unwrap_or_default();
            let mut capacity = 0;
            let mut used = 0;
            let mut holders = 0;
            for summary in summaries.values() {
                if let Some(vgpu) = summary["resources"].get("VGPU") {
                    capacity += vgpu["capacity"].as_i64().unwrap_or(0);
                    used += vgpu["used"].as_i64().unwrap_or(0);
                    holders += 1;
                }
            }
            assert_eq!(capacity, VGPUS, "VGPU capacity in one candidates answer: {summaries:?}");
            assert_eq!(used, 3 * PER_SERVER, "VGPU usage in one candidates answer: {summaries:?}");
            assert!(holders == 1 || holders == 2, "VGPU on {holders} providers");
            if holders == 2 {
                after = true;
            } else {
                assert!(!after, "a candidates answer saw VGPU back on the root after the reshape");
            }
            snapshots += 1;

            let root_has = vgpu_total(&placement, &root).await.is_some();
            assert!(!(root_has && after), "the root's VGPU inventory read after the reshape was seen");
            after |= !root_has;
            reads += 1;
            for (idx, name) in children.iter().enumerate() {
                if child_uuids[idx].is_none() {
                    child_uuids[idx] = provider_uuid(&placement, name).await;
                }
                let Some(uuid) = &child_uuids[idx] else {
                    assert!(!after, "child {name} missing after the reshape was seen");
                    continue;
                };
                let child_has = vgpu_total(&placement, uuid).await.is_some();
                assert!(child_has || !after, "child {name} without VGPU after the reshape was seen");
                after |= child_has;
                reads += 1;
            }
        }
        (snapshots, reads)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vgpu_moves_to_children_with_its_allocations_and_a_conflict_is_retried() {
    let setup = setup("reshape-move", "rsm").await;
    let (placement, root) = (setup.placement.clone(), setup.root.clone());
    let mut before = BTreeMap::new();
    for id in &setup.servers {
        let (sums, on) = allocations_of(&placement, id).await;
        assert_eq!(sums.get("VGPU"), Some(&PER_SERVER));
        assert_eq!(on, vec![root.clone()]);
        before.insert(id.clone(), sums);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let children = vec!["rsm0_pgpu0".to_owned(), "rsm0_pgpu1".to_owned()];
    let observers = spawn_observers(placement.clone(), root.clone(), children.clone(), stop.clone());

    // Hold the reshape between its read and its POST, then write to the
    // root (a trait: its generation moves), then let it go: 409, refresh,
    // retry.
    std::fs::write(&setup.hold_file, "").expect("hold file");
    std::fs::write(&setup.layout_file, "children\n").expect("layout file");
    setup.cloud.hangup_agent(0);
    wait_for_log(&setup.log, "reshape held by the test hook").await;
    assert_eq!(placement.put("/traits/CUSTOM_RESHAPE_RACE", &json!({})).await.status / 100, 2);
    let traits = placement.get(&format!("/resource_providers/{root}/traits")).await.body;
    let mut names: Vec<Value> = traits["traits"].as_array().cloned().unwrap_or_default();
    names.push(json!("CUSTOM_RESHAPE_RACE"));
    let body = json!({"resource_provider_generation": traits["resource_provider_generation"], "traits": names});
    let reply = placement.put(&format!("/resource_providers/{root}/traits"), &body).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    std::fs::remove_file(&setup.hold_file).expect("release");
    let log = wait_for_log(&setup.log, "reshape conflict (attempt 1 of 4)").await;
    assert!(!log.contains("attempt 4 of 4"), "{log}");

    // Done when both children hold VGPU.
    let deadline = Instant::now() + Duration::from_secs(30);
    let child_uuids = loop {
        let mut found = Vec::new();
        for name in &children {
            if let Some(uuid) = provider_uuid(&placement, name).await {
                if vgpu_total(&placement, &uuid).await.is_some() {
                    found.push(uuid);
                }
            }
        }
        if found.len() == 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "the reshape never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Let the readers see the new layout for a while.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (snapshots, reads) = observers.await.expect("observers");
    assert!(snapshots >= 5 && reads >= 5, "too few observations: {snapshots} snapshots, {reads} reads");

    assert_eq!(vgpu_total(&placement, &root).await, None, "VGPU left the root");
    assert_eq!(
        vgpu_total(&placement, &child_uuids[0]).await.unwrap_or(0)
            + vgpu_total(&placement, &child_uuids[1]).await.unwrap_or(0),
        VGPUS
    );
    for id in &setup.servers {
        let (sums, on) = allocations_of(&placement, id).await;
        assert_eq!(sums, before[id], "server {id} keeps exactly its amounts");
        assert!(on.iter().all(|p| child_uuids.contains(p)), "{id}'s VGPU is on the children: {on:?}");
    }
    let usages = placement.get(&format!("/resource_providers/{root}/usages")).await.body;
    assert!(usages["usages"].get("VGPU").is_none(), "{usages}");
    // The agent lives on and its hosts still take work.
    let mut cloud = setup.cloud;
    assert!(cloud.wait_agent_exit(0, Duration::from_millis(200)).await.is_none(), "the agent stopped");
    let id = setup.servers[0].clone();
    assert_eq!(setup.nova.delete(&format!("/servers/{id}")).await.status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    while setup.nova.get(&format!("/servers/{id}")).await.status != 404 {
        assert!(Instant::now() < deadline, "delete never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reshape_that_cannot_fit_stops_the_agent_and_a_restart_reshapes_on_start() {
    let setup = setup("reshape-fail", "rsf").await;
    let (placement, root) = (setup.placement.clone(), setup.root.clone());
    let mut before = BTreeMap::new();
    for id in &setup.servers {
        before.insert(id.clone(), allocations_of(&placement, id).await);
    }
    // Two pGPUs of two VGPUs: 4 places for 6 allocated units.
    std::fs::write(&setup.layout_file, "children:2x2\n").expect("layout file");
    let mut cloud = setup.cloud;
    cloud.hangup_agent(0);
    let status = cloud.wait_agent_exit(0, Duration::from_secs(30)).await.expect("the agent stops");
    assert!(!status.success(), "a failed reshape exits non-zero: {status}");
    let log = std::fs::read_to_string(&setup.log).unwrap_or_default();
    assert!(log.contains(&format!("reshaping the provider tree of host rsf0 (root provider {root})")), "{log}");
    assert!(log.contains("the VGPU allocations cannot move"), "{log}");
    // Nothing moved.
    assert_eq!(vgpu_total(&placement, &root).await, Some(VGPUS));
    for id in &setup.servers {
        assert_eq!(allocations_of(&placement, id).await, before[id], "{id} untouched");
    }

    // A new agent for the host starting with a layout that fits reshapes
    // at start.
    std::fs::write(&setup.layout_file, "children\n").expect("layout file");
    cloud.add_agent(setup.hosts.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while vgpu_total(&placement, &root).await.is_some() {
        assert!(Instant::now() < deadline, "no reshape at start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut child_total = 0;
    for name in ["rsf0_pgpu0", "rsf0_pgpu1"] {
        let uuid = provider_uuid(&placement, name).await.expect("child");
        child_total += vgpu_total(&placement, &uuid).await.unwrap_or(0);
    }
    assert_eq!(child_total, VGPUS);
    for id in &setup.servers {
        let (sums, on) = allocations_of(&placement, id).await;
        assert_eq!(sums, before[id].0, "{id} keeps exactly its amounts");
        assert!(!on.contains(&root), "{id}'s VGPU left the root");
    }
    cloud.check_invariants().await;
}
