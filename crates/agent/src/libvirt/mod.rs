//! The libvirt driver: real QEMU guests through libvirt, as Nova's
//! libvirt driver runs them. It drives libvirt through `virsh` (and
//! disks through `qemu-img`, config drives through `genisoimage`): no
//! libvirt development files at build time, so every build of berth
//! has the driver, and the daemon it talks to is named by `--libvirt-uri`
//! exactly as virsh names it (see docs/OPERATING.md, "Running real
//! guests", for the choice).
//!
//! Layout under the instances path: `_base/{image}` holds each image's
//! bytes, fetched once from the image API and checked against its
//! `os_hash_value` (sha512); `{uuid}/disk` is the guest's qcow2 overlay
//! on it, `{uuid}/disk.config` its config drive, `{uuid}/console.log`
//! its serial console. Domains are named `instance-{uuid}` and carry the
//! instance's uuid.

pub mod build;
pub mod host;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha512};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::driver::{DiskImage, Driver, DriverFuture, Guest, GuestPower, TaskRef};
use crate::Link;
use build::DomainSpec;

/// How the libvirt driver is set up (`berth agent --driver libvirt`).
#[derive(Debug, Clone)]
pub struct LibvirtConfig {
    /// libvirt connection URI (`qemu:///system`).
    pub uri: String,
    /// Domain type: `kvm` or `qemu` (TCG).
    pub virt_type: String,
    /// Where disks, config drives, console logs and the image cache live.
    pub instances_path: PathBuf,
    /// The host this agent is.
    pub host: String,
    /// How long a clean shutdown may take before the guest is destroyed
    /// (Nova's `shutdown_timeout`).
    pub shutdown_timeout: Duration,
}

