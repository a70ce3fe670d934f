//! Pull-mode scheduling, the control plane's side (`serve --scheduling
//! pull`).
//!
//! Admission is unchanged (`plan_admit_boot`, one planned write). After
//! it, instead of scheduling, the conductor hands each boot a queue can
//! carry to the [`Broker`] ([`deliver`]), which publishes it to its queue
//! (`berth_compute_model::pull::queue_key`); boots pull cannot express
//! (`pull_routable`) go through the push scheduler and are counted.
//! Agents ask which queues their hosts can take now ([`queues_for_hosts`]:
//! per queue, the scheduler's placement query and filters over all hosts
//! at once, shared by every agent for 200 ms, intersected with the
//! agent's hosts)
//! and claim the boots they fetch ([`claim_on_host`]): the push path's
//! claim with the destination forced to the claiming host, one planned
//! write; the answer carries the build, so the hub does not push it too.
//!
//! Build requests are the outbox: [`spawn_outbox`] publishes admitted
//! boots no publish of this process acknowledged (a crash in between, NATS
//! down), and buries, as push buries a boot no host takes, boots nobody
//! claimed within the build timeout.
//!
//! A build that fails on its host goes back to its queue
//! (`conductor::reschedule` → `plan_requeue`, one write: allocations
//! released, attempt counted, the failed host remembered, the spec marked
//! requeued; the row stays `scheduling` on the failed host). The outbox
//! publishes it as the next attempt ([`requeued`] keeps an index of such
//! instances, rebuilt from the world at start, so a pass does not scan
//! every request spec), and buries it after the build timeout; the claim
//! of a requeued instance ([`claim_on_host`]) refuses the hosts its build
//! failed on and creates its allocations only while it has none
//! (`plan_claim_requeued`, one write).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use berth_compute_model::cell::task_state;
use berth_compute_model::choice::host_of_instance;
use berth_compute_model::plan::{
    plan_claim, plan_claim_requeued, plan_expire_requeued, requeue_waiting, ClaimFailure, Claimed, InstanceChoices,
    RequeueClaim,
};
use berth_compute_model::pull::{pull_routable, queue_key};
use berth_compute_model::{BuildRequest, GroupPolicy, RequestSpec, World, WorldChangeSet};
use berth_scheduler::eligible_hosts;
use berth_store::{CellOp, CellOutcome, Expect};
use uuid::Uuid;

use crate::build::{self, BootJob};
use crate::control::{read, write};
use crate::hub::Task;
use crate::{BoxFuture, Compute};

/// One boot to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The instance.
    pub instance: Uuid,
    /// Its queue key.
    pub queue: String,
    /// Its build attempt (deduplication: one message per attempt).
    pub attempt: i64,
    /// A multi-create's instances in launch order, `instance` first (one
    /// message: a gang); empty for a single boot.
    pub gang: Vec<Uuid>,
}

/// Where boots are published (NATS JetStream in `berth serve`; the
/// process wiring registers it).
pub trait Broker: Send + Sync {
    /// Publish `boot`; a second publish of the same instance and attempt
    /// is dropped by the broker.
    fn publish(&self, boot: Publication) -> BoxFuture<'_, Result<(), String>>;
}

/// Counters of pull mode (exported at `/metrics`).
#[derive(Debug, Default)]
pub struct PullMetrics {
    /// Boots published (first publishes and the outbox's).
    pub published: AtomicU64,
    /// Publishes that failed (retried by the outbox sweep).
    pub publish_failures: AtomicU64,
    /// Boots sent through the push scheduler because a queue cannot carry
    /// them, by reason.
    pub routed_to_push: Mutex<BTreeMap<&'static str, u64>>,
    /// Claims that placed an instance.
    pub claims: AtomicU64,
    /// Claims refused (the host cannot take it now).
    pub claims_refused: AtomicU64,
    /// Claims for instances claimed elsewhere or deleted.
    pub claims_gone: AtomicU64,
    /// Boots buried because nobody claimed them within the build timeout
    /// (requeued ones included).
    pub timed_out: AtomicU64,
    /// Failed builds put back on their queue as their next attempt.
    pub requeued: AtomicU64,
    /// Claims that placed a requeued instance.
    pub requeued_claims: AtomicU64,
    /// Queue evaluations run (each: one placement query and the filters
    /// over all hosts; shared by the agents' requests for
    /// [`QUEUE_EVALUATION_MAX_AGE`]).
    pub queue_evaluations: AtomicU64,
}

