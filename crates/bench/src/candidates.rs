//! `berth bench candidates`: the allocation-candidate benchmark on
//! upstream's perfload shapes, over real HTTP with full responses.
//!
//! - `flat`: N providers with VCPU, MEMORY_MB and DISK_GB, all in one
//!   aggregate with trait HW_CPU_X86_AVX2; query
//!   `resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&member_of=<agg>&required=HW_CPU_X86_AVX2`.
//! - `nested`: N trees of 7 providers (compute root with DISK_GB and
//!   COMPUTE_VOLUME_MULTI_ATTACH; NUMA0 VCPU 4 reserved 2 + MEMORY_MB 2048
//!   min 512 step 256 with FPGA and VGPU children; NUMA1 VCPU 4 + MEMORY_MB
//!   2048 min 256 max 1024, CUSTOM_FOO, two FPGA children); query with
//!   granular groups and same_subtree.
//!
//! Reports: load time, median/p99 latency (full and `limit=1`), throughput
//! at concurrency C, claims/s with C clients doing GET `limit=5` then PUT
//! /allocations, an overcommit audit afterwards, and server RSS.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::common::{ms, percentile, spawn_berth, spawn_real, status_mib, Binaries, Spawned};

/// Options of `berth bench candidates`.
#[derive(Debug, clap::Args)]
pub(crate) struct CandidatesOpts {
    /// `flat` or `nested`.
    #[arg(long, default_value = "flat")]
    shape: String,
    /// Providers (flat) or trees (nested).
    #[arg(long, default_value_t = 1000)]
    size: usize,
    /// Sequential requests for the latency figures.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Concurrent clients for throughput and claims.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Seconds of the throughput run.
    #[arg(long, default_value_t = 5.0)]
    throughput_secs: f64,
    /// Claims to make in the claims run (0 skips it).
    #[arg(long, default_value_t = 2000)]
    claims: usize,
    /// Measure the real Placement too (harness directory with real_placement.py).
    #[arg(long)]
    real_placement: Option<std::path::PathBuf>,
    /// Python interpreter with openstack-placement installed.
    #[arg(long, default_value = "/tmp/placement-conformance-venv/bin/python")]
    python: std::path::PathBuf,
    /// Scale the real Placement's request counts down by this factor (it is
    /// ~100x slower; the figures are per-request so the ratio stays fair).
    #[arg(long, default_value_t = 10)]
    real_scale: usize,
    /// Extra arguments for `berth serve` (e.g. `--database postgres://…`).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    serve_arg: Vec<String>,
    /// Drive an already running placement instead of starting one.
    #[arg(long)]
    url: Option<String>,
    /// Concurrency for the real Placement's load and claims: its SQLite
    /// backend answers "database is locked" (500) to concurrent writers,
    /// so it is loaded and claims with this many clients (reads use
    /// --concurrency).
    #[arg(long, default_value_t = 1)]
    real_concurrency: usize,
    /// Unmeasured requests before each latency series (warm caches,
    /// connections).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Scale points: measure only `limit=1` (latency and throughput), no
    /// full responses.
    #[arg(long)]
    limit_only: bool,
    /// Start this many berth processes (they must share a database:
    /// pass `--serve-arg=--database --serve-arg=postgres://…`); clients
    /// are spread over them round-robin.
    #[arg(long, default_value_t = 1)]
    processes: usize,
}

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    fn new(url: &str, concurrency: usize) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(concurrency * 2)
                .pool_idle_timeout(std::time::Duration::from_secs(2))
                .build()?,
            url: url.to_owned(),
        })
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{}", self.url, path))
            .header("x-auth-token", "admin")
            .header("accept", "application/json")
            .header("openstack-api-version", "placement 1.39")
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, bytes::Bytes)> {
        let mut req = self.req(method, path);
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.bytes().await?))
    }

    async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (status, bytes) = self.send(method.clone(), path, body).await?;
        anyhow::ensure!((200..300).contains(&status), "{method} {path}: {status} {}", String::from_utf8_lossy(&bytes));
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

