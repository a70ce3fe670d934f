//! `berth bench soak`: the server lifecycle under churn and agent crashes,
//! then an audit of placement against the compute API.
//!
//! Starts berth (with a short `service_down_time` and a frequent heal) and
//! `--agents` agent processes playing `--hosts` hosts, fills the cloud to
//! `--population` servers, then for `--duration-secs`:
//!
//! - `--concurrency` clients each take an idle server (or none, to
//!   create one) and run one operation to its end: create, delete, resize
//!   (then confirm or revert), cold migrate (then confirm), live migrate,
//!   or start a server an evacuation left stopped. Each waits until the
//!   server settles (no task, a stable status) or `--op-timeout-secs`;
//! - every `--kill-every-secs` a random agent process is killed with
//!   SIGKILL and restarted after a random 2..`--max-down-secs` seconds;
//!   when that is longer than `service_down_time`, its hosts go down and
//!   up to `--evacuate-max` of their servers are evacuated meanwhile.
//!
//! Then the churn stops, every agent is running again, moves left in
//! `VERIFY_RESIZE` are confirmed and everything is waited for. The audit
//! reads every server (`/servers/detail`) and every provider's
//! allocations and inventories from placement, and reports:
//!
//! - **drift**: a server whose allocation is not exactly its flavor on its
//!   node (none for a server without a host);
//! - **orphans**: consumers with allocations that are no server;
//! - **over capacity**: a provider whose usage of a class exceeds
//!   `(total - reserved) * allocation_ratio`;
//!
//! then runs the heal once (`POST /admin/v1/heal`, after its grace) and
//! prints what it found, next to what the periodic heal found and fixed
//! during the churn (its metrics). Operations/s and every outcome by kind
//! are printed; the exit status is non-zero when the audit fails.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{
    hosts_ready, metric, ms, percentile, rss_mib, spawn_berth, Agent, Binaries, Nova, ProcessArgs, Rng,
};

/// Options of `berth bench soak`.
#[derive(Debug, clap::Args)]
pub(crate) struct SoakOpts {
    /// Compute hosts (agents' hosts).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Agent processes the hosts are spread over (a kill takes one down).
    #[arg(long, default_value_t = 20)]
    agents: usize,
    /// Servers kept alive (creates and deletes hover around it).
    #[arg(long, default_value_t = 2500)]
    population: usize,
    /// How long the churn runs (s).
    #[arg(long, default_value_t = 600)]
    duration_secs: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// vCPUs per host (allocation ratio 4).
    #[arg(long, default_value_t = 8)]
    host_vcpus: i64,
    /// RAM per host (MiB); the flavors take 512, 1024 and 2048.
    #[arg(long, default_value_t = 4096)]
    host_memory_mb: i64,
    /// Disk per host (GiB).
    #[arg(long, default_value_t = 200)]
    host_disk_gb: i64,
    /// Kill a random agent process every this many seconds (0: never).
    #[arg(long, default_value_t = 20)]
    kill_every_secs: u64,
    /// A killed agent is restarted after 2..this many seconds.
    #[arg(long, default_value_t = 60)]
    max_down_secs: u64,
    /// `service_down_time` of the server (s).
    #[arg(long, default_value_t = 20)]
    service_down_time: u64,
    /// Servers evacuated from the hosts of an agent that stays down.
    #[arg(long, default_value_t = 10)]
    evacuate_max: usize,
    /// How long one operation may take before it counts as stuck (s).
    #[arg(long, default_value_t = 180)]
    op_timeout_secs: u64,
    /// How long the end may wait for everything to settle (s).
    #[arg(long, default_value_t = 300)]
    settle_secs: u64,
    /// Poll interval while waiting for a server (ms).
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[command(flatten)]
    run: ProcessArgs,
}

/// The heal's grace during a soak (s): short, so the final heal can act
/// soon after the churn stops.
const HEAL_GRACE_SECS: u64 = 20;

/// Flavors: (name, vCPUs, MiB, GiB).
const FLAVORS: [(&str, i64, i64, i64); 3] = [("soak1", 1, 512, 5), ("soak2", 2, 1024, 10), ("soak4", 4, 2048, 20)];

/// Statuses a server rests in (with no task).
const SETTLED: &[&str] = &["ACTIVE", "SHUTOFF", "VERIFY_RESIZE", "ERROR", "SHELVED", "SHELVED_OFFLOADED"];

/// A server the clients know, with where it was last seen.
#[derive(Debug, Clone)]
struct Server {
    id: String,
    host: Option<String>,
    status: String,
    /// The flavor's name.
    flavor: String,
}

/// What the clients and the chaos share.
struct Shared {
    nova: Nova,
    /// Servers no one is working on.
    idle: Mutex<Vec<Server>>,
    /// Servers alive (idle or being worked on).
    alive: AtomicUsize,
    /// Servers given up on (an operation timed out); settled at the end.
    stuck: Mutex<Vec<String>>,
    /// Outcome counts by `operation:outcome`.
    outcomes: Mutex<BTreeMap<String, u64>>,
    /// The first error message seen for each refusal or ERROR outcome.
    samples: Mutex<BTreeMap<String, String>>,
    /// Durations of completed operations by operation.
    times: Mutex<BTreeMap<&'static str, Vec<Duration>>>,
    flavors: Vec<String>,
    image: String,
    stop: AtomicBool,
    poll: Duration,
    op_timeout: Duration,
}