/// Pull mode's state in one process.
#[derive(Default)]
pub struct Pull {
    broker: OnceLock<Arc<dyn Broker>>,
    /// The queue list: every queue key seen, with the spec that first
    /// named it (what agents' hosts are evaluated against).
    queues: Mutex<BTreeMap<String, RequestSpec>>,
    /// Per queue, the hosts that could take it when last evaluated.
    evaluations: Mutex<HashMap<String, Evaluation>>,
    /// Instances whose publish this process saw acknowledged.
    published: Mutex<HashSet<Uuid>>,
    /// Instances being published now (the outbox leaves them alone).
    publishing: Mutex<HashSet<Uuid>>,
    /// Requeued instances waiting for a claim, with when they were
    /// requeued (the outbox's index: it publishes and buries these
    /// without scanning every request spec).
    requeued: Mutex<HashMap<Uuid, i64>>,
    /// Wakes the outbox when an instance is requeued.
    requeue_wake: tokio::sync::Notify,
    /// Seconds a boot may wait for a claim before it is buried.
    build_timeout_secs: std::sync::atomic::AtomicI64,
    /// Counters.
    pub metrics: PullMetrics,
}

impl std::fmt::Debug for Pull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pull").field("enabled", &self.enabled()).finish_non_exhaustive()
    }
}

impl Pull {
    /// Is this process in pull mode?
    pub fn enabled(&self) -> bool {
        self.broker.get().is_some()
    }

    /// The queue keys in use, sorted.
    pub fn queues(&self) -> Vec<String> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// Remember queue `key` with the spec its hosts are evaluated against:
    /// `spec` without its group and as one instance (neither is in the
    /// key; the claim checks both).
    fn note_queue(&self, key: &str, spec: &RequestSpec) {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).entry(key.to_owned()).or_insert_with(|| {
            let mut spec = spec.clone();
            spec.group = None;
            spec.num_instances = 1;
            spec
        });
    }

    /// Requeued instances waiting for a claim (as far as this process
    /// knows).
    pub fn requeued_waiting(&self) -> usize {
        self.requeued.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn routed(&self, reason: &'static str) {
        *self.metrics.routed_to_push.lock().unwrap_or_else(|p| p.into_inner()).entry(reason).or_insert(0) += 1;
    }
}

impl Compute {
    /// Switch this process to pull mode: boots a queue can carry go to
    /// `broker`; nobody claiming one within `build_timeout_secs` buries
    /// it. Once; a second call is ignored and returns false.
    pub fn set_pull_broker(self: &Arc<Self>, broker: Arc<dyn Broker>, build_timeout_secs: i64) -> bool {
        self.pull.build_timeout_secs.store(build_timeout_secs.max(1), Ordering::Relaxed);
        if self.pull.broker.set(broker).is_err() {
            return false;
        }
        // Queues of boots admitted before (a restart), and the requeued
        // builds waiting for a claim.
        read(&*self.control, |w| {
            for spec in w.compute.build_requests.keys().filter_map(|i| w.compute.request_specs.get(i)) {
                if pull_routable(spec, 1, group_policy(w, spec)).is_ok() {
                    self.pull.note_queue(&queue_key(spec), spec);
                }
            }
            let mut requeued = self.pull.requeued.lock().unwrap_or_else(|p| p.into_inner());
            for (instance, spec) in &w.compute.request_specs {
                let Some(since) = spec.retry.requeued_at else { continue };
                if requeue_waiting(w, instance).is_some() {
                    self.pull.note_queue(&queue_key(spec), spec);
                    requeued.insert(*instance, since);
                }
            }
        });
        true
    }
}

/// The policy of `spec`'s server group, if it has one.
pub(crate) fn group_policy<'w>(w: &'w World, spec: &RequestSpec) -> Option<&'w GroupPolicy> {
    spec.group.and_then(|g| w.compute.server_groups.get(&g)).map(|g| &g.policy)
}

async fn publish_one(compute: &Compute, boot: Publication) -> bool {
    let Some(broker) = compute.pull.broker.get() else { return false };
    let instance = boot.instance;
    if !compute.pull.publishing.lock().unwrap_or_else(|p| p.into_inner()).insert(instance) {
        // Another publish of it is under way.
        return true;
    }
    let members = if boot.gang.is_empty() { vec![instance] } else { boot.gang.clone() };
    let outcome = broker.publish(boot).await;
    compute.pull.publishing.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    match outcome {
        Ok(()) => {
            compute.pull.metrics.published.fetch_add(1, Ordering::Relaxed);
            compute.pull.published.lock().unwrap_or_else(|p| p.into_inner()).extend(members);
            true
        }
        Err(err) => {
            compute.pull.metrics.publish_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%instance, error = %err, "publishing a boot failed; the outbox sweep retries");
            false
        }
    }
}

