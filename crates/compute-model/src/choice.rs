//! Where an instance can go: a [`HostChoice`] (a root provider and the
//! allocations offered on it), whether it still [`fits`] the current
//! usage, the hosts a placed instance or a server group occupies, and
//! whether a group's hard policy allows one more member on a host.
//!
//! The claims ([`crate::plan`]), the moves ([`crate::moves`]) and the
//! re-homings ([`crate::rehome`]) all check their choices with these; this
//! module uses none of them.

use std::collections::{BTreeSet, HashMap};

use berth_model::allocations::check_allocation;
use berth_model::AllocationMap;
use uuid::Uuid;

use crate::{ComputeNodeRef, GroupPolicy, ServerGroup, World};

/// One place an instance could go: a compute node's root provider and the
/// allocation request placement offered for it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostChoice {
    /// Root provider (= compute node uuid).
    pub root: Uuid,
    /// What to allocate where (providers of the root's tree, or sharing).
    pub allocations: AllocationMap,
}

/// The host of a placed instance: the compute node of the root of any
/// provider it has allocations on.
pub fn host_of_instance<'a>(world: &'a World, instance: &Uuid) -> Option<&'a ComputeNodeRef> {
    let consumer = world.placement.consumers.get(instance)?;
    consumer.allocations.keys().find_map(|provider| {
        let root = world.placement.provider(provider)?.row.root;
        world.compute.compute_nodes.get(&root)
    })
}

/// Every host a placed instance holds allocations on (one, except while
/// an evacuation holds both source and destination), sorted.
pub fn hosts_of_instance(world: &World, instance: &Uuid) -> BTreeSet<String> {
    let Some(consumer) = world.placement.consumers.get(instance) else { return BTreeSet::new() };
    consumer
        .allocations
        .keys()
        .filter_map(|provider| {
            let root = world.placement.provider(provider)?.row.root;
            world.compute.compute_nodes.get(&root).map(|n| n.host.clone())
        })
        .collect()
}

/// Members of `group` (other than `except`) per host name.
pub fn group_hosts(world: &World, group: &ServerGroup, except: &BTreeSet<Uuid>) -> HashMap<String, i64> {
    let mut out: HashMap<String, i64> = HashMap::new();
    for member in &group.members {
        if except.contains(member) {
            continue;
        }
        // Every host the member holds allocations on: an evacuation holds
        // source and destination until the source is cleaned up.
        for host in hosts_of_instance(world, member) {
            *out.entry(host).or_insert(0) += 1;
        }
    }
    out
}

/// Does placing one more member on `host` keep the group's hard policy?
/// `on_host` counts members already there, `hosts` the hosts used.
pub fn group_allows(group: &ServerGroup, host: &str, hosts: &HashMap<String, i64>) -> bool {
    match group.policy {
        GroupPolicy::Affinity => hosts.keys().all(|h| h == host),
        GroupPolicy::AntiAffinity => {
            let max = group.max_server_per_host.unwrap_or(1);
            hosts.get(host).copied().unwrap_or(0) < max
        }
        GroupPolicy::SoftAffinity | GroupPolicy::SoftAntiAffinity => true,
    }
}

/// Would `amount` of `class` fit on `provider` on top of its current usage
/// plus `extra` (already promised in the same write or request)?
pub fn amount_fits(world: &World, provider: &Uuid, class: &str, amount: i64, extra: i64) -> bool {
    let Some(p) = world.placement.provider(provider) else { return false };
    let Some(inventory) = p.inventories.get(class) else { return false };
    check_allocation(inventory, amount, amount, p.used(class) + extra, None).is_ok()
}

/// Would `allocations` fit on top of current usage plus `extra` (amounts
/// already promised in the same write or request, by provider and class)?
pub fn fits(world: &World, allocations: &AllocationMap, extra: &HashMap<(Uuid, &str), i64>) -> bool {
    allocations.iter().all(|(provider, amounts)| {
        amounts.iter().all(|(class, amount)| {
            let promised = extra.get(&(*provider, class.as_str())).copied().unwrap_or(0);
            amount_fits(world, provider, class, *amount, promised)
        })
    })
}
