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
//! instance's uuid; their title (`berth-host={host}`) names the host that
//! made them, so that agents sharing one libvirt daemon (several hosts on
//! one machine) each see and touch only their own domains.
//!
//! What a guest is made of (flavor, image properties, name, key, user
//! data, metadata) comes with the task: the agent reads no server through
//! the compute API, and needs no admin identity (only the image API, for
//! image data).
//!
//! Cold moves (resize, migrate): the source shuts the guest down, keeps
//! its domain XML, undefines it and hands the instance directory over
//! (`{uuid}_resize`), serving the disk to the destination's agent
//! ([`transfer`]); the destination fetches it (or copies it, when the
//! handed-over directory is on its own instances path: a same-host resize,
//! or shared storage), rebases it onto its own image cache, grows it to
//! the new flavor's root disk and boots the guest with the new flavor.
//! Confirm removes the source's copy; revert removes the destination's,
//! then the source defines its kept XML again and boots it.

pub mod build;
pub mod host;
pub mod transfer;

use std::collections::{HashMap, HashSet};
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
    /// This host's IP (`--my-ip`): where it serves moving guests' disks.
    pub my_ip: String,
    /// The port of that service (`--migration-port`), the same on every
    /// host.
    pub migration_port: u16,
}

/// The libvirt driver of one host.
#[derive(Debug)]
pub struct LibvirtDriver {
    config: LibvirtConfig,
    link: Link,
    /// One lock per image being fetched into the cache.
    fetches: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Instances a move step is working on: the power sync skips them
    /// (a domain between its definition and its start is not a guest that
    /// shut itself off).
    busy: std::sync::Mutex<HashSet<String>>,
    /// The disk transfer service, started with the first move or power
    /// sync (its error, when its address cannot be bound).
    serving: tokio::sync::OnceCell<Result<(), String>>,
}

/// Marks an instance busy for the power sync while it lives.
struct Busy<'a>(&'a LibvirtDriver, String);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Ok(mut busy) = self.0.busy.lock() {
            busy.remove(&self.1);
        }
    }
}

/// One line of `virsh list --all --title`: name, state, and the title
/// when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The domain name.
    pub name: String,
    /// Its state (`running`, `shut off`, ...).
    pub state: String,
    /// Its title (`berth-host=...`), if any.
    pub title: Option<String>,
}

/// The title prefix of berth's domains.
const TITLE_PREFIX: &str = "berth-host=";

/// `virsh list --all --title`, parsed (a title is berth's when it starts
/// with [`TITLE_PREFIX`], which has no spaces, as host names).
pub fn parse_titled_list(text: &str) -> Vec<Listed> {
    text.lines()
        .skip_while(|l| !l.starts_with("---"))
        .skip(1)
        .filter_map(|line| {
            let mut words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 3 {
                return None;
            }
            let title = match words.last() {
                Some(last) if last.starts_with(TITLE_PREFIX) => words.pop().map(str::to_owned),
                _ => None,
            };
            Some(Listed { name: words[1].to_owned(), state: words[2..].join(" "), title })
        })
        .collect()
}

