//! Power management of the reservation pool (issue 22): idle pool hosts
//! are switched off and switched on again before a lease needs them.
//!
//! Two layers, both pure:
//!
//! - [`decide`] is the policy, over plain [`HostFacts`] (no `World`), so
//!   the server and `berth bench energy`'s discrete-event simulation run
//!   the very same code;
//! - [`plan_power`] turns a [`PowerDecision`] into ONE `WorldChangeSet`,
//!   re-checking every transition on the `World` it runs on (a host with
//!   allocations, or needed within the lead, is never switched off; a
//!   transition whose state moved meanwhile is dropped).
//!
//! Exactly once: the write that moves a host to `powering-on` or
//! `powering-off` records `issued_at` *before* the command runs (the
//! runtime runs the commands after the write commits). A restart finds
//! the host already `powering-*` and does not run the command again: a
//! `powering-on` host waits for its first report after `issued_at`, or its
//! `deadline` (then `failed`, and its leases heal onto other hosts).
//!
//! Rate limits are durable too: the commands issued in the last minute
//! are the hosts whose `issued_at` lies in it.

use std::collections::BTreeMap;

use berth_compute_model::lease::{HostPower, PowerState, ReservableHost};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{Timestamp, World, WorldChangeSet};

use crate::lending::consumers_on_host;

/// `--power-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PowerPolicy {
    /// No power management: every host stays on.
    #[default]
    Off,
    /// Switch idle pool hosts off, on again before their leases.
    Reservations,
}

impl PowerPolicy {
    /// From the flag's value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(PowerPolicy::Off),
            "reservations" => Some(PowerPolicy::Reservations),
            _ => None,
        }
    }
}

/// Power management settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerConfig {
    /// The policy.
    pub policy: PowerPolicy,
    /// Idle seconds before a host may be switched off (`--suspend-time`).
    pub suspend_time: i64,
    /// How long a host takes to boot, as the policy plans it (seconds).
    pub power_on_secs: i64,
    /// Extra lead before a lease start (`--power-margin`).
    pub margin: i64,
    /// Idle pool hosts kept on for on-demand boots (`--spare-hosts`).
    pub spare_hosts: usize,
    /// A `powering-on` host not reporting within this is `failed`
    /// (`--power-resume-timeout`).
    pub resume_timeout: i64,
    /// Power-off commands per minute at most.
    pub down_per_min: usize,
    /// Power-on commands per minute at most.
    pub up_per_min: usize,
    /// Draw of an idle host (W).
    pub watts_idle: f64,
    /// Draw of a busy host (W).
    pub watts_busy: f64,
}

impl Default for PowerConfig {
    fn default() -> Self {
        PowerConfig {
            policy: PowerPolicy::Off,
            suspend_time: 600,
            power_on_secs: 300,
            margin: 300,
            spare_hosts: 1,
            resume_timeout: 600,
            down_per_min: 60,
            up_per_min: 300,
            watts_idle: 100.0,
            watts_busy: 250.0,
        }
    }
}

impl PowerConfig {
    /// How long before it is needed a host must be switched on.
    pub fn lead(&self) -> i64 {
        self.power_on_secs.max(0) + self.margin.max(0)
    }
}

/// What the policy knows of one pool host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostFacts {
    /// Pool host id.
    pub id: i64,
    /// Its power.
    pub power: HostPower,
    /// Carries allocations (servers, lent ones included, or migrations).
    pub busy: bool,
    /// Since when it has been idle (`busy` false).
    pub idle_since: Timestamp,
    /// When a booking next holds it (`<= now`: held now; `MAX`: never).
    pub next_needed: Timestamp,
    /// It reported (heartbeat) after its last power command, or, when
    /// `failed`, after it failed.
    pub reported: bool,
}

