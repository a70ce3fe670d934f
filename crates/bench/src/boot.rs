//! `berth bench boot`: boots through the compute API until ACTIVE.
//!
//! Starts berth (one or more processes; several share a PostgreSQL
//! database given with `--serve-arg`), optional extra cells, and agent
//! processes (`berth agent`) playing `--hosts` hosts with instant builds.
//! Then `--concurrency` clients each boot a server and poll it until it
//! leaves BUILD, `--boots` in all. Reports boots/s to ACTIVE,
//! time-to-ACTIVE p50/p99, ERROR count, the conductor's claim retries and
//! scheduler runs, and server RSS. After the boots it counts the
//! resource providers whose usage exceeds their capacity (through the
//! Placement API: 0 in a correct run) and prints the CPU milliseconds per
//! ACTIVE boot of the servers, agents, PostgreSQL and the benchmark
//! itself over the boot phase; `--json FILE` writes these figures.
//!
//! `--listing N` then fills the cells to N servers in all and measures
//! `GET /servers?limit=1000` (first page and the 20th, following markers).
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::common::{
    cpu_ticks, cpu_ticks_named, hosts_ready, metric, ms, percentile, rss_mib, self_cpu_ticks, spawn_berth, ticks_ms,
    Agent, Binaries, HistogramMean, Nova, ProcessArgs, Spawned,
};

/// Options of `berth bench boot`.
#[derive(Debug, clap::Args)]
pub(crate) struct BootOpts {
    /// Compute hosts (agents).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Servers to boot.
    #[arg(long, default_value_t = 2000)]
    boots: usize,
    /// Concurrent clients (each boots, then waits for ACTIVE).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Agent processes the hosts are spread over.
    #[arg(long, default_value_t = 4)]
    agents: usize,
    /// Cells (the hosts are spread over them; cell1 plus cells created here).
    #[arg(long, default_value_t = 1)]
    cells: usize,
    #[command(flatten)]
    run: ProcessArgs,
    /// vCPUs per host (allocation ratio 4).
    #[arg(long, default_value_t = 16)]
    host_vcpus: i64,
    /// Fill the cells to this many servers and measure listing pages
    /// (0: skip).
    #[arg(long, default_value_t = 0)]
    listing: usize,
    /// Poll interval while waiting for ACTIVE (ms): the resolution of
    /// time-to-ACTIVE. Polling much faster mostly measures the polling.
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// Write the figures as JSON here (one object per run; a list of
    /// them with `--scheduling both`).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// `push` (default), `pull` (NATS JetStream queues; see
    /// docs/pull-vs-push.md) or `both`: push, then pull on a fresh server
    /// and fleet, in the same run.
    #[arg(long, default_value = "push")]
    scheduling: String,
    /// NATS server of pull mode.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// A mixed workload: five flavors (1, 2, 4 and 8 vCPUs, and a 2-vCPU
    /// one needing a trait only `--rare-hosts` hosts have) instead of one.
    #[arg(long)]
    mix: bool,
    /// Hosts with the rare trait (`--mix`; default 5 % of the hosts).
    #[arg(long)]
    rare_hosts: Option<usize>,
    /// Percent of the boots that are members of hard anti-affinity
    /// server groups of five (group scheduling: in pull mode they ride
    /// their flavor's queue and the claim enforces the policy).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100))]
    anti_affinity_pct: u64,
}

/// Members per anti-affinity group (`--anti-affinity-pct`).
const GROUP_SIZE: usize = 5;

/// The anti-affinity group of boot `n`, if it is a member: the first
/// `pct` of every hundred boots are, five to a group in boot order.
fn group_of(n: usize, pct: u64) -> Option<usize> {
    let pct = pct as usize;
    if n % 100 >= pct {
        return None;
    }
    Some(((n / 100) * pct + n % 100) / GROUP_SIZE)
}

/// The CPU time (clock ticks) of the processes a boot run involves, read
/// at the start and at the end of the boot phase.
struct CpuReading {
    servers: u64,
    agents: u64,
    database: u64,
    bench: u64,
}

impl CpuReading {
    /// `postgres`: whether the servers use PostgreSQL (its processes are
    /// then read; with SQLite the database runs inside the servers).
    fn now(servers: &[Spawned], agents: &[Agent], postgres: bool) -> Self {
        CpuReading {
            servers: servers.iter().map(|server| cpu_ticks(server.child.id())).sum(),
            agents: agents.iter().map(|agent| cpu_ticks(agent.0.id())).sum(),
            database: if postgres { cpu_ticks_named("postgres") } else { 0 },
            bench: self_cpu_ticks(),
        }
    }
}