/// The domain XML with berth's title naming `host` (after the name).
fn with_title(xml: &str, host: &str) -> String {
    xml.replacen("</name>", &format!("</name>\n  <title>{TITLE_PREFIX}{}</title>", build::esc(host)), 1)
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
    /// A driver for `config` that reads images (their records and data) through
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
        Ok(LibvirtDriver {
            config,
            link,
            fetches: tokio::sync::Mutex::default(),
            busy: std::sync::Mutex::default(),
            serving: tokio::sync::OnceCell::new(),
        })
    }

    async fn virsh(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-c", self.config.uri.as_str()];
        all.extend_from_slice(args);
        run("virsh", &all).await
    }

    /// Is a listed domain this host's? Its title says; a domain without
    /// one (made before titles) is when its directory is here.
    fn owns(&self, listed: &Listed) -> bool {
        match &listed.title {
            Some(title) => title.strip_prefix(TITLE_PREFIX) == Some(self.config.host.as_str()),
            None => listed.name.strip_prefix("instance-").is_some_and(|instance| self.dir(instance).is_dir()),
        }
    }

    /// This host's domains. `virsh list --title` lists the domains, then
    /// asks each for its title: a domain undefined in between (another
    /// guest's delete or move, on this or another host of the daemon)
    /// fails the whole listing with "Domain not found", so it is asked
    /// again (a few times).
    async fn own_domains(&self) -> Result<Vec<Listed>, String> {
        let mut attempts = 0;
        let list = loop {
            match self.virsh(&["list", "--all", "--title"]).await {
                Ok(list) => break list,
                Err(err) if attempts < 5 && err.contains("Domain not found") => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err),
            }
        };
        Ok(parse_titled_list(&list).into_iter().filter(|l| self.owns(l)).collect())
    }

    /// The domain's state (`running`, `shut off`, `paused`, ...); `None`
    /// when this host has no such domain (another host's domain of the
    /// same name, on a shared libvirt daemon, is not this host's).
    async fn state(&self, instance: &str) -> Result<Option<String>, String> {
        let name = domain(instance);
        Ok(self.own_domains().await?.into_iter().find(|l| l.name == name).map(|l| l.state))
    }

    fn busy(&self, instance: &str) -> Busy<'_> {
        if let Ok(mut busy) = self.busy.lock() {
            busy.insert(instance.to_owned());
        }
        Busy(self, instance.to_owned())
    }

    /// Start serving handed-over disks (once).
    async fn serve_disks(&self) -> Result<(), String> {
        self.serving
            .get_or_init(|| async {
                let addr = format!("{}:{}", self.config.my_ip, self.config.migration_port);
                match tokio::net::TcpListener::bind(&addr).await {
                    Ok(listener) => {
                        tracing::info!(%addr, "serving moving guests' disks");
                        tokio::spawn(transfer::serve(listener, self.config.instances_path.clone()));
                        Ok(())
                    }
                    Err(err) => {
                        tracing::warn!(%addr, error = %err, "cannot serve moving guests' disks");
                        Err(format!("binding the disk transfer service at {addr}: {err}"))
                    }
                }
            })
            .await
            .clone()
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

    /// An image to boot from, in the cache: its base file, its record
    /// (with `props`, the properties it had when the server was booted,
    /// over the image API's) and (AMI style) its kernel, ramdisk and
    /// kernel command line.
    async fn boot_image(
        &self,
        image_id: &str,
        props: Option<&serde_json::Map<String, Value>>,
    ) -> Result<(PathBuf, Value, Kernel), String> {
        let (base, mut image) = self.cached(image_id).await?;
        if let (Some(record), Some(props)) = (image.as_object_mut(), props) {
            for (key, value) in props {
                record.insert(key.clone(), value.clone());
            }
        }
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

    /// The image the guest boots from: the server's own (the task's
    /// `server`), with the properties it had when the server was booted.
    async fn base_image(&self, server: &Value) -> Result<(PathBuf, Value, Kernel), String> {
        let image_id =
            server["image"]["id"].as_str().ok_or("Booting from a volume is not supported by the libvirt driver")?;
        self.boot_image(image_id, server["image"]["properties"].as_object()).await
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
    /// An ephemeral disk already in `dir` (a moved guest's) is kept with
    /// its data and grown to the flavor's size (never shrunk).
    async fn flavor_disks(server: &Value, dir: &Path) -> Result<Vec<String>, String> {
        let mut disks = Vec::new();
        let sizes = [
            ("disk.local", Self::flavor_amount(server, "ephemeral"), 'G'),
            ("disk.swap", Self::flavor_amount(server, "swap"), 'M'),
        ];
        for (name, amount, unit) in sizes {
            let path = dir.join(name);
            let text = build::path_text(&path);
            if amount <= 0 {
                let _ = tokio::fs::remove_file(&path).await;
                continue;
            }
            if name == "disk.local" && path.exists() {
                grow(&text, u64::try_from(amount).unwrap_or(0)).await?;
            } else {
                run("qemu-img", &["create", "-q", "-f", "qcow2", &text, &format!("{amount}{unit}")]).await?;
            }
            disks.push(text);
        }
        Ok(disks)
    }

    /// A flavor's amount (`ephemeral` GiB, `swap` MiB) in the task's server.
    fn flavor_amount(server: &Value, key: &str) -> i64 {
        match &server["flavor"][key] {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => s.parse().unwrap_or(0),
            _ => 0,
        }
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
    ) -> Result<DomainSpec, String> {
        let dir = self.dir(instance);
        let (machine, disk_bus, cdrom_bus) = DomainSpec::buses(image);
        let disk = if disks.is_empty() { String::new() } else { disks.remove(0) };
        // One NIC per network the server asked for (`nics`).
        let nics = usize::try_from(server["nics"].as_u64().unwrap_or(0)).unwrap_or(0).min(16);
        Ok(DomainSpec {
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
            nics: (0..nics).map(|i| build::mac_address(instance, i)).collect(),
            vif_model: build::vif_model(image, &self.config.virt_type)?,
            uefi: image.get("hw_firmware_type").and_then(Value::as_str) == Some("uefi"),
        })
    }

    /// Create and boot the guest (no domain exists) from its server's
    /// image, or from `image_id` (an unshelve's snapshot).
    async fn create(&self, task: TaskRef<'_>, image_id: Option<&str>) -> Result<(), String> {
        let instance = task.instance;
        let server = server_of(task)?;
        let (base, image, kernel) = match image_id {
            Some(id) => self.boot_image(id, None).await?,
            None => self.base_image(server).await?,
        };
        let dir = self.dir(instance);
        tokio::fs::create_dir_all(&dir).await.map_err(io("creating", &dir))?;
        set_mode(&dir, 0o755).await?;
        // The root disk: a qcow2 overlay on the cached image, sized to the
        // flavor's root disk (0: the image's own size).
        let disk = dir.join("disk");
        Self::overlay(&base, &image, &disk, server["flavor"]["disk"].as_i64().unwrap_or(0)).await?;
        self.define_and_boot(task, server, &image, kernel, true).await
    }

    /// For the guest whose root disk (`disk`) is in place: the flavor's
    /// ephemeral and swap disks (blank), the config drive and the domain
    /// XML; the domain defined and (`start`) booted.
    async fn define_and_boot(
        &self,
        task: TaskRef<'_>,
        server: &Value,
        image: &Value,
        kernel: Kernel,
        start: bool,
    ) -> Result<(), String> {
        let instance = task.instance;
        let dir = self.dir(instance);
        let mut disks = vec![build::path_text(&dir.join("disk"))];
        disks.extend(Self::flavor_disks(server, &dir).await?);
        let config_drive = dir.join("disk.config");
        let key = task.body["key_data"].as_str().or_else(|| server["key_data"].as_str());
        self.config_drive(server, key, &dir, &config_drive).await?;
        let spec = self.domain_spec(instance, server, image, kernel, disks)?;
        let xml = dir.join("libvirt.xml");
        tokio::fs::write(&xml, with_title(&spec.xml(), &self.config.host)).await.map_err(io("writing", &xml))?;
        self.virsh(&["define", &build::path_text(&xml)]).await?;
        if start {
            self.virsh(&["start", &domain(instance)]).await?;
        }
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

/// The guest a task carries (`server`, see the control plane's
/// `task_json`).
fn server_of<'a>(task: TaskRef<'a>) -> Result<&'a Value, String> {
    let server = &task.body["server"];
    if server.is_object() {
        Ok(server)
    } else {
        Err(format!(
            "the {} task of {} carries no server (a control plane older than this agent?)",
            task.kind, task.instance
        ))
    }
}

/// The libvirt URI of a live migration's destination (Nova's default
/// `live_migration_scheme`, TCP): `qemu+tcp://{ip}/system`.
pub fn migration_uri(ip: &str) -> String {
    format!("qemu+tcp://{}/system", url_host(ip))
}

/// The `virsh migrate` arguments of a live migration, with Nova's flags:
/// live, peer to peer (the source's libvirtd talks to the destination's),
/// persistent on the destination and undefined on the source, and the
/// disks copied incrementally (block migration: no shared instances
/// storage; the destination made the overlay on its own image cache).
/// `xml` is the domain as the destination defines it (its title names
/// the destination host). Both hosts use the same instances path, as
/// Nova's do.
pub fn live_migrate_args(name: &str, dest_uri: &str, xml: &str) -> Vec<String> {
    [
        "migrate",
        "--live",
        "--p2p",
        "--persistent",
        "--undefinesource",
        "--copy-storage-inc",
        "--xml",
        xml,
        name,
        dest_uri,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// The domain XML without its title.
fn strip_title(xml: &str) -> String {
    match (xml.find("<title>"), xml.find("</title>")) {
        (Some(start), Some(end)) if end > start => {
            let end = end + "</title>".len();
            let end = if xml[end..].starts_with('\n') { end + 1 } else { end };
            let start = xml[..start].trim_end_matches(' ').len();
            format!("{}{}", &xml[..start], &xml[end..])
        }
        _ => xml.to_owned(),
    }
}

/// An IP as the host part of a URL.
fn url_host(ip: &str) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    }
}

async fn remove_dir(dir: &Path) -> Result<(), String> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", dir.display())),
    }
}

