//! `berth bench energy`: power management of the reservation pool over a
//! year, three policies in the same run (issue 22).
//!
//! **A discrete-event simulation, not HTTP.** A year of 1,000 hosts at a
//! 1-minute step is about 5 × 10^8 host-steps per policy; driving the server
//! through HTTP for that would take days. Instead the bench steps a model
//! of the pool and asks the *same pure policy code the server runs*
//! (`berth_reservation_model::power::decide`, with the server's
//! `PowerConfig`) what to switch at every step. The server-side plumbing
//! around it (one planned write per decision, commands, heartbeats) is
//! covered by the integration tests (`compute::power`).
//!
//! **The year (seeded, `--seed`).** From 2040-01-01, `--days` days:
//!
//! - *working days* (Monday–Friday, not a holiday): 20–60 leases each
//!   (uniform), starting on the hour between 08:00 and 17:00, lasting
//!   1–10 hours (5 % of them 1–5 days: week-long experiments), of 1, 2, 4,
//!   8, 16, 32 or 64 whole hosts (weights 30/25/18/12/8/5/2); each booked
//!   1 hour to 14 days ahead (the foreknowledge);
//! - *weekends*: 0–4 leases; *holidays* (1 January, 24–31 December and
//!   eight seeded days): none;
//! - *on-demand boots* (lent pool hosts): Poisson arrivals, 2 an hour in
//!   working hours, 0.5 an hour otherwise, each taking a whole idle host
//!   for 1–24 hours.
//!
//! Leases get the lowest-numbered hosts free for their window (packing,
//! as admission may), in order of start; a lease that finds too few is
//! refused (counted). On-demand boots take the lowest-numbered host that
//! is on, idle and not booked during their life; with none they wait
//! (the wait is measured).
//!
//! **Policies, all through `decide`:**
//!
//! - `reservations`: berth's, with every known booking (a lease is known
//!   from its booking time on), `--spare-hosts` spares, and waiting
//!   on-demand boots as extra wanted spares;
//! - `slurm`: suspend after `--suspend-time` idle, resume on demand: the
//!   same code with no foreknowledge (a booking is seen only once it has
//!   started) and no spares: a lease's hosts are switched on at its start,
//!   and each waiting boot wakes one host;
//! - `watcher`: fixed spares (Watcher's saving-energy strategy: at least
//!   1, 10 % of the used hosts), free hosts beyond them off at once, no
//!   foreknowledge.
//!
//! A host takes `--boot-secs` to come on and 60 s to go off; draws are
//! `--host-watts-idle` / `--host-watts-busy` (off: 0; switching: idle).
//! The energy is also split into idle-on, switching and busy: busy is the
//! work delivered (a lease whose host is still booting delivers none), the
//! other two are the policy's overhead.
//! A *late* lease start is a lease one of whose hosts is not `on` at its
//! start.
#![expect(clippy::print_stdout, reason = "benchmarks report their figures on stdout")]

use std::collections::BTreeSet;
use std::fmt::Write as _;

use berth_compute_model::lease::{HostPower, PowerState};
use berth_reservation_model::power::{self, HostFacts, PowerConfig, PowerPolicy};
use serde_json::json;

use crate::common::Rng;

const HOUR: i64 = 3600;
const DAY: i64 = 86_400;
/// 2040-01-01 00:00 UTC (a Sunday).
const T0: i64 = 2_208_988_800;