/// Publish the boots of `jobs` a queue can carry; returns the others
/// (for the push scheduler).
pub(crate) async fn deliver(compute: &Arc<Compute>, jobs: Vec<BootJob>) -> Vec<BootJob> {
    let mut push = Vec::new();
    for job in jobs {
        let Some(boot) = build::load(compute, job.clone()) else { continue };
        if boot.builds.is_empty() {
            continue;
        }
        let routable =
            read(&*compute.control, |w| pull_routable(&boot.spec, boot.builds.len(), group_policy(w, &boot.spec)));
        if let Err(reason) = routable {
            compute.pull.routed(reason);
            push.push(job);
            continue;
        }
        let queue = queue_key(&boot.spec);
        compute.pull.note_queue(&queue, &boot.spec);
        let attempt = boot.spec.retry.attempts();
        publish_one(compute, publication(&boot.builds, queue, attempt)).await;
    }
    push
}

/// The message of `builds` (one boot, or a multi-create's gang in launch
/// order, named by its first instance).
fn publication(builds: &[BuildRequest], queue: String, attempt: i64) -> Publication {
    let mut gang: Vec<(i64, Uuid)> = builds.iter().map(|b| (b.spec.launch_index, b.instance_uuid)).collect();
    gang.sort();
    let gang: Vec<Uuid> = gang.into_iter().map(|(_, i)| i).collect();
    let instance = gang.first().copied().unwrap_or_default();
    Publication { instance, queue, attempt, gang: if gang.len() > 1 { gang } else { Vec::new() } }
}

/// Note an instance requeued since `since` (`conductor::reschedule`, or
/// its re-drive finding one): the outbox publishes it as its next attempt
/// unless this process saw that publish acknowledged, and buries it after
/// the build timeout. `fresh`: this process's write requeued it now
/// (counted; its earlier attempt's publish does not count as this one's).
pub(crate) fn requeued(compute: &Compute, instance: Uuid, since: i64, fresh: bool) {
    if !compute.pull.enabled() {
        return;
    }
    if fresh {
        compute.pull.metrics.requeued.fetch_add(1, Ordering::Relaxed);
        compute.pull.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    }
    let known = compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).insert(instance, since);
    if fresh || known != Some(since) {
        compute.pull.requeue_wake.notify_one();
    }
}

/// Publish what no publish of this process acknowledged and bury what
/// waited past the build timeout, every `interval`; requeued builds also
/// as soon as they are requeued.
pub fn spawn_outbox(compute: Arc<Compute>, interval: Duration) {
    tokio::spawn(async move {
        let mut next = tokio::time::Instant::now() + interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {
                    next = tokio::time::Instant::now() + interval;
                    outbox_pass(&compute).await;
                }
                _ = compute.pull.requeue_wake.notified() => requeue_pass(&compute).await,
            }
        }
    });
}

/// One outbox pass (see [`spawn_outbox`]).
pub async fn outbox_pass(compute: &Arc<Compute>) {
    let now = compute.now();
    let timeout = compute.pull.build_timeout_secs.load(Ordering::Relaxed);
    type Pending = Vec<(BuildRequest, RequestSpec)>;
    let (to_publish, expired): (Pending, Pending) = read(&*compute.control, |w| {
        let published = compute.pull.published.lock().unwrap_or_else(|p| p.into_inner());
        let publishing = compute.pull.publishing.lock().unwrap_or_else(|p| p.into_inner());
        let mut to_publish = Vec::new();
        let mut expired = Vec::new();
        for build in w.compute.build_requests.values() {
            let Some(spec) = w.compute.request_specs.get(&build.instance_uuid) else { continue };
            let instances = spec.num_instances.max(1) as usize;
            if build.held || pull_routable(spec, instances, group_policy(w, spec)).is_err() {
                continue;
            }
            if now - build.created_at >= timeout {
                expired.push((build.clone(), spec.clone()));
            } else if !published.contains(&build.instance_uuid)
                && !publishing.contains(&build.instance_uuid)
                && now - build.created_at >= 1
            {
                to_publish.push((build.clone(), spec.clone()));
            }
        }
        (to_publish, expired)
    });
    // A multi-create's members go as one gang again (its reservation id
    // names it), in launch order as when first published.
    let mut messages: BTreeMap<String, (Vec<BuildRequest>, RequestSpec)> = BTreeMap::new();
    for (build, spec) in to_publish {
        messages.entry(message_key(&build, &spec)).or_insert_with(|| (Vec::new(), spec)).0.push(build);
    }
    for (builds, spec) in messages.into_values() {
        let queue = queue_key(&spec);
        compute.pull.note_queue(&queue, &spec);
        let attempt = spec.retry.attempts();
        if !publish_one(compute, publication(&builds, queue, attempt)).await {
            // NATS is down: the next pass tries again.
            break;
        }
    }
    // A gang's members are buried together, in one control write: buried
    // one by one, the members still waiting would make a smaller gang an
    // agent could claim while its message is still out (placed in part).
    let mut expired_gangs: BTreeMap<String, Vec<BuildRequest>> = BTreeMap::new();
    for (build, spec) in expired {
        expired_gangs.entry(message_key(&build, &spec)).or_default().push(build);
    }
    for builds in expired_gangs.into_values() {
        let instances = builds.iter().map(|b| b.instance_uuid).collect();
        let job = BootJob { instances, request_id: format!("req-{}", Uuid::new_v4()) };
        let reason = format!("No host claimed the boot within {timeout} s (pull mode).");
        let buried = build::bury(compute, &job, &builds, &HashMap::new(), &reason).await;
        compute.pull.metrics.timed_out.fetch_add(buried as u64, Ordering::Relaxed);
        let mut published = compute.pull.published.lock().unwrap_or_else(|p| p.into_inner());
        for build in &builds {
            published.remove(&build.instance_uuid);
        }
    }
    requeue_pass(compute).await;
}

