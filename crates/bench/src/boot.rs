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
    Agent, Binaries, Nova, ProcessArgs, Spawned,
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
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
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
    let (flavor, image) = crate::common::boot_inputs(&nova, &url, ("bench", 1, 64, 1)).await?;

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
    let postgres = uses_postgres(&opts.run.serve_arg);
    let cpu_before = CpuReading::now(&servers, &agents, postgres);
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
    let cpu_after = CpuReading::now(&servers, &agents, postgres);
    let mut times = times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    times.sort();
    let active = times.len();
    println!(
        "boot: {} hosts, {} boots, {} clients, {} process(es), {} cell(s)",
        opts.hosts, opts.boots, opts.concurrency, opts.run.processes, opts.cells
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
    let scheduler_runs = metric(&url, "berth_compute_scheduler_runs_total").await - runs_before;
    let claim_retries = metric(&url, "berth_compute_claim_retries_total").await - retries_before;
    println!("  scheduler runs {scheduler_runs}, claim retries (placement conflicts) {claim_retries}");
    let builds_failed = metric(&url, "berth_compute_builds_failed_total").await - failed_before;
    let rescheduled = metric(&url, "berth_compute_reschedules_total").await - resched_before;
    let out_of_alternates = metric(&url, "berth_compute_reschedules_exhausted_total").await - exhausted_before;
    println!(
        "  builds failed {builds_failed}, rescheduled onto an alternate {rescheduled}, out of alternates {out_of_alternates}"
    );
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
    println!(
        "  CPU per ACTIVE boot: server {server_cpu:.2} ms, agents {agents_cpu:.2} ms, database {db_cpu:.2} ms ({}), bench {bench_cpu:.2} ms",
        if postgres { "postgres processes" } else { "SQLite, inside the server" }
    );
    let (overcommitted, n_providers) = count_overcommitted(&nova.at(&url, "placement 1.39")).await?;
    println!("  overcommitted resource providers (usage above capacity) {overcommitted} of {n_providers}");
    if let Some(path) = &opts.json {
        let body = json!({
            "hosts": opts.hosts, "boots": opts.boots, "concurrency": opts.concurrency,
            "processes": opts.run.processes, "agents": opts.agents, "cells": opts.cells,
            "database": if postgres { "postgres" } else { "sqlite" },
            "active": active, "error": n_errors, "refused": n_refused, "elapsed_s": elapsed.as_secs_f64(),
            "boots_per_s": boots_per_s, "p50_ms": p50_ms, "p90_ms": p90_ms, "p99_ms": p99_ms, "max_ms": max_ms,
            "scheduler_runs": scheduler_runs, "claim_retries": claim_retries, "builds_failed": builds_failed,
            "rescheduled": rescheduled, "out_of_alternates": out_of_alternates,
            "overcommitted": overcommitted, "providers_checked": n_providers, "server_rss_mib": rss,
            "server_cpu_ms_per_boot": server_cpu, "agents_cpu_ms_per_boot": agents_cpu,
            "db_cpu_ms_per_boot": db_cpu, "bench_cpu_ms_per_boot": bench_cpu,
        });
        std::fs::write(path, serde_json::to_string_pretty(&body)?)?;
    }

    if opts.listing > 0 {
        listing(&nova, &flavor, &image, opts.listing, opts.concurrency).await?;
    }
    drop(agents);
    Ok(())
}

/// The resource providers whose usage exceeds their capacity for some
/// resource class, and the providers checked, read through the Placement
/// API (`placement` is at the server's root).
async fn count_overcommitted(placement: &Nova) -> anyhow::Result<(usize, usize)> {
    let (status, body) = placement.call(reqwest::Method::GET, "/resource_providers", None).await?;
    anyhow::ensure!(status == 200, "listing resource providers: {status}");
    let providers = body["resource_providers"].as_array().cloned().unwrap_or_default();
    let mut n_overcommitted = 0;
    for provider in &providers {
        let uuid = provider["uuid"].as_str().unwrap_or_default();
        let (status, inventories) =
            placement.call(reqwest::Method::GET, &format!("/resource_providers/{uuid}/inventories"), None).await?;
        anyhow::ensure!(status == 200, "inventories of {uuid}: {status}");
        let (status, usages) =
            placement.call(reqwest::Method::GET, &format!("/resource_providers/{uuid}/usages"), None).await?;
        anyhow::ensure!(status == 200, "usages of {uuid}: {status}");
        if overcommitted(&inventories["inventories"], &usages["usages"]) {
            n_overcommitted += 1;
        }
    }
    Ok((n_overcommitted, providers.len()))
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
