//! Real guests (QEMU under TCG, through the machine's libvirtd) moving
//! between two `berth agent --driver libvirt` hosts on this machine: each
//! agent has its own instances path, its own loopback IP (`--my-ip`) and
//! its host's agent credential (no admin identity), and both share the
//! libvirt daemon, each seeing only its own domains (their titles).
//!
//! Cold migration, resize, confirm and revert: the root and ephemeral
//! disks go from the source's agent to the destination's over the disk
//! transfer (the move's secret), the guest boots again on the destination
//! (its marker on the console there), confirm removes the source's copy,
//! revert brings the guest back on the source with its old flavor; a
//! stopped guest's ephemeral data is read on its destination. Evacuation: the source's
//! agent killed and its guest gone, the server is rebuilt from its image
//! on the other host; the source, back, removes its leftovers and leaves
//! the destination's domain alone. Skipped, with the reason, where
//! libvirt is not available.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::libvirt::{
    act, agent_credential, console, domstate, force_down, guest_image, marker, settle, unavailable, virsh,
};
use super::support::{wait_gone, Cloud, Hosts, Nova};

/// Destroys and undefines the domains of the test's servers however the
/// test ends.
struct Guests(Vec<String>);

impl Drop for Guests {
    fn drop(&mut self) {
        for id in &self.0 {
            let name = format!("instance-{id}");
            let _ = virsh(&["destroy", &name]);
            let _ = virsh(&["undefine", "--managed-save", &name]);
        }
    }
}

/// One libvirt host of the test.
struct LvHost {
    name: String,
    instances: PathBuf,
}

/// A server and two libvirt agents (`{tag}a0`, `{tag}b0`) on this
/// machine, with loopback IPs of their own and one disk transfer port.
async fn two_hosts(tag: &str) -> (Cloud, Vec<LvHost>) {
    let mut cloud = Cloud::start(tag, &[]).await;
    // 127.X.Y.1 and .2: X and Y from the process and the tag, so that
    // tests running at once have their own addresses.
    let seed = std::process::id() as usize + tag.bytes().map(usize::from).sum::<usize>();
    let (x, y) = (1 + seed % 250, 1 + (seed / 250) % 250);
    let probe = std::net::TcpListener::bind(format!("127.{x}.{y}.1:0")).expect("a free port");
    let port = probe.local_addr().expect("port").port().to_string();
    drop(probe);
    let mut hosts = Vec::new();
    for (i, side) in ["a", "b"].into_iter().enumerate() {
        let prefix = format!("lv{tag}{}{side}-", std::process::id());
        let name = format!("{prefix}0");
        let instances = cloud.server.dir.join(format!("instances-{side}"));
        let credential = agent_credential(&cloud, &name).await;
        let ip = format!("127.{x}.{y}.{}", i + 1);
        let args = [
            "--driver",
            "libvirt",
            "--virt-type",
            "qemu",
            "--libvirt-uri",
            super::libvirt::URI,
            "--credential-file",
            credential.to_str().expect("path"),
            "--instances-path",
            instances.to_str().expect("path"),
            "--host",
            &name,
            "--my-ip",
            &ip,
            "--migration-port",
            &port,
            "--sync-interval-secs",
            "1",
            "--shutdown-timeout-secs",
            "20",
        ];
        cloud.add_agent(Hosts::new(&prefix, 1, &args)).await;
        hosts.push(LvHost { name, instances });
    }
    (cloud, hosts)
}

/// The domain's title (`berth-host=...`), empty without one.
fn title(id: &str) -> String {
    virsh(&["desc", "--title", &format!("instance-{id}")]).1
}

/// Wait (bounded) until `check` holds; `what` names it in the failure.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Markers on the server's console now (its host's log).
async fn markers(nova: &Nova, id: &str) -> usize {
    console(nova, id).await.lines().filter(|l| l.starts_with("BERTH-GUEST-UP")).count()
}

fn host_of(server: &Value) -> String {
    server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned()
}

/// The virtual size of a qcow2 disk in bytes.
fn virtual_size(disk: &Path) -> u64 {
    let out = Command::new("qemu-img")
        .args(["info", "-U", "--output=json", disk.to_str().expect("path")])
        .output()
        .expect("qemu-img");
    let info: Value = serde_json::from_slice(&out.stdout).expect("qemu-img info json");
    info["virtual-size"].as_u64().expect("virtual-size")
}

/// A flavor of 1 vCPU with an ephemeral disk (GiB); its id.
async fn flavor_with_ephemeral(nova: &Nova, name: &str, ram: i64, disk: i64, ephemeral: i64) -> String {
    let body = json!({"flavor": {"name": name, "vcpus": 1, "ram": ram, "disk": disk,
                                 "OS-FLV-EXT-DATA:ephemeral": ephemeral}});
    let answer = nova.post("/flavors", &body).await;
    assert_eq!(answer.status, 200, "create flavor: {:?}", answer.body);
    answer.body["flavor"]["id"].as_str().expect("flavor id").to_owned()
}

