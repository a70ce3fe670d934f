//! `berth bench dashboard`: the operator dashboard's data endpoints at
//! scale (issue 25).
//!
//! Starts berth with `--fake-hosts N` (in-process fake hypervisors),
//! enrols `--pool-share` of the hosts for reservation, boots `--servers`
//! servers through the compute API (multi-create batches of `--batch`,
//! `--concurrency` at a time, quotas lifted), posts `--leases` random
//! leases (host and instance reservations over `--days`, refusals
//! counted), then measures over real HTTP `--queries` sequential GETs of
//! each `/dashboard/api/...` endpoint: p50/p99 latency and body size.
//! With `--keep` the server stays up afterwards (its URL printed) until
//! Ctrl-C, so that the browser script
//! (`scripts/dashboard-browser-test.py --measure URL`) can time each view's
//! first render and take screenshots at that scale.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{hosts_ready, metric, ms, percentile, rss_mib, spawn_berth, Binaries, Nova, Rng};

const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// Options of `berth bench dashboard`.
#[derive(Debug, clap::Args)]
pub(crate) struct DashboardOpts {
    /// Hosts (in-process fake hypervisors).
    #[arg(long, default_value_t = 5000)]
    hosts: usize,
    /// Share of the hosts enrolled for reservation (the lease calendar's rows).
    #[arg(long, default_value_t = 0.2)]
    pool_share: f64,
    /// Servers to boot (1 vCPU, 512 MiB, 1 GiB each) on the other hosts.
    #[arg(long, default_value_t = 50_000)]
    servers: usize,
    /// Servers per multi-create request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Leases to post (random windows over `--days`).
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// Days over which the leases' windows fall, from a day from now.
    #[arg(long, default_value_t = 60)]
    days: i64,
    /// Requests in flight while setting up.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// GETs per data endpoint.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 25)]
    seed: u64,
    /// Keep the server running after the figures (until Ctrl-C), for the
    /// browser measurement and screenshots.
    #[arg(long)]
    keep: bool,
    /// Extra arguments for `berth serve`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_arg: Vec<String>,
    /// Write the figures (each endpoint's p50/p99 and bytes) as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// POST every body to `path` with `concurrency` clients; (created, refused
/// with 409, first other failure).
async fn post_all(
    admin: &Nova,
    path: &str,
    bodies: Vec<Value>,
    concurrency: usize,
) -> anyhow::Result<(usize, usize, Option<String>)> {
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (admin, bodies, next, path) = (admin.clone(), bodies.clone(), next.clone(), path.to_owned());
        workers.spawn(async move {
            let (mut created, mut refused, mut failure) = (0, 0, None);
            loop {
                let idx = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(idx) else { return Ok::<_, anyhow::Error>((created, refused, failure)) };
                let (status, answer) = admin.call(reqwest::Method::POST, &path, Some(body.clone())).await?;
                match status {
                    200..=202 => created += 1,
                    409 => refused += 1,
                    _ => {
                        failure.get_or_insert_with(|| format!("{status} {answer}"));
                    }
                }
            }
        });
    }
    let (mut created, mut refused, mut failure) = (0, 0, None);
    while let Some(done) = workers.join_next().await {
        let (c, r, f) = done??;
        created += c;
        refused += r;
        failure = failure.or(f);
    }
    Ok((created, refused, failure))
}

