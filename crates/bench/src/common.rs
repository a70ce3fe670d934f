//! What the benchmarks share: the executables and processes they start,
//! the admin client, seeded random numbers, percentiles, and the
//! server's metrics and host count, and the CPU time of processes read
//! from `/proc`.
//!
//! This module uses no benchmark module; they all use it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

/// The executables a benchmark starts. The binary passes them in: this
/// crate never looks for itself.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// Run as `SERVER serve --listen … --data-dir …` for every berth a
    /// benchmark starts.
    pub server: PathBuf,
    /// Run as `AGENT agent --url …` for the fake compute hosts (`bench
    /// boot`, `bench soak`).
    pub agent: PathBuf,
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

/// Starts `berth serve` (the [`Binaries::server`]) on a free loopback
/// port and a fresh data directory, with `extra_args`, and waits until it
/// answers.
pub(crate) async fn spawn_berth(binaries: &Binaries, extra_args: &[String]) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let dir = temp_dir("berth")?;
    let mut child = Command::new(&binaries.server)
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

pub(crate) struct Agent(pub(crate) Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An admin client of one API at one microversion (compute 2.96 unless
/// [`Nova::at`] says otherwise).
#[derive(Clone)]
pub(crate) struct Nova {
    client: reqwest::Client,
    base: String,
    version: &'static str,
}

impl Nova {
    pub(crate) fn new(base: &str, pool: usize) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(pool)
            .pool_idle_timeout(std::time::Duration::from_secs(2))
            .build()?;
        Ok(Nova { client, base: base.to_owned(), version: "compute 2.96" })
    }

    /// The same connection pool for another API (`base`) and
    /// `OpenStack-API-Version` (e.g. `placement 1.39`).
    pub(crate) fn at(&self, base: &str, version: &'static str) -> Self {
        Nova { client: self.client.clone(), base: base.to_owned(), version }
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", self.version);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// Give image `id` some data (a new image is `queued`, and a boot
    /// refuses it until it is `active`); `url` is berth's root.
    pub(crate) async fn upload_image(&self, url: &str, id: &str) -> anyhow::Result<()> {
        let resp = self
            .client
            .put(format!("{url}/image/v2/images/{id}/file"))
            .header("x-auth-token", "admin")
            .header("content-type", "application/octet-stream")
            .body(&b"berth bench image"[..])
            .send()
            .await?;
        anyhow::ensure!(resp.status().as_u16() == 204, "image upload: {}", resp.status());
        Ok(())
    }
}

/// The `p` quantile (0 to 1) of `sorted`, nearest rank; zero when empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// A duration in milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The resident memory of process `pid` now, in MiB (0 when unknown).
pub(crate) fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// A memory figure of `/proc/PID/status` in MiB: `VmRSS:` (now) or
/// `VmHWM:` (the peak since the process started); 0 when unknown.
pub(crate) fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Clock ticks per second of the CPU times in `/proc/PID/stat`
/// (`getconf CLK_TCK`). This crate does not depend on `libc` for
/// `sysconf(_SC_CLK_TCK)`, so it assumes 100, the value on every Linux
/// architecture berth runs on (the kernel's `USER_HZ`).
const CLK_TCK: u64 = 100;

/// The CPU time of one `/proc/PID/stat` line in clock ticks: its own
/// user and system time (fields 14 and 15) plus, with `children`, that of
/// its reaped children (fields 16 and 17). `None` when the line is not
/// one.
///
/// The second field, the command name in parentheses, may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub(crate) fn stat_cpu_ticks(line: &str, children: bool) -> Option<u64> {
    let after_comm = &line[line.rfind(')')? + 1..];
    // `after_comm` starts at field 3 (state): field N is at index N - 3.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let own = field(14)? + field(15)?;
    if children {
        Some(own + field(16)? + field(17)?)
    } else {
        Some(own)
    }
}

/// The CPU time process `pid` has used so far (all its threads), in
/// clock ticks; 0 when it is gone.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|line| stat_cpu_ticks(&line, false)).unwrap_or(0)
}

/// The CPU time of this process (the benchmark's clients), in clock ticks.
pub(crate) fn self_cpu_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat").ok().and_then(|line| stat_cpu_ticks(&line, false)).unwrap_or(0)
}

/// The CPU time of every process named `comm` (e.g. `postgres`), in clock
/// ticks, including the children they have reaped: PostgreSQL backends
/// that exit between two readings are then still counted, in the
/// postmaster's figure.
pub(crate) fn cpu_ticks_named(comm: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit())))
        .filter(|entry| std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|name| name.trim_end() == comm))
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|line| stat_cpu_ticks(&line, true))
        .sum()
}

/// Clock ticks in milliseconds.
pub(crate) fn ticks_ms(ticks: u64) -> f64 {
    ticks as f64 * 1000.0 / CLK_TCK as f64
}