/// Which message a boot travels in: a multi-create's members share one
/// (a gang, named by its reservation id), any other boot has its own.
fn message_key(build: &BuildRequest, spec: &RequestSpec) -> String {
    if spec.num_instances > 1 {
        format!("gang:{}", spec.reservation_id)
    } else {
        format!("one:{}", build.instance_uuid)
    }
}

/// The outbox's pass over the requeued instances of its index: drop the
/// ones no longer waiting (claimed, deleted, buried), bury the ones
/// waiting past the build timeout, publish the others as their next
/// attempt unless this process saw that publish acknowledged.
async fn requeue_pass(compute: &Arc<Compute>) {
    let now = compute.now();
    let timeout = compute.pull.build_timeout_secs.load(Ordering::Relaxed);
    let index: Vec<(Uuid, i64)> =
        compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(i, s)| (*i, *s)).collect();
    if index.is_empty() {
        return;
    }
    let mut to_publish = Vec::new();
    let mut expired = Vec::new();
    let mut done = Vec::new();
    read(&*compute.control, |w| {
        let published = compute.pull.published.lock().unwrap_or_else(|p| p.into_inner());
        let publishing = compute.pull.publishing.lock().unwrap_or_else(|p| p.into_inner());
        for (instance, since) in index {
            let Some((spec, cell)) = requeue_waiting(w, &instance) else {
                done.push(instance);
                continue;
            };
            if spec.retry.requeued_at != Some(since) {
                // Requeued again (by another process): its own time.
                if let Some(at) = spec.retry.requeued_at {
                    compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).insert(instance, at);
                }
                continue;
            }
            if now - since >= timeout {
                expired.push((instance, since, cell, spec.retry.failed_hosts.last().cloned()));
            } else if !published.contains(&instance) && !publishing.contains(&instance) {
                to_publish.push((instance, spec.clone()));
            }
        }
    });
    {
        let mut requeued = compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner());
        for instance in &done {
            requeued.remove(instance);
        }
    }
    for (instance, spec) in to_publish {
        let queue = queue_key(&spec);
        compute.pull.note_queue(&queue, &spec);
        let attempt = spec.retry.attempts();
        if !publish_one(compute, Publication { instance, queue, attempt, gang: Vec::new() }).await {
            break;
        }
    }
    for (instance, since, cell, failed_host) in expired {
        bury_requeued(compute, instance, since, cell, failed_host, timeout).await;
    }
}

