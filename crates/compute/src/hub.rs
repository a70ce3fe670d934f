//! The agent work hub: which agent (connected to this process) serves
//! which hosts, and the tasks waiting for each agent.
//!
//! Tasks come from two places: the conductor and the API push them the
//! moment they commit a transition (so a build reaches its agent without
//! a poll), and a sweep of the cell databases re-queues any task state it
//! finds for a local agent's host that is neither queued nor recently
//! handed out (work committed by another process, tasks lost in a restart,
//! agents that took a task and died). A task is identified by instance,
//! task state and host, so handing it out twice is harmless: the agent ignores a
//! task it is already running, and the transition it reports is
//! conditional on the task state.
//!
//! In pull mode (a [`HostChannel`] registered) a pushed task goes to its
//! host's NATS subject instead, when the host's agent registered as
//! pulling, or is not connected here at all (it may be connected to
//! another process and pull there): the agent answers that it took it. A
//! task no agent takes that way (NATS down, not subscribed, no answer in
//! time) is queued for the long poll when its agent is connected here;
//! otherwise the sweep of the process it is connected to hands it out.
//! The sweep's re-offers always use the long poll.
//!
//! With several processes on one database (PostgreSQL), a task for a host
//! whose agent is connected to none of this process's long polls is
//! relayed to the other processes ([`PeerChannel`]; PostgreSQL's
//! notifications), and the one that holds the agent's long poll queues it
//! ([`Hub::receive_relayed`]) instead of waiting for its sweep. A relay is
//! a hint: one that is lost leaves the task to that sweep, as before.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::BoxFuture;

/// What an agent must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Build (spawn) the instance.
    Build,
    /// Destroy it.
    Delete,
    /// Power on.
    Start,
    /// Power off.
    Stop,
    /// Reboot.
    Reboot,
    /// Hand a moving instance over (on the source host).
    ResizeMigrate,
    /// Finish a move (on the destination host).
    ResizeFinish,
    /// Clean up the source of a confirmed move (on the source host).
    ResizeConfirm,
    /// Undo a move (on the destination host).
    ResizeRevert,
    /// Rebuild an evacuated instance (on the destination host).
    Rebuild,
    /// Destroy the copy of an instance evacuated away (on the source host,
    /// once it is back).
    DestroyEvacuated,
    /// Shelve (power off, keep on the host).
    Shelve,
    /// Remove a shelved instance from its host.
    ShelveOffload,
    /// Spawn an unshelved instance.
    Unshelve,
    /// Prepare for an incoming live migration (on the destination host).
    LiveMigrationPrepare,
    /// Copy a live-migrating instance over (on the source host).
    LiveMigrate,
    /// Pause.
    Pause,
    /// Unpause.
    Unpause,
    /// Suspend.
    Suspend,
    /// Resume a suspended instance.
    Resume,
    /// Boot from a rescue image.
    Rescue,
    /// Boot from the instance's own disk again.
    Unrescue,
    /// Power off for a soft delete.
    SoftDelete,
    /// Power a soft-deleted instance on again.
    Restore,
    /// Read the console log (a request: the agent answers with the text in
    /// its event; no task state).
    ConsoleOutput,
    /// Take a snapshot (`createImage`, `createBackup`) and upload it to
    /// the image the task names.
    Snapshot,
}

