//! `berth bench boot`: boots through the compute API until ACTIVE.
//!
//! Starts berth (one or more processes; several share a PostgreSQL
//! database given with `--serve-arg`), optional extra cells, and agent
//! processes (`berth agent`) playing `--hosts` hosts with instant builds.
//! Then `--concurrency` clients each boot a server and poll it until it
//! leaves BUILD, `--boots` in all. Reports boots/s to ACTIVE,
//! time-to-ACTIVE p50/p99, ERROR count, the conductor's claim retries and
//! scheduler runs, and server RSS.
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
    hosts_ready, metric, ms, percentile, rss_mib, spawn_berth, Agent, Binaries, Nova, ProcessArgs, Spawned,
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
}

pub(crate) async fn run(opts: BootOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let mut servers: Vec<Spawned> = Vec::new();
    for _ in 0..opts.run.processes.max(1) {
        servers.push(spawn_berth(binaries, &opts.run.serve_arg).await?);
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
    let per_agent = opts.hosts.div_ceil(opts.agents.max(1));
    for idx in 0..opts.agents.max(1) {
        let first = idx * per_agent;
        if first >= opts.hosts {
            break;
        }
        let count = per_agent.min(opts.hosts - first);
        let cell = &cell_names[idx % cell_names.len()];
        let child = Command::new(&binaries.agent)
            .args(["agent", "--url", &url, "--log", "warn", "--prefix", "bench-", "--cell", cell])
            .args(["--hosts", &count.to_string(), "--first-index", &first.to_string()])
            .args(["--vcpus", &opts.host_vcpus.to_string(), "--memory-mb", "262144", "--disk-gb", "4000"])
            .args(["--report-interval-secs", "10", "--concurrency", "16"])
            .args(&opts.run.agent_arg)
            .stdout(Stdio::null())
            .spawn()
            .context("starting an agent")?;
        agents.push(Agent(child));
    }
    hosts_ready(&url, opts.hosts).await?;
    println!("{} hosts registered and reported in {:.1} s", opts.hosts, started.elapsed().as_secs_f64());

    let nova = Nova::new(&format!("{url}/compute/v2.1"), opts.concurrency * 2)?;
    let (status, _) = nova
        .call(
            reqwest::Method::PUT,
            "/os-quota-sets/admin",
            Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
        )
        .await?;
    anyhow::ensure!(status == 200, "quota update: {status}");
    let (status, flavor) = nova
        .call(
            reqwest::Method::POST,
            "/flavors",
            Some(json!({"flavor": {"name": "bench", "vcpus": 1, "ram": 64, "disk": 1}})),
        )
        .await?;
    anyhow::ensure!(status == 200, "flavor create: {status}");
    let flavor = flavor["flavor"]["id"].as_str().unwrap_or("").to_owned();
    let resp = admin
        .post(format!("{url}/image/v2/images"))
        .header("x-auth-token", "admin")
        .json(&json!({"name": "bench", "disk_format": "qcow2", "container_format": "bare", "visibility": "public"}))
        .send()
        .await?;
    let image: Value = resp.json().await?;
    let image = image["id"].as_str().unwrap_or("").to_owned();

    // Boot until ACTIVE.
    let navs: Vec<Nova> = servers
        .iter()
        .map(|s| Nova::new(&format!("{}/compute/v2.1", s.url), opts.concurrency * 2))
        .collect::<anyhow::Result<_>>()?;
    let next = Arc::new(AtomicUsize::new(0));
    let times: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let errors = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let retries_before = metric(&url, "berth_compute_claim_retries_total").await;
    let runs_before = metric(&url, "berth_compute_scheduler_runs_total").await;
    let failed_before = metric(&url, "berth_compute_builds_failed_total").await;
    let resched_before = metric(&url, "berth_compute_reschedules_total").await;
    let exhausted_before = metric(&url, "berth_compute_reschedules_exhausted_total").await;
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for w in 0..opts.concurrency.max(1) {
        let nova = navs[w % navs.len()].clone();
        let (next, times, errors, refused) = (next.clone(), times.clone(), errors.clone(), refused.clone());
        let (flavor, image, total, poll) =
            (flavor.clone(), image.clone(), opts.boots, Duration::from_millis(opts.poll_ms));
        workers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                let begin = Instant::now();
                let body = json!({"server": {"name": format!("b{n}"), "flavorRef": flavor, "imageRef": image, "networks": "none"}});
                let (status, answer) = nova.call(reqwest::Method::POST, "/servers", Some(body)).await?;
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
                            times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(begin.elapsed());
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
    let mut times = times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    times.sort();
    let active = times.len();
    println!(
        "boot: {} hosts, {} boots, {} clients, {} process(es), {} cell(s)",
        opts.hosts, opts.boots, opts.concurrency, opts.run.processes, opts.cells
    );
    println!(
        "  {active} ACTIVE, {} ERROR, {} refused in {:.2} s: {:.0} boots/s to ACTIVE",
        errors.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst),
        elapsed.as_secs_f64(),
        active as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  time to ACTIVE: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
        ms(percentile(&times, 0.99)),
        ms(times.last().copied().unwrap_or_default())
    );
    println!(
        "  scheduler runs {}, claim retries (placement conflicts) {}",
        metric(&url, "berth_compute_scheduler_runs_total").await - runs_before,
        metric(&url, "berth_compute_claim_retries_total").await - retries_before
    );
    println!(
        "  builds failed {}, rescheduled onto an alternate {}, out of alternates {}",
        metric(&url, "berth_compute_builds_failed_total").await - failed_before,
        metric(&url, "berth_compute_reschedules_total").await - resched_before,
        metric(&url, "berth_compute_reschedules_exhausted_total").await - exhausted_before
    );
    for (idx, server) in servers.iter().enumerate() {
        println!("  server {idx} RSS {:.0} MiB", rss_mib(server.child.id()));
    }

    if opts.listing > 0 {
        listing(&nova, &flavor, &image, opts.listing, opts.concurrency).await?;
    }
    drop(agents);
    Ok(())
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