async fn boot_with_key(nova: &Nova, name: &str, flavor: &str, image: &str) -> (String, String) {
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test@berth";
    let pair = nova.post("/os-keypairs", &json!({"keypair": {"name": format!("k-{name}"), "public_key": key}})).await;
    assert_eq!(pair.status, 201, "{:?}", pair.body);
    let fingerprint = pair.body["keypair"]["fingerprint"].as_str().expect("fingerprint").to_owned();
    let boot = nova
        .post(
            "/servers",
            &json!({"server": {"name": name, "flavorRef": flavor, "imageRef": image,
                               "key_name": format!("k-{name}"), "networks": "none"}}),
        )
        .await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
    (boot.body["server"]["id"].as_str().expect("id").to_owned(), fingerprint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_migration_and_resize_move_real_guests_between_two_agents() {
    if let Some(reason) = unavailable() {
        eprintln!("SKIPPED cold_migration_and_resize_move_real_guests_between_two_agents: {reason}");
        return;
    }
    let (cloud, hosts) = two_hosts("lvmove").await;
    let admin = cloud.nova("admin").at("2.79");
    let image = guest_image(&cloud.server.base);
    // Each with an ephemeral disk, whose data travels with the guest.
    let small = flavor_with_ephemeral(&admin, "guest", 128, 1, 1).await;
    let big = flavor_with_ephemeral(&admin, "guest-big", 192, 2, 2).await;
    let (id, fingerprint) = boot_with_key(&admin, "mover", &small, &image).await;
    let _guests = Guests(vec![id.clone()]);
    let first = host_of(&settle(&admin, &id, "ACTIVE").await);
    let want = format!("BERTH-GUEST-UP uuid={id} key={fingerprint}");
    assert_eq!(marker(&admin, &id, 1).await, want);
    let at = |name: &str| hosts.iter().find(|h| h.name == name).expect("one of the two hosts");
    let other = |name: &str| hosts.iter().find(|h| h.name != name).expect("the other host");
    assert_eq!(title(&id), format!("berth-host={first}"));

    // Cold migration: the guest boots on the other host from the disk
    // the source handed over; the source keeps its copy until confirmed.
    let started = Instant::now();
    act(&admin, &id, json!({"migrate": null})).await;
    let server = settle(&admin, &id, "VERIFY_RESIZE").await;
    let second = host_of(&server);
    assert_eq!(second, other(&first).name, "{server}");
    let line = marker(&admin, &id, 1).await;
    eprintln!("cold migration {first} -> {second}: marker after {:?}", started.elapsed());
    assert_eq!(line, want, "the guest booted on the destination with its config drive");
    assert_eq!(domstate(&id), "running");
    assert_eq!(title(&id), format!("berth-host={second}"), "the domain is the destination's");
    assert!(at(&second).instances.join(&id).join("disk").exists());
    let handed = at(&first).instances.join(format!("{id}_resize"));
    assert!(handed.join("disk").exists() && !at(&first).instances.join(&id).exists());
    // The handed-over disk is served only to whoever shows the secret.
    let secret = std::fs::read_to_string(handed.join("transfer-token")).expect("the move's secret");
    assert!(secret.trim().len() >= 32);

    let confirmed = admin.post(&format!("/servers/{id}/action"), &json!({"confirmResize": null})).await;
    assert_eq!(confirmed.status, 204, "{:?}", confirmed.body);
    settle(&admin, &id, "ACTIVE").await;
    until("the source's copy removed at confirm", || !handed.exists()).await;
    assert_eq!(domstate(&id), "running");

    // Resize back to the first host (the only other one) to a bigger
    // flavor: more memory, a bigger root disk; then revert.
    act(&admin, &id, json!({"resize": {"flavorRef": big}})).await;
    let server = settle(&admin, &id, "VERIFY_RESIZE").await;
    assert_eq!(host_of(&server), first);
    assert_eq!(server["flavor"]["ram"], 192, "{server}");
    assert_eq!(marker(&admin, &id, 1).await, want);
    let (_, xml) = virsh(&["dumpxml", &format!("instance-{id}")]);
    assert!(xml.contains("<memory unit='KiB'>196608</memory>"), "{xml}");
    assert_eq!(title(&id), format!("berth-host={first}"));
    assert_eq!(virtual_size(&at(&first).instances.join(&id).join("disk")), 2 << 30, "the root disk grew");
    assert_eq!(virtual_size(&at(&first).instances.join(&id).join("disk.local")), 2 << 30, "the ephemeral disk grew");

    act(&admin, &id, json!({"revertResize": null})).await;
    let server = settle(&admin, &id, "ACTIVE").await;
    assert_eq!(host_of(&server), second);
    assert_eq!(server["flavor"]["ram"], 128, "{server}");
    // Back on the second host: its own console log, with the boot before
    // the resize and the one after the revert.
    let line = marker(&admin, &id, 2).await;
    assert_eq!(line, want);
    until("the reverted guest runs on the source", || {
        domstate(&id) == "running" && title(&id) == format!("berth-host={second}")
    })
    .await;
    let (_, xml) = virsh(&["dumpxml", &format!("instance-{id}")]);
    assert!(xml.contains("<memory unit='KiB'>131072</memory>"), "{xml}");
    until("the destination's copy removed at revert", || !at(&first).instances.join(&id).exists()).await;
    assert!(!at(&second).instances.join(format!("{id}_resize")).exists());
    assert_eq!(markers(&admin, &id).await, 2);
    assert_eq!(virtual_size(&at(&second).instances.join(&id).join("disk.local")), 1 << 30, "its own ephemeral disk");

    // A stopped guest's ephemeral data moves with it (and it stays
    // stopped): a pattern written on the source is read on the
    // destination.
    act(&admin, &id, json!({"os-stop": null})).await;
    settle(&admin, &id, "SHUTOFF").await;
    let pattern = |host: &LvHost, verb: &str| {
        let path = host.instances.join(&id).join("disk.local");
        let out = Command::new("qemu-io")
            .args(["-f", "qcow2", "-c", &format!("{verb} -P 0x5a 1M 64k"), path.to_str().expect("path")])
            .output()
            .expect("qemu-io");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        out.status.success() && !text.contains("Pattern verification failed") && !text.contains("error")
    };
    assert!(pattern(at(&second), "write"), "pattern written on the source");
    act(&admin, &id, json!({"migrate": null})).await;
    let server = settle(&admin, &id, "VERIFY_RESIZE").await;
    assert_eq!(host_of(&server), first);
    assert_eq!(domstate(&id), "shut off", "a stopped guest stays stopped");
    assert!(pattern(at(&first), "read"), "the ephemeral data arrived");
    let confirmed = admin.post(&format!("/servers/{id}/action"), &json!({"confirmResize": null})).await;
    assert_eq!(confirmed.status, 204, "{:?}", confirmed.body);
    settle(&admin, &id, "SHUTOFF").await;
    until("the source's copy removed at confirm", || !at(&second).instances.join(format!("{id}_resize")).exists())
        .await;

    assert_eq!(admin.delete(&format!("/servers/{id}")).await.status, 204);
    wait_gone(&admin, &id).await;
    assert!(!virsh(&["dominfo", &format!("instance-{id}")]).0, "domain of {id} left");
    for host in &hosts {
        let left: Vec<String> = std::fs::read_dir(&host.instances)
            .expect("instances")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["_base"], "only the image cache stays on {}", host.name);
    }
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evacuate_rebuilds_a_real_guest_from_its_image_after_its_host_is_gone() {
    if let Some(reason) = unavailable() {
        eprintln!("SKIPPED evacuate_rebuilds_a_real_guest_from_its_image_after_its_host_is_gone: {reason}");
        return;
    }
    let (mut cloud, hosts) = two_hosts("lvevac").await;
    let admin = cloud.nova("admin").at("2.79");
    let image = guest_image(&cloud.server.base);
    let flavor = admin.flavor("guest", 1, 128, 1).await;
    let (id, fingerprint) = boot_with_key(&admin, "evacuee", &flavor, &image).await;
    let _guests = Guests(vec![id.clone()]);
    let source = host_of(&settle(&admin, &id, "ACTIVE").await);
    let want = format!("BERTH-GUEST-UP uuid={id} key={fingerprint}");
    assert_eq!(marker(&admin, &id, 1).await, want);
    let index = hosts.iter().position(|h| h.name == source).expect("a host of the test");
    let dest = hosts[1 - index].name.clone();

    // The source host dies: its agent killed, its guest gone with it.
    cloud.kill_agent(index);
    assert!(virsh(&["destroy", &format!("instance-{id}")]).0);
    force_down(&admin, &source, true).await;
    let started = Instant::now();
    let answer = admin.at("2.29").post(&format!("/servers/{id}/action"), &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let server = settle(&admin, &id, "ACTIVE").await;
    assert_eq!(host_of(&server), dest);
    let line = marker(&admin, &id, 1).await;
    eprintln!("evacuation {source} -> {dest}: marker after {:?}", started.elapsed());
    assert_eq!(line, want, "rebuilt from the image with its key");
    assert_eq!(domstate(&id), "running");
    assert_eq!(title(&id), format!("berth-host={dest}"));
    assert!(hosts[1 - index].instances.join(&id).join("disk").exists());

    // The source comes back: it removes what it had of the guest and
    // leaves the destination's domain alone.
    force_down(&admin, &source, false).await;
    cloud.restart_agent(index).await;
    let leftovers = hosts[index].instances.join(&id);
    until("the source's leftovers removed", || !leftovers.exists()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(domstate(&id), "running", "the destination's guest runs on");
    let server = settle(&admin, &id, "ACTIVE").await;
    assert_eq!(host_of(&server), dest);

    assert_eq!(admin.delete(&format!("/servers/{id}")).await.status, 204);
    wait_gone(&admin, &id).await;
    assert!(!virsh(&["dominfo", &format!("instance-{id}")]).0, "domain of {id} left");
    cloud.check_invariants().await;
}