/// Options of `berth bench energy`.
#[derive(Debug, clap::Args)]
pub(crate) struct EnergyOpts {
    /// Pool hosts.
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Days simulated.
    #[arg(long, default_value_t = 365)]
    days: i64,
    /// Simulation step (seconds); the server's power pass runs every
    /// `--lease-tick-ms` (1 s).
    #[arg(long, default_value_t = 60)]
    step_secs: i64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 22)]
    seed: u64,
    /// Idle seconds before a host may go off (reservations, slurm).
    #[arg(long, default_value_t = 1800)]
    suspend_time: i64,
    /// Boot time of a host (seconds), also the policy's power-on time.
    #[arg(long, default_value_t = 300)]
    boot_secs: i64,
    /// Extra lead before a lease start (seconds): one step is enough
    /// here, boots take exactly `--boot-secs`.
    #[arg(long, default_value_t = 60)]
    power_margin: i64,
    /// Spare hosts kept on (reservations).
    #[arg(long, default_value_t = 1)]
    spare_hosts: usize,
    /// Draw of an idle host (W).
    #[arg(long, default_value_t = 100.0)]
    host_watts_idle: f64,
    /// Draw of a busy host (W).
    #[arg(long, default_value_t = 250.0)]
    host_watts_busy: f64,
    /// Write one JSON object per policy here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write the chart (power states of sample hosts over a week, energy
    /// per day) here as SVG.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
}

/// One lease of the year.
#[derive(Debug, Clone)]
struct Lease {
    booked_at: i64,
    start: i64,
    hosts: Vec<usize>,
}

/// One on-demand boot.
#[derive(Debug, Clone, Copy)]
struct Boot {
    at: i64,
    life: i64,
}

/// The generated year.
struct Year {
    leases: Vec<Lease>,
    refused: usize,
    boots: Vec<Boot>,
    /// Per host: its bookings `(booked_at, start, end, lease)`, by start.
    bookings: Vec<Vec<(i64, i64, i64, usize)>>,
}

fn weekday(t: i64) -> i64 {
    // 0 = Sunday.
    (t.div_euclid(DAY) + 4).rem_euclid(7)
}

fn generate(opts: &EnergyOpts) -> Year {
    let mut rng = Rng(opts.seed);
    let end = T0 + opts.days * DAY;
    let mut holidays: BTreeSet<i64> = [0].into_iter().chain(357..365).collect();
    while holidays.len() < 17 {
        holidays.insert(rng.range(1, 356));
    }
    let mut wanted: Vec<(i64, i64, usize, i64)> = Vec::new();
    for day in 0..opts.days {
        let t = T0 + day * DAY;
        let dow = weekday(t);
        let count = if holidays.contains(&(day % 365)) {
            0
        } else if dow == 0 || dow == 6 {
            rng.range(0, 4)
        } else {
            rng.range(20, 60)
        };
        for _ in 0..count {
            let start = t + rng.range(8, 17) * HOUR;
            let length = if rng.unit() < 0.05 { rng.range(1, 5) * DAY } else { rng.range(1, 10) * HOUR };
            let size = {
                let x = rng.range(0, 99);
                let sizes = [(30, 1), (55, 2), (73, 4), (85, 8), (93, 16), (98, 32), (100, 64)];
                sizes.iter().find(|(w, _)| x < *w).map_or(1, |(_, s)| *s)
            };
            let notice = rng.range(HOUR, 14 * DAY);
            wanted.push((start, (start + length).min(end), size, start - notice));
        }
    }
    wanted.sort_by_key(|w| w.0);
    // Lowest-numbered free hosts, in order of start.
    let mut free_at = vec![i64::MIN; opts.hosts];
    let mut bookings = vec![Vec::new(); opts.hosts];
    let mut leases = Vec::new();
    let mut refused = 0;
    for (start, end, size, booked_at) in wanted {
        let hosts: Vec<usize> = (0..opts.hosts).filter(|h| free_at[*h] <= start).take(size).collect();
        if hosts.len() < size {
            refused += 1;
            continue;
        }
        for h in &hosts {
            free_at[*h] = end;
            bookings[*h].push((booked_at, start, end, leases.len()));
        }
        leases.push(Lease { booked_at, start, hosts });
    }
    let mut boots = Vec::new();
    let mut t = T0;
    while t < end {
        let working = !holidays.contains(&((t - T0) / DAY % 365)) && (1..=5).contains(&weekday(t)) && {
            let hour = (t - T0) % DAY / HOUR;
            (8..18).contains(&hour)
        };
        let rate = if working { 2.0 } else { 0.5 } / HOUR as f64;
        t += (-(1.0 - rng.unit()).ln() / rate) as i64 + 1;
        boots.push(Boot { at: t, life: rng.range(HOUR, 24 * HOUR) });
    }
    Year { leases, refused, boots, bookings }
}

