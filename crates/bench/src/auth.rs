//! `berth bench auth`: what validating every token with Keystone costs.
//!
//! Starts two berths side by side, one in noauth2 and one with
//! `--auth keystone` against the given Keystone, and drives
//! `GET /compute/v2.1/servers` on each with the same client (C concurrent
//! clients, alternating rounds so drift hits both): requests/s and
//! p50/p99 with a warm token cache. Then it keeps the keystone berth busy
//! with N distinct tokens for a window (default 300 s, the default cache
//! time) and counts how many times Keystone was asked per token
//! (`berth_keystone_token_validations_total`).
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::common::{spawn_berth, Binaries};

/// Options of `berth bench auth`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuthOpts {
    /// Keystone's URL (e.g. from scripts/keystone-throwaway.sh).
    #[arg(long)]
    keystone_url: String,
    /// Password of Keystone's bootstrap `admin` (users are created with it).
    #[arg(long)]
    keystone_admin_password: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds per measured round and mode.
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    /// Rounds (each measures noauth2, then keystone).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Distinct tokens in the Keystone-calls window.
    #[arg(long, default_value_t = 20)]
    tokens: usize,
    /// Seconds of the Keystone-calls window (0 skips it).
    #[arg(long, default_value_t = 300)]
    window_secs: u64,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// Keystone as the bootstrap admin sees it.
struct Admin {
    http: reqwest::Client,
    url: String,
    password: String,
}

impl Admin {
    async fn token(&self, user: &str, password: &str, project: &str) -> anyhow::Result<String> {
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}});
        let resp = self.http.post(format!("{}/auth/tokens", self.url)).json(&body).send().await?;
        anyhow::ensure!(resp.status().as_u16() == 201, "token for {user}: {}", resp.status());
        Ok(resp.headers().get("x-subject-token").context("no token")?.to_str()?.to_owned())
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let token = self.token("admin", &self.password, "admin").await?;
        let mut req = self.http.request(method, format!("{}{path}", self.url)).header("x-auth-token", token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let value = resp.json::<Value>().await.unwrap_or(Value::Null);
        anyhow::ensure!(status.is_success(), "keystone {path}: {status} {value}");
        Ok(value)
    }

    /// A project with one user holding `roles`; the user's name is the
    /// project's, its password `pw-<name>`.
    async fn tenant(&self, name: &str, roles: &[&str]) -> anyhow::Result<()> {
        let project = self
            .call(reqwest::Method::POST, "/projects", Some(json!({"project": {"name": name, "domain_id": "default"}})))
            .await?;
        let user = self
            .call(
                reqwest::Method::POST,
                "/users",
                Some(json!({"user": {"name": name, "password": format!("pw-{name}"), "domain_id": "default"}})),
            )
            .await?;
        let all = self.call(reqwest::Method::GET, "/roles", None).await?;
        let (pid, uid) = (project["project"]["id"].as_str().unwrap_or(""), user["user"]["id"].as_str().unwrap_or(""));
        for role in roles {
            let rid = all["roles"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["name"] == *role))
                .and_then(|r| r["id"].as_str())
                .with_context(|| format!("role {role} missing"))?;
            self.call(reqwest::Method::PUT, &format!("/projects/{pid}/users/{uid}/roles/{rid}"), None).await?;
        }
        Ok(())
    }
}

/// One mode's figures over a round.
#[derive(Debug, Default, Clone)]
struct Figures {
    requests: usize,
    errors: usize,
    secs: f64,
    latencies_ms: Vec<f64>,
}

impl Figures {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.secs.max(1e-9)
    }
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.latencies_ms.clone();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0.0)
    }
    fn add(&mut self, other: Figures) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.secs += other.secs;
        self.latencies_ms.extend(other.latencies_ms);
    }
}