fn blazar_date(t: i64) -> String {
    // Days since the epoch to a civil date (Howard Hinnant's algorithm).
    let (days, secs) = (t.div_euclid(DAY), t.rem_euclid(DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", secs / HOUR, (secs % HOUR) / 60)
}

/// Run `berth bench dashboard`.
pub(crate) async fn run(opts: DashboardOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let mut args = vec!["--fake-hosts".to_owned(), opts.hosts.to_string()];
    args.extend(opts.serve_arg.iter().cloned());
    let berth = spawn_berth(binaries, &args).await?;
    let url = berth.url.clone();
    let admin = Nova::new(&url, opts.concurrency * 2)?.at(&url, "compute 2.96");
    let started = Instant::now();
    hosts_ready(&url, opts.hosts).await?;
    println!("dashboard: {} hosts registered in {:.1} s", opts.hosts, started.elapsed().as_secs_f64());

    // The pool: the last hosts.
    let pool = ((opts.hosts as f64 * opts.pool_share).round() as usize).min(opts.hosts);
    let enrol: Vec<Value> = (opts.hosts - pool..opts.hosts).map(|i| json!({"name": format!("fake-{i}")})).collect();
    let (enrolled, _, failure) = post_all(&admin, "/reservation/v1/os-hosts", enrol, opts.concurrency).await?;
    anyhow::ensure!(enrolled == pool, "enrolled {enrolled} of {pool} hosts: {failure:?}");

    // Servers.
    let quota = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    let (status, body) = admin.call(reqwest::Method::PUT, "/compute/v2.1/os-quota-sets/admin", Some(quota)).await?;
    anyhow::ensure!(status == 200, "quota update: {status} {body}");
    let flavor = json!({"flavor": {"name": "bench.small", "vcpus": 1, "ram": 512, "disk": 1}});
    let (status, flavor) = admin.call(reqwest::Method::POST, "/compute/v2.1/flavors", Some(flavor)).await?;
    anyhow::ensure!(status == 200, "flavor create: {status} {flavor}");
    for (name, vcpus, ram, disk) in [("bench.medium", 4, 4096, 20), ("bench.large", 16, 16384, 80)] {
        let body = json!({"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}});
        admin.call(reqwest::Method::POST, "/compute/v2.1/flavors", Some(body)).await?;
    }
    let flavor = flavor["flavor"]["id"].as_str().unwrap_or("").to_owned();
    let image = json!({"name": "bench", "disk_format": "qcow2", "container_format": "bare", "visibility": "public"});
    let (status, image) = admin.call(reqwest::Method::POST, "/image/v2/images", Some(image)).await?;
    anyhow::ensure!(status == 201, "image create: {status} {image}");
    let image = image["id"].as_str().unwrap_or("").to_owned();
    admin.upload_image(&url, &image).await?;
    let batch = opts.batch.max(1);
    let boots: Vec<Value> = (0..opts.servers.div_ceil(batch))
        .map(|i| {
            let n = batch.min(opts.servers - i * batch);
            json!({"server": {"name": format!("b{i}"), "flavorRef": flavor, "imageRef": image, "networks": "none",
                              "min_count": n, "max_count": n}})
        })
        .collect();
    let t = Instant::now();
    let (accepted, _, failure) = post_all(&admin, "/compute/v2.1/servers", boots.clone(), opts.concurrency).await?;
    anyhow::ensure!(accepted == boots.len(), "boot requests accepted {accepted} of {}: {failure:?}", boots.len());
    let deadline = Instant::now() + Duration::from_secs(1800);
    while metric(&url, "berth_compute_build_requests").await > 0 {
        anyhow::ensure!(Instant::now() < deadline, "boots did not settle");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("dashboard: {} servers scheduled in {:.1} s", opts.servers, t.elapsed().as_secs_f64());

    // Leases.
    let (status, session) = admin.call(reqwest::Method::GET, "/dashboard/api/session", None).await?;
    anyhow::ensure!(status == 200, "session: {status} {session}");
    let now = session["now"].as_i64().unwrap_or(0);
    let mut rng = Rng(opts.seed);
    let leases: Vec<Value> = (0..opts.leases)
        .map(|i| {
            let start = now + DAY + rng.range(0, opts.days.max(1) * DAY);
            let start = start - start % 60;
            let end = start + rng.range(HOUR, 4 * DAY);
            let reservation = if rng.unit() < 0.7 {
                let n = rng.range(1, 2);
                json!({"resource_type": "physical:host", "min": n, "max": n,
                       "hypervisor_properties": "", "resource_properties": ""})
            } else {
                json!({"resource_type": "virtual:instance", "amount": rng.range(1, 4), "vcpus": rng.pick(&[1, 2, 4]),
                       "memory_mb": 1024, "disk_gb": 10, "affinity": null, "resource_properties": ""})
            };
            json!({"name": format!("l{i}"), "start_date": blazar_date(start), "end_date": blazar_date(end),
                   "events": [], "reservations": [reservation]})
        })
        .collect();
    let t = Instant::now();
    let (admitted, refused, failure) = post_all(&admin, "/reservation/v1/leases", leases, opts.concurrency).await?;
    anyhow::ensure!(failure.is_none(), "lease posts failed: {failure:?}");
    println!("dashboard: {admitted} leases admitted, {refused} refused (409) in {:.1} s", t.elapsed().as_secs_f64());

    // The endpoints.
    let (_, capacity) = admin.call(reqwest::Method::GET, "/dashboard/api/capacity", None).await?;
    let host = capacity["hosts"][0]["uuid"].as_str().unwrap_or("").to_owned();
    let week = format!("/dashboard/api/leases?start={}&end={}", now - DAY, now + 6 * DAY);
    let month = format!("/dashboard/api/leases?start={}&end={}", now - 4 * DAY, now + 26 * DAY);
    let endpoints = [
        "/dashboard/api/session".to_owned(),
        "/dashboard/api/capacity".to_owned(),
        format!("/dashboard/api/hosts/{host}"),
        "/dashboard/api/flavors".to_owned(),
        format!("/dashboard/api/flavors?at={}", now + 3 * DAY),
        week,
        month,
        "/dashboard/api/projects".to_owned(),
        "/dashboard/api/activity".to_owned(),
    ];
    let client = reqwest::Client::new();
    let mut worst = Duration::ZERO;
    let mut figures = Vec::new();
    println!("{:<60} {:>9} {:>9} {:>10}", "endpoint", "p50 ms", "p99 ms", "bytes");
    for path in &endpoints {
        let mut took = Vec::with_capacity(opts.queries);
        let mut bytes = 0;
        for _ in 0..opts.queries.max(1) {
            let t = Instant::now();
            let resp = client.get(format!("{url}{path}")).header("x-auth-token", "admin").send().await?;
            anyhow::ensure!(resp.status().as_u16() == 200, "{path}: {}", resp.status());
            bytes = resp.bytes().await?.len();
            took.push(t.elapsed());
        }
        took.sort();
        worst = worst.max(percentile(&took, 0.99));
        println!("{path:<60} {:>9.2} {:>9.2} {bytes:>10}", ms(percentile(&took, 0.5)), ms(percentile(&took, 0.99)));
        figures.push(json!({"endpoint": path, "p50_ms": ms(percentile(&took, 0.5)),
                            "p99_ms": ms(percentile(&took, 0.99)), "bytes": bytes}));
    }
    let rss = rss_mib(berth.child.id());
    println!("dashboard: worst endpoint p99 {:.2} ms; server RSS {rss:.0} MiB", ms(worst));
    if let Some(path) = &opts.json {
        let body = json!({"hosts": opts.hosts, "servers": opts.servers, "leases": opts.leases,
                          "endpoints": figures, "worst_p99_ms": ms(worst), "rss_mib": rss});
        std::fs::write(path, serde_json::to_string_pretty(&body)?)?;
    }
    if opts.keep {
        println!("dashboard: serving at {url}/dashboard/ (Ctrl-C to stop)");
        tokio::signal::ctrl_c().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blazar_dates_are_civil_utc() {
        assert_eq!(blazar_date(0), "1970-01-01 00:00");
        assert_eq!(blazar_date(2_208_988_800), "2040-01-01 00:00");
        assert_eq!(blazar_date(951_782_400 + 3 * HOUR + 7 * 60), "2000-02-29 03:07");
    }
}
