//! Power management at run time (`--power-policy reservations`): once per
//! runner tick, the pool's facts (allocations, bookings, heartbeats) go to
//! the pure policy (`berth_reservation_model::power::decide`), its
//! decision is written in ONE planned write (`plan_power`, which records
//! each command as issued), and only then the commands run
//! (`--power-on-cmd` / `--power-off-cmd`, through `sh -c` with the host
//! name as `$1` and in `BERTH_POWER_HOST`).
//!
//! A restart never runs a recorded command again: a `powering-on` host
//! waits for a heartbeat newer than `issued_at`, or for its deadline (then
//! `failed`, unreservable, and the healing pass moves its leases).
//! Energy is integrated here too: each pass adds, per host, the draw of
//! its state times the time since the previous pass.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use berth_compute::control::{read, write};
use berth_compute_model::lease::PowerState;
use berth_reservation_model::power::{self, PowerCommand, PowerPolicy};

use crate::Reservations;

/// Power management counters and the energy meter.
#[derive(Debug, Default)]
pub struct PowerMetrics {
    /// Power-on commands issued.
    pub power_ups: std::sync::atomic::AtomicU64,
    /// Power-off commands issued.
    pub power_downs: std::sync::atomic::AtomicU64,
    /// Hosts that did not come back within the resume timeout.
    pub failures: std::sync::atomic::AtomicU64,
    /// Power commands that exited non-zero (or could not run).
    pub command_errors: std::sync::atomic::AtomicU64,
    /// Energy (Wh) per power state, integrated over host-time.
    pub energy_wh: std::sync::Mutex<[f64; 5]>,
    /// Boots that found no valid host while pool hosts were off or
    /// powering on (each makes the pass wake a host).
    pub ondemand_waits: std::sync::atomic::AtomicU64,
    /// Seconds from such a boot to the host woken for it being `on`,
    /// summed.
    pub ondemand_wait_secs: std::sync::atomic::AtomicU64,
}

/// The runtime state of the power pass.
#[derive(Debug, Default)]
pub(crate) struct PowerRun {
    /// When each idle pool host was first seen idle.
    pub(crate) idle_since: HashMap<i64, i64>,
    /// The previous pass (energy integration).
    pub(crate) last_pass: Option<i64>,
    /// `boots_no_host` as the previous pass saw it.
    pub(crate) no_host_seen: u64,
    /// Hosts woken for on-demand boots that found none: since when the
    /// boot waits.
    pub(crate) demand_wakes: HashMap<i64, i64>,
}

fn state_index(state: PowerState) -> usize {
    PowerState::ALL.iter().position(|s| *s == state).unwrap_or(0)
}

impl Reservations {
    /// One power pass at `now`: facts, decision, one write, then the
    /// commands. Returns the commands it ran.
    pub async fn power_pass(&self, now: i64) -> Vec<PowerCommand> {
        let cfg = self.config.power;
        let health = &self.compute.health;
        let facts = {
            let state = self.power_state.lock().unwrap_or_else(|p| p.into_inner());
            read(&*self.compute.control, |w| {
                power::pool_facts(w, now, &|h| health.last_seen(h), &|id| state.idle_since.get(&id).copied())
            })
        };
        {
            let mut state = self.power_state.lock().unwrap_or_else(|p| p.into_inner());
            for f in &facts {
                if f.busy || f.power.state != PowerState::On {
                    state.idle_since.remove(&f.id);
                } else {
                    state.idle_since.entry(f.id).or_insert(now);
                }
            }
            if let Some(last) = state.last_pass.filter(|last| now > *last) {
                let hours = (now - last) as f64 / 3600.0;
                let mut energy = self.power_metrics.energy_wh.lock().unwrap_or_else(|p| p.into_inner());
                for f in &facts {
                    energy[state_index(f.power.state)] += power::draw_watts(f.power.state, f.busy, &cfg) * hours;
                }
            }
            state.last_pass = Some(state.last_pass.map_or(now, |last| last.max(now)));
        }
        if cfg.policy == PowerPolicy::Off && facts.iter().all(|f| f.power.state == PowerState::On) {
            return Vec::new();
        }
        // On-demand boots that found no host since the last pass, while
        // pool hosts are off or coming on: each wants one more spare (the
        // boot itself was refused, as Nova's NoValidHost; the woken host
        // takes the next one).
        let no_host = self.compute.metrics.boots_no_host.load(Ordering::Relaxed);
        let no_host_at = self.compute.metrics.last_no_host_at.load(Ordering::Relaxed);
        let demand = {
            let mut state = self.power_state.lock().unwrap_or_else(|p| p.into_inner());
            let new = no_host.saturating_sub(state.no_host_seen);
            state.no_host_seen = no_host;
            let dark = facts.iter().any(|f| matches!(f.power.state, PowerState::Off | PowerState::PoweringOn));
            if dark && cfg.policy == PowerPolicy::Reservations {
                self.power_metrics.ondemand_waits.fetch_add(new, Ordering::Relaxed);
                new as usize
            } else {
                0
            }
        };
        let decision = power::decide(&facts, now, &cfg, demand);
        if demand > 0 {
            // The hosts this decision wakes that no lease needs soon are
            // the ones woken for the waiting boots.
            let lead = now.saturating_add(cfg.lead());
            let mut state = self.power_state.lock().unwrap_or_else(|p| p.into_inner());
            let spare_wakes = decision
                .power_on
                .iter()
                .filter(|id| facts.iter().any(|f| f.id == **id && f.next_needed > lead))
                .take(demand);
            for id in spare_wakes {
                state.demand_wakes.insert(*id, no_host_at.min(now));
            }
        }

        if decision.is_empty() {
            return Vec::new();
        }
        let mut outcome = power::PowerOutcome::default();
        let written = write(&*self.compute.control, |w| match power::plan_power(w, &decision, now, &cfg) {
            Some((set, o)) => {
                outcome = o;
                Ok((set, ()))
            }
            None => {
                outcome = Default::default();
                Ok((Default::default(), ()))
            }
        });
        if let Err(e) = written {
            tracing::warn!(error = %e, "power decision not written; next tick");
            return Vec::new();
        }
        let m = &self.power_metrics;
        m.failures.fetch_add(outcome.failed.len() as u64, Ordering::Relaxed);
        for host in &outcome.failed {
            tracing::error!(host, "pool host did not come back within --power-resume-timeout: failed");
        }
        for host in &outcome.came_on {
            tracing::info!(host, "pool host is on");
        }
        {
            let mut state = self.power_state.lock().unwrap_or_else(|p| p.into_inner());
            for host in &outcome.came_on {
                if let Some(since) = state.demand_wakes.remove(host) {
                    m.ondemand_wait_secs.fetch_add((now - since).max(0) as u64, Ordering::Relaxed);
                }
            }
            // A host woken for demand that failed: the wait ended there.
            for host in &outcome.failed {
                if let Some(since) = state.demand_wakes.remove(host) {
                    m.ondemand_wait_secs.fetch_add((now - since).max(0) as u64, Ordering::Relaxed);
                }
            }
        }
        for host in &outcome.went_off {
            tracing::info!(host, "pool host is off");
        }
        for command in &outcome.commands {
            if command.on {
                m.power_ups.fetch_add(1, Ordering::Relaxed);
            } else {
                m.power_downs.fetch_add(1, Ordering::Relaxed);
            }
            self.run_power_command(command, now).await;
        }
        outcome.commands
    }

