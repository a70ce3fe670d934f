//! The compute agent: one process (or one task inside `berth serve
//! --fake-hosts`) plays N fake compute hosts, or (`--driver libvirt`,
//! [`libvirt`]) is one real host running QEMU guests. What a host does
//! with its guests is the [`driver::Driver`] seam; the fake hosts are
//! [`fake`].
//!
//! It talks to the control plane over HTTP only:
//!
//! 1. `POST /agent/v1/register` with its hosts: the control plane creates
//!    their services and compute nodes in the chosen cell and maps them
//!    (host discovery), and answers each compute node's uuid;
//! 2. each host's provider tree goes through the Placement API the way
//!    nova-compute's report client reports it ([`placement`]);
//! 3. `POST /agent/v1/heartbeat` every report interval;
//! 4. `GET /agent/v1/work?agent=ID&wait=S` long-polls for tasks (build,
//!    delete, start, stop, reboot, and the moves: `resize_migrate` on the
//!    source, `resize_finish` on the destination, `resize_confirm` on the
//!    source, `resize_revert` on the destination; `rebuild` on an
//!    evacuation's destination, `destroy_evacuated` on its source once
//!    back; `shelve`, `shelve_offload`, `unshelve`; `pause`, `unpause`,
//!    `suspend`, `resume`, `rescue`, `unrescue`, `soft_delete`, `restore`,
//!    `console_output`; a live migration's
//!    `live_migration_prepare` on the destination, refused by a bad host,
//!    and `live_migrate` on the source, which takes the configured
//!    transfer time); each task runs after
//!    the configured latency and may fail a build or rebuild (failure
//!    rate, or a bad host);
//! 5. `POST /agent/v1/events` reports the transitions (`spawned`,
//!    `build_failed`, `deleted`, `started`, `stopped`, `rebooted`,
//!    `resize_migrated`, `resize_finished`, `resize_confirmed`,
//!    `resize_reverted`, `rebuilt`, `rebuild_failed`, `evacuated_destroyed`,
//!    `shelved`, `offloaded`, `unshelved`, `live_migration_prepared`,
//!    `live_migrated`, `live_migration_failed`, `paused`, `unpaused`,
//!    `suspended`, `resumed`, `rescued`, `unrescued`, `soft_deleted`,
//!    `restored`, `snapshotted`, `snapshot_failed`; and the power sync's
//!    `powered_off`, `powered_on` for real guests), batched. A `rebuild`
//!    task is an evacuation's on its destination and an in-place
//!    rebuild's on the server's own host (the control plane tells them
//!    apart; the agent does the same).
//!
//! No message broker: the kubelet model. In pull mode ([`pull`]) the
//! agent also takes boots from NATS JetStream queues and claims them over
//! the same HTTP API, and takes its hosts' other tasks on their NATS
//! subjects (the long poll stays as the fallback).
//!
//! It must not reach the control plane other than over its HTTP APIs (no
//! store, no compute runtime): it is what a real nova-compute would be.

pub mod driver;
pub mod fake;
pub mod libvirt;
pub mod placement;
pub mod pull;
pub mod reshape;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use uuid::Uuid;

pub use driver::{DiskImage, Driver, TaskRef};

/// The shape of every host an agent plays.
#[derive(Debug, Clone, PartialEq)]
pub struct HostShape {
    /// vCPUs.
    pub vcpus: i64,
    /// Reserved vCPUs.
    pub reserved_vcpus: i64,
    /// Dedicated CPUs (PCPU inventory).
    pub pcpus: i64,
    /// RAM in MiB.
    pub memory_mb: i64,
    /// Reserved RAM in MiB.
    pub reserved_memory_mb: i64,
    /// Local disk in GiB (0: none, no `DISK_GB` inventory: the disk comes
    /// from a sharing provider, as on a Ceph-backed cloud).
    pub disk_gb: i64,
    /// `VCPU` allocation ratio.
    pub cpu_allocation_ratio: f64,
    /// `MEMORY_MB` allocation ratio.
    pub ram_allocation_ratio: f64,
    /// `DISK_GB` allocation ratio.
    pub disk_allocation_ratio: f64,
    /// NUMA nodes as child providers (0: everything on the root).
    pub numa_nodes: usize,
    /// Devices per NUMA node (or per host): `(resource class, count)`.
    pub devices: Vec<(String, i64)>,
    /// Traits of the compute node provider.
    pub traits: Vec<String>,
    /// Virtual GPUs per host (VGPU inventory; 0: none).
    pub vgpus: i64,
    /// Where the host's VGPU inventory lives (see [`VgpuLayout`]).
    pub vgpu_layout: VgpuLayout,
}

/// Where a host reports its VGPU inventory, as the libvirt driver did
/// before and after Stein: on the compute node provider itself (`root`),
/// or on one child provider per physical GPU (`children`). Changing it on
/// a host whose servers hold VGPU needs a reshape (`POST /reshaper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VgpuLayout {
    /// All VGPU on the root provider.
    Root,
    /// VGPU on `pgpus` children named `{node}_pgpu{i}`, each holding
    /// `per_pgpu` units (`None`: the host's VGPUs shared out evenly).
    Children {
        /// Physical GPUs (child providers).
        pgpus: usize,
        /// VGPUs per physical GPU (`None`: an even share of `vgpus`).
        per_pgpu: Option<i64>,
    },
}

impl std::str::FromStr for VgpuLayout {
    type Err = anyhow::Error;

