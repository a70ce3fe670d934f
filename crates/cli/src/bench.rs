//! `berth bench`: load generators over real HTTP on loopback.
//!
//! `berth bench write` starts a fresh berth (this binary, `serve` on a
//! temporary data directory) and, when `--real-placement DIR` is given, the
//! real Python Placement through the conformance harness's
//! `real_placement.py`, then drives both with the same client: N providers,
//! each created with inventories (VCPU, MEMORY_MB, DISK_GB), traits and an
//! aggregate — four requests per provider — at a fixed concurrency, and
//! prints requests/s and the ratio.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

/// Options of `berth bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchOpts {
    #[command(subcommand)]
    which: BenchKind,
}

#[derive(Debug, clap::Subcommand)]
enum BenchKind {
    /// Create providers with inventories, traits and aggregates (4 requests each).
    Write(WriteOpts),
    /// GET /allocation_candidates latency, throughput and claims on the
    /// upstream perfload shapes.
    Candidates(crate::bench_candidates::CandidatesOpts),
    /// Boots through the compute API until ACTIVE, with agent processes.
    Boot(crate::bench_boot::BootOpts),
    /// Reservations: lease admission, availability queries and lease events.
    Leases(crate::bench_leases::LeasesOpts),
    /// The server lifecycle under churn and agent crashes (`kill -9`),
    /// then an audit: drift, orphans, over-capacity, the heal's findings.
    Soak(crate::bench_soak::SoakOpts),
    /// GET /compute/v2.1/servers with Keystone auth vs noauth2, and
    /// Keystone calls per distinct token.
    Auth(crate::bench_auth::AuthOpts),
}

#[derive(Debug, clap::Args)]
struct WriteOpts {
    /// Number of providers to create.
    #[arg(long, default_value_t = 1000)]
    providers: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Directory holding the placement-conformance harness
    /// (`real_placement.py`); when given, the real Placement is measured too.
    #[arg(long)]
    real_placement: Option<PathBuf>,
    /// Python interpreter with openstack-placement installed (the harness venv).
    #[arg(long, default_value = "/tmp/placement-conformance-venv/bin/python")]
    python: PathBuf,
    /// Drive an already running placement at this URL instead of starting berth.
    #[arg(long)]
    url: Option<String>,
    /// Concurrency for the real Placement (default: same as --concurrency).
    #[arg(long)]
    real_concurrency: Option<usize>,
}

pub(crate) fn run(opts: BenchOpts) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match opts.which {
        BenchKind::Write(w) => runtime.block_on(write_bench(w)),
        BenchKind::Candidates(c) => runtime.block_on(crate::bench_candidates::run(c)),
        BenchKind::Boot(b) => runtime.block_on(crate::bench_boot::run(b)),
        BenchKind::Leases(l) => runtime.block_on(crate::bench_leases::run(l)),
        BenchKind::Soak(s) => runtime.block_on(crate::bench_soak::run(s)),
        BenchKind::Auth(a) => runtime.block_on(crate::bench_auth::run(a)),
    }
}

/// The processes a benchmark runs: berth servers and their extra
/// arguments, and the agents' extra arguments (`bench boot`, `bench soak`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ProcessArgs {
    /// Berth processes (more than one needs a shared PostgreSQL database
    /// given with `--serve-arg`). Each client and each agent sticks to one.
    #[arg(long, default_value_t = 1)]
    pub(crate) processes: usize,
    /// Extra arguments for `berth serve` (e.g. `--database postgres://…`).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    pub(crate) serve_arg: Vec<String>,
    /// Extra arguments for every agent (e.g. `--fail-rate 0.01`: 1 % of
    /// builds fail and are rescheduled onto their alternates).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    pub(crate) agent_arg: Vec<String>,
}

/// splitmix64: enough randomness for load shapes, and reproducible.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// A server process started for a benchmark, killed on drop.
pub(crate) struct Spawned {
    pub(crate) child: Child,
    pub(crate) url: String,
    dir: PathBuf,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn temp_dir(tag: &str) -> anyhow::Result<PathBuf> {
    // Several servers of one benchmark each get a directory of their own.
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("berth-bench-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn wait_ready(url: &str, child: &mut Child) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("server exited during start-up: {status}");
        }
        if client.get(format!("{url}/")).send().await.is_ok_and(|r| r.status().as_u16() < 500) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("server at {url} did not become ready")
}

pub(crate) async fn spawn_berth(extra_args: &[String]) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let dir = temp_dir("berth")?;
    // `BERTH_BENCH_SERVER=PATH` serves with another berth binary (before /
    // after comparisons with the same load generator).
    let exe = match std::env::var_os("BERTH_BENCH_SERVER") {
        Some(path) if !path.is_empty() => std::path::PathBuf::from(path),
        _ => std::env::current_exe()?,
    };
    let mut child = Command::new(exe)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--data-dir"])
        .arg(&dir)
        .args(extra_args)
        .stdout(Stdio::null())
        .spawn()
        .context("starting berth")?;
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&url, &mut child).await?;
    Ok(Spawned { child, url, dir })
}

pub(crate) async fn spawn_real(harness: &std::path::Path, python: &std::path::Path) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let dir = temp_dir("real")?;
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "{}\n")?;
    let mut child = Command::new(python)
        .arg(harness.join("real_placement.py"))
        .args(["--port", &port.to_string(), "--workdir"])
        .arg(&dir)
        .arg("--policy-file")
        .arg(&policy)
        .args(["--cors-origin", "", "--cors-allow-headers", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting real placement")?;
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&url, &mut child).await?;
    Ok(Spawned { child, url, dir })
}