/// Bury a requeued instance nobody claimed within `timeout` seconds: one
/// control write gives it up (`plan_expire_requeued`, only while still
/// waiting from the same requeue), then its row (still `scheduling` on
/// the host its build last failed on) goes to ERROR without host, with a
/// fault. A crash in between leaves the row for
/// `conductor::redrive_reschedules`, which finds it no longer requeued and
/// without allocations, and puts it in ERROR.
async fn bury_requeued(
    compute: &Arc<Compute>,
    instance: Uuid,
    since: i64,
    cell: Uuid,
    failed_host: Option<String>,
    timeout: i64,
) {
    let given_up = write(&*compute.control, |w| Ok(plan_expire_requeued(w, &instance, since)));
    compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    compute.pull.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    match given_up {
        Ok(true) => {}
        Ok(false) => return,
        Err(err) => {
            tracing::warn!(%instance, error = %err, "giving up a requeued boot failed; the next pass retries");
            compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).insert(instance, since);
            return;
        }
    }
    let Some(handle) = compute.cell(&cell).and_then(|m| compute.cells.get(&m).ok()) else {
        tracing::warn!(%instance, "the cell of a requeued boot is unavailable; the re-drive finishes it");
        return;
    };
    let now = compute.now();
    let reason = format!("No host claimed the requeued boot within {timeout} s (pull mode).");
    let message = format!("No valid host was found. {reason}");
    let ops = build::failed_build_ops(instance, failed_host, message, reason, now);
    match handle.write(ops).await {
        Ok(outcomes) if outcomes.first() == Some(&CellOutcome::Done) => {
            compute.pull.metrics.timed_out.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%instance, "a requeued boot nobody claimed went to ERROR");
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(%instance, error = %err, "burying a requeued boot failed; the re-drive finishes it"),
    }
}

/// How long one evaluation of a queue (the hosts that can take it) is
/// shared: the agents' requests within it get the same answer. A stale
/// answer only costs a refused claim and a nak (the claim is the
/// decision); it also bounds how late a time-dependent filter (service
/// health) is seen.
pub const QUEUE_EVALUATION_MAX_AGE: Duration = Duration::from_millis(200);

/// One queue's shared evaluation.
#[derive(Debug, Clone)]
struct Evaluation {
    at: std::time::Instant,
    hosts: Arc<HashSet<String>>,
}

/// The queues each of `hosts` can take now: per queue in use, the hosts
/// of the whole cloud that can take its spec (the scheduler's placement
/// query and filters, one run for all hosts:
/// `berth_scheduler::eligible_hosts`), evaluated at most once per
/// [`QUEUE_EVALUATION_MAX_AGE`] and shared by every agent's request,
/// intersected with `hosts`.
pub fn queues_for_hosts(compute: &Compute, hosts: &[String]) -> BTreeMap<String, Vec<String>> {
    let queues: Vec<(String, RequestSpec)> = compute
        .pull
        .queues
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, s)| (k.clone(), s.clone()))
        .collect();
    let evaluated = evaluate_queues(compute, &queues);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, able) in evaluated {
        let mine: Vec<String> = hosts.iter().filter(|h| able.contains(*h)).cloned().collect();
        if !mine.is_empty() {
            out.insert(key, mine);
        }
    }
    out
}

/// The hosts able to take each of `queues` now, from the shared
/// evaluations where fresh enough; the stale ones are evaluated again in
/// one read of the world. Concurrent callers wait for one evaluation
/// rather than each running it.
fn evaluate_queues(compute: &Compute, queues: &[(String, RequestSpec)]) -> Vec<(String, Arc<HashSet<String>>)> {
    let mut cache = compute.pull.evaluations.lock().unwrap_or_else(|p| p.into_inner());
    let fresh = |e: &Evaluation| e.at.elapsed() < QUEUE_EVALUATION_MAX_AGE;
    let stale: Vec<&(String, RequestSpec)> =
        queues.iter().filter(|(key, _)| !cache.get(key).is_some_and(fresh)).collect();
    if !stale.is_empty() {
        let now = compute.now();
        let health = compute.health.at(now);
        let at = std::time::Instant::now();
        read(&*compute.control, |w| {
            for (key, spec) in stale {
                let hosts = eligible_hosts(w, spec, &health, now, &compute.config.scheduler).unwrap_or_default();
                compute.pull.metrics.queue_evaluations.fetch_add(1, Ordering::Relaxed);
                cache.insert(key.clone(), Evaluation { at, hosts: Arc::new(hosts.into_iter().collect()) });
            }
        });
    }
    queues.iter().filter_map(|(key, _)| cache.get(key).map(|e| (key.clone(), e.hosts.clone()))).collect()
}

/// What a claim answered.
#[derive(Debug, Clone, PartialEq)]
pub enum PullClaim {
    /// Claimed on the host (now, or before: the same answer): build it.
    Claimed(Task),
    /// Claimed elsewhere, buried or deleted: drop the message.
    Gone,
    /// The host cannot take it now (why): let another agent try.
    Refused(String),
    /// A gang claimed on the agent's hosts (now, or before): build each.
    ClaimedAll(Vec<Task>),
}

