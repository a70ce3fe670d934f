//! `berth bench leases`: reservations at scale (issue 9).
//!
//! Starts berth with `--fake-hosts N --test-hooks` (in-process fake
//! hypervisors, a movable clock), enrols every host for reservation
//! (`POST /reservation/v1/os-hosts`), then measures over real HTTP:
//!
//! 1. admission: `--leases` leases with random windows over a year
//!    (starting a day from now, durations from an hour to four weeks;
//!    mostly `physical:host` with min/max 1–3, some `virtual:instance`
//!    slots with amount 1–4) posted by `--concurrency` clients; decisions/s
//!    and admitted vs refused (409 "Not enough hosts available");
//! 2. `GET /reservation/v1/availability` (the earliest window) latency
//!    p50/p99, one client, `--queries` random requests from a random day:
//!    small ones shaped like the leases and large ones (a tenth to nine
//!    tenths of the hosts, often not free at the day asked);
//! 3. events: `--burst` one-host leases that all start in the same minute
//!    (before every random lease); the clock is moved to their start and
//!    the time until all of them are ACTIVE gives events/s
//!    (`berth_lease_events_done_total` is polled, the leases then checked).
//!    Moving the clock does not wake the lease runner (it would at its
//!    next tick, a second); renaming one lease right after does, as any
//!    lease change does, so the figure is the events' work, not the tick;
//!
//! and the server's RSS. The random choices come from `--seed`.
//!
//! With `--lend` (pool lending, issue 21) phases 2 and 3 make way for a
//! year on the virtual clock: only `--pool-share` of the hosts are enrolled
//! (the rest are general hosts), berth runs with `--pool-lend-lead`, and
//! after the admission phase the clock moves in `--lend-step-hours` steps
//! over `--days` while on-demand servers (`--ondemand-per-step` a step,
//! each living `--ondemand-days-min` to `--ondemand-days-max` days) are
//! booked and deleted through the compute API. Each step waits until the
//! lease events due have run and the reclaimed hosts are drained (or a
//! second has passed), then samples `berth_pool_lent_servers`. Half the
//! leases (`--lend-online-share`) are booked during the year, a step and an hour
//! to `--lend-notice-days` before their start, so lent hosts must be taken
//! back at short notice. Reported:
//! server-hours placed on pool hosts (the capacity lending adds), lease
//! starts and late starts (`berth_lease_starts_late_total`), drain
//! migrations per lease start, on-demand boots placed and refused, and the
//! admission rate of phase 1; `--json FILE` writes them.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{hosts_ready, metric, ms, percentile, rss_mib, spawn_berth, Binaries, Nova, Rng};

const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// Options of `berth bench leases`.
#[derive(Debug, clap::Args)]
pub(crate) struct LeasesOpts {
    /// Hosts (in-process fake hypervisors), all enrolled for reservation.
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Leases to post (random windows over `--days`).
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// Days the random lease starts are spread over.
    #[arg(long, default_value_t = 365)]
    days: i64,
    /// Concurrent clients posting leases.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Availability queries (one client, latency).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Leases that start in the same minute (event throughput; at most
    /// `--hosts`, one host each).
    #[arg(long, default_value_t = 1000)]
    burst: usize,
    /// Share of `virtual:instance` leases (the rest are `physical:host`).
    #[arg(long, default_value_t = 0.2)]
    instance_share: f64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 9)]
    seed: u64,
    /// Extra arguments for `berth serve`.
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    serve_arg: Vec<String>,
    /// Pool lending: a year of leases and on-demand boots on the virtual
    /// clock instead of phases 2 and 3 (see the module doc).
    #[arg(long)]
    lend: bool,
    /// `--lend`: the share of hosts enrolled in the reservation pool.
    #[arg(long, default_value_t = 0.8)]
    pool_share: f64,
    /// `--lend`: berth's `--pool-lend-lead`, in hours (0: no lending, the
    /// baseline for the same year).
    #[arg(long, default_value_t = 24)]
    lend_lead_hours: i64,
    /// `--lend`: the virtual clock's step, in hours.
    #[arg(long, default_value_t = 12)]
    lend_step_hours: i64,
    /// `--lend`: on-demand boots per step.
    #[arg(long, default_value_t = 90)]
    ondemand_per_step: usize,
    /// `--lend`: shortest on-demand server life, in days.
    #[arg(long, default_value_t = 3)]
    ondemand_days_min: i64,
    /// `--lend`: longest on-demand server life, in days.
    #[arg(long, default_value_t = 11)]
    ondemand_days_max: i64,
    /// `--lend`: the share of `--leases` booked during the year, a few
    /// days before their start, rather than all at once beforehand.
    #[arg(long, default_value_t = 0.5)]
    lend_online_share: f64,
    /// `--lend`: the longest notice of a lease booked during the year, in
    /// days (at least a step and an hour).
    #[arg(long, default_value_t = 7)]
    lend_notice_days: i64,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// Log-uniform duration between an hour and four weeks, whole minutes.