/// What [`decide`] wants done, host ids in order of priority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerDecision {
    /// Switch on (`off`/`failed` → `powering-on`; the command runs).
    pub power_on: Vec<i64>,
    /// Switch off (`on` → `powering-off`; the command runs).
    pub power_off: Vec<i64>,
    /// `powering-on` hosts that reported: `on`.
    pub came_on: Vec<i64>,
    /// `powering-off` hosts past their deadline: `off`.
    pub went_off: Vec<i64>,
    /// `powering-on` hosts past the resume timeout: `failed`.
    pub failed: Vec<i64>,
    /// `failed` hosts that reported again: `on`.
    pub recovered: Vec<i64>,
}

impl PowerDecision {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.power_on.is_empty()
            && self.power_off.is_empty()
            && self.came_on.is_empty()
            && self.went_off.is_empty()
            && self.failed.is_empty()
            && self.recovered.is_empty()
    }
}

/// Commands issued within the last minute: `(downs, ups)`.
pub fn issued_last_minute(hosts: &[HostFacts], now: Timestamp) -> (usize, usize) {
    let recent = |h: &&HostFacts| h.power.issued_at.is_some_and(|t| t > now - 60);
    let downs =
        hosts.iter().filter(recent).filter(|h| matches!(h.power.state, PowerState::PoweringOff | PowerState::Off));
    let ups =
        hosts.iter().filter(recent).filter(|h| !matches!(h.power.state, PowerState::PoweringOff | PowerState::Off));
    (downs.count(), ups.count())
}

/// The policy: which hosts change power state at `now`. `extra_wanted`:
/// on-demand boots waiting for a host (more spares to wake).
///
/// - `powering-on` → `on` when the host reported, `failed` past its
///   deadline; `powering-off` → `off` past its deadline; `failed` → `on`
///   when it reports again (these follow the facts, whatever the policy);
/// - with the `reservations` policy: an `off` host needed before
///   `now + lead` is switched on (earliest need first); idle `on` hosts
///   not needed before `now + lead + suspend_time` are *spares*:
///   `spare_hosts` (plus `extra_wanted`) of them stay on, more are woken
///   when there are too few; the other idle hosts not needed within the
///   lead are switched off once idle for `suspend_time`, or at once when
///   their next known need lies beyond `now + lead + suspend_time`; at
///   most `down_per_min` / `up_per_min` commands a minute.
pub fn decide(hosts: &[HostFacts], now: Timestamp, cfg: &PowerConfig, extra_wanted: usize) -> PowerDecision {
    let mut d = PowerDecision::default();
    for h in hosts {
        match h.power.state {
            PowerState::PoweringOn if h.reported => d.came_on.push(h.id),
            PowerState::PoweringOn if h.power.deadline.is_some_and(|t| now >= t) => d.failed.push(h.id),
            PowerState::PoweringOff if h.power.deadline.is_some_and(|t| now >= t) => d.went_off.push(h.id),
            PowerState::Failed if h.reported => d.recovered.push(h.id),
            _ => {}
        }
    }
    if cfg.policy == PowerPolicy::Off {
        return d;
    }
    let lead = cfg.lead();
    let needed = |h: &HostFacts| h.next_needed <= now.saturating_add(lead);
    let (downs, ups) = issued_last_minute(hosts, now);
    let mut up_budget = cfg.up_per_min.saturating_sub(ups);
    let mut down_budget = cfg.down_per_min.saturating_sub(downs);

    // Wake the hosts a lease needs soon, earliest first.
    // Hosts going `off` in this very decision may be woken by it too.
    let mut off: Vec<&HostFacts> =
        hosts.iter().filter(|h| h.power.state == PowerState::Off || d.went_off.contains(&h.id)).collect();
    off.sort_by_key(|h| (h.next_needed, h.id));
    let (wake, rest): (Vec<&HostFacts>, Vec<&HostFacts>) = off.into_iter().partition(|h| needed(h));
    for h in wake {
        if up_budget == 0 {
            break;
        }
        up_budget -= 1;
        d.power_on.push(h.id);
    }

    // Spares: idle hosts on (or coming on) free for longer than the lead
    // plus the suspend time, so they can take an on-demand boot; an idle
    // host needed sooner bridges the gap to its lease and is no spare.
    let want = cfg.spare_hosts + extra_wanted;
    let horizon = now.saturating_add(lead).saturating_add(cfg.suspend_time);
    let usable = |h: &HostFacts| h.next_needed > horizon;
    let coming = hosts.iter().filter(|h| h.power.state == PowerState::PoweringOn && usable(h)).count();
    let (mut spares, bridging): (Vec<&HostFacts>, Vec<&HostFacts>) =
        hosts.iter().filter(|h| h.power.state == PowerState::On && !h.busy && !needed(h)).partition(|h| usable(h));
    // Idle for the suspend time (a guard against on-demand churn), or
    // with a known next need beyond the horizon and no power command
    // within the suspend time: then at once (the foreknowledge: it stays
    // off until `next_needed - lead` and comes back in time).
    let eligible = |h: &HostFacts| {
        now - h.idle_since >= cfg.suspend_time
            || (h.next_needed != Timestamp::MAX
                && h.next_needed > horizon
                && h.power.issued_at.is_none_or(|t| now - t >= cfg.suspend_time))
    };
    // Kept first: hosts not yet idle long enough (they stay on anyway),
    // then those needed latest.
    spares.sort_by_key(|h| (eligible(h), std::cmp::Reverse(h.next_needed), h.id));
    let have = spares.len() + coming;
    if have < want {
        // Too few spares: wake some (those needed latest first).
        for h in rest.iter().rev().take(want - have) {
            if up_budget == 0 {
                break;
            }
            up_budget -= 1;
            d.power_on.push(h.id);
        }
    }
    let keep = want.saturating_sub(coming);
    for h in spares.into_iter().skip(keep).chain(bridging).filter(|h| eligible(h)) {
        if down_budget == 0 {
            break;
        }
        down_budget -= 1;
        d.power_off.push(h.id);
    }
    d
}