/// Claim `instance` for `host`: the conductor's claim with the destination
/// forced to `host` (the scheduler's filters for that host, then
/// `plan_claim`, one planned write), idempotent per instance.
pub async fn claim_on_host(compute: &Arc<Compute>, instance: Uuid, host: &str) -> PullClaim {
    let job = BootJob { instances: vec![instance], request_id: format!("req-{}", Uuid::new_v4()) };
    let Some(boot) = build::load(compute, job.clone()).filter(|b| !b.builds.is_empty()) else {
        if let Some(claim) = claim_requeued(compute, instance, host).await {
            return claim;
        }
        // No build request: claimed already (here: the same answer), or
        // buried, or deleted.
        let here = read(&*compute.control, |w| {
            w.compute.instance_mappings.get(&instance).is_some_and(|m| !m.queued_for_delete)
                && host_of_instance(w, &instance).is_some_and(|n| n.host == host)
        });
        if here {
            if let Some(task) = Task::new(instance, host, task_state::SPAWNING) {
                compute.hub.mark_handed_out(&task);
                return PullClaim::Claimed(task);
            }
        }
        compute.pull.metrics.claims_gone.fetch_add(1, Ordering::Relaxed);
        return PullClaim::Gone;
    };
    let mut spec = boot.spec.clone();
    spec.force_host = Some(host.to_owned());
    spec.force_node = None;
    compute.learn_unknown_hosts().await;
    let now = compute.now();
    let refused = |why: String| {
        compute.pull.metrics.claims_refused.fetch_add(1, Ordering::Relaxed);
        PullClaim::Refused(why)
    };
    let (choices, cells, in_flight) = match build::schedule_round(compute, &spec, &[instance], now) {
        Ok(found) => found,
        Err(no_host) => return refused(no_host.0),
    };
    let claim = rows_then_claim(compute, &boot, &choices, &cells, now).await;
    drop(in_flight);
    let (claimed, inserted) = match claim {
        Ok(done) => done,
        Err(why) => return refused(why),
    };
    if claimed.placed.iter().all(|(i, _)| *i != instance) {
        // Deleted or buried meanwhile (the build request went).
        purge_rows(compute, &inserted).await;
        compute.pull.metrics.claims_gone.fetch_add(1, Ordering::Relaxed);
        return PullClaim::Gone;
    }
    compute.pull.metrics.claims.fetch_add(1, Ordering::Relaxed);
    compute.pull.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    let handed = build::finish_claims(compute, vec![(&boot.job, &claimed, &inserted)], false).await;
    match Task::new(instance, host, task_state::SPAWNING) {
        Some(task) if handed.contains(&instance) => PullClaim::Claimed(task),
        _ => PullClaim::Gone,
    }
}

/// The instance rows of `choices` written to their cells (`row_ops`),
/// then ONE planned write claiming them (`plan_claim`: all or none).
/// `Ok`: the claim was written (an instance deleted meanwhile is not in
/// `placed`), with the rows inserted; `Err`: refused (why), the rows
/// purged again.
async fn rows_then_claim(
    compute: &Arc<Compute>,
    boot: &build::Loaded,
    choices: &[InstanceChoices],
    cells: &[Option<Uuid>],
    now: i64,
) -> Result<(Claimed, HashMap<Uuid, Uuid>), String> {
    let mut inserted = HashMap::new();
    let mut ops = HashMap::new();
    build::row_ops(&boot.job, &boot.builds, choices, cells, &mut inserted, now, &mut ops);
    if let Err(err) = build::write_cells(compute, ops).await {
        purge_rows(compute, &inserted).await;
        return Err(format!("writing the instance rows failed: {err}"));
    }
    let now = compute.now();
    let lend_lead = compute.config.scheduler.pool_lend_lead;
    let claim = write(&*compute.control, |w| match plan_claim(w, choices, now, lend_lead)? {
        Ok((set, claimed)) => Ok((set, Ok(claimed))),
        Err(failure) => Ok((WorldChangeSet::new(), Err(failure))),
    });
    let why = match claim {
        Ok(Ok(claimed)) => return Ok((claimed, inserted)),
        Ok(Err(ClaimFailure::NoRoom(_))) => "the host no longer fits it".to_owned(),
        Err(err) => format!("the claim failed: {err}"),
    };
    purge_rows(compute, &inserted).await;
    Err(why)
}

/// Remove the instance rows a claim that did not happen wrote.
async fn purge_rows(compute: &Compute, inserted: &HashMap<Uuid, Uuid>) {
    for (instance, cell_id) in inserted {
        if let Some(mapping) = compute.cell(cell_id) {
            if let Ok(cell) = compute.cells.get(&mapping) {
                let _ = cell.write(vec![CellOp::PurgeInstance(*instance)]).await;
            }
        }
    }
}

