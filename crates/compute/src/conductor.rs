//! The conductor: turns accepted boots into instances on hosts.
//!
//! For each boot (the instances of one request):
//!
//! 1. schedule them (`berth_scheduler::schedule` on the in-memory world);
//! 2. write their rows into the chosen cell, in `scheduling` and with no
//!    host (invisible to listings until their mapping points there);
//! 3. claim through the write path (`plan_claim`): allocations for every
//!    instance, all or nothing, with the group policy re-checked; mappings
//!    move to the cell and build requests go, in the same write. A claim
//!    whose choices were all taken meanwhile schedules again (up to
//!    `schedule_retries` rounds);
//! 4. give the rows their host and `spawning`, and hand the build to the
//!    host's agent.
//!
//! A build that fails on its host is rescheduled ([`reschedule`]): the
//! instance's next alternate, kept in its request spec by the claim, is
//! claimed in place of the failed host's allocations (one control write),
//! then the row gets the new host and the agent the build. The scheduler
//! is not called again. With no attempt or alternate left the instance
//! goes to ERROR without allocations. In pull mode a boot a queue carries
//! goes back to its queue instead (`plan_requeue`; see `crate::pull`).
//!
//! When no host fits, the instances are buried in cell0 in ERROR with a
//! fault and an instance action (rows first, then the mappings), and any
//! rows written in step 2 are purged. A build request deleted meanwhile is
//! simply skipped (`Claimed::gone`). Every step is safe to run twice, so a
//! boot left pending by a stopped process is resumed at start-up.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use berth_compute_model::cell::task_state;
use berth_compute_model::choice::host_of_instance;
use berth_compute_model::plan::{
    plan_claim, plan_claim_boots, plan_requeue, plan_reschedule, requeue_waiting, ClaimFailure, InstanceChoices,
    Rescheduled,
};
use berth_compute_model::pull::pull_routable;
use berth_compute_model::{BuildRequest, RequestSpec, WorldChangeSet};
use berth_store::{CellOp, CellOutcome, Expect};
use uuid::Uuid;

use crate::build::{
    bury, failed_build_ops, finish_claims, handed_out_events, load, row_ops, schedule_round, spawning_on, write_cells,
    BootJob, Loaded, EVENT_BUILD,
};
use crate::cells::Cell;
use crate::control::{read, write};
use crate::error::ServiceError;
use crate::hub::Task;
use crate::Compute;

impl Compute {
    /// Queue a boot for the conductor.
    pub fn submit(&self, job: BootJob) {
        if self.jobs.send(job).is_err() {
            tracing::error!("conductor queue closed; boot left pending until restart");
        }
    }
}

/// Most boots one conductor pass takes from the queue
/// ([`run_boots`]).
pub const MAX_BATCH: usize = 64;

/// How long a worker with boots in hand waits for the pass in progress
/// before it starts its own beside it (see [`spawn_workers`]).
const PASS_WAIT: Duration = Duration::from_millis(50);

/// The conductor's workers. One pass at a time takes the queue: a worker
/// holding the first queued boot waits until the pass in progress has
/// committed its claims (or [`PASS_WAIT`], whichever comes first; the
/// pass then hands its builds out while the next one schedules) and then
/// takes everything that queued up meanwhile. Under load the boots that arrive
/// during one pass are scheduled together in the next (one scheduler run,
/// one rows write, one claim write for up to [`MAX_BATCH`] boots), which
/// is what a scheduler run's fixed cost (the candidate search and the
/// filters over every host) needs; a lone boot on an idle system starts
/// at once. A pass held longer than `PASS_WAIT` (slow storage, a test's
/// breakpoint) does not stop the others: the next worker goes ahead
/// beside it.
pub(crate) fn spawn_workers(compute: Arc<Compute>, rx: tokio::sync::mpsc::UnboundedReceiver<BootJob>) {
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let pass = Arc::new(tokio::sync::Mutex::new(()));
    for _ in 0..compute.config.conductor_workers.max(1) {
        let (compute, rx, pass) = (compute.clone(), rx.clone(), pass.clone());
        tokio::spawn(async move {
            loop {
                // The next boot and whatever queued up behind it.
                let (jobs, turn) = {
                    let mut rx = rx.lock().await;
                    let Some(first) = rx.recv().await else { return };
                    let turn = tokio::time::timeout(PASS_WAIT, pass.clone().lock_owned()).await.ok();
                    let mut jobs = vec![first];
                    while jobs.len() < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(job) => jobs.push(job),
                            Err(_) => break,
                        }
                    }
                    (jobs, turn)
                };
                run_boots(&compute, jobs, turn).await;
            }
        });
    }
}