/// Which policy a run follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reservations,
    Slurm,
    Watcher,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Reservations => "reservations",
            Kind::Slurm => "slurm",
            Kind::Watcher => "watcher",
        }
    }
}

/// What one policy's year measured.
struct Outcome {
    kind: Kind,
    energy_wh: f64,
    always_on_wh: f64,
    /// Energy of hosts on and idle, switching (powering on/off, failed),
    /// and busy (Wh).
    idle_wh: f64,
    switching_wh: f64,
    busy_wh: f64,
    late: usize,
    lease_starts: usize,
    waits: Vec<i64>,
    ups: u64,
    downs: u64,
    /// Energy per day (Wh).
    daily: Vec<f64>,
    /// Sample hosts' states per step of the sample week.
    sample: Vec<Vec<PowerState>>,
}

const SAMPLE_HOSTS: usize = 24;
/// The sample week starts on a Monday (2040-01-09, day 8).
const SAMPLE_FROM: i64 = T0 + 8 * DAY;

fn simulate(opts: &EnergyOpts, year: &Year, kind: Kind) -> Outcome {
    let n = opts.hosts;
    let step = opts.step_secs.max(60);
    let cfg = PowerConfig {
        policy: PowerPolicy::Reservations,
        suspend_time: match kind {
            Kind::Watcher => 0,
            _ => opts.suspend_time,
        },
        power_on_secs: opts.boot_secs,
        margin: opts.power_margin,
        spare_hosts: match kind {
            Kind::Reservations => opts.spare_hosts,
            _ => 0,
        },
        resume_timeout: opts.boot_secs * 4,
        down_per_min: 60,
        up_per_min: 300,
        watts_idle: opts.host_watts_idle,
        watts_busy: opts.host_watts_busy,
    };
    let mut power = vec![HostPower::default(); n];
    let mut boots_at: Vec<Option<i64>> = vec![None; n];
    let mut idle_since = vec![T0; n];
    let mut cursor = vec![0usize; n];
    // On-demand servers per host: when the server ends.
    let mut server_until: Vec<Option<i64>> = vec![None; n];
    let mut waiting: std::collections::VecDeque<Boot> = Default::default();
    let mut next_boot = 0;
    let mut lease_idx = 0;
    let mut out = Outcome {
        kind,
        energy_wh: 0.0,
        always_on_wh: 0.0,
        idle_wh: 0.0,
        switching_wh: 0.0,
        busy_wh: 0.0,
        late: 0,
        lease_starts: 0,
        waits: Vec::new(),
        ups: 0,
        downs: 0,
        daily: vec![0.0; opts.days as usize],
        sample: vec![Vec::new(); SAMPLE_HOSTS.min(n)],
    };
    let end = T0 + opts.days * DAY;
    let mut now = T0;
    while now < end {
        // Bookings that ended leave the cursor.
        for h in 0..n {
            while cursor[h] < year.bookings[h].len() && year.bookings[h][cursor[h]].2 <= now {
                cursor[h] += 1;
            }
            if server_until[h].is_some_and(|t| t <= now) {
                server_until[h] = None;
            }
        }
        let lease_busy = |h: usize| year.bookings[h].get(cursor[h]).is_some_and(|b| b.1 <= now);
        // Leases starting in this step: late unless all their hosts are on.
        while lease_idx < year.leases.len() && year.leases[lease_idx].start < now + step {
            let lease = &year.leases[lease_idx];
            if lease.start >= now {
                out.lease_starts += 1;
                if lease.hosts.iter().any(|h| power[*h].state != PowerState::On) {
                    out.late += 1;
                    if std::env::var_os("BERTH_ENERGY_DEBUG").is_some() && kind == Kind::Reservations {
                        let states: Vec<_> = lease.hosts.iter().map(|h| (h, power[*h])).collect();
                        eprintln!("late: start {} booked {} now {now} {states:?}", lease.start, lease.booked_at);
                    }
                }
            }
            lease_idx += 1;
        }
        // On-demand arrivals, then placement on free hosts that are on.
        while next_boot < year.boots.len() && year.boots[next_boot].at < now + step {
            waiting.push_back(year.boots[next_boot]);
            next_boot += 1;
        }
        while let Some(boot) = waiting.front().copied() {
            let at = boot.at.max(now);
            let free = (0..n).find(|h| {
                power[*h].state == PowerState::On
                    && server_until[*h].is_none()
                    && year.bookings[*h].get(cursor[*h]).is_none_or(|b| b.1 >= at + boot.life)
            });
            let Some(h) = free else { break };
            waiting.pop_front();
            server_until[h] = Some(at + boot.life);
            let wait = at - boot.at;
            if wait > 0 {
                out.waits.push(wait);
            }
        }
        // Facts, as the server builds them (with or without foreknowledge).
        let facts: Vec<HostFacts> = (0..n)
            .map(|h| {
                let busy = lease_busy(h) || server_until[h].is_some();
                if busy || power[h].state != PowerState::On {
                    idle_since[h] = now;
                }
                let next = year.bookings[h].get(cursor[h]).filter(|b| match kind {
                    Kind::Reservations => b.0 <= now,
                    _ => b.1 <= now,
                });
                HostFacts {
                    id: h as i64,
                    power: power[h],
                    busy,
                    idle_since: idle_since[h],
                    next_needed: next.map_or(i64::MAX, |b| b.1),
                    reported: boots_at[h].is_some_and(|t| t <= now),
                }
            })
            .collect();
        // Energy of this step.
        let mut step_wh = 0.0;
        for f in &facts {
            let wh = power::draw_watts(f.power.state, f.busy, &cfg) * step as f64 / 3600.0;
            step_wh += wh;
            match f.power.state {
                PowerState::On if f.busy => out.busy_wh += wh,
                PowerState::On => out.idle_wh += wh,
                _ => out.switching_wh += wh,
            }
            let on_draw = if f.busy { cfg.watts_busy } else { cfg.watts_idle };
            out.always_on_wh += on_draw * step as f64 / 3600.0;
        }
        out.energy_wh += step_wh;
        let day = ((now - T0) / DAY) as usize;
        if let Some(d) = out.daily.get_mut(day) {
            *d += step_wh;
        }
        if (SAMPLE_FROM..SAMPLE_FROM + 7 * DAY).contains(&now) {
            for (h, states) in out.sample.iter_mut().enumerate() {
                states.push(power[h * n / SAMPLE_HOSTS.min(n)].state);
            }
        }
        // The policy.
        let extra = match kind {
            Kind::Watcher => {
                let used = facts.iter().filter(|f| f.busy).count();
                (used / 10).max(1)
            }
            // Waiting boots (those that found no host) want one more
            // spare each: what the server does with NoValidHost.
            Kind::Reservations | Kind::Slurm => waiting.len(),
        };
        let decision = power::decide(&facts, now, &cfg, extra);
        for h in decision.came_on.iter().chain(&decision.recovered) {
            let h = *h as usize;
            power[h] = HostPower { state: PowerState::On, since: now, issued_at: power[h].issued_at, deadline: None };
            boots_at[h] = None;
        }
        for h in &decision.went_off {
            let h = *h as usize;
            power[h] = HostPower { state: PowerState::Off, since: now, issued_at: power[h].issued_at, deadline: None };
        }
        for h in &decision.failed {
            // Simulated hosts always come back; a timeout would be a bug.
            let h = *h as usize;
            power[h].state = PowerState::Failed;
        }
        for h in &decision.power_on {
            let h = *h as usize;
            out.ups += 1;
            power[h] = HostPower {
                state: PowerState::PoweringOn,
                since: now,
                issued_at: Some(now),
                deadline: Some(now + cfg.resume_timeout),
            };
            boots_at[h] = Some(now + opts.boot_secs);
        }
        for h in &decision.power_off {
            let h = *h as usize;
            out.downs += 1;
            power[h] = HostPower {
                state: PowerState::PoweringOff,
                since: now,
                issued_at: Some(now),
                deadline: Some(now + 60),
            };
        }
        now += step;
    }
    out
}