/// Hosts tried for each instance of a gang before the gang is refused.
const GANG_HOSTS_PER_INSTANCE: usize = 8;

/// Claim a multi-create's `instances` (a gang, launch order) on `hosts`
/// (the claiming agent's hosts that can take its queue): each instance
/// goes to the first of `hosts`, from where the previous one went, that
/// the forced-host scheduler round finds room on (the rounds before it
/// count as in flight, so a gang packs a host without overfilling it in
/// the view), then ONE planned write claims them all or none
/// (`plan_claim`). Idempotent: a gang claimed before on these hosts gets
/// the same answer. [`PullClaim::ClaimedAll`] carries one build per
/// instance.
pub async fn claim_gang(compute: &Arc<Compute>, instances: &[Uuid], hosts: &[String]) -> PullClaim {
    let job = BootJob { instances: instances.to_vec(), request_id: format!("req-{}", Uuid::new_v4()) };
    let refused = |why: String| {
        compute.pull.metrics.claims_refused.fetch_add(1, Ordering::Relaxed);
        PullClaim::Refused(why)
    };
    let Some(boot) = build::load(compute, job.clone()).filter(|b| !b.builds.is_empty()) else {
        // Claimed already (here: the same answer), or buried, or deleted.
        let placed: Option<Vec<(Uuid, String)>> = read(&*compute.control, |w| {
            instances
                .iter()
                .map(|i| {
                    let mapped = w.compute.instance_mappings.get(i).is_some_and(|m| !m.queued_for_delete);
                    host_of_instance(w, i).filter(|n| mapped && hosts.contains(&n.host)).map(|n| (*i, n.host.clone()))
                })
                .collect()
        });
        if let Some(placed) = placed {
            let tasks: Vec<Task> =
                placed.iter().filter_map(|(i, host)| Task::new(*i, host, task_state::SPAWNING)).collect();
            for task in &tasks {
                compute.hub.mark_handed_out(task);
            }
            return PullClaim::ClaimedAll(tasks);
        }
        compute.pull.metrics.claims_gone.fetch_add(1, Ordering::Relaxed);
        return PullClaim::Gone;
    };
    if hosts.is_empty() {
        return refused("no host given".to_owned());
    }
    compute.learn_unknown_hosts().await;
    let now = compute.now();
    let mut choices = Vec::new();
    let mut cells = Vec::new();
    let mut rounds = Vec::new();
    let mut at = 0;
    for build in &boot.builds {
        let mut why = String::from("There are not enough hosts available.");
        let mut found = false;
        for _ in 0..GANG_HOSTS_PER_INSTANCE.min(hosts.len()) {
            let mut spec = boot.spec.clone();
            spec.force_host = Some(hosts[at % hosts.len()].clone());
            spec.force_node = None;
            match build::schedule_round(compute, &spec, &[build.instance_uuid], now) {
                Ok((mut chosen, mut in_cells, in_flight)) => {
                    choices.append(&mut chosen);
                    cells.append(&mut in_cells);
                    rounds.push(in_flight);
                    found = true;
                    break;
                }
                Err(no_host) => {
                    why = no_host.0;
                    at += 1;
                }
            }
        }
        if !found {
            return refused(format!("the gang of {} does not fit these hosts: {why}", boot.builds.len()));
        }
    }
    let claim = rows_then_claim(compute, &boot, &choices, &cells, now).await;
    drop(rounds);
    let (claimed, inserted) = match claim {
        Ok(done) => done,
        Err(why) => return refused(why),
    };
    if claimed.placed.is_empty() {
        // Deleted or buried meanwhile.
        purge_rows(compute, &inserted).await;
        compute.pull.metrics.claims_gone.fetch_add(1, Ordering::Relaxed);
        return PullClaim::Gone;
    }
    compute.pull.metrics.claims.fetch_add(claimed.placed.len() as u64, Ordering::Relaxed);
    {
        let mut published = compute.pull.published.lock().unwrap_or_else(|p| p.into_inner());
        for (instance, _) in &claimed.placed {
            published.remove(instance);
        }
    }
    let handed = build::finish_claims(compute, vec![(&boot.job, &claimed, &inserted)], false).await;
    let tasks: Vec<Task> = claimed
        .placed
        .iter()
        .filter(|(i, _)| handed.contains(i))
        .filter_map(|(i, node)| Task::new(*i, &node.host, task_state::SPAWNING))
        .collect();
    PullClaim::ClaimedAll(tasks)
}