/// The turn of the pass that took the queue ([`spawn_workers`]).
pub type Turn = tokio::sync::OwnedMutexGuard<()>;

/// Re-submit boots whose build requests are older than a grace period (a
/// process accepted them and stopped before scheduling).
pub(crate) fn resume_pending(compute: &Arc<Compute>) {
    let grace = 10;
    let now = compute.now();
    let jobs: Vec<BootJob> = read(&*compute.control, |w| {
        let mut by_reservation: HashMap<String, Vec<&BuildRequest>> = HashMap::new();
        // Held build requests (reserved servers) wait for their release.
        for build in w.compute.build_requests.values().filter(|b| !b.held && now - b.created_at >= grace) {
            by_reservation.entry(build.spec.reservation_id.clone()).or_default().push(build);
        }
        by_reservation
            .into_values()
            .map(|mut builds| {
                builds.sort_by_key(|b| b.spec.launch_index);
                BootJob {
                    instances: builds.iter().map(|b| b.instance_uuid).collect(),
                    request_id: format!("req-{}", Uuid::new_v4()),
                }
            })
            .collect()
    });
    if !jobs.is_empty() {
        tracing::info!(boots = jobs.len(), "resuming boots accepted before a restart");
    }
    for job in jobs {
        compute.submit(job);
    }
}

/// Run one boot to its end (claimed and handed to agents, or buried).
pub async fn run_boot(compute: &Arc<Compute>, job: BootJob) {
    compute.hooks.pass("before-schedule").await;
    let Some(boot) = load(compute, job) else { return };
    boot_rounds(compute, boot, HashMap::new()).await;
}

/// What makes boots schedulable together: the request spec without what
/// is only the instance's own (ids, reservation id, instance count, build
/// history). `None` for boots always scheduled alone: server groups
/// (their hard policy is checked against the members placed so far) and
/// forced hosts.
fn batch_key(spec: &RequestSpec) -> Option<RequestSpec> {
    if spec.group.is_some() || spec.force_host.is_some() || spec.force_node.is_some() {
        return None;
    }
    let mut key = spec.clone();
    key.instance_uuid = Uuid::nil();
    key.reservation_id = String::new();
    key.num_instances = 0;
    key.retry = berth_compute_model::BuildRetry::default();
    Some(key)
}

/// Run the boots one worker took from the queue. Boots whose request
/// specs agree on everything the scheduler reads (same flavor, image,
/// zone, hints, project; no server group) are scheduled together
/// ([`run_together`]): one placement search and one filter/weigh pass
/// for all their instances, one cell write for their rows, one control
/// write for their claims (each boot still all or nothing). Any other
/// boot, and any boot of a batch whose joint run fails, runs on its own
/// as before ([`boot_rounds`]).
pub async fn run_boots(compute: &Arc<Compute>, jobs: Vec<BootJob>, mut turn: Option<Turn>) {
    // Pull mode: boots a queue can carry are published, not scheduled;
    // the rest (groups, multi-create, forced hosts) go on here.
    let jobs = if compute.pull.enabled() { crate::pull::deliver(compute, jobs).await } else { jobs };
    if jobs.is_empty() {
        return;
    }
    if jobs.len() == 1 {
        for job in jobs {
            run_boot(compute, job).await;
        }
        return;
    }
    compute.hooks.pass("before-schedule").await;
    let mut groups: Vec<(Option<RequestSpec>, Vec<Loaded>)> = Vec::new();
    for job in jobs {
        let Some(boot) = load(compute, job) else { continue };
        let key = batch_key(&boot.spec);
        match groups.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
            Some((_, members)) => members.push(boot),
            None => groups.push((key, vec![boot])),
        }
    }
    // One after the other, as a worker always went: a boot scheduled
    // while another's claim is still in flight does not see it, and with
    // Nova's default `host_subset_size` (1) it picks the same best host.
    for (key, members) in groups {
        if key.is_some() && members.len() > 1 {
            run_together(compute, members, turn.take()).await;
        } else {
            for boot in members {
                boot_rounds(compute, boot, HashMap::new()).await;
            }
        }
    }
}