tokio::task_local! {
    /// The process a client talks to (its own writes are then visible to
    /// its own reads, as with one process).
    static PROCESS: Nova;
}

impl Shared {
    /// The client's process, or the first one.
    fn api(&self) -> Nova {
        PROCESS.try_with(Nova::clone).unwrap_or_else(|_| self.nova.clone())
    }

    fn count(&self, op: &str, outcome: &str) {
        if let Ok(mut map) = self.outcomes.lock() {
            *map.entry(format!("{op}:{outcome}")).or_default() += 1;
        }
    }

    /// An outcome naming a refusal (`refused_<status>`), with a sample of
    /// its message kept for the report.
    fn refused(&self, op: &str, status: u16, body: &Value) -> String {
        let outcome = format!("refused_{status}");
        self.sample(&format!("{op}:{outcome}"), body);
        outcome
    }

    fn sample(&self, key: &str, body: &Value) {
        if let Ok(mut samples) = self.samples.lock() {
            samples.entry(key.to_owned()).or_insert_with(|| {
                let message = body
                    .as_object()
                    .and_then(|o| o.values().next())
                    .and_then(|v| v["message"].as_str().map(str::to_owned))
                    .or_else(|| body["fault"]["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| body.to_string());
                message.chars().take(200).collect()
            });
        }
    }

    fn took(&self, op: &'static str, took: Duration) {
        if let Ok(mut map) = self.times.lock() {
            map.entry(op).or_default().push(took);
        }
    }

    fn take_idle(&self, rng: &mut Rng) -> Option<Server> {
        let mut idle = self.idle.lock().ok()?;
        if idle.is_empty() {
            return None;
        }
        let at = (rng.next() % idle.len() as u64) as usize;
        Some(idle.swap_remove(at))
    }

    fn give_back(&self, server: Server) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(server);
        }
    }

    fn give_up(&self, id: &str) {
        if let Ok(mut stuck) = self.stuck.lock() {
            stuck.push(id.to_owned());
        }
    }

    /// Waits until the server rests: `Ok(None)` when it is gone,
    /// `Err` on timeout.
    async fn settle(&self, id: &str) -> anyhow::Result<Option<Value>> {
        let deadline = Instant::now() + self.op_timeout;
        loop {
            tokio::time::sleep(self.poll).await;
            let (status, body) = self.api().call(Method::GET, &format!("/servers/{id}"), None).await?;
            if status == 404 {
                return Ok(None);
            }
            let server = &body["server"];
            let state = server["status"].as_str().unwrap_or("");
            if status == 200 && server["OS-EXT-STS:task_state"].is_null() && SETTLED.contains(&state) {
                return Ok(Some(server.clone()));
            }
            anyhow::ensure!(Instant::now() < deadline, "server {id} still {state} after the timeout");
        }
    }

    async fn action(&self, id: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        self.api().call(Method::POST, &format!("/servers/{id}/action"), Some(body)).await
    }

    /// The outcome of a server that ended in an unexpected status (with
    /// its fault kept as a sample).
    fn ended(&self, op: &str, server: &Value) -> String {
        let outcome = format!("ended_{}", server["status"].as_str().unwrap_or("?"));
        if server["status"] == "ERROR" {
            self.sample(&format!("{op}:{outcome}"), server);
        }
        outcome
    }
}

fn seen(id: &str, server: &Value) -> Server {
    Server {
        id: id.to_owned(),
        host: server["OS-EXT-SRV-ATTR:host"].as_str().map(str::to_owned),
        status: server["status"].as_str().unwrap_or("").to_owned(),
        flavor: server["flavor"]["original_name"].as_str().unwrap_or("").to_owned(),
    }
}

/// One client: operations until told to stop.
async fn client(shared: Arc<Shared>, population: usize, seed: u64) -> anyhow::Result<()> {
    let mut rng = Rng(seed);
    while !shared.stop.load(Ordering::SeqCst) {
        let alive = shared.alive.load(Ordering::SeqCst);
        let roll = rng.unit();
        // Creates and deletes keep the population near its target; the
        // rest are moves of an idle server.
        if alive < population && (roll < 0.4 || alive < population * 9 / 10) {
            create(&shared, &mut rng).await?;
            continue;
        }
        let Some(server) = shared.take_idle(&mut rng) else {
            tokio::time::sleep(shared.poll).await;
            continue;
        };
        let began = Instant::now();
        let (op, outcome) = if server.status == "SHUTOFF" {
            ("start", start(&shared, server).await?)
        } else if server.status == "VERIFY_RESIZE" {
            // A confirm refused earlier: confirm again.
            ("confirm", simple_action(&shared, server, "confirm", json!({"confirmResize": null})).await?)
        } else if roll < 0.4 {
            ("delete", delete(&shared, server).await?)
        } else if roll < 0.7 {
            ("resize", cold_move(&shared, server, Some(&mut rng)).await?)
        } else if roll < 0.85 {
            ("migrate", cold_move(&shared, server, None).await?)
        } else {
            ("live_migrate", live_migrate(&shared, server).await?)
        };
        shared.count(op, &outcome);
        shared.took(op, began.elapsed());
    }
    Ok(())
}