/// The libvirt driver of one host.
#[derive(Debug)]
pub struct LibvirtDriver {
    config: LibvirtConfig,
    link: Link,
    /// One lock per image being fetched into the cache.
    fetches: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// An AMI-style image's kernel, ramdisk and kernel command line.
type Kernel = Option<(String, Option<String>, String)>;

/// The domain name of an instance.
fn domain(instance: &str) -> String {
    format!("instance-{instance}")
}

async fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().await.map_err(|e| format!("running {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> String + 'a {
    move |e| format!("{what} {}: {e}", path.display())
}

impl LibvirtDriver {
    /// A driver for `config` that reads servers and images through
    /// `link`. Fails when libvirt does not answer at the URI or the
    /// instances path cannot be made.
    pub fn new(config: LibvirtConfig, link: Link) -> anyhow::Result<Self> {
        std::fs::create_dir_all(config.instances_path.join("_base"))?;
        let out = std::process::Command::new("virsh").args(["-c", &config.uri, "version"]).output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => anyhow::bail!(
                "libvirt does not answer at {}: {} (is libvirtd running?)",
                config.uri,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(err) => anyhow::bail!("running virsh: {err} (install libvirt-clients)"),
        }
        Ok(LibvirtDriver { config, link, fetches: tokio::sync::Mutex::default() })
    }

    async fn virsh(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-c", self.config.uri.as_str()];
        all.extend_from_slice(args);
        run("virsh", &all).await
    }

    /// The domain's state (`running`, `shut off`, `paused`, ...); `None`
    /// when there is no such domain.
    async fn state(&self, instance: &str) -> Result<Option<String>, String> {
        match self.virsh(&["domstate", &domain(instance)]).await {
            Ok(state) => Ok(Some(state.trim().to_owned())),
            Err(err) if err.contains("failed to get domain") || err.contains("Domain not found") => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Wait up to `timeout` for the domain to be in `want`.
    async fn wait_for(&self, instance: &str, want: &str, timeout: Duration) -> Result<bool, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.state(instance).await?.as_deref() == Some(want) {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn dir(&self, instance: &str) -> PathBuf {
        self.config.instances_path.join(instance)
    }

    /// A JSON document of the control plane.
    async fn read_json(&self, path: &str, headers: &[(&str, &str)]) -> Result<Value, String> {
        let resp =
            self.link.get(path, headers, Duration::from_secs(60)).await.map_err(|e| format!("GET {path}: {e}"))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| format!("GET {path}: {e}"))?;
        if !status.is_success() {
            return Err(format!("GET {path}: HTTP {status}: {}", String::from_utf8_lossy(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}"))
    }

    /// The image `id`'s bytes in the cache, fetched once and checked
    /// against its sha512 `os_hash_value`.
    async fn cached(&self, id: &str) -> Result<(PathBuf, Value), String> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(format!("Image {id} is not an image id"));
        }
        let meta = self.read_json(&format!("/image/v2/images/{id}"), &[]).await?;
        let path = self.config.instances_path.join("_base").join(id);
        let lock = self.fetches.lock().await.entry(id.to_owned()).or_default().clone();
        let _held = lock.lock().await;
        if path.exists() {
            return Ok((path, meta));
        }
        if meta["status"].as_str() != Some("active") {
            return Err(format!("Image {id} is not active (status {})", meta["status"]));
        }
        let expected = meta["os_hash_value"].as_str().ok_or_else(|| format!("Image {id} has no os_hash_value"))?;
        let file = format!("/image/v2/images/{id}/file");
        let mut resp =
            self.link.get(&file, &[], Duration::from_secs(3600)).await.map_err(|e| format!("GET {file}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {file}: HTTP {}", resp.status()));
        }
        let part = path.with_extension("part");
        let mut out = tokio::fs::File::create(&part).await.map_err(io("creating", &part))?;
        let mut hasher = Sha512::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {file}: {e}"))? {
            hasher.update(&chunk);
            out.write_all(&chunk).await.map_err(io("writing", &part))?;
        }
        out.sync_all().await.map_err(io("syncing", &part))?;
        let got: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if got != expected {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(format!("Image {id} failed verification: its data's sha512 is not its os_hash_value"));
        }
        tokio::fs::rename(&part, &path).await.map_err(io("renaming", &part))?;
        set_mode(&path, 0o644).await?;
        Ok((path, meta))
    }

    /// The server as the compute API shows it (flavor embedded).
    async fn server(&self, instance: &str) -> Result<Value, String> {
        Ok(self
            .read_json(&format!("/compute/v2.1/servers/{instance}"), &[("X-OpenStack-Nova-API-Version", "2.79")])
            .await?["server"]
            .clone())
    }

    /// An image to boot from, in the cache: its base file, its record and
    /// (AMI style) its kernel, ramdisk and kernel command line.
    async fn boot_image(&self, image_id: &str) -> Result<(PathBuf, Value, Kernel), String> {
        let (base, image) = self.cached(image_id).await?;
        let kernel = match image["kernel_id"].as_str().filter(|k| !k.is_empty()) {
            Some(id) => Some(self.cached(id).await?.0),
            None => None,
        };
        let ramdisk = match image["ramdisk_id"].as_str().filter(|r| !r.is_empty()) {
            Some(id) => Some(self.cached(id).await?.0),
            None => None,
        };
        let kernel = kernel.map(|k| {
            let cmdline = match image["os_command_line"].as_str() {
                Some(extra) => format!("root=/dev/vda console=tty0 console=ttyS0 {extra}"),
                None => "root=/dev/vda console=tty0 console=ttyS0".to_owned(),
            };
            (build::path_text(&k), ramdisk.as_deref().map(build::path_text), cmdline)
        });
        Ok((base, image, kernel))
    }

    /// A qcow2 overlay `disk` on the cached `base` of `image`, `gb` GiB
    /// large (0: the image's own size).
    async fn overlay(base: &Path, image: &Value, disk: &Path, gb: i64) -> Result<(), String> {
        let base_format = if image["disk_format"].as_str() == Some("qcow2") { "qcow2" } else { "raw" };
        let size = format!("{gb}G");
        let (base_text, disk_text) = (build::path_text(base), build::path_text(disk));
        let mut args = vec!["create", "-q", "-f", "qcow2", "-F", base_format, "-b", &base_text, &disk_text];
        if gb > 0 {
            args.push(&size);
        }
        run("qemu-img", &args).await.map(|_| ())
    }

    /// The flavor's ephemeral disk (`disk.local`, GiB) and swap disk
    /// (`disk.swap`, MiB) as blank qcow2 files in `dir`, as Nova's libvirt
    /// driver names them; the paths of those the flavor has.
    async fn flavor_disks(server: &Value, dir: &Path) -> Result<Vec<String>, String> {
        let amount = |key: &str| match &server["flavor"][key] {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => s.parse().unwrap_or(0),
            _ => 0,
        };
        let mut disks = Vec::new();
        for (name, amount, unit) in [("disk.local", amount("ephemeral"), 'G'), ("disk.swap", amount("swap"), 'M')] {
            if amount <= 0 {
                continue;
            }
            let size = format!("{amount}{unit}");
            let path = dir.join(name);
            let text = build::path_text(&path);
            run("qemu-img", &["create", "-q", "-f", "qcow2", &text, &size]).await?;
            disks.push(text);
        }
        Ok(disks)
    }

    /// The domain of `instance` for `server` (its flavor) booting
    /// `disks[0]` of `image`'s buses, with the other disks and the config
    /// drive attached.
    fn domain_spec(
        &self,
        instance: &str,
        server: &Value,
        image: &Value,
        kernel: Kernel,
        mut disks: Vec<String>,
    ) -> DomainSpec {
        let dir = self.dir(instance);
        let (machine, disk_bus, cdrom_bus) = DomainSpec::buses(image);
        let disk = if disks.is_empty() { String::new() } else { disks.remove(0) };
        DomainSpec {
            virt_type: self.config.virt_type.clone(),
            name: domain(instance),
            uuid: instance.to_owned(),
            vcpus: server["flavor"]["vcpus"].as_i64().unwrap_or(1).max(1),
            memory_mb: server["flavor"]["ram"].as_i64().unwrap_or(512).max(16),
            machine,
            disk_bus,
            cdrom_bus,
            disk,
            extra_disks: disks,
            config_drive: build::path_text(&dir.join("disk.config")),
            console_log: build::path_text(&dir.join("console.log")),
            kernel,
        }
    }

    /// Create and boot the guest (no domain exists) from its server's
    /// image, or from `image_id` (an unshelve's snapshot).
    async fn create(&self, task: TaskRef<'_>, image_id: Option<&str>) -> Result<(), String> {
        let instance = task.instance;
        let server = self.server(instance).await?;
        let image_id = match image_id {
            Some(id) => id,
            None => {
                server["image"]["id"].as_str().ok_or("Booting from a volume is not supported by the libvirt driver")?
            }
        };
        let (base, image, kernel) = self.boot_image(image_id).await?;
        let dir = self.dir(instance);
        tokio::fs::create_dir_all(&dir).await.map_err(io("creating", &dir))?;
        set_mode(&dir, 0o755).await?;
        // The root disk: a qcow2 overlay on the cached image, sized to the
        // flavor's root disk (0: the image's own size).
        let disk = dir.join("disk");
        Self::overlay(&base, &image, &disk, server["flavor"]["disk"].as_i64().unwrap_or(0)).await?;
        // Then the flavor's ephemeral and swap disks.
        let mut disks = vec![build::path_text(&disk)];
        disks.extend(Self::flavor_disks(&server, &dir).await?);
        // The config drive.
        let config_drive = dir.join("disk.config");
        self.config_drive(&server, task.body["key_data"].as_str(), &dir, &config_drive).await?;
        let spec = self.domain_spec(instance, &server, &image, kernel, disks);
        let xml = dir.join("libvirt.xml");
        tokio::fs::write(&xml, spec.xml()).await.map_err(io("writing", &xml))?;
        self.virsh(&["define", &build::path_text(&xml)]).await?;
        self.virsh(&["start", &domain(instance)]).await?;
        Ok(())
    }

    /// Write the config drive (ISO 9660, label `config-2`).
    async fn config_drive(&self, server: &Value, key: Option<&str>, dir: &Path, iso: &Path) -> Result<(), String> {
        let tree = dir.join("config-drive");
        let latest = tree.join("openstack").join("latest");
        tokio::fs::create_dir_all(&latest).await.map_err(io("creating", &latest))?;
        let meta = build::meta_data(server, key);
        let meta_path = latest.join("meta_data.json");
        tokio::fs::write(&meta_path, meta.to_string()).await.map_err(io("writing", &meta_path))?;
        if let Some(user_data) = server["OS-EXT-SRV-ATTR:user_data"].as_str() {
            let bytes = build::base64_decode(user_data).ok_or("user data is not base64")?;
            let path = latest.join("user_data");
            tokio::fs::write(&path, bytes).await.map_err(io("writing", &path))?;
        }
        let (iso_text, tree_text) = (build::path_text(iso), build::path_text(&tree));
        let made = run(
            "genisoimage",
            &["-o", &iso_text, "-ldots", "-allow-lowercase", "-allow-multidot", "-l", "-publisher", "berth", "-quiet"]
                .into_iter()
                .chain(["-J", "-r", "-V", "config-2", &tree_text])
                .collect::<Vec<_>>(),
        )
        .await;
        let _ = tokio::fs::remove_dir_all(&tree).await;
        made.map(|_| ())
    }

    /// Destroy and undefine the domain and remove its files.
    async fn remove(&self, instance: &str) -> Result<(), String> {
        let name = domain(instance);
        if let Some(state) = self.state(instance).await? {
            if state != "shut off" {
                self.virsh(&["destroy", &name]).await?;
            }
            self.virsh(&["undefine", "--managed-save", &name]).await?;
        }
        let dir = self.dir(instance);
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("removing {}: {e}", dir.display())),
        }
    }

    /// Clean shutdown within the timeout, else destroy.
    async fn shut_down(&self, instance: &str) -> Result<(), String> {
        let name = domain(instance);
        match self.state(instance).await?.as_deref() {
            None => return Err(format!("Instance {instance} has no domain on {}", self.config.host)),
            Some("shut off") => return Ok(()),
            Some("paused") => {
                self.virsh(&["destroy", &name]).await?;
                return Ok(());
            }
            Some(_) => {}
        }
        if self.virsh(&["shutdown", &name]).await.is_ok()
            && self.wait_for(instance, "shut off", self.config.shutdown_timeout).await?
        {
            return Ok(());
        }
        tracing::info!(%instance, timeout = ?self.config.shutdown_timeout, "no clean shutdown in time; destroying");
        match self.virsh(&["destroy", &name]).await {
            Ok(_) => Ok(()),
            Err(_) if self.state(instance).await?.as_deref() == Some("shut off") => Ok(()),
            Err(err) => Err(err),
        }
    }

    async fn start(&self, instance: &str) -> Result<(), String> {
        match self.state(instance).await?.as_deref() {
            None => Err(format!("Instance {instance} has no domain on {}", self.config.host)),
            Some("running") => Ok(()),
            Some(_) => self.virsh(&["start", &domain(instance)]).await.map(|_| ()),
        }
    }

    /// A domain-state change by one virsh verb, done unless already in
    /// `done_state`.
    async fn verb(&self, instance: &str, verb: &str, done_state: &str) -> Result<(), String> {
        match self.state(instance).await?.as_deref() {
            None => Err(format!("Instance {instance} has no domain on {}", self.config.host)),
            Some(state) if state == done_state => Ok(()),
            Some(_) => self.virsh(&[verb, &domain(instance)]).await.map(|_| ()),
        }
    }
}

impl LibvirtDriver {
    /// Rescue as Nova's libvirt driver does: the guest is destroyed and
    /// booted again from a fresh overlay of the rescue image (the
    /// server's own image; `rescue_image` when the task names one) as its
    /// first disk, its own root disk attached second and its config
    /// drive as before. `libvirt.xml` (the guest's own domain) is kept for
    /// the unrescue. A task handed out again finds the rescue domain.
    async fn rescue_guest(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let dir = self.dir(instance);
        let rescue_disk = dir.join("disk.rescue");
        let rescue_xml = dir.join("libvirt-rescue.xml");
        let Some(state) = self.state(instance).await? else {
            return Err(format!("no domain on {}", self.config.host));
        };
        let defined = self.virsh(&["dumpxml", "--inactive", &domain(instance)]).await?;
        if defined.contains(&build::path_text(&rescue_disk)) {
            return if state == "running" { Ok(()) } else { self.start(instance).await };
        }
        let server = self.server(instance).await?;
        let image_id = match task.body["rescue_image"].as_str() {
            Some(id) => id.to_owned(),
            None => server["image"]["id"]
                .as_str()
                .ok_or("a server booted from a volume has no image to rescue with")?
                .to_owned(),
        };
        let (base, image, kernel) = self.boot_image(&image_id).await?;
        let _ = tokio::fs::remove_file(&rescue_disk).await;
        Self::overlay(&base, &image, &rescue_disk, 0).await?;
        let disks = vec![build::path_text(&rescue_disk), build::path_text(&dir.join("disk"))];
        let spec = self.domain_spec(instance, &server, &image, kernel, disks);
        tokio::fs::write(&rescue_xml, spec.xml()).await.map_err(io("writing", &rescue_xml))?;
        if state != "shut off" {
            self.virsh(&["destroy", &domain(instance)]).await?;
        }
        // A suspended guest's saved memory belongs to its own domain.
        let _ = self.virsh(&["managedsave-remove", &domain(instance)]).await;
        self.virsh(&["define", &build::path_text(&rescue_xml)]).await?;
        self.virsh(&["start", &domain(instance)]).await.map(|_| ())
    }

