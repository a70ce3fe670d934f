//! Pull mode: the agent takes boots from the NATS JetStream queues its
//! hosts can satisfy, instead of waiting for the scheduler to push them.
//!
//! 1. `GET /agent/v1/queues?agent=ID` says which queues each of its hosts
//!    can take now (the control plane runs the scheduler's placement
//!    query and filters once per queue for all hosts, shares that for
//!    200 ms between agents, and answers with this agent's hosts);
//! 2. one worker per such queue binds to the queue's shared durable
//!    consumer and fetches, never holding more than `max_in_flight`
//!    messages over all queues (back-pressure);
//! 3. each boot is claimed for one of the hosts that can take it
//!    (`POST /agent/v1/claim`, one planned write, idempotent per
//!    instance; up to 8 hosts, starting at one picked by the instance's
//!    uuid so concurrent boots spread): `claimed` → build, report `spawned` (as a pushed build),
//!    ack; `gone` → ack and drop; `refused` on every host tried → nak with
//!    a delay, so another agent takes it;
//! 4. after every build, and every `refresh`, the queue set is evaluated
//!    again: a queue no host can take any more is left (a full agent stops
//!    receiving).
//!
//! A message fetched and never acked (the agent died) comes back after the
//! consumer's ack wait; the claim's idempotency leaves one server.
//!
//! Every other task for its hosts (a delete, a start or stop, a move, the
//! build of a boot the control plane routed to push) comes on each host's
//! NATS subject `{prefix}.host.{host}` ([`take_host_tasks`]): the agent
//! answers that it took it, then runs it as a long-polled task (the same
//! in-flight set, the same events). The long poll stays: the control
//! plane falls back to it when no answer comes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use berth_pull::{Delivery, Queues, Settings};
use serde_json::{json, Value};

use crate::{run_task, AgentConfig, Link};

/// How an agent pulls.
#[derive(Debug, Clone)]
pub struct PullConfig {
    /// NATS and the queue names.
    pub nats: Settings,
    /// Most boots held (fetched, not yet acked or naked) at once.
    pub max_in_flight: usize,
    /// How long a refused boot waits before it is delivered again.
    pub nak_delay: Duration,
    /// How often the queue set is evaluated again without a build.
    pub refresh: Duration,
}

/// Counters of one pulling agent.
#[derive(Debug, Default)]
pub struct PullCounters {
    /// Boots claimed and built.
    pub claimed: AtomicU64,
    /// Boots naked (refused by every host tried).
    pub naks: AtomicU64,
    /// Boots delivered more than once.
    pub redelivered: AtomicU64,
    /// Boots dropped as gone.
    pub gone: AtomicU64,
    /// Tasks taken on the hosts' subjects.
    pub host_tasks: AtomicU64,
}

struct Worker {
    hosts: Arc<RwLock<Arc<Vec<String>>>>,
    stop: Arc<AtomicBool>,
}

/// Shared by the workers of one agent.
struct Shared {
    link: Link,
    config: Arc<AgentConfig>,
    pull: PullConfig,
    queues: Queues,
    permits: Arc<tokio::sync::Semaphore>,
    changed: Arc<tokio::sync::Notify>,
    events: tokio::sync::mpsc::UnboundedSender<Value>,
    in_flight: Arc<Mutex<HashSet<String>>>,
    counters: Arc<PullCounters>,
}