    /// `root`, `children` (two pGPUs), `children:P` or `children:PxV`.
    fn from_str(text: &str) -> anyhow::Result<Self> {
        let text = text.trim();
        if text == "root" {
            return Ok(VgpuLayout::Root);
        }
        let Some(rest) = text.strip_prefix("children") else {
            bail!("a VGPU layout is root, children, children:P or children:PxV, not {text:?}");
        };
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        if rest.is_empty() {
            return Ok(VgpuLayout::Children { pgpus: 2, per_pgpu: None });
        }
        let (pgpus, per_pgpu) = match rest.split_once('x') {
            Some((p, v)) => (p, Some(v.parse::<i64>().with_context(|| format!("bad VGPUs per pGPU in {text:?}"))?)),
            None => (rest, None),
        };
        let pgpus: usize = pgpus.parse().with_context(|| format!("bad pGPU count in {text:?}"))?;
        if pgpus == 0 || per_pgpu.is_some_and(|v| v < 1) {
            bail!("a VGPU layout needs at least one pGPU with at least one VGPU: {text:?}");
        }
        Ok(VgpuLayout::Children { pgpus, per_pgpu })
    }
}

impl Default for HostShape {
    fn default() -> Self {
        HostShape {
            vcpus: 8,
            reserved_vcpus: 0,
            pcpus: 0,
            memory_mb: 16384,
            reserved_memory_mb: 0,
            disk_gb: 200,
            cpu_allocation_ratio: 4.0,
            ram_allocation_ratio: 1.0,
            disk_allocation_ratio: 1.0,
            numa_nodes: 0,
            devices: Vec::new(),
            traits: vec!["COMPUTE_NODE".to_owned()],
            vgpus: 0,
            vgpu_layout: VgpuLayout::Root,
        }
    }
}

/// Everything one agent needs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Control plane base URL (placement at its root, `/agent/v1`).
    pub url: String,
    /// How the agent proves who it is.
    pub auth: AgentAuth,
    /// Extra trusted root certificates (PEM) for an `https` URL, beside
    /// the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// Agent id (unique per process).
    pub agent_id: String,
    /// Host names are `{prefix}{index}`.
    pub prefix: String,
    /// Number of hosts.
    pub count: usize,
    /// First index.
    pub first_index: usize,
    /// Cell to register the hosts in (None: the control plane's default).
    pub cell: Option<String>,
    /// Shape of each host.
    pub shape: HostShape,
    /// How long a build takes.
    pub build_time: Duration,
    /// Fraction of builds that fail (0.0–1.0).
    pub fail_rate: f64,
    /// Hosts whose every build fails (and which refuse incoming live
    /// migrations).
    pub bad_hosts: Vec<String>,
    /// How long a live migration's transfer takes on the source (so tests
    /// can watch it `running`).
    pub live_migration_time: Duration,
    /// Heartbeat interval.
    pub report_interval: Duration,
    /// A request to the control plane without an answer within this time
    /// fails and is retried (`--request-timeout-secs`; the work long
    /// poll gets its wait on top).
    pub request_timeout: Duration,
    /// Concurrent placement requests while reporting trees.
    pub concurrency: usize,
    /// New VGPU layouts while running (`berth agent` sends one on
    /// SIGHUP): every host's tree is reported again, reshaped if needed; a
    /// failed reshape stops the agent with its error.
    pub layout_updates: Option<tokio::sync::watch::Receiver<VgpuLayout>>,
    /// Test breakpoint before every `POST /reshaper`.
    pub reshape_gate: Option<reshape::ReshapeGate>,
    /// Simulated power (`--power-dir`): a host whose marker file
    /// `{dir}/{host}.off` exists is switched off and sends no heartbeat;
    /// once the marker is gone it boots for `power_on_time`, then reports
    /// again.
    pub power_dir: Option<std::path::PathBuf>,
    /// Boot time of a switched-off host (`--power-on-secs`).
    pub power_on_time: Duration,
    /// Pull mode: take boots from the NATS queues ([`pull`]); `None`:
    /// builds come pushed through `/work` only.
    pub pull: Option<pull::PullConfig>,
    /// The driver of real guests (`--driver libvirt`); `None`: fake hosts
    /// ([`fake`]).
    pub driver: Option<Arc<dyn Driver>>,
    /// One host of this name instead of `{prefix}{index}` (a real
    /// hypervisor is one host: `--host`).
    pub host: Option<String>,
    /// How often the power sync asks the driver for its guests' states
    /// (drivers with guests only).
    pub sync_interval: Duration,
    /// Guests still running whose server was deleted: how often to look
    /// and what to do (drivers with guests only).
    pub running_deleted: RunningDeleted,
    /// The hosts' IP as registered (`host_ip`, Nova's `my_ip`: where a
    /// moving guest's destination fetches its disk); `None`: the control
    /// plane's default.
    pub host_ip: Option<String>,
}

impl AgentConfig {
    /// The host names this agent plays.
    pub fn host_names(&self) -> Vec<String> {
        if let Some(host) = &self.host {
            return vec![host.clone()];
        }
        (self.first_index..self.first_index + self.count).map(|i| format!("{}{i}", self.prefix)).collect()
    }
}

/// How an agent authenticates to the control plane.
#[derive(Debug, Clone)]
pub enum AgentAuth {
    /// A fixed `X-Auth-Token` (noauth2: `admin`).
    Token(String),
    /// A Keystone user's token, issued and renewed by the session.
    Keystone(Arc<berth_identity::Session>),
    /// keystonemiddleware's identity headers, for a control plane in
    /// `trusted-headers` mode reached directly (the in-process hosts).
    TrustedHeaders {
        /// `X-User-Id` (and `X-Project-Id`).
        user: String,
        /// `X-Roles`.
        roles: String,
    },
}

/// The HTTP link to the control plane.
#[derive(Debug, Clone)]
pub struct Link {
    client: reqwest::Client,
    base: String,
    auth: AgentAuth,
    request_timeout: Duration,
}

