//! Weighers (Nova's `scheduler/weights`): free RAM, free vCPUs and free
//! disk (more is better), soft-affinity (more group members on the host
//! is better), soft-anti-affinity (fewer is better) and build failures
//! (fewer is better). Each weigher's raw values are min–max normalised over
//! the hosts being weighed (all equal → 0), multiplied by its multiplier,
//! and summed, as `nova.weights.BaseWeightHandler` does.

use std::collections::HashMap;

use berth_compute_model::{GroupPolicy, ServerGroup, World};
use uuid::Uuid;

use crate::{Candidate, Config, HostState};

/// Free RAM, vCPUs (VCPU + PCPU) and disk in a host's tree: capacity
/// minus usage, summed over the providers with that inventory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Free {
    ram: i64,
    cpu: i64,
    disk: i64,
}

impl Free {
    /// The host's free amounts in the current state (one tree walk; a
    /// provider's inventories and usages are both sorted by class, so
    /// one merge walk pairs them).
    pub(crate) fn of(world: &World, root: Uuid) -> Self {
        let mut free = Free::default();
        let mut add = |provider: &berth_model::Provider| {
            let mut usages = provider.usages.iter().peekable();
            for (class, inventory) in &provider.inventories {
                while usages.next_if(|(used_class, _)| used_class.as_str() < class.as_str()).is_some() {}
                let used = usages.next_if(|(used_class, _)| *used_class == class).map_or(0, |(_, used)| *used);
                let left = inventory.capacity() - used;
                match class.as_str() {
                    "MEMORY_MB" => free.ram += left,
                    "VCPU" | "PCPU" => free.cpu += left,
                    "DISK_GB" => free.disk += left,
                    _ => {}
                }
            }
        };
        let Some(provider) = world.placement.provider(&root) else { return free };
        add(provider);
        if !provider.children.is_empty() {
            for child in world.placement.descendants(&root) {
                if let Some(provider) = world.placement.provider(&child) {
                    add(provider);
                }
            }
        }
        free
    }

    /// Take a candidate placed by this request's earlier instance.
    pub(crate) fn take(&mut self, candidate: &Candidate<'_>) {
        for (_, class, amount) in candidate {
            match *class {
                "MEMORY_MB" => self.ram -= amount,
                "VCPU" | "PCPU" => self.cpu -= amount,
                "DISK_GB" => self.disk -= amount,
                _ => {}
            }
        }
    }
}

/// Weights of the `viable` `(host index, candidate index)` pairs. Each
/// weigher reads its raw value per host straight from the host states
/// (free amounts and failed builds were read once per run), normalises
/// and adds in place: this runs once per instance over every viable host.
pub(crate) fn weigh(
    hosts: &[HostState<'_>],
    viable: &[(usize, usize)],
    group: Option<&ServerGroup>,
    members_on: &HashMap<String, i64>,
    config: &Config,
) -> Vec<f64> {
    let mut total = vec![0.0; viable.len()];
    let host = |i: usize| &hosts[viable[i].0];
    add_normalized(&mut total, config.ram_weight_multiplier, |i| host(i).free.ram as f64);
    add_normalized(&mut total, config.cpu_weight_multiplier, |i| host(i).free.cpu as f64);
    add_normalized(&mut total, config.disk_weight_multiplier, |i| host(i).free.disk as f64);
    if let Some(group) = group {
        let on = |i: usize| members_on.get(&host(i).node.host).copied().unwrap_or(0) as f64;
        match group.policy {
            GroupPolicy::SoftAffinity => add_normalized(&mut total, config.soft_affinity_weight_multiplier, on),
            GroupPolicy::SoftAntiAffinity => {
                add_normalized(&mut total, config.soft_anti_affinity_weight_multiplier, |i| -on(i))
            }
            _ => {}
        }
    }
    add_normalized(&mut total, config.build_failure_weight_multiplier, |i| -(host(i).failed_builds as f64));
    total
}

/// `total[i] += multiplier × normalize(raw)[i]`, without collecting `raw`.
fn add_normalized(total: &mut [f64], multiplier: f64, raw: impl Fn(usize) -> f64) {
    if multiplier == 0.0 || total.is_empty() {
        return;
    }
    let (min, max) = (0..total.len()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), i| {
        let v = raw(i);
        (lo.min(v), hi.max(v))
    });
    if min == max {
        // All equal: every normalised weight is 0, and `t + m × 0.0` is `t`.
        return;
    }
    for (i, t) in total.iter_mut().enumerate() {
        *t += multiplier * ((raw(i) - min) / (max - min));
    }
}

#[cfg(test)]
mod tests {
    use super::add_normalized;

    /// Nova's `normalize` (min–max to 0..1; all equal → 0), times the
    /// multiplier, added to what is there.
    fn normalized(raw: &[f64], multiplier: f64, start: f64) -> Vec<f64> {
        let mut total = vec![start; raw.len()];
        add_normalized(&mut total, multiplier, |i| raw[i]);
        total
    }

    #[test]
    fn normalises_like_nova() {
        assert_eq!(normalized(&[1.0, 3.0, 2.0], 1.0, 0.0), vec![0.0, 1.0, 0.5]);
        assert_eq!(normalized(&[1.0, 3.0, 2.0], 2.0, 1.0), vec![1.0, 3.0, 2.0]);
        assert_eq!(normalized(&[5.0, 5.0], 1.0, 0.25), vec![0.25, 0.25]);
        assert_eq!(normalized(&[1.0, 3.0], 0.0, 0.5), vec![0.5, 0.5]);
        assert!(normalized(&[], 1.0, 0.0).is_empty());
    }
}
