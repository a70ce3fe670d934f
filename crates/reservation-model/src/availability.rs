//! Availability queries: [`earliest_window`] (the first start at which a
//! reservation would be admitted: one sweep over booking ends, checked by
//! admission) and [`blocking_leases`] (what blocks an admission, as a dry
//! run).

use berth_compute_model::lease::{HostAllocation, ReservableHost, ReservationKind};
use berth_compute_model::{Timestamp, World};
use berth_model::Uuid;

use crate::admission::{Admission, Overlay, ReservationRequest};

/// Earliest start `>= from` at which `request` (one reservation, for
/// `duration` seconds) would be admitted, looking no further than
/// `horizon`, and the hosts it would get there.
///
/// A request can only become admissible when a booking on a matching host
/// ends (a window that starts later only loses bookings at their ends), so
/// the candidate starts are `from` and those ends. Whole hosts: a host is
/// busy for the starts in `(booking.start - duration, booking.end)`; one
/// sweep over these intervals, merged per host, counts the free hosts at
/// every candidate and goes straight to the first one with `min` free
/// (O(B log B) for B bookings on matching hosts). Slots: a host's free
/// slots are computed again only at the ends of its own bookings (they
/// cannot grow elsewhere); their running tally skips the candidates that
/// cannot hold the amount (O(B log B + H) plus O(H) per candidate that
/// passes the tally but not the exact check). Either way the answer is
/// checked by the admission itself.
pub fn earliest_window(
    world: &World,
    request: &ReservationRequest,
    duration: Timestamp,
    from: Timestamp,
    horizon: Timestamp,
) -> Option<(Timestamp, Vec<HostAllocation>)> {
    let tables = &world.compute.leases;
    let probe = |start: Timestamp| Admission {
        world,
        lease: Uuid::nil(),
        start,
        end: start + duration,
        overlay: Overlay::default(),
        exclude: &[],
        added: &[],
    };
    let hosts = probe(from).matching_hosts(request);
    let try_at = |start: Timestamp| {
        probe(start).allocate_among(Uuid::nil(), request, &hosts, &[], false).ok().map(|a| (start, a))
    };
    if let Some(found) = try_at(from) {
        return Some(found);
    }
    let lists = || hosts.iter().filter_map(|h| tables.bookings.get(&h.id));
    match &request.kind {
        ReservationKind::Host { min, .. } => {
            // Per host, the merged open intervals of busy starts.
            let (mut opens, mut closes): (Vec<Timestamp>, Vec<Timestamp>) = (Vec::new(), Vec::new());
            for list in lists() {
                let mut current: Option<(Timestamp, Timestamp)> = None;
                for b in list.iter() {
                    let (open, close) = (b.start - duration, b.end);
                    match &mut current {
                        Some((_, c)) if open < *c => *c = (*c).max(close),
                        _ => {
                            if let Some((o, c)) = current.replace((open, close)) {
                                opens.push(o);
                                closes.push(c);
                            }
                        }
                    }
                }
                if let Some((o, c)) = current {
                    opens.push(o);
                    closes.push(c);
                }
            }
            opens.sort_unstable();
            closes.sort_unstable();
            let mut starts: Vec<Timestamp> = closes.iter().copied().filter(|t| *t > from && *t <= horizon).collect();
            starts.dedup();
            let (mut n_opened, mut n_closed) = (0usize, 0usize);
            for start in starts {
                // Busy at `start`: opened before it and not closed by it.
                while n_opened < opens.len() && opens[n_opened] < start {
                    n_opened += 1;
                }
                while n_closed < closes.len() && closes[n_closed] <= start {
                    n_closed += 1;
                }
                let n_free = hosts.len() - (n_opened - n_closed);
                if n_free as i64 >= *min {
                    if let Some(found) = try_at(start) {
                        return Some(found);
                    }
                }
            }
            None
        }
        ReservationKind::Instance { vcpus, memory_mb, disk_gb, amount, affinity, .. } => {
            let need = (*vcpus, *memory_mb, *disk_gb);
            let free_at = |host: &ReservableHost, start: Timestamp| probe(start).free_slots(host, need).min(*amount);
            // Every booking end on a matching host, by time, with its host.
            let mut ends: Vec<(Timestamp, usize)> = hosts
                .iter()
                .enumerate()
                .filter_map(|(idx, h)| tables.bookings.get(&h.id).map(|list| (idx, list)))
                .flat_map(|(idx, list)| list.iter().map(move |b| (b.end, idx)))
                .filter(|(t, _)| *t > from && *t <= horizon)
                .collect();
            ends.sort_unstable();
            // A bound on each host's free slots (capped at `amount`): exact
            // where last computed, and a host's free slots only grow at the
            // end of one of its own bookings, where it is computed again.
            // While the bounds cannot hold the request, no host is looked
            // at twice; when they can, all are made exact and the
            // admission decides.
            let mut tally = SlotTally::default();
            let mut bound: Vec<i64> = hosts.iter().map(|h| free_at(h, from)).collect();
            bound.iter().for_each(|n| tally.add(*n, *amount, 1));
            for group in ends.chunk_by(|a, b| a.0 == b.0) {
                let start = group[0].0;
                for &(_, idx) in group {
                    let n = free_at(hosts[idx], start);
                    tally.add(bound[idx], *amount, -1);
                    tally.add(n, *amount, 1);
                    bound[idx] = n;
                }
                if !tally.holds(*amount, *affinity) {
                    continue;
                }
                tally = SlotTally::default();
                for (idx, h) in hosts.iter().enumerate() {
                    bound[idx] = free_at(h, start);
                    tally.add(bound[idx], *amount, 1);
                }
                if tally.holds(*amount, *affinity) {
                    if let Some(found) = try_at(start) {
                        return Some(found);
                    }
                }
            }
            None
        }
    }
}

/// Free slots over a set of hosts (each capped at the amount asked): what
/// decides whether a slot reservation fits.
#[derive(Default)]
struct SlotTally {
    /// Sum of the free slots.
    sum: i64,
    /// Hosts with a free slot.
    n_some: i64,
    /// Hosts with the whole amount free.
    n_all: i64,
}

impl SlotTally {
    fn add(&mut self, free: i64, amount: i64, sign: i64) {
        self.sum += sign * free;
        self.n_some += sign * i64::from(free > 0);
        self.n_all += sign * i64::from(free >= amount && free > 0);
    }

    /// Admission's rule: all on one host, one per host, or anywhere.
    fn holds(&self, amount: i64, affinity: Option<bool>) -> bool {
        match affinity {
            Some(true) => self.n_all > 0,
            Some(false) => self.n_some >= amount,
            None => self.sum >= amount,
        }
    }
}

/// Leases whose bookings overlap `[start, end)` on hosts `request` could
/// use: what blocks an admission (dry run).
pub fn blocking_leases(world: &World, request: &ReservationRequest, start: Timestamp, end: Timestamp) -> Vec<Uuid> {
    let admission =
        Admission { world, lease: Uuid::nil(), start, end, overlay: Overlay::default(), exclude: &[], added: &[] };
    let mut out: Vec<Uuid> = Vec::new();
    for h in admission.matching_hosts(request) {
        for b in admission.bookings(h.id) {
            if !out.contains(&b.lease) {
                out.push(b.lease);
            }
        }
    }
    out
}