async fn create(shared: &Shared, rng: &mut Rng) -> anyhow::Result<()> {
    let began = Instant::now();
    let flavor = rng.pick(&[0usize, 0, 1, 1, 2]);
    let body = json!({"server": {"name": "soak", "flavorRef": shared.flavors[flavor], "imageRef": shared.image,
                                 "networks": "none"}});
    let (status, answer) = shared.api().call(Method::POST, "/servers", Some(body)).await?;
    if status != 202 {
        let outcome = shared.refused("create", status, &answer);
        shared.count("create", &outcome);
        return Ok(());
    }
    let id = answer["server"]["id"].as_str().unwrap_or("").to_owned();
    shared.alive.fetch_add(1, Ordering::SeqCst);
    match shared.settle(&id).await {
        Ok(Some(server)) if server["status"] == "ACTIVE" => {
            shared.count("create", "active");
            shared.took("create", began.elapsed());
            shared.give_back(seen(&id, &server));
        }
        Ok(Some(server)) => {
            // ERROR (out of hosts or alternates): Nova's user deletes it.
            let outcome = shared.ended("create", &server);
            shared.count("create", &outcome);
            let outcome = delete(shared, seen(&id, &server)).await?;
            shared.count("delete_after_error", &outcome);
        }
        Ok(None) => {
            shared.count("create", "vanished");
            shared.alive.fetch_sub(1, Ordering::SeqCst);
        }
        Err(_) => {
            shared.count("create", "timeout");
            shared.give_up(&id);
        }
    }
    Ok(())
}

async fn delete(shared: &Shared, server: Server) -> anyhow::Result<String> {
    let (status, body) = shared.api().call(Method::DELETE, &format!("/servers/{}", server.id), None).await?;
    if status != 204 {
        let outcome = shared.refused("delete", status, &body);
        shared.give_back(server);
        return Ok(outcome);
    }
    let deadline = Instant::now() + shared.op_timeout;
    loop {
        tokio::time::sleep(shared.poll).await;
        let (status, _) = shared.api().call(Method::GET, &format!("/servers/{}", server.id), None).await?;
        if status == 404 {
            shared.alive.fetch_sub(1, Ordering::SeqCst);
            return Ok("deleted".into());
        }
        if Instant::now() > deadline {
            shared.give_up(&server.id);
            return Ok("timeout".into());
        }
    }
}

/// Resize (with `rng`: to another flavor, then confirm or revert) or
/// cold migrate (then confirm).
async fn cold_move(shared: &Shared, server: Server, rng: Option<&mut Rng>) -> anyhow::Result<String> {
    let op = if rng.is_some() { "resize" } else { "migrate" };
    let (body, revert) = match rng {
        Some(rng) => {
            // Another flavor than its own (Nova refuses the same one).
            let others: Vec<usize> = (0..FLAVORS.len()).filter(|i| FLAVORS[*i].0 != server.flavor).collect();
            let flavor = shared.flavors[rng.pick(&others)].clone();
            (json!({"resize": {"flavorRef": flavor}}), rng.unit() < 0.3)
        }
        None => (json!({"migrate": null}), false),
    };
    let (status, answer) = shared.action(&server.id, body).await?;
    if status != 202 {
        let outcome = shared.refused(op, status, &answer);
        shared.give_back(server);
        return Ok(outcome);
    }
    let moved = match shared.settle(&server.id).await {
        Ok(Some(moved)) => moved,
        Ok(None) => return Ok("vanished".into()),
        Err(_) => {
            shared.give_up(&server.id);
            return Ok("timeout".into());
        }
    };
    if moved["status"] != "VERIFY_RESIZE" {
        // No room (Nova's NoValidHost: the server stays as it was), or
        // ERROR.
        let outcome = shared.ended(op, &moved);
        shared.give_back(seen(&server.id, &moved));
        return Ok(outcome);
    }
    let (body, done) = if revert {
        (json!({"revertResize": null}), "reverted")
    } else {
        (json!({"confirmResize": null}), "confirmed")
    };
    let (status, answer) = shared.action(&server.id, body).await?;
    if status != 202 && status != 204 {
        // Left in VERIFY_RESIZE: the end confirms it.
        shared.give_back(seen(&server.id, &moved));
        return Ok(format!("{done}_{}", shared.refused(&format!("{op}:{done}"), status, &answer)));
    }
    match shared.settle(&server.id).await {
        Ok(Some(after)) => {
            let outcome = match after["status"].as_str() {
                Some("ACTIVE") | Some("SHUTOFF") => done.to_owned(),
                _ => format!("{done}_{}", shared.ended(&format!("{op}:{done}"), &after)),
            };
            shared.give_back(seen(&server.id, &after));
            Ok(outcome)
        }
        Ok(None) => Ok("vanished".into()),
        Err(_) => {
            shared.give_up(&server.id);
            Ok(format!("{done}_timeout"))
        }
    }
}

