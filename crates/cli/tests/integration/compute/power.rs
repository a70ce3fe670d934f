//! Power management of the reservation pool (`--power-policy
//! reservations`, issue 22) end to end on the test clock, with fake agents
//! as separate processes that simulate power through marker files
//! (`berth agent --power-dir DIR --power-on-secs N`): the power commands
//! create or remove `DIR/{host}.off` and append a line to `DIR/log`, so a
//! test counts the commands that really ran.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::leases::{advance, enrol, host_lease, jump_to, offset_for, rsv, wait_lease, Y2040};
use super::support::{eventually, Cloud, Hosts};
use crate::support::{fresh_dir, Client};

/// `YYYY-MM-DD HH:MM` of a time after 2040-01-01 00:00 UTC on the same day.
fn at(seconds_after_2040: i64) -> String {
    format!("2040-01-01 {:02}:{:02}", seconds_after_2040 / 3600, seconds_after_2040 % 3600 / 60)
}

/// A power directory and the commands that act on it. The power-on
/// command leaves a host off when `DIR/{host}.broken` exists (a host that
/// never comes back).
fn power_dir(tag: &str) -> (PathBuf, String, String) {
    let dir = fresh_dir(&format!("{tag}-power"));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let off = format!("touch '{d}'/\"$1\".off && echo \"off $1\" >> '{d}'/log");
    let on = format!("[ -e '{d}'/\"$1\".broken ] || rm -f '{d}'/\"$1\".off; echo \"on $1\" >> '{d}'/log");
    (dir, on, off)
}

