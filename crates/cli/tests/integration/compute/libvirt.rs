//! `berth agent --driver libvirt` with real QEMU guests (TCG) through the
//! machine's libvirtd: the project's guest image (`scripts/guest-image.sh`)
//! boots to ACTIVE and prints its uuid and key fingerprint from the config
//! drive in `os-getConsoleOutput`; stop, start, reboot, pause and suspend
//! change the domain's real state; a guest destroyed behind berth's back
//! shows SHUTOFF and, started behind its back, is stopped again; a guest
//! that powers itself off shows SHUTOFF within one power sync; a restarted agent re-attaches without a
//! second spawn; delete leaves no domain and no files but the image
//! cache; the inventory is the machine's; the flavor's ephemeral and swap
//! disks are attached and removed; a snapshot streams to the image API and
//! boots; rescue, unrescue, shelve (offload) and unshelve act on the real
//! guest. The agents hold no admin identity: each has its host's agent
//! credential (the service role), and gets what a guest is made of with
//! its tasks. Skipped, with the reason, where libvirt is not available
//! (`scripts/test.sh` starts it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{wait_gone, Cloud, Hosts, Nova};

pub(crate) const URI: &str = "qemu:///system";

/// Why the libvirt tests cannot run here, if they cannot.
pub(crate) fn unavailable() -> Option<String> {
    for tool in ["virsh", "qemu-img", "genisoimage", "qemu-system-x86_64"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.map(|o| o.status.success()).unwrap_or(false) {
            return Some(format!("{tool} is not installed"));
        }
    }
    match Command::new("virsh").args(["-c", URI, "version"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("libvirtd does not answer at {URI}: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(err) => Some(format!("virsh: {err}")),
    }
}

pub(crate) fn virsh(args: &[&str]) -> (bool, String) {
    let out = Command::new("virsh").args(["-c", URI]).args(args).output().expect("virsh");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub(crate) fn domstate(id: &str) -> String {
    virsh(&["domstate", &format!("instance-{id}")]).1
}

/// Destroys and undefines the domains of this test's instances path
/// however the test ends.
struct Domains(PathBuf);

impl Drop for Domains {
    fn drop(&mut self) {
        let (_, names) = virsh(&["list", "--all", "--name"]);
        for name in names.lines() {
            let Some(uuid) = name.trim().strip_prefix("instance-") else { continue };
            if self.0.join(uuid).exists() {
                let _ = virsh(&["destroy", name.trim()]);
                let _ = virsh(&["undefine", "--managed-save", name.trim()]);
            }
        }
    }
}

/// Build (once per machine: the files are kept) and upload the guest;
/// the disk image's id.
pub(crate) fn guest_image(base: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest-image.sh");
    // A directory per version of the script: runs of another checkout
    // (another version) beside this one never rebuild it under us.
    let text = std::fs::read(&script).expect("guest-image.sh");
    let hash = text.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    let out_dir = std::env::temp_dir().join(format!("berth-guest-image-{:08x}", hash >> 32));
    let out = Command::new("bash")
        .arg(&script)
        .args(["--out", out_dir.to_str().expect("path"), "--url", base, "--token", "admin"])
        .output()
        .expect("guest-image.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "guest-image.sh failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    text.lines().find_map(|l| l.strip_prefix("IMAGE_ID=")).expect("IMAGE_ID").trim().to_owned()
}

/// Another disk image of the guest with the same kernel and ramdisk and
/// `properties` (e.g. `hw_machine_type`), its disk `size` bytes of zeros;
/// its id.
async fn guest_variant(base: &str, guest: &str, properties: Value, size: usize) -> String {
    let http = crate::support::http_client();
    let shown: Value = http
        .get(format!("{base}/image/v2/images/{guest}"))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("image show")
        .json()
        .await
        .expect("image json");
    let mut body = json!({"name": "berth-guest-variant", "disk_format": "raw", "container_format": "bare",
                          "visibility": "public", "kernel_id": shown["kernel_id"], "ramdisk_id": shown["ramdisk_id"],
                          "os_command_line": shown["os_command_line"]});
    for (key, value) in properties.as_object().expect("properties") {
        body[key] = value.clone();
    }
    let created = http
        .post(format!("{base}/image/v2/images"))
        .header("x-auth-token", "admin")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("image create");
    assert_eq!(created.status().as_u16(), 201);
    let id = created.json::<Value>().await.expect("image json")["id"].as_str().expect("id").to_owned();
    let put = http
        .put(format!("{base}/image/v2/images/{id}/file"))
        .header("x-auth-token", "admin")
        .header("content-type", "application/octet-stream")
        .body(vec![0u8; size])
        .send()
        .await
        .expect("image upload");
    assert_eq!(put.status().as_u16(), 204);
    id
}

/// Wait (4 minutes: TCG on a loaded machine) for the server to have
/// `status` and no task; returns it.
pub(crate) async fn settle(nova: &Nova, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["status"] == status && server["OS-EXT-STS:task_state"].is_null() {
            return server;
        }
        assert!(server["status"] != "ERROR", "server {id} failed: {server}");
        assert!(Instant::now() < deadline, "server {id} never reached {status}: {server}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn console(nova: &Nova, id: &str) -> String {
    let answer = nova.post(&format!("/servers/{id}/action"), &json!({"os-getConsoleOutput": {}})).await;
    answer.body["output"].as_str().unwrap_or_default().to_owned()
}

/// Wait for the guest's `boots`-th marker line on its console (one a
/// boot: the log is kept across boots); the line.
pub(crate) async fn marker(nova: &Nova, id: &str, boots: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let log = console(nova, id).await;
        // Whole lines only: the log may be read while the guest is still
        // writing its marker.
        let whole = log.split_inclusive('\n').filter(|l| l.ends_with('\n'));
        if let Some(line) = whole.filter(|l| l.starts_with("BERTH-GUEST-UP")).nth(boots - 1) {
            return line.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "no marker from {id}; console:\n{log}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub(crate) async fn act(nova: &Nova, id: &str, body: Value) {
    let answer = nova.post(&format!("/servers/{id}/action"), &body).await;
    assert_eq!(answer.status, 202, "{body}: {:?}", answer.body);
}

/// The `nova-compute` service of `host` forced down (2.53) or up again.
pub(crate) async fn force_down(nova: &Nova, host: &str, down: bool) {
    let all = nova.at("2.53").get("/os-services?binary=nova-compute").await.body;
    let id = all["services"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["host"] == host))
        .and_then(|s| s["id"].as_str())
        .expect("service id")
        .to_owned();
    let answer = nova.at("2.53").put(&format!("/os-services/{id}"), &json!({"forced_down": down})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

/// Issue `host` its agent credential (`POST /admin/v1/agent-credentials`)
/// into a file of the test's; its path. An agent started with it
/// (`--credential-file`) has the service role, not admin.
pub(crate) async fn agent_credential(cloud: &Cloud, host: &str) -> PathBuf {
    let answer = cloud.server.client().post("/admin/v1/agent-credentials", &json!({"host": host})).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    let token = answer.body["credential"]["token"].as_str().expect("token").to_owned();
    let path = cloud.server.dir.join(format!("{host}.credential"));
    std::fs::write(&path, format!("{token}\n")).expect("credential file");
    path
}

/// A server and one `--driver libvirt` agent (TCG, a power sync every
/// second, its host's agent credential: no admin identity) on an
/// instances path of the test's own; the guard undoes the domains however
/// the test ends.
async fn libvirt_cloud(tag: &str) -> (Cloud, PathBuf, String, Domains) {
    let mut cloud = Cloud::start(tag, &[]).await;
    let instances = cloud.server.dir.join("instances");
    let domains = Domains(instances.clone());
    let prefix = format!("lv{tag}{}-", std::process::id());
    let host = format!("{prefix}0");
    let credential = agent_credential(&cloud, &host).await;
    let args = [
        "--credential-file",
        credential.to_str().expect("path"),
        "--driver",
        "libvirt",
        "--virt-type",
        "qemu",
        "--libvirt-uri",
        URI,
        "--instances-path",
        instances.to_str().expect("path"),
        "--host",
        &host,
        "--reserved-host-memory-mb",
        "512",
        "--reserved-host-cpus",
        "0",
        "--sync-interval-secs",
        "1",
        "--shutdown-timeout-secs",
        "15",
    ];
    cloud.add_agent(Hosts::new(&prefix, 1, &args)).await;
    (cloud, instances, host, domains)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_guests_boot_run_and_go_through_libvirt() {
    if let Some(reason) = unavailable() {
        eprintln!("SKIPPED real_guests_boot_run_and_go_through_libvirt: {reason} (scripts/test.sh installs and starts libvirt)");
        return;
    }
    let (mut cloud, instances, host, _domains) = libvirt_cloud("libvirt").await;
    let admin = cloud.nova("admin").at("2.79");

    // The inventory is the machine's, minus what is reserved.
    let placement = cloud.server.client();
    let providers = placement.get(&format!("/resource_providers?name={host}")).await.body;
    let rp = providers["resource_providers"][0]["uuid"].as_str().expect("provider").to_owned();
    let inventory = placement.get(&format!("/resource_providers/{rp}/inventories")).await.body["inventories"].clone();
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let mem_kb: i64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online");
    let cpus: i64 = online
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<i64>().expect("cpu") - a.parse::<i64>().expect("cpu") + 1,
            None => 1,
        })
        .sum();
    assert_eq!(inventory["MEMORY_MB"]["total"], mem_kb / 1024, "{inventory}");
    assert_eq!(inventory["MEMORY_MB"]["reserved"], 512, "{inventory}");
    assert_eq!(inventory["VCPU"]["total"], cpus, "{inventory}");
    assert_eq!(inventory["VCPU"]["reserved"], 0, "{inventory}");
    assert_eq!(inventory["VCPU"]["allocation_ratio"], 4.0, "{inventory}");
    assert!(inventory["DISK_GB"]["total"].as_i64().unwrap_or(0) > 0, "{inventory}");
    let hypervisors = admin.get("/os-hypervisors/detail").await.body;
    assert_eq!(hypervisors["hypervisors"][0]["hypervisor_type"], "QEMU", "{hypervisors}");

    // Boot with a key pair: ACTIVE, then the guest's marker with its uuid
    // and the key's fingerprint, read from the config drive.
    let image = guest_image(&cloud.server.base);
    let flavor = admin.flavor("guest", 1, 128, 1).await;
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test@berth";
    let pair = admin.post("/os-keypairs", &json!({"keypair": {"name": "k1", "public_key": key}})).await;
    assert_eq!(pair.status, 201, "{:?}", pair.body);
    let fingerprint = pair.body["keypair"]["fingerprint"].as_str().expect("fingerprint").to_owned();
    let started = Instant::now();
    let boot = admin
        .post(
            "/servers",
            &json!({"server": {"name": "real-1", "flavorRef": flavor, "imageRef": image, "key_name": "k1",
                               "networks": "none"}}),
        )
        .await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    let id = boot.body["server"]["id"].as_str().expect("id").to_owned();
    settle(&admin, &id, "ACTIVE").await;
    let to_active = started.elapsed();
    let line = marker(&admin, &id, 1).await;
    let to_marker = started.elapsed();
    eprintln!("libvirt guest {id}: ACTIVE after {to_active:?}, marker after {to_marker:?} (cold image cache)");
    assert_eq!(line, format!("BERTH-GUEST-UP uuid={id} key={fingerprint}"));
    assert_eq!(domstate(&id), "running");
    let dir = instances.join(&id);
    assert!(dir.join("disk").exists() && dir.join("disk.config").exists(), "{}", dir.display());
    let (_, xml) = virsh(&["dumpxml", &format!("instance-{id}")]);
    assert!(!xml.contains("<interface"), "networks none: no NIC\n{xml}");

    // The lifecycle, each with the domain's real state.
    act(&admin, &id, json!({"os-stop": null})).await;
    settle(&admin, &id, "SHUTOFF").await;
    assert_eq!(domstate(&id), "shut off");
    act(&admin, &id, json!({"os-start": null})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(domstate(&id), "running");
    marker(&admin, &id, 2).await;
    let (_, domid) = virsh(&["domid", &format!("instance-{id}")]);
    act(&admin, &id, json!({"reboot": {"type": "SOFT"}})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(domstate(&id), "running");
    let (_, rebooted) = virsh(&["domid", &format!("instance-{id}")]);
    assert_ne!(domid, rebooted, "a reboot boots the guest again (a new QEMU process)");
    marker(&admin, &id, 3).await;
    act(&admin, &id, json!({"pause": null})).await;
    settle(&admin, &id, "PAUSED").await;
    assert_eq!(domstate(&id), "paused");
    act(&admin, &id, json!({"unpause": null})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(domstate(&id), "running");
    act(&admin, &id, json!({"suspend": null})).await;
    settle(&admin, &id, "SUSPENDED").await;
    assert_eq!(domstate(&id), "shut off");
    let (_, info) = virsh(&["dominfo", &format!("instance-{id}")]);
    assert!(info.lines().any(|l| l.starts_with("Managed save:") && l.ends_with("yes")), "{info}");
    act(&admin, &id, json!({"resume": null})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(domstate(&id), "running");

    // The agent killed and restarted: the guest runs on, the same QEMU
    // process; the new agent answers for it; an operator's trait on the
    // provider survives.
    assert_eq!(placement.call("PUT", "/traits/CUSTOM_OPERATOR_GOLD", None).await.status, 201);
    let traits = placement.get(&format!("/resource_providers/{rp}/traits")).await.body;
    let mut names: Vec<Value> = traits["traits"].as_array().cloned().expect("traits");
    names.push(json!("CUSTOM_OPERATOR_GOLD"));
    let body = json!({"traits": names, "resource_provider_generation": traits["resource_provider_generation"]});
    let put = placement.put(&format!("/resource_providers/{rp}/traits"), &body).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let (_, before) = virsh(&["domid", &format!("instance-{id}")]);
    cloud.kill_agent(0);
    cloud.restart_agent(0).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, after) = virsh(&["domid", &format!("instance-{id}")]);
    assert_eq!(before, after, "the restarted agent left the guest running");
    assert_eq!(settle(&admin, &id, "ACTIVE").await["OS-EXT-SRV-ATTR:host"], host.as_str());
    assert!(console(&admin, &id).await.contains(&format!("uuid={id}")));
    let traits = placement.get(&format!("/resource_providers/{rp}/traits")).await.body;
    assert!(traits["traits"].as_array().expect("traits").contains(&json!("CUSTOM_OPERATOR_GOLD")), "{traits}");
    assert!(traits["traits"].as_array().expect("traits").contains(&json!("HW_ARCH_X86_64")), "{traits}");

    // Behind berth's back: a guest destroyed shows SHUTOFF; started
    // again, it is stopped again (Nova's power-state sync).
    assert!(virsh(&["destroy", &format!("instance-{id}")]).0);
    settle(&admin, &id, "SHUTOFF").await;
    assert!(virsh(&["start", &format!("instance-{id}")]).0);
    let deadline = Instant::now() + Duration::from_secs(240);
    while domstate(&id) != "shut off" {
        assert!(Instant::now() < deadline, "the guest started behind berth's back was never stopped again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    settle(&admin, &id, "SHUTOFF").await;

    // Its domain lost (undefined behind berth's back, its directory handed
    // over as by a move that failed on this source): a hard reboot makes
    // the domain again from its disks and boots it, as Nova's.
    let boots = console(&admin, &id).await.lines().filter(|l| l.starts_with("BERTH-GUEST-UP")).count();
    assert!(virsh(&["undefine", &format!("instance-{id}")]).0);
    std::fs::rename(instances.join(&id), instances.join(format!("{id}_resize"))).expect("hand the directory over");
    act(&admin, &id, json!({"reboot": {"type": "HARD"}})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(domstate(&id), "running");
    assert!(instances.join(&id).join("disk").exists() && !instances.join(format!("{id}_resize")).exists());
    assert_eq!(marker(&admin, &id, boots + 1).await, format!("BERTH-GUEST-UP uuid={id} key={fingerprint}"));

    // A guest that powers itself off shows SHUTOFF within one sync. It
    // has a network (`auto`): one virtio NIC, on which QEMU's user-mode
    // network gives it an address.
    let user_data = "cG93ZXJvZmYtYWZ0ZXI9MQo="; // "poweroff-after=1\n"
    let boot = admin
        .post(
            "/servers",
            &json!({"server": {"name": "real-2", "flavorRef": flavor, "imageRef": image, "user_data": user_data,
                               "networks": "auto"}}),
        )
        .await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    let id2 = boot.body["server"]["id"].as_str().expect("id").to_owned();
    let warm = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(240);
    while domstate(&id2) != "shut off"
        || admin.get(&format!("/servers/{id2}")).await.body["server"]["status"] == "BUILD"
    {
        assert!(Instant::now() < deadline, "guest {id2} never powered itself off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("libvirt guest {id2}: powered itself off {:?} after its boot request (warm image cache)", warm.elapsed());
    let off = Instant::now();
    settle(&admin, &id2, "SHUTOFF").await;
    assert!(off.elapsed() < Duration::from_secs(4), "SHUTOFF {:?} after the guest powered off", off.elapsed());
    let log = console(&admin, &id2).await;
    assert!(log.contains("powering off by itself"), "{log}");
    let (_, xml) = virsh(&["dumpxml", &format!("instance-{id2}")]);
    assert_eq!(xml.matches("<interface type='user'>").count(), 1, "{xml}");
    assert!(xml.contains("<model type='virtio'/>"), "{xml}");
    let mac = xml
        .split("<mac address='")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the NIC's MAC address")
        .to_owned();
    assert!(mac.starts_with("fa:16:3e:"), "{mac}");
    assert!(log.contains(&format!("BERTH-GUEST-NET eth0={mac}/10.0.2.15")), "the guest's NIC and its address: {log}");

    // Delete: no domain, no disk, no config drive; only the image cache.
    for server in [&id, &id2] {
        assert_eq!(admin.delete(&format!("/servers/{server}")).await.status, 204);
    }
    for server in [&id, &id2] {
        wait_gone(&admin, server).await;
        assert!(!virsh(&["dominfo", &format!("instance-{server}")]).0, "domain of {server} left");
        assert!(!instances.join(server).exists(), "files of {server} left");
    }
    let left: Vec<String> = std::fs::read_dir(&instances)
        .expect("instances")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["_base"], "only the image cache stays");
    assert!(instances.join("_base").join(&image).exists());
    cloud.check_invariants().await;
}

/// QEMU processes of the domain (`-name guest=instance-{id}`).
fn qemu_processes(id: &str) -> usize {
    let out = Command::new("pgrep").args(["-f", &format!("guest=instance-{id}")]).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// `kill -9` of the agent while five builds (on q35) are under way:
/// after its restart every server is ACTIVE with exactly one domain, one
/// QEMU process and one boot (one marker line), none spawned twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_finishes_its_builds_once_after_restart() {
    const BUILDS: usize = 5;
    if let Some(reason) = unavailable() {
        eprintln!("SKIPPED a_killed_agent_finishes_its_builds_once_after_restart: {reason}");
        return;
    }
    let (mut cloud, instances, host, _domains) = libvirt_cloud("lvkill").await;
    let admin = cloud.nova("admin").at("2.79");
    // On q35 (no IDE): the config drive on the default virtio-scsi cdrom,
    // which the guest's kernel sees (it has no AHCI for SATA).
    let guest = guest_image(&cloud.server.base);
    let image = guest_variant(&cloud.server.base, &guest, json!({"hw_machine_type": "q35"}), 1 << 20).await;
    let flavor = admin.flavor("guest", 1, 128, 1).await;
    let mut ids = Vec::new();
    for i in 0..BUILDS {
        let boot = admin
            .post(
                "/servers",
                &json!({"server": {"name": format!("k-{i}"), "flavorRef": flavor, "imageRef": image,
                                   "networks": "none"}}),
            )
            .await;
        assert_eq!(boot.status, 202, "{:?}", boot.body);
        ids.push(boot.body["server"]["id"].as_str().expect("id").to_owned());
    }
    // Killed once the host is defining the first guest (its domain XML
    // written), the others at most that far: some defined or booting,
    // some not yet started.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ids.iter().any(|id| instances.join(id).join("libvirt.xml").exists()) {
        assert!(Instant::now() < deadline, "the agent never started the builds");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cloud.kill_agent(0);
    let defined_before = ids.iter().filter(|id| virsh(&["dominfo", &format!("instance-{id}")]).0).count();
    let mut active_before = 0;
    for id in &ids {
        if admin.get(&format!("/servers/{id}")).await.body["server"]["status"] == "ACTIVE" {
            active_before += 1;
        }
    }
    cloud.restart_agent(0).await;
    for id in &ids {
        let server = settle(&admin, id, "ACTIVE").await;
        assert_eq!(server["OS-EXT-SRV-ATTR:host"], host.as_str());
        assert_eq!(marker(&admin, id, 1).await, format!("BERTH-GUEST-UP uuid={id} key=none"));
    }
    // Settled: one domain, one QEMU process and one boot each.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in &ids {
        assert_eq!(domstate(id), "running");
        assert_eq!(qemu_processes(id), 1, "QEMU processes of {id}");
        let (_, xml) = virsh(&["dumpxml", &format!("instance-{id}")]);
        assert!(xml.contains("machine='pc-q35") && xml.contains("bus='scsi'"), "{xml}");
        let boots = console(&admin, id).await.lines().filter(|l| l.starts_with("BERTH-GUEST-UP")).count();
        assert_eq!(boots, 1, "{id} booted {boots} times");
    }
    eprintln!(
        "killed the agent with {active_before} of {BUILDS} builds ACTIVE and {defined_before} defined; \
         all {BUILDS} ACTIVE once after its restart"
    );

    // A server deleted while its host's agent is gone (its service forced
    // down: a local delete) leaves its guest running. The agent back
    // reports it and, by default (`log`), leaves it alone; with `reap`
    // it destroys and removes it (Nova's running_deleted_instance_action).
    let gone = ids.remove(0);
    cloud.kill_agent(0);
    force_down(&admin, &host, true).await;
    assert_eq!(admin.delete(&format!("/servers/{gone}")).await.status, 204);
    wait_gone(&admin, &gone).await;
    force_down(&admin, &host, false).await;
    assert_eq!(domstate(&gone), "running", "the deleted server's guest still runs");
    let log = instances.with_file_name("agent.log");
    cloud.set_agent_log(0, &log);
    cloud.restart_agent(0).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let warned = |log: &Path| std::fs::read_to_string(log).unwrap_or_default().contains(&gone);
    while !warned(&log) {
        assert!(Instant::now() < deadline, "the agent never reported the deleted server's guest");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("whose server was deleted"), "{text}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(domstate(&gone), "running", "log: reported, not killed");
    cloud.kill_agent(0);
    cloud.add_agent_args(0, &["--running-deleted-instance-action", "reap"]);
    cloud.restart_agent(0).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while virsh(&["dominfo", &format!("instance-{gone}")]).0 || instances.join(&gone).exists() {
        assert!(Instant::now() < deadline, "reap never removed the deleted server's guest");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &ids {
        assert_eq!(domstate(id), "running", "the live servers' guests are left alone");
    }
    for id in &ids {
        assert_eq!(admin.delete(&format!("/servers/{id}")).await.status, 204);
    }
    for id in &ids {
        wait_gone(&admin, id).await;
        assert!(!virsh(&["dominfo", &format!("instance-{id}")]).0, "domain of {id} left");
    }
    cloud.check_invariants().await;
}

/// `qemu-img info`'s virtual size of `path`, in bytes.
fn virtual_size(path: &Path) -> u64 {
    let out = Command::new("qemu-img").args(["info", "-U", "--output=json"]).arg(path).output().expect("qemu-img");
    let info: Value = serde_json::from_slice(&out.stdout).expect("qemu-img info json");
    info["virtual-size"].as_u64().expect("virtual-size")
}

/// The sources of the domain's disks, in order (`virsh domblklist`).
fn disks_of(id: &str) -> Vec<String> {
    let (_, list) = virsh(&["domblklist", &format!("instance-{id}")]);
    list.lines().skip(2).filter_map(|l| l.split_whitespace().nth(1)).map(str::to_owned).collect()
}

/// The peak resident memory (`VmHWM`) of process `pid`, in KiB.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

/// Wait (bounded) for image `id` to be `active`; its record.
async fn image_active(nova: &Nova, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let image = nova.image_get(&format!("/images/{id}")).await.body;
        if image["status"] == "active" {
            return image;
        }
        assert!(Instant::now() < deadline, "image {id} never became active: {image}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The size and sha512 of image `id`'s data, read in chunks.
async fn image_data(base: &str, id: &str) -> (u64, String) {
    use sha2::{Digest, Sha512};
    let mut resp = crate::support::http_client()
        .get(format!("{base}/image/v2/images/{id}/file"))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("image download");
    assert_eq!(resp.status().as_u16(), 200);
    let (mut size, mut hash) = (0u64, Sha512::new());
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        size += chunk.len() as u64;
        hash.update(&chunk);
    }
    (size, hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// A real guest with the flavor's ephemeral and swap disks (qcow2 files
/// after the root disk, gone with the server); its snapshot streamed to
/// the image API (a 64 MiB disk through an agent whose peak RSS stays
/// below that: it never holds the disk) with the size and checksum of its
/// data, and a guest booted from that snapshot; rescue (the image's fresh
/// disk first, the guest's own second, a new boot) and unrescue (its own
/// disks again); shelve (the `-shelved` image, nothing left on the host
/// once offloaded) and unshelve (the guest boots again from that image).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_guests_snapshot_rescue_shelve_and_carry_flavor_disks() {
    if let Some(reason) = unavailable() {
        eprintln!("SKIPPED real_guests_snapshot_rescue_shelve_and_carry_flavor_disks: {reason}");
        return;
    }
    let (cloud, instances, host, _domains) = libvirt_cloud("lvlife").await;
    let admin = cloud.nova("admin").at("2.79");
    let base = cloud.server.base.clone();
    let guest = guest_image(&base);
    // A 64 MiB root disk (the flavor's disk 0: the image's size).
    const DISK: u64 = 64 << 20;
    let image = guest_variant(&base, &guest, json!({}), DISK as usize).await;
    let with_disks = admin
        .post(
            "/flavors",
            &json!({"flavor": {"name": "guest-disks", "vcpus": 1, "ram": 128, "disk": 0,
                               "OS-FLV-EXT-DATA:ephemeral": 1, "swap": 64}}),
        )
        .await;
    assert_eq!(with_disks.status, 200, "{:?}", with_disks.body);
    let with_disks = with_disks.body["flavor"]["id"].as_str().expect("flavor").to_owned();
    let boot = admin
        .post(
            "/servers",
            &json!({"server": {"name": "life-1", "flavorRef": with_disks, "imageRef": image, "networks": "none"}}),
        )
        .await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    let id = boot.body["server"]["id"].as_str().expect("id").to_owned();
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(marker(&admin, &id, 1).await, format!("BERTH-GUEST-UP uuid={id} key=none"));

    // Ephemeral (GiB) and swap (MiB) disks after the root disk.
    let dir = instances.join(&id);
    let own_disks: Vec<String> = ["disk", "disk.local", "disk.swap", "disk.config"]
        .iter()
        .map(|d| dir.join(d).to_string_lossy().into_owned())
        .collect();
    assert_eq!(disks_of(&id), own_disks);
    assert_eq!(virtual_size(&dir.join("disk.local")), 1 << 30);
    assert_eq!(virtual_size(&dir.join("disk.swap")), 64 << 20);
    assert_eq!(virtual_size(&dir.join("disk")), DISK);

    // A snapshot of the running guest: its root disk streamed.
    let taken = admin.post(&format!("/servers/{id}/action"), &json!({"createImage": {"name": "life-snap"}})).await;
    assert_eq!(taken.status, 202, "{:?}", taken.body);
    let snap = taken.body["image_id"].as_str().expect("image_id").to_owned();
    let started = Instant::now();
    let record = image_active(&admin, &snap).await;
    settle(&admin, &id, "ACTIVE").await;
    eprintln!("libvirt snapshot of {id}: active after {:?}", started.elapsed());
    assert_eq!(record["size"], DISK, "{record}");
    let (size, sha512) = image_data(&base, &snap).await;
    assert_eq!((size, sha512.as_str()), (DISK, record["os_hash_value"].as_str().expect("os_hash_value")));
    let peak = peak_rss_kb(cloud.agent_pid(0));
    eprintln!("agent peak RSS after streaming a {} MiB snapshot: {peak} KiB", DISK >> 20);
    assert!(peak < DISK / 1024, "the agent held the disk: peak RSS {peak} KiB");
    assert!(!dir.read_dir().expect("dir").flatten().any(|e| e.file_name().to_string_lossy().starts_with("snapshot")));

    // A guest booted from the snapshot.
    let flavor = admin.flavor("guest", 1, 128, 1).await;
    let boot = admin
        .post(
            "/servers",
            &json!({"server": {"name": "from-snap", "flavorRef": flavor, "imageRef": snap, "networks": "none"}}),
        )
        .await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    let from_snap = boot.body["server"]["id"].as_str().expect("id").to_owned();
    settle(&admin, &from_snap, "ACTIVE").await;
    assert_eq!(marker(&admin, &from_snap, 1).await, format!("BERTH-GUEST-UP uuid={from_snap} key=none"));
    assert_eq!(admin.delete(&format!("/servers/{from_snap}")).await.status, 204);

    // Rescue: the image's fresh disk first, the guest's own disk second
    // (vdb: 64 MiB, 131072 sectors, where its ephemeral disk of 1 GiB
    // was); a new boot on the console.
    let rescued = admin.post(&format!("/servers/{id}/action"), &json!({"rescue": null})).await;
    assert_eq!(rescued.status, 200, "{:?}", rescued.body);
    settle(&admin, &id, "RESCUE").await;
    assert_eq!(domstate(&id), "running");
    let rescue_disks = [dir.join("disk.rescue").to_string_lossy().into_owned(), own_disks[0].clone()];
    assert_eq!(disks_of(&id)[..2], rescue_disks[..]);
    assert_eq!(marker(&admin, &id, 2).await, format!("BERTH-GUEST-UP uuid={id} key=none"));
    let log = console(&admin, &id).await;
    assert!(log.contains("[vdb] 2097152 512-byte logical blocks"), "no ephemeral disk on the console:\n{log}");
    assert!(log.contains("[vdb] 131072 512-byte logical blocks"), "no rescue boot on the console:\n{log}");
    act(&admin, &id, json!({"unrescue": null})).await;
    settle(&admin, &id, "ACTIVE").await;
    assert_eq!(disks_of(&id), own_disks);
    assert!(!dir.join("disk.rescue").exists());
    marker(&admin, &id, 3).await;

    // Shelve: the snapshot image, then (offloaded at once) nothing of the
    // guest on the host; unshelve boots it from that image.
    act(&admin, &id, json!({"shelve": null})).await;
    settle(&admin, &id, "SHELVED_OFFLOADED").await;
    let shelved = admin.image_get("/images?name=life-1-shelved").await.body["images"][0].clone();
    assert_eq!(shelved["status"], "active", "{shelved}");
    assert_eq!(shelved["size"], DISK, "{shelved}");
    assert!(!virsh(&["dominfo", &format!("instance-{id}")]).0, "domain of the offloaded {id} left");
    assert!(!dir.exists(), "files of the offloaded {id} left");
    act(&admin, &id, json!({"unshelve": null})).await;
    let server = settle(&admin, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], host.as_str());
    assert_eq!(domstate(&id), "running");
    assert_eq!(marker(&admin, &id, 1).await, format!("BERTH-GUEST-UP uuid={id} key=none"));
    assert_eq!(disks_of(&id), own_disks);
    let out = Command::new("qemu-img").args(["info", "-U", "--output=json"]).arg(dir.join("disk")).output();
    let info: Value = serde_json::from_slice(&out.expect("qemu-img").stdout).expect("qemu-img info json");
    let backing = info["backing-filename"].as_str().expect("backing file").to_owned();
    assert!(backing.ends_with(&format!("_base/{}", shelved["id"].as_str().expect("id"))), "{backing}");

    // Delete: the domain, the root, ephemeral and swap disks go.
    assert_eq!(admin.delete(&format!("/servers/{id}")).await.status, 204);
    for server in [&id, &from_snap] {
        wait_gone(&admin, server).await;
        assert!(!virsh(&["dominfo", &format!("instance-{server}")]).0, "domain of {server} left");
        assert!(!instances.join(server).exists(), "files of {server} left");
    }
    cloud.check_invariants().await;
}