fn p99(values: &[i64]) -> i64 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Run the simulation for the three policies and report.
pub(crate) fn run(opts: EnergyOpts) -> anyhow::Result<()> {
    anyhow::ensure!(opts.hosts > 0 && opts.days > 0, "--hosts and --days must be positive");
    let t = std::time::Instant::now();
    let year = generate(&opts);
    let host_days = opts.hosts as f64 * opts.days as f64;
    println!(
        "energy: {} hosts, {} days, step {} s, seed {}: {} leases ({} refused), {} on-demand boots",
        opts.hosts,
        opts.days,
        opts.step_secs,
        opts.seed,
        year.leases.len(),
        year.refused,
        year.boots.len()
    );
    let outcomes: Vec<Outcome> =
        [Kind::Reservations, Kind::Slurm, Kind::Watcher].into_iter().map(|k| simulate(&opts, &year, k)).collect();
    let mut rows = Vec::new();
    for o in &outcomes {
        let saved = 100.0 * (1.0 - o.energy_wh / o.always_on_wh);
        println!(
            "  {:<12} {:>9.0} kWh vs always-on {:>9.0} kWh: {:>6.2} % saved; late lease starts {} of {}; \
             on-demand waits {} (p99 {} s); power-ups {:.3} / host / day, power-downs {:.3}; \
             kWh idle on {:.0}, switching {:.0}, busy {:.0}",
            o.kind.name(),
            o.energy_wh / 1000.0,
            o.always_on_wh / 1000.0,
            saved,
            o.late,
            o.lease_starts,
            o.waits.len(),
            p99(&o.waits),
            o.ups as f64 / host_days,
            o.downs as f64 / host_days,
            o.idle_wh / 1000.0,
            o.switching_wh / 1000.0,
            o.busy_wh / 1000.0,
        );
        rows.push(json!({
            "policy": o.kind.name(),
            "energy_kwh": o.energy_wh / 1000.0,
            "always_on_kwh": o.always_on_wh / 1000.0,
            "saved_pct": saved,
            "late_lease_starts": o.late,
            "lease_starts": o.lease_starts,
            "ondemand_boots": year.boots.len(),
            "ondemand_waits": o.waits.len(),
            "ondemand_wait_p99_s": p99(&o.waits),
            "idle_on_kwh": o.idle_wh / 1000.0,
            "switching_kwh": o.switching_wh / 1000.0,
            "busy_kwh": o.busy_wh / 1000.0,
            "overhead_kwh": (o.idle_wh + o.switching_wh) / 1000.0,
            "power_ups": o.ups,
            "power_downs": o.downs,
            "power_ups_per_host_day": o.ups as f64 / host_days,
            "power_downs_per_host_day": o.downs as f64 / host_days,
            "hosts": opts.hosts,
            "days": opts.days,
            "seed": opts.seed,
        }));
    }
    println!("  ({:.1} s)", t.elapsed().as_secs_f64());
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)? + "\n")?;
        println!("  wrote {}", path.display());
    }
    if let Some(path) = &opts.svg {
        std::fs::write(path, chart(&opts, &outcomes))?;
        println!("  wrote {}", path.display());
    }
    Ok(())
}