impl Link {
    /// A link to `base` authenticated by `auth`. A request that has no
    /// answer within `request_timeout` (a long poll: that plus its wait)
    /// fails, so a lost connection or a stuck control plane cannot hold a
    /// task, a report or a permit for good: its caller retries.
    pub fn new(
        base: &str,
        auth: AgentAuth,
        ca_file: Option<&std::path::Path>,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        // A pooled connection idle for 2 s is not reused: the control
        // plane closes idle connections after its keep-alive timeout (5 s
        // by default), and a request sent just as it does would fail.
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .pool_idle_timeout(Duration::from_secs(2))
            .timeout(request_timeout)
            .connect_timeout(request_timeout.min(Duration::from_secs(10)));
        let client = berth_identity::add_trusted_roots(builder, ca_file)?.build()?;
        Ok(Link { client, base: base.trim_end_matches('/').to_owned(), auth, request_timeout })
    }

    async fn token(&self) -> anyhow::Result<String> {
        match &self.auth {
            AgentAuth::Token(token) => Ok(token.clone()),
            AgentAuth::Keystone(session) => Ok(session.token().await?),
            AgentAuth::TrustedHeaders { .. } => Ok(String::new()),
        }
    }

    /// Send what `build` makes with a token; a Keystone token the control
    /// plane refuses (expired, revoked) is replaced once.
    async fn send(&self, build: impl Fn(&str) -> reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        self.try_send(|token| Ok(build(token))).await
    }

    /// [`Link::send`] for a request whose making can fail (a body opened
    /// from a file, once for each sending).
    async fn try_send(
        &self,
        build: impl Fn(&str) -> anyhow::Result<reqwest::RequestBuilder>,
    ) -> anyhow::Result<reqwest::Response> {
        let token = self.token().await?;
        let request = match &self.auth {
            AgentAuth::TrustedHeaders { user, roles } => build(&token)?
                .header("X-User-Id", user)
                .header("X-Project-Id", user)
                .header("X-Roles", roles)
                .header("X-Identity-Status", "Confirmed"),
            _ => build(&token)?,
        };
        let response = request.send().await?;
        if response.status() == reqwest::StatusCode::UNAUTHORIZED {
            if let AgentAuth::Keystone(session) = &self.auth {
                session.invalidate(&token).await;
                let token = self.token().await?;
                return Ok(build(&token)?.send().await?);
            }
        }
        Ok(response)
    }

    /// A GET of `path` under the control plane's base with `headers`,
    /// answered within `timeout` (the libvirt driver reads images and
    /// image data this way).
    pub async fn get(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        self.send(|token| {
            let mut req = self.client.get(&url).header("X-Auth-Token", token).timeout(timeout);
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            req
        })
        .await
    }

    /// A placement request (microversion 1.39).
    pub async fn placement(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<reqwest::Response> {
        self.placement_at(method, path, body, "placement 1.39").await
    }

    /// A placement request at `version` (`placement 1.37`).
    pub async fn placement_at(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        version: &str,
    ) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        self.send(|token| {
            let req = self
                .client
                .request(method.clone(), &url)
                .header("X-Auth-Token", token)
                .header("OpenStack-API-Version", version);
            match &body {
                Some(body) => req.json(body),
                None => req,
            }
        })
        .await
    }

    /// Upload `data` as image `image`'s data through the image API
    /// (`PUT /image/v2/images/{id}/file`); returns the status. A file is
    /// streamed from disk (with its length declared), never held whole.
    pub async fn upload_image(&self, image: &str, data: &DiskImage) -> anyhow::Result<u16> {
        let url = format!("{}/image/v2/images/{image}/file", self.base);
        let resp = self
            .try_send(|token| {
                let body = match data {
                    DiskImage::Bytes(bytes) => reqwest::Body::from(bytes.clone()),
                    DiskImage::File(path) => {
                        let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
                        let len = file.metadata()?.len();
                        reqwest::Body::wrap(driver::FileBody::new(tokio::fs::File::from_std(file), len))
                    }
                };
                Ok(self
                    .client
                    .put(&url)
                    .header("X-Auth-Token", token)
                    .header("Content-Type", "application/octet-stream")
                    .timeout(Duration::from_secs(3600))
                    .body(body))
            })
            .await?;
        Ok(resp.status().as_u16())
    }

    /// An agent-API request; returns status and JSON body (Null when none).
    pub async fn agent(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        self.agent_within(method, path, body, self.request_timeout).await
    }

    /// The work long poll of `agent`: the control plane may hold it for
    /// up to `wait` (whole seconds) before it answers. `guests`: the tasks
    /// that make or move a guest carry it (`server`).
    pub async fn work_poll(&self, agent: &str, wait: Duration, guests: bool) -> anyhow::Result<(u16, Value)> {
        let guests = if guests { "&guests=1" } else { "" };
        let path = format!("/work?agent={agent}&wait={}{guests}", wait.as_secs());
        self.agent_within(reqwest::Method::GET, &path, None, wait + self.request_timeout).await
    }

    async fn agent_within(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}/agent/v1{path}", self.base);
        let resp = self
            .send(|token| {
                let req = self.client.request(method.clone(), &url).header("X-Auth-Token", token).timeout(timeout);
                match &body {
                    Some(body) => req.json(body),
                    None => req,
                }
            })
            .await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        let value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
        Ok((status, value))
    }
}

/// How long the control plane may hold the work long poll.
const WORK_WAIT: Duration = Duration::from_secs(20);

/// A registered host.
#[derive(Debug, Clone)]
struct Registered {
    host: String,
    node: String,
    node_uuid: Uuid,
}