fn random_duration(rng: &mut Rng) -> i64 {
    let (lo, hi) = ((HOUR as f64).ln(), ((28 * DAY) as f64).ln());
    let secs = (lo + (hi - lo) * rng.unit()).exp() as i64;
    (secs / 60).max(60) * 60
}

/// Blazar's date format (`%Y-%m-%d %H:%M`).
fn blazar_date(ts: i64) -> String {
    let iso = berth_reservation_api::dates::iso(ts);
    iso[..16].replace('T', " ")
}

fn minute(ts: i64) -> i64 {
    ts - ts.rem_euclid(60)
}

/// The reservation of one random lease.
fn random_reservation(rng: &mut Rng, instance_share: f64) -> Value {
    if rng.unit() < instance_share {
        json!({"resource_type": "virtual:instance", "vcpus": rng.pick(&[1, 2, 4]),
               "memory_mb": rng.pick(&[1024, 2048, 4096]), "disk_gb": rng.pick(&[10, 20, 40]),
               "amount": rng.range(1, 4), "affinity": Value::Null,
               "resource_properties": "", "hypervisor_properties": ""})
    } else {
        let min = rng.range(1, 3);
        json!({"resource_type": "physical:host", "min": min, "max": rng.range(min, 3),
               "resource_properties": "", "hypervisor_properties": ""})
    }
}

#[derive(Clone)]
struct Blazar {
    client: reqwest::Client,
    url: String,
}

impl Blazar {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        let mut req = self.client.request(method, format!("{}{path}", self.url)).header("x-auth-token", "admin");
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }
}

/// Outcome of posting a set of bodies concurrently.
#[derive(Default)]
struct Posted {
    created: Vec<String>,
    refused: usize,
    /// Other statuses, with the first message.
    failed: usize,
    first_failure: Option<String>,
    latencies: Vec<Duration>,
}