impl TaskKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Build => "build",
            TaskKind::Delete => "delete",
            TaskKind::Start => "start",
            TaskKind::Stop => "stop",
            TaskKind::Reboot => "reboot",
            TaskKind::ResizeMigrate => "resize_migrate",
            TaskKind::ResizeFinish => "resize_finish",
            TaskKind::ResizeConfirm => "resize_confirm",
            TaskKind::ResizeRevert => "resize_revert",
            TaskKind::Rebuild => "rebuild",
            TaskKind::DestroyEvacuated => "destroy_evacuated",
            TaskKind::Shelve => "shelve",
            TaskKind::ShelveOffload => "shelve_offload",
            TaskKind::Unshelve => "unshelve",
            TaskKind::LiveMigrationPrepare => "live_migration_prepare",
            TaskKind::LiveMigrate => "live_migrate",
            TaskKind::Pause => "pause",
            TaskKind::Unpause => "unpause",
            TaskKind::Suspend => "suspend",
            TaskKind::Resume => "resume",
            TaskKind::ConsoleOutput => "console_output",
            TaskKind::Rescue => "rescue",
            TaskKind::Unrescue => "unrescue",
            TaskKind::SoftDelete => "soft_delete",
            TaskKind::Restore => "restore",
            TaskKind::Snapshot => "snapshot",
        }
    }

    /// The task for an instance's task state, if agents act on it.
    pub fn for_task_state(task_state: &str) -> Option<Self> {
        use berth_compute_model::cell::task_state as ts;
        match task_state {
            ts::SPAWNING => Some(TaskKind::Build),
            ts::DELETING => Some(TaskKind::Delete),
            ts::POWERING_ON => Some(TaskKind::Start),
            ts::POWERING_OFF => Some(TaskKind::Stop),
            ts::REBOOTING | ts::REBOOTING_HARD => Some(TaskKind::Reboot),
            ts::RESIZE_MIGRATING => Some(TaskKind::ResizeMigrate),
            ts::RESIZE_FINISH => Some(TaskKind::ResizeFinish),
            ts::RESIZE_CONFIRMING => Some(TaskKind::ResizeConfirm),
            ts::RESIZE_REVERTING => Some(TaskKind::ResizeRevert),
            ts::REBUILD_SPAWNING => Some(TaskKind::Rebuild),
            ts::SHELVING => Some(TaskKind::Shelve),
            ts::SHELVING_OFFLOADING => Some(TaskKind::ShelveOffload),
            ts::UNSHELVING => Some(TaskKind::Unshelve),
            ts::PAUSING => Some(TaskKind::Pause),
            ts::UNPAUSING => Some(TaskKind::Unpause),
            ts::SUSPENDING => Some(TaskKind::Suspend),
            ts::RESUMING => Some(TaskKind::Resume),
            ts::RESCUING => Some(TaskKind::Rescue),
            ts::UNRESCUING => Some(TaskKind::Unrescue),
            ts::SOFT_DELETING => Some(TaskKind::SoftDelete),
            ts::RESTORING => Some(TaskKind::Restore),
            ts::IMAGE_SNAPSHOT | ts::IMAGE_BACKUP => Some(TaskKind::Snapshot),
            _ => None,
        }
    }
}

/// Task states agents act on. The move states are done on the row's host,
/// except `resize_confirming`, which is the source's work (the sweep looks
/// the source up in the migration).
pub const AGENT_TASK_STATES: &[&str] = &[
    "spawning",
    "deleting",
    "powering-on",
    "powering-off",
    "rebooting",
    "rebooting_hard",
    "resize_migrating",
    "resize_finish",
    "resize_confirming",
    "resize_reverting",
    "rebuild_spawning",
    "shelving",
    "shelving_offloading",
    "unshelving",
    "pausing",
    "unpausing",
    "suspending",
    "resuming",
    "rescuing",
    "unrescuing",
    "soft-deleting",
    "restoring",
    "image_snapshot",
    "image_backup",
];

/// One task for an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// `instance:task_state@host` (the host too: a build rescheduled to
    /// another host is a new task, even for an agent serving both hosts
    /// that is still reporting the failed one).
    pub id: String,
    /// What to do.
    pub kind: TaskKind,
    /// The instance.
    pub instance: Uuid,
    /// The host it is on.
    pub host: String,
    /// The instance's display name, for the tasks whose answer names it
    /// (console output); `None` otherwise.
    pub display_name: Option<String>,
}

impl Task {
    /// The task for `instance` on `host` in `task_state`.
    pub fn new(instance: Uuid, host: &str, task_state: &str) -> Option<Self> {
        let kind = TaskKind::for_task_state(task_state)?;
        Some(Task {
            id: format!("{instance}:{task_state}@{host}"),
            kind,
            instance,
            host: host.to_owned(),
            display_name: None,
        })
    }

    /// A live migration's step (no task state of its own: the row stays
    /// `migrating` on the source throughout, so the migration record's
    /// status says which host acts; see `live.rs`).
    pub fn live(instance: Uuid, host: &str, kind: TaskKind) -> Self {
        Task {
            id: format!("{instance}:{}@{host}", kind.as_str()),
            kind,
            instance,
            host: host.to_owned(),
            display_name: None,
        }
    }

