//! Free capacity over time (berth's extension): for a set of enrolled
//! hosts and a window, the steps of their booked and free vCPUs, RAM and
//! disk, as admission sees them.

use crate::lease::{Demand, ReservableHost};
use crate::{Timestamp, World};

/// What is booked on a host in one step of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// A whole-host reservation holds it.
    pub whole_host: bool,
    /// vCPUs booked by instance slots.
    pub vcpus: i64,
    /// RAM booked by instance slots.
    pub memory_mb: i64,
    /// Disk booked by instance slots.
    pub disk_gb: i64,
}

impl Usage {
    /// What is left of `host` (nothing while a whole-host booking holds it).
    pub fn free(&self, host: &ReservableHost) -> (i64, i64, i64) {
        if self.whole_host {
            return (0, 0, 0);
        }
        (host.vcpus - self.vcpus, host.memory_mb - self.memory_mb, host.local_gb - self.disk_gb)
    }
}

/// One step: `[start, end)` with constant usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// From (inclusive).
    pub start: Timestamp,
    /// To (exclusive).
    pub end: Timestamp,
    /// Booked during the step.
    pub usage: Usage,
}

/// The usage steps of one enrolled host over `[start, end)`: adjacent steps
/// with equal usage are merged, so an unbooked host has one step.
pub fn host_timeline(world: &World, host_id: i64, start: Timestamp, end: Timestamp) -> Vec<Step> {
    let bookings: Vec<_> = world.compute.leases.overlapping(host_id, start, end, None).copied().collect();
    let mut cuts: Vec<Timestamp> = vec![start, end];
    for b in &bookings {
        cuts.extend([b.start, b.end].into_iter().filter(|t| *t > start && *t < end));
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut steps: Vec<Step> = Vec::new();
    for pair in cuts.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let mut usage = Usage::default();
        for b in bookings.iter().filter(|b| b.overlaps(from, to)) {
            match b.demand {
                Demand::WholeHost => usage.whole_host = true,
                Demand::Slot { vcpus, memory_mb, disk_gb } => {
                    usage.vcpus += vcpus * b.slots;
                    usage.memory_mb += memory_mb * b.slots;
                    usage.disk_gb += disk_gb * b.slots;
                }
            }
        }
        match steps.last_mut() {
            Some(last) if last.usage == usage => last.end = to,
            _ => steps.push(Step { start: from, end: to, usage }),
        }
    }
    steps
}