/// One scheduling round for several boots sharing a request spec shape;
/// boots it does not finish go on alone from their next round.
async fn run_together(compute: &Arc<Compute>, boots: Vec<Loaded>, turn: Option<Turn>) {
    let now = compute.now();
    let all: Vec<Uuid> = boots.iter().flat_map(|b| b.builds.iter().map(|build| build.instance_uuid)).collect();
    compute.learn_unknown_hosts().await;
    let Ok((choices, cells, in_flight)) = schedule_round(compute, &boots[0].spec, &all, now) else {
        // Not room for all of them together: each on its own (each gets
        // its own "no valid host" or a host).
        alone(compute, boots.into_iter().map(|b| (b, HashMap::new())).collect()).await;
        return;
    };
    // The scheduler answers per instance, in request order.
    let mut choices = choices.into_iter();
    let mut cells = cells.into_iter();
    let per_boot: Vec<(Vec<InstanceChoices>, Vec<Option<Uuid>>)> = boots
        .iter()
        .map(|b| (choices.by_ref().take(b.builds.len()).collect(), cells.by_ref().take(b.builds.len()).collect()))
        .collect();
    let mut inserted: Vec<HashMap<Uuid, Uuid>> = boots.iter().map(|_| HashMap::new()).collect();
    let mut ops: HashMap<Uuid, Vec<CellOp>> = HashMap::new();
    for ((boot, (choices, cells)), inserted) in boots.iter().zip(&per_boot).zip(inserted.iter_mut()) {
        row_ops(&boot.job, &boot.builds, choices, cells, inserted, now, &mut ops);
    }
    if let Err(err) = write_cells(compute, ops).await {
        tracing::warn!(error = %err, "writing instance rows failed; retrying");
        tokio::time::sleep(Duration::from_millis(100)).await;
        alone(compute, boots.into_iter().zip(inserted).collect()).await;
        return;
    }
    compute.hooks.pass("before-claim").await;
    let now = compute.now();
    let requests: Vec<&[InstanceChoices]> = per_boot.iter().map(|(c, _)| c.as_slice()).collect();
    let lend_lead = compute.config.scheduler.pool_lend_lead;
    let started = std::time::Instant::now();
    let claim = write(&*compute.control, |w| plan_claim_boots(w, &requests, now, lend_lead));
    compute.metrics.timings.claim.observe(started.elapsed());
    // Tests hold here: the claim is in the world and still in flight.
    compute.hooks.pass("after-claim-write").await;
    // Claimed (now in the world) or not: no longer in flight, and the
    // next pass may take the queue (it sees these claims).
    drop(in_flight);
    drop(turn);
    let outcomes = match claim {
        Ok(outcomes) => outcomes,
        Err(err) => {
            tracing::warn!(error = %err, "claim failed; retrying");
            tokio::time::sleep(Duration::from_millis(100)).await;
            alone(compute, boots.into_iter().zip(inserted).collect()).await;
            return;
        }
    };
    let mut claimed = Vec::new();
    let mut retry = Vec::new();
    for ((boot, inserted), outcome) in boots.into_iter().zip(inserted).zip(outcomes) {
        match outcome {
            Ok(done) => claimed.push((boot, done, inserted)),
            Err(ClaimFailure::NoRoom(instance)) => {
                compute.metrics.claim_retries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%instance, "claim lost a race; scheduling again");
                retry.push((boot, inserted));
            }
        }
    }
    if !claimed.is_empty() {
        compute.hooks.pass("after-claim").await;
        finish_claims(compute, claimed.iter().map(|(b, c, i)| (&b.job, c, i)).collect(), true).await;
    }
    alone(compute, retry).await;
}