    /// Unrescue: the rescue domain destroyed, the guest's own domain
    /// (`libvirt.xml`) defined and booted again, the rescue disk removed.
    async fn unrescue_guest(&self, instance: &str) -> Result<(), String> {
        let dir = self.dir(instance);
        let rescue_disk = dir.join("disk.rescue");
        let Some(state) = self.state(instance).await? else {
            return Err(format!("no domain on {}", self.config.host));
        };
        let defined = self.virsh(&["dumpxml", "--inactive", &domain(instance)]).await?;
        if defined.contains(&build::path_text(&rescue_disk)) {
            if state != "shut off" {
                self.virsh(&["destroy", &domain(instance)]).await?;
            }
            self.virsh(&["define", &build::path_text(&dir.join("libvirt.xml"))]).await?;
        }
        let _ = tokio::fs::remove_file(&rescue_disk).await;
        let _ = tokio::fs::remove_file(dir.join("libvirt-rescue.xml")).await;
        self.start(instance).await
    }
}

async fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).await.map_err(io("chmod", path))
}

/// A state of `virsh list` as the power sync sees it.
fn power_of(state: &str) -> GuestPower {
    match state {
        "running" | "idle" | "blocked" => GuestPower::Running,
        "paused" => GuestPower::Paused,
        "shut off" => GuestPower::Shutoff,
        "crashed" => GuestPower::Crashed,
        _ => GuestPower::Other,
    }
}