async fn create_provider(api: &Api, name: String, parent: Option<&str>) -> anyhow::Result<String> {
    let uuid = uuid::Uuid::new_v4().to_string();
    let mut body = json!({"name": name, "uuid": uuid});
    if let Some(parent) = parent {
        body["parent_provider_uuid"] = json!(parent);
    }
    api.ok(reqwest::Method::POST, "/resource_providers", Some(body)).await?;
    Ok(uuid)
}

async fn set_inventory(api: &Api, uuid: &str, generation: i64, inventories: Value) -> anyhow::Result<()> {
    api.ok(
        reqwest::Method::PUT,
        &format!("/resource_providers/{uuid}/inventories"),
        Some(json!({"resource_provider_generation": generation, "inventories": inventories})),
    )
    .await
    .map(|_| ())
}

async fn set_traits(api: &Api, uuid: &str, generation: i64, traits: &[&str]) -> anyhow::Result<()> {
    api.ok(
        reqwest::Method::PUT,
        &format!("/resource_providers/{uuid}/traits"),
        Some(json!({"resource_provider_generation": generation, "traits": traits})),
    )
    .await
    .map(|_| ())
}

/// Build one unit (a flat provider, or a nested tree) number `idx`.
async fn build_unit(api: &Api, shape: &str, idx: usize, agg: &str) -> anyhow::Result<()> {
    if shape == "flat" {
        let uuid = create_provider(api, format!("cn{idx}"), None).await?;
        set_inventory(
            api,
            &uuid,
            0,
            json!({"VCPU": {"total": 32, "allocation_ratio": 16.0},
                   "MEMORY_MB": {"total": 131072, "allocation_ratio": 1.5},
                   "DISK_GB": {"total": 2048}}),
        )
        .await?;
        set_traits(api, &uuid, 1, &["HW_CPU_X86_AVX2"]).await?;
        api.ok(
            reqwest::Method::PUT,
            &format!("/resource_providers/{uuid}/aggregates"),
            Some(json!({"resource_provider_generation": 2, "aggregates": [agg]})),
        )
        .await?;
        return Ok(());
    }
    let root = create_provider(api, format!("cn{idx}"), None).await?;
    set_inventory(api, &root, 0, json!({"DISK_GB": {"total": 20480}})).await?;
    set_traits(api, &root, 1, &["COMPUTE_VOLUME_MULTI_ATTACH"]).await?;
    let numa0 = create_provider(api, format!("cn{idx}-numa0"), Some(&root)).await?;
    set_inventory(
        api,
        &numa0,
        0,
        json!({"VCPU": {"total": 4, "reserved": 2},
               "MEMORY_MB": {"total": 2048, "min_unit": 512, "step_size": 256}}),
    )
    .await?;
    set_traits(api, &numa0, 1, &["HW_NUMA_ROOT"]).await?;
    let fpga0 = create_provider(api, format!("cn{idx}-numa0-fpga0"), Some(&numa0)).await?;
    set_inventory(api, &fpga0, 0, json!({"FPGA": {"total": 1}})).await?;
    let vgpu = create_provider(api, format!("cn{idx}-numa0-vgpu"), Some(&numa0)).await?;
    set_inventory(api, &vgpu, 0, json!({"VGPU": {"total": 8}})).await?;
    let numa1 = create_provider(api, format!("cn{idx}-numa1"), Some(&root)).await?;
    set_inventory(
        api,
        &numa1,
        0,
        json!({"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024}}),
    )
    .await?;
    set_traits(api, &numa1, 1, &["HW_NUMA_ROOT", "CUSTOM_FOO"]).await?;
    for f in 0..2 {
        let fpga = create_provider(api, format!("cn{idx}-numa1-fpga{f}"), Some(&numa1)).await?;
        set_inventory(api, &fpga, 0, json!({"FPGA": {"total": 1}})).await?;
    }
    Ok(())
}

fn query(shape: &str, agg: &str) -> String {
    if shape == "flat" {
        format!(
            "/allocation_candidates?resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&member_of={agg}&required=HW_CPU_X86_AVX2"
        )
    } else {
        "/allocation_candidates?resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH\
         &resources_COMPUTE=VCPU:1,MEMORY_MB:256&required_COMPUTE=CUSTOM_FOO\
         &resources_FPGA=FPGA:1&group_policy=none&same_subtree=_COMPUTE,_FPGA"
            .to_owned()
    }
}

/// Figures of one target.
#[derive(Debug, Default, Clone)]
struct Figures {
    load_secs: f64,
    candidates: usize,
    bytes: usize,
    median_ms: f64,
    p99_ms: f64,
    limit1_median_ms: f64,
    limit1_p99_ms: f64,
    limit1000_median_ms: f64,
    limit1000_p99_ms: f64,
    rps: f64,
    claims_per_sec: f64,
    claims: usize,
    conflicts: usize,
    overcommitted: usize,
    rss_mib: f64,
    peak_rss_mib: f64,
}

async fn latency(api: &Api, path: &str, n: usize, warmup: usize) -> anyhow::Result<(Vec<Duration>, usize, usize)> {
    for _ in 0..warmup {
        api.send(reqwest::Method::GET, path, None).await?;
    }
    let mut samples = Vec::with_capacity(n);
    let mut last = (0, 0);
    for _ in 0..n {
        let started = Instant::now();
        let (status, bytes) = api.send(reqwest::Method::GET, path, None).await?;
        samples.push(started.elapsed());
        anyhow::ensure!(status == 200, "GET {path}: {status} {}", String::from_utf8_lossy(&bytes));
        last.1 = bytes.len();
        last.0 = n;
    }
    let (_, bytes) = api.send(reqwest::Method::GET, path, None).await?;
    let body: Value = serde_json::from_slice(&bytes)?;
    let count = body["allocation_requests"].as_array().map(Vec::len).unwrap_or(0);
    samples.sort();
    Ok((samples, count, last.1))
}

async fn throughput(apis: &[Api], path: &str, concurrency: usize, secs: f64) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let (api, path, done) = (apis[worker % apis.len()].clone(), path.to_owned(), done.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                if let Ok((200, _)) = api.send(reqwest::Method::GET, &path, None).await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// C clients: GET `limit=5`, PUT the first candidate for a new consumer,
/// on 409 try the next candidate / a fresh GET.
async fn claims(apis: &[Api], path: &str, concurrency: usize, total: usize) -> anyhow::Result<(f64, usize, usize)> {
    let next = Arc::new(AtomicUsize::new(0));
    let conflicts = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let (api, path) = (apis[worker % apis.len()].clone(), format!("{path}&limit=5"));
        let (next, conflicts, granted) = (next.clone(), conflicts.clone(), granted.clone());
        workers.push(tokio::spawn(async move {
            let mut attempts = 0;
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let Ok((200, bytes)) = api.send(reqwest::Method::GET, &path, None).await else { break };
                let Ok(body) = serde_json::from_slice::<Value>(&bytes) else { break };
                let Some(requests) = body["allocation_requests"].as_array().filter(|r| !r.is_empty()).cloned() else {
                    break; // capacity exhausted
                };
                let pick = &requests[(worker + attempts) % requests.len()];
                attempts += 1;
                let consumer = uuid::Uuid::new_v4();
                let claim = json!({"allocations": pick["allocations"], "project_id": "bench", "user_id": "bench",
                                   "consumer_generation": null, "consumer_type": "INSTANCE"});
                match api.send(reqwest::Method::PUT, &format!("/allocations/{consumer}"), Some(claim)).await {
                    Ok((204, _)) => {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((409, _)) => {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((status, bytes)) => {
                        eprintln!("claim failed: {status} {}", String::from_utf8_lossy(&bytes));
                        break;
                    }
                    Err(err) => {
                        eprintln!("claim failed: {err}");
                        break;
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    let granted = granted.load(Ordering::Relaxed);
    Ok((granted as f64 / started.elapsed().as_secs_f64(), granted, conflicts.load(Ordering::Relaxed)))
}

/// Count (provider, class) pairs whose usage exceeds capacity.
async fn overcommitted(api: &Api) -> anyhow::Result<usize> {
    let list = api.ok(reqwest::Method::GET, "/resource_providers", None).await?;
    let mut bad = 0;
    for p in list["resource_providers"].as_array().cloned().unwrap_or_default() {
        let uuid = p["uuid"].as_str().unwrap_or_default();
        let inv = api.ok(reqwest::Method::GET, &format!("/resource_providers/{uuid}/inventories"), None).await?;
        let usages = api.ok(reqwest::Method::GET, &format!("/resource_providers/{uuid}/usages"), None).await?;
        for (class, record) in inv["inventories"].as_object().cloned().unwrap_or_default() {
            let capacity = crate::common::capacity(&record);
            let used = usages["usages"][&class].as_i64().unwrap_or(0);
            if used > capacity {
                eprintln!("OVERCOMMIT {uuid} {class}: used {used} > capacity {capacity}");
                bad += 1;
            }
        }
    }
    Ok(bad)
}

async fn provider_count(api: &Api) -> usize {
    match api.ok(reqwest::Method::GET, "/resource_providers", None).await {
        Ok(body) => body["resource_providers"].as_array().map(Vec::len).unwrap_or(0),
        Err(_) => 0,
    }
}

async fn measure(
    name: &str,
    urls: &[String],
    pid: Option<u32>,
    opts: &CandidatesOpts,
    scale: usize,
    write_concurrency: usize,
) -> anyhow::Result<Figures> {
    let apis: Vec<Api> = urls.iter().map(|u| Api::new(u, opts.concurrency)).collect::<anyhow::Result<_>>()?;
    let api = apis[0].clone();
    let mut f = Figures::default();
    let agg = uuid::Uuid::new_v4().to_string();
    // Load with `concurrency` parallel builders.
    let started = Instant::now();
    api.ok(reqwest::Method::PUT, "/traits/CUSTOM_FOO", None).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let mut builders = Vec::new();
    for _ in 0..write_concurrency {
        let (api, next, agg, shape, size) = (api.clone(), next.clone(), agg.clone(), opts.shape.clone(), opts.size);
        builders.push(tokio::spawn(async move {
            loop {
                let idx = next.fetch_add(1, Ordering::Relaxed);
                if idx >= size {
                    return Ok::<(), anyhow::Error>(());
                }
                build_unit(&api, &shape, idx, &agg).await?;
            }
        }));
    }
    for b in builders {
        b.await??;
    }
    f.load_secs = started.elapsed().as_secs_f64();
    if apis.len() > 1 {
        // Wait for the other processes to follow the change feed.
        let want = provider_count(&api).await;
        let waited = Instant::now();
        for other in &apis[1..] {
            while provider_count(other).await != want {
                anyhow::ensure!(waited.elapsed() < Duration::from_secs(120), "processes did not converge");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        println!("{name:<15} other processes caught up {:.3}s after the load finished", waited.elapsed().as_secs_f64());
    }
    let path = query(&opts.shape, &agg);
    let n = (opts.requests / scale).max(10);
    if !opts.limit_only {
        let (samples, count, bytes) = latency(&api, &path, n, opts.warmup).await.context("full-response latency")?;
        f.candidates = count;
        f.bytes = bytes;
        f.median_ms = ms(percentile(&samples, 0.5));
        f.p99_ms = ms(percentile(&samples, 0.99));
    }
    let limit1 = format!("{path}&limit=1");
    let (samples, _, _) = latency(&api, &limit1, n, opts.warmup).await?;
    f.limit1_median_ms = ms(percentile(&samples, 0.5));
    f.limit1_p99_ms = ms(percentile(&samples, 0.99));
    // What Nova asks (`max_placement_results`).
    let (samples, _, _) = latency(&api, &format!("{path}&limit=1000"), n, opts.warmup).await?;
    f.limit1000_median_ms = ms(percentile(&samples, 0.5));
    f.limit1000_p99_ms = ms(percentile(&samples, 0.99));
    let throughput_path = if opts.limit_only { &limit1 } else { &path };
    f.rps = throughput(&apis, throughput_path, opts.concurrency, opts.throughput_secs).await?;
    if opts.claims > 0 {
        let (rate, granted, conflicts) = claims(&apis, &path, write_concurrency, (opts.claims / scale).max(20)).await?;
        if apis.len() > 1 {
            // The audit reads through the first process: let it follow
            // the claims made on the others.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        f.claims_per_sec = rate;
        f.claims = granted;
        f.conflicts = conflicts;
        f.overcommitted = overcommitted(&api).await?;
    }
    if let Some(pid) = pid {
        f.rss_mib = status_mib(pid, "VmRSS:");
        f.peak_rss_mib = status_mib(pid, "VmHWM:");
    }
    println!(
        "{name:<15} load {:>7.1}s | {:>5} candidates {:>8} B | full median {:>8.2} ms p99 {:>8.2} ms | limit=1 median {:>7.2} ms p99 {:>7.2} ms | limit=1000 median {:>7.2} ms p99 {:>7.2} ms | {:>8.1} req/s @{}{} | claims@{} {:>7.1}/s ({} granted, {} conflicts, {} overcommitted) | RSS {:.0} MiB, peak {:.0} MiB",
        f.load_secs, f.candidates, f.bytes, f.median_ms, f.p99_ms, f.limit1_median_ms, f.limit1_p99_ms,
        f.limit1000_median_ms, f.limit1000_p99_ms, f.rps,
        opts.concurrency, if opts.limit_only { " (limit=1)" } else { "" }, write_concurrency, f.claims_per_sec, f.claims, f.conflicts, f.overcommitted, f.rss_mib, f.peak_rss_mib
    );
    Ok(f)
}

pub(crate) async fn run(opts: CandidatesOpts, binaries: &Binaries) -> anyhow::Result<()> {
    anyhow::ensure!(opts.shape == "flat" || opts.shape == "nested", "--shape must be flat or nested");
    println!("bench candidates: shape {} size {} (HTTP, full responses, microversion 1.39)", opts.shape, opts.size);
    let berth = match &opts.url {
        Some(url) => measure("target", std::slice::from_ref(url), None, &opts, 1, opts.concurrency).await?,
        None => {
            let mut servers: Vec<Spawned> = Vec::new();
            for _ in 0..opts.processes.max(1) {
                servers.push(spawn_berth(binaries, &opts.serve_arg).await?);
            }
            let pid = servers[0].child.id();
            let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
            let name = if urls.len() > 1 { format!("berth x{}", urls.len()) } else { "berth".to_owned() };
            measure(&name, &urls, Some(pid), &opts, 1, opts.concurrency).await?
        }
    };
    if let Some(harness) = &opts.real_placement {
        let real = spawn_real(harness, &opts.python).await?;
        let pid = real.child.id();
        let r = measure(
            "real placement",
            std::slice::from_ref(&real.url),
            Some(pid),
            &opts,
            opts.real_scale,
            opts.real_concurrency,
        )
        .await?;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        println!(
            "ratios berth vs real: full median {:.0}x faster, limit=1 median {:.0}x faster, throughput {:.0}x, claims/s {:.0}x, load {:.1}x faster",
            ratio(r.median_ms, berth.median_ms),
            ratio(r.limit1_median_ms, berth.limit1_median_ms),
            ratio(berth.rps, r.rps),
            ratio(berth.claims_per_sec, r.claims_per_sec),
            ratio(r.load_secs, berth.load_secs)
        );
    }
    Ok(())
}