    /// A request for the console log of `instance` on `host` (no task
    /// state: the API waits for the agent's answer; one id per instance,
    /// so concurrent requests share one answer).
    pub fn console_output(instance: Uuid, host: &str, display_name: &str) -> Self {
        Task {
            id: format!("{instance}:console_output@{host}"),
            kind: TaskKind::ConsoleOutput,
            instance,
            host: host.to_owned(),
            display_name: Some(display_name.to_owned()),
        }
    }

    /// The source's clean-up of an instance evacuated away from `host`
    /// (no task state: the row names the destination; the evacuation's
    /// migration record is what asks for it).
    pub fn destroy_evacuated(instance: Uuid, host: &str) -> Self {
        Task {
            id: format!("{instance}:destroy_evacuated@{host}"),
            kind: TaskKind::DestroyEvacuated,
            instance,
            host: host.to_owned(),
            display_name: None,
        }
    }
}

/// Where pull mode hands tasks to agents: each host's NATS subject (the
/// process wiring registers it).
pub trait HostChannel: Send + Sync {
    /// Hand `task` to the agent subscribed to its host's subject; `Ok`
    /// once that agent answered it took it.
    fn send(&self, task: &Task) -> BoxFuture<'_, Result<(), HostSendFailure>>;
}

/// Why a host's subject did not take a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSendFailure {
    /// Nobody subscribes to it.
    NoTaker,
    /// NATS unreachable, or no answer in time (why).
    Unavailable(String),
}

/// Where tasks for hosts of agents connected to other processes are
/// relayed to those processes (see the module doc). Not durable.
pub trait PeerChannel: Send + Sync {
    /// Hand one payload ([`relay_payloads`]) to the other processes.
    /// Blocking (a database round trip): called off the runtime's workers.
    fn send(&self, payload: &str);
}

/// The most bytes of one relayed payload (PostgreSQL refuses a
/// notification payload of 8,000 bytes or more).
pub const MAX_RELAY_PAYLOAD: usize = 7_000;