/// Draw of a host in a state (W): off 0, switching or failed idle, on
/// idle or busy by its allocations.
pub fn draw_watts(state: PowerState, busy: bool, cfg: &PowerConfig) -> f64 {
    match state {
        PowerState::Off => 0.0,
        PowerState::On if busy => cfg.watts_busy,
        _ => cfg.watts_idle,
    }
}

/// The policy's facts about every pool host of the `World`.
/// `last_seen`: a compute service host's last heartbeat; `idle_since`: when
/// the runtime first saw the host idle (`None`: not known, taken as `now`).
pub fn pool_facts(
    world: &World,
    now: Timestamp,
    last_seen: &dyn Fn(&str) -> Option<Timestamp>,
    idle_since: &dyn Fn(i64) -> Option<Timestamp>,
) -> Vec<HostFacts> {
    let tables = &world.compute.leases;
    tables
        .hosts
        .values()
        .map(|h| {
            let busy = host_has_allocations(world, h);
            let seen = last_seen(&h.service_name);
            let after = match h.power.state {
                PowerState::Failed => Some(h.power.since),
                _ => h.power.issued_at,
            };
            let reported = matches!((seen, after), (Some(s), Some(a)) if s > a);
            let ended = tables
                .bookings
                .get(&h.id)
                .into_iter()
                .flatten()
                .map(|b| b.end)
                .filter(|e| *e <= now)
                .max()
                .unwrap_or(Timestamp::MIN);
            let idle_since = idle_since(h.id).unwrap_or(now).max(ended).max(h.power.since);
            HostFacts {
                id: h.id,
                power: h.power,
                busy,
                idle_since,
                next_needed: tables.next_needed(h.id, now),
                reported,
            }
        })
        .collect()
}

/// Does a pool host carry any allocation (servers, lent ones included,
/// migrations)?
pub fn host_has_allocations(world: &World, host: &ReservableHost) -> bool {
    !consumers_on_host(world, &host.service_name).is_empty()
}

/// A power command the runtime runs after the write commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerCommand {
    /// Pool host id.
    pub host_id: i64,
    /// Its name (`hypervisor_hostname`), the command's argument.
    pub host_name: String,
    /// True: power on; false: power off.
    pub on: bool,
}