/// Whether `berth serve` runs on PostgreSQL with these extra arguments
/// (`--database postgres://…` or `--database=postgres://…`).
fn uses_postgres(serve_args: &[String]) -> bool {
    serve_args.iter().any(|arg| {
        let url = arg.strip_prefix("--database=").unwrap_or(arg);
        url.starts_with("postgres://") || url.starts_with("postgresql://")
    })
}

/// One flavor of the workload: name, vCPUs, RAM (MiB), share of the
/// boots (percent), and whether it needs the rare trait.
struct Shape {
    name: &'static str,
    vcpus: i64,
    ram: i64,
    weight: u64,
    rare: bool,
}

/// `--mix`: five flavors, one needing a trait few hosts have.
const MIX: [Shape; 5] = [
    Shape { name: "small", vcpus: 1, ram: 512, weight: 40, rare: false },
    Shape { name: "medium", vcpus: 2, ram: 2048, weight: 25, rare: false },
    Shape { name: "large", vcpus: 4, ram: 8192, weight: 15, rare: false },
    Shape { name: "xlarge", vcpus: 8, ram: 16384, weight: 10, rare: false },
    Shape { name: "rare", vcpus: 2, ram: 2048, weight: 10, rare: true },
];

/// The trait of the rare hosts (`--mix`).
const RARE_TRAIT: &str = "CUSTOM_BENCH_RARE";

/// The flavor of boot `n` (a fixed, interleaved sequence).
fn shape_of(n: usize, shapes: usize) -> usize {
    if shapes == 1 {
        return 0;
    }
    let slot = (n as u64).wrapping_mul(7919) % 100;
    let mut acc = 0;
    for (idx, shape) in MIX.iter().enumerate() {
        acc += shape.weight;
        if slot < acc {
            return idx;
        }
    }
    0
}

pub(crate) async fn run(opts: BootOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let modes: Vec<&str> = match opts.scheduling.as_str() {
        "push" => vec!["push"],
        "pull" => vec!["pull"],
        "both" => vec!["push", "pull"],
        other => anyhow::bail!("--scheduling {other:?}: push, pull or both"),
    };
    let mut results = Vec::new();
    for mode in modes {
        results.push(run_mode(&opts, binaries, mode).await?);
    }
    if let Some(path) = &opts.json {
        // One object per run (a list when the run compares modes).
        let body = if results.len() == 1 { results.remove(0) } else { Value::Array(results) };
        std::fs::write(path, serde_json::to_string_pretty(&body)?)?;
    }
    Ok(())
}

/// Anti-affinity groups (of `ids`) with two members on one host.
async fn anti_affinity_violations(nova: &Nova, ids: &[String]) -> anyhow::Result<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut host_of: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut marker: Option<String> = None;
    loop {
        let mut path = "/servers/detail?all_tenants=1&limit=1000".to_owned();
        if let Some(m) = &marker {
            path.push_str(&format!("&marker={m}"));
        }
        let (status, body) = nova.call(reqwest::Method::GET, &path, None).await?;
        anyhow::ensure!(status == 200, "listing servers: {status}");
        let servers = body["servers"].as_array().cloned().unwrap_or_default();
        if servers.is_empty() {
            break;
        }
        for server in &servers {
            if let (Some(id), Some(host)) = (server["id"].as_str(), server["OS-EXT-SRV-ATTR:host"].as_str()) {
                host_of.insert(id.to_owned(), host.to_owned());
            }
        }
        marker = servers.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
    }
    let mut violations = 0;
    for id in ids {
        let (status, body) = nova.call(reqwest::Method::GET, &format!("/os-server-groups/{id}"), None).await?;
        anyhow::ensure!(status == 200, "server group {id}: {status}");
        let hosts: Vec<&String> = body["server_group"]["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().and_then(|m| host_of.get(m)))
            .collect();
        let distinct: std::collections::HashSet<&&String> = hosts.iter().collect();
        if distinct.len() < hosts.len() {
            violations += 1;
        }
    }
    Ok(violations)
}

/// Every server listed (all tenants, following markers): (servers, ids
/// listed more than once).
async fn list_all(nova: &Nova) -> anyhow::Result<(usize, usize)> {
    let mut marker: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    let mut twice = 0;
    loop {
        let path = match &marker {
            Some(m) => format!("/servers?all_tenants=1&limit=1000&marker={m}"),
            None => "/servers?all_tenants=1&limit=1000".to_owned(),
        };
        let (status, body) = nova.call(reqwest::Method::GET, &path, None).await?;
        anyhow::ensure!(status == 200, "listing servers: {status}");
        let servers = body["servers"].as_array().cloned().unwrap_or_default();
        if servers.is_empty() {
            return Ok((seen.len(), twice));
        }
        for server in &servers {
            if !seen.insert(server["id"].as_str().unwrap_or("").to_owned()) {
                twice += 1;
            }
        }
        marker = servers.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
    }
}