fn color(state: PowerState) -> &'static str {
    match state {
        PowerState::On => "#2e7d32",
        PowerState::PoweringOff => "#f9a825",
        PowerState::Off => "#e0e0e0",
        PowerState::PoweringOn => "#1565c0",
        PowerState::Failed => "#c62828",
    }
}

/// The SVG: per policy, the sample hosts' states over the sample week
/// (one row per host), then energy per day of every policy and of
/// always-on.
fn chart(opts: &EnergyOpts, outcomes: &[Outcome]) -> String {
    let (w, left) = (1000.0, 110.0);
    let row = 6.0;
    let band = SAMPLE_HOSTS as f64 * row + 30.0;
    let energy_h = 260.0;
    let height = 40.0 + band * outcomes.len() as f64 + energy_h + 60.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" font-family=\"sans-serif\" \
         font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" \
         font-size=\"15\">berth bench energy: {} hosts, {} days, seed {} — power state of {} sample hosts, week of \
         2040-01-09 (green on, grey off, blue powering on, amber powering off)</text>\n",
        opts.hosts, opts.days, opts.seed, SAMPLE_HOSTS
    );
    let plot_w = w - left - 20.0;
    for (i, o) in outcomes.iter().enumerate() {
        let top = 40.0 + band * i as f64;
        let _ = writeln!(s, "<text x=\"10\" y=\"{}\">{}</text>", top + 14.0, o.kind.name());
        for (h, states) in o.sample.iter().enumerate() {
            let y = top + 20.0 + h as f64 * row;
            let dx = plot_w / states.len().max(1) as f64;
            // Runs of one state as one rectangle.
            let mut start = 0;
            for k in 1..=states.len() {
                if k == states.len() || states[k] != states[start] {
                    let _ = writeln!(
                        s,
                        "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                        left + start as f64 * dx,
                        (k - start) as f64 * dx,
                        row - 1.0,
                        color(states[start])
                    );
                    start = k;
                }
            }
        }
    }
    // Energy per day.
    let top = 40.0 + band * outcomes.len() as f64 + 20.0;
    let days = outcomes.first().map_or(0, |o| o.daily.len());
    let always: Vec<f64> = {
        // Always-on per day: idle draw of every host plus the busy extra,
        // which every policy draws alike (busy hosts are on).
        let idle_day = opts.hosts as f64 * opts.host_watts_idle * 24.0;
        outcomes.first().map_or(Vec::new(), |o| o.daily.iter().map(|_| idle_day).collect())
    };
    let max =
        outcomes.iter().flat_map(|o| o.daily.iter().copied()).chain(always.iter().copied()).fold(1.0, f64::max) * 1.1;
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"{}\">energy per day (kWh; dashed: every host on and idle, {:.0} kWh)</text>",
        top,
        always.first().copied().unwrap_or(0.0) / 1000.0
    );
    let y_of = |v: f64| top + 10.0 + energy_h * (1.0 - v / max);
    let x_of = |d: usize| left + plot_w * d as f64 / days.max(1) as f64;
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-dasharray=\"6 4\"/>",
        y_of(always.first().copied().unwrap_or(0.0)),
        left + plot_w,
        y_of(always.first().copied().unwrap_or(0.0))
    );
    for (o, stroke) in outcomes.iter().zip(["#2e7d32", "#6a1b9a", "#ef6c00"]) {
        let points: Vec<String> =
            o.daily.iter().enumerate().map(|(d, v)| format!("{:.1},{:.1}", x_of(d), y_of(*v))).collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{stroke}\" stroke-width=\"1\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    for (i, (o, stroke)) in outcomes.iter().zip(["#2e7d32", "#6a1b9a", "#ef6c00"]).enumerate() {
        let y = top + energy_h + 35.0;
        let x = left + i as f64 * 220.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{stroke}\"/><text x=\"{}\" y=\"{}\">{} \
             ({:.2} % saved)</text>",
            y - 10.0,
            x + 16.0,
            y,
            o.kind.name(),
            100.0 * (1.0 - o.energy_wh / o.always_on_wh)
        );
    }
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        y_of(0.0),
        left + plot_w,
        y_of(0.0)
    );
    s.push_str("</svg>\n");
    s
}