/// What [`plan_power`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerOutcome {
    /// Commands to run, in order.
    pub commands: Vec<PowerCommand>,
    /// Hosts now `on` (came back or recovered).
    pub came_on: Vec<i64>,
    /// Hosts now `off`.
    pub went_off: Vec<i64>,
    /// Hosts now `failed` (made unreservable: their leases heal).
    pub failed: Vec<i64>,
}

/// One write for a decision, each transition re-checked on `world`: a
/// host is switched off only while `on`, without allocations and not
/// needed within the lead; switched on only while `off` or `failed`; the
/// others only from the state they were decided from. `None` when nothing
/// is left to write.
pub fn plan_power(
    world: &World,
    decision: &PowerDecision,
    now: Timestamp,
    cfg: &PowerConfig,
) -> Option<(WorldChangeSet, PowerOutcome)> {
    let tables = &world.compute.leases;
    let mut rows: BTreeMap<i64, ReservableHost> = BTreeMap::new();
    let mut out = PowerOutcome::default();
    let mut set_state = |id: i64, from: &[PowerState], f: &dyn Fn(&mut ReservableHost)| -> bool {
        // The row as this write leaves it so far (a host going `off` may
        // be switched on in the same write).
        let Some(mut h) = rows.get(&id).or_else(|| tables.hosts.get(&id)).cloned() else { return false };
        if !from.contains(&h.power.state) {
            return false;
        }
        f(&mut h);
        h.updated_at = Some(now);
        rows.insert(id, h);
        true
    };
    for id in &decision.came_on {
        if set_state(*id, &[PowerState::PoweringOn], &|h| {
            h.power = HostPower { state: PowerState::On, since: now, ..h.power };
            h.power.deadline = None;
        }) {
            out.came_on.push(*id);
        }
    }
    for id in &decision.recovered {
        if set_state(*id, &[PowerState::Failed], &|h| {
            h.power = HostPower { state: PowerState::On, since: now, issued_at: h.power.issued_at, deadline: None };
            h.reservable = true;
        }) {
            out.came_on.push(*id);
        }
    }
    for id in &decision.failed {
        let past = tables.hosts.get(id).is_some_and(|h| h.power.deadline.is_some_and(|t| now >= t));
        if past
            && set_state(*id, &[PowerState::PoweringOn], &|h| {
                h.power =
                    HostPower { state: PowerState::Failed, since: now, issued_at: h.power.issued_at, deadline: None };
                h.reservable = false;
            })
        {
            out.failed.push(*id);
        }
    }
    for id in &decision.went_off {
        if set_state(*id, &[PowerState::PoweringOff], &|h| {
            h.power = HostPower { state: PowerState::Off, since: now, issued_at: h.power.issued_at, deadline: None };
        }) {
            out.went_off.push(*id);
        }
    }
    for id in &decision.power_on {
        let deadline = now.saturating_add(cfg.resume_timeout.max(0));
        if set_state(*id, &[PowerState::Off, PowerState::Failed], &|h| {
            h.power =
                HostPower { state: PowerState::PoweringOn, since: now, issued_at: Some(now), deadline: Some(deadline) };
        }) {
            let name = tables.hosts[id].hypervisor_hostname.clone();
            out.commands.push(PowerCommand { host_id: *id, host_name: name, on: true });
        }
    }
    for id in &decision.power_off {
        let Some(host) = tables.hosts.get(id) else { continue };
        // Never off with allocations, nor when a lease needs it soon.
        if host_has_allocations(world, host) || tables.next_needed(*id, now) <= now.saturating_add(cfg.lead()) {
            continue;
        }
        let deadline = now.saturating_add(cfg.resume_timeout.max(0));
        if set_state(*id, &[PowerState::On], &|h| {
            h.power = HostPower {
                state: PowerState::PoweringOff,
                since: now,
                issued_at: Some(now),
                deadline: Some(deadline),
            };
        }) {
            out.commands.push(PowerCommand { host_id: *id, host_name: host.hypervisor_hostname.clone(), on: false });
        }
    }
    if rows.is_empty() {
        return None;
    }
    let mut set = WorldChangeSet::new();
    for (_, row) in rows {
        set.compute(C::PutReservableHost(row));
    }
    Some((set, out))
}