async fn register(link: &Link, config: &AgentConfig) -> anyhow::Result<Vec<Registered>> {
    let shape = &config.shape;
    let hypervisor = config.driver.as_ref().map_or("fake", |d| d.hypervisor_type());
    let hosts: Vec<Value> = config
        .host_names()
        .into_iter()
        .map(|h| {
            let mut host = json!({"host": h, "node": h, "vcpus": shape.vcpus, "memory_mb": shape.memory_mb,
                                  "local_gb": shape.disk_gb, "hypervisor_type": hypervisor});
            if let Some(ip) = &config.host_ip {
                host["host_ip"] = json!(ip);
            }
            host
        })
        .collect();
    // In pull mode the control plane sends this agent's tasks on its
    // hosts' NATS subjects ([`pull`]).
    let mut body = json!({"agent": config.agent_id, "hosts": hosts, "pull": config.pull.is_some()});
    if let Some(cell) = &config.cell {
        body["cell"] = json!(cell);
    }
    // Registration's work grows with the hosts (a service row and a
    // compute node each): 10 ms a host on top of the timeout.
    let timeout = link.request_timeout + Duration::from_millis(10 * config.count as u64);
    let (status, answer) = link.agent_within(reqwest::Method::POST, "/register", Some(body), timeout).await?;
    if status != 200 {
        bail!("register: HTTP {status}: {answer}");
    }
    answer["hosts"]
        .as_array()
        .context("register answer without hosts")?
        .iter()
        .map(|h| {
            Ok(Registered {
                host: h["host"].as_str().context("host")?.to_owned(),
                node: h["node"].as_str().context("node")?.to_owned(),
                node_uuid: h["node_uuid"].as_str().and_then(|u| Uuid::parse_str(u).ok()).context("node_uuid")?,
            })
        })
        .collect()
}

