//! `berth bench write`: creates providers with inventories, traits and
//! aggregates over the placement API.
//!
//! Starts a fresh berth (`serve` on a temporary data directory) and, when
//! `--real-placement DIR` is given, the real Python Placement through the
//! conformance harness's `real_placement.py`, then drives both with the
//! same client: N providers, each created with inventories (VCPU,
//! MEMORY_MB, DISK_GB), traits and an aggregate — four requests per
//! provider — at a fixed concurrency, and prints requests/s and the ratio.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{spawn_berth, spawn_real, Binaries};

/// Options of `berth bench write`.
#[derive(Debug, clap::Args)]
pub(crate) struct WriteOpts {
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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()?;
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

pub(crate) async fn run(opts: WriteOpts, binaries: &Binaries) -> anyhow::Result<()> {
    println!(
        "bench write: {} providers x 4 requests (create, inventories, traits, aggregates), concurrency {}",
        opts.providers, opts.concurrency
    );
    let berth_rps = match &opts.url {
        Some(url) => report("target", &drive_writes(url, opts.providers, opts.concurrency).await?),
        None => {
            let berth = spawn_berth(binaries, &[]).await?;
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