/// A `powering-off` host whose command succeeded is `off` (one write;
/// `None` when it is in another state by now).
pub fn plan_powered_off(world: &World, host_id: i64, now: Timestamp) -> Option<WorldChangeSet> {
    let decision = PowerDecision { went_off: vec![host_id], ..Default::default() };
    // `went_off` is re-checked against the state only; the deadline is
    // the decision's business (the command answered).
    plan_power(world, &decision, now, &PowerConfig::default()).map(|(set, _)| set)
}

/// A power command that failed (exited non-zero or could not run), in one
/// write: a failed power-on makes the host `failed` at once (unreservable:
/// its leases heal onto other hosts, as after the resume timeout); a
/// failed power-off leaves it `on`. `issued_at`: when the command was
/// recorded; a host whose state or `issued_at` moved meanwhile (a newer
/// decision) is left alone (`None`).
pub fn plan_command_failed(
    world: &World,
    host_id: i64,
    on: bool,
    issued_at: Timestamp,
    now: Timestamp,
) -> Option<WorldChangeSet> {
    let mut host = world.compute.leases.hosts.get(&host_id)?.clone();
    if host.power.issued_at != Some(issued_at) {
        return None;
    }
    match (on, host.power.state) {
        (true, PowerState::PoweringOn) => {
            host.power =
                HostPower { state: PowerState::Failed, since: now, issued_at: Some(issued_at), deadline: None };
            host.reservable = false;
        }
        (false, PowerState::PoweringOff) => {
            host.power = HostPower { state: PowerState::On, since: now, issued_at: Some(issued_at), deadline: None };
        }
        _ => return None,
    }
    host.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutReservableHost(host));
    Some(set)
}