pub(crate) async fn metric(url: &str, name: &str) -> u64 {
    metric_f64(url, name).await as u64
}

/// One sample of `/metrics` (0 when absent).
pub(crate) async fn metric_f64(url: &str, name: &str) -> f64 {
    let Ok(resp) = reqwest::get(format!("{url}/metrics")).await else { return 0.0 };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// The mean of a latency histogram of `/metrics` (its `_sum` and
/// `_count`) over what was observed after [`HistogramMean::start`], in
/// milliseconds.
pub(crate) struct HistogramMean {
    name: &'static str,
    sum: f64,
    count: f64,
}

impl HistogramMean {
    pub(crate) async fn start(url: &str, name: &'static str) -> Self {
        let (sum, count) =
            (metric_f64(url, &format!("{name}_sum")).await, metric_f64(url, &format!("{name}_count")).await);
        Self { name, sum, count }
    }

    pub(crate) async fn mean_ms(&self, url: &str) -> f64 {
        let sum = metric_f64(url, &format!("{}_sum", self.name)).await - self.sum;
        let count = metric_f64(url, &format!("{}_count", self.name)).await - self.count;
        if count > 0.0 {
            sum * 1000.0 / count
        } else {
            0.0
        }
    }
}

pub(crate) async fn hosts_ready(url: &str, want: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let resp = client
            .get(format!("{url}/resource_providers?resources=VCPU:1"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .send()
            .await?;
        let body: Value = resp.json().await?;
        let have = body["resource_providers"].as_array().map(Vec::len).unwrap_or(0);
        if have >= want {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {have} of {want} hosts reported inventory");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Placement inventory record's capacity: `(total − reserved) ×
/// allocation_ratio`, rounded down as Placement does (0 for a missing
/// record).
pub(crate) fn capacity(inventory: &Value) -> i64 {
    let total = inventory["total"].as_i64().unwrap_or(0);
    let reserved = inventory["reserved"].as_i64().unwrap_or(0);
    let ratio = inventory["allocation_ratio"].as_f64().unwrap_or(1.0);
    ((total - reserved) as f64 * ratio).floor() as i64
}

/// What the boot benchmarks set up before booting: the admin project's
/// quota unlimited, a public flavor (`name`, vCPUs, RAM MiB, disk GiB) and
/// a public image. Returns the flavor and image ids.
pub(crate) async fn boot_inputs(
    nova: &Nova,
    url: &str,
    flavor: (&str, i64, i64, i64),
) -> anyhow::Result<(String, String)> {
    let name = flavor.0;
    let flavor = unlimited_flavor(nova, flavor).await?;
    let resp = nova
        .client
        .post(format!("{url}/image/v2/images"))
        .header("x-auth-token", "admin")
        .json(&json!({"name": name, "disk_format": "qcow2", "container_format": "bare", "visibility": "public"}))
        .send()
        .await?;
    anyhow::ensure!(resp.status().as_u16() == 201, "image create: {}", resp.status());
    let image: Value = resp.json().await?;
    let image = image["id"].as_str().unwrap_or("").to_owned();
    nova.upload_image(url, &image).await?;
    Ok((flavor, image))
}

/// Admin's quota lifted and a flavor `(name, vcpus, ram, disk)` made; its
/// id.
pub(crate) async fn unlimited_flavor(nova: &Nova, flavor: (&str, i64, i64, i64)) -> anyhow::Result<String> {
    let (status, body) = nova
        .call(
            reqwest::Method::PUT,
            "/os-quota-sets/admin",
            Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
        )
        .await?;
    anyhow::ensure!(status == 200, "quota update: {status} {body}");
    let (name, vcpus, ram, disk) = flavor;
    let (status, body) = nova
        .call(
            reqwest::Method::POST,
            "/flavors",
            Some(json!({"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}})),
        )
        .await?;
    anyhow::ensure!(status == 200, "flavor create: {status} {body}");
    Ok(body["flavor"]["id"].as_str().unwrap_or("").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks_counts_fields_after_the_last_parenthesis() {
        // utime 7, stime 3, cutime 20, cstime 5; the command name holds a
        // space and a `)`.
        let line = "4242 (tokio) rt w) S 1 4242 4242 0 -1 4194560 500 0 0 0 7 3 20 5 20 0 9 0 100 1000 50";
        assert_eq!(stat_cpu_ticks(line, false), Some(10));
        assert_eq!(stat_cpu_ticks(line, true), Some(35));
        assert_eq!(stat_cpu_ticks("4242 (postgres) S 1 2", false), None);
        assert_eq!(stat_cpu_ticks("no parenthesis", false), None);
        assert_eq!(ticks_ms(250), 2500.0);
    }

    #[test]
    fn stat_cpu_ticks_reads_this_process() {
        let line = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        assert!(stat_cpu_ticks(&line, true).is_some(), "{line}");
    }
}