/// `GET /compute/v2.1/servers` from `concurrency` clients for `secs`,
/// each request with the next of `tokens`.
async fn drive(url: &str, tokens: Arc<Vec<String>>, concurrency: usize, secs: f64) -> Figures {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (http, url, tokens, stop) = (http.clone(), url.to_owned(), tokens.clone(), stop.clone());
            tokio::spawn(async move {
                let mut figures = Figures::default();
                let mut n = w;
                while !stop.load(Ordering::Relaxed) {
                    let token = &tokens[n % tokens.len()];
                    n += concurrency;
                    let t = Instant::now();
                    let ok = match http
                        .get(format!("{url}/compute/v2.1/servers"))
                        .header("x-auth-token", token)
                        .send()
                        .await
                    {
                        Ok(resp) => resp.status().as_u16() == 200 && resp.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    figures.latencies_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                    if ok {
                        figures.requests += 1;
                    } else {
                        figures.errors += 1;
                    }
                }
                figures
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Figures::default();
    for w in workers {
        if let Ok(f) = w.await {
            total.add(f);
        }
    }
    total.secs = started.elapsed().as_secs_f64();
    total
}

async fn validations(url: &str) -> anyhow::Result<u64> {
    let text = reqwest::get(format!("{url}/metrics")).await?.text().await?;
    text.lines()
        .find_map(|l| l.strip_prefix("berth_keystone_token_validations_total "))
        .and_then(|v| v.trim().parse().ok())
        .context("berth_keystone_token_validations_total missing")
}

pub(crate) async fn run(opts: AuthOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let admin = Admin {
        http: reqwest::Client::new(),
        url: berth_identity::v3_root(&opts.keystone_url),
        password: opts.keystone_admin_password.clone(),
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let (service, member) = (format!("bench-svc-{tag}"), format!("bench-member-{tag}"));
    admin.tenant(&service, &["service"]).await?;
    admin.tenant(&member, &["member", "reader"]).await?;

    let noauth = spawn_berth(binaries, &[]).await?;
    let keystone_args: Vec<String> = [
        "--auth",
        "keystone",
        "--keystone-url",
        &admin.url,
        "--keystone-user",
        &service,
        "--keystone-password",
        &format!("pw-{service}"),
        "--keystone-project",
        &service,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let keystone = spawn_berth(binaries, &keystone_args).await?;
    let token = admin.token(&member, &format!("pw-{member}"), &member).await?;
    let one_keystone = Arc::new(vec![token]);
    let one_noauth = Arc::new(vec![format!("{member}:{member}")]);
    // Warm both (connections, the token cache).
    drive(&noauth.url, one_noauth.clone(), 2, 0.5).await;
    drive(&keystone.url, one_keystone.clone(), 2, 0.5).await;

    let (mut plain, mut checked) = (Figures::default(), Figures::default());
    for round in 0..opts.rounds {
        let a = drive(&noauth.url, one_noauth.clone(), opts.concurrency, opts.secs).await;
        let b = drive(&keystone.url, one_keystone.clone(), opts.concurrency, opts.secs).await;
        println!(
            "round {}: noauth2 {:.0} req/s (p99 {:.2} ms), keystone {:.0} req/s (p99 {:.2} ms)",
            round + 1,
            a.rps(),
            a.percentile(0.99),
            b.rps(),
            b.percentile(0.99)
        );
        plain.add(a);
        checked.add(b);
    }
    let ratio = checked.rps() / plain.rps().max(1e-9);
    println!(
        "GET /compute/v2.1/servers, {} clients, {} x {:.0} s: noauth2 {:.0} req/s p50 {:.2} p99 {:.2} ms; \
         keystone (warm cache) {:.0} req/s p50 {:.2} p99 {:.2} ms; keystone/noauth2 {:.3}; errors {} / {}",
        opts.concurrency,
        opts.rounds,
        opts.secs,
        plain.rps(),
        plain.percentile(0.5),
        plain.percentile(0.99),
        checked.rps(),
        checked.percentile(0.5),
        checked.percentile(0.99),
        ratio,
        plain.errors,
        checked.errors
    );

    let mut window = json!(null);
    if opts.window_secs > 0 {
        let mut tokens = Vec::with_capacity(opts.tokens);
        for _ in 0..opts.tokens.max(1) {
            tokens.push(admin.token(&member, &format!("pw-{member}"), &member).await?);
        }
        let before = validations(&keystone.url).await?;
        let load =
            drive(&keystone.url, Arc::new(tokens.clone()), opts.concurrency.min(4), opts.window_secs as f64).await;
        let calls = validations(&keystone.url).await? - before;
        let per_token = calls as f64 / tokens.len() as f64;
        println!(
            "{} distinct tokens over {} s ({} requests, {} errors): {} Keystone validations, {:.2} per token",
            tokens.len(),
            opts.window_secs,
            load.requests,
            load.errors,
            calls,
            per_token
        );
        window = json!({"window_secs": opts.window_secs, "distinct_tokens": tokens.len(), "requests": load.requests,
                        "errors": load.errors, "keystone_calls": calls, "calls_per_token": per_token});
    }
    if let Some(path) = &opts.json {
        let body = json!({
            "concurrency": opts.concurrency, "rounds": opts.rounds, "secs_per_round": opts.secs,
            "noauth2": {"requests_per_sec": plain.rps(), "p50_ms": plain.percentile(0.5),
                        "p99_ms": plain.percentile(0.99), "errors": plain.errors},
            "keystone": {"requests_per_sec": checked.rps(), "p50_ms": checked.percentile(0.5),
                         "p99_ms": checked.percentile(0.99), "errors": checked.errors},
            "keystone_over_noauth2_rps": ratio,
            "calls_window": window,
        });
        std::fs::write(path, serde_json::to_string_pretty(&body)?)?;
    }
    Ok(())
}
