//! `berth bench guests`: real guests through `berth agent --driver
//! libvirt` on this machine (issue 39).
//!
//! Starts berth and one libvirt agent (its own instances path, so its
//! image cache starts cold), uploads the project's test guest AMI style
//! (the kernel, ramdisk and disk `scripts/guest-image.sh --out DIR`
//! builds), then boots `--guests` servers at once, twice: the first round
//! with a cold image cache, the second (after deleting the first) with a
//! warm one. For each guest: the time from its boot request to ACTIVE and
//! to its marker line (`BERTH-GUEST-UP uuid=…`, read through
//! `os-getConsoleOutput`), p50/p99 of each; per round the agent's CPU
//! time and resident memory per guest and each guest's QEMU process RSS
//! minus the guest's RAM (the per-guest memory overhead; under TCG a
//! guest touches only part of its RAM, so this can be negative). `--json
//! FILE` writes the same figures. Every wait is bounded.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::common::{cpu_ticks, ms, percentile, rss_mib, spawn_berth, status_mib, ticks_ms, Agent, Binaries, Nova};

/// Options of `berth bench guests`.
#[derive(Debug, clap::Args)]
pub(crate) struct GuestsOpts {
    /// Guests booted at once, in each round.
    #[arg(long, default_value_t = 3)]
    guests: usize,
    /// The test guest's files (`vmlinuz`, `initrd`, `disk.raw`) as
    /// `scripts/guest-image.sh --out DIR` builds them.
    #[arg(long, default_value = "/tmp/berth-guest-image")]
    guest_dir: PathBuf,
    /// libvirt connection URI.
    #[arg(long, default_value = "qemu:///system")]
    libvirt_uri: String,
    /// `kvm` or `qemu` (TCG).
    #[arg(long, default_value = "qemu")]
    virt_type: String,
    /// The guests' RAM (MiB).
    #[arg(long, default_value_t = 128)]
    ram_mb: i64,
    /// Longest wait for one guest's marker (seconds).
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Extra arguments for `berth serve` (e.g. `--database postgres://…`).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    serve_arg: Vec<String>,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One guest's times from its boot request.
struct Timing {
    active: Duration,
    marker: Duration,
}

pub(crate) async fn run(opts: GuestsOpts, binaries: &Binaries) -> anyhow::Result<()> {
    anyhow::ensure!(opts.guests > 0, "--guests must be at least 1");
    for file in ["vmlinuz", "initrd", "disk.raw"] {
        anyhow::ensure!(
            opts.guest_dir.join(file).is_file(),
            "{} has no {file}: build the guest with scripts/guest-image.sh --out {}",
            opts.guest_dir.display(),
            opts.guest_dir.display()
        );
    }
    let berth = spawn_berth(binaries, &opts.serve_arg).await?;
    let url = berth.url.clone();
    let instances = std::env::temp_dir().join(format!("berth-bench-guests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&instances);
    std::fs::create_dir_all(&instances)?;
    let host = format!("bench-guests-{}", std::process::id());
    let agent = Command::new(&binaries.agent)
        .args(["agent", "--url", &url, "--log", "warn", "--driver", "libvirt", "--virt-type", &opts.virt_type])
        .args(["--libvirt-uri", &opts.libvirt_uri, "--host", &host, "--instances-path"])
        .arg(&instances)
        .args(["--reserved-host-memory-mb", "256", "--report-interval-secs", "10", "--sync-interval-secs", "5"])
        .stdout(Stdio::null())
        .spawn()
        .context("starting the libvirt agent")?;
    let agent = Agent(agent);
    let agent_pid = agent.0.id();
    crate::common::hosts_ready(&url, 1).await?;

    let nova = Nova::new(&url, 16)?.at(&format!("{url}/compute/v2.1"), "compute 2.79");
    let flavor = crate::common::unlimited_flavor(&nova, ("bench-guest", 1, opts.ram_mb, 1)).await?;
    let image = upload_guest(&url, &opts.guest_dir).await?;

    let mut rounds = Vec::new();
    for round in ["cold", "warm"] {
        let figures = boot_round(&opts, &nova, &flavor, &image, agent_pid, round).await;
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for d in $(virsh -c {uri} list --all --name | grep '^instance-'); do \
                 [ -d {dir}/${{d#instance-}} ] && virsh -c {uri} destroy $d >/dev/null 2>&1; \
                 [ -d {dir}/${{d#instance-}} ] && virsh -c {uri} undefine --managed-save $d >/dev/null 2>&1; done",
                uri = opts.libvirt_uri,
                dir = instances.display()
            ))
            .status();
        rounds.push(figures?);
    }
    drop(agent);
    let _ = std::fs::remove_dir_all(&instances);

    println!(
        "bench guests: {} guests at once, {} MiB RAM each, virt_type {}, on {}",
        opts.guests,
        opts.ram_mb,
        opts.virt_type,
        std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default().trim()
    );
    for r in &rounds {
        println!(
            "  {:<4} cache: ACTIVE p50 {:>8.0} ms p99 {:>8.0} ms | marker p50 {:>8.0} ms p99 {:>8.0} ms | \
             agent CPU {:.0} ms/guest, RSS {:.1} MiB ({:.2} MiB/guest), peak {:.1} MiB | QEMU RSS {:.1} MiB/guest, \
             overhead {:+.1} MiB/guest",
            r["cache"].as_str().unwrap_or(""),
            r["active_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["active_ms"]["p99"].as_f64().unwrap_or(0.0),
            r["marker_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["marker_ms"]["p99"].as_f64().unwrap_or(0.0),
            r["agent_cpu_ms_per_guest"].as_f64().unwrap_or(0.0),
            r["agent_rss_mib"].as_f64().unwrap_or(0.0),
            r["agent_rss_mib_per_guest"].as_f64().unwrap_or(0.0),
            r["agent_peak_rss_mib"].as_f64().unwrap_or(0.0),
            r["qemu_rss_mib_per_guest"].as_f64().unwrap_or(0.0),
            r["overhead_mib_per_guest"].as_f64().unwrap_or(0.0),
        );
    }
    if let Some(path) = &opts.json {
        let doc = json!({
            "benchmark": "guests",
            "guests": opts.guests,
            "ram_mb": opts.ram_mb,
            "virt_type": opts.virt_type,
            "rounds": rounds,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(())
}

/// Upload the guest's kernel, ramdisk and disk (AMI style, as
/// `scripts/guest-image.sh` does); the disk image's id.
async fn upload_guest(url: &str, dir: &std::path::Path) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let kernel = upload_one(
        &client,
        url,
        dir.join("vmlinuz"),
        json!({"name": "bench-guest-kernel",
        "disk_format": "aki", "container_format": "aki"}),
    )
    .await?;
    let ramdisk = upload_one(
        &client,
        url,
        dir.join("initrd"),
        json!({"name": "bench-guest-ramdisk",
        "disk_format": "ari", "container_format": "ari"}),
    )
    .await?;
    upload_one(
        &client,
        url,
        dir.join("disk.raw"),
        json!({"name": "bench-guest", "disk_format": "raw", "container_format": "bare", "kernel_id": kernel,
               "ramdisk_id": ramdisk, "os_command_line": "no_timer_check"}),
    )
    .await
}

/// Create a public image of `body` and upload `file` as its data; its id.
async fn upload_one(client: &reqwest::Client, url: &str, file: PathBuf, mut body: Value) -> anyhow::Result<String> {
    body["visibility"] = json!("public");
    let resp = client.post(format!("{url}/image/v2/images")).header("x-auth-token", "admin").json(&body).send().await?;
    anyhow::ensure!(resp.status().as_u16() == 201, "image create: {}", resp.status());
    let id = resp.json::<Value>().await?["id"].as_str().unwrap_or("").to_owned();
    let data = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let resp = client
        .put(format!("{url}/image/v2/images/{id}/file"))
        .header("x-auth-token", "admin")
        .header("content-type", "application/octet-stream")
        .body(data)
        .send()
        .await?;
    anyhow::ensure!(resp.status().as_u16() == 204, "image upload: {}", resp.status());
    Ok(id)
}

/// Boot `--guests` servers at once and time them; then delete them (and
/// wait until they are gone). The round's figures.
async fn boot_round(
    opts: &GuestsOpts,
    nova: &Nova,
    flavor: &str,
    image: &str,
    agent_pid: u32,
    round: &str,
) -> anyhow::Result<Value> {
    let cpu_before = cpu_ticks(agent_pid);
    let rss_before = rss_mib(agent_pid);
    let timeout = Duration::from_secs(opts.timeout_secs);
    let mut tasks = Vec::new();
    for i in 0..opts.guests {
        let nova = nova.clone();
        let (flavor, image) = (flavor.to_owned(), image.to_owned());
        let name = format!("bench-{round}-{i}");
        tasks.push(tokio::spawn(async move { one_guest(&nova, &name, &flavor, &image, timeout).await }));
    }
    let mut ids = Vec::new();
    let mut timings = Vec::new();
    let mut failures = Vec::new();
    for task in tasks {
        match task.await? {
            Ok((id, timing)) => {
                ids.push(id);
                timings.push(timing);
            }
            Err((id, why)) => {
                ids.extend(id);
                failures.push(why);
            }
        }
    }
    // Sampled with every guest up: the agent and each guest's QEMU.
    let cpu_ms = ticks_ms(cpu_ticks(agent_pid).saturating_sub(cpu_before));
    let rss = rss_mib(agent_pid);
    let peak = status_mib(agent_pid, "VmHWM:");
    let qemu: Vec<f64> = ids.iter().filter_map(|id| qemu_pid(id)).map(rss_mib).collect();
    for id in &ids {
        let _ = nova.call(reqwest::Method::DELETE, &format!("/servers/{id}"), None).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for id in &ids {
        while nova.call(reqwest::Method::GET, &format!("/servers/{id}"), None).await?.0 != 404 {
            anyhow::ensure!(Instant::now() < deadline, "server {id} was not deleted within 2 minutes");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    anyhow::ensure!(failures.is_empty(), "{round} round: {}", failures.join("; "));
    let n = opts.guests as f64;
    let mut active: Vec<Duration> = timings.iter().map(|t| t.active).collect();
    let mut marker: Vec<Duration> = timings.iter().map(|t| t.marker).collect();
    active.sort();
    marker.sort();
    let qemu_mean = if qemu.is_empty() { 0.0 } else { qemu.iter().sum::<f64>() / qemu.len() as f64 };
    Ok(json!({
        "cache": round,
        "guests": opts.guests,
        "active_ms": {"p50": ms(percentile(&active, 0.5)), "p99": ms(percentile(&active, 0.99)),
                      "all": active.iter().map(|d| ms(*d).round()).collect::<Vec<_>>()},
        "marker_ms": {"p50": ms(percentile(&marker, 0.5)), "p99": ms(percentile(&marker, 0.99)),
                      "all": marker.iter().map(|d| ms(*d).round()).collect::<Vec<_>>()},
        "agent_cpu_ms_per_guest": cpu_ms / n,
        "agent_rss_mib": rss,
        "agent_rss_mib_per_guest": (rss - rss_before).max(0.0) / n,
        "agent_peak_rss_mib": peak,
        "qemu_rss_mib": qemu,
        "qemu_rss_mib_per_guest": qemu_mean,
        "overhead_mib_per_guest": qemu_mean - opts.ram_mb as f64,
    }))
}

/// Boot one guest and wait for ACTIVE and its marker; its id and times,
/// or (its id if it got one and) why not.
async fn one_guest(
    nova: &Nova,
    name: &str,
    flavor: &str,
    image: &str,
    timeout: Duration,
) -> Result<(String, Timing), (Option<String>, String)> {
    let start = Instant::now();
    let body = json!({"server": {"name": name, "flavorRef": flavor, "imageRef": image, "networks": "none"}});
    let (status, answer) =
        nova.call(reqwest::Method::POST, "/servers", Some(body)).await.map_err(|e| (None, e.to_string()))?;
    if status != 202 {
        return Err((None, format!("boot answered {status}: {answer}")));
    }
    let id = answer["server"]["id"].as_str().unwrap_or("").to_owned();
    let fail = |why: String| (Some(id.clone()), why);
    let mut active = None;
    loop {
        if start.elapsed() > timeout {
            return Err(fail(format!("{id}: no marker within {timeout:?} (ACTIVE: {active:?})")));
        }
        if active.is_none() {
            let (_, shown) = nova
                .call(reqwest::Method::GET, &format!("/servers/{id}"), None)
                .await
                .map_err(|e| fail(e.to_string()))?;
            match shown["server"]["status"].as_str() {
                Some("ACTIVE") => active = Some(start.elapsed()),
                Some("ERROR") => return Err(fail(format!("{id} went to ERROR: {}", shown["server"]["fault"]))),
                _ => {}
            }
        }
        if let Some(active) = active {
            let (_, out) = nova
                .call(reqwest::Method::POST, &format!("/servers/{id}/action"), Some(json!({"os-getConsoleOutput": {}})))
                .await
                .map_err(|e| fail(e.to_string()))?;
            if out["output"].as_str().is_some_and(|log| log.contains(&format!("BERTH-GUEST-UP uuid={id}"))) {
                return Ok((id, Timing { active, marker: start.elapsed() }));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The QEMU process of instance `id`'s domain (`-name guest=instance-{id}`).
fn qemu_pid(id: &str) -> Option<u32> {
    let out = Command::new("pgrep").args(["-f", &format!("guest=instance-{id}")]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().next()?.trim().parse().ok()
}
