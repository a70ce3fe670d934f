//! What an enrolled host offers to reservations ([`host_capacity`], read
//! by admission), and free capacity over time (berth's extension): for a
//! set of enrolled hosts and a window, the steps of their booked and free
//! vCPUs, RAM and disk, as admission sees them.

use berth_compute_model::lease::{Demand, ReservableHost};
use berth_compute_model::{Timestamp, World};

/// What a host offers to instance reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capacity {
    /// vCPUs.
    pub vcpus: i64,
    /// RAM in MiB.
    pub memory_mb: i64,
    /// Disk in GiB.
    pub local_gb: i64,
}

/// A host's capacity now: its compute node's placement inventory, as
/// enrolment reads it (`total − reserved` of VCPU plus PCPU, MEMORY_MB and
/// DISK_GB; 0 for a class not reported yet). Admission reads this, not a
/// copy, so a host enrolled before its first inventory report gets its
/// capacity when the report comes, in the same planned write that admits
/// a lease. Only a host whose node has no provider keeps the figures
/// copied at enrolment.
pub fn host_capacity(world: &World, host: &ReservableHost) -> Capacity {
    let node = crate::resources::node_of(world, &host.service_name, &host.hypervisor_hostname);
    let Some(provider) = node.and_then(|n| world.placement.provider(&n)) else {
        return Capacity { vcpus: host.vcpus, memory_mb: host.memory_mb, local_gb: host.local_gb };
    };
    let total = |class: &str| provider.inventories.get(class).map_or(0, |i| (i.total - i.reserved).max(0));
    Capacity { vcpus: total("VCPU") + total("PCPU"), memory_mb: total("MEMORY_MB"), local_gb: total("DISK_GB") }
}

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
    /// What is left of a host's `capacity` (nothing while a whole-host
    /// booking holds it).
    pub fn free(&self, capacity: Capacity) -> (i64, i64, i64) {
        if self.whole_host {
            return (0, 0, 0);
        }
        (capacity.vcpus - self.vcpus, capacity.memory_mb - self.memory_mb, capacity.local_gb - self.disk_gb)
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