/// Result of one write run.
struct WriteResult {
    /// Requests that succeeded (only these count towards the rate).
    requests: usize,
    elapsed: Duration,
    /// Providers whose sequence stopped at a failed request.
    failures: usize,
    /// The first failure seen, for the report.
    first_failure: Option<String>,
}

/// One admin JSON request at microversion 1.39.
async fn send_json(
    client: &reqwest::Client,
    url: &str,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) -> reqwest::Result<reqwest::Response> {
    client
        .request(method, format!("{url}{path}"))
        .header("x-auth-token", "admin")
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .header("openstack-api-version", "placement 1.39")
        .body(body.to_string())
        .send()
        .await
}

async fn drive_writes(url: &str, n_providers: usize, concurrency: usize) -> anyhow::Result<WriteResult> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency * 2).build()?;
    // Shared set-up: one custom trait.
    let resp = send_json(&client, url, reqwest::Method::PUT, "/traits/CUSTOM_BENCH", json!({})).await?;
    anyhow::ensure!(resp.status().is_success(), "creating CUSTOM_BENCH: {}", resp.status());
    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let succeeded = Arc::new(AtomicUsize::new(0));
    let first_failure: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let aggregate = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let next = next.clone();
        let failures = failures.clone();
        let succeeded = succeeded.clone();
        let first_failure = first_failure.clone();
        let client = client.clone();
        let url = url.to_owned();
        let aggregate = aggregate.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let idx = next.fetch_add(1, Ordering::SeqCst);
                if idx >= n_providers {
                    break;
                }
                let uuid = uuid::Uuid::new_v4().to_string();
                let steps = [
                    (
                        reqwest::Method::POST,
                        "/resource_providers".to_owned(),
                        json!({"name": format!("bench-{idx}"), "uuid": uuid}),
                    ),
                    (
                        reqwest::Method::PUT,
                        format!("/resource_providers/{uuid}/inventories"),
                        json!({"resource_provider_generation": 0, "inventories": {
                            "VCPU": {"total": 32, "allocation_ratio": 16.0},
                            "MEMORY_MB": {"total": 131072, "reserved": 512},
                            "DISK_GB": {"total": 2048, "min_unit": 1, "max_unit": 2048}}}),
                    ),
                    (
                        reqwest::Method::PUT,
                        format!("/resource_providers/{uuid}/traits"),
                        json!({"resource_provider_generation": 1, "traits": ["HW_CPU_X86_AVX2", "CUSTOM_BENCH"]}),
                    ),
                    (
                        reqwest::Method::PUT,
                        format!("/resource_providers/{uuid}/aggregates"),
                        json!({"resource_provider_generation": 2, "aggregates": [aggregate]}),
                    ),
                ];
                for (method, path, body) in steps {
                    let what = format!("{method} {path}");
                    let failure = match send_json(&client, &url, method, &path, body).await {
                        Ok(resp) if resp.status().is_success() => {
                            let _ = resp.bytes().await;
                            succeeded.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Ok(resp) => {
                            let status = resp.status();
                            let text = resp.text().await.unwrap_or_default();
                            Some(format!("{what}: {status} {}", text.chars().take(300).collect::<String>()))
                        }
                        Err(err) => Some(format!("{what}: {err}")),
                    };
                    if let Some(failure) = failure {
                        failures.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut first) = first_failure.lock() {
                            first.get_or_insert(failure);
                        }
                        break;
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let first_failure = first_failure.lock().ok().and_then(|f| f.clone());
    Ok(WriteResult {
        requests: succeeded.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        failures: failures.load(Ordering::Relaxed),
        first_failure,
    })
}

fn report(name: &str, result: &WriteResult) -> f64 {
    let rps = result.requests as f64 / result.elapsed.as_secs_f64();
    println!(
        "{name:<16} {:>6} successful requests in {:>8.3} s  = {:>9.1} req/s  ({} provider sequences failed)",
        result.requests,
        result.elapsed.as_secs_f64(),
        rps,
        result.failures
    );
    if let Some(first) = &result.first_failure {
        println!("{:<16} first failure: {first}", "");
    }
    rps
}

async fn write_bench(opts: WriteOpts) -> anyhow::Result<()> {
    println!(
        "bench write: {} providers x 4 requests (create, inventories, traits, aggregates), concurrency {}",
        opts.providers, opts.concurrency
    );
    let berth_rps = match &opts.url {
        Some(url) => report("target", &drive_writes(url, opts.providers, opts.concurrency).await?),
        None => {
            let berth = spawn_berth(&[]).await?;
            report("berth", &drive_writes(&berth.url, opts.providers, opts.concurrency).await?)
        }
    };
    if let Some(harness) = &opts.real_placement {
        let real = spawn_real(harness, &opts.python).await?;
        let concurrency = opts.real_concurrency.unwrap_or(opts.concurrency);
        let real_rps = report(
            &format!("real placement @{concurrency}"),
            &drive_writes(&real.url, opts.providers, concurrency).await?,
        );
        println!("ratio berth / real placement: {:.1}x", berth_rps / real_rps);
    }
    Ok(())
}