async fn live_migrate(shared: &Shared, server: Server) -> anyhow::Result<String> {
    let (status, answer) =
        shared.action(&server.id, json!({"os-migrateLive": {"host": null, "block_migration": "auto"}})).await?;
    if status != 202 {
        let outcome = shared.refused("live_migrate", status, &answer);
        shared.give_back(server);
        return Ok(outcome);
    }
    match shared.settle(&server.id).await {
        Ok(Some(after)) => {
            let now = seen(&server.id, &after);
            let outcome = match (now.status.as_str(), now.host == server.host) {
                ("ACTIVE", false) => "moved".to_owned(),
                ("ACTIVE", true) => "stayed".to_owned(),
                _ => shared.ended("live_migrate", &after),
            };
            shared.give_back(now);
            Ok(outcome)
        }
        Ok(None) => Ok("vanished".into()),
        Err(_) => {
            shared.give_up(&server.id);
            Ok("timeout".into())
        }
    }
}

async fn start(shared: &Shared, server: Server) -> anyhow::Result<String> {
    simple_action(shared, server, "start", json!({"os-start": null})).await
}

/// An action that should leave the server ACTIVE.
async fn simple_action(shared: &Shared, server: Server, op: &str, body: Value) -> anyhow::Result<String> {
    let (status, answer) = shared.action(&server.id, body).await?;
    if status != 202 && status != 204 {
        let outcome = shared.refused(op, status, &answer);
        shared.give_back(server);
        return Ok(outcome);
    }
    match shared.settle(&server.id).await {
        Ok(Some(after)) => {
            let outcome = if after["status"] == "ACTIVE" { "active".to_owned() } else { shared.ended(op, &after) };
            shared.give_back(seen(&server.id, &after));
            Ok(outcome)
        }
        Ok(None) => Ok("vanished".into()),
        Err(_) => {
            shared.give_up(&server.id);
            Ok("timeout".into())
        }
    }
}

/// One agent process and the hosts it plays.
struct Slot {
    first: usize,
    count: usize,
    agent: Option<Agent>,
}

impl Slot {
    fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        (self.first..self.first + self.count).map(|i| format!("soak-{i}"))
    }
}

struct AgentSpec {
    exe: std::path::PathBuf,
    /// The processes; agent `i` talks to `urls[i % len]`.
    urls: Vec<String>,
    opts_args: Vec<String>,
}

impl AgentSpec {
    fn spawn(&self, idx: usize, slot: &Slot) -> anyhow::Result<Agent> {
        let child = Command::new(&self.exe)
            .args(["agent", "--url", &self.urls[idx % self.urls.len()], "--log", "error", "--prefix", "soak-"])
            .args(["--agent-id", &format!("soak-agent-{idx}")])
            .args(["--hosts", &slot.count.to_string(), "--first-index", &slot.first.to_string()])
            .args(["--report-interval-secs", "5", "--concurrency", "8"])
            .args(&self.opts_args)
            .stdout(Stdio::null())
            .spawn()
            .context("starting an agent")?;
        Ok(Agent(child))
    }
}

/// What the chaos did.
#[derive(Default)]
struct ChaosReport {
    kills: usize,
    restarts: usize,
    went_down: usize,
    evacuations: usize,
}

