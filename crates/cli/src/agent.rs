//! `berth agent`: run N fake compute hosts against a berth control plane
//! (the `berth-agent` crate does the work; this module reads flags, the
//! environment and an optional YAML file, file < environment < flags).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use berth_agent::{AgentConfig, HostShape, VgpuLayout};

/// `berth agent`: run hosts, or (`berth agent credential …`) manage
/// their credentials.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct AgentCmd {
    #[command(subcommand)]
    action: Option<AgentAction>,
    #[command(flatten)]
    opts: AgentOpts,
}

#[derive(Debug, clap::Subcommand)]
enum AgentAction {
    /// Issue, list and revoke per-host agent credentials (embedded
    /// identity, without Keystone).
    Credential(crate::credential_cmd::CredentialOpts),
}

/// Run `berth agent …`.
pub(crate) fn dispatch(cmd: AgentCmd) -> anyhow::Result<()> {
    match cmd.action {
        Some(AgentAction::Credential(opts)) => crate::credential_cmd::run(opts),
        None => run(cmd.opts),
    }
}

/// Options of `berth agent`.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct AgentOpts {
    /// Control plane URL (placement at its root, the agent API at /agent/v1).
    #[arg(long, env = "BERTH_AGENT_URL")]
    pub(crate) url: Option<String>,
    /// X-Auth-Token (noauth2: `admin`). Ignored with `--keystone-url`.
    #[arg(long, env = "BERTH_AGENT_TOKEN")]
    pub(crate) token: Option<String>,
    /// File holding this host's agent credential (`berth agent credential
    /// create HOST --output FILE`): the agent authenticates with it
    /// instead of `--token`. Without Keystone, the way an agent has an
    /// identity of its own.
    #[arg(long, env = "BERTH_AGENT_CREDENTIAL_FILE")]
    pub(crate) credential_file: Option<PathBuf>,
    /// Extra trusted root certificates (PEM) for an `https` URL.
    #[arg(long, env = "BERTH_AGENT_CA_FILE")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Keystone to authenticate with (a service user's password
    /// credentials); the agent then sends its own Keystone token.
    #[arg(long, env = "BERTH_KEYSTONE_URL")]
    pub(crate) keystone_url: Option<String>,
    /// Keystone user name of this agent.
    #[arg(long, env = "BERTH_KEYSTONE_USER")]
    pub(crate) keystone_user: Option<String>,
    /// Keystone password of this agent.
    #[arg(long, env = "BERTH_KEYSTONE_PASSWORD", hide_env_values = true)]
    pub(crate) keystone_password: Option<String>,
    /// Keystone project the agent's token is scoped to (default `service`).
    #[arg(long, env = "BERTH_KEYSTONE_PROJECT")]
    pub(crate) keystone_project: Option<String>,
    /// Keystone domain of the user and project (default `Default`).
    #[arg(long, env = "BERTH_KEYSTONE_DOMAIN")]
    pub(crate) keystone_domain: Option<String>,
    /// Extra trusted root certificates (PEM) for an `https` Keystone.
    #[arg(long, env = "BERTH_KEYSTONE_CA_FILE")]
    pub(crate) keystone_ca_file: Option<PathBuf>,
    /// Agent id (default: derived from the process id and a random suffix).
    #[arg(long)]
    pub(crate) agent_id: Option<String>,
    /// Number of hosts this process plays.
    #[arg(long)]
    pub(crate) hosts: Option<usize>,
    /// Host name prefix (hosts are PREFIX0, PREFIX1, ...).
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// Index of the first host.
    #[arg(long)]
    pub(crate) first_index: Option<usize>,
    /// Cell to register the hosts in (default: the control plane's default cell).
    #[arg(long)]
    pub(crate) cell: Option<String>,
    /// vCPUs per host.
    #[arg(long)]
    pub(crate) vcpus: Option<i64>,
    /// Reserved vCPUs per host.
    #[arg(long)]
    pub(crate) reserved_vcpus: Option<i64>,
    /// Dedicated CPUs (PCPU inventory) per host.
    #[arg(long)]
    pub(crate) pcpus: Option<i64>,
    /// RAM per host (MiB).
    #[arg(long)]
    pub(crate) memory_mb: Option<i64>,
    /// Reserved RAM per host (MiB).
    #[arg(long)]
    pub(crate) reserved_memory_mb: Option<i64>,
    /// Disk per host (GiB; 0: no local disk, no `DISK_GB` inventory).
    #[arg(long)]
    pub(crate) disk_gb: Option<i64>,
    /// VCPU allocation ratio (default 4.0, Nova's initial ratio).
    #[arg(long, alias = "cpu-allocation-ratio")]
    #[serde(alias = "cpu_allocation_ratio")]
    pub(crate) cpu_ratio: Option<f64>,
    /// MEMORY_MB allocation ratio (default 1.0).
    #[arg(long, alias = "ram-allocation-ratio")]
    #[serde(alias = "ram_allocation_ratio")]
    pub(crate) ram_ratio: Option<f64>,
    /// DISK_GB allocation ratio (default 1.0).
    #[arg(long, alias = "disk-allocation-ratio")]
    #[serde(alias = "disk_allocation_ratio")]
    pub(crate) disk_ratio: Option<f64>,
    /// `fake` (default: the hosts are simulated) or `libvirt` (one real
    /// host running QEMU guests through libvirt; see docs/OPERATING.md).
    #[arg(long)]
    pub(crate) driver: Option<String>,
    /// libvirt: the connection URI (default `qemu:///system`).
    #[arg(long)]
    pub(crate) libvirt_uri: Option<String>,
    /// libvirt: `kvm` (default) or `qemu` (TCG, no hardware virtualisation).
    #[arg(long)]
    pub(crate) virt_type: Option<String>,
    /// libvirt: where disks, config drives, console logs and the image
    /// cache live (default /var/lib/berth/instances).
    #[arg(long)]
    pub(crate) instances_path: Option<PathBuf>,
    /// libvirt: this host's name (default the machine's hostname).
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// libvirt: MEMORY_MB reserved for the host (default 512).
    #[arg(long)]
    pub(crate) reserved_host_memory_mb: Option<i64>,
    /// libvirt: VCPUs reserved for the host (default 0).
    #[arg(long)]
    pub(crate) reserved_host_cpus: Option<i64>,
    /// libvirt: seconds a clean shutdown may take before the guest is
    /// destroyed (default 60, Nova's shutdown_timeout).
    #[arg(long)]
    pub(crate) shutdown_timeout_secs: Option<u64>,
    /// libvirt: seconds between power-state syncs (default 10).
    #[arg(long)]
    pub(crate) sync_interval_secs: Option<u64>,
    /// libvirt: what to do with a guest still running whose server was
    /// deleted (Nova's `running_deleted_instance_action`): `log` (the
    /// default: reported, left alone), `shutdown`, `reap` (destroyed and
    /// removed) or `noop`.
    #[arg(long)]
    pub(crate) running_deleted_instance_action: Option<String>,
    /// libvirt: seconds between looks for such guests (default 1800, Nova's
    /// `running_deleted_instance_poll_interval`; also at the start).
    #[arg(long)]
    pub(crate) running_deleted_instance_poll_secs: Option<u64>,
    /// libvirt: this host's IP (Nova's `my_ip`, default 127.0.0.1),
    /// registered as its `host_ip`: a cold move's destination fetches the
    /// guest's disk from the source's agent there.
    #[arg(long)]
    pub(crate) my_ip: Option<String>,
    /// libvirt: the port this host's agent serves moving guests' disks on,
    /// at `--my-ip` (default 16520; the same on every host).
    #[arg(long)]
    pub(crate) migration_port: Option<u16>,
    /// NUMA nodes per host, reported as child providers holding VCPU and MEMORY_MB.
    #[arg(long)]
    pub(crate) numa_nodes: Option<usize>,
    /// Devices per NUMA node (or per host): CLASS:COUNT, comma separated (e.g. VGPU:2).
    #[arg(long)]
    pub(crate) devices: Option<String>,
    /// Virtual GPUs per host (VGPU inventory).
    #[arg(long)]
    pub(crate) vgpus: Option<i64>,
    /// Where VGPU inventory lives: `root` (the compute node provider) or
    /// `children[:P[xV]]` (P pGPU child providers, default 2, holding V
    /// VGPUs each, default an even share of --vgpus). Changing it on a host
    /// whose servers hold VGPU reshapes its tree (POST /reshaper).
    #[arg(long)]
    pub(crate) vgpu_layout: Option<String>,
    /// A file holding the VGPU layout (same syntax): read at start (over
    /// --vgpu-layout) and again on SIGHUP, when a changed layout reshapes
    /// the trees of the running agent.
    #[arg(long)]
    pub(crate) vgpu_layout_file: Option<PathBuf>,
    /// Test hook: while this file exists, a reshape waits after reading the
    /// tree and before its POST /reshaper (and logs that it is held).
    #[arg(long)]
    pub(crate) test_hold_reshape_file: Option<PathBuf>,
    /// Traits of every compute node, comma separated (CUSTOM_ traits are created).
    #[arg(long)]
    pub(crate) traits: Option<String>,
    /// How long a build takes (ms).
    #[arg(long)]
    pub(crate) build_time_ms: Option<u64>,
    /// Fraction of builds that fail (0.0-1.0).
    #[arg(long)]
    pub(crate) fail_rate: Option<f64>,
    /// Hosts whose every build fails, comma separated.
    #[arg(long)]
    pub(crate) bad_hosts: Option<String>,
    /// How long a live migration's transfer takes on the source (ms).
    #[arg(long)]
    pub(crate) live_migration_ms: Option<u64>,
    /// Heartbeat interval (s).
    #[arg(long)]
    pub(crate) report_interval_secs: Option<u64>,
    /// A request to the control plane with no answer within this many
    /// seconds fails and is retried (default 30; the work long poll gets
    /// its 20-second wait on top).
    #[arg(long)]
    pub(crate) request_timeout_secs: Option<u64>,
    /// Simulated power: a host whose marker `{DIR}/{host}.off` exists is
    /// off (no heartbeat); removing it switches the host on.
    #[arg(long)]
    pub(crate) power_dir: Option<PathBuf>,
    /// Seconds a simulated host takes to boot once switched on (wall
    /// clock; default 0).
    #[arg(long)]
    pub(crate) power_on_secs: Option<u64>,
    /// Concurrent placement requests while reporting provider trees.
    #[arg(long)]
    pub(crate) concurrency: Option<usize>,
    /// `push` (default: builds come through /agent/v1/work) or `pull`
    /// (boots are taken from the NATS JetStream queues the hosts can
    /// satisfy, and claimed).
    #[arg(long, env = "BERTH_SCHEDULING")]
    pub(crate) scheduling: Option<String>,
    /// NATS server (pull mode; default `nats://127.0.0.1:4222`).
    #[arg(long, env = "BERTH_NATS_URL")]
    pub(crate) nats_url: Option<String>,
    /// Stream and subject prefix, as the control plane's `--nats-prefix`.
    #[arg(long, env = "BERTH_NATS_PREFIX")]
    pub(crate) nats_prefix: Option<String>,
    /// Most boots held at once in pull mode (default 64).
    #[arg(long)]
    pub(crate) pull_max_in_flight: Option<usize>,
    /// Milliseconds a boot no host here takes waits before redelivery
    /// (default 500).
    #[arg(long)]
    pub(crate) pull_nak_delay_ms: Option<u64>,
    /// Ack wait of the queues' consumers in seconds, as the control
    /// plane's `--pull-ack-wait-secs` (default 30).
    #[arg(long)]
    pub(crate) pull_ack_wait_secs: Option<u64>,
    /// Log filter.
    #[arg(long)]
    pub(crate) log: Option<String>,
    /// Colour in log lines: `auto` (only on a terminal), `always`, `never`.
    #[arg(long, value_enum)]
    pub(crate) log_color: Option<crate::logging::LogColor>,
    /// YAML file with any of these options (lowest precedence).
    #[arg(long)]
    #[serde(skip)]
    pub(crate) config: Option<PathBuf>,
}