/// `(domain name, state)` of each line of `virsh list --all`.
pub fn parse_list(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip_while(|l| !l.starts_with("---"))
        .skip(1)
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (_id, name) = (words.next()?, words.next()?);
            Some((name.to_owned(), words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

impl Driver for LibvirtDriver {
    fn hypervisor_type(&self) -> &'static str {
        "QEMU"
    }

    fn spawn<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            // A build this host already made (an agent restarted during or
            // after it) is finished, not spawned twice.
            match self.state(task.instance).await?.as_deref() {
                Some("running") => return Ok(()),
                Some("shut off") => return self.start(task.instance).await,
                // Being started (QEMU starts paused), or paused by hand.
                Some(_) => {
                    if self.wait_for(task.instance, "running", Duration::from_secs(30)).await? {
                        return Ok(());
                    }
                    return self.verb(task.instance, "resume", "running").await;
                }
                None => {}
            }
            let made = self.create(task, None).await;
            if let Err(err) = &made {
                tracing::warn!(instance = task.instance, error = %err, "build failed; cleaning up");
                if let Err(err) = self.remove(task.instance).await {
                    tracing::warn!(instance = task.instance, error = %err, "cleaning up a failed build");
                }
                return Err(format!("Build of instance {} aborted: {err}", task.instance));
            }
            Ok(())
        })
    }

    fn rebuild<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            self.remove(task.instance).await?;
            self.create(task, None).await.map_err(|err| format!("Rebuild of instance {} aborted: {err}", task.instance))
        })
    }

    fn destroy<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.remove(task.instance))
    }

    fn power_off<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.shut_down(task.instance))
    }

    fn power_on<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.start(task.instance))
    }

    fn reboot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let instance = task.instance;
            let name = domain(instance);
            // The task id is `{instance}:{task_state}@{host}`.
            let task_state = task.body["id"].as_str().and_then(|id| id.split_once(':')).map(|(_, rest)| rest);
            let hard =
                task_state.and_then(|rest| rest.rsplit_once('@')).is_some_and(|(state, _)| state.contains("hard"));
            if self.state(instance).await?.is_none() {
                return Err(format!("Instance {instance} has no domain on {}", self.config.host));
            }
            // Soft: ACPI shutdown, then boot again (Nova's _soft_reboot);
            // hard, or a guest that does not shut down in time: destroy.
            let soft = !hard
                && self.state(instance).await?.as_deref() == Some("running")
                && self.virsh(&["shutdown", &name]).await.is_ok()
                && self.wait_for(instance, "shut off", self.config.shutdown_timeout).await?;
            if !soft && self.state(instance).await?.as_deref() != Some("shut off") {
                self.virsh(&["destroy", &name]).await?;
            }
            self.virsh(&["start", &name]).await.map(|_| ())
        })
    }

    fn pause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.verb(task.instance, "suspend", "paused"))
    }

    fn unpause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.verb(task.instance, "resume", "running"))
    }

    fn suspend<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        // Nova's suspend is libvirt's managed save: memory to disk, the
        // domain shut off; `start` restores it.
        Box::pin(self.verb(task.instance, "managedsave", "shut off"))
    }

    fn resume<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(self.start(task.instance))
    }

    fn console_output<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move {
            let path = self.dir(task.instance).join("console.log");
            let bytes = match tokio::fs::read(&path).await {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(format!("reading {}: {e}", path.display())),
            };
            // The last MiB at most, as text.
            let tail = &bytes[bytes.len().saturating_sub(1 << 20)..];
            Ok(String::from_utf8_lossy(tail).replace('\r', ""))
        })
    }

    fn live_migration_prepare<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            Err(format!(
                "Live migration of instance {} failed: not supported by berth's libvirt driver on {}",
                task.instance, self.config.host
            ))
        })
    }

    fn live_migrate<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(
            async move { Err(format!("live migration of {} is not supported by the libvirt driver", task.instance)) },
        )
    }

    fn rescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            self.rescue_guest(task).await.map_err(|err| format!("Rescue of instance {} failed: {err}", task.instance))
        })
    }

    fn unrescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            self.unrescue_guest(task.instance)
                .await
                .map_err(|err| format!("Unrescue of instance {} failed: {err}", task.instance))
        })
    }

    fn snapshot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, DiskImage> {
        Box::pin(async move {
            // The root disk flattened (overlay and base) into one file,
            // as Nova's libvirt snapshot does for a stopped or running
            // guest (`qemu-img convert` reads a consistent-enough image of
            // a running guest's disk; Nova pauses or uses a live snapshot).
            // The file is streamed to the image API, then removed.
            let dir = self.dir(task.instance);
            let disk = dir.join("disk");
            if tokio::fs::metadata(&disk).await.is_err() {
                return Err(format!("Instance {} has no disk on {}", task.instance, self.config.host));
            }
            // In the format the image record says (it inherits the
            // server's image's `disk_format`): raw stays raw.
            let image = task.body["image"].as_str().unwrap_or("");
            if uuid::Uuid::parse_str(image).is_err() {
                return Err(format!("No image to upload the snapshot of {} to", task.instance));
            }
            let record = self.read_json(&format!("/image/v2/images/{image}"), &[]).await?;
            let format = if record["disk_format"].as_str() == Some("raw") { "raw" } else { "qcow2" };
            let out = dir.join(format!("snapshot-{image}.{format}"));
            let (disk_text, out_text) = (build::path_text(&disk), build::path_text(&out));
            if let Err(err) = run("qemu-img", &["convert", "-U", "-O", format, &disk_text, &out_text]).await {
                let _ = tokio::fs::remove_file(&out).await;
                return Err(err);
            }
            Ok(DiskImage::File(out))
        })
    }

    fn move_step<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let instance = task.instance;
            match task.kind {
                // Shelve: the snapshot is taken (the task loop uploads it);
                // the guest is powered off cleanly, as Nova's shelve does.
                "shelve" => match self.state(instance).await? {
                    None => Err(format!("Instance {instance} has no domain on {}", self.config.host)),
                    Some(_) => self.shut_down(instance).await,
                },
                // Offload: nothing of the guest stays on the host (the
                // snapshot image holds its disk).
                "shelve_offload" => self.remove(instance).await,
                // Unshelve: a guest still here (shelved, not offloaded)
                // starts again; an offloaded one boots on this host from
                // its shelve snapshot.
                "unshelve" => match self.state(instance).await?.as_deref() {
                    Some("running") => Ok(()),
                    Some(_) => self.start(instance).await,
                    None => {
                        let Some(image) = task.body["image"].as_str() else {
                            return Err(format!("Unshelve of instance {instance} names no shelve snapshot"));
                        };
                        let made = self.create(task, Some(image)).await;
                        if let Err(err) = &made {
                            if let Err(err) = self.remove(instance).await {
                                tracing::warn!(%instance, error = %err, "cleaning up a failed unshelve");
                            }
                            return Err(format!("Unshelve of instance {instance} failed: {err}"));
                        }
                        Ok(())
                    }
                },
                other => Err(format!("{other} of {instance} is not supported by the libvirt driver")),
            }
        })
    }

    fn guests(&self) -> DriverFuture<'_, Option<Vec<Guest>>> {
        Box::pin(async move {
            let list = self.virsh(&["list", "--all"]).await?;
            let guests = parse_list(&list)
                .into_iter()
                .filter_map(|(name, state)| {
                    let instance = name.strip_prefix("instance-")?.to_owned();
                    // Only this agent's guests (another agent may share
                    // the libvirt daemon).
                    self.dir(&instance).is_dir().then(|| Guest {
                        instance,
                        host: self.config.host.clone(),
                        power: power_of(&state),
                    })
                })
                .collect();
            Ok(Some(guests))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virsh_list_parses() {
        let text = " Id   Name                 State\n-------------------------------------\n 3    instance-a   running\n -    instance-b   shut off\n\n";
        assert_eq!(
            parse_list(text),
            vec![("instance-a".to_owned(), "running".to_owned()), ("instance-b".to_owned(), "shut off".to_owned())]
        );
        assert_eq!(power_of("shut off"), GuestPower::Shutoff);
        assert_eq!(power_of("in shutdown"), GuestPower::Other);
    }
}
