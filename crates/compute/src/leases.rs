//! The lease event runner (Blazar's manager loop, berth's rules).
//!
//! Every `lease_tick` (and at once when a lease changes) the runner takes
//! the due events from the `World` (`lease_plan::due_events`: by time, at
//! one instant ends before starts, including events a crash left
//! `IN_PROGRESS`) and runs each one in three steps:
//!
//! 1. `plan_event_begin`: the event goes `IN_PROGRESS` (one control write);
//! 2. its actions, all idempotent: an end deletes the servers on the hosts
//!    it held and waits (event stays `IN_PROGRESS`, retried next tick) until
//!    they are gone, then removes the instance reservations' inventory,
//!    flavors and classes; a start creates that inventory
//!    (`lease_plan::resources`). Before 1, an event waits while its own
//!    lease's earlier events are not done and a start waits until every
//!    earlier lease on its hosts has ended (`event_blocked_by`);
//! 3. `plan_event_finish`: `DONE` and the lease moves on (one control
//!    write; finishing twice writes nothing).
//!
//! A crash between 1 and 3 leaves the event `IN_PROGRESS`; the next process
//! redoes 2 and 3. So each event's transition happens exactly once, and its
//! side effects are safe to repeat. Several processes may run the loop; the
//! planned writes decide.
//!
//! Healing runs in the same loop: an enrolled host whose compute service is
//! down becomes unreservable and each pending or active lease holding it is
//! healed (`plan_heal_host`: another free matching host, or degraded).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::lease::{EventType, LeaseStatus, ReservationKind};
use berth_compute_model::lease_plan::{self as plan, Query};
use berth_compute_model::{ComputeError, World, CONSUMER_TYPE_INSTANCE};
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

    /// Bring the lease's instance-reservation flavors, classes and
    /// inventories in line with its status (`STARTING`: inventory and
    /// flavor access; `TERMINATING`: all gone). True when done; a conflict
    /// (servers still holding the inventory) is retried next tick.
    fn sync_lease_resources(&self, lease_id: Uuid, now: i64) -> bool {
        match write(&*self.control, |w| {
            Ok((
                plan::resources::plan_sync_lease_resources(w, lease_id, &mut Uuid::new_v4, now)?.unwrap_or_default(),
                (),
            ))
        }) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%lease_id, error = %e, "lease resources not in step yet; retrying");
                false
            }
        }
    }

    /// One pass over due events and host health. Returns how many events
    /// finished.
    pub async fn run_lease_events(&self) -> usize {
        let now = self.now();
        self.heal_leases(now);
        let due = read(&*self.control, |w| plan::due_events(w, now));
        let mut finished = 0;
        for (lease_id, event_id, kind, _) in due {
            let blocked = read(&*self.control, |w| {
                w.compute.leases.leases.get(&lease_id).and_then(|l| plan::event_blocked_by(w, l, kind))
            });
            if let Some(other) = blocked {
                tracing::debug!(%lease_id, %other, event = kind.as_str(), "lease event waits");
                continue;
            }
            if let Err(e) = write(&*self.control, |w| {
                Ok((plan::plan_event_begin(w, lease_id, event_id, now)?.unwrap_or_default(), ()))
            }) {
                tracing::warn!(%lease_id, error = %e, "lease event could not start");
                continue;
            }
            self.hooks.pass("lease-event").await;
            let done = match kind {
                EventType::EndLease => match self.delete_lease_servers(lease_id).await {
                    Ok(true) => self.sync_lease_resources(lease_id, now),
                    Ok(false) => false,
                    Err(e) => {
                        tracing::warn!(%lease_id, error = %e, "lease end: servers not deleted yet");
                        false
                    }
                },
                EventType::BeforeEndLease => {
                    tracing::info!(%lease_id, "lease ends soon (before_end_lease)");
                    true
                }
                EventType::StartLease => self.sync_lease_resources(lease_id, now),
            };
            if !done {
                continue;
            }
            match write(&*self.control, |w| {
                Ok((plan::plan_event_finish(w, lease_id, event_id, false, now)?.unwrap_or_default(), ()))
            }) {
                Ok(()) => {
                    finished += 1;
                    self.lease_metrics.events_done.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(%lease_id, event = kind.as_str(), "lease event done");
                }
                Err(e) => tracing::warn!(%lease_id, error = %e, "lease event could not finish"),
            }
        }
        finished
    }

    /// Hosts whose service is down become unreservable (and come back when
    /// it is up); every lease still holding an unreservable host is healed,
    /// one write per lease, so a pass interrupted half-way is finished by
    /// the next one.
    fn heal_leases(&self, now: i64) {
        let health = &self.health;
        // Right after a start (an outage of the control plane, say) every
        // host's last report is old: give them `service_down_time` to report
        // before taking any for down.
        if now - self.started_at <= health.service_down_time {
            return;
        }
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
                Ok((
                    plan::plan_heal_host(w, lease, host, &parse_stored, &mut Uuid::new_v4, now)?.unwrap_or_default(),
                    (),
                ))
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
        loop {
            compute.run_lease_events().await;
            let tick = compute.config.lease_tick;
            let _ = tokio::time::timeout(tick, compute.lease_wake.notified()).await;
        }
    });
}