async fn run_mode(opts: &BootOpts, binaries: &Binaries, mode: &str) -> anyhow::Result<Value> {
    let pull = mode == "pull";
    let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
    let mut serve_args = opts.run.serve_arg.clone();
    let mut pull_args: Vec<String> = Vec::new();
    if pull {
        serve_args.extend(
            ["--scheduling", "pull", "--nats-url", &opts.nats_url, "--nats-prefix", &prefix]
                .iter()
                .map(|s| s.to_string()),
        );
        serve_args.extend(["--pull-build-timeout-secs".to_owned(), "600".to_owned()]);
        pull_args.extend(
            ["--scheduling", "pull", "--nats-url", &opts.nats_url, "--nats-prefix", &prefix]
                .iter()
                .map(|s| s.to_string()),
        );
    }
    let mut servers: Vec<Spawned> = Vec::new();
    for _ in 0..opts.run.processes.max(1) {
        servers.push(spawn_berth(binaries, &serve_args).await?);
    }
    let url = servers[0].url.clone();
    let admin = reqwest::Client::new();
    let mut cell_names = vec!["cell1".to_owned()];
    for idx in 1..opts.cells.max(1) {
        let name = format!("cell{}", idx + 1);
        let resp = admin
            .post(format!("{url}/admin/v1/cells"))
            .header("x-auth-token", "admin")
            .json(&json!({"name": name}))
            .send()
            .await?;
        anyhow::ensure!(resp.status().is_success(), "creating {name}: {}", resp.status());
        cell_names.push(name);
    }
    let started = Instant::now();
    let mut agents = Vec::new();
    // `--mix`: the rare-trait hosts are an agent of their own.
    let rare_hosts = if opts.mix { opts.rare_hosts.unwrap_or((opts.hosts / 20).max(1)).min(opts.hosts) } else { 0 };
    let common_hosts = opts.hosts - rare_hosts;
    let per_agent = common_hosts.div_ceil(opts.agents.max(1));
    let mut groups: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for idx in 0..opts.agents.max(1) {
        let first = idx * per_agent;
        if first >= common_hosts {
            break;
        }
        groups.push((first, per_agent.min(common_hosts - first), Vec::new()));
    }
    if rare_hosts > 0 {
        groups.push((common_hosts, rare_hosts, vec!["--traits".to_owned(), RARE_TRAIT.to_owned()]));
    }
    for (idx, (first, count, extra)) in groups.iter().enumerate() {
        let cell = &cell_names[idx % cell_names.len()];
        let child = Command::new(&binaries.agent)
            .args(["agent", "--url", &url, "--log", "warn", "--prefix", "bench-", "--cell", cell])
            .args(["--hosts", &count.to_string(), "--first-index", &first.to_string()])
            .args(["--vcpus", &opts.host_vcpus.to_string(), "--memory-mb", "262144", "--disk-gb", "4000"])
            .args(["--report-interval-secs", "10", "--concurrency", "16"])
            .args(extra)
            .args(&pull_args)
            .args(&opts.run.agent_arg)
            .stdout(Stdio::null())
            .spawn()
            .context("starting an agent")?;
        agents.push(Agent(child));
    }
    hosts_ready(&url, opts.hosts).await?;
    println!("[{mode}] {} hosts registered and reported in {:.1} s", opts.hosts, started.elapsed().as_secs_f64());

    let nova = Nova::new(&format!("{url}/compute/v2.1"), opts.concurrency * 2)?;
    let (flavor, image) = crate::common::boot_inputs(&nova, &url, ("bench", 1, 64, 1)).await?;
    // The flavors booted: the one above, or the mix.
    let mut flavors: Vec<(String, &'static str)> = Vec::new();
    if opts.mix {
        for shape in &MIX {
            let body = json!({"flavor": {"name": shape.name, "vcpus": shape.vcpus, "ram": shape.ram, "disk": 1}});
            let (status, answer) = nova.call(reqwest::Method::POST, "/flavors", Some(body)).await?;
            anyhow::ensure!(status == 200, "flavor {}: {status} {answer}", shape.name);
            let id = answer["flavor"]["id"].as_str().unwrap_or("").to_owned();
            if shape.rare {
                let specs = json!({"extra_specs": {format!("trait:{RARE_TRAIT}"): "required"}});
                let (status, answer) =
                    nova.call(reqwest::Method::POST, &format!("/flavors/{id}/os-extra_specs"), Some(specs)).await?;
                anyhow::ensure!(status == 200, "extra specs of {}: {status} {answer}", shape.name);
            }
            flavors.push((id, shape.name));
        }
    } else {
        flavors.push((flavor, "bench"));
    }
    let flavors = Arc::new(flavors);
    // `--anti-affinity-pct`: the groups, created before the clock starts.
    let mut group_ids: Vec<String> = Vec::new();
    let members = (0..opts.boots).filter(|n| group_of(*n, opts.anti_affinity_pct).is_some()).count();
    if members > 0 {
        let limits = json!({"quota_set": {"server_groups": -1, "server_group_members": -1}});
        let (status, answer) = nova.call(reqwest::Method::PUT, "/os-quota-sets/admin", Some(limits)).await?;
        anyhow::ensure!(status == 200, "server group quotas: {status} {answer}");
    }
    for g in 0..members.div_ceil(GROUP_SIZE) {
        let body = json!({"server_group": {"name": format!("aa{g}"), "policy": "anti-affinity"}});
        let (status, answer) = nova.call(reqwest::Method::POST, "/os-server-groups", Some(body)).await?;
        anyhow::ensure!(status == 200, "server group: {status} {answer}");
        group_ids.push(answer["server_group"]["id"].as_str().unwrap_or("").to_owned());
    }
    let group_ids = Arc::new(group_ids);
    let group_pct = opts.anti_affinity_pct;

    // Boot until ACTIVE.
    let navs: Vec<Nova> = servers
        .iter()
        .map(|s| Nova::new(&format!("{}/compute/v2.1", s.url), opts.concurrency * 2))
        .collect::<anyhow::Result<_>>()?;
    let next = Arc::new(AtomicUsize::new(0));
    let times: Arc<Mutex<Vec<(usize, Duration)>>> = Arc::default();
    // How long `POST /servers` took to answer (the admission's durable write).
    let accepts: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let errors = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let retries_before = metric(&url, "berth_compute_claim_retries_total").await;
    let runs_before = metric(&url, "berth_compute_scheduler_runs_total").await;
    let server_active = HistogramMean::start(&url, "berth_compute_time_to_active_seconds").await;
    let server_claim = HistogramMean::start(&url, "berth_compute_claim_seconds").await;
    let failed_before = metric(&url, "berth_compute_builds_failed_total").await;
    let resched_before = metric(&url, "berth_compute_reschedules_total").await;
    let exhausted_before = metric(&url, "berth_compute_reschedules_exhausted_total").await;
    let postgres = uses_postgres(&opts.run.serve_arg);
    let cpu_before = CpuReading::now(&servers, &agents, postgres);
    let nats_before = cpu_ticks_named("nats-server");
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for w in 0..opts.concurrency.max(1) {
        let nova = navs[w % navs.len()].clone();
        let (next, times, errors, refused) = (next.clone(), times.clone(), errors.clone(), refused.clone());
        let accepts = accepts.clone();
        let (flavors, image, total, poll) =
            (flavors.clone(), image.clone(), opts.boots, Duration::from_millis(opts.poll_ms));
        let group_ids = group_ids.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                let shape = shape_of(n, flavors.len());
                let begin = Instant::now();
                let mut body = json!({"server": {"name": format!("b{n}"), "flavorRef": flavors[shape].0, "imageRef": image, "networks": "none"}});
                if let Some(group) = group_of(n, group_pct) {
                    body["os:scheduler_hints"] = json!({"group": group_ids[group]});
                }
                let (status, answer) = nova.call(reqwest::Method::POST, "/servers", Some(body)).await?;
                accepts.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(begin.elapsed());
                if status != 202 {
                    refused.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let id = answer["server"]["id"].as_str().unwrap_or("").to_owned();
                loop {
                    tokio::time::sleep(poll).await;
                    let (_, shown) = nova.call(reqwest::Method::GET, &format!("/servers/{id}"), None).await?;
                    match shown["server"]["status"].as_str() {
                        Some("ACTIVE") => {
                            times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push((shape, begin.elapsed()));
                            break;
                        }
                        Some("ERROR") => {
                            errors.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        _ => {}
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let elapsed = t0.elapsed();
    let cpu_after = CpuReading::now(&servers, &agents, postgres);
    let nats_after = cpu_ticks_named("nats-server");
    let by_shape = times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let mut times: Vec<Duration> = by_shape.iter().map(|(_, t)| *t).collect();
    times.sort();
    let active = times.len();
    println!(
        "[{mode}] boot: {} hosts, {} boots, {} clients, {} process(es), {} cell(s){}",
        opts.hosts,
        opts.boots,
        opts.concurrency,
        opts.run.processes,
        opts.cells,
        if opts.mix { format!(", mixed flavors ({rare_hosts} rare-trait hosts)") } else { String::new() }
    );
    let (n_errors, n_refused) = (errors.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
    let boots_per_s = active as f64 / elapsed.as_secs_f64();
    println!(
        "  {active} ACTIVE, {n_errors} ERROR, {n_refused} refused in {:.2} s: {boots_per_s:.0} boots/s to ACTIVE",
        elapsed.as_secs_f64(),
    );
    let (p50_ms, p90_ms, p99_ms) =
        (ms(percentile(&times, 0.5)), ms(percentile(&times, 0.9)), ms(percentile(&times, 0.99)));
    let max_ms = ms(times.last().copied().unwrap_or_default());
    println!("  time to ACTIVE: p50 {p50_ms:.1} ms, p90 {p90_ms:.1} ms, p99 {p99_ms:.1} ms, max {max_ms:.1} ms");
    let mut accepts = accepts.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    accepts.sort();
    let (accept_p50_ms, accept_p99_ms) = (ms(percentile(&accepts, 0.5)), ms(percentile(&accepts, 0.99)));
    println!("  POST /servers answered: p50 {accept_p50_ms:.1} ms, p99 {accept_p99_ms:.1} ms");
    let mut per_flavor = serde_json::Map::new();
    for (idx, (_, name)) in flavors.iter().enumerate() {
        let mut mine: Vec<Duration> = by_shape.iter().filter(|(s, _)| *s == idx).map(|(_, t)| *t).collect();
        mine.sort();
        let (p50, p99) = (ms(percentile(&mine, 0.5)), ms(percentile(&mine, 0.99)));
        if flavors.len() > 1 {
            println!("    {name}: {} ACTIVE, p50 {p50:.1} ms, p99 {p99:.1} ms", mine.len());
        }
        per_flavor.insert((*name).to_owned(), json!({"active": mine.len(), "p50_ms": p50, "p99_ms": p99}));
    }
    let scheduler_runs = metric(&url, "berth_compute_scheduler_runs_total").await - runs_before;
    let claim_retries = metric(&url, "berth_compute_claim_retries_total").await - retries_before;
    println!("  scheduler runs {scheduler_runs}, claim retries (placement conflicts) {claim_retries}");
    // The first server's own view: accepted to ACTIVE without the
    // clients' poll interval, and one claim's write.
    let (server_active_ms, server_claim_ms) = (server_active.mean_ms(&url).await, server_claim.mean_ms(&url).await);
    println!("  server 0: accepted to ACTIVE mean {server_active_ms:.1} ms, claim write mean {server_claim_ms:.1} ms");
    let builds_failed = metric(&url, "berth_compute_builds_failed_total").await - failed_before;
    let rescheduled = metric(&url, "berth_compute_reschedules_total").await - resched_before;
    let out_of_alternates = metric(&url, "berth_compute_reschedules_exhausted_total").await - exhausted_before;
    println!(
        "  builds failed {builds_failed}, rescheduled onto an alternate {rescheduled}, out of alternates {out_of_alternates}"
    );
    let mut relayed = 0;
    for server in &servers[1..] {
        relayed += metric(&server.url, "berth_compute_tasks_relayed_total").await;
    }
    let relayed_in = metric(&url, "berth_compute_tasks_relayed_in_total").await;
    if opts.run.processes > 1 {
        println!("  the other servers relayed {relayed} agent tasks to server 0's agents, which took {relayed_in}");
    }
    // Pull: queues, refused claims, deliveries beyond the first.
    let (mut queues, mut naks, mut redeliveries, mut claims_refused, mut routed) = (0, 0, 0, 0, 0);
    if pull {
        queues = metric(&url, "berth_pull_queues").await;
        claims_refused = metric(&url, "berth_pull_claims_refused_total").await;
        routed = metric(&url, "berth_pull_routed_to_push_total").await;
        let published = metric(&url, "berth_pull_published_total").await;
        let settings = berth_pull::Settings {
            url: opts.nats_url.clone(),
            prefix: prefix.clone(),
            ack_wait: Duration::from_secs(30),
        };
        let nats = berth_pull::Queues::connect(&settings).await?;
        let stats = nats.stats().await?;
        // Every accepted boot is one message (a second publish of it is
        // dropped by JetStream); no agent dies in the bench, so every
        // delivery beyond the first follows a nak.
        redeliveries = stats.deliveries.saturating_sub((opts.boots - refused.load(Ordering::SeqCst)) as u64);
        naks = redeliveries;
        println!(
            "  pull: {queues} queues, {published} published, {} deliveries ({redeliveries} again after a nak), {claims_refused} claims refused, {routed} routed to push",
            stats.deliveries
        );
        nats.delete().await?;
    }
    let mut rss = Vec::new();
    for (idx, server) in servers.iter().enumerate() {
        rss.push(rss_mib(server.child.id()));
        println!("  server {idx} RSS {:.0} MiB", rss[idx]);
    }
    // Per ACTIVE boot: the work of refused and failed boots is charged
    // to the ones that got through.
    let per_boot = |before: u64, after: u64| ticks_ms(after.saturating_sub(before)) / active.max(1) as f64;
    let server_cpu = per_boot(cpu_before.servers, cpu_after.servers);
    let agents_cpu = per_boot(cpu_before.agents, cpu_after.agents);
    // With SQLite the database runs inside the servers: its CPU is in
    // theirs, and this is 0.
    let db_cpu = per_boot(cpu_before.database, cpu_after.database);
    let bench_cpu = per_boot(cpu_before.bench, cpu_after.bench);
    let nats_cpu = per_boot(nats_before, nats_after);
    println!(
        "  CPU per ACTIVE boot: server {server_cpu:.2} ms, agents {agents_cpu:.2} ms, NATS {nats_cpu:.2} ms, database {db_cpu:.2} ms ({}), bench {bench_cpu:.2} ms",
        if postgres { "postgres processes" } else { "SQLite, inside the server" }
    );
    let packing = packing(&nova.at(&url, "placement 1.39")).await?;
    let overcommitted = packing.overcommitted;
    println!("  overcommitted resource providers (usage above capacity) {overcommitted} of {}", packing.providers);
    let largest_fit = MIX
        .iter()
        .rev()
        .filter(|shape| !shape.rare)
        .find(|shape| packing.free.iter().any(|(vcpu, ram)| *vcpu >= shape.vcpus && *ram >= shape.ram))
        .map(|shape| shape.name)
        .unwrap_or("none");
    println!(
        "  packing: {} hosts used, VCPU utilisation of used hosts mean {:.2} min {:.2} max {:.2} sd {:.2}; largest flavor still fitting: {largest_fit}",
        packing.hosts_used, packing.util_mean, packing.util_min, packing.util_max, packing.util_sd
    );
    let group_violations = anti_affinity_violations(&nova, &group_ids).await?;
    if !group_ids.is_empty() {
        println!(
            "  anti-affinity: {} groups of {GROUP_SIZE}, {group_violations} with two members on one host",
            group_ids.len()
        );
    }
    let (listed, listed_twice) = list_all(&nova).await?;
    let accepted = opts.boots - n_refused;
    let duplicated = listed_twice + listed.saturating_sub(accepted);
    println!("  servers listed {listed} (accepted {accepted}), duplicated {duplicated}");
    let body = json!({
        "mode": mode, "hosts": opts.hosts, "boots": opts.boots, "concurrency": opts.concurrency,
        "processes": opts.run.processes, "agents": agents.len(), "cells": opts.cells, "mix": opts.mix,
        "rare_hosts": rare_hosts, "database": if postgres { "postgres" } else { "sqlite" },
        "active": active, "error": n_errors, "refused": n_refused, "elapsed_s": elapsed.as_secs_f64(),
        "boots_per_s": boots_per_s, "p50_ms": p50_ms, "p90_ms": p90_ms, "p99_ms": p99_ms, "max_ms": max_ms,
        "scheduler_runs": scheduler_runs, "claim_retries": claim_retries, "builds_failed": builds_failed,
        "rescheduled": rescheduled, "out_of_alternates": out_of_alternates,
        "naks": naks, "redeliveries": redeliveries, "queues": queues, "claims_refused": claims_refused,
        "routed_to_push": routed,
        "duplicated": duplicated, "listed": listed,
        "overcommitted": overcommitted, "providers_checked": packing.providers, "server_rss_mib": rss,
        "server_cpu_ms_per_boot": server_cpu, "agents_cpu_ms_per_boot": agents_cpu,
        "nats_cpu_ms_per_boot": nats_cpu,
        "db_cpu_ms_per_boot": db_cpu, "bench_cpu_ms_per_boot": bench_cpu,
    });
    let mut body = body;
    let extra = json!({
        "per_flavor": per_flavor,
        "accept_p50_ms": accept_p50_ms, "accept_p99_ms": accept_p99_ms, "tasks_relayed": relayed,
        "server_accepted_to_active_mean_ms": server_active_ms, "server_claim_mean_ms": server_claim_ms,
        "hosts_used": packing.hosts_used, "util_mean": packing.util_mean, "util_min": packing.util_min,
        "util_max": packing.util_max, "util_sd": packing.util_sd, "largest_flavor_fitting": largest_fit,
        "anti_affinity_pct": opts.anti_affinity_pct, "anti_affinity_groups": group_ids.len(),
        "group_violations": group_violations,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }

    if opts.listing > 0 {
        listing(&nova, &flavors[0].0, &image, opts.listing, opts.concurrency).await?;
    }
    drop(agents);
    Ok(body)
}

/// How the servers sit on the providers after a run.
struct Packing {
    overcommitted: usize,
    providers: usize,
    /// Providers with some VCPU in use.
    hosts_used: usize,
    util_mean: f64,
    util_min: f64,
    util_max: f64,
    util_sd: f64,
    /// Free (VCPU, MEMORY_MB) of every provider with VCPU inventory.
    free: Vec<(i64, i64)>,
}

/// Overcommitted providers and the packing, read through the Placement
/// API (`placement` is at the server's root).
async fn packing(placement: &Nova) -> anyhow::Result<Packing> {
    let (status, body) = placement.call(reqwest::Method::GET, "/resource_providers", None).await?;
    anyhow::ensure!(status == 200, "listing resource providers: {status}");
    let providers = body["resource_providers"].as_array().cloned().unwrap_or_default();
    let mut out = Packing {
        overcommitted: 0,
        providers: providers.len(),
        hosts_used: 0,
        util_mean: 0.0,
        util_min: 0.0,
        util_max: 0.0,
        util_sd: 0.0,
        free: Vec::new(),
    };
    let mut utils = Vec::new();
    for provider in &providers {
        let uuid = provider["uuid"].as_str().unwrap_or_default();
        let (status, inventories) =
            placement.call(reqwest::Method::GET, &format!("/resource_providers/{uuid}/inventories"), None).await?;
        anyhow::ensure!(status == 200, "inventories of {uuid}: {status}");
        let (status, usages) =
            placement.call(reqwest::Method::GET, &format!("/resource_providers/{uuid}/usages"), None).await?;
        anyhow::ensure!(status == 200, "usages of {uuid}: {status}");
        let (inventories, usages) = (&inventories["inventories"], &usages["usages"]);
        if overcommitted(inventories, usages) {
            out.overcommitted += 1;
        }
        if inventories.get("VCPU").is_some() {
            let capacity = crate::common::capacity(&inventories["VCPU"]);
            let used = usages["VCPU"].as_i64().unwrap_or(0);
            let ram_free =
                crate::common::capacity(&inventories["MEMORY_MB"]) - usages["MEMORY_MB"].as_i64().unwrap_or(0);
            out.free.push((capacity - used, ram_free));
            if used > 0 {
                out.hosts_used += 1;
                utils.push(used as f64 / capacity.max(1) as f64);
            }
        }
    }
    if !utils.is_empty() {
        let n = utils.len() as f64;
        out.util_mean = utils.iter().sum::<f64>() / n;
        out.util_min = utils.iter().copied().fold(f64::INFINITY, f64::min);
        out.util_max = utils.iter().copied().fold(0.0, f64::max);
        out.util_sd = (utils.iter().map(|u| (u - out.util_mean).powi(2)).sum::<f64>() / n).sqrt();
    }
    Ok(out)
}

/// Whether some class's usage exceeds its capacity, `(total − reserved) ×
/// allocation_ratio` rounded down as Placement does, given the
/// `inventories` and `usages` objects of one provider's Placement
/// responses. Usage of a class without inventory is over a capacity of 0.
fn overcommitted(inventories: &Value, usages: &Value) -> bool {
    let Some(usages) = usages.as_object() else { return false };
    usages.iter().any(|(class, used)| used.as_i64().unwrap_or(0) > crate::common::capacity(&inventories[class]))
}

/// Fill to `total` servers, then time the first and the 20th page of
/// `GET /servers?limit=1000` (following markers).
async fn listing(nova: &Nova, flavor: &str, image: &str, total: usize, concurrency: usize) -> anyhow::Result<()> {
    let (_, body) = nova.call(reqwest::Method::GET, "/servers?all_tenants=1&limit=1000", None).await?;
    let mut have = body["servers"].as_array().map(Vec::len).unwrap_or(0);
    if have >= 1000 {
        // Count precisely only if needed.
        have = count(nova).await?;
    }
    let missing = total.saturating_sub(have);
    println!("listing: filling {missing} more servers to {total}");
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (nova, next, flavor, image) = (nova.clone(), next.clone(), flavor.to_owned(), image.to_owned());
        workers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= missing {
                    return Ok::<(), anyhow::Error>(());
                }
                let body = json!({"server": {"name": format!("l{n}"), "flavorRef": flavor, "imageRef": image, "networks": "none"}});
                nova.call(reqwest::Method::POST, "/servers", Some(body)).await?;
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    // Wait until nothing is building.
    loop {
        let (_, body) = nova.call(reqwest::Method::GET, "/servers?all_tenants=1&status=BUILD&limit=1", None).await?;
        if body["servers"].as_array().is_none_or(Vec::is_empty) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut first = Vec::new();
    let mut twentieth = Vec::new();
    for _ in 0..10 {
        let mut marker: Option<String> = None;
        for page in 1..=20 {
            let path = match &marker {
                Some(m) => format!("/servers?all_tenants=1&limit=1000&marker={m}"),
                None => "/servers?all_tenants=1&limit=1000".to_owned(),
            };
            let t = Instant::now();
            let (status, body) = nova.call(reqwest::Method::GET, &path, None).await?;
            let took = t.elapsed();
            anyhow::ensure!(status == 200, "listing page {page}: {status}");
            let servers = body["servers"].as_array().cloned().unwrap_or_default();
            if page == 1 {
                first.push(took);
            }
            if page == 20 {
                twentieth.push(took);
            }
            marker = servers.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
            if marker.is_none() {
                break;
            }
        }
    }
    first.sort();
    twentieth.sort();
    println!(
        "  GET /servers?limit=1000: first page p50 {:.1} ms p99 {:.1} ms; 20th page p50 {:.1} ms p99 {:.1} ms",
        ms(percentile(&first, 0.5)),
        ms(percentile(&first, 0.99)),
        ms(percentile(&twentieth, 0.5)),
        ms(percentile(&twentieth, 0.99))
    );
    Ok(())
}

async fn count(nova: &Nova) -> anyhow::Result<usize> {
    let mut marker: Option<String> = None;
    let mut n = 0;
    loop {
        let path = match &marker {
            Some(m) => format!("/servers?all_tenants=1&limit=1000&marker={m}"),
            None => "/servers?all_tenants=1&limit=1000".to_owned(),
        };
        let (_, body) = nova.call(reqwest::Method::GET, &path, None).await?;
        let servers = body["servers"].as_array().cloned().unwrap_or_default();
        if servers.is_empty() {
            return Ok(n);
        }
        n += servers.len();
        marker = servers.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overcommitted_compares_usage_with_capacity() {
        let inventories = json!({
            "VCPU": {"total": 16, "reserved": 2, "allocation_ratio": 1.5},
            "MEMORY_MB": {"total": 1024, "reserved": 0, "allocation_ratio": 1.0},
        });
        // VCPU capacity (16 - 2) × 1.5 = 21.
        assert!(!overcommitted(&inventories, &json!({"VCPU": 21, "MEMORY_MB": 1024})));
        assert!(overcommitted(&inventories, &json!({"VCPU": 22, "MEMORY_MB": 0})));
        assert!(overcommitted(&inventories, &json!({"VCPU": 0, "MEMORY_MB": 1025})));
        // Usage of a class without inventory; none at all.
        assert!(overcommitted(&inventories, &json!({"DISK_GB": 1})));
        assert!(!overcommitted(&inventories, &json!({"DISK_GB": 0})));
        assert!(!overcommitted(&json!({}), &json!({})));
        // (10 - 0) × 1.05 = 10.5: Placement rounds the capacity down.
        let fractional = json!({"VCPU": {"total": 10, "reserved": 0, "allocation_ratio": 1.05}});
        assert!(!overcommitted(&fractional, &json!({"VCPU": 10})));
        assert!(overcommitted(&fractional, &json!({"VCPU": 11})));
    }

    #[test]
    fn uses_postgres_reads_the_database_argument() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert!(uses_postgres(&args(&["--database", "postgres://postgres@127.0.0.1/p?schema=b"])));
        assert!(uses_postgres(&args(&["--database=postgresql://h/p"])));
        assert!(!uses_postgres(&args(&["--scheduler-max-placement-results", "100"])));
        assert!(!uses_postgres(&[]));
    }
}