/// Claim a requeued instance (a failed build back on its queue) for
/// `host`; `None` when it is not waiting for a claim. The scheduler's
/// filters for `host` alone, with the hosts its build failed on ignored
/// (so such a host is refused); then one planned write
/// (`plan_claim_requeued`) creates its allocations only while it has none
/// (a second agent racing gets `gone`); then its row, `scheduling` on the
/// host of the last failure, gets `host` and `spawning`, and a build
/// event starts. A crash between the two writes is finished by
/// `conductor::redrive_reschedules` (the allocations are elsewhere than
/// the row's host: the build goes there).
async fn claim_requeued(compute: &Arc<Compute>, instance: Uuid, host: &str) -> Option<PullClaim> {
    let (mut spec, cell) = read(&*compute.control, |w| requeue_waiting(w, &instance).map(|(s, c)| (s.clone(), c)))?;
    let refused = |why: String| {
        compute.pull.metrics.claims_refused.fetch_add(1, Ordering::Relaxed);
        PullClaim::Refused(why)
    };
    let failed_hosts = spec.retry.failed_hosts.clone();
    let last_failed = failed_hosts.last().cloned();
    spec.force_host = Some(host.to_owned());
    spec.force_node = None;
    compute.learn_unknown_hosts().await;
    let now = compute.now();
    let (choices, _, in_flight) = match build::schedule_round_ignoring(compute, &spec, &[instance], &failed_hosts, now)
    {
        Ok(found) => found,
        Err(no_host) => return Some(refused(no_host.0)),
    };
    let lend_lead = compute.config.scheduler.pool_lend_lead;
    let choices = choices.into_iter().next().unwrap_or(InstanceChoices { instance, choices: Vec::new() });
    let claim = write(&*compute.control, |w| plan_claim_requeued(w, &choices, now, lend_lead));
    drop(in_flight);
    let node = match claim {
        Ok(RequeueClaim::Placed(node)) => node,
        Ok(RequeueClaim::NoRoom) => return Some(refused("the host no longer fits it".to_owned())),
        // Taken by another agent meanwhile: the caller answers as for any
        // claimed instance (claimed here, else gone).
        Ok(RequeueClaim::Gone) => return None,
        Err(err) => return Some(refused(format!("the claim failed: {err}"))),
    };
    compute.pull.metrics.claims.fetch_add(1, Ordering::Relaxed);
    compute.pull.metrics.requeued_claims.fetch_add(1, Ordering::Relaxed);
    compute.pull.requeued.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    compute.pull.published.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
    let handle = compute.cell(&cell).and_then(|m| compute.cells.get(&m).ok());
    let Some(handle) = handle else {
        tracing::warn!(%instance, "the cell of a requeued boot is unavailable; the re-drive hands it out");
        return Some(PullClaim::Gone);
    };
    let request_id = compute.create_request_id(&handle, &instance).await;
    let now = compute.now();
    let expect = Expect {
        task_states: vec![Some(task_state::SCHEDULING.to_owned())],
        not_deleted: true,
        host: Some(last_failed),
        ..Expect::default()
    };
    let mut ops =
        vec![CellOp::UpdateInstance { uuid: instance, expect, update: build::spawning_on(compute, &node, now) }];
    if let Some(request_id) = &request_id {
        ops.push(CellOp::StartEvent {
            instance,
            request_id: request_id.clone(),
            event: build::EVENT_BUILD.to_owned(),
            host: Some(node.host.clone()),
            at: now,
        });
    }
    let done = matches!(handle.write(ops).await, Ok(outcomes) if outcomes.first() == Some(&CellOutcome::Done));
    let task = Task::new(instance, host, task_state::SPAWNING)?;
    if !done {
        // Handed out by a re-drive meanwhile (then the row is spawning
        // here), or deleted (whoever deleted it forgets the allocations).
        let id = instance;
        let row = compute.cells.read(&handle, move |s| s.instance(&id)).await.ok().flatten();
        let here = row.is_some_and(|r| {
            !r.deleted && r.host.as_deref() == Some(host) && r.task_state.as_deref() == Some(task_state::SPAWNING)
        });
        if !here {
            return Some(PullClaim::Gone);
        }
    }
    if let Some(request_id) = &request_id {
        compute.remember_build_request_id(instance, request_id);
    }
    compute.hub.mark_handed_out(&task);
    tracing::info!(%instance, host, attempt = spec.retry.attempts(), "requeued build claimed");
    Some(PullClaim::Claimed(task))
}