    /// Run one recorded command (its intent is already written). A
    /// successful power-off makes the host `off` at once.
    async fn run_power_command(&self, command: &PowerCommand, now: i64) {
        let script = if command.on { &self.config.power_on_cmd } else { &self.config.power_off_cmd };
        let ok = match script {
            None => true,
            Some(script) => {
                let (script, name, on) = (script.clone(), command.host_name.clone(), command.on);
                let run = tokio::task::spawn_blocking(move || {
                    std::process::Command::new("sh")
                        .arg("-c")
                        .arg(script)
                        .arg("sh")
                        .arg(&name)
                        .env("BERTH_POWER_HOST", &name)
                        .env("BERTH_POWER_ACTION", if on { "on" } else { "off" })
                        .status()
                });
                match tokio::time::timeout(std::time::Duration::from_secs(60), run).await {
                    Ok(Ok(Ok(status))) if status.success() => true,
                    Ok(Ok(Ok(status))) => {
                        tracing::warn!(host = %command.host_name, on = command.on, %status, "power command failed");
                        false
                    }
                    Ok(Ok(Err(e))) => {
                        tracing::warn!(host = %command.host_name, on = command.on, error = %e, "power command did not run");
                        false
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(host = %command.host_name, on = command.on, error = %e, "power command panicked");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(host = %command.host_name, on = command.on, "power command timed out");
                        false
                    }
                }
            }
        };
        if !ok {
            self.power_metrics.command_errors.fetch_add(1, Ordering::Relaxed);
            // A power-on that failed will not bring the host back: `failed`
            // at once (its leases heal now, not after the resume timeout).
            // A power-off that failed leaves the host running: `on`.
            let (host_id, on) = (command.host_id, command.on);
            let written = write(&*self.compute.control, |w| {
                let set = power::plan_command_failed(w, host_id, on, now, now);
                let wrote = set.is_some();
                Ok((set.unwrap_or_default(), wrote))
            });
            match written {
                Err(e) => tracing::warn!(host_id, error = %e, "failed power command not recorded; the deadline will"),
                Ok(true) if on => {
                    self.power_metrics.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(host = %command.host_name, "power-on command failed: host failed");
                }
                Ok(true) => tracing::warn!(host = %command.host_name, "power-off command failed: host stays on"),
                Ok(false) => {}
            }
            return;
        }
        tracing::info!(host = %command.host_name, on = command.on, "power command issued");
        if !command.on {
            let host_id = command.host_id;
            if let Err(e) = write(&*self.compute.control, |w| {
                Ok((power::plan_powered_off(w, host_id, now).unwrap_or_default(), ()))
            }) {
                tracing::warn!(host_id, error = %e, "powered-off host not recorded; its deadline will");
            }
        }
    }

    /// Pool hosts per power state now (`/metrics`).
    pub fn power_gauges(&self) -> Vec<(PowerState, usize)> {
        read(&*self.compute.control, power::hosts_by_state)
    }

    /// Energy used so far (Wh) per power state.
    pub fn energy_wh(&self) -> [f64; 5] {
        *self.power_metrics.energy_wh.lock().unwrap_or_else(|p| p.into_inner())
    }
}