/// Pool hosts per power state (every state listed).
pub fn hosts_by_state(world: &World) -> Vec<(PowerState, usize)> {
    let hosts = &world.compute.leases.hosts;
    PowerState::ALL.into_iter().map(|s| (s, hosts.values().filter(|h| h.power.state == s).count())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: i64, state: PowerState, busy: bool, idle_since: Timestamp, next_needed: Timestamp) -> HostFacts {
        HostFacts {
            id,
            power: HostPower { state, since: 0, issued_at: None, deadline: None },
            busy,
            idle_since,
            next_needed,
            reported: false,
        }
    }

    fn cfg() -> PowerConfig {
        PowerConfig {
            policy: PowerPolicy::Reservations,
            suspend_time: 600,
            power_on_secs: 300,
            margin: 300,
            spare_hosts: 1,
            down_per_min: 2,
            ..PowerConfig::default()
        }
    }

    #[test]
    fn idle_hosts_go_off_keeping_a_spare_busy_and_needed_hosts_stay_on() {
        let now = 10_000;
        let hosts = [
            host(1, PowerState::On, true, 0, Timestamp::MAX),
            host(2, PowerState::On, false, 0, now + 500),
            host(3, PowerState::On, false, 0, Timestamp::MAX),
            host(4, PowerState::On, false, 0, now + 5_000),
            host(5, PowerState::On, false, now - 100, Timestamp::MAX),
        ];
        let d = decide(&hosts, now, &cfg(), 0);
        // 1 busy, 2 needed within the lead, 5 not idle long enough (and
        // kept as the spare): 3 and 4 go off.
        assert_eq!(d.power_off, vec![3, 4]);
        assert!(d.power_on.is_empty());
    }

    #[test]
    fn a_host_with_a_far_known_need_goes_off_at_once_and_a_near_one_is_no_spare() {
        let now = 10_000;
        // lead 600 + suspend 600: the horizon is now + 1,200.
        let hosts = [
            // Just idle, no known need: the spare.
            host(1, PowerState::On, false, now, Timestamp::MAX),
            // Just idle, needed in 2 hours: off at once.
            host(2, PowerState::On, false, now, now + 7_200),
            // Just idle, needed in 1,000 s: bridges the gap, stays on.
            host(3, PowerState::On, false, now, now + 1_000),
        ];
        let d = decide(&hosts, now, &cfg(), 0);
        assert_eq!(d.power_off, vec![2]);
        assert!(d.power_on.is_empty());
        // A host whose power-off failed a moment ago is not tried again at
        // once.
        let mut retried = hosts;
        retried[1].power.issued_at = Some(now - 10);
        assert!(decide(&retried, now, &cfg(), 0).power_off.is_empty());
        // Without the free host, the bridging host is no spare: an off
        // host is woken for on-demand boots instead.
        let hosts = [hosts[2], host(4, PowerState::Off, false, 0, Timestamp::MAX)];
        let d = decide(&hosts, now, &cfg(), 0);
        assert_eq!(d.power_on, vec![4]);
        // Waiting on-demand boots want more spares.
        let hosts = [
            host(1, PowerState::On, false, now, Timestamp::MAX),
            host(4, PowerState::Off, false, 0, Timestamp::MAX),
            host(5, PowerState::Off, false, 0, Timestamp::MAX),
        ];
        assert!(decide(&hosts, now, &cfg(), 0).power_on.is_empty());
        assert_eq!(decide(&hosts, now, &cfg(), 2).power_on, vec![5, 4]);
    }

    #[test]
    fn the_down_rate_limit_counts_the_last_minute() {
        let now = 10_000;
        let mut hosts: Vec<HostFacts> = (1..=6).map(|id| host(id, PowerState::On, false, 0, Timestamp::MAX)).collect();
        hosts[0].power =
            HostPower { state: PowerState::Off, since: now - 30, issued_at: Some(now - 30), deadline: None };
        let d = decide(&hosts, now, &PowerConfig { spare_hosts: 0, ..cfg() }, 0);
        // Two a minute, one already issued: one more.
        assert_eq!(d.power_off.len(), 1, "{d:?}");
    }

    #[test]
    fn off_hosts_wake_at_start_minus_the_lead_and_for_missing_spares() {
        let now = 10_000;
        let hosts = [
            host(1, PowerState::Off, false, 0, now + 600),
            host(2, PowerState::Off, false, 0, now + 601),
            host(3, PowerState::Off, false, 0, Timestamp::MAX),
        ];
        let d = decide(&hosts, now, &PowerConfig { spare_hosts: 0, ..cfg() }, 0);
        assert_eq!(d.power_on, vec![1]);
        // One spare wanted: the host needed latest wakes too.
        let d = decide(&hosts, now, &cfg(), 0);
        assert_eq!(d.power_on, vec![1, 3]);
        // The policy off switches nothing.
        let d = decide(&hosts, now, &PowerConfig { policy: PowerPolicy::Off, ..cfg() }, 0);
        assert!(d.is_empty());
    }

    #[test]
    fn a_power_up_comes_on_when_reported_and_fails_past_its_deadline() {
        let mut h = host(1, PowerState::PoweringOn, false, 0, Timestamp::MAX);
        h.power.issued_at = Some(100);
        h.power.deadline = Some(700);
        assert!(decide(&[h], 699, &cfg(), 0).is_empty());
        assert_eq!(decide(&[h], 700, &cfg(), 0).failed, vec![1]);
        h.reported = true;
        assert_eq!(decide(&[h], 700, &cfg(), 0).came_on, vec![1]);
    }

    #[test]
    fn draw_by_state() {
        let c = cfg();
        assert_eq!(draw_watts(PowerState::Off, false, &c), 0.0);
        assert_eq!(draw_watts(PowerState::On, true, &c), 250.0);
        assert_eq!(draw_watts(PowerState::On, false, &c), 100.0);
        assert_eq!(draw_watts(PowerState::PoweringOn, false, &c), 100.0);
    }
}