fn list(text: &Option<String>) -> Vec<String> {
    text.as_deref().unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

impl AgentOpts {
    /// Flags over the YAML file (the environment is read by clap).
    fn merged(self) -> anyhow::Result<Self> {
        let Some(path) = &self.config else { return Ok(self) };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: AgentOpts = serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        macro_rules! pick {
            ($($field:ident),*) => { AgentOpts { $($field: self.$field.or(file.$field),)* config: self.config } };
        }
        Ok(pick!(
            url,
            token,
            credential_file,
            ca_file,
            keystone_url,
            keystone_user,
            keystone_password,
            keystone_project,
            keystone_domain,
            keystone_ca_file,
            agent_id,
            hosts,
            prefix,
            first_index,
            cell,
            vcpus,
            reserved_vcpus,
            pcpus,
            memory_mb,
            reserved_memory_mb,
            disk_gb,
            cpu_ratio,
            ram_ratio,
            disk_ratio,
            driver,
            libvirt_uri,
            virt_type,
            instances_path,
            host,
            reserved_host_memory_mb,
            reserved_host_cpus,
            shutdown_timeout_secs,
            sync_interval_secs,
            running_deleted_instance_action,
            running_deleted_instance_poll_secs,
            my_ip,
            migration_port,
            numa_nodes,
            devices,
            vgpus,
            vgpu_layout,
            vgpu_layout_file,
            test_hold_reshape_file,
            traits,
            build_time_ms,
            fail_rate,
            bad_hosts,
            live_migration_ms,
            power_dir,
            power_on_secs,
            report_interval_secs,
            request_timeout_secs,
            concurrency,
            scheduling,
            nats_url,
            nats_prefix,
            pull_max_in_flight,
            pull_nak_delay_ms,
            pull_ack_wait_secs,
            log,
            log_color
        ))
    }

    /// The agent configuration these options describe.
    pub(crate) fn into_config(self) -> anyhow::Result<AgentConfig> {
        let opts = self.merged()?;
        let default = HostShape::default();
        let mut devices = Vec::new();
        for item in list(&opts.devices) {
            let (class, count) =
                item.split_once(':').with_context(|| format!("--devices expects CLASS:COUNT, got {item:?}"))?;
            devices.push((class.to_owned(), count.parse().with_context(|| format!("bad device count in {item:?}"))?));
        }
        let mut traits = default.traits.clone();
        traits.extend(list(&opts.traits));
        let fail_rate = opts.fail_rate.unwrap_or(0.0);
        anyhow::ensure!((0.0..=1.0).contains(&fail_rate), "--fail-rate must be between 0 and 1");
        let shape = HostShape {
            vcpus: opts.vcpus.unwrap_or(default.vcpus),
            reserved_vcpus: opts.reserved_vcpus.unwrap_or(default.reserved_vcpus),
            pcpus: opts.pcpus.unwrap_or(default.pcpus),
            memory_mb: opts.memory_mb.unwrap_or(default.memory_mb),
            reserved_memory_mb: opts.reserved_memory_mb.unwrap_or(default.reserved_memory_mb),
            disk_gb: opts.disk_gb.unwrap_or(default.disk_gb),
            cpu_allocation_ratio: opts.cpu_ratio.unwrap_or(default.cpu_allocation_ratio),
            ram_allocation_ratio: opts.ram_ratio.unwrap_or(default.ram_allocation_ratio),
            disk_allocation_ratio: opts.disk_ratio.unwrap_or(default.disk_allocation_ratio),
            numa_nodes: opts.numa_nodes.unwrap_or(0),
            devices,
            traits,
            vgpus: opts.vgpus.unwrap_or(0),
            vgpu_layout: initial_layout(&opts.vgpu_layout, &opts.vgpu_layout_file)?,
        };
        let opts_libvirt = LibvirtOpts {
            uri: opts.libvirt_uri.clone(),
            virt_type: opts.virt_type.clone(),
            instances_path: opts.instances_path.clone(),
            host: opts.host.clone(),
            reserved_memory_mb: opts.reserved_host_memory_mb,
            reserved_cpus: opts.reserved_host_cpus,
            shutdown_timeout_secs: opts.shutdown_timeout_secs,
            my_ip: opts.my_ip.clone(),
            migration_port: opts.migration_port,
        };
        let reshape_gate = opts.test_hold_reshape_file.clone().map(|path| {
            berth_agent::reshape::ReshapeGate(std::sync::Arc::new(move || path.exists()) as std::sync::Arc<_>)
        });
        let auth = match crate::keystone::credentials(
            opts.keystone_url.as_deref(),
            opts.keystone_user.as_deref(),
            opts.keystone_password.as_deref(),
            opts.keystone_project.as_deref(),
            opts.keystone_domain.as_deref(),
        )? {
            Some(creds) => berth_agent::AgentAuth::Keystone(std::sync::Arc::new(berth_identity::Session::new(
                berth_identity::client(Duration::from_secs(10), opts.keystone_ca_file.as_deref())?,
                creds,
            ))),
            None => match &opts.credential_file {
                Some(path) => berth_agent::AgentAuth::Token(read_credential(path)?),
                None => berth_agent::AgentAuth::Token(opts.token.unwrap_or_else(|| "admin".to_owned())),
            },
        };
        let url = opts.url.unwrap_or_else(|| "http://127.0.0.1:8778".to_owned());
        let request_timeout = Duration::from_secs(opts.request_timeout_secs.unwrap_or(30).max(1));
        let (mut shape, mut host, mut driver, mut host_ip) = (shape, None, None, None);
        match opts.driver.as_deref().unwrap_or("fake") {
            "fake" => {}
            "libvirt" => {
                let (real, name, libvirt) =
                    libvirt_host(&opts_libvirt, &shape, &url, &auth, opts.ca_file.as_deref(), request_timeout)?;
                shape = real;
                host = Some(name);
                driver = Some(libvirt);
                host_ip = Some(opts_libvirt.my_ip.clone().unwrap_or_else(|| "127.0.0.1".to_owned()));
            }
            other => anyhow::bail!("invalid --driver {other:?} (fake or libvirt)"),
        }
        Ok(AgentConfig {
            url,
            auth,
            ca_file: opts.ca_file,
            agent_id: opts
                .agent_id
                .unwrap_or_else(|| format!("agent-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple())),
            prefix: opts.prefix.unwrap_or_else(|| "fake-".to_owned()),
            count: opts.hosts.unwrap_or(1),
            first_index: opts.first_index.unwrap_or(0),
            cell: opts.cell,
            shape,
            build_time: Duration::from_millis(opts.build_time_ms.unwrap_or(0)),
            fail_rate,
            bad_hosts: list(&opts.bad_hosts),
            live_migration_time: Duration::from_millis(opts.live_migration_ms.unwrap_or(0)),
            report_interval: Duration::from_secs(opts.report_interval_secs.unwrap_or(10).max(1)),
            request_timeout,
            concurrency: opts.concurrency.unwrap_or(8),
            layout_updates: None,
            reshape_gate,
            power_dir: opts.power_dir,
            power_on_time: Duration::from_secs(opts.power_on_secs.unwrap_or(0)),
            pull: match opts.scheduling.as_deref().unwrap_or("push") {
                "push" => None,
                "pull" => Some(berth_agent::pull::PullConfig {
                    nats: berth_pull::Settings {
                        url: opts.nats_url.unwrap_or_else(|| crate::serve::DEFAULT_NATS_URL.to_owned()),
                        prefix: opts.nats_prefix.unwrap_or_else(|| "berth".to_owned()),
                        ack_wait: Duration::from_secs(opts.pull_ack_wait_secs.unwrap_or(30).max(1)),
                    },
                    max_in_flight: opts.pull_max_in_flight.unwrap_or(64).max(1),
                    nak_delay: Duration::from_millis(opts.pull_nak_delay_ms.unwrap_or(500)),
                    refresh: Duration::from_millis(250),
                }),
                other => anyhow::bail!("invalid --scheduling {other:?} (push or pull)"),
            },
            driver,
            host,
            sync_interval: Duration::from_secs(opts.sync_interval_secs.unwrap_or(10).max(1)),
            running_deleted: berth_agent::RunningDeleted {
                action: match opts.running_deleted_instance_action.as_deref().unwrap_or("log") {
                    "noop" => berth_agent::RunningDeletedAction::Noop,
                    "log" => berth_agent::RunningDeletedAction::Log,
                    "shutdown" => berth_agent::RunningDeletedAction::Shutdown,
                    "reap" => berth_agent::RunningDeletedAction::Reap,
                    other => anyhow::bail!(
                        "invalid --running-deleted-instance-action {other:?} (noop, log, shutdown or reap)"
                    ),
                },
                poll: Duration::from_secs(opts.running_deleted_instance_poll_secs.unwrap_or(1800).max(1)),
            },
            host_ip,
        })
    }
}

/// The libvirt options of `berth agent --driver libvirt`.
struct LibvirtOpts {
    uri: Option<String>,
    virt_type: Option<String>,
    instances_path: Option<PathBuf>,
    host: Option<String>,
    reserved_memory_mb: Option<i64>,
    reserved_cpus: Option<i64>,
    shutdown_timeout_secs: Option<u64>,
    my_ip: Option<String>,
    migration_port: Option<u16>,
}

/// The one real host of `--driver libvirt`: its shape discovered
/// (online CPUs, /proc/meminfo, the instances path's filesystem, CPU and
/// capability traits; `given` keeps its ratios and operator traits), its
/// name, and its driver.
fn libvirt_host(
    opts: &LibvirtOpts,
    given: &HostShape,
    url: &str,
    auth: &berth_agent::AgentAuth,
    ca_file: Option<&std::path::Path>,
    request_timeout: Duration,
) -> anyhow::Result<(HostShape, String, std::sync::Arc<dyn berth_agent::Driver>)> {
    use berth_agent::libvirt::{host::discover, LibvirtConfig, LibvirtDriver};
    let virt_type = opts.virt_type.clone().unwrap_or_else(|| "kvm".to_owned());
    anyhow::ensure!(virt_type == "kvm" || virt_type == "qemu", "invalid --virt-type {virt_type:?} (kvm or qemu)");
    let instances_path = opts.instances_path.clone().unwrap_or_else(|| PathBuf::from("/var/lib/berth/instances"));
    std::fs::create_dir_all(&instances_path).with_context(|| format!("creating {}", instances_path.display()))?;
    let instances_path = instances_path.canonicalize()?;
    let host = match &opts.host {
        Some(host) => host.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("reading the hostname (or give --host)")?
            .trim()
            .to_owned(),
    };
    let found = discover(&instances_path)?;
    let mut traits = found.traits;
    traits.extend(given.traits.iter().filter(|t| t.as_str() != "COMPUTE_NODE").cloned());
    let shape = HostShape {
        vcpus: found.vcpus,
        reserved_vcpus: opts.reserved_cpus.unwrap_or(0),
        pcpus: 0,
        memory_mb: found.memory_mb,
        reserved_memory_mb: opts.reserved_memory_mb.unwrap_or(512),
        disk_gb: found.disk_gb,
        numa_nodes: 0,
        devices: Vec::new(),
        traits,
        vgpus: 0,
        ..given.clone()
    };
    let link = berth_agent::Link::new(url, auth.clone(), ca_file, request_timeout)?;
    let config = LibvirtConfig {
        uri: opts.uri.clone().unwrap_or_else(|| "qemu:///system".to_owned()),
        virt_type,
        instances_path,
        host: host.clone(),
        shutdown_timeout: Duration::from_secs(opts.shutdown_timeout_secs.unwrap_or(60)),
        my_ip: opts.my_ip.clone().unwrap_or_else(|| "127.0.0.1".to_owned()),
        migration_port: opts.migration_port.unwrap_or(16520),
    };
    Ok((shape, host, std::sync::Arc::new(LibvirtDriver::new(config, link)?)))
}

/// The layout in `file` when it exists, else `flag`, else `root`.
fn initial_layout(flag: &Option<String>, file: &Option<PathBuf>) -> anyhow::Result<VgpuLayout> {
    if let Some(path) = file {
        if path.exists() {
            return read_layout(path);
        }
    }
    flag.as_deref().unwrap_or("root").parse().context("--vgpu-layout")
}

fn read_layout(path: &std::path::Path) -> anyhow::Result<VgpuLayout> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.parse().with_context(|| format!("the VGPU layout in {}", path.display()))
}

/// Run `berth agent` until SIGINT/SIGTERM; SIGHUP re-reads
/// `--vgpu-layout-file` and hands a changed layout to the agent.
/// The credential in `path` (its first line).
fn read_credential(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    anyhow::ensure!(
        token.starts_with(berth_compute_model::AGENT_CREDENTIAL_PREFIX),
        "{} holds no agent credential (expected a line berth-agent:HOST:SECRET)",
        path.display()
    );
    Ok(token)
}

pub(crate) fn run(opts: AgentOpts) -> anyhow::Result<()> {
    let log = opts.log.clone().unwrap_or_else(|| "info".to_owned());
    crate::logging::init(&log, false, opts.log_color.unwrap_or_default());
    let layout_file = opts.vgpu_layout_file.clone();
    let mut config = opts.into_config()?;
    let (layouts, updates) = tokio::sync::watch::channel(config.shape.vgpu_layout);
    config.layout_updates = Some(updates);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let Some(path) = &layout_file else {
                    tracing::warn!("SIGHUP without --vgpu-layout-file: nothing to re-read");
                    continue;
                };
                match read_layout(path) {
                    Ok(layout) => {
                        tracing::info!(?layout, "SIGHUP: VGPU layout re-read");
                        let _ = layouts.send(layout);
                    }
                    Err(err) => tracing::error!(error = %format!("{err:#}"), "SIGHUP: layout not changed"),
                }
            }
        });
        berth_agent::run(config, crate::serve::shutdown_signal()).await
    })
}
