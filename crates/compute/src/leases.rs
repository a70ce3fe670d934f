//! The lease event runner (Blazar's manager loop, berth's rules).
//!
//! Every `lease_tick` (and at once when a lease changes) the runner takes
//! the due events from the `World` (`lease_plan::due_events`: by time, at
//! one instant ends before starts, including events a crash left
//! `IN_PROGRESS`) and runs each one in three steps:
//!
//! 1. `plan_event_begin`: the event goes `IN_PROGRESS` (one control write
//!    for all the events of one kind due at one instant);
//! 2. its actions, all idempotent: an end deletes the servers on the hosts
//!    it held and waits (event stays `IN_PROGRESS`, retried next tick) until
//!    they are gone; a start waits until every earlier lease on its hosts
//!    has ended (`start_blocked_by`);
//! 3. `plan_event_finish`: `DONE` and the lease moves on (one control
//!    write for the group; finishing twice writes nothing).
//!
//! A crash between 1 and 3 leaves the event `IN_PROGRESS`; the next process
//! redoes 2 and 3. So each event's transition happens exactly once, and its
//! side effects are safe to repeat. Several processes may run the loop; the
//! planned writes decide.
//!
//! Healing runs in the same loop, once per tick: an enrolled host whose
//! compute service is down at two passes in a row becomes unreservable and
//! each pending or active lease holding it is healed (`plan_heal_host`:
//! another free matching host, or degraded).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::lease::{EventType, LeaseStatus, ReservationKind};
use berth_compute_model::lease_plan::{self as plan, Query};
use berth_compute_model::{ComputeError, World, WorldChangeSet, CONSUMER_TYPE_INSTANCE};
use uuid::Uuid;

use crate::control::{read, write};
use crate::servers::{Caller, ServiceError};
use crate::Compute;

