//! Weighers (Nova's `scheduler/weights`): free RAM, free vCPUs and free
//! disk (more is better), soft-affinity (more group members on the host
//! is better), soft-anti-affinity (fewer is better) and build failures
//! (fewer is better). Each weigher's raw values are min–max normalised over
//! the hosts being weighed (all equal → 0), multiplied by its multiplier,
//! and summed, as `nova.weights.BaseWeightHandler` does.

use std::collections::HashMap;

use berth_compute_model::{GroupPolicy, ServerGroup, World};
use uuid::Uuid;

use crate::{Candidate, Config, HostHealth, HostState};

/// Nova's `normalize`: scale to 0..1 by min and max; all equal → 0.
pub(crate) fn normalize(values: &[f64]) -> Vec<f64> {
    let (min, max) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if values.is_empty() || min == max {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| (v - min) / (max - min)).collect()
}

/// Free RAM, vCPUs (VCPU + PCPU) and disk in a host's tree: capacity
/// minus usage, summed over the providers with that inventory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Free {
    ram: i64,
    cpu: i64,
    disk: i64,
}

impl Free {
    /// The host's free amounts in the current state (one tree walk).
    pub(crate) fn of(world: &World, root: Uuid) -> Self {
        let mut free = Free::default();
        let mut add = |uuid: &Uuid| {
            let Some(provider) = world.placement.provider(uuid) else { return };
            for (class, inventory) in &provider.inventories {
                let left = inventory.capacity() - provider.used(class);
                match class.as_str() {
                    "MEMORY_MB" => free.ram += left,
                    "VCPU" | "PCPU" => free.cpu += left,
                    "DISK_GB" => free.disk += left,
                    _ => {}
                }
            }
        };
        add(&root);
        for child in world.placement.descendants(&root) {
            add(&child);
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

/// Weights of the `viable` `(host index, candidate index)` pairs.
pub(crate) fn weigh(
    hosts: &[HostState<'_>],
    viable: &[(usize, usize)],
    group: Option<&ServerGroup>,
    members_on: &HashMap<String, i64>,
    health: &dyn HostHealth,
    config: &Config,
) -> Vec<f64> {
    let free: Vec<Free> = viable.iter().map(|(h, _)| hosts[*h].free).collect();
    let nodes: Vec<_> = viable.iter().map(|(h, _)| hosts[*h].node).collect();
    let mut total = vec![0.0; nodes.len()];
    let mut add = |multiplier: f64, raw: Vec<f64>| {
        if multiplier == 0.0 {
            return;
        }
        for (t, w) in total.iter_mut().zip(normalize(&raw)) {
            *t += multiplier * w;
        }
    };
    add(config.ram_weight_multiplier, free.iter().map(|f| f.ram as f64).collect());
    add(config.cpu_weight_multiplier, free.iter().map(|f| f.cpu as f64).collect());
    add(config.disk_weight_multiplier, free.iter().map(|f| f.disk as f64).collect());
    if let Some(group) = group {
        let on = |host: &str| members_on.get(host).copied().unwrap_or(0) as f64;
        match group.policy {
            GroupPolicy::SoftAffinity => {
                add(config.soft_affinity_weight_multiplier, nodes.iter().map(|n| on(&n.host)).collect())
            }
            GroupPolicy::SoftAntiAffinity => {
                add(config.soft_anti_affinity_weight_multiplier, nodes.iter().map(|n| -on(&n.host)).collect())
            }
            _ => {}
        }
    }
    add(
        config.build_failure_weight_multiplier,
        nodes.iter().map(|n| -(health.failed_builds(&n.host) as f64)).collect(),
    );
    total
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normalises_like_nova() {
        assert_eq!(normalize(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
        assert_eq!(normalize(&[5.0, 5.0]), vec![0.0, 0.0]);
        assert!(normalize(&[]).is_empty());
    }
}