async fn post_all(blazar: &Blazar, path: &str, bodies: Vec<Value>, concurrency: usize) -> anyhow::Result<Posted> {
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let posted: Arc<Mutex<Posted>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (blazar, bodies, next, posted, path) =
            (blazar.clone(), bodies.clone(), next.clone(), posted.clone(), path.to_owned());
        workers.push(tokio::spawn(async move {
            loop {
                let idx = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(idx) else { return Ok::<(), anyhow::Error>(()) };
                let t = Instant::now();
                let (status, answer) = blazar.call(reqwest::Method::POST, &path, Some(body)).await?;
                let took = t.elapsed();
                let mut posted = posted.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                posted.latencies.push(took);
                match status {
                    200 | 201 => {
                        let id = answer["lease"]["id"].as_str().or(answer["host"]["id"].as_str()).unwrap_or("");
                        posted.created.push(id.to_owned());
                    }
                    409 => posted.refused += 1,
                    _ => {
                        posted.failed += 1;
                        posted.first_failure.get_or_insert_with(|| format!("{status} {answer}"));
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let mut posted = std::mem::take(&mut *posted.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    posted.latencies.sort();
    Ok(posted)
}

async fn server_now(blazar: &Blazar) -> anyhow::Result<i64> {
    advance(blazar, 0).await
}

async fn advance(blazar: &Blazar, seconds: i64) -> anyhow::Result<i64> {
    let (status, body) =
        blazar.call(reqwest::Method::POST, "/admin/v1/test/clock", Some(&json!({"advance": seconds}))).await?;
    anyhow::ensure!(status == 200, "moving the test clock: {status} {body}");
    body["now"].as_i64().ok_or_else(|| anyhow::anyhow!("no 'now' in {body}"))
}

/// One random availability query (the query string) and its kind.
fn random_query(rng: &mut Rng, now: i64, days: i64, hosts: usize) -> (&'static str, String, i64) {
    let from_ts = minute(now + DAY + rng.range(0, days.max(1) * DAY));
    let duration = random_duration(rng);
    let from = blazar_date(from_ts).replace(' ', "%20");
    let roll = rng.unit();
    if roll < 0.5 {
        let min = rng.range(1, 3);
        let query = format!("resource_type=physical:host&min={min}&max={min}&duration={duration}&from={from}");
        ("small host", query, from_ts)
    } else if roll < 0.75 {
        let amount = rng.range(1, 4);
        let vcpus = rng.pick(&[1, 2, 4]);
        (
            "instance",
            format!(
                "resource_type=virtual:instance&vcpus={vcpus}&memory_mb=2048&disk_gb=20&amount={amount}\
                 &duration={duration}&from={from}"
            ),
            from_ts,
        )
    } else {
        let n = rng.range((hosts as i64 / 10).max(1), (hosts as i64 * 9 / 10).max(1));
        ("large host", format!("resource_type=physical:host&min={n}&max={n}&duration={duration}&from={from}"), from_ts)
    }
}

pub(crate) async fn run(opts: LeasesOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let mut args: Vec<String> = vec![
        "--fake-hosts".into(),
        opts.hosts.to_string(),
        "--test-hooks".into(),
        // The clock moves ahead; hosts must not look down meanwhile.
        "--service-down-time".into(),
        "31536000".into(),
    ];
    if opts.lend {
        // The runner looks every 20 ms: each step of the clock is worked
        // off at once, not at the next 1 s tick.
        // A lead of 0: the same year without lending (the baseline).
        if opts.lend_lead_hours > 0 {
            args.extend(["--pool-lend-lead".into(), (opts.lend_lead_hours * HOUR).to_string()]);
        }
        args.extend(["--lease-tick-ms".into(), "20".into()]);
    }
    args.extend(opts.serve_arg.iter().cloned());
    let berth = spawn_berth(binaries, &args).await?;
    let url = berth.url.clone();
    let pool = opts.concurrency * 2;
    let blazar = Blazar {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(pool)
            .pool_idle_timeout(std::time::Duration::from_secs(2))
            .build()?,
        url: url.clone(),
    };
    let started = Instant::now();
    hosts_ready(&url, opts.hosts).await?;
    let registered = started.elapsed();
    let pool_hosts =
        if opts.lend { ((opts.hosts as f64 * opts.pool_share).round() as usize).min(opts.hosts) } else { opts.hosts };
    let enrol: Vec<Value> = (0..pool_hosts).map(|i| json!({"name": format!("fake-{i}")})).collect();
    let t = Instant::now();
    let enrolled = post_all(&blazar, "/reservation/v1/os-hosts", enrol, opts.concurrency).await?;
    anyhow::ensure!(
        enrolled.created.len() == pool_hosts,
        "enrolled {} of {} hosts: {:?}",
        enrolled.created.len(),
        pool_hosts,
        enrolled.first_failure
    );
    println!(
        "leases: {} hosts registered in {:.1} s, {pool_hosts} enrolled in {:.2} s ({:.0}/s)",
        opts.hosts,
        registered.as_secs_f64(),
        t.elapsed().as_secs_f64(),
        pool_hosts as f64 / t.elapsed().as_secs_f64()
    );

    // 1. Admission.
    let now = server_now(&blazar).await?;
    let mut rng = Rng(opts.seed);
    let mut starts: Vec<i64> = Vec::with_capacity(opts.leases);
    let mut bodies: Vec<Value> = (0..opts.leases)
        .map(|i| {
            let start = minute(now + DAY + rng.range(0, opts.days.max(1) * DAY));
            let end = start + random_duration(&mut rng);
            starts.push(start);
            json!({"name": format!("bench-{i}"), "start_date": blazar_date(start), "end_date": blazar_date(end),
                   "reservations": [random_reservation(&mut rng, opts.instance_share)], "events": []})
        })
        .collect();
    // `--lend`: the online share is booked during the year, a few days
    // before each start, as users book; the rest now (the admission
    // figure).
    let mut online: Vec<(i64, Value)> = Vec::new();
    if opts.lend {
        let keep = bodies.len() - (bodies.len() as f64 * opts.lend_online_share.clamp(0.0, 1.0)) as usize;
        for (body, start) in bodies.split_off(keep).into_iter().zip(starts.split_off(keep)) {
            // At least a step and an hour: booked at a step before its start.
            let step = opts.lend_step_hours.max(1) * HOUR;
            let notice = rng.range(step + HOUR, (opts.lend_notice_days.max(1) * DAY).max(step + 2 * HOUR));
            online.push(((start - notice).max(now), body));
        }
        online.sort_by_key(|(at, _)| *at);
    }
    let t = Instant::now();
    let posted = post_all(&blazar, "/reservation/v1/leases", bodies, opts.concurrency).await?;
    let elapsed = t.elapsed().as_secs_f64();
    let decided = posted.created.len() + posted.refused;
    println!(
        "  admission: {} leases, {} clients: {} admitted, {} refused (409), {} failed in {:.2} s = {:.0} decisions/s \
         ({:.0} admitted/s); latency p50 {:.1} ms p99 {:.1} ms",
        opts.leases,
        opts.concurrency,
        posted.created.len(),
        posted.refused,
        posted.failed,
        elapsed,
        decided as f64 / elapsed,
        posted.created.len() as f64 / elapsed,
        ms(percentile(&posted.latencies, 0.5)),
        ms(percentile(&posted.latencies, 0.99)),
    );
    if let Some(first) = &posted.first_failure {
        println!("  first failure: {first}");
    }
    println!("  server RSS after admission {:.0} MiB", rss_mib(berth.child.id()));
    let admissions_per_s = decided as f64 / elapsed;
    if opts.lend {
        let lent = lend_year(&opts, &url, &blazar, &mut rng, online).await?;
        println!("  server RSS {:.0} MiB", rss_mib(berth.child.id()));
        if let Some(path) = &opts.json {
            let body = json!({
                "hosts": opts.hosts, "pool_hosts": pool_hosts, "leases": opts.leases,
                "lend_lead_hours": opts.lend_lead_hours,
                "admitted": posted.created.len(), "refused": posted.refused,
                "admissions_per_s": admissions_per_s,
                "lease_starts": lent.lease_starts, "lease_starts_late": lent.lease_starts_late,
                "lent_server_hours": lent.lent_server_hours, "migrations": lent.migrations,
                "migrations_per_lease_start": lent.migrations as f64 / (lent.lease_starts.max(1)) as f64,
                "hosts_swapped": lent.hosts_swapped, "ondemand_boots": lent.boots,
                "ondemand_refused": lent.refused, "steps": lent.steps, "seconds": lent.seconds,
                "online_leases_admitted": lent.online_admitted, "online_leases_refused": lent.online_refused,
            });
            std::fs::write(path, serde_json::to_string_pretty(&body)?)?;
        }
        return Ok(());
    }

    // 2. Availability.
    let mut by_kind: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    let mut all = Vec::new();
    let (mut at_from, mut later, mut none) = (0usize, 0usize, 0usize);
    for _ in 0..opts.queries {
        let (kind, query, from) = random_query(&mut rng, now, opts.days, opts.hosts);
        let t = Instant::now();
        let (status, body) =
            blazar.call(reqwest::Method::GET, &format!("/reservation/v1/availability?{query}"), None).await?;
        let took = t.elapsed();
        anyhow::ensure!(status == 200, "availability?{query}: {status} {body}");
        match body["availability"]["start_date"].as_str() {
            None => none += 1,
            Some(start) if start == berth_reservation_api::dates::iso(from) => at_from += 1,
            Some(_) => later += 1,
        }
        all.push(took);
        by_kind.entry(kind).or_default().push(took);
    }
    all.sort();
    println!(
        "  availability: {} queries (window at the day asked {at_from}, later {later}, none within a year {none}): \
         p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        opts.queries,
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default())
    );
    for (kind, mut list) in by_kind {
        list.sort();
        println!(
            "    {kind:<10} {:>5}: p50 {:.2} ms p99 {:.2} ms",
            list.len(),
            ms(percentile(&list, 0.5)),
            ms(percentile(&list, 0.99))
        );
    }

    // 3. Events: a burst of leases starting in the same minute.
    let burst = opts.burst.min(opts.hosts);
    if burst > 0 {
        let now = server_now(&blazar).await?;
        let start = minute(now) + 600;
        let bodies: Vec<Value> = (0..burst)
            .map(|i| {
                json!({"name": format!("burst-{i}"), "start_date": blazar_date(start),
                       "end_date": blazar_date(start + 2 * HOUR),
                       "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1,
                                         "resource_properties": "", "hypervisor_properties": ""}],
                       "events": []})
            })
            .collect();
        let posted = post_all(&blazar, "/reservation/v1/leases", bodies, opts.concurrency).await?;
        anyhow::ensure!(
            posted.created.len() == burst,
            "burst: admitted {} of {burst} ({} refused): {:?}",
            posted.created.len(),
            posted.refused,
            posted.first_failure
        );
        let before = metric(&url, "berth_lease_events_done_total").await;
        let now = server_now(&blazar).await?;
        let t = Instant::now();
        advance(&blazar, start - now + 1).await?;
        let poke = json!({"name": "burst-0"});
        let (status, body) = blazar
            .call(reqwest::Method::PUT, &format!("/reservation/v1/leases/{}", posted.created[0]), Some(&poke))
            .await?;
        anyhow::ensure!(status == 200, "renaming a lease: {status} {body}");
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done = metric(&url, "berth_lease_events_done_total").await.saturating_sub(before);
            if done >= burst as u64 {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "only {done} of {burst} start events ran in 600 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = t.elapsed();
        let mut active = 0;
        for id in &posted.created {
            let (_, body) = blazar.call(reqwest::Method::GET, &format!("/reservation/v1/leases/{id}"), None).await?;
            if body["lease"]["status"] == "ACTIVE" {
                active += 1;
            }
        }
        println!(
            "  events: {burst} leases starting in one minute: {active} ACTIVE {:.2} s after the clock reached their \
             start = {:.0} events/s",
            took.as_secs_f64(),
            burst as f64 / took.as_secs_f64()
        );
    }
    println!("  server RSS {:.0} MiB", rss_mib(berth.child.id()));
    Ok(())
}

/// What the lending year measured.
struct LentYear {
    lease_starts: u64,
    lease_starts_late: u64,
    lent_server_hours: f64,
    migrations: u64,
    hosts_swapped: u64,
    boots: usize,
    refused: u64,
    steps: i64,
    seconds: f64,
    /// Leases booked during the year: admitted, refused.
    online_admitted: usize,
    online_refused: usize,
}

/// `--lend`: the year on the virtual clock (module doc).
async fn lend_year(
    opts: &LeasesOpts,
    url: &str,
    blazar: &Blazar,
    rng: &mut Rng,
    online: Vec<(i64, Value)>,
) -> anyhow::Result<LentYear> {
    let mut online = online.into_iter().peekable();
    let (mut online_admitted, mut online_refused) = (0usize, 0usize);
    let nova = Nova::new(&format!("{url}/compute/v2.1"), 16)?;
    let (flavor, image) = crate::common::boot_inputs(&nova, url, ("ondemand", 2, 4096, 20)).await?;

    let step = opts.lend_step_hours.max(1) * HOUR;
    let steps = opts.days.max(1) * DAY / step;
    let before = |name: &'static str| metric(url, name);
    let (starts0, late0, moved0, swapped0, buried0) = (
        before("berth_lease_starts_on_time_total").await,
        before("berth_lease_starts_late_total").await,
        before("berth_pool_drain_migrations_total").await,
        before("berth_lease_hosts_swapped_total").await,
        before("berth_compute_instances_buried_total").await,
    );
    // (expiry, server id) of the live on-demand servers.
    let mut live: std::collections::BTreeSet<(i64, String)> = Default::default();
    let mut lent_server_hours = 0.0;
    let mut boots = 0;
    let t = Instant::now();
    for n in 0..steps {
        let now = server_now(blazar).await?;
        // Servers whose life is over go.
        let expired: Vec<(i64, String)> = live.iter().take_while(|(end, _)| *end <= now).cloned().collect();
        let mut deletes = tokio::task::JoinSet::new();
        for (end, id) in expired {
            live.remove(&(end, id.clone()));
            let nova = nova.clone();
            deletes.spawn(async move { nova.call(reqwest::Method::DELETE, &format!("/servers/{id}"), None).await });
        }
        while let Some(done) = deletes.join_next().await {
            let (status, body) = done??;
            anyhow::ensure!(status == 204 || status == 404, "delete: {status} {body}");
        }
        // Leases booked now (their notice before the start).
        let mut due = Vec::new();
        while let Some((_, body)) = online.next_if(|(at, _)| *at <= now) {
            due.push(body);
        }
        if !due.is_empty() {
            let posted = post_all(blazar, "/reservation/v1/leases", due, 8).await?;
            anyhow::ensure!(posted.failed == 0, "online leases: {:?}", posted.first_failure);
            online_admitted += posted.created.len();
            online_refused += posted.refused;
        }
        // New on-demand servers.
        let mut creates = tokio::task::JoinSet::new();
        for i in 0..opts.ondemand_per_step {
            let life = rng.range(opts.ondemand_days_min.max(1) * DAY, opts.ondemand_days_max.max(1) * DAY);
            let body = json!({"server": {"name": format!("od-{n}-{i}"), "flavorRef": flavor, "imageRef": image,
                                         "networks": "none"}});
            let nova = nova.clone();
            creates.spawn(async move { (life, nova.call(reqwest::Method::POST, "/servers", Some(body)).await) });
        }
        while let Some(done) = creates.join_next().await {
            let (life, answer) = done?;
            let (status, body) = answer?;
            anyhow::ensure!(status == 202, "boot: {status} {body}");
            live.insert((now + life, body["server"]["id"].as_str().unwrap_or("").to_owned()));
            boots += 1;
        }
        settle(url, "berth_compute_build_requests", Duration::from_secs(60)).await?;
        // The step: due lease events run, reclaimed hosts drain.
        advance(blazar, step).await?;
        settle(url, "berth_lease_events_due", Duration::from_secs(60)).await?;
        drained(url).await;
        lent_server_hours += metric(url, "berth_pool_lent_servers").await as f64 * (step / HOUR) as f64;
        if n % 100 == 99 {
            println!(
                "    step {}/{steps}: {} on-demand servers live, {:.0} server-hours on pool hosts so far",
                n + 1,
                live.len(),
                lent_server_hours
            );
        }
    }
    let after = |name: &'static str| metric(url, name);
    let on_time = after("berth_lease_starts_on_time_total").await - starts0;
    let late = after("berth_lease_starts_late_total").await - late0;
    let year = LentYear {
        lease_starts: on_time + late,
        lease_starts_late: late,
        lent_server_hours,
        migrations: after("berth_pool_drain_migrations_total").await - moved0,
        hosts_swapped: after("berth_lease_hosts_swapped_total").await - swapped0,
        boots,
        refused: after("berth_compute_instances_buried_total").await - buried0,
        steps,
        seconds: t.elapsed().as_secs_f64(),
        online_admitted,
        online_refused,
    };
    println!("  lending: {} leases booked during the year ({} refused)", year.online_admitted, year.online_refused);
    println!(
        "  lending: {} steps of {} h in {:.0} s: {} on-demand boots ({} refused: no room), {:.0} server-hours on \
         pool hosts; {} lease starts, {} late, {} drain migrations ({:.2} per start), {} busy hosts swapped",
        year.steps,
        step / HOUR,
        year.seconds,
        year.boots,
        year.refused,
        year.lent_server_hours,
        year.lease_starts,
        year.lease_starts_late,
        year.migrations,
        year.migrations as f64 / year.lease_starts.max(1) as f64,
        year.hosts_swapped,
    );
    Ok(year)
}

/// Wait until the gauge `name` reads 0 (an error after `limit`).
async fn settle(url: &str, name: &str, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if metric(url, name).await == 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} still not 0 after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until no reclaimed host carries lent servers, or the drains stop
/// making progress (no new migration for 300 ms: the servers left have
/// nowhere to go, or cannot move yet), at most 5 s.
async fn drained(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut moved = metric(url, "berth_pool_drain_migrations_total").await;
    let mut progress = Instant::now();
    while metric(url, "berth_pool_hosts_draining").await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now_moved = metric(url, "berth_pool_drain_migrations_total").await;
        if now_moved != moved {
            (moved, progress) = (now_moved, Instant::now());
        } else if progress.elapsed() > Duration::from_millis(300) {
            return;
        }
    }
}
