//! The lease event runner (Blazar's manager loop, berth's rules).
//!
//! Every `lease_tick` (and at once when a lease changes) the runner takes
//! the due events from the `World` (`berth_reservation_model::due_events`: by time, at
//! one instant ends before starts, including events a crash left
//! `IN_PROGRESS`) and runs each one in three steps:
//!
//! 1. `plan_event_begin`: the event goes `IN_PROGRESS` (one control write
//!    for all the events of one kind due at one instant);
//! 2. its actions, all idempotent: an end deletes the servers on the hosts
//!    it held and waits (event stays `IN_PROGRESS`, retried next tick) until
//!    they are gone, then removes the instance reservations' inventory,
//!    flavors and classes; a start creates that inventory
//!    (`berth_reservation_model::resources`). Before 1, an event waits while its own
//!    lease's earlier events are not done and a start waits until every
//!    lease whose window on its hosts ended by the start has ended
//!    (`event_blocked_by`);
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

use berth_compute::control::{read, write};
use berth_compute::servers::{Caller, ServiceError};
use berth_compute_model::lease::{
    named_reservation, EndPolicy, EventType, LeaseStatus, PowerState, ReservationKind, RESERVATION_SPEC,
};
use berth_compute_model::{ComputeError, World, WorldChangeSet};
use berth_reservation_model::{self as plan, Query};
use uuid::Uuid;

use crate::Reservations;

/// Servers to delete for a lease that ends: [`servers_of_lease`], and for
/// instance reservations also the servers booted for them that hold no
/// host (a reserved server whose build found no room went `ERROR` in
/// cell0; Blazar deletes every server of the reservation's flavor).
fn servers_to_delete(world: &World, lease_id: Uuid) -> Vec<Uuid> {
    let mut out: BTreeSet<Uuid> = servers_of_lease(world, lease_id).into_iter().collect();
    let Some(lease) = world.compute.leases.leases.get(&lease_id) else { return Vec::new() };
    let slots: BTreeSet<Uuid> = lease
        .reservations
        .iter()
        .filter(|r| matches!(r.kind, ReservationKind::Instance { .. }))
        .map(|r| r.id)
        .collect();
    if !slots.is_empty() {
        for (instance, spec) in &world.compute.request_specs {
            let named = named_reservation(spec).ok().flatten();
            if named.is_some_and(|rid| slots.contains(&rid)) && world.compute.instance_mappings.contains_key(instance) {
                out.insert(*instance);
            }
        }
    }
    out.into_iter().collect()
}