/// Report every host's provider tree with `shape`, `concurrency` hosts at
/// a time, reshaping the trees whose inventory moves
/// ([`reshape::report_tree`]).
async fn report_trees(
    link: &Link,
    config: &AgentConfig,
    shape: &HostShape,
    hosts: &[Registered],
) -> anyhow::Result<()> {
    let queue = Arc::new(Mutex::new(hosts.to_vec()));
    let mut workers = Vec::new();
    for _ in 0..config.concurrency.max(1) {
        let queue = queue.clone();
        let link = link.clone();
        let shape = shape.clone();
        let gate = config.reshape_gate.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some(host) = next else { return Ok::<(), anyhow::Error>(()) };
                let tree = placement::desired_tree(&host.node, &shape);
                reshape::report_tree(&link, &host.host, host.node_uuid, &tree, gate.as_ref())
                    .await
                    .with_context(|| format!("reporting the provider tree of {}", host.host))?;
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    Ok(())
}

/// Run one task through the agent's driver and return its event (Null:
/// nothing to report). The dispatch is one arm per task kind.
pub(crate) async fn run_task(config: &AgentConfig, task: &Value) -> Value {
    let kind = task["kind"].as_str().unwrap_or("");
    let instance = task["instance"].as_str().unwrap_or("");
    let host = task["host"].as_str().unwrap_or("");
    let fake;
    let driver: &dyn Driver = match &config.driver {
        Some(driver) => driver.as_ref(),
        None => {
            fake = fake::FakeDriver { config };
            &fake
        }
    };
    let t = TaskRef { kind, instance, host, body: task };
    // The public key of the server's key pair, on a spawn: the libvirt
    // driver writes it to the config drive; the fake one only takes it.
    if let Some(key_data) = task.get("key_data").and_then(Value::as_str) {
        tracing::debug!(%instance, key_type = key_data.split(' ').next().unwrap_or(""), "key pair taken for the guest");
    }
    let event = |kind: &str| json!({"instance": instance, "host": host, "kind": kind, "task": task["id"]});
    let failed = |kind: &str, message: String| json!({"instance": instance, "host": host, "kind": kind, "task": task["id"], "message": message});
    // A failure without an event of its own is logged; the task stays
    // open on the control plane (the operator sees the task state).
    let outcome = |result: Result<(), String>, kind: &str| match result {
        Ok(()) => event(kind),
        Err(message) => {
            tracing::warn!(%instance, %host, task = task["kind"].as_str().unwrap_or(""), %message, "task failed");
            Value::Null
        }
    };
    match kind {
        "build" => match driver.spawn(t).await {
            Ok(()) => event("spawned"),
            Err(message) => failed("build_failed", message),
        },
        "rebuild" => match driver.rebuild(t).await {
            Ok(()) => event("rebuilt"),
            Err(message) => failed("rebuild_failed", message),
        },
        "delete" => outcome(driver.destroy(t).await, "deleted"),
        "destroy_evacuated" => outcome(driver.destroy(t).await, "evacuated_destroyed"),
        "start" => outcome(driver.power_on(t).await, "started"),
        "stop" => outcome(driver.power_off(t).await, "stopped"),
        "reboot" => outcome(driver.reboot(t).await, "rebooted"),
        "pause" => outcome(driver.pause(t).await, "paused"),
        "unpause" => outcome(driver.unpause(t).await, "unpaused"),
        "suspend" => outcome(driver.suspend(t).await, "suspended"),
        "resume" => outcome(driver.resume(t).await, "resumed"),
        // A cold move's step that fails is reported (`move_failed`): the
        // server goes to ERROR with the failure as its fault, as Nova's.
        "resize_migrate" | "resize_finish" | "resize_confirm" | "resize_revert" => {
            let done = match kind {
                "resize_migrate" => "resize_migrated",
                "resize_finish" => "resize_finished",
                "resize_confirm" => "resize_confirmed",
                _ => "resize_reverted",
            };
            match driver.move_step(t).await {
                Ok(()) => event(done),
                Err(message) => {
                    tracing::warn!(%instance, %host, task = kind, %message, "move step failed");
                    failed("move_failed", message)
                }
            }
        }
        "shelve" => {
            // The `<name>-shelved` snapshot: the disk goes to the image the
            // task names, as for a snapshot. A failed upload leaves the
            // image waiting and the shelve goes on (logged).
            if let Some(image) = t.body["image"].as_str() {
                let taken = match driver.snapshot(t).await {
                    Ok(data) => upload(config, image, data).await,
                    Err(why) => Err(why),
                };
                if let Err(why) = taken {
                    tracing::warn!(%instance, image, error = %why, "shelve snapshot not uploaded");
                }
            }
            outcome(driver.move_step(t).await, "shelved")
        }
        "shelve_offload" => outcome(driver.move_step(t).await, "offloaded"),
        "unshelve" => outcome(driver.move_step(t).await, "unshelved"),
        "live_migration_prepare" => match driver.live_migration_prepare(t).await {
            Ok(()) => event("live_migration_prepared"),
            Err(message) => failed("live_migration_failed", message),
        },
        "live_migrate" => outcome(driver.live_migrate(t).await, "live_migrated"),
        "rescue" => outcome(driver.rescue(t).await, "rescued"),
        "unrescue" => outcome(driver.unrescue(t).await, "unrescued"),
        // A soft delete powers the guest off and keeps it; a restore
        // powers it on again (Nova's `soft_delete` and `restore`).
        "soft_delete" => outcome(driver.power_off(t).await, "soft_deleted"),
        "restore" => outcome(driver.power_on(t).await, "restored"),
        "snapshot" => snapshot(config, driver, t).await,
        "console_output" => match driver.console_output(t).await {
            Ok(log) => failed("console_output", log),
            Err(message) => {
                tracing::warn!(%instance, %message, "console output failed");
                failed("console_output", String::new())
            }
        },
        other => {
            tracing::warn!(kind = other, "unknown task kind");
            Value::Null
        }
    }
}

/// A `snapshot` task (`createImage`, `createBackup`): the driver's disk
/// image uploaded to the image the task names through the image API, then
/// `snapshotted`; `snapshot_failed` when there is no image to upload to,
/// the driver cannot take it, or the image API refuses. An image already
/// taking or holding data (a task handed out again) counts as done.
async fn snapshot(config: &AgentConfig, driver: &dyn Driver, t: TaskRef<'_>) -> Value {
    let report = |kind: &str, message: Option<String>| {
        let mut event = json!({"instance": t.instance, "host": t.host, "kind": kind, "task": t.body["id"]});
        if let Some(message) = message {
            event["message"] = json!(message);
        }
        event
    };
    let Some(image) = t.body["image"].as_str() else {
        return report("snapshot_failed", Some(format!("No image to upload the snapshot of {} to.", t.instance)));
    };
    let data = match driver.snapshot(t).await {
        Ok(data) => data,
        Err(message) => return report("snapshot_failed", Some(message)),
    };
    match upload(config, image, data).await {
        Ok(()) => report("snapshotted", None),
        Err(why) => report("snapshot_failed", Some(format!("Uploading image {image} failed: {why}"))),
    }
}

/// Upload a driver's disk image to `image` through the image API; an
/// image already taking or holding data (a task handed out again) counts
/// as done.
async fn upload(config: &AgentConfig, image: &str, data: DiskImage) -> Result<(), String> {
    let sent = match Link::new(&config.url, config.auth.clone(), config.ca_file.as_deref(), config.request_timeout) {
        Ok(link) => match link.upload_image(image, &data).await {
            Ok(204 | 409) => Ok(()),
            Ok(status) => Err(format!("HTTP {status}")),
            Err(err) => Err(format!("{err:#}")),
        },
        Err(err) => Err(err.to_string()),
    };
    if let DiskImage::File(path) = &data {
        if let Err(err) = tokio::fs::remove_file(path).await {
            tracing::warn!(path = %path.display(), error = %err, "removing an uploaded disk image");
        }
    }
    sent
}

/// The fake driver's disk image: 64 KiB naming the server and the image,
/// the same for the same pair (tests check its checksum).
pub fn fake_disk(instance: &str, image: &str) -> Vec<u8> {
    let line = format!("berth fake disk of server {instance} for image {image}\n");
    line.bytes().cycle().take(64 * 1024).collect()
}

/// The simulated power of an agent's hosts (see `AgentConfig::power_dir`).
#[derive(Debug, Default)]
struct PowerSim {
    /// Hosts switched off (marker seen), or booting: when they are up.
    down: HashMap<String, Option<std::time::Instant>>,
}

impl PowerSim {
    /// The hosts running now (sending heartbeats).
    fn running(&mut self, config: &AgentConfig, hosts: &[String]) -> Vec<String> {
        let Some(dir) = &config.power_dir else { return hosts.to_vec() };
        let now = std::time::Instant::now();
        let mut up = Vec::with_capacity(hosts.len());
        for host in hosts {
            let off = dir.join(format!("{host}.off")).exists();
            if off {
                if !self.down.contains_key(host) {
                    tracing::info!(%host, "fake host switched off");
                }
                self.down.insert(host.clone(), None);
                continue;
            }
            match self.down.get(host).copied() {
                None => up.push(host.clone()),
                Some(None) => {
                    tracing::info!(%host, boot = ?config.power_on_time, "fake host switched on; booting");
                    self.down.insert(host.clone(), Some(now + config.power_on_time));
                    if config.power_on_time.is_zero() {
                        self.down.remove(host);
                        up.push(host.clone());
                    }
                }
                Some(Some(at)) if now >= at => {
                    tracing::info!(%host, "fake host booted");
                    self.down.remove(host);
                    up.push(host.clone());
                }
                Some(Some(_)) => {}
            }
        }
        up
    }
}

/// Nova's `_sync_power_states`: every `interval` the driver lists its
/// guests; a guest found shut off (or crashed) that was not so at the
/// last pass (or at the first pass, after a restart) is reported as
/// `powered_off`, one found running that was shut off at the last pass
/// as `powered_on`. The control plane takes `powered_off` only for an
/// ACTIVE server with no task on that host (so a stop in flight is not
/// overtaken), and `powered_on` only for a STOPPED one with no task,
/// which it stops again.
async fn power_sync(
    driver: Arc<dyn Driver>,
    link: Link,
    config: Arc<AgentConfig>,
    events: tokio::sync::mpsc::UnboundedSender<Value>,
) {
    use driver::GuestPower;
    let interval = config.sync_interval;
    let mut last: HashMap<String, GuestPower> = HashMap::new();
    let mut deleted_look: Option<std::time::Instant> = None;
    let mut reported: HashSet<String> = HashSet::new();
    loop {
        match driver.guests().await {
            Ok(None) => return,
            Ok(Some(guests)) => {
                let due = deleted_look.is_none_or(|at| at.elapsed() >= config.running_deleted.poll);
                if due && config.running_deleted.action != RunningDeletedAction::Noop {
                    deleted_look = Some(std::time::Instant::now());
                    running_deleted(&*driver, &link, &config, &guests, &mut reported).await;
                }
                let mut seen = HashMap::with_capacity(guests.len());
                for guest in guests {
                    let before = last.get(&guest.instance).copied();
                    let off = matches!(guest.power, GuestPower::Shutoff | GuestPower::Crashed);
                    if off && before != Some(guest.power) {
                        tracing::info!(instance = %guest.instance, power = ?guest.power, "guest found powered off");
                        let _ =
                            events.send(json!({"instance": guest.instance, "host": guest.host, "kind": "powered_off"}));
                    }
                    // Running again after being seen off: started by berth
                    // (a start, a resume, a reboot: the control plane then
                    // has a task or no STOPPED row and ignores it) or behind
                    // its back (a STOPPED server is stopped again).
                    let was_off = matches!(before, Some(GuestPower::Shutoff | GuestPower::Crashed));
                    if guest.power == GuestPower::Running && was_off {
                        tracing::info!(instance = %guest.instance, "guest found running again");
                        let _ =
                            events.send(json!({"instance": guest.instance, "host": guest.host, "kind": "powered_on"}));
                    }
                    // A passing state (QEMU starts paused; a pause by
                    // berth) keeps the last settled one.
                    match (guest.power, before) {
                        (GuestPower::Paused | GuestPower::Other, Some(before)) => seen.insert(guest.instance, before),
                        (GuestPower::Paused | GuestPower::Other, None) => None,
                        (power, _) => seen.insert(guest.instance, power),
                    };
                }
                last = seen;
            }
            Err(err) => tracing::warn!(error = %err, "listing the guests failed"),
        }
        tokio::time::sleep(interval).await;
    }
}

/// What the agent does with a guest still running whose server was
/// deleted (Nova's `running_deleted_instance_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunningDeletedAction {
    /// Nothing, not even a look.
    Noop,
    /// Reported in the agent's log (once per guest), left alone.
    #[default]
    Log,
    /// Reported and powered off (the domain and its disks are kept).
    Shutdown,
    /// Reported, destroyed and removed with its disks.
    Reap,
}

