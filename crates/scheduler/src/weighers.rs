//! Weighers (Nova's `scheduler/weights`): free RAM, free vCPUs and free
//! disk (more is better), soft-affinity (more group members on the host
//! is better), soft-anti-affinity (fewer is better) and build failures
//! (fewer is better). Each weigher's raw values are min–max normalised over
//! the hosts being weighed (all equal → 0), multiplied by its multiplier,
//! and summed, as `nova.weights.BaseWeightHandler` does.

use std::collections::HashMap;

use berth_compute_model::{GroupPolicy, RequestSpec, ServerGroup, World};
use uuid::Uuid;

use crate::{Config, HostHealth, HostState};

/// Nova's `normalize`: scale to 0..1 by min and max; all equal → 0.
pub(crate) fn normalize(values: &[f64]) -> Vec<f64> {
    let (min, max) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if values.is_empty() || min == max {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| (v - min) / (max - min)).collect()
}

/// Free amount of `classes` in the host's tree, after `extra`.
fn free(world: &World, root: Uuid, classes: &[&str], extra: &HashMap<(Uuid, &str), i64>) -> f64 {
    let mut providers = vec![root];
    providers.extend(world.placement.descendants(&root));
    let mut total = 0i64;
    for uuid in providers {
        let Some(provider) = world.placement.provider(&uuid) else { continue };
        for class in classes {
            if let Some(inventory) = provider.inventories.get(*class) {
                let used = provider.used(class) + extra.get(&(uuid, *class)).copied().unwrap_or(0);
                total += inventory.capacity() - used;
            }
        }
    }
    total as f64
}

/// Weights of the `viable` `(host index, candidate index)` pairs.
#[expect(clippy::too_many_arguments, reason = "the weighers' whole input, passed explicitly")]
pub(crate) fn weigh(
    world: &World,
    hosts: &[HostState<'_>],
    viable: &[(usize, usize)],
    spec: &RequestSpec,
    group: Option<&ServerGroup>,
    members_on: &HashMap<String, i64>,
    extra: &HashMap<(Uuid, &str), i64>,
    health: &dyn HostHealth,
    config: &Config,
) -> Vec<f64> {
    let _ = spec;
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
    add(config.ram_weight_multiplier, nodes.iter().map(|n| free(world, n.uuid, &["MEMORY_MB"], extra)).collect());
    add(config.cpu_weight_multiplier, nodes.iter().map(|n| free(world, n.uuid, &["VCPU", "PCPU"], extra)).collect());
    add(config.disk_weight_multiplier, nodes.iter().map(|n| free(world, n.uuid, &["DISK_GB"], extra)).collect());
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