/// Tasks as relay payloads: one line per task (`instance tag host`,
/// where the tag is the task state or the kind of a task without one),
/// at most [`MAX_RELAY_PAYLOAD`] bytes each. A task that cannot be
/// written so (a host holding a line break, or too long) is left out:
/// the sweep finds it.
pub fn relay_payloads(tasks: &[Task]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for task in tasks {
        let prefix = format!("{}:", task.instance);
        let suffix = format!("@{}", task.host);
        let Some(tag) = task.id.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(&suffix)) else { continue };
        let line = format!("{} {tag} {}\n", task.instance, task.host);
        if task.host.contains(['\n', '\r']) || tag.contains(' ') || line.len() > MAX_RELAY_PAYLOAD {
            continue;
        }
        if current.len() + line.len() > MAX_RELAY_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// The tasks of a relay payload ([`relay_payloads`]); lines that do not
/// read as a task are skipped.
pub fn relayed_tasks(payload: &str) -> Vec<Task> {
    payload
        .lines()
        .filter_map(|line| {
            let (instance, rest) = line.split_once(' ')?;
            let (tag, host) = rest.split_once(' ')?;
            let instance: Uuid = instance.parse().ok()?;
            let kind = TaskKind::for_task_state(tag).or_else(|| {
                [TaskKind::LiveMigrationPrepare, TaskKind::LiveMigrate, TaskKind::DestroyEvacuated]
                    .into_iter()
                    .find(|kind| kind.as_str() == tag)
            })?;
            Some(Task {
                id: format!("{instance}:{tag}@{host}"),
                kind,
                instance,
                host: host.to_owned(),
                display_name: None,
            })
        })
        .collect()
}

/// Counters of the host subjects (exported at `/metrics` in pull mode).
#[derive(Debug, Default)]
pub struct HubMetrics {
    /// Tasks an agent took on its host's subject.
    pub host_published: AtomicU64,
    /// Tasks for a pulling agent connected here that its host's subject
    /// did not take: queued for the long poll instead.
    pub host_fallbacks: AtomicU64,
    /// Tasks for hosts of agents not connected here that no subscriber
    /// took (the sweep of their own process hands them out).
    pub host_unanswered: AtomicU64,
    /// Tasks relayed to the other processes: no agent connected here
    /// serves their host.
    pub relayed: AtomicU64,
    /// Tasks other processes relayed here that went to an agent
    /// connected here.
    pub relayed_in: AtomicU64,
}

#[derive(Debug)]
struct Agent {
    /// Shared, so that the agent's long poll (which checks all of them
    /// against their binding) borrows them instead of copying thousands of
    /// names each time.
    hosts: Arc<HashSet<String>>,
    /// Takes tasks on its hosts' subjects (registered in pull mode).
    pulls: bool,
    queue: VecDeque<Task>,
    queued: HashSet<String>,
    notify: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct Inner {
    agents: HashMap<String, Agent>,
    host_agent: HashMap<String, String>,
    /// Tasks handed out and when, until the agent reports them.
    handed_out: HashMap<String, Instant>,
    /// Tasks being sent on their host's subject now.
    sending: HashSet<String>,
}

impl Inner {
    /// Queue `task` for the long poll of the agent serving its host (if
    /// connected here).
    fn queue(&mut self, task: Task) -> bool {
        let Some(agent_id) = self.host_agent.get(&task.host) else { return false };
        let Some(agent) = self.agents.get_mut(agent_id) else { return false };
        if !agent.queued.insert(task.id.clone()) {
            return false;
        }
        agent.queue.push_back(task);
        agent.notify.notify_one();
        true
    }
}

/// The hub.
pub struct Hub {
    inner: Arc<Mutex<Inner>>,
    /// Pull mode's host subjects (unset: the long poll only).
    channel: OnceLock<Arc<dyn HostChannel>>,
    /// The relay to other processes (unset: one process, or SQLite).
    peers: OnceLock<tokio::sync::mpsc::UnboundedSender<Task>>,
    /// Counters of the host subjects.
    pub metrics: Arc<HubMetrics>,
    /// A task handed out and not reported within this time is handed out
    /// again by the sweep.
    pub resend_after: Duration,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("host_subjects", &self.channel.get().is_some()).finish_non_exhaustive()
    }
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            inner: Arc::default(),
            channel: OnceLock::new(),
            peers: OnceLock::new(),
            metrics: Arc::default(),
            resend_after: Duration::from_secs(60),
        }
    }
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Pull mode: push tasks to the host subjects of pulling agents
    /// through `channel`. Once; a second call is ignored and returns
    /// false.
    pub fn set_host_channel(&self, channel: Arc<dyn HostChannel>) -> bool {
        self.channel.set(channel).is_ok()
    }

    /// Relay tasks for hosts whose agents are not connected here to the
    /// other processes through `channel` (see the module doc). Once, on
    /// a tokio runtime: a task there gathers what was pushed meanwhile
    /// into as few payloads as fit. A second call is ignored and returns
    /// false.
    pub fn set_peer_channel(&self, channel: Arc<dyn PeerChannel>) -> bool {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Task>();
        if self.peers.set(tx).is_err() {
            return false;
        }
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut tasks = vec![first];
                while let Ok(task) = rx.try_recv() {
                    tasks.push(task);
                }
                metrics.relayed.fetch_add(tasks.len() as u64, Ordering::Relaxed);
                let channel = channel.clone();
                let sent = tokio::task::spawn_blocking(move || {
                    for payload in relay_payloads(&tasks) {
                        channel.send(&payload);
                    }
                })
                .await;
                if sent.is_err() {
                    tracing::debug!("relaying tasks to the other processes panicked");
                }
            }
        });
        true
    }

    /// Tasks another process relayed (a [`relay_payloads`] payload):
    /// those whose host's agent is connected here are queued for it, as
    /// the sweep would ([`Hub::offer`]). Returns how many.
    pub fn receive_relayed(&self, payload: &str) -> usize {
        let queued = relayed_tasks(payload).into_iter().filter(|task| self.offer(task.clone())).count();
        self.metrics.relayed_in.fetch_add(queued as u64, Ordering::Relaxed);
        queued
    }

    /// Queue `task` for the long poll of its host's agent when it is
    /// connected here, else relay it to the other processes (if any).
    fn queue_or_relay(&self, inner: &mut Inner, task: Task) -> bool {
        if inner.host_agent.contains_key(&task.host) {
            return inner.queue(task);
        }
        if let Some(peers) = self.peers.get() {
            let _ = peers.send(task);
        }
        false
    }

    /// An agent (re)registers with its hosts; `pulls`: it takes tasks on
    /// its hosts' subjects (pull mode).
    pub fn register(&self, agent: &str, hosts: &[String], pulls: bool) {
        let mut inner = self.lock();
        let entry = inner.agents.entry(agent.to_owned()).or_insert_with(|| Agent {
            hosts: Arc::default(),
            pulls,
            queue: VecDeque::new(),
            queued: HashSet::new(),
            notify: Arc::new(tokio::sync::Notify::new()),
        });
        entry.pulls = pulls;
        Arc::make_mut(&mut entry.hosts).extend(hosts.iter().cloned());
        for host in hosts {
            inner.host_agent.insert(host.clone(), agent.to_owned());
        }
    }

    /// The hosts `agent` registered here (None: unknown agent).
    pub fn hosts_of(&self, agent: &str) -> Option<Arc<HashSet<String>>> {
        self.lock().agents.get(agent).map(|a| a.hosts.clone())
    }

    /// Is `agent` known here?
    pub fn knows(&self, agent: &str) -> bool {
        self.lock().agents.contains_key(agent)
    }

    /// Hosts served by agents connected here.
    pub fn local_hosts(&self) -> HashSet<String> {
        self.lock().host_agent.keys().cloned().collect()
    }

    /// Hand `task` to the agent serving its host: queued for its long
    /// poll, or in pull mode sent on the host's subject (see the module
    /// doc). Returns whether an agent connected here will get it (queued,
    /// or being sent to it).
    pub fn push(&self, task: Task) -> bool {
        let mut inner = self.lock();
        let Some(channel) = self.channel.get().cloned() else { return self.queue_or_relay(&mut inner, task) };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return self.queue_or_relay(&mut inner, task) };
        let local = inner.host_agent.get(&task.host).and_then(|a| inner.agents.get(a)).map(|a| a.pulls);
        if local == Some(false) {
            return inner.queue(task);
        }
        let local = local.is_some();
        if !inner.sending.insert(task.id.clone()) {
            return local;
        }
        if local {
            // Not offered again by the sweep while it travels.
            inner.handed_out.insert(task.id.clone(), Instant::now());
        }
        drop(inner);
        let (hub, metrics, peers) = (self.inner.clone(), self.metrics.clone(), self.peers.get().cloned());
        runtime.spawn(async move {
            let outcome = channel.send(&task).await;
            let mut inner = lock(&hub);
            inner.sending.remove(&task.id);
            match outcome {
                Ok(()) => {
                    metrics.host_published.fetch_add(1, Ordering::Relaxed);
                }
                Err(failure) if local => {
                    metrics.host_fallbacks.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(task = %task.id, ?failure, "the host subject did not take a task; long poll");
                    inner.queue(task);
                }
                Err(failure) => {
                    metrics.host_unanswered.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(task = %task.id, ?failure, "no agent took a task for a host not connected here");
                    // Its agent may long-poll another process.
                    if let Some(peers) = peers {
                        let _ = peers.send(task);
                    }
                }
            }
        });
        local
    }

    /// Queue a task found by the sweep unless it is queued or was handed
    /// out recently.
    pub fn offer(&self, task: Task) -> bool {
        let mut inner = self.lock();
        if inner.sending.contains(&task.id) {
            return false;
        }
        if let Some(at) = inner.handed_out.get(&task.id) {
            if at.elapsed() < self.resend_after {
                return false;
            }
        }
        inner.queue(task)
    }

    /// Wait up to `wait` for tasks of `agent`; `None` when the agent is not
    /// registered here.
    pub async fn take(&self, agent: &str, wait: Duration, max: usize) -> Option<Vec<Task>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notify = {
                let mut inner = self.lock();
                let entry = inner.agents.get_mut(agent)?;
                if !entry.queue.is_empty() {
                    let n = entry.queue.len().min(max.max(1));
                    let tasks: Vec<Task> = entry.queue.drain(..n).collect();
                    for task in &tasks {
                        entry.queued.remove(&task.id);
                    }
                    let now = Instant::now();
                    for task in &tasks {
                        inner.handed_out.insert(task.id.clone(), now);
                    }
                    return Some(tasks);
                }
                entry.notify.clone()
            };
            if tokio::time::timeout_at(deadline, notify.notified()).await.is_err() {
                return Some(Vec::new());
            }
        }
    }

    /// `task` went to its agent another way (pull mode's claim answers
    /// with the build): the sweep does not offer it again before
    /// `resend_after`, so it is not built twice.
    pub fn mark_handed_out(&self, task: &Task) {
        self.lock().handed_out.insert(task.id.clone(), Instant::now());
    }

    /// The agent reported the task (done or failed).
    pub fn completed(&self, task_id: &str) {
        self.lock().handed_out.remove(task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn routes_waits_and_does_not_duplicate() {
        let hub = Hub::default();
        assert!(hub.take("a", Duration::ZERO, 10).await.is_none(), "unknown agent");
        hub.register("a", &["h1".to_owned()], false);
        let task = Task::new(Uuid::new_v4(), "h1", "spawning").expect("task");
        assert!(hub.push(task.clone()));
        assert!(!hub.push(task.clone()), "already queued");
        assert!(!hub.push(Task::new(Uuid::new_v4(), "elsewhere", "spawning").expect("task")), "no local agent");
        let got = hub.take("a", Duration::from_secs(1), 10).await.expect("known");
        assert_eq!(got, vec![task.clone()]);
        assert!(!hub.offer(task.clone()), "handed out recently");
        hub.completed(&task.id);
        assert!(hub.offer(task), "completed tasks may come again (a new transition)");
        // A waiting agent wakes up when work arrives.
        let hub = Arc::new(hub);
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.take("a", Duration::from_secs(5), 10).await })
        };
        let _ = waiter.await;
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.take("a", Duration::from_secs(5), 10).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        hub.push(Task::new(Uuid::new_v4(), "h1", "deleting").expect("task"));
        let got = waiter.await.expect("join").expect("known");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, TaskKind::Delete);
    }

    #[tokio::test]
    async fn relayed_tasks_reach_the_agent_connected_here_once() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let tasks = vec![
            Task::new(a, "h1", "spawning").expect("task"),
            Task::new(b, "host with spaces", "deleting").expect("task"),
            Task::live(a, "h2", TaskKind::LiveMigrate),
            Task::destroy_evacuated(b, "h1"),
            // Not relayed (a line break would split it): the sweep's.
            Task::new(a, "bad\nhost", "spawning").expect("task"),
        ];
        let payloads = relay_payloads(&tasks);
        assert_eq!(payloads.len(), 1);
        assert_eq!(relayed_tasks(&payloads[0]), tasks[..4].to_vec());
        assert!(relayed_tasks("not a task\n\nx y").is_empty());
        // Many tasks split into payloads that each fit.
        let many: Vec<Task> =
            (0..500).map(|i| Task::new(Uuid::new_v4(), &format!("host{i}"), "spawning").unwrap()).collect();
        let payloads = relay_payloads(&many);
        assert!(payloads.len() > 1 && payloads.iter().all(|p| p.len() <= MAX_RELAY_PAYLOAD));
        assert_eq!(payloads.iter().flat_map(|p| relayed_tasks(p)).collect::<Vec<_>>(), many);

        // A process whose agent serves h1 queues what it is relayed for
        // h1, once; a task for a host nobody here serves is dropped.
        let hub = Hub::default();
        hub.register("agent", &["h1".to_owned()], false);
        assert_eq!(hub.receive_relayed(&relay_payloads(&tasks)[0]), 2);
        assert_eq!(hub.receive_relayed(&relay_payloads(&tasks)[0]), 0, "already queued");
        let got = hub.take("agent", Duration::from_secs(1), 10).await.expect("known");
        assert_eq!(got, vec![tasks[0].clone(), tasks[3].clone()]);
        assert_eq!(hub.receive_relayed(&relay_payloads(&tasks)[0]), 0, "handed out recently");
        assert_eq!(hub.metrics.relayed_in.load(Ordering::Relaxed), 2);
    }

    struct Recorder(Mutex<Vec<String>>);

    impl PeerChannel for Recorder {
        fn send(&self, payload: &str) {
            self.0.lock().expect("sent").push(payload.to_owned());
        }
    }

    #[tokio::test]
    async fn tasks_for_hosts_not_served_here_are_relayed() {
        let hub = Hub::default();
        let recorder = Arc::new(Recorder(Mutex::default()));
        assert!(hub.set_peer_channel(recorder.clone()));
        hub.register("agent", &["h1".to_owned()], false);
        let local = Task::new(Uuid::new_v4(), "h1", "spawning").expect("task");
        let remote = Task::new(Uuid::new_v4(), "h9", "spawning").expect("task");
        assert!(hub.push(local.clone()));
        assert!(!hub.push(remote.clone()));
        for _ in 0..100 {
            if !recorder.0.lock().expect("sent").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sent = recorder.0.lock().expect("sent").clone();
        assert_eq!(sent.iter().flat_map(|p| relayed_tasks(p)).collect::<Vec<_>>(), vec![remote]);
        assert_eq!(hub.metrics.relayed.load(Ordering::Relaxed), 1);
    }

    /// A host channel that takes tasks (`taking`) or has no subscriber.
    struct FakeChannel {
        taking: bool,
        sent: Mutex<Vec<Task>>,
    }

    impl HostChannel for FakeChannel {
        fn send(&self, task: &Task) -> BoxFuture<'_, Result<(), HostSendFailure>> {
            self.sent.lock().expect("sent").push(task.clone());
            let taking = self.taking;
            Box::pin(async move {
                if taking {
                    Ok(())
                } else {
                    Err(HostSendFailure::NoTaker)
                }
            })
        }
    }

    async fn settle(hub: &Hub) {
        for _ in 0..100 {
            if hub.lock().sending.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("a send never finished");
    }

    #[tokio::test]
    async fn pull_mode_sends_on_host_subjects_and_falls_back_to_the_long_poll() {
        let hub = Hub::default();
        let channel = Arc::new(FakeChannel { taking: true, sent: Mutex::default() });
        assert!(hub.set_host_channel(channel.clone()));
        hub.register("puller", &["p1".to_owned()], true);
        hub.register("pusher", &["q1".to_owned()], false);
        // A pulling agent's task goes on the subject, not to the long poll,
        // and the sweep leaves it alone while it is out.
        let delete = Task::new(Uuid::new_v4(), "p1", "deleting").expect("task");
        assert!(hub.push(delete.clone()));
        settle(&hub).await;
        assert_eq!(*channel.sent.lock().expect("sent"), vec![delete.clone()]);
        assert_eq!(hub.take("puller", Duration::ZERO, 10).await, Some(Vec::new()));
        assert!(!hub.offer(delete.clone()), "handed out on the subject");
        assert_eq!(hub.metrics.host_published.load(Ordering::Relaxed), 1);
        // A push agent's task goes to its long poll only.
        let stop = Task::new(Uuid::new_v4(), "q1", "powering-off").expect("task");
        assert!(hub.push(stop.clone()));
        assert_eq!(hub.take("pusher", Duration::ZERO, 10).await, Some(vec![stop]));
        // A host not connected here: sent (its agent may pull from another
        // process), nothing queued here.
        let remote = Task::new(Uuid::new_v4(), "elsewhere", "deleting").expect("task");
        assert!(!hub.push(remote.clone()));
        settle(&hub).await;
        assert_eq!(channel.sent.lock().expect("sent").len(), 2);
        assert_eq!(hub.metrics.host_published.load(Ordering::Relaxed), 2);
        assert_eq!(hub.metrics.host_fallbacks.load(Ordering::Relaxed), 0);

        // Nobody takes it on the subject: the pulling agent gets it by long
        // poll, counted; a remote host's is counted as unanswered.
        let hub = Hub::default();
        assert!(hub.set_host_channel(Arc::new(FakeChannel { taking: false, sent: Mutex::default() })));
        hub.register("puller", &["p1".to_owned()], true);
        assert!(hub.push(delete.clone()));
        let got = hub.take("puller", Duration::from_secs(5), 10).await.expect("known");
        assert_eq!(got, vec![delete]);
        assert_eq!(hub.metrics.host_fallbacks.load(Ordering::Relaxed), 1);
        assert!(!hub.push(remote));
        settle(&hub).await;
        assert_eq!(hub.metrics.host_unanswered.load(Ordering::Relaxed), 1);
        assert_eq!(hub.metrics.host_published.load(Ordering::Relaxed), 0);
    }
}