/// Servers on the lease's hosts: every `INSTANCE` consumer on the hosts
/// its host reservations hold, and for instance reservations the servers
/// booted for that reservation.
fn servers_of_lease(world: &World, lease_id: Uuid) -> Vec<Uuid> {
    let tables = &world.compute.leases;
    let Some(lease) = tables.leases.get(&lease_id) else { return Vec::new() };
    let mut out: BTreeSet<Uuid> = BTreeSet::new();
    for reservation in &lease.reservations {
        let whole = matches!(reservation.kind, ReservationKind::Host { .. });
        let rid = reservation.id.to_string();
        for a in &reservation.allocations {
            let Some(host) = tables.hosts.get(&a.host_id) else { continue };
            for consumer in plan::lending::instances_on_host(world, &host.service_name) {
                let booked_here = whole
                    || world.compute.request_specs.get(&consumer).is_some_and(|s| {
                        s.hints.get("reservation").and_then(|v| v.first()) == Some(&rid)
                            || s.flavor.extra_specs.get(RESERVATION_SPEC) == Some(&rid)
                    });
                if booked_here {
                    out.insert(consumer);
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Reserved servers of started leases: released in the write that makes
/// the leases `ACTIVE` (the scheduler's `host_allows` wants an active
/// reservation), so no released server waits on a lease that has not
/// started and a redone start releases none twice.
fn release_reserved(world: &World, started: &[(Uuid, Uuid)]) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    for (lease_id, _) in started {
        set.extend(plan::reserved::plan_release_reserved(world, *lease_id));
    }
    set
}

/// Events begun or finished in one control write (bounds a transaction
/// when many leases are due at once).
const EVENTS_PER_WRITE: usize = 500;

pub(crate) fn caller() -> Caller {
    Caller { request_id: format!("req-{}", Uuid::new_v4()), user_id: "blazar".into(), project_id: "service".into() }
}

pub(crate) fn parse_stored(text: &str) -> Result<Option<Query>, ComputeError> {
    crate::query::parse(text).map_err(ComputeError::Invalid)
}

impl Reservations {
    /// Wake the lease runner (a lease or host changed).
    pub fn leases_changed(&self) {
        self.wake.notify_one();
    }

    /// Delete the servers a lease's reservations hold and wait until they
    /// are gone (bounded; an error if they are not). Used by the end event
    /// and by deleting a lease that started.
    pub async fn end_lease_now(&self, lease_id: Uuid) -> Result<(), ServiceError> {
        // An ended `recycle` lease that still keeps hosts out of the pool:
        // deleting it ends the recycling as its grace would (its servers
        // go first, so no host rejoins the pool carrying them).
        let recycling = |w: &World| plan::end_policy::recycling_servers(w, lease_id);
        for attempt in 0..=200 {
            let servers = read(&*self.compute.control, recycling);
            if servers.is_empty() {
                break;
            }
            if attempt == 200 {
                return Err(ServiceError::Refused(ComputeError::Conflict(
                    "Timed out waiting for server deletion".into(),
                )));
            }
            self.delete_servers(&servers, "recycling lease deleted").await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let started = read(&*self.compute.control, |w| {
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
        let servers = read(&*self.compute.control, |w| servers_to_delete(w, lease_id));
        if servers.is_empty() {
            return Ok(true);
        }
        for server in &servers {
            match self.compute.delete_server(server, &caller()).await {
                Ok(()) | Err(ServiceError::Refused(ComputeError::NotFound(_))) => {}
                Err(e) => tracing::warn!(%server, error = %e, "lease end: server delete failed; retrying"),
            }
        }
        Ok(false)
    }

    /// Queue the released reserved servers of started leases for the
    /// conductor: built through the normal claim on the slots the lease
    /// holds. Queueing a boot twice is harmless (the claim removes the
    /// build requests; a second run finds none), and a crash before this
    /// leaves build requests that the conductor resumes at start-up.
    fn build_reserved(&self, started: &[(Uuid, Uuid)]) {
        let boots: Vec<Vec<Uuid>> = read(&*self.compute.control, |w| {
            started.iter().flat_map(|(lease_id, _)| plan::reserved::reserved_to_build(w, *lease_id)).collect()
        });
        for instances in boots {
            tracing::info!(n_servers = instances.len(), "lease start: building reserved servers");
            self.compute.submit(berth_compute::build::BootJob { instances, request_id: caller().request_id });
        }
    }

    /// Bring the lease's instance-reservation flavors, classes and
    /// inventories in line with its status (`STARTING`: inventory and
    /// flavor access; `TERMINATING`: all gone). True when done; a conflict
    /// (servers still holding the inventory) is retried next tick.
    fn sync_lease_resources(&self, lease_id: Uuid, now: i64) -> bool {
        let has_slots = read(&*self.compute.control, |w| {
            w.compute
                .leases
                .leases
                .get(&lease_id)
                .is_some_and(|l| l.reservations.iter().any(|r| matches!(r.kind, ReservationKind::Instance { .. })))
        });
        if !has_slots {
            return true;
        }
        match write(&*self.compute.control, |w| {
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

    /// `before_end: snapshot` host reservations: a snapshot image of each
    /// of the lease's servers, as Blazar's snapshot action takes one (an
    /// image record in the image API: `image_type=snapshot`,
    /// `instance_uuid`, and the lease and event it was taken for). One
    /// write; an image already taken for this event is not taken again,
    /// so a redone event takes none twice.
    fn snapshot_before_end(&self, lease_id: Uuid, event_id: Uuid, now: i64) -> bool {
        let wants = read(&*self.compute.control, |w| {
            w.compute.leases.leases.get(&lease_id).is_some_and(|l| {
                l.reservations
                    .iter()
                    .any(|r| matches!(&r.kind, ReservationKind::Host { before_end, .. } if before_end == "snapshot"))
            })
        });
        if !wants {
            return true;
        }
        let result = write(&*self.compute.control, |w| {
            let event = event_id.to_string();
            let mut set = berth_compute_model::WorldChangeSet::new();
            for server in servers_of_lease(w, lease_id) {
                let instance = server.to_string();
                let taken = w.compute.images.values().any(|i| {
                    i.properties.get("blazar_event_id") == Some(&event)
                        && i.properties.get("instance_uuid") == Some(&instance)
                });
                if taken {
                    continue;
                }
                let owner = w.compute.request_specs.get(&server).map(|s| s.project_id.clone());
                let properties = std::collections::BTreeMap::from([
                    ("image_type".to_owned(), "snapshot".to_owned()),
                    ("instance_uuid".to_owned(), instance.clone()),
                    ("blazar_lease_id".to_owned(), lease_id.to_string()),
                    ("blazar_event_id".to_owned(), event.clone()),
                ]);
                let image = berth_compute_model::Image {
                    id: Uuid::new_v4(),
                    name: Some(format!("lease-{lease_id}-snapshot-{instance}")),
                    status: "active".into(),
                    visibility: "private".into(),
                    protected: false,
                    owner,
                    disk_format: Some("qcow2".into()),
                    container_format: Some("bare".into()),
                    min_disk: 0,
                    min_ram: 0,
                    size: None,
                    hashes: None,
                    tags: Vec::new(),
                    properties,
                    members: std::collections::BTreeMap::new(),
                    created_at: now,
                    updated_at: now,
                };
                set.extend(berth_compute_model::plan::plan_put_image(w, image)?);
            }
            Ok((set, ()))
        });
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%lease_id, error = %e, "before_end snapshots not taken yet; retrying");
                false
            }
        }
    }

    /// POST the event's notification to `lease_notification_url` (Blazar's
    /// `lease.event.<type>` with the lease as payload; the event id lets the
    /// receiver drop a repeat after a crash). True when delivered, when no
    /// URL is set, or after five failed ticks (logged and counted: a dead
    /// receiver does not hold leases up).
    async fn notify(&self, lease_id: Uuid, event_id: Uuid, kind: EventType) -> bool {
        let Some(url) = self.config.notification_url.as_deref() else { return true };
        let lease = read(&*self.compute.control, |w| w.compute.leases.leases.get(&lease_id).cloned());
        let Some(lease) = lease else { return true };
        let payload = match self.payload {
            Some(render) => render(&lease),
            None => serde_json::json!({"id": lease_id.to_string()}),
        };
        let body = serde_json::json!({
            "event_type": format!("lease.event.{}", kind.as_str()),
            "event_id": event_id.to_string(),
            "publisher_id": "berth.lease",
            "payload": payload,
        });
        static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
        let client = CLIENT.get_or_init(|| {
            reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build().unwrap_or_default()
        });
        let sent = client.post(url).json(&body).send().await;
        let failures = &self.notify_failures;
        match sent {
            Ok(resp) if resp.status().is_success() => {
                failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&event_id);
                self.metrics.notifications_sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            other => {
                let why = match other {
                    Ok(resp) => format!("status {}", resp.status()),
                    Err(e) => e.to_string(),
                };
                let mut failures = failures.lock().unwrap_or_else(|p| p.into_inner());
                let n = failures.entry(event_id).or_insert(0);
                *n += 1;
                if *n >= 5 {
                    failures.remove(&event_id);
                    self.metrics.notifications_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%lease_id, event = kind.as_str(), %why, "lease notification given up");
                    return true;
                }
                tracing::warn!(%lease_id, event = kind.as_str(), %why, "lease notification failed; retrying");
                false
            }
        }
    }

    /// True when the lease's end keeps its servers (`on_end` `recycle` or
    /// `release`).
    fn keeps_servers(&self, lease_id: Uuid) -> bool {
        read(&*self.compute.control, |w| {
            w.compute.leases.leases.get(&lease_id).is_some_and(|l| l.on_end != EndPolicy::Delete)
        })
    }

    /// Finish a `recycle` or `release` end in its own write
    /// (`plan_end_policy`); true when it finished.
    fn finish_end_policy(&self, lease_id: Uuid, event_id: Uuid, now: i64) -> bool {
        let health = &self.compute.health;
        let up = |host: &str| health.is_known(host) && health.is_up_at(host, now);
        let result = write(&*self.compute.control, |w| {
            let releases = w.compute.leases.leases.get(&lease_id).is_some_and(|l| l.on_end == EndPolicy::Release);
            let candidates = if releases {
                plan::end_policy::refill_candidates(w, &up, &mut || Uuid::new_v4().simple().to_string())
            } else {
                Vec::new()
            };
            let planned = plan::end_policy::plan_end_policy(
                w,
                lease_id,
                event_id,
                &candidates,
                &parse_stored,
                &mut Uuid::new_v4,
                now,
            )?;
            Ok(match planned {
                Some((set, outcome)) => (set, Some(outcome)),
                None => (WorldChangeSet::new(), None),
            })
        });
        match result {
            // Finished meanwhile (by another process).
            Ok(None) => false,
            Ok(Some(outcome)) => {
                let m = &self.metrics;
                m.events_done.fetch_add(1, Ordering::Relaxed);
                m.hosts_released.fetch_add(outcome.released.len() as u64, Ordering::Relaxed);
                m.pool_refills.fetch_add(outcome.refilled.len() as u64, Ordering::Relaxed);
                m.leases_moved_off_ended_hosts.fetch_add(outcome.healed.len() as u64, Ordering::Relaxed);
                tracing::info!(
                    %lease_id, recycling = ?outcome.recycling, released = ?outcome.released,
                    refilled = ?outcome.refilled, healed = ?outcome.healed, "lease event done (end policy)"
                );
                true
            }
            Err(e) => {
                tracing::warn!(%lease_id, error = %e, "lease end (end policy) could not finish");
                false
            }
        }
    }

    /// Recycling hosts: each one that carries no server any more rejoins
    /// the pool (one write per lease); on those whose grace is over, the
    /// servers are deleted (the host rejoins at a later pass, once they
    /// are gone).
    pub(crate) async fn recycle_pass(&self, now: i64) {
        let leases = read(&*self.compute.control, plan::end_policy::recycling_leases);
        for lease_id in leases {
            let drops =
                read(&*self.compute.control, |w| plan::end_policy::plan_drop_recycled(w, lease_id, now).is_some());
            if drops {
                match write(&*self.compute.control, |w| {
                    Ok((plan::end_policy::plan_drop_recycled(w, lease_id, now).unwrap_or_default(), ()))
                }) {
                    Ok(()) => tracing::info!(%lease_id, "recycling hosts without servers rejoined the pool"),
                    Err(e) => tracing::warn!(%lease_id, error = %e, "recycling hosts not updated"),
                }
            }
            let servers = read(&*self.compute.control, |w| plan::end_policy::grace_over_servers(w, lease_id, now));
            self.delete_servers(&servers, "recycling grace over").await;
        }
    }

    async fn delete_servers(&self, servers: &[Uuid], why: &str) {
        for server in servers {
            match self.compute.delete_server(server, &caller()).await {
                Ok(()) | Err(ServiceError::Refused(ComputeError::NotFound(_))) => {}
                Err(e) => tracing::warn!(%server, error = %e, why, "server delete failed"),
            }
        }
    }

    /// One pass over due events and host health. Returns how many events
    /// finished.
    ///
    /// Due events come in order (by time, ends before starts at one
    /// instant). A run of events with the same time and kind concerns
    /// different leases and is independent, so it is run as a group: one
    /// write begins them all, the actions run event by event, one write
    /// finishes those whose actions are done (at most `EVENTS_PER_WRITE` a
    /// write). A thousand leases starting in the same minute cost four
    /// commits, not two thousand.
    pub async fn run_lease_events(&self) -> usize {
        let now = self.compute.now();
        self.heal_leases(now);
        self.recycle_pass(now).await;
        self.drain_reclaimed_hosts(now).await;
        self.power_pass(now).await;
        self.run_due_events(now).await
    }

    /// The due events of [`Reservations::run_lease_events`], without healing.
    pub(crate) async fn run_due_events(&self, now: i64) -> usize {
        let due = read(&*self.compute.control, |w| plan::due_events(w, now));
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
        let ready: Vec<(Uuid, Uuid)> = read(&*self.compute.control, |w| {
            group
                .iter()
                .filter(|(lease_id, ..)| {
                    let blocked =
                        w.compute.leases.leases.get(lease_id).and_then(|l| plan::event_blocked_by(w, l, kind));
                    if let Some(other) = blocked {
                        tracing::debug!(%lease_id, %other, event = kind.as_str(), "lease event waits");
                    }
                    blocked.is_none()
                })
                .map(|(lease_id, event_id, ..)| (*lease_id, *event_id))
                .collect()
        });
        if ready.is_empty() {
            return 0;
        }
        if let Err(e) = write(&*self.compute.control, |w| {
            let mut set = WorldChangeSet::new();
            for (lease_id, event_id) in &ready {
                set.extend(plan::plan_event_begin(w, *lease_id, *event_id, now)?.unwrap_or_default());
            }
            Ok((set, ()))
        }) {
            tracing::warn!(event = kind.as_str(), n_events = ready.len(), error = %e, "lease events could not start");
            return 0;
        }
        self.compute.hooks.pass("lease-event").await;
        let mut done: Vec<(Uuid, Uuid)> = Vec::with_capacity(ready.len());
        for (lease_id, event_id) in ready {
            let acted = match kind {
                EventType::EndLease if self.keeps_servers(lease_id) => true,
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
                    self.snapshot_before_end(lease_id, event_id, now)
                }
                EventType::StartLease => {
                    self.start_on_free_hosts(lease_id, now) && self.sync_lease_resources(lease_id, now)
                }
            };
            if acted && self.notify(lease_id, event_id, kind).await {
                done.push((lease_id, event_id));
            }
        }
        if done.is_empty() {
            return 0;
        }
        // Ends under `recycle` or `release` finish one lease a write: each
        // may heal other leases or enrol hosts, planned on the state the
        // previous one left.
        let (kept, done): (Vec<_>, Vec<_>) =
            done.into_iter().partition(|(lease_id, _)| kind == EventType::EndLease && self.keeps_servers(*lease_id));
        let mut finished = 0;
        for (lease_id, event_id) in kept {
            if self.finish_end_policy(lease_id, event_id, now) {
                finished += 1;
            }
        }
        if done.is_empty() {
            return finished;
        }
        match write(&*self.compute.control, |w| {
            let mut set = WorldChangeSet::new();
            for (lease_id, event_id) in &done {
                set.extend(plan::plan_event_finish(w, *lease_id, *event_id, false, now)?.unwrap_or_default());
            }
            if kind == EventType::StartLease {
                set.extend(release_reserved(w, &done));
            }
            Ok((set, ()))
        }) {
            Ok(()) => {
                if kind == EventType::StartLease {
                    self.build_reserved(&done);
                    self.count_finished_starts(done.iter().map(|(lease_id, _)| *lease_id));
                }
                self.metrics.events_done.fetch_add(done.len() as u64, Ordering::Relaxed);
                for (lease_id, _) in &done {
                    tracing::info!(%lease_id, event = kind.as_str(), "lease event done");
                }
                finished + done.len()
            }
            Err(e) => {
                tracing::warn!(event = kind.as_str(), n_events = done.len(), error = %e, "lease events could not finish");
                finished
            }
        }
    }

    /// Hosts whose service is down (at two passes in a row) become
    /// unreservable (and come back when it is up); every lease still
    /// holding an unreservable host is healed, one write per lease, so a
    /// pass interrupted half-way is finished by the next one.
    pub(crate) fn heal_leases(&self, now: i64) {
        let health = &self.compute.health;
        // Right after a start (an outage of the control plane, say) every
        // host's last report is old: give them `service_down_time` to report
        // before taking any for down.
        if now - self.compute.started_at <= health.service_down_time {
            return;
        }
        let flips: Vec<(i64, bool)> = read(&*self.compute.control, |w| {
            w.compute
                .leases
                .hosts
                .values()
                // Hosts switched off on purpose (or failed) are the power
                // pass's: it sets their reservability.
                .filter(|h| h.power.state == PowerState::On)
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
            let mut suspects = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
            let down: BTreeSet<i64> = flips.iter().filter(|(_, up)| !up).map(|(host, _)| *host).collect();
            let confirmed = flips.into_iter().filter(|(host, up)| *up || suspects.contains(host)).collect();
            *suspects = down;
            confirmed
        };
        for (host, up) in flips {
            match write(&*self.compute.control, |w| {
                Ok((plan::plan_set_host_reservable(w, host, up, now).unwrap_or_default(), ()))
            }) {
                Ok(()) => tracing::warn!(host, up, "reservable host changed health"),
                Err(e) => tracing::warn!(host, error = %e, "could not mark host health"),
            }
        }
        let lost: Vec<(i64, Uuid)> = read(&*self.compute.control, |w| {
            let tables = &w.compute.leases;
            let mut out: BTreeSet<(i64, Uuid)> = BTreeSet::new();
            for host in tables.hosts.values().filter(|h| !h.reservable) {
                for b in tables.bookings.get(&host.id).into_iter().flatten() {
                    // An ended lease's recycling booking is not healed
                    // (its servers are on that host).
                    if tables.leases.get(&b.lease).is_some_and(|l| !l.is_over()) {
                        out.insert((host.id, b.lease));
                    }
                }
            }
            out.into_iter().collect()
        });
        for (host, lease) in lost {
            match write(&*self.compute.control, |w| {
                Ok((
                    plan::plan_heal_host(w, lease, host, &parse_stored, &mut Uuid::new_v4, now)?.unwrap_or_default(),
                    (),
                ))
            }) {
                Ok(()) => {
                    self.metrics.hosts_healed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(host, %lease, "lease healed: a held host is down");
                }
                Err(e) => tracing::warn!(host, %lease, error = %e, "healing failed"),
            }
        }
    }
}