/// Run the pull side of an agent until aborted.
pub(crate) async fn run(
    link: Link,
    config: Arc<AgentConfig>,
    pull: PullConfig,
    events: tokio::sync::mpsc::UnboundedSender<Value>,
    in_flight: Arc<Mutex<HashSet<String>>>,
    counters: Arc<PullCounters>,
) {
    let queues = loop {
        match Queues::connect(&pull.nats).await {
            Ok(queues) => break queues,
            Err(err) => {
                tracing::warn!(error = %err, "connecting to NATS failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let shared = Arc::new(Shared {
        permits: Arc::new(tokio::sync::Semaphore::new(pull.max_in_flight.max(1))),
        changed: Arc::new(tokio::sync::Notify::new()),
        link,
        config,
        pull,
        queues,
        events,
        in_flight,
        counters,
    });
    tokio::spawn(take_host_tasks(shared.clone()));
    let mut workers: HashMap<String, Worker> = HashMap::new();
    loop {
        match evaluate(&shared).await {
            Ok(wanted) => {
                workers.retain(|key, worker| {
                    let keep = wanted.contains_key(key);
                    if !keep {
                        tracing::debug!(queue = %key, "leaving a queue no host can take");
                        worker.stop.store(true, Ordering::Relaxed);
                    }
                    keep
                });
                for (key, hosts) in wanted {
                    match workers.get(&key) {
                        Some(worker) => *worker.hosts.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(hosts),
                        None => {
                            tracing::debug!(queue = %key, hosts = hosts.len(), "binding to a queue");
                            let worker = Worker {
                                hosts: Arc::new(RwLock::new(Arc::new(hosts))),
                                stop: Arc::new(AtomicBool::new(false)),
                            };
                            tokio::spawn(work_queue(
                                shared.clone(),
                                key.clone(),
                                worker.hosts.clone(),
                                worker.stop.clone(),
                            ));
                            workers.insert(key, worker);
                        }
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "evaluating the pull queues failed"),
        }
        // After a build, or every `refresh`; at most every 200 ms (the
        // control plane shares one evaluation per queue for 200 ms).
        let _ = tokio::time::timeout(shared.pull.refresh, shared.changed.notified()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn evaluate(shared: &Shared) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let path = format!("/queues?agent={}", shared.config.agent_id);
    let (status, body) = shared.link.agent(reqwest::Method::GET, &path, None).await?;
    if status != 200 {
        anyhow::bail!("GET /agent/v1/queues answered {status}: {body}");
    }
    let mut out = BTreeMap::new();
    if let Some(queues) = body["queues"].as_object() {
        for (key, hosts) in queues {
            let hosts: Vec<String> =
                hosts.as_array().into_iter().flatten().filter_map(|h| h.as_str().map(str::to_owned)).collect();
            if !hosts.is_empty() {
                out.insert(key.clone(), hosts);
            }
        }
    }
    Ok(out)
}

async fn work_queue(shared: Arc<Shared>, key: String, hosts: Arc<RwLock<Arc<Vec<String>>>>, stop: Arc<AtomicBool>) {
    let consumer = loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match shared.queues.consumer(&key).await {
            Ok(consumer) => break consumer,
            Err(err) => {
                tracing::warn!(queue = %key, error = %err, "binding to the queue failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // Back-pressure: fetch only as many as may be held.
        let Ok(first) = shared.permits.clone().acquire_owned().await else { return };
        let mut permits = vec![first];
        while permits.len() < 16 {
            match shared.permits.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        let deliveries = match shared.queues.fetch(&consumer, permits.len(), Duration::from_secs(1)).await {
            Ok(deliveries) => deliveries,
            Err(err) => {
                tracing::debug!(queue = %key, error = %err, "fetch failed");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        for delivery in deliveries {
            let Some(permit) = permits.pop() else { break };
            // The hosts' list is shared, not copied per boot.
            let (shared, hosts) = (shared.clone(), hosts.read().unwrap_or_else(|p| p.into_inner()).clone());
            tokio::spawn(async move {
                handle(&shared, delivery, &hosts).await;
                drop(permit);
            });
        }
    }
}

/// Hosts tried for one boot before it is naked.
const HOSTS_PER_BOOT: usize = 8;

async fn handle(shared: &Shared, delivery: Delivery, hosts: &[String]) {
    if delivery.delivered > 1 {
        shared.counters.redelivered.fetch_add(1, Ordering::Relaxed);
    }
    let instance = delivery.boot.instance.to_string();
    // Concurrent boots start at different hosts (a hash of the instance),
    // so they do not all race for the first host of the list.
    let start = if hosts.is_empty() { 0 } else { (delivery.boot.instance.as_u128() % hosts.len() as u128) as usize };
    if !delivery.boot.gang.is_empty() {
        let rotated: Vec<&String> = hosts.iter().cycle().skip(start).take(hosts.len()).collect();
        return handle_gang(shared, delivery, &rotated).await;
    }
    for host in hosts.iter().cycle().skip(start).take(HOSTS_PER_BOOT.min(hosts.len())) {
        let body = json!({"instance": instance, "host": host});
        let Some(answer) = claim(shared, body, &delivery).await else { return };
        match answer["result"].as_str() {
            Some("claimed") => {
                let task = answer["task"].clone();
                let id = task["id"].as_str().unwrap_or("").to_owned();
                let fresh = shared.in_flight.lock().map(|mut s| s.insert(id)).unwrap_or(false);
                if fresh {
                    let event = run_task(&shared.config, &task).await;
                    if !event.is_null() {
                        let _ = shared.events.send(event);
                    }
                }
                shared.counters.claimed.fetch_add(1, Ordering::Relaxed);
                if let Err(err) = delivery.ack().await {
                    tracing::warn!(%instance, error = %err, "ack failed (the claim is idempotent)");
                }
                shared.changed.notify_one();
                return;
            }
            Some("gone") => {
                shared.counters.gone.fetch_add(1, Ordering::Relaxed);
                let _ = delivery.ack().await;
                return;
            }
            _ => continue,
        }
    }
    // No host of ours takes it now: someone else may.
    shared.counters.naks.fetch_add(1, Ordering::Relaxed);
    let _ = delivery.nak(shared.pull.nak_delay).await;
    shared.changed.notify_one();
}

/// `POST /agent/v1/claim` with `body`: the answer, or `None` when the
/// control plane did not answer one (an error status, unreachable): the
/// boot is then naked for a second later.
async fn claim(shared: &Shared, body: Value, delivery: &Delivery) -> Option<Value> {
    match shared.link.agent(reqwest::Method::POST, "/claim", Some(body)).await {
        Ok((200, answer)) => Some(answer),
        Ok((status, answer)) => {
            tracing::warn!(status, %answer, "claim refused by the control plane");
            let _ = delivery.nak(Duration::from_secs(1)).await;
            None
        }
        Err(err) => {
            tracing::warn!(error = %err, "claim failed");
            let _ = delivery.nak(Duration::from_secs(1)).await;
            None
        }
    }
}

/// A multi-create's gang: one claim for all its instances on this agent's
/// hosts (all or none); claimed → build them all, then ack; refused → nak
/// (an agent with more room takes it).
async fn handle_gang(shared: &Shared, delivery: Delivery, hosts: &[&String]) {
    let instances: Vec<String> = delivery.boot.gang.iter().map(ToString::to_string).collect();
    let body = json!({"instances": instances, "hosts": hosts});
    let Some(answer) = claim(shared, body, &delivery).await else { return };
    match answer["result"].as_str() {
        Some("claimed") => {
            let tasks = answer["tasks"].as_array().cloned().unwrap_or_default();
            let mut builds = tokio::task::JoinSet::new();
            for task in tasks.iter().cloned() {
                let (config, events, in_flight) =
                    (shared.config.clone(), shared.events.clone(), shared.in_flight.clone());
                builds.spawn(async move {
                    let id = task["id"].as_str().unwrap_or("").to_owned();
                    let fresh = in_flight.lock().map(|mut s| s.insert(id)).unwrap_or(false);
                    if fresh {
                        let event = run_task(&config, &task).await;
                        if !event.is_null() {
                            let _ = events.send(event);
                        }
                    }
                });
            }
            while builds.join_next().await.is_some() {}
            shared.counters.claimed.fetch_add(tasks.len() as u64, Ordering::Relaxed);
            if let Err(err) = delivery.ack().await {
                tracing::warn!(instance = %delivery.boot.instance, error = %err, "ack failed (the claim is idempotent)");
            }
            shared.changed.notify_one();
        }
        Some("gone") => {
            shared.counters.gone.fetch_add(1, Ordering::Relaxed);
            let _ = delivery.ack().await;
        }
        _ => {
            shared.counters.naks.fetch_add(1, Ordering::Relaxed);
            let _ = delivery.nak(shared.pull.nak_delay).await;
            shared.changed.notify_one();
        }
    }
}

/// Take the tasks sent on the subjects of the agent's hosts and run them
/// as long-polled tasks are run.
async fn take_host_tasks(shared: Arc<Shared>) {
    let hosts = shared.config.host_names();
    let mut tasks = loop {
        match shared.queues.host_tasks(&hosts).await {
            Ok(tasks) => break tasks,
            Err(err) => {
                tracing::warn!(error = %err, "subscribing to the host subjects failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    tracing::debug!(hosts = hosts.len(), "taking tasks on the host subjects");
    while let Some(received) = tasks.next().await {
        let task: Value = match serde_json::from_slice(&received.payload) {
            Ok(task) => task,
            Err(err) => {
                tracing::warn!(host = %received.host, error = %err, "ignoring a malformed host task");
                continue;
            }
        };
        if task["host"].as_str() != Some(received.host.as_str()) {
            // Not for this host: unanswered, so the control plane falls
            // back to the long poll.
            tracing::warn!(host = %received.host, %task, "ignoring a task for another host");
            continue;
        }
        if let Err(err) = received.accept().await {
            // The sender falls back to the long poll: a second delivery,
            // ignored while this one runs.
            tracing::debug!(error = %err, "answering a host task failed");
        }
        shared.counters.host_tasks.fetch_add(1, Ordering::Relaxed);
        let id = task["id"].as_str().unwrap_or("").to_owned();
        let fresh = shared.in_flight.lock().map(|mut s| s.insert(id)).unwrap_or(false);
        if !fresh {
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let event = run_task(&shared.config, &task).await;
            if !event.is_null() {
                let _ = shared.events.send(event);
            }
            // A delete frees room: evaluate the queue set again.
            shared.changed.notify_one();
        });
    }
}
