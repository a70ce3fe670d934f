//! Pool lending at run time (`--pool-lend-lead`): the drain of reclaimed
//! pool hosts and the start of a lease on empty hosts.
//!
//! The decisions are `berth_reservation_model::lending`'s; this module
//! acts on them once per runner tick:
//!
//! - **drain:** every ordinary server on a pool host that a lease needs
//!   within the lead is live-migrated away (the scheduler, which no longer
//!   lets ordinary boots onto that host, picks the destination; the move
//!   keeps its source allocation under the `MIGRATION` consumer until it
//!   completes, so placement never sees the host over capacity). A server
//!   that cannot move yet (building, or another task running) is tried
//!   again next tick;
//! - **start:** just before a lease's start event, a held host that is
//!   still busy is swapped for a free one, or the reservation is marked
//!   `resources_changed` and the start counted late.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use berth_compute::control::{read, write};
use berth_compute::live::LiveMigrateRequest;
use berth_compute::servers::ServiceError;
use berth_reservation_model::lending::{self, StartReport};
use uuid::Uuid;

use crate::runner::{caller, parse_stored};
use crate::Reservations;

impl Reservations {
    /// The lending lead, when lending is on.
    pub fn lend_lead(&self) -> Option<i64> {
        self.compute.config.scheduler.pool_lend_lead
    }

    /// The pool's gauges now (`/metrics`).
    pub fn pool_gauges(&self) -> PoolGauges {
        let now = self.compute.now();
        let lead = self.lend_lead();
        read(&*self.compute.control, |w| {
            let tables = &w.compute.leases;
            let lent_servers = if lead.is_some() {
                tables.hosts.values().map(|h| lending::ordinary_servers(w, h).len()).sum()
            } else {
                0
            };
            PoolGauges {
                hosts: tables.hosts.len(),
                lent: lending::lent_hosts(w, now, lead),
                lent_servers,
                draining: lead.map_or(0, |lead| lending::drain_targets(w, now, lead).len()),
                events_due: berth_reservation_model::due_events(w, now).len(),
            }
        })
    }

    /// Move the ordinary servers off reclaimed pool hosts (one pass).
    /// Returns how many live migrations it started.
    pub(crate) async fn drain_reclaimed_hosts(&self, now: i64) -> usize {
        let Some(lead) = self.lend_lead() else { return 0 };
        let targets = read(&*self.compute.control, |w| lending::drain_targets(w, now, lead));
        let draining: BTreeSet<i64> = targets.iter().map(|t| t.host_id).collect();
        {
            let mut known = self.draining.lock().unwrap_or_else(|p| p.into_inner());
            let started = draining.difference(&known).count() as u64;
            // Reclaimed: drained hosts still enrolled and carrying no
            // ordinary server (not those whose lease went away meanwhile).
            let left: Vec<i64> = known.difference(&draining).copied().collect();
            let finished = read(&*self.compute.control, |w| {
                left.iter()
                    .filter(|id| {
                        w.compute.leases.hosts.get(id).is_some_and(|h| {
                            lending::ordinary_servers(w, h).is_empty()
                                && w.compute.leases.next_needed(**id, now) < i64::MAX
                        })
                    })
                    .count() as u64
            });
            self.metrics.drains_started.fetch_add(started, Ordering::Relaxed);
            self.metrics.hosts_reclaimed.fetch_add(finished, Ordering::Relaxed);
            *known = draining;
        }
        let mut moved = 0;
        for target in targets {
            for server in &target.servers {
                let request = LiveMigrateRequest { host: None, synchronous: true };
                match self.compute.live_migrate_server(server, request, &caller()).await {
                    Ok(()) => {
                        moved += 1;
                        self.metrics.drain_migrations.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            %server, host = %target.service_host, needed_at = target.needed_at,
                            "pool host reclaimed: moving a lent server away"
                        );
                    }
                    // Building, or another task (a migration already under
                    // way has moved the server's own allocation away, so it
                    // is not listed again): next tick.
                    Err(ServiceError::Refused(e)) => {
                        tracing::debug!(%server, error = %e, "lent server cannot move yet");
                    }
                    Err(e) => tracing::warn!(%server, error = %e, "lent server migration failed; retrying"),
                }
            }
        }
        moved
    }

    /// Before a lease's start event: swap held hosts that are still busy
    /// for free ones (one write), else mark the start late. True when the
    /// lease may start (always, after the write: a late start is degraded,
    /// not held back).
    pub(crate) fn start_on_free_hosts(&self, lease_id: Uuid, now: i64) -> bool {
        let mut report = StartReport::default();
        let written = write(&*self.compute.control, |w| {
            match lending::plan_start_on_free_hosts(w, lease_id, &parse_stored, &mut Uuid::new_v4, now)? {
                Some((set, r)) => {
                    report = r;
                    Ok((set, ()))
                }
                None => Ok((Default::default(), ())),
            }
        });
        if let Err(e) = written {
            tracing::warn!(%lease_id, error = %e, "could not check the lease's hosts before its start; retrying");
            return false;
        }
        for (busy, replacement) in &report.replaced {
            self.metrics.hosts_swapped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%lease_id, busy, replacement, "lease start: a held host was still busy; replaced");
        }
        {
            let mut checks = self.start_checks.lock().unwrap_or_else(|p| p.into_inner());
            let late = checks.entry(lease_id).or_insert(0);
            *late = (*late).max(report.late.len());
        }
        if !report.late.is_empty() {
            tracing::warn!(
                %lease_id, hosts = ?report.late,
                "lease starts degraded (resources_changed): held hosts still carry lent servers and no free \
                 matching host could replace them"
            );
        }
        true
    }
}

impl Reservations {
    /// Count the finished starts once each: on time, or late with how many
    /// held hosts were still busy (a start retried is not counted again).
    pub(crate) fn count_finished_starts(&self, leases: impl Iterator<Item = Uuid>) {
        let mut checks = self.start_checks.lock().unwrap_or_else(|p| p.into_inner());
        for lease_id in leases {
            match checks.remove(&lease_id) {
                Some(0) => {
                    self.metrics.starts_on_time.fetch_add(1, Ordering::Relaxed);
                }
                Some(late) => {
                    self.metrics.starts_late.fetch_add(1, Ordering::Relaxed);
                    self.metrics.drains_late.fetch_add(late as u64, Ordering::Relaxed);
                }
                None => {}
            }
        }
    }
}

/// The reservation pool's gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolGauges {
    /// Hosts enrolled in the pool.
    pub hosts: usize,
    /// Pool hosts lent now.
    pub lent: usize,
    /// Ordinary servers on pool hosts (with lending on).
    pub lent_servers: usize,
    /// Reclaimed pool hosts still carrying ordinary servers.
    pub draining: usize,
    /// Lease events due and not finished.
    pub events_due: usize,
}