impl LibvirtDriver {
    /// `resize_migrate`, on the source: shut the guest down, keep its
    /// domain XML, undefine it and hand its directory over
    /// (`{uuid}_resize`, with the move's secret), serving its disk.
    async fn migrate_out(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let _busy = self.busy(instance);
        let token = task.body["move"]["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("the move of {instance} carries no transfer secret"))?;
        let dir = self.dir(instance);
        let handed = transfer::resize_dir(&self.config.instances_path, instance);
        if !dir.exists() && handed.exists() {
            // Handed over already (the task again, after a restart).
            return self.serve_disks().await;
        }
        if self.state(instance).await?.is_some() {
            self.shut_down(instance).await?;
            let xml = self.virsh(&["dumpxml", "--inactive", &domain(instance)]).await?;
            let path = dir.join("libvirt.xml");
            tokio::fs::write(&path, xml).await.map_err(io("writing", &path))?;
            self.virsh(&["undefine", "--managed-save", &domain(instance)]).await?;
        }
        if !dir.join("disk").exists() {
            return Err(format!("Instance {instance} has no disk on {}", self.config.host));
        }
        let secret = dir.join(transfer::TOKEN_FILE);
        tokio::fs::write(&secret, token).await.map_err(io("writing", &secret))?;
        set_mode(&secret, 0o600).await?;
        tokio::fs::rename(&dir, &handed).await.map_err(io("renaming", &dir))?;
        self.serve_disks().await
    }

    /// `resize_finish`, on the destination: the source's disk fetched
    /// (or copied, when its handed-over directory is on this host's
    /// instances path), rebased onto this host's image cache, grown to the
    /// flavor's root disk; the guest booted with the new flavor (left off
    /// when the server was stopped).
    async fn migrate_in(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let _busy = self.busy(instance);
        let server = server_of(task)?;
        let start = server["OS-EXT-STS:vm_state"].as_str() != Some("stopped");
        if let Some(state) = self.state(instance).await? {
            // Finished already (the task again, after a restart).
            if start && state == "shut off" {
                self.start(instance).await?;
            }
            return Ok(());
        }
        let (base, image, kernel) = self.base_image(server).await?;
        let dir = self.dir(instance);
        tokio::fs::create_dir_all(&dir).await.map_err(io("creating", &dir))?;
        set_mode(&dir, 0o755).await?;
        let disk = dir.join("disk");
        // The root disk and the ephemeral one, when the source has it (the
        // new flavor's size is made at boot; a flavor without one drops
        // it). A stale ephemeral disk from an earlier try goes first.
        let _ = tokio::fs::remove_file(dir.join("disk.local")).await;
        let wanted = if Self::flavor_amount(server, "ephemeral") > 0 { transfer::DISKS } else { &transfer::DISKS[..1] };
        let handed = transfer::resize_dir(&self.config.instances_path, instance);
        if handed.join("disk").exists() {
            for name in wanted {
                let (from, to) = (handed.join(name), dir.join(name));
                if !from.exists() {
                    continue;
                }
                let part = to.with_extension("part");
                tokio::fs::copy(&from, &part).await.map_err(io("copying", &from))?;
                tokio::fs::rename(&part, &to).await.map_err(io("renaming", &part))?;
            }
        } else {
            let ip = task.body["move"]["source_ip"]
                .as_str()
                .filter(|ip| !ip.is_empty())
                .ok_or_else(|| format!("the move of {instance} names no source IP"))?;
            let token = task.body["move"]["token"].as_str().unwrap_or("");
            let base_url = format!("http://{}:{}", url_host(ip), self.config.migration_port);
            for name in wanted {
                if let Some(bytes) = transfer::fetch(&base_url, instance, name, token, &dir.join(name)).await? {
                    tracing::info!(%instance, disk = name, bytes, from = %base_url, "disk of a moving guest fetched");
                }
            }
        }
        let base_format = if image["disk_format"].as_str() == Some("qcow2") { "qcow2" } else { "raw" };
        let (base_text, disk_text) = (build::path_text(&base), build::path_text(&disk));
        run("qemu-img", &["rebase", "-u", "-f", "qcow2", "-F", base_format, "-b", &base_text, &disk_text]).await?;
        grow(&disk_text, server["flavor"]["disk"].as_u64().unwrap_or(0)).await?;
        self.define_and_boot(task, server, &image, kernel, start).await
    }

    /// `resize_confirm`, on the source: the handed-over copy goes.
    async fn confirm_move(&self, task: TaskRef<'_>) -> Result<(), String> {
        remove_dir(&transfer::resize_dir(&self.config.instances_path, task.instance)).await
    }

    /// `resize_revert`: on the destination its copy goes; on the source
    /// (the task is sent there once the destination reported) the
    /// handed-over directory comes back and its domain boots again.
    async fn revert_move(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let _busy = self.busy(instance);
        let here = Some(self.config.host.as_str());
        let (source, dest) = (task.body["move"]["source_host"].as_str(), task.body["move"]["dest_host"].as_str());
        if source.is_none() && dest.is_none() {
            return Err(format!("the revert of {instance} names no move"));
        }
        let handed = transfer::resize_dir(&self.config.instances_path, instance);
        // The destination's copy (on a same-host move only while the
        // source's is still handed over: not the guest a revert restored).
        if dest == here && (source != here || handed.exists()) {
            self.remove(instance).await?;
        }
        if source != here {
            return Ok(());
        }
        if handed.exists() {
            let dir = self.take_back(instance).await?;
            self.virsh(&["define", &build::path_text(&dir.join("libvirt.xml"))]).await?;
        }
        // The task again (a restart, a lost report): the guest defined
        // already, booted if it is not yet.
        let Some(state) = self.state(instance).await? else {
            return Err(format!("Instance {instance} has no guest on {} to revert to", self.config.host));
        };
        // Stopped before the move (the row is still `resized` while the
        // source reverts; its power state is the one it had before).
        let server = &task.body["server"];
        let stopped = server["OS-EXT-STS:vm_state"].as_str() == Some("stopped")
            || server["OS-EXT-STS:power_state"].as_i64() == Some(4);
        if !stopped && state != "running" {
            self.start(instance).await?;
        }
        Ok(())
    }

    /// The destination of a live migration gets ready: the image
    /// cached, an empty overlay disk of the flavor's size on it (the
    /// migration copies the blocks), the config drive (Nova's
    /// `pre_live_migration`). libvirt defines the domain when the guest
    /// arrives.
    async fn prepare_incoming(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let server = server_of(task)?;
        let (base, image, _) = self.base_image(server).await?;
        let dir = self.dir(instance);
        tokio::fs::create_dir_all(&dir).await.map_err(io("creating", &dir))?;
        set_mode(&dir, 0o755).await?;
        let disk = dir.join("disk");
        if !disk.exists() {
            Self::overlay(&base, &image, &disk, server["flavor"]["disk"].as_i64().unwrap_or(0)).await?;
            // The flavor's ephemeral and swap disks, for the blocks to go to.
            Self::flavor_disks(server, &dir).await?;
        }
        let key = task.body["key_data"].as_str().or_else(|| server["key_data"].as_str());
        self.config_drive(server, key, &dir, &dir.join("disk.config")).await
    }

    /// A hard reboot of a guest whose domain is gone (undefined behind
    /// berth's back, or a move that failed on this source after handing
    /// it over): as Nova's hard reboot, the domain is made again from the
    /// guest's disks and the server's flavor and image (the handed-over
    /// directory taken back first) and booted. No disk: an error.
    async fn recreate(&self, task: TaskRef<'_>) -> Result<(), String> {
        let instance = task.instance;
        let _busy = self.busy(instance);
        let server = server_of(task)?;
        let dir = self.dir(instance);
        let handed = transfer::resize_dir(&self.config.instances_path, instance);
        if !dir.join("disk").exists() && handed.join("disk").exists() {
            self.take_back(instance).await?;
        }
        if !dir.join("disk").exists() {
            return Err(format!("Instance {instance} has no domain and no disk on {}", self.config.host));
        }
        let (_, image, kernel) = self.base_image(server).await?;
        tracing::info!(%instance, "hard reboot: the domain made again from the guest's disks");
        self.define_and_boot(task, server, &image, kernel, true).await
    }

    /// A guest handed over to a move (`{uuid}_resize`) back in its own
    /// directory (whatever was there goes), its move's secret removed;
    /// the directory.
    async fn take_back(&self, instance: &str) -> Result<PathBuf, String> {
        let (dir, handed) = (self.dir(instance), transfer::resize_dir(&self.config.instances_path, instance));
        remove_dir(&dir).await?;
        tokio::fs::rename(&handed, &dir).await.map_err(io("renaming", &handed))?;
        let _ = tokio::fs::remove_file(dir.join(transfer::TOKEN_FILE)).await;
        Ok(dir)
    }

    /// Does this host hold a guest handed over to a move?
    fn hands_over(&self) -> bool {
        std::fs::read_dir(&self.config.instances_path)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with("_resize")))
            .unwrap_or(false)
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
        let server = server_of(task)?;
        let (base, image, kernel) = match task.body["rescue_image"].as_str() {
            Some(id) => self.boot_image(id, None).await?,
            None if server["image"]["id"].is_string() => self.base_image(server).await?,
            None => return Err("a server booted from a volume has no image to rescue with".to_owned()),
        };
        let _ = tokio::fs::remove_file(&rescue_disk).await;
        Self::overlay(&base, &image, &rescue_disk, 0).await?;
        let disks = vec![build::path_text(&rescue_disk), build::path_text(&dir.join("disk"))];
        let spec = self.domain_spec(instance, server, &image, kernel, disks)?;
        let xml = with_title(&spec.xml(), &self.config.host);
        tokio::fs::write(&rescue_xml, xml).await.map_err(io("writing", &rescue_xml))?;
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

/// Grow the qcow2 disk at `path` to `gb` GiB when it is smaller (never
/// shrink it; 0: leave it).
async fn grow(path: &str, gb: u64) -> Result<(), String> {
    if gb == 0 {
        return Ok(());
    }
    let info = run("qemu-img", &["info", "--output=json", "-f", "qcow2", path]).await?;
    let size = serde_json::from_str::<Value>(&info).ok().and_then(|v| v["virtual-size"].as_u64()).unwrap_or(0);
    if size < gb << 30 {
        run("qemu-img", &["resize", "-q", "-f", "qcow2", path, &format!("{gb}G")]).await?;
    }
    Ok(())
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

    fn needs_guest(&self) -> bool {
        true
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
                if hard {
                    return self.recreate(task).await;
                }
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
            self.prepare_incoming(task)
                .await
                .map_err(|err| format!("Live migration of instance {} failed on {}: {err}", task.instance, task.host))
        })
    }

    fn live_migrate<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let instance = task.instance;
            let ip = task.body["move"]["dest_ip"]
                .as_str()
                .filter(|ip| !ip.is_empty())
                .ok_or_else(|| format!("the live migration of {instance} names no destination IP"))?;
            let dir = self.dir(instance);
            let xml = self.virsh(&["dumpxml", "--migratable", &domain(instance)]).await?;
            let path = dir.join("migrate.xml");
            tokio::fs::write(
                &path,
                with_title(&strip_title(&xml), task.body["move"]["dest_host"].as_str().unwrap_or("")),
            )
            .await
            .map_err(io("writing", &path))?;
            let args = live_migrate_args(&domain(instance), &migration_uri(ip), &build::path_text(&path));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.virsh(&args).await?;
            // The guest runs on the destination now; its files here go.
            remove_dir(&dir).await
        })
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
            // as Nova's libvirt snapshot does. A running guest is paused
            // while its disk is read (Nova's cold snapshot suspends it;
            // its live snapshot copies the blocks at one instant): the
            // image is the disk at one moment, not blocks from different
            // ones. The file is streamed to the image API, then removed.
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
            let _busy = self.busy(task.instance);
            let paused = if self.state(task.instance).await?.as_deref() == Some("running") {
                self.virsh(&["suspend", &domain(task.instance)]).await?;
                true
            } else {
                false
            };
            let copied = run("qemu-img", &["convert", "-U", "-O", format, &disk_text, &out_text]).await;
            if paused {
                if let Err(err) = self.virsh(&["resume", &domain(task.instance)]).await {
                    tracing::warn!(instance = task.instance, error = %err, "resuming the guest after its snapshot failed");
                }
            }
            if let Err(err) = copied {
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
                "resize_migrate" => self.migrate_out(task).await,
                "resize_finish" => self.migrate_in(task).await,
                "resize_confirm" => self.confirm_move(task).await,
                "resize_revert" => self.revert_move(task).await,
                other => Err(format!("{other} of {instance} is not supported by the libvirt driver")),
            }
        })
    }

    fn guests(&self) -> DriverFuture<'_, Option<Vec<Guest>>> {
        Box::pin(async move {
            // A restarted agent serves the disks it had handed over again.
            if self.hands_over() {
                let _ = self.serve_disks().await;
            }
            let busy = self.busy.lock().map(|b| b.clone()).unwrap_or_default();
            let guests = self
                .own_domains()
                .await?
                .into_iter()
                .filter_map(|listed| {
                    let instance = listed.name.strip_prefix("instance-")?.to_owned();
                    (!busy.contains(&instance)).then(|| Guest {
                        instance,
                        host: self.config.host.clone(),
                        power: power_of(&listed.state),
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

    /// The live migration's command as Nova's flags make it, each option
    /// one `virsh migrate` knows (its help). That is as far as one machine
    /// goes: a real migration needs a second libvirtd (one daemon refuses
    /// to migrate a guest to itself), and libvirt's test driver has no
    /// peer-to-peer migration (`virsh migrate` against it refuses it, or
    /// with `--copy-storage-inc` at times waits for good).
    #[test]
    fn live_migration_uses_novas_flags() {
        let args = live_migrate_args("instance-u", &migration_uri("10.0.0.2"), "/i/u/migrate.xml");
        assert_eq!(
            args.join(" "),
            "migrate --live --p2p --persistent --undefinesource --copy-storage-inc --xml /i/u/migrate.xml \
             instance-u qemu+tcp://10.0.0.2/system"
        );
        assert_eq!(migration_uri("fd00::2"), "qemu+tcp://[fd00::2]/system");
        let Ok(out) = std::process::Command::new("virsh").args(["help", "migrate"]).output() else {
            eprintln!("virsh not installed: the options are not checked against it");
            return;
        };
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        for option in args.iter().filter(|a| a.starts_with("--")) {
            assert!(help.contains(&format!("[{option}]")) || help.contains(&format!("{option} <")), "{option}: {help}");
        }
    }

    #[test]
    fn virsh_list_parses() {
        let text = " Id   Name                 State\n-------------------------------------\n 3    instance-a   running\n -    instance-b   shut off\n\n";
        assert_eq!(
            parse_list(text),
            vec![("instance-a".to_owned(), "running".to_owned()), ("instance-b".to_owned(), "shut off".to_owned())]
        );
        assert_eq!(power_of("shut off"), GuestPower::Shutoff);
        let titled = " Id   Name         State      Title\n------------------------------------\n 3    instance-a   running    berth-host=h1\n -    instance-b   shut off   \n -    instance-c   shut off   berth-host=h2\n";
        assert_eq!(
            parse_titled_list(titled),
            vec![
                Listed { name: "instance-a".into(), state: "running".into(), title: Some("berth-host=h1".into()) },
                Listed { name: "instance-b".into(), state: "shut off".into(), title: None },
                Listed { name: "instance-c".into(), state: "shut off".into(), title: Some("berth-host=h2".into()) },
            ]
        );
        let xml = with_title("<domain>\n  <name>instance-a</name>\n</domain>", "h<1>");
        assert!(xml.contains("<name>instance-a</name>\n  <title>berth-host=h&lt;1&gt;</title>"), "{xml}");
        assert_eq!(strip_title(&xml), "<domain>\n  <name>instance-a</name>\n</domain>");
        assert_eq!(with_title(&strip_title(&xml), "h2").matches("<title>").count(), 1);
        assert_eq!(power_of("in shutdown"), GuestPower::Other);
    }
}