/// The look for guests whose server was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningDeleted {
    /// What to do with them.
    pub action: RunningDeletedAction,
    /// How often to look (and once at the start).
    pub poll: Duration,
}

impl Default for RunningDeleted {
    fn default() -> Self {
        RunningDeleted { action: RunningDeletedAction::Log, poll: Duration::from_secs(1800) }
    }
}

/// Ask the control plane which of this host's guests belong to deleted
/// servers (`POST /agent/v1/guests`) and act on them as configured. A
/// guest berth never made is not its to judge: only deleted servers'
/// rows on this host count.
async fn running_deleted(
    driver: &dyn Driver,
    link: &Link,
    config: &AgentConfig,
    guests: &[driver::Guest],
    reported: &mut HashSet<String>,
) {
    let mut by_host: HashMap<&str, Vec<&str>> = HashMap::new();
    for guest in guests {
        by_host.entry(guest.host.as_str()).or_default().push(guest.instance.as_str());
    }
    for (host, instances) in by_host {
        let body = json!({"agent": config.agent_id, "host": host, "instances": instances});
        let deleted: Vec<String> = match link.agent(reqwest::Method::POST, "/guests", Some(body)).await {
            Ok((200, answer)) => answer["deleted"]
                .as_array()
                .map(|d| d.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
            Ok((status, answer)) => {
                tracing::warn!(%host, status, %answer, "asking which guests are deleted servers failed");
                continue;
            }
            Err(err) => {
                tracing::warn!(%host, error = %err, "asking which guests are deleted servers failed");
                continue;
            }
        };
        for instance in deleted {
            let action = config.running_deleted.action;
            if reported.insert(instance.clone()) {
                tracing::warn!(
                    %instance, %host, ?action,
                    "a guest is running whose server was deleted (running_deleted_instance_action)"
                );
            }
            let task = json!({"kind": "delete", "instance": instance, "host": host, "id": format!("{instance}:deleted@{host}")});
            let t = TaskRef { kind: "delete", instance: &instance, host, body: &task };
            let done = match action {
                RunningDeletedAction::Shutdown => driver.power_off(t).await,
                RunningDeletedAction::Reap => driver.destroy(t).await,
                RunningDeletedAction::Noop | RunningDeletedAction::Log => Ok(()),
            };
            if let Err(err) = done {
                tracing::warn!(%instance, %host, error = %err, "acting on a deleted server's guest failed");
            }
        }
    }
}

/// Run the agent until `shutdown` resolves.
pub async fn run(config: AgentConfig, shutdown: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
    let link = Link::new(&config.url, config.auth.clone(), config.ca_file.as_deref(), config.request_timeout)?;
    let hosts = register(&link, &config).await?;
    let mut shape = config.shape.clone();
    let mut layout_updates = config.layout_updates.clone();
    if let Some(updates) = &mut layout_updates {
        shape.vgpu_layout = *updates.borrow_and_update();
    }
    report_trees(&link, &config, &shape, &hosts).await?;
    tracing::info!(agent = %config.agent_id, hosts = hosts.len(), "agent registered and reported its hosts");
    let config = Arc::new(config);
    let host_names: Vec<String> = hosts.iter().map(|h| h.host.clone()).collect();

    // Heartbeats.
    let heartbeat = {
        let (link, config, host_names) = (link.clone(), config.clone(), host_names.clone());
        tokio::spawn(async move {
            let mut power = PowerSim::default();
            loop {
                let host_names = power.running(&config, &host_names);
                let body = json!({"agent": config.agent_id, "hosts": host_names});
                match link.agent(reqwest::Method::POST, "/heartbeat", Some(body)).await {
                    Ok((404, _)) => {
                        if let Err(err) = register(&link, &config).await {
                            tracing::warn!(error = %err, "re-register failed");
                        }
                    }
                    Ok(_) => {}
                    Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
                }
                tokio::time::sleep(config.report_interval).await;
            }
        })
    };

    // Events are batched: tasks push them here, one reporter posts them.
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let reporter = {
        let (link, config, in_flight) = (link.clone(), config.clone(), in_flight.clone());
        tokio::spawn(async move {
            while let Some(first) = events_rx.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = events_rx.try_recv() {
                    batch.push(more);
                    if batch.len() >= 500 {
                        break;
                    }
                }
                let body = json!({"agent": config.agent_id, "events": batch});
                for attempt in 0..5u32 {
                    match link.agent(reqwest::Method::POST, "/events", Some(body.clone())).await {
                        Ok((200, _)) => break,
                        Ok((status, answer)) => {
                            tracing::warn!(status, %answer, "reporting events refused");
                            break;
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, attempt, "reporting events failed; retrying");
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
                        }
                    }
                }
                if let Ok(mut set) = in_flight.lock() {
                    for event in &batch {
                        if let Some(task) = event["task"].as_str() {
                            set.remove(task);
                        }
                    }
                }
            }
        })
    };

    // Power sync: what the hypervisor says about its guests becomes
    // events (drivers with real guests only).
    let sync = config
        .driver
        .clone()
        .map(|driver| tokio::spawn(power_sync(driver, link.clone(), config.clone(), events_tx.clone())));

    let (in_flight_pull, events_pull) = (in_flight.clone(), events_tx.clone());
    // Work loop.
    let work = {
        let (link, config) = (link.clone(), config.clone());
        tokio::spawn(async move {
            loop {
                let (status, body) = match link
                    .work_poll(&config.agent_id, WORK_WAIT, config.driver.as_ref().is_some_and(|d| d.needs_guest()))
                    .await
                {
                    Ok(answer) => answer,
                    Err(err) => {
                        tracing::warn!(error = %err, "work poll failed");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                if status == 404 {
                    if let Err(err) = register(&link, &config).await {
                        tracing::warn!(error = %err, "re-register failed");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    continue;
                }
                for task in body["tasks"].as_array().cloned().unwrap_or_default() {
                    let id = task["id"].as_str().unwrap_or("").to_owned();
                    let fresh = in_flight.lock().map(|mut s| s.insert(id)).unwrap_or(false);
                    if !fresh {
                        continue;
                    }
                    let (config, events_tx) = (config.clone(), events_tx.clone());
                    tokio::spawn(async move {
                        let event = run_task(&config, &task).await;
                        if !event.is_null() {
                            let _ = events_tx.send(event);
                        }
                    });
                }
            }
        })
    };

    // Pull mode: boots come from the queues.
    let puller = config.pull.clone().map(|pull| {
        let counters = Arc::new(pull::PullCounters::default());
        tokio::spawn(pull::run(link.clone(), config.clone(), pull, events_pull, in_flight_pull, counters))
    });

    // Layout changes (SIGHUP): report every tree again, reshaping where
    // inventory moves. A failure stops the agent: its hosts' trees are
    // then as before the failed reshape (it is one write), and running on
    // with a tree the operator did not ask for would hide the problem.
    let relayout = async {
        let Some(mut updates) = layout_updates else { return std::future::pending::<anyhow::Result<()>>().await };
        loop {
            if updates.changed().await.is_err() {
                return std::future::pending().await;
            }
            let layout = *updates.borrow_and_update();
            if layout == shape.vgpu_layout {
                continue;
            }
            tracing::info!(agent = %config.agent_id, ?layout, "VGPU layout changed; reporting the trees again");
            shape.vgpu_layout = layout;
            report_trees(&link, &config, &shape, &hosts).await?;
        }
    };
    let outcome = tokio::select! {
        () = shutdown => Ok(()),
        failed = relayout => failed,
    };
    heartbeat.abort();
    work.abort();
    if let Some(sync) = sync {
        sync.abort();
    }
    if let Some(puller) = puller {
        puller.abort();
    }
    reporter.abort();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_rate_is_roughly_honoured_and_bad_hosts_always_fail() {
        use crate::fake::fails;
        let config = test_config(0.1, vec!["bad".into()]);
        let failed = (0..10_000).filter(|_| fails(&config, "good", &Uuid::new_v4().to_string())).count();
        assert!((700..1300).contains(&failed), "{failed} of 10000 failed at rate 0.1");
        assert!(fails(&config, "bad", "x"));
        // Each host tosses its own coin for the same instance: a build that
        // failed once is not doomed on every alternate.
        let doomed = (0..2_000)
            .map(|_| Uuid::new_v4().to_string())
            .filter(|i| (0..3).all(|h| fails(&config, &format!("good{h}"), i)))
            .count();
        assert!(doomed < 20, "{doomed} of 2000 failed on three hosts at rate 0.1 (independent: ~2)");
        assert_eq!(config.host_names(), vec!["h0".to_owned()]);
    }

    /// An agent configuration for unit tests (fake hosts `h0`…).
    fn test_config(fail_rate: f64, bad_hosts: Vec<String>) -> AgentConfig {
        AgentConfig {
            url: String::new(),
            auth: AgentAuth::Token(String::new()),
            ca_file: None,
            agent_id: "a".into(),
            prefix: "h".into(),
            count: 1,
            first_index: 0,
            cell: None,
            shape: HostShape::default(),
            build_time: Duration::ZERO,
            fail_rate,
            bad_hosts,
            live_migration_time: Duration::ZERO,
            report_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            concurrency: 1,
            layout_updates: None,
            reshape_gate: None,
            power_dir: None,
            power_on_time: Duration::ZERO,
            pull: None,
            driver: None,
            host: None,
            sync_interval: Duration::from_secs(10),
            running_deleted: RunningDeleted::default(),
            host_ip: None,
        }
    }

    /// A driver whose guests' power states follow a script, one step per
    /// sync pass.
    #[derive(Debug)]
    struct Scripted(Mutex<Vec<Vec<(&'static str, driver::GuestPower)>>>);

    impl Driver for Scripted {
        fn hypervisor_type(&self) -> &'static str {
            "scripted"
        }
        fn spawn<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn rebuild<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn destroy<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn power_off<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn power_on<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn reboot<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn pause<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn unpause<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn suspend<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn resume<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn console_output<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, String> {
            Box::pin(async { Ok(String::new()) })
        }
        fn live_migration_prepare<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn live_migrate<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn rescue<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn unrescue<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn snapshot<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, DiskImage> {
            Box::pin(async { Ok(DiskImage::Bytes(Vec::new())) })
        }
        fn move_step<'a>(&'a self, _: TaskRef<'a>) -> driver::DriverFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn guests(&self) -> driver::DriverFuture<'_, Option<Vec<driver::Guest>>> {
            let step =
                self.0.lock().ok().and_then(|mut steps| if steps.is_empty() { None } else { Some(steps.remove(0)) });
            Box::pin(async move {
                let Some(step) = step else { return Ok(None) };
                Ok(Some(
                    step.into_iter()
                        .map(|(i, power)| driver::Guest { instance: i.to_owned(), host: "h".to_owned(), power })
                        .collect(),
                ))
            })
        }
    }

    /// The power sync reports a guest found off at the first pass (an
    /// agent restart) and then once per transition to off or crashed, and
    /// once a guest seen off runs again; a guest running, paused or
    /// staying off is not reported again.
    #[tokio::test]
    async fn the_power_sync_reports_each_power_transition_once() {
        use driver::GuestPower::{Crashed, Paused, Running, Shutoff};
        let script = vec![
            vec![("a", Shutoff), ("b", Running)],
            vec![("a", Shutoff), ("b", Running)],
            vec![("a", Paused), ("b", Paused)],
            vec![("a", Running), ("b", Paused)],
            vec![("a", Shutoff), ("b", Crashed)],
            vec![("a", Shutoff), ("b", Crashed)],
        ];
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // No look for deleted servers' guests (there is no control plane).
        let config = AgentConfig {
            sync_interval: Duration::from_millis(1),
            running_deleted: RunningDeleted { action: RunningDeletedAction::Noop, poll: Duration::from_secs(1) },
            ..test_config(0.0, Vec::new())
        };
        let link = Link::new("http://127.0.0.1:9", config.auth.clone(), None, config.request_timeout).expect("link");
        power_sync(Arc::new(Scripted(Mutex::new(script))), link, Arc::new(config), tx).await;
        let mut reported = Vec::new();
        while let Ok(event) = rx.try_recv() {
            assert_eq!(event["host"], "h");
            reported.push(format!(
                "{} {}",
                event["kind"].as_str().unwrap_or(""),
                event["instance"].as_str().unwrap_or("")
            ));
        }
        assert_eq!(reported, ["powered_off a", "powered_on a", "powered_off a", "powered_off b"]);
    }

    /// A control plane that takes the connection and never answers: the
    /// request fails after the timeout (the long poll after its wait on
    /// top) instead of holding its caller for good.
    #[tokio::test]
    async fn a_request_without_an_answer_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let timeout = Duration::from_millis(300);
        let link = Link::new(&format!("http://{addr}"), AgentAuth::Token("t".into()), None, timeout).expect("link");
        let started = std::time::Instant::now();
        let answer = link.agent(reqwest::Method::POST, "/events", Some(serde_json::json!({}))).await;
        assert!(answer.is_err(), "{answer:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let started = std::time::Instant::now();
        let answer = link.work_poll("a", Duration::from_secs(1), false).await;
        assert!(answer.is_err(), "{answer:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(6), "{took:?}");
        held.abort();
    }
}
