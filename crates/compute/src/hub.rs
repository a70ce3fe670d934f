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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

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
}

impl Task {
    /// The task for `instance` on `host` in `task_state`.
    pub fn new(instance: Uuid, host: &str, task_state: &str) -> Option<Self> {
        let kind = TaskKind::for_task_state(task_state)?;
        Some(Task { id: format!("{instance}:{task_state}@{host}"), kind, instance, host: host.to_owned() })
    }

    /// A live migration's step (no task state of its own: the row stays
    /// `migrating` on the source throughout, so the migration record's
    /// status says which host acts; see `live.rs`).
    pub fn live(instance: Uuid, host: &str, kind: TaskKind) -> Self {
        Task { id: format!("{instance}:{}@{host}", kind.as_str()), kind, instance, host: host.to_owned() }
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
        }
    }
}

#[derive(Debug)]
struct Agent {
    /// Shared, so that the agent's long poll (which checks all of them
    /// against their binding) borrows them instead of copying thousands of
    /// names each time.
    hosts: Arc<HashSet<String>>,
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
}

/// The hub.
#[derive(Debug)]
pub struct Hub {
    inner: Mutex<Inner>,
    /// A task handed out and not reported within this time is handed out
    /// again by the sweep.
    pub resend_after: Duration,
}

impl Default for Hub {
    fn default() -> Self {
        Hub { inner: Mutex::default(), resend_after: Duration::from_secs(60) }
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An agent (re)registers with its hosts.
    pub fn register(&self, agent: &str, hosts: &[String]) {
        let mut inner = self.lock();
        let entry = inner.agents.entry(agent.to_owned()).or_insert_with(|| Agent {
            hosts: Arc::default(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            notify: Arc::new(tokio::sync::Notify::new()),
        });
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

    /// Queue `task` for the agent serving its host (if connected here).
    /// Returns whether it was queued.
    pub fn push(&self, task: Task) -> bool {
        let mut inner = self.lock();
        let Some(agent_id) = inner.host_agent.get(&task.host).cloned() else { return false };
        let Some(agent) = inner.agents.get_mut(&agent_id) else { return false };
        if !agent.queued.insert(task.id.clone()) {
            return false;
        }
        agent.queue.push_back(task);
        agent.notify.notify_one();
        true
    }

    /// Queue a task found by the sweep unless it is queued or was handed
    /// out recently.
    pub fn offer(&self, task: Task) -> bool {
        {
            let inner = self.lock();
            if let Some(at) = inner.handed_out.get(&task.id) {
                if at.elapsed() < self.resend_after {
                    return false;
                }
            }
        }
        self.push(task)
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
        hub.register("a", &["h1".to_owned()]);
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
}