/// Kills and restarts agents until told to stop, then restarts every
/// dead one. Evacuates from hosts that go down.
async fn chaos(
    shared: Arc<Shared>,
    spec: AgentSpec,
    mut slots: Vec<Slot>,
    opts: (u64, u64, u64, usize),
    seed: u64,
) -> anyhow::Result<(Vec<Slot>, ChaosReport)> {
    let (kill_every, max_down, down_time, evacuate_max) = opts;
    let mut rng = Rng(seed);
    let mut report = ChaosReport::default();
    // (slot, restart at, evacuate at (if it stays down long enough)).
    let mut dead: Vec<(usize, Instant, Option<Instant>)> = Vec::new();
    let mut next_kill = Instant::now() + Duration::from_secs(kill_every.max(1));
    let mut evacuations = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Instant::now();
        if kill_every > 0 && now >= next_kill {
            next_kill = now + Duration::from_secs(kill_every);
            let live: Vec<usize> = (0..slots.len()).filter(|i| slots[*i].agent.is_some()).collect();
            if live.len() > 1 {
                let idx = rng.pick(&live);
                if let Some(mut agent) = slots[idx].agent.take() {
                    // SIGKILL: no goodbye, tasks in flight are lost.
                    let _ = agent.0.kill();
                    let _ = agent.0.wait();
                }
                report.kills += 1;
                let down_for = rng.range(2, max_down.max(2) as i64) as u64;
                let evacuate = (down_for > down_time + 10).then(|| now + Duration::from_secs(down_time + 5));
                dead.push((idx, now + Duration::from_secs(down_for), evacuate));
            }
        }
        for entry in &mut dead {
            let Some(at) = entry.2 else { continue };
            if now < at {
                continue;
            }
            entry.2 = None;
            report.went_down += 1;
            let hosts: HashSet<String> = slots[entry.0].hosts().collect();
            let chosen: Vec<Server> = {
                let mut idle = shared.idle.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                let mut chosen = Vec::new();
                let mut i = 0;
                while i < idle.len() && chosen.len() < evacuate_max {
                    if idle[i].host.as_ref().is_some_and(|h| hosts.contains(h)) && idle[i].status == "ACTIVE" {
                        chosen.push(idle.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
                chosen
            };
            for server in chosen {
                report.evacuations += 1;
                let shared = shared.clone();
                evacuations.push(tokio::spawn(async move { evacuate(&shared, server).await }));
            }
        }
        let mut still = Vec::new();
        for (idx, at, evacuate) in dead.drain(..) {
            if now >= at {
                slots[idx].agent = Some(spec.spawn(idx, &slots[idx])?);
                report.restarts += 1;
            } else {
                still.push((idx, at, evacuate));
            }
        }
        dead = still;
    }
    for (idx, _, _) in dead {
        slots[idx].agent = Some(spec.spawn(idx, &slots[idx])?);
        report.restarts += 1;
    }
    for evacuation in evacuations {
        evacuation.await??;
    }
    Ok((slots, report))
}

async fn evacuate(shared: &Shared, server: Server) -> anyhow::Result<()> {
    let began = Instant::now();
    // The hosts are seen down through the cells' service rows (refreshed
    // every couple of seconds): wait for that.
    let (mut status, mut answer) = (0, Value::Null);
    for _ in 0..20 {
        (status, answer) = shared.action(&server.id, json!({"evacuate": {}})).await?;
        if status != 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if status != 200 && status != 202 {
        let outcome = shared.refused("evacuate", status, &answer);
        shared.count("evacuate", &outcome);
        shared.give_back(server);
        return Ok(());
    }
    match shared.settle(&server.id).await {
        Ok(Some(after)) => {
            let now = seen(&server.id, &after);
            let outcome = match (now.status.as_str(), now.host == server.host) {
                (_, true) => {
                    shared.ended("evacuate:stayed", &after);
                    format!("stayed_{}", now.status)
                }
                ("SHUTOFF" | "ACTIVE", false) => "moved".to_owned(),
                (_, false) => shared.ended("evacuate", &after),
            };
            shared.count("evacuate", &outcome);
            shared.took("evacuate", began.elapsed());
            shared.give_back(now);
        }
        Ok(None) => shared.count("evacuate", "vanished"),
        Err(_) => {
            shared.count("evacuate", "timeout");
            shared.give_up(&server.id);
        }
    }
    Ok(())
}

pub(crate) async fn run(opts: SoakOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let mut serve_args: Vec<String> = vec![
        "--service-down-time".into(),
        opts.service_down_time.to_string(),
        "--heal-every-ticks".into(),
        "50".into(),
        "--heal-grace-secs".into(),
        HEAL_GRACE_SECS.to_string(),
    ];
    serve_args.extend(opts.run.serve_arg.iter().cloned());
    let mut servers = Vec::new();
    for _ in 0..opts.run.processes.max(1) {
        servers.push(spawn_berth(binaries, &serve_args).await?);
    }
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let url = urls[0].clone();
    let started = Instant::now();
    let spec = AgentSpec {
        exe: binaries.agent.clone(),
        urls: urls.clone(),
        opts_args: [
            vec![
                "--vcpus".to_owned(),
                opts.host_vcpus.to_string(),
                "--memory-mb".to_owned(),
                opts.host_memory_mb.to_string(),
                "--disk-gb".to_owned(),
                opts.host_disk_gb.to_string(),
            ],
            opts.run.agent_arg.clone(),
        ]
        .concat(),
    };
    let per_agent = opts.hosts.div_ceil(opts.agents.max(1));
    let mut slots = Vec::new();
    for first in (0..opts.hosts).step_by(per_agent.max(1)) {
        let slot = Slot { first, count: per_agent.min(opts.hosts - first), agent: None };
        slots.push(slot);
    }
    for (idx, slot) in slots.iter_mut().enumerate() {
        let agent = spec.spawn(idx, slot)?;
        slot.agent = Some(agent);
    }
    hosts_ready(&url, opts.hosts).await?;
    println!("{} hosts on {} agents ready in {:.1} s", opts.hosts, slots.len(), started.elapsed().as_secs_f64());

    let nova = Nova::new(&format!("{url}/compute/v2.1"), opts.concurrency * 2)?;
    let (status, _) = nova
        .call(
            Method::PUT,
            "/os-quota-sets/admin",
            Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
        )
        .await?;
    anyhow::ensure!(status == 200, "quota update: {status}");
    let mut flavors = Vec::new();
    for (name, vcpus, ram, disk) in FLAVORS {
        let body = json!({"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}});
        let (status, flavor) = nova.call(Method::POST, "/flavors", Some(body)).await?;
        anyhow::ensure!(status == 200, "flavor create: {status}");
        flavors.push(flavor["flavor"]["id"].as_str().unwrap_or("").to_owned());
    }
    let glance = nova.at(&format!("{url}/image/v2"), "image 2.0");
    let (_, image) = glance
        .call(
            Method::POST,
            "/images",
            Some(json!({"name": "soak", "disk_format": "qcow2", "container_format": "bare", "visibility": "public"})),
        )
        .await?;
    let image = image["id"].as_str().unwrap_or("").to_owned();
    nova.upload_image(&url, &image).await?;

    let processes: Vec<Nova> = urls.iter().map(|u| nova.at(&format!("{u}/compute/v2.1"), "compute 2.96")).collect();
    let shared = Arc::new(Shared {
        nova: nova.clone(),
        idle: Mutex::default(),
        alive: AtomicUsize::new(0),
        stuck: Mutex::default(),
        outcomes: Mutex::default(),
        samples: Mutex::default(),
        times: Mutex::default(),
        flavors,
        image,
        stop: AtomicBool::new(false),
        poll: Duration::from_millis(opts.poll_ms),
        op_timeout: Duration::from_secs(opts.op_timeout_secs),
    });

    // Fill to the population first (no chaos yet).
    let fill_began = Instant::now();
    let mut fillers = Vec::new();
    let per = opts.population.div_ceil(opts.concurrency.max(1));
    for w in 0..opts.concurrency.max(1) {
        let shared = shared.clone();
        fillers.push(tokio::spawn(PROCESS.scope(processes[w % processes.len()].clone(), async move {
            let mut rng = Rng(opts.seed ^ (w as u64) << 32);
            for _ in 0..per {
                create(&shared, &mut rng).await?;
            }
            Ok::<(), anyhow::Error>(())
        })));
    }
    for filler in fillers {
        filler.await??;
    }
    let filled = shared.alive.load(Ordering::SeqCst);
    println!("filled to {filled} servers in {:.1} s", fill_began.elapsed().as_secs_f64());
    shared.outcomes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clear();
    shared.times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clear();
    shared.samples.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clear();

    let heal_before = heal_metrics(&urls).await;
    let counters_before = lifecycle_metrics(&urls).await;
    let churn_began = Instant::now();
    let chaos_task = tokio::spawn(chaos(
        shared.clone(),
        spec,
        slots,
        (opts.kill_every_secs, opts.max_down_secs, opts.service_down_time, opts.evacuate_max),
        opts.seed.wrapping_mul(31),
    ));
    let mut clients = Vec::new();
    for w in 0..opts.concurrency.max(1) {
        let shared = shared.clone();
        let seed = opts.seed.wrapping_add(1 + w as u64).wrapping_mul(0x9E37_79B9);
        let process = processes[w % processes.len()].clone();
        clients.push(tokio::spawn(PROCESS.scope(process, client(shared, opts.population, seed))));
    }
    let mut rss_peak = 0.0f64;
    while churn_began.elapsed() < Duration::from_secs(opts.duration_secs) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss_peak = rss_peak.max(servers.iter().map(|s| rss_mib(s.child.id())).fold(0.0, f64::max));
    }
    shared.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await??;
    }
    let churn = churn_began.elapsed();
    let (slots, chaos_report) = chaos_task.await??;

    // Report the churn.
    let outcomes = shared.outcomes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let ops: u64 = outcomes.iter().filter(|(k, _)| !k.starts_with("evacuate:")).map(|(_, v)| v).sum();
    println!(
        "churn: {:.0} s, {} clients, {} operations: {:.1} operations/s (each to its end)",
        churn.as_secs_f64(),
        opts.concurrency,
        ops,
        ops as f64 / churn.as_secs_f64()
    );
    println!(
        "  agents: {} killed (SIGKILL), {} restarted, {} stayed down past service_down_time; {} evacuations",
        chaos_report.kills, chaos_report.restarts, chaos_report.went_down, chaos_report.evacuations
    );
    println!("  outcomes (operation:outcome count):");
    for (kind, n) in &outcomes {
        println!("    {kind:<32} {n}");
    }
    let samples = shared.samples.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    if !samples.is_empty() {
        println!("  a message of each refusal and ERROR:");
        for (kind, message) in &samples {
            println!("    {kind}: {message}");
        }
    }
    let times = shared.times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    for (op, mut list) in times {
        list.sort();
        println!(
            "  {op:<14} p50 {:>8.1} ms  p99 {:>8.1} ms  ({} runs)",
            ms(percentile(&list, 0.5)),
            ms(percentile(&list, 0.99)),
            list.len()
        );
    }
    let counters_after = lifecycle_metrics(&urls).await;
    for ((name, before), (_, after)) in counters_before.iter().zip(&counters_after) {
        println!("  {name} {}", after - before);
    }

    // Settle: every agent runs; moves waiting for a confirm get it.
    let settle_began = Instant::now();
    wait_all_up(&nova, opts.hosts, Duration::from_secs(120)).await?;
    let stuck = settle_all(&nova, Duration::from_secs(opts.settle_secs), shared.poll).await?;
    println!(
        "settled in {:.1} s ({} operations had timed out during the churn; {} servers still unsettled)",
        settle_began.elapsed().as_secs_f64(),
        shared.stuck.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len(),
        stuck.len()
    );
    for (id, status) in stuck.iter().take(10) {
        println!("    unsettled: {id} {status}");
    }

    // Audit, before the final heal can mend anything.
    let audit = audit(&nova, &url).await?;
    audit.print();
    let heal_during = heal_metrics(&urls).await;
    println!(
        "  periodic heal during the churn: {} runs, {} orphans removed, {} allocations created, {} findings left",
        heal_during[0] - heal_before[0],
        heal_during[1] - heal_before[1],
        heal_during[2] - heal_before[2],
        heal_during[3] - heal_before[3]
    );
    // The final heal only looks at what is older than its grace.
    tokio::time::sleep(Duration::from_secs(HEAL_GRACE_SECS + 1)).await;
    let resp =
        reqwest::Client::new().post(format!("{url}/admin/v1/heal")).header("x-auth-token", "admin").send().await?;
    let healed: Value = resp.json().await?;
    let count = |key: &str| healed[key].as_array().map(Vec::len).unwrap_or(0);
    println!(
        "  final heal: {} orphans removed, {} allocations created, {} findings",
        count("orphans_removed"),
        count("allocations_created"),
        count("unresolved")
    );
    for finding in healed["unresolved"].as_array().into_iter().flatten().take(10) {
        println!("    {finding}");
    }
    for (idx, server) in servers.iter().enumerate() {
        println!("  server {idx} RSS now {:.0} MiB", rss_mib(server.child.id()));
    }
    println!("  largest server RSS seen during the churn {rss_peak:.0} MiB");
    drop(slots);
    let clean = audit.clean()
        && stuck.is_empty()
        && count("orphans_removed") == 0
        && count("allocations_created") == 0
        && count("unresolved") == 0;
    anyhow::ensure!(clean, "the soak's audit failed (see above)");
    println!("audit: clean");
    Ok(())
}

/// A counter summed over the processes.
async fn metric_sum(urls: &[String], name: &str) -> u64 {
    let mut sum = 0;
    for url in urls {
        sum += metric(url, name).await;
    }
    sum
}

async fn heal_metrics(urls: &[String]) -> [u64; 4] {
    [
        metric_sum(urls, "berth_heal_runs_total").await,
        metric_sum(urls, "berth_heal_orphans_removed_total").await,
        metric_sum(urls, "berth_heal_allocations_created_total").await,
        metric_sum(urls, "berth_heal_unresolved_total").await,
    ]
}

async fn lifecycle_metrics(urls: &[String]) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for name in [
        "berth_compute_builds_failed_total",
        "berth_compute_reschedules_total",
        "berth_compute_reschedules_exhausted_total",
        "berth_compute_claim_retries_total",
    ] {
        out.push((name, metric_sum(urls, name).await));
    }
    out
}

async fn wait_all_up(nova: &Nova, hosts: usize, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let (_, body) = nova.call(Method::GET, "/os-services?binary=nova-compute", None).await?;
        let up = body["services"].as_array().into_iter().flatten().filter(|s| s["state"] == "up").count();
        if up >= hosts {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {up} of {hosts} compute services came back up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every server, all tenants, with details (pages of 1,000).
async fn all_servers(nova: &Nova) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let path = match &marker {
            Some(m) => format!("/servers/detail?all_tenants=1&limit=1000&marker={m}"),
            None => "/servers/detail?all_tenants=1&limit=1000".to_owned(),
        };
        let (status, body) = nova.call(Method::GET, &path, None).await?;
        anyhow::ensure!(status == 200, "listing servers: {status} {body}");
        let page = body["servers"].as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            return Ok(out);
        }
        marker = page.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
        out.extend(page);
    }
}

/// Confirms resizes left in `VERIFY_RESIZE` and waits until no server has
/// a task; answers the servers still unsettled at the limit.
async fn settle_all(nova: &Nova, limit: Duration, poll: Duration) -> anyhow::Result<Vec<(String, String)>> {
    let deadline = Instant::now() + limit;
    loop {
        let servers = all_servers(nova).await?;
        let mut unsettled = Vec::new();
        for server in &servers {
            let id = server["id"].as_str().unwrap_or("").to_owned();
            let status = server["status"].as_str().unwrap_or("").to_owned();
            if status == "VERIFY_RESIZE" && server["OS-EXT-STS:task_state"].is_null() {
                nova.call(Method::POST, &format!("/servers/{id}/action"), Some(json!({"confirmResize": null}))).await?;
                unsettled.push((id, status));
            } else if !server["OS-EXT-STS:task_state"].is_null() || !SETTLED.contains(&status.as_str()) {
                let task = server["OS-EXT-STS:task_state"].as_str().unwrap_or("-");
                unsettled.push((id, format!("{status}/{task}")));
            }
        }
        if unsettled.is_empty() || Instant::now() > deadline {
            return Ok(unsettled);
        }
        tokio::time::sleep(poll.max(Duration::from_secs(1))).await;
    }
}

/// What the audit found.
#[derive(Default)]
struct Audit {
    servers: usize,
    by_status: BTreeMap<String, usize>,
    providers: usize,
    consumers: usize,
    drift: Vec<String>,
    orphans: Vec<String>,
    over_capacity: Vec<String>,
    error_with_host: usize,
}

impl Audit {
    fn clean(&self) -> bool {
        self.drift.is_empty() && self.orphans.is_empty() && self.over_capacity.is_empty()
    }

    fn print(&self) {
        println!(
            "audit: {} servers {:?}, {} providers, {} consumers with allocations",
            self.servers, self.by_status, self.providers, self.consumers
        );
        println!(
            "  drift (allocation is not the flavor on the server's node): {}; orphaned consumers: {}; \
             providers over capacity: {}; ERROR servers on a host: {}",
            self.drift.len(),
            self.orphans.len(),
            self.over_capacity.len(),
            self.error_with_host
        );
        for line in self.drift.iter().chain(&self.orphans).chain(&self.over_capacity).take(20) {
            println!("    {line}");
        }
    }
}

/// Resources by class.
type Usage = BTreeMap<String, i64>;

async fn audit(nova: &Nova, url: &str) -> anyhow::Result<Audit> {
    let placement = nova.at(url, "placement 1.39");
    let mut audit = Audit::default();
    let (status, body) = placement.call(Method::GET, "/resource_providers", None).await?;
    anyhow::ensure!(status == 200, "listing providers: {status}");
    let providers: Vec<(String, String)> = body["resource_providers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rp| (rp["uuid"].as_str().unwrap_or("").to_owned(), rp["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    audit.providers = providers.len();
    let by_name: HashMap<String, String> = providers.iter().map(|(u, n)| (n.clone(), u.clone())).collect();
    // consumer → provider → usage.
    let mut consumers: HashMap<String, BTreeMap<String, Usage>> = HashMap::new();
    let mut results = Vec::new();
    // 16 readers, each a share of the providers.
    let handles: Vec<_> = providers
        .chunks(providers.len().div_ceil(16).max(1))
        .map(|part| {
            let part = part.to_vec();
            let placement = placement.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for (uuid, name) in part {
                    let (s1, allocations) =
                        placement.call(Method::GET, &format!("/resource_providers/{uuid}/allocations"), None).await?;
                    let (s2, inventories) =
                        placement.call(Method::GET, &format!("/resource_providers/{uuid}/inventories"), None).await?;
                    anyhow::ensure!(s1 == 200 && s2 == 200, "reading provider {name}: {s1} {s2}");
                    out.push((uuid, name, allocations, inventories));
                }
                Ok::<_, anyhow::Error>(out)
            })
        })
        .collect();
    for handle in handles {
        results.extend(handle.await??);
    }
    for (uuid, name, allocations, inventories) in results {
        let mut used: Usage = BTreeMap::new();
        for (consumer, alloc) in allocations["allocations"].as_object().into_iter().flatten() {
            let mut usage = Usage::new();
            for (class, amount) in alloc["resources"].as_object().into_iter().flatten() {
                let amount = amount.as_i64().unwrap_or(0);
                usage.insert(class.clone(), amount);
                *used.entry(class.clone()).or_default() += amount;
            }
            consumers.entry(consumer.clone()).or_default().insert(uuid.clone(), usage);
        }
        for (class, inv) in inventories["inventories"].as_object().into_iter().flatten() {
            let capacity = crate::common::capacity(inv);
            let use_ = used.get(class).copied().unwrap_or(0);
            if use_ > capacity {
                audit.over_capacity.push(format!("{name} {class}: {use_} used of {capacity}"));
            }
        }
    }
    audit.consumers = consumers.len();

    let servers = all_servers(nova).await?;
    audit.servers = servers.len();
    let mut known = HashSet::new();
    for server in &servers {
        let id = server["id"].as_str().unwrap_or("").to_owned();
        let status = server["status"].as_str().unwrap_or("").to_owned();
        *audit.by_status.entry(status.clone()).or_default() += 1;
        known.insert(id.clone());
        let held = consumers.get(&id).cloned().unwrap_or_default();
        let node = server["OS-EXT-SRV-ATTR:hypervisor_hostname"].as_str();
        let expected: BTreeMap<String, Usage> = match node.and_then(|n| by_name.get(n)) {
            Some(rp) if status != "SHELVED_OFFLOADED" => {
                let flavor = &server["flavor"];
                let usage: Usage = [
                    ("VCPU".to_owned(), flavor["vcpus"].as_i64().unwrap_or(0)),
                    ("MEMORY_MB".to_owned(), flavor["ram"].as_i64().unwrap_or(0)),
                    ("DISK_GB".to_owned(), flavor["disk"].as_i64().unwrap_or(0)),
                ]
                .into_iter()
                .filter(|(_, v)| *v > 0)
                .collect();
                [(rp.clone(), usage)].into_iter().collect()
            }
            _ => BTreeMap::new(),
        };
        if status == "ERROR" && node.is_some() {
            // Nova keeps an ERROR server's allocation on its host, or
            // has none (a failed build): both are consistent.
            audit.error_with_host += 1;
            if held.is_empty() {
                continue;
            }
        }
        if held != expected {
            audit.drift.push(format!(
                "server {id} ({status} on {}): holds {held:?}, expected {expected:?}",
                node.unwrap_or("-")
            ));
        }
    }
    for (consumer, held) in &consumers {
        if !known.contains(consumer) {
            audit.orphans.push(format!("consumer {consumer} holds {held:?} and is no server"));
        }
    }
    Ok(audit)
}