/// Run boots the joint round did not finish on their own, one after the
/// other, each with every round a boot alone has: the joint round is
/// extra, so a boot is never buried sooner than it would have been alone.
async fn alone(compute: &Arc<Compute>, boots: Vec<(Loaded, HashMap<Uuid, Uuid>)>) {
    for (boot, inserted) in boots {
        boot_rounds(compute, boot, inserted).await;
    }
}

/// Schedule and claim one boot, in up to `schedule_retries` rounds (rows
/// already written by a joint round are in `inserted`); bury it when no
/// round finds room.
async fn boot_rounds(compute: &Arc<Compute>, boot: Loaded, mut inserted: HashMap<Uuid, Uuid>) {
    let Loaded { job, builds, spec } = boot;
    let pending: Vec<Uuid> = builds.iter().map(|b| b.instance_uuid).collect();
    let mut reason = "There are not enough hosts available.".to_owned();
    for round in 0..compute.config.schedule_retries.max(1) {
        compute.learn_unknown_hosts().await;
        let now = compute.now();
        let (choices, cells, in_flight) = match schedule_round(compute, &spec, &pending, now) {
            Ok(found) => found,
            Err(no_host) => {
                tracing::debug!(instances = pending.len(), reason = %no_host, "no valid host");
                compute.metrics.last_no_host_at.store(now, Ordering::Relaxed);
                compute.metrics.boots_no_host.fetch_add(1, Ordering::Relaxed);
                reason = no_host.0;
                break;
            }
        };
        let mut ops = HashMap::new();
        row_ops(&job, &builds, &choices, &cells, &mut inserted, now, &mut ops);
        if let Err(err) = write_cells(compute, ops).await {
            tracing::warn!(error = %err, "writing instance rows failed; retrying");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        compute.hooks.pass("before-claim").await;
        let now = compute.now();
        let lend_lead = compute.config.scheduler.pool_lend_lead;
        let started = std::time::Instant::now();
        let claim = write(&*compute.control, |w| match plan_claim(w, &choices, now, lend_lead)? {
            Ok((set, claimed)) => Ok((set, Ok(claimed))),
            Err(failure) => Ok((WorldChangeSet::new(), Err(failure))),
        });
        compute.metrics.timings.claim.observe(started.elapsed());
        compute.hooks.pass("after-claim-write").await;
        // Claimed (now in the world) or not: no longer in flight.
        drop(in_flight);
        match claim {
            Ok(Ok(claimed)) => {
                // Claimed, not yet handed to a host: the window the heal
                // must leave alone (tests hold builds here).
                compute.hooks.pass("after-claim").await;
                finish_claims(compute, vec![(&job, &claimed, &inserted)], true).await;
                return;
            }
            Ok(Err(ClaimFailure::NoRoom(instance))) => {
                compute.metrics.claim_retries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%instance, round, "claim lost a race; scheduling again");
            }
            Err(err) => {
                tracing::warn!(error = %err, round, "claim failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    bury(compute, &job, &builds, &inserted, &reason).await;
}

/// Carry on a build that failed on `failed_host` (the row is back in
/// `scheduling`, still naming that host):
///
/// 1. one control write (`plan_reschedule`) moves the instance's
///    allocations to its next alternate that still fits, counting the
///    attempt and consuming the alternates tried, or deletes them when no
///    attempt or alternate is left;
/// 2. the row (`Expect`: `scheduling` on `failed_host`) gets the new host
///    and `spawning`, a new build event starts and the agent gets the
///    task; or the row goes to ERROR, without host, with Nova's
///    `MaxRetriesExceeded` fault.
///
/// The control write comes first, so a crash in between leaves the row in
/// `scheduling` on the failed host, which [`redrive_reschedules`] finds
/// and finishes (step 1 does nothing the second time). A delete in
/// between wins: the row no longer matches and whoever deleted it forgets
/// the allocations wherever they are.
pub(crate) async fn reschedule(
    compute: &Compute,
    handle: &Arc<Cell>,
    instance: Uuid,
    failed_host: &str,
    last_error: &str,
    request_id: Option<String>,
) -> Result<(), ServiceError> {
    compute.hooks.pass("before-reschedule").await;
    let max_attempts = compute.config.scheduler.max_attempts.max(1);
    // Pull mode: a boot a queue carries goes back to its queue (its claim
    // forced the host, so it has no alternates).
    let requeue = compute.pull.enabled()
        && read(&*compute.control, |w| {
            w.compute
                .request_specs
                .get(&instance)
                .is_some_and(|s| pull_routable(s, 1, crate::pull::group_policy(w, s)).is_ok())
        });
    let (decided, wrote) = write(&*compute.control, |w| {
        let (set, decided) = if requeue {
            plan_requeue(w, &instance, failed_host, max_attempts, compute.now())?
        } else {
            plan_reschedule(w, &instance, failed_host, max_attempts, compute.now())?
        };
        let wrote = !set.is_empty();
        Ok((set, (decided, wrote)))
    })?;
    let now = compute.now();
    let expect = Expect {
        task_states: vec![Some(task_state::SCHEDULING.to_owned())],
        not_deleted: true,
        host: Some(Some(failed_host.to_owned())),
        ..Expect::default()
    };
    match decided {
        Rescheduled::Gone => Ok(()),
        Rescheduled::Requeued { attempt, since } => {
            // The row stays in `scheduling` on the failed host until a
            // claim moves it; the outbox publishes attempt `attempt`.
            if wrote {
                tracing::info!(%instance, failed_host, attempt, "failed build requeued");
            }
            crate::pull::requeued(compute, instance, since, wrote);
            Ok(())
        }
        Rescheduled::Build { node, attempt } => {
            let update = spawning_on(compute, &node, now);
            let mut ops = vec![CellOp::UpdateInstance { uuid: instance, expect, update }];
            if let Some(request_id) = request_id {
                ops.push(CellOp::StartEvent {
                    instance,
                    request_id,
                    event: EVENT_BUILD.to_owned(),
                    host: Some(node.host.clone()),
                    at: now,
                });
            }
            let outcomes = handle.write(ops).await?;
            if outcomes.first() == Some(&CellOutcome::Done) {
                compute.metrics.reschedules.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%instance, from = failed_host, to = %node.host, attempt, "build rescheduled");
                if let Some(task) = Task::new(instance, &node.host, task_state::SPAWNING) {
                    compute.hub.push(task);
                }
            }
            Ok(())
        }
        Rescheduled::Exhausted(why) => {
            let message = why.message(&instance, last_error);
            let ops = failed_build_ops(instance, Some(failed_host.to_owned()), message.clone(), message.clone(), now);
            let outcomes = handle.write(ops).await?;
            if outcomes.first() == Some(&CellOutcome::Done) {
                compute.metrics.reschedules_exhausted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%instance, failed_host, %message, "build failed for good");
            }
            Ok(())
        }
    }
}

/// Seconds a row may stay in `scheduling` on a failed host before the
/// sweep assumes its reschedule was interrupted (a crash, a lost write).
pub const RESCHEDULE_GRACE_SECS: i64 = 10;

/// Finish reschedules that were interrupted: rows of `cell` in
/// `scheduling` that still name a host (only a failed build leaves a row
/// so) and were last updated more than [`RESCHEDULE_GRACE_SECS`] ago.
/// [`reschedule`] is safe to run twice, so another process doing the same
/// at the same time is harmless.
pub(crate) async fn redrive_reschedules(compute: &Compute, handle: &Arc<Cell>) {
    let now = compute.now();
    let Ok(rows) = compute.cells.read(handle, |s| s.instances_with_tasks(&[task_state::SCHEDULING])).await else {
        return;
    };
    for row in rows {
        if row.deleted || now - row.updated_at.unwrap_or(row.created_at) <= RESCHEDULE_GRACE_SECS {
            continue;
        }
        // Pull mode: requeued and waiting for a claim (the outbox
        // publishes it and buries it after the build timeout).
        if let Some(since) =
            read(&*compute.control, |w| requeue_waiting(w, &row.uuid).and_then(|(spec, _)| spec.retry.requeued_at))
        {
            crate::pull::requeued(compute, row.uuid, since, false);
            continue;
        }
        let Some(host) = row.host.clone() else {
            finish_lost_claim(compute, handle, row.uuid, now).await;
            continue;
        };
        let uuid = row.uuid;
        let actions = compute.cells.read(handle, move |s| s.instance_actions(&uuid)).await.unwrap_or_default();
        let create = actions.into_iter().find(|a| a.action == "create");
        let last_error = create
            .as_ref()
            .and_then(|a| {
                a.events.iter().rev().find(|e| e.event == EVENT_BUILD && e.result.as_deref() == Some("Error"))
            })
            .and_then(|e| e.traceback.clone())
            .unwrap_or_else(|| format!("Build of instance {uuid} failed on {host}."));
        tracing::info!(instance = %uuid, %host, "finishing an interrupted reschedule");
        let request_id = create.map(|a| a.request_id);
        if let Err(err) = reschedule(compute, handle, uuid, &host, &last_error, request_id).await {
            tracing::warn!(instance = %uuid, error = %err, "re-driving a reschedule failed; will retry");
        }
    }
}

/// Finish a build whose claim was written but whose cell update was lost
/// (a crash, or the cell unreachable, between the two writes): its row is
/// still `scheduling` with no host, its build request is gone (the claim
/// deleted it), its mapping names this cell and its instance consumer
/// holds one of this cell's compute nodes. The row gets the update
/// [`finish_claims`] would have made (conditional on still being so, so a
/// second process doing the same changes nothing) and the host its build.
/// Anything else (a build request still queued, no allocations) is not a
/// lost claim and is left alone.
async fn finish_lost_claim(compute: &Compute, handle: &Arc<Cell>, instance: Uuid, now: i64) {
    let cell = handle.mapping.uuid;
    let node = read(&*compute.control, |w| {
        if w.compute.build_requests.contains_key(&instance)
            || w.compute.instance_mappings.get(&instance).is_none_or(|m| m.cell != Some(cell) || m.queued_for_delete)
        {
            return None;
        }
        host_of_instance(w, &instance).filter(|n| n.cell == cell).cloned()
    });
    let Some(node) = node else { return };
    let expect = Expect {
        task_states: vec![Some(task_state::SCHEDULING.to_owned())],
        not_deleted: true,
        host: Some(None),
        ..Expect::default()
    };
    let mut ops = vec![CellOp::UpdateInstance { uuid: instance, expect, update: spawning_on(compute, &node, now) }];
    let request_id = compute.create_request_id(handle, &instance).await;
    if let Some(request_id) = &request_id {
        ops.extend(handed_out_events(instance, request_id, &node.host, now));
    }
    match handle.write(ops).await {
        Ok(outcomes) if outcomes.first() == Some(&CellOutcome::Done) => {
            tracing::info!(%instance, host = %node.host, "finished a claim whose cell update was lost");
            compute.metrics.lost_claims_finished.fetch_add(1, Ordering::Relaxed);
            if let Some(task) = Task::new(instance, &node.host, task_state::SPAWNING) {
                if let Some(request_id) = &request_id {
                    compute.remember_build_request_id(instance, request_id);
                }
                compute.hub.push(task);
            }
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(%instance, error = %err, "finishing a lost claim failed; will retry"),
    }
}