/// The lines of the command log.
fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Pool host name → its `os-hosts` row.
async fn pool(admin: &Client) -> std::collections::BTreeMap<String, Value> {
    let hosts = admin.get("/reservation/v1/os-hosts").await.body;
    hosts["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["hypervisor_hostname"].as_str().unwrap().to_owned(), h.clone()))
        .collect()
}

async fn power_of(admin: &Client, host: &str) -> String {
    pool(admin).await[host]["power_state"].as_str().unwrap().to_owned()
}

async fn wait_power(admin: &Client, host: &str, state: &str) {
    eventually(&format!("{host} {state}"), || async { power_of(admin, host).await == state }).await;
}

/// The hosts (names) holding a reservation of the lease.
async fn lease_hosts(admin: &Client, lease_id: &str) -> Vec<String> {
    let allocations = admin.get(&format!("/reservation/v1/os-hosts/allocations?lease_id={lease_id}")).await.body;
    let names: std::collections::BTreeMap<String, String> =
        pool(admin).await.into_iter().map(|(name, h)| (h["id"].as_str().unwrap().to_owned(), name)).collect();
    allocations["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["reservations"].as_array().is_some_and(|r| !r.is_empty()))
        .map(|a| names[a["resource_id"].as_str().unwrap()].clone())
        .collect()
}

/// The test clock's offset from the wall clock (the server's clock runs on
/// with the wall clock).
struct Clock(i64);

impl Clock {
    /// Jump to 2040-01-01 00:00 (hosts up and reservable).
    async fn start(cloud: &Cloud, admin: &Client) -> Self {
        jump_to(cloud, admin, Y2040).await;
        Clock(offset_for(Y2040))
    }

    /// Set the clock to `t` seconds after 2040-01-01 00:00.
    async fn set(&mut self, cloud: &Cloud, t: i64) {
        let want = offset_for(Y2040 + t);
        advance(&cloud.server, want - self.0).await;
        self.0 = want;
    }
}

/// A one-host lease from 01:00 to 02:00 on a pool of `p0` and `p1`, and
/// the host it took broken (`DIR/{host}.broken`: its power commands
/// fail or leave it off): (lease id, the broken host, the other).
async fn lease_on_a_broken_host(admin: &Client, dir: &Path) -> (String, &'static str, &'static str) {
    let reply = admin.post("/reservation/v1/leases", &host_lease("l", &at(3600), &at(7200), json!({}))).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let lease_id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let first = lease_hosts(admin, &lease_id).await;
    assert_eq!(first.len(), 1);
    let (dead, other) = if first[0] == "p0" { ("p0", "p1") } else { ("p1", "p0") };
    std::fs::write(dir.join(format!("{dead}.broken")), "").unwrap();
    (lease_id, dead, other)
}

/// The lease moves onto `other`, which is woken in time: on and the
/// lease's only host when it starts at 01:00 (the clock set to 01:00:10).
async fn heals_onto(cloud: &Cloud, admin: &Client, clock: &mut Clock, lease_id: &str, other: &str) -> Value {
    eventually("the lease moves", || async { lease_hosts(admin, lease_id).await == vec![other.to_owned()] }).await;
    wait_power(admin, other, "on").await;
    clock.set(cloud, 3610).await;
    let lease = wait_lease(admin, lease_id, "ACTIVE").await;
    assert_eq!(lease_hosts(admin, lease_id).await, vec![other.to_owned()], "{lease}");
    assert_eq!(power_of(admin, other).await, "on");
    lease
}

/// Let the power pass (once a second) see the pool as it is now.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// `hosts` pool hosts `p0`, `p1`, … switched through `dir` by `on` and
/// `off`: off after a minute idle, no spare, 120 s to boot with a 60 s
/// margin, plus `serve_extra`; the agent takes `agent_extra`. The clock
/// jumps to 2040 before the hosts join the pool, so idle times count
/// from the jump.
async fn power_pool(
    tag: &str,
    dir: &Path,
    (on, off): (&str, &str),
    serve_extra: &[&str],
    hosts: usize,
    agent_extra: &[&str],
) -> (Cloud, Client, Clock) {
    let mut args = power_args(on, off, &["--suspend-time", "60", "--spare-hosts", "0", "--power-on-secs", "120"]);
    args.extend(["--power-margin", "60"]);
    args.extend_from_slice(serve_extra);
    let mut cloud = Cloud::start(tag, &args).await;
    let d = dir.display().to_string();
    let mut agent = vec!["--vcpus", "4", "--power-dir", &d];
    agent.extend_from_slice(agent_extra);
    cloud.add_agent(Hosts::new("p", hosts, &agent)).await;
    let admin = rsv(&cloud.server, "admin");
    let clock = Clock::start(&cloud, &admin).await;
    for i in 0..hosts {
        enrol(&admin, &format!("p{i}"), json!({})).await;
    }
    (cloud, admin, clock)
}

fn power_args<'a>(on: &'a str, off: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--power-policy", "reservations", "--power-on-cmd", on, "--power-off-cmd", off];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_pool_host_goes_off_but_never_one_with_a_server() {
    let (dir, on, off) = power_dir("pw-idle");
    let d = dir.display().to_string();
    let args = power_args(&on, &off, &["--suspend-time", "600", "--spare-hosts", "1", "--pool-lend-lead", "600"]);
    let mut cloud = Cloud::start("pw-idle", &args).await;
    cloud.add_agent(Hosts::new("p", 3, &["--vcpus", "4", "--power-dir", &d])).await;
    let admin = rsv(&cloud.server, "admin");
    // The clock jumps before the hosts join the pool: idle times count
    // from the jump.
    let mut clock = Clock::start(&cloud, &admin).await;
    let nova = cloud.nova("admin");
    for h in ["p0", "p1", "p2"] {
        enrol(&admin, h, json!({})).await;
    }
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;

    // A lent server on p0 (forced there by the admin).
    let reply = nova.boot("lent", &flavor, &image, json!({"availability_zone": "nova:p0"})).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let id = reply.body["server"]["id"].as_str().unwrap().to_owned();
    assert_eq!(nova.wait_settled(&id).await["OS-EXT-SRV-ATTR:host"], json!("p0"));

    // Before the suspend time nothing goes off.
    settle().await;
    clock.set(&cloud, 300).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(log_lines(&dir).is_empty(), "{:?}", log_lines(&dir));

    // After it: of the idle p1 and p2, one stays on as the spare, p2 goes
    // off; p0 carries a server and stays on.
    clock.set(&cloud, 700).await;
    wait_power(&admin, "p2", "off").await;
    assert!(dir.join("p2.off").exists());
    assert_eq!(log_lines(&dir), vec!["off p2".to_owned()]);
    assert_eq!(power_of(&admin, "p0").await, "on");
    assert_eq!(power_of(&admin, "p1").await, "on");
    assert_eq!(cloud.server.metric("berth_power_downs_total").await, 1);
    assert_eq!(cloud.server.metric("berth_power_hosts_off").await, 1);
    assert_eq!(cloud.server.metric("berth_power_hosts_on").await, 2);

    // os-hypervisors: down on purpose (disabled, with the reason).
    let hypervisors = nova.get("/os-hypervisors/detail").await.body;
    let p2 = hypervisors["hypervisors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hypervisor_hostname"] == json!("p2"))
        .cloned()
        .unwrap();
    assert_eq!((p2["state"].clone(), p2["status"].clone()), (json!("down"), json!("disabled")), "{p2}");
    assert_eq!(p2["service"]["disabled_reason"], json!("power management: off"), "{p2}");

    // An ordinary boot never lands on the off host: the spare p1 takes it.
    let b = nova.boot_id("b", &flavor, &image).await;
    let host = nova.wait_settled(&b).await["OS-EXT-SRV-ATTR:host"].clone();
    assert!(host == json!("p0") || host == json!("p1"), "{host}");

    // Hours later the host with a server is still on; p2 was never taken
    // for down (still reservable, no lease healed).
    clock.set(&cloud, 4 * 3600).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(power_of(&admin, "p0").await, "on");
    assert_eq!(pool(&admin).await["p2"]["reservable"], json!(true));
    assert!(!log_lines(&dir).contains(&"off p0".to_owned()), "{:?}", log_lines(&dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_an_hour_ahead_wakes_its_host_in_time() {
    let (dir, on, off) = power_dir("pw-wake");
    let (cloud, admin, mut clock) = power_pool("pw-wake", &dir, (&on, &off), &[], 2, &["--power-on-secs", "2"]).await;
    settle().await;
    clock.set(&cloud, 120).await;
    wait_power(&admin, "p0", "off").await;
    wait_power(&admin, "p1", "off").await;

    // A lease of p0 from 01:00 (created at 00:02): p0 is woken at
    // 01:00 - (120 + 60) s, not before.
    let props = json!({"hypervisor_properties": "[\"=\", \"$hypervisor_hostname\", \"p0\"]"});
    let reply = admin.post("/reservation/v1/leases", &host_lease("l", &at(3600), &at(7200), props)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let lease_id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    clock.set(&cloud, 3000).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(power_of(&admin, "p0").await, "off", "woken too early");
    clock.set(&cloud, 3430).await;
    wait_power(&admin, "p0", "on").await;
    assert_eq!(log_lines(&dir), vec!["off p0", "off p1", "on p0"].into_iter().map(String::from).collect::<Vec<_>>());
    assert_eq!(power_of(&admin, "p1").await, "off");

    // At the start p0 is on and empty; the lease starts on it, on time.
    clock.set(&cloud, 3610).await;
    let lease = wait_lease(&admin, &lease_id, "ACTIVE").await;
    assert_eq!(lease["degraded"], json!(false), "{lease}");
    assert_eq!(lease_hosts(&admin, &lease_id).await, vec!["p0".to_owned()]);
    assert_eq!(power_of(&admin, "p0").await, "on");
    assert_eq!(cloud.server.metric("berth_power_ups_total").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_that_does_not_come_back_fails_and_its_lease_takes_another() {
    let (dir, on, off) = power_dir("pw-fail");
    let (cloud, admin, mut clock) =
        power_pool("pw-fail", &dir, (&on, &off), &["--power-resume-timeout", "90"], 2, &[]).await;
    settle().await;
    clock.set(&cloud, 120).await;
    wait_power(&admin, "p0", "off").await;
    wait_power(&admin, "p1", "off").await;

    let (lease_id, dead, other) = lease_on_a_broken_host(&admin, &dir).await;

    // Woken at 00:57; it never reports: failed after the resume timeout.
    clock.set(&cloud, 3425).await;
    wait_power(&admin, dead, "powering-on").await;
    clock.set(&cloud, 3425 + 95).await;
    wait_power(&admin, dead, "failed").await;
    assert_eq!(pool(&admin).await[dead]["reservable"], json!(false));
    assert_eq!(cloud.server.metric("berth_power_failures_total").await, 1);

    // The lease heals onto the other host, which is woken in time.
    let lease = heals_onto(&cloud, &admin, &mut clock, &lease_id, other).await;
    assert_eq!(lease["reservations"][0]["resources_changed"], json!(true), "{lease}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_power_down_rate_limit_holds_when_500_hosts_could_go_off_at_once() {
    // The scale: 500 idle pool hosts (fake hosts inside the
    // server) could all go off at once; at the default 60 a minute (Slurm's),
    // 60 do, and 60 more a minute later.
    let (dir, on, off) = power_dir("pw-rate");
    let args = power_args(&on, &off, &["--suspend-time", "60", "--spare-hosts", "0", "--fake-hosts", "500"]);
    let cloud = Cloud::start("pw-rate", &args).await;
    let names: Vec<String> = (0..500).map(|i| format!("fake-{i}")).collect();
    cloud.wait_hosts(&names).await;
    let admin = rsv(&cloud.server, "admin");
    // The clock jumps before the hosts join the pool: idle times count
    // from the jump.
    let mut clock = Clock::start(&cloud, &admin).await;
    for name in &names {
        enrol(&admin, name, json!({})).await;
    }
    settle().await;
    // Every host idle for more than the suspend time.
    clock.set(&cloud, 600).await;
    eventually("60 off", || async { log_lines(&dir).len() >= 60 }).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(log_lines(&dir).len(), 60, "{:?}", log_lines(&dir));
    assert_eq!(cloud.server.metric("berth_power_downs_total").await, 60);
    assert_eq!(cloud.server.metric("berth_power_hosts_off").await, 60);
    assert_eq!(cloud.server.metric("berth_power_hosts_on").await, 440);
    // A minute later, 60 more (and not one before the minute is over).
    clock.set(&cloud, 600 + 50).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(log_lines(&dir).len(), 60, "{:?}", log_lines(&dir));
    clock.set(&cloud, 600 + 65).await;
    eventually("120 off", || async { log_lines(&dir).len() >= 120 }).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(log_lines(&dir).len(), 120, "{:?}", log_lines(&dir));
    assert_eq!(cloud.server.metric("berth_power_hosts_off").await, 120);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_during_a_power_up_does_not_run_the_command_again() {
    let (dir, on, off) = power_dir("pw-restart");
    // The fake host takes 600 s (wall) to boot: it is still powering on
    // when the control plane is killed.
    let (mut cloud, admin, mut clock) =
        power_pool("pw-restart", &dir, (&on, &off), &[], 1, &["--power-on-secs", "600"]).await;
    settle().await;
    clock.set(&cloud, 120).await;
    wait_power(&admin, "p0", "off").await;
    let reply = admin.post("/reservation/v1/leases", &host_lease("l", &at(3600), &at(7200), json!({}))).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let lease_id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    clock.set(&cloud, 3430).await;
    wait_power(&admin, "p0", "powering-on").await;
    eventually("the power-on command ran", || async { log_lines(&dir).contains(&"on p0".to_owned()) }).await;

    // SIGKILL the control plane (and the agent: its restart boots the
    // host at once, as if the boot finished meanwhile).
    cloud.restart().await;
    let admin = rsv(&cloud.server, "admin");
    wait_power(&admin, "p0", "on").await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let ons = log_lines(&dir).iter().filter(|l| *l == "on p0").count();
    assert_eq!(ons, 1, "the power-on command ran again: {:?}", log_lines(&dir));
    assert_eq!(cloud.server.metric("berth_power_ups_total").await, 0, "the new process issued no command");
    clock.set(&cloud, 3610).await;
    wait_lease(&admin, &lease_id, "ACTIVE").await;
    assert_eq!(power_of(&admin, "p0").await, "on");
}

/// Commands that fail (exit 1, logged as `off-failed`/`on-failed`) for a
/// host whose `DIR/{host}.broken` exists.
fn failing_commands(dir: &Path) -> (String, String) {
    let d = dir.display().to_string();
    let off = format!(
        "if [ -e '{d}'/\"$1\".broken ]; then echo \"off-failed $1\" >> '{d}'/log; exit 1; fi; \
         touch '{d}'/\"$1\".off && echo \"off $1\" >> '{d}'/log"
    );
    let on = format!(
        "if [ -e '{d}'/\"$1\".broken ]; then echo \"on-failed $1\" >> '{d}'/log; exit 1; fi; \
         rm -f '{d}'/\"$1\".off; echo \"on $1\" >> '{d}'/log"
    );
    (on, off)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_power_command_fails_the_host_at_once_or_leaves_it_on() {
    let dir = fresh_dir("pw-cmdfail-power");
    std::fs::create_dir_all(&dir).unwrap();
    let (on, off) = failing_commands(&dir);
    // The resume timeout is long: a failed host below is failed by its
    // command, not by the timeout.
    let (cloud, admin, mut clock) =
        power_pool("pw-cmdfail", &dir, (&on, &off), &["--power-resume-timeout", "3000"], 2, &[]).await;
    // p0's power-off fails: p0 stays on (counted), p1 goes off.
    std::fs::write(dir.join("p0.broken"), "").unwrap();
    settle().await;
    clock.set(&cloud, 120).await;
    wait_power(&admin, "p1", "off").await;
    eventually("p0's power-off failed", || async { log_lines(&dir).contains(&"off-failed p0".to_owned()) }).await;
    settle().await;
    assert_eq!(power_of(&admin, "p0").await, "on");
    assert!(!dir.join("p0.off").exists());
    assert_eq!(cloud.server.metric("berth_power_command_errors_total").await, 1);
    assert_eq!(cloud.server.metric("berth_power_hosts_on").await, 1);
    assert_eq!(cloud.server.metric("berth_power_hosts_off").await, 1);
    // Not tried again before the suspend time; once the command works,
    // p0 goes off.
    assert_eq!(log_lines(&dir).iter().filter(|l| l.starts_with("off-failed")).count(), 1, "{:?}", log_lines(&dir));
    std::fs::remove_file(dir.join("p0.broken")).unwrap();
    clock.set(&cloud, 300).await;
    wait_power(&admin, "p0", "off").await;

    // A lease at 01:00; its host's power-on fails at 00:57: failed at
    // once (not after the 3000 s resume timeout), the lease heals onto
    // the other host, which is woken and on at the start.
    let (lease_id, dead, other) = lease_on_a_broken_host(&admin, &dir).await;
    clock.set(&cloud, 3425).await;
    wait_power(&admin, dead, "failed").await;
    assert!(log_lines(&dir).contains(&format!("on-failed {dead}")), "{:?}", log_lines(&dir));
    assert_eq!(pool(&admin).await[dead]["reservable"], json!(false));
    assert_eq!(cloud.server.metric("berth_power_failures_total").await, 1);
    assert_eq!(cloud.server.metric("berth_power_command_errors_total").await, 2);
    heals_onto(&cloud, &admin, &mut clock, &lease_id, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_demand_boots_wake_pool_hosts_and_their_waits_are_reported() {
    let (dir, on, off) = power_dir("pw-demand");
    let d = dir.display().to_string();
    let args = power_args(&on, &off, &["--suspend-time", "60", "--spare-hosts", "1", "--pool-lend-lead", "600"]);
    let mut cloud = Cloud::start("pw-demand", &args).await;
    // Hosts take 4 s (wall) to boot: long enough to boot into the gap.
    // One vCPU at ratio 1: one server fills a host.
    let shape = ["--vcpus", "1", "--cpu-ratio", "1", "--power-dir", &d, "--power-on-secs", "4"];
    cloud.add_agent(Hosts::new("p", 3, &shape)).await;
    let admin = rsv(&cloud.server, "admin");
    let mut clock = Clock::start(&cloud, &admin).await;
    let nova = cloud.nova("admin");
    for h in ["p0", "p1", "p2"] {
        enrol(&admin, h, json!({})).await;
    }
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    settle().await;
    clock.set(&cloud, 120).await;
    // One spare stays on, two go off.
    eventually("two off", || async { log_lines(&dir).len() == 2 }).await;
    let spare = {
        let hosts = pool(&admin).await;
        let on: Vec<&String> = hosts.iter().filter(|(_, h)| h["power_state"] == json!("on")).map(|(n, _)| n).collect();
        assert_eq!(on.len(), 1, "{hosts:?}");
        on[0].clone()
    };

    // An on-demand boot takes the spare (the host is full);
    // the spares drop below --spare-hosts, so one host is woken.
    let a = nova.boot_id("a", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&a).await["OS-EXT-SRV-ATTR:host"], json!(spare));
    eventually("a host woken for the spare", || async { log_lines(&dir).len() == 3 }).await;
    let woken = log_lines(&dir)[2].strip_prefix("on ").unwrap().to_owned();
    assert_eq!(power_of(&admin, &woken).await, "powering-on");

    // A second boot while it is still booting finds no valid host: it is
    // refused (NoValidHost, as Nova) and the last host is woken for it.
    let b = nova.boot_id("b", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&b).await["status"], json!("ERROR"));
    eventually("the last host woken", || async { log_lines(&dir).len() == 4 }).await;
    assert_eq!(cloud.server.metric("berth_power_ondemand_waits_total").await, 1);
    assert_eq!(cloud.server.metric("berth_power_ups_total").await, 2);
    for host in ["p0", "p1", "p2"] {
        wait_power(&admin, host, "on").await;
    }
    // The wait (from the refused boot to its host on) is reported: the
    // fake host boots in 4 s of wall clock.
    let waited = cloud.server.metric("berth_power_ondemand_wait_seconds_total").await;
    assert!((1..=30).contains(&waited), "waited {waited} s");
    // Retried, the boot finds a host now.
    let c = nova.boot_id("c", &flavor, &image).await;
    let host = nova.wait_settled(&c).await["OS-EXT-SRV-ATTR:host"].clone();
    assert_ne!(host, json!(spare));
    assert_eq!(nova.wait_settled(&c).await["status"], json!("ACTIVE"));
}