/// Servers to delete for a lease that ends: every `INSTANCE` consumer on
/// the hosts its host reservations hold, and for instance reservations the
/// servers booted for that reservation.
fn servers_of_lease(world: &World, lease_id: Uuid) -> Vec<Uuid> {
    let tables = &world.compute.leases;
    let Some(lease) = tables.leases.get(&lease_id) else { return Vec::new() };
    let mut out: BTreeSet<Uuid> = BTreeSet::new();
    for reservation in &lease.reservations {
        let whole = matches!(reservation.kind, ReservationKind::Host { .. });
        let rid = reservation.id.to_string();
        for a in &reservation.allocations {
            let Some(host) = tables.hosts.get(&a.host_id) else { continue };
            for node in world.compute.nodes_by_host.get(&host.service_name).into_iter().flatten() {
                let mut stack = vec![*node];
                while let Some(p) = stack.pop() {
                    let Some(provider) = world.placement.provider(&p) else { continue };
                    stack.extend(provider.children.iter().copied());
                    for consumer in &provider.consumers {
                        let instance = world
                            .placement
                            .consumers
                            .get(consumer)
                            .is_some_and(|c| c.row.consumer_type.as_deref() == Some(CONSUMER_TYPE_INSTANCE));
                        if !instance {
                            continue;
                        }
                        let booked_here = whole
                            || world.compute.request_specs.get(consumer).is_some_and(|s| {
                                s.hints.get("reservation").and_then(|v| v.first()) == Some(&rid)
                                    || s.flavor.extra_specs.get("aggregate_instance_extra_specs:reservation")
                                        == Some(&rid)
                            });
                        if booked_here {
                            out.insert(*consumer);
                        }
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Events begun or finished in one control write (bounds a transaction
/// when many leases are due at once).
const EVENTS_PER_WRITE: usize = 500;

fn caller() -> Caller {
    Caller { request_id: format!("req-{}", Uuid::new_v4()), user_id: "blazar".into(), project_id: "service".into() }
}

fn parse_stored(text: &str) -> Result<Option<Query>, ComputeError> {
    crate::lease_query::parse(text).map_err(ComputeError::Invalid)
}

impl Compute {
    /// Wake the lease runner (a lease or host changed).
    pub fn leases_changed(&self) {
        self.lease_wake.notify_one();
    }

    /// Delete the servers a lease's reservations hold and wait until they
    /// are gone (bounded; an error if they are not). Used by the end event
    /// and by deleting a lease that started.
    pub async fn end_lease_now(&self, lease_id: Uuid) -> Result<(), ServiceError> {
        let started = read(&*self.control, |w| {
            w.compute.leases.leases.get(&lease_id).is_some_and(|l| {
                matches!(l.status, LeaseStatus::Active | LeaseStatus::Terminating | LeaseStatus::Starting)
            })
        });
        if !started {
            return Ok(());
        }
        for _ in 0..200 {
            if self.delete_lease_servers(lease_id).await? {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Err(ServiceError::Refused(ComputeError::Conflict("Timed out waiting for server deletion".into())))
    }

    /// Ask for the deletion of the lease's servers; true when none is left.
    async fn delete_lease_servers(&self, lease_id: Uuid) -> Result<bool, ServiceError> {
        let servers = read(&*self.control, |w| servers_of_lease(w, lease_id));
        if servers.is_empty() {
            return Ok(true);
        }
        for server in &servers {
            match self.delete_server(server, &caller()).await {
                Ok(()) | Err(ServiceError::Refused(ComputeError::NotFound(_))) => {}
                Err(e) => tracing::warn!(%server, error = %e, "lease end: server delete failed; retrying"),
            }
        }
        Ok(false)
    }

    /// One pass over due events and host health. Returns how many events
    /// finished.
    ///
    /// Due events come in order (by time, ends before starts at one
    /// instant). A run of events with the same time and kind concerns
    /// different leases and is independent, so it is run as a group: one
    /// write begins them all, the actions run, one write finishes those
    /// whose actions are done (at most `EVENTS_PER_WRITE` a write). A
    /// thousand leases starting in the same minute cost four commits, not
    /// two thousand.
    pub async fn run_lease_events(&self) -> usize {
        let now = self.now();
        self.heal_leases(now);
        self.run_due_events(now).await
    }

    /// The due events of [`Compute::run_lease_events`], without healing.
    async fn run_due_events(&self, now: i64) -> usize {
        let due = read(&*self.control, |w| plan::due_events(w, now));
        let mut finished = 0;
        for group in due.chunk_by(|a, b| (a.3, a.2) == (b.3, b.2)) {
            for chunk in group.chunks(EVENTS_PER_WRITE) {
                finished += self.run_event_group(chunk, now).await;
            }
        }
        finished
    }

    /// Begin, act on and finish events of one kind due at one instant.
    async fn run_event_group(&self, group: &[(Uuid, Uuid, EventType, i64)], now: i64) -> usize {
        let Some(&(_, _, kind, _)) = group.first() else { return 0 };
        let ready: Vec<(Uuid, Uuid)> = read(&*self.control, |w| {
            group
                .iter()
                .filter(|(lease_id, ..)| {
                    if kind != EventType::StartLease {
                        return true;
                    }
                    let blocked = w.compute.leases.leases.get(lease_id).and_then(|l| plan::start_blocked_by(w, l));
                    if let Some(other) = blocked {
                        tracing::debug!(%lease_id, %other, "lease start waits for an earlier lease to end");
                    }
                    blocked.is_none()
                })
                .map(|(lease_id, event_id, ..)| (*lease_id, *event_id))
                .collect()
        });
        if ready.is_empty() {
            return 0;
        }
        if let Err(e) = write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            for (lease_id, event_id) in &ready {
                set.extend(plan::plan_event_begin(w, *lease_id, *event_id, now)?.unwrap_or_default());
            }
            Ok((set, ()))
        }) {
            tracing::warn!(event = kind.as_str(), n_events = ready.len(), error = %e, "lease events could not start");
            return 0;
        }
        self.hooks.pass("lease-event").await;
        let mut done: Vec<(Uuid, Uuid)> = Vec::with_capacity(ready.len());
        for (lease_id, event_id) in ready {
            let finished = match kind {
                EventType::EndLease => match self.delete_lease_servers(lease_id).await {
                    Ok(gone) => gone,
                    Err(e) => {
                        tracing::warn!(%lease_id, error = %e, "lease end: servers not deleted yet");
                        false
                    }
                },
                EventType::BeforeEndLease => {
                    tracing::info!(%lease_id, "lease ends soon (before_end_lease)");
                    true
                }
                EventType::StartLease => true,
            };
            if finished {
                done.push((lease_id, event_id));
            }
        }
        if done.is_empty() {
            return 0;
        }
        match write(&*self.control, |w| {
            let mut set = WorldChangeSet::new();
            for (lease_id, event_id) in &done {
                set.extend(plan::plan_event_finish(w, *lease_id, *event_id, false, now)?.unwrap_or_default());
            }
            Ok((set, ()))
        }) {
            Ok(()) => {
                self.lease_metrics.events_done.fetch_add(done.len() as u64, Ordering::Relaxed);
                for (lease_id, _) in &done {
                    tracing::info!(%lease_id, event = kind.as_str(), "lease event done");
                }
                done.len()
            }
            Err(e) => {
                tracing::warn!(event = kind.as_str(), n_events = done.len(), error = %e, "lease events could not finish");
                0
            }
        }
    }

    /// Hosts whose service is down (at two passes in a row) become
    /// unreservable (and come back when it is up); every lease still
    /// holding an unreservable host is healed, one write per lease, so a
    /// pass interrupted half-way is finished by the next one.
    fn heal_leases(&self, now: i64) {
        let health = &self.health;
        let flips: Vec<(i64, bool)> = read(&*self.control, |w| {
            w.compute
                .leases
                .hosts
                .values()
                .filter_map(|h| {
                    let up = !health.is_known(&h.service_name) || health.is_up_at(&h.service_name, now);
                    (up != h.reservable).then_some((h.id, up))
                })
                .collect()
        });
        // A host goes unreservable only when it was down at the previous
        // pass too (a tick earlier): one late heartbeat, or the test clock
        // jumping past every host's last heartbeat, does not take hosts
        // away from leases.
        let flips: Vec<(i64, bool)> = {
            let mut suspects = self.lease_suspects.lock().unwrap_or_else(|p| p.into_inner());
            let down: BTreeSet<i64> = flips.iter().filter(|(_, up)| !up).map(|(host, _)| *host).collect();
            let confirmed = flips.into_iter().filter(|(host, up)| *up || suspects.contains(host)).collect();
            *suspects = down;
            confirmed
        };
        for (host, up) in flips {
            match write(&*self.control, |w| {
                Ok((plan::plan_set_host_reservable(w, host, up, now).unwrap_or_default(), ()))
            }) {
                Ok(()) => tracing::warn!(host, up, "reservable host changed health"),
                Err(e) => tracing::warn!(host, error = %e, "could not mark host health"),
            }
        }
        let lost: Vec<(i64, Uuid)> = read(&*self.control, |w| {
            let tables = &w.compute.leases;
            let mut out: BTreeSet<(i64, Uuid)> = BTreeSet::new();
            for host in tables.hosts.values().filter(|h| !h.reservable) {
                for b in tables.bookings.get(&host.id).into_iter().flatten() {
                    out.insert((host.id, b.lease));
                }
            }
            out.into_iter().collect()
        });
        for (host, lease) in lost {
            match write(&*self.control, |w| {
                Ok((plan::plan_heal_host(w, lease, host, &parse_stored, now)?.unwrap_or_default(), ()))
            }) {
                Ok(()) => {
                    self.lease_metrics.hosts_healed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(host, %lease, "lease healed: a held host is down");
                }
                Err(e) => tracing::warn!(host, %lease, error = %e, "healing failed"),
            }
        }
    }
}

/// Counters of the lease runner.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    /// Events finished.
    pub events_done: std::sync::atomic::AtomicU64,
    /// Host health changes handled.
    pub hosts_healed: std::sync::atomic::AtomicU64,
}

/// Run the lease loop on the current runtime.
pub fn spawn_lease_runner(compute: Arc<Compute>) {
    tokio::spawn(async move {
        let mut healed_at: Option<tokio::time::Instant> = None;
        loop {
            // Host health moves with time and heartbeats, not with leases:
            // healing looks at every enrolled host, so it runs once per
            // tick however often leases change (a thousand creates a
            // second each wake the runner). Not at once when the test
            // clock jumps either: hosts look down until their next
            // heartbeat, as they did when only the tick woke the runner.
            let tick = compute.config.lease_tick;
            let now = compute.now();
            if healed_at.is_none_or(|at| at.elapsed() >= tick) {
                compute.heal_leases(now);
                healed_at = Some(tokio::time::Instant::now());
            }
            compute.run_due_events(now).await;
            let _ = tokio::time::timeout(tick, compute.lease_wake.notified()).await;
        }
    });
}
