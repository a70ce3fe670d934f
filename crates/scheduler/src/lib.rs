//! The scheduler: a pure pipeline from a request spec to a host per
//! instance, with alternates.
//!
//! ```text
//! RequestSpec ─▶ placement query ─▶ allocation candidates ─▶ hosts
//!   (request.rs: Nova's ResourceRequest     (berth-candidates, on the
//!    and request filters)                    in-memory placement state)
//!   ─▶ filters ─▶ weighers ─▶ selection + alternates per instance
//!      (filters.rs)  (weighers.rs, min–max normalised, Nova's multipliers)
//! ```
//!
//! Selection is a sampled ranking: each instance goes to a host drawn at
//! random among the `host_subset_size` best, so that concurrent boots of
//! the same flavor do not all pick one host (Nova's `host_subset_size`).
//! Instances of one request consume capacity as they are placed, so a
//! multi-create never plans two instances into the same last slot.
//!
//! The result is a *proposal*: the conductor claims it through the write
//! path (`berth_compute_model::plan::plan_claim`), which re-checks
//! capacity and the server group's hard policy against current state and
//! falls back to the alternates. Nothing here does I/O or reads the clock;
//! randomness comes from the seed the caller passes.
#![deny(missing_docs)]

mod filters;
pub mod heal;
mod request;
mod rng;
mod weighers;

use std::collections::HashMap;

use berth_compute_model::choice::{group_hosts, HostChoice};
use berth_compute_model::plan::InstanceChoices;
use berth_compute_model::{ComputeNodeRef, RequestSpec, ServerGroup, Timestamp, World};
use berth_model::AllocationMap;
use uuid::Uuid;

pub use request::{placement_query, PlacementQuery};
pub use rng::Rng;

/// Scheduler settings (Nova's `[scheduler]` and `[filter_scheduler]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Placement results asked for (`max_placement_results`, 1000).
    pub max_placement_results: usize,
    /// Pick among this many best hosts at random (`host_subset_size`).
    pub host_subset_size: usize,
    /// Attempts per instance; alternates = this − 1 (`max_attempts`, 3).
    pub max_attempts: usize,
    /// `ram_weight_multiplier`.
    pub ram_weight_multiplier: f64,
    /// `cpu_weight_multiplier`.
    pub cpu_weight_multiplier: f64,
    /// `disk_weight_multiplier`.
    pub disk_weight_multiplier: f64,
    /// `soft_affinity_weight_multiplier`.
    pub soft_affinity_weight_multiplier: f64,
    /// `soft_anti_affinity_weight_multiplier`.
    pub soft_anti_affinity_weight_multiplier: f64,
    /// `build_failure_weight_multiplier`.
    pub build_failure_weight_multiplier: f64,
    /// `limit_tenants_to_placement_aggregate`.
    pub limit_tenants_to_placement_aggregate: bool,
    /// `placement_aggregate_required_for_tenants`.
    pub placement_aggregate_required_for_tenants: bool,
    /// `enable_isolated_aggregate_filtering`.
    pub enable_isolated_aggregate_filtering: bool,
    /// `query_placement_for_image_type_support`.
    pub query_placement_for_image_type_support: bool,
    /// `image_metadata_prefilter`.
    pub image_metadata_prefilter: bool,
    /// `default_availability_zone` (`nova`).
    pub default_availability_zone: String,
    /// Pool lending (berth's): pool hosts no lease needs within this many
    /// seconds take ordinary boots; `None`: the pool takes only boots for
    /// its reservations (Blazar's).
    pub pool_lend_lead: Option<i64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_placement_results: 1000,
            host_subset_size: 1,
            max_attempts: 3,
            ram_weight_multiplier: 1.0,
            cpu_weight_multiplier: 1.0,
            disk_weight_multiplier: 1.0,
            soft_affinity_weight_multiplier: 1.0,
            soft_anti_affinity_weight_multiplier: 1.0,
            build_failure_weight_multiplier: 1_000_000.0,
            limit_tenants_to_placement_aggregate: false,
            placement_aggregate_required_for_tenants: false,
            enable_isolated_aggregate_filtering: false,
            query_placement_for_image_type_support: false,
            image_metadata_prefilter: false,
            default_availability_zone: "nova".to_owned(),
            pool_lend_lead: None,
        }
    }
}

/// What the scheduler needs to know about hosts beyond the control state:
/// liveness and build history, which the control plane tracks in memory.
pub trait HostHealth {
    /// Is the host's compute service up (heartbeat recent, not forced
    /// down)?
    fn is_up(&self, host: &str) -> bool;
    /// Is the host's compute service disabled by an operator?
    fn is_disabled(&self, host: &str) -> bool;
    /// Recent failed builds on the host (reset by a success).
    fn failed_builds(&self, host: &str) -> i64;
    /// All three at once (a scheduler run asks for every host it weighs,
    /// so an implementation that looks a host up once should say so here).
    fn status(&self, host: &str) -> HostStatus {
        HostStatus { up: self.is_up(host), disabled: self.is_disabled(host), failed_builds: self.failed_builds(host) }
    }
}

/// A host's health as one scheduler run sees it ([`HostHealth::status`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStatus {
    /// [`HostHealth::is_up`].
    pub up: bool,
    /// [`HostHealth::is_disabled`].
    pub disabled: bool,
    /// [`HostHealth::failed_builds`].
    pub failed_builds: i64,
}

/// No host can take the request (Nova's `NoValidHost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoValidHost(pub String);

impl std::fmt::Display for NoValidHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "No valid host was found. {}", self.0)
    }
}

/// One request to schedule: a spec and the instances that share it.
#[derive(Debug, Clone)]
pub struct ScheduleRequest<'a> {
    /// The request spec.
    pub spec: &'a RequestSpec,
    /// Instances to place (a multi-create has several).
    pub instances: &'a [Uuid],
    /// Hosts not to use (retries).
    pub ignore_hosts: &'a [String],
    /// Only hosts of this cell (Nova's `RequestSpec.requested_destination.cell`:
    /// a move stays in the instance's cell). `None`: any enabled cell.
    pub cell: Option<Uuid>,
    /// Allocations other scheduling decisions chose whose claims have not
    /// committed (or failed) yet: counted as taken, as Nova's
    /// `HostState.consume_from_request` counts the selections of earlier
    /// requests, so concurrent decisions do not all pick the same best
    /// host. Only a view: the claim alone checks capacity.
    pub in_flight: &'a [AllocationMap],
    /// Randomness.
    pub seed: u64,
    /// The time of the decision (pool lending: a pool host is lent or
    /// reclaimed depending on the leases ahead of it).
    pub now: Timestamp,
}

impl<'a> ScheduleRequest<'a> {
    /// A request for `instances` of `spec` in any cell, nothing ignored,
    /// nothing in flight.
    pub fn new(spec: &'a RequestSpec, instances: &'a [Uuid], seed: u64) -> Self {
        ScheduleRequest { spec, instances, ignore_hosts: &[], cell: None, in_flight: &[], seed, now: 0 }
    }
}

/// The compute node an allocation belongs to: the root of its first
/// provider that is not a sharing provider (`MISC_SHARES_VIA_AGGREGATE`)
/// and whose root is a compute node. A sharing provider (a Ceph pool's
/// `DISK_GB`, say) is never anyone's host, whatever order the candidate
/// lists its providers in.
pub fn host_root<'p>(world: &World, providers: impl IntoIterator<Item = &'p Uuid>) -> Option<Uuid> {
    providers.into_iter().find_map(|uuid| {
        if world.placement.sharing_providers.contains(uuid) {
            return None;
        }
        let root = world.placement.provider(uuid)?.row.root;
        world.compute.compute_nodes.contains_key(&root).then_some(root)
    })
}

/// [`host_root`]'s compute node.
fn host_node<'w, 'p>(world: &'w World, providers: impl IntoIterator<Item = &'p Uuid>) -> Option<&'w ComputeNodeRef> {
    providers.into_iter().find_map(|uuid| {
        if world.placement.sharing_providers.contains(uuid) {
            return None;
        }
        let root = world.placement.provider(uuid)?.row.root;
        world.compute.compute_nodes.get(&root)
    })
}

/// One allocation candidate, flat: `(provider, resource class, amount)`,
/// each provider and class once.
pub(crate) type Candidate<'a> = Vec<(Uuid, &'a str, i64)>;

/// A host that passed the placement query: its node, its candidates, and
/// its free RAM, vCPUs and disk before this request (the weighers' input,
/// computed once per run).
#[derive(Debug, Clone)]
pub(crate) struct HostState<'w> {
    pub(crate) node: &'w ComputeNodeRef,
    pub(crate) candidates: Vec<Candidate<'w>>,
    pub(crate) free: weighers::Free,
    /// A pool host lent to this ordinary boot: when the next lease needs
    /// it (`None`: not a lent host).
    pub(crate) lent_until: Option<Timestamp>,
    /// Its recent failed builds (the build failure weigher's input, read
    /// once per run).
    pub(crate) failed_builds: i64,
}

/// What claims in flight and this request's earlier instances take, per
/// provider and class.
type Extra<'a> = HashMap<Uuid, HashMap<&'a str, i64>>;

/// Does `candidate` still fit, with `extra` already taken by claims in
/// flight and this request's earlier instances? The candidate engine
/// checked it against this same snapshot, so only a candidate that shares
/// a provider with `extra` needs checking again: most hosts are untouched,
/// and the check (a provider lookup, an inventory lookup by class name and
/// a usage sum per amount) was half of a scheduler run at 1,000 hosts.
/// [`schedule`] asks only for hosts it knows are touched (a map lookup
/// per host and instance was a tenth of a run at 5,000 hosts).
fn fits(world: &World, candidate: &Candidate<'_>, extra: &Extra<'_>) -> bool {
    if !candidate.iter().any(|(uuid, _, _)| extra.contains_key(uuid)) {
        return true;
    }
    candidate.iter().all(|(uuid, class, amount)| {
        let promised = extra.get(uuid).and_then(|e| e.get(class)).copied().unwrap_or(0);
        berth_compute_model::choice::amount_fits(world, uuid, class, *amount, promised)
    })
}

/// The claim's form of a candidate.
fn allocation_map(candidate: &Candidate<'_>) -> AllocationMap {
    let mut map = AllocationMap::new();
    for (provider, class, amount) in candidate {
        map.entry(*provider).or_default().insert((*class).to_owned(), *amount);
    }
    map
}

/// Counters of one scheduling run (for metrics and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Allocation candidates placement returned.
    pub candidates: usize,
    /// Hosts among them.
    pub hosts: usize,
    /// Hosts left after the filters.
    pub filtered: usize,
}

/// Every host that could take one instance of `spec` now, by name,
/// sorted: the placement query without its result limit (all hosts, one
/// query) and the scheduler's filters, with no weighing and no selection.
/// The same hosts as those for which [`schedule`] of one instance forced
/// to the host succeeds (pull mode evaluates a queue for all hosts at
/// once with this instead of one forced run per host). `spec`'s forced
/// host and node are ignored.
pub fn eligible_hosts(
    world: &World,
    spec: &RequestSpec,
    health: &dyn HostHealth,
    now: Timestamp,
    config: &Config,
) -> Result<Vec<String>, NoValidHost> {
    let mut spec = spec.clone();
    spec.force_host = None;
    spec.force_node = None;
    let mut query = placement_query(world, &spec, config)?;
    query.request.skip_summaries = true;
    query.request.limit = None;
    query.request.rotate = None;
    let candidates = berth_candidates::find(&world.placement, &query.request)
        .map_err(|e| NoValidHost(format!("Placement refused the request: {e}")))?;
    let mut roots: std::collections::BTreeSet<Uuid> = std::collections::BTreeSet::new();
    for candidate in &candidates.allocation_requests {
        if let Some(root) = host_root(world, candidate.allocations.iter().map(|(p, _)| p)) {
            roots.insert(root);
        }
    }
    let group: Option<&ServerGroup> = spec.group.and_then(|g| world.compute.server_groups.get(&g));
    let members_on: HashMap<String, i64> = match group {
        Some(group) => group_hosts(world, group, &std::collections::BTreeSet::new()),
        None => HashMap::new(),
    };
    let filters = filters::StaticFilters::new(world, &spec, &[], now, config.pool_lend_lead);
    let mut out = Vec::new();
    for root in roots {
        let Some(node) = world.compute.compute_nodes.get(&root) else { continue };
        let host = HostState {
            node,
            candidates: Vec::new(),
            free: weighers::Free::default(),
            lent_until: None,
            failed_builds: 0,
        };
        if filters.passes(&host, health).is_some()
            && group.is_none_or(|g| filters::group_passes(g, &node.host, &members_on))
        {
            out.push(node.host.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Place every instance of `request`, or fail the whole request.
pub fn schedule(
    world: &World,
    request: &ScheduleRequest<'_>,
    health: &dyn HostHealth,
    config: &Config,
) -> Result<(Vec<InstanceChoices>, Stats), NoValidHost> {
    let spec = request.spec;
    let mut query = placement_query(world, spec, config)?;
    query.request.skip_summaries = true;
    // A limited query looks at a window of the cloud starting at a random
    // host, so that the first hosts in creation order are not everyone's.
    if query.request.limit.is_some() {
        query.request.rotate = Some(request.seed);
    }
    let candidates = berth_candidates::find(&world.placement, &query.request)
        .map_err(|e| NoValidHost(format!("Placement refused the request: {e}")))?;
    let mut stats = Stats { candidates: candidates.allocation_requests.len(), ..Stats::default() };

    // Group the candidates by host: the compute node whose tree their
    // non-sharing providers are in (one map lookup per candidate; the
    // groups keep the candidates' order).
    let mut groups: Vec<(&ComputeNodeRef, Vec<Candidate<'_>>)> = Vec::new();
    let mut group_of_root: HashMap<Uuid, usize> = HashMap::with_capacity(candidates.allocation_requests.len());
    for candidate in &candidates.allocation_requests {
        let Some(node) = host_node(world, candidate.allocations.iter().map(|(p, _)| p)) else { continue };
        let mut flat: Candidate<'_> = Vec::with_capacity(candidate.allocations.len() * 2);
        for (provider, amounts) in &candidate.allocations {
            for (class, amount) in amounts {
                // Two groups may take the same class from one provider.
                match flat.iter_mut().find(|(p, c, _)| p == provider && c == class) {
                    Some(entry) => entry.2 += amount,
                    None => flat.push((*provider, class, *amount)),
                }
            }
        }
        let idx = *group_of_root.entry(node.uuid).or_insert_with(|| {
            groups.push((node, Vec::new()));
            groups.len() - 1
        });
        groups[idx].1.push(flat);
    }
    stats.hosts = groups.len();
    let group: Option<&ServerGroup> = spec.group.and_then(|g| world.compute.server_groups.get(&g));
    // What other decisions' claims in flight take, per provider and per
    // host (their hosts' free amounts as the weighers see them), the
    // latter by the index of the host's group of candidates.
    let mut extra: Extra<'_> = HashMap::new();
    let mut in_flight_on: Vec<(usize, Candidate<'_>)> = Vec::new();
    for allocations in request.in_flight {
        let mut flat: Candidate<'_> = Vec::new();
        for (provider, amounts) in allocations {
            for (class, amount) in amounts {
                *extra.entry(*provider).or_default().entry(class.as_str()).or_insert(0) += amount;
                flat.push((*provider, class.as_str(), *amount));
            }
        }
        if let Some(idx) = host_root(world, allocations.keys()).and_then(|root| group_of_root.get(&root)) {
            in_flight_on.push((*idx, flat));
        }
    }
    in_flight_on.sort_by_key(|(idx, _)| *idx);
    let mut in_flight_on = in_flight_on.iter().peekable();
    let ordinary = berth_compute_model::lease::named_reservation(spec) == Ok(None);
    let filters = filters::StaticFilters::new(world, spec, request.ignore_hosts, request.now, config.pool_lend_lead);
    let mut hosts: Vec<HostState<'_>> = Vec::with_capacity(groups.len());
    for (idx, (node, candidates)) in groups.into_iter().enumerate() {
        let taken_in_flight = std::iter::from_fn(|| in_flight_on.next_if(|(on, _)| *on == idx));
        if request.cell.is_some_and(|cell| cell != node.cell) {
            taken_in_flight.for_each(drop);
            continue;
        }
        let mut host =
            HostState { node, candidates, free: weighers::Free::default(), lent_until: None, failed_builds: 0 };
        if let Some(status) = filters.passes(&host, health) {
            host.failed_builds = status.failed_builds;
            host.free = weighers::Free::of(world, node.uuid);
            if ordinary && config.pool_lend_lead.is_some() {
                let tables = &world.compute.leases;
                host.lent_until = tables.host_by_service.get(&node.host).map(|id| tables.next_needed(*id, request.now));
            }
            for (_, taken) in taken_in_flight {
                host.free.take(taken);
            }
            hosts.push(host);
        } else {
            taken_in_flight.for_each(drop);
        }
    }
    stats.filtered = hosts.len();

    let mut rng = Rng::new(request.seed);
    let claiming: std::collections::BTreeSet<Uuid> = request.instances.iter().copied().collect();
    let mut members_on: HashMap<String, i64> = match group {
        Some(group) => group_hosts(world, group, &claiming),
        None => HashMap::new(),
    };
    // Hosts with a candidate sharing a provider with `extra`: only their
    // candidates are checked again ([`fits`]); the others' first candidate
    // fits, as the candidate engine found on this snapshot.
    let mut touched: Vec<bool> = if extra.is_empty() {
        vec![false; hosts.len()]
    } else {
        hosts.iter().map(|h| h.candidates.iter().flatten().any(|(uuid, _, _)| extra.contains_key(uuid))).collect()
    };
    let mut out = Vec::new();
    for instance in request.instances {
        // Hosts (with the first candidate that still fits) for this instance.
        let viable: Vec<(usize, usize)> = hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| group.is_none_or(|g| filters::group_passes(g, &h.node.host, &members_on)))
            .filter_map(|(idx, h)| {
                if touched[idx] {
                    h.candidates.iter().position(|c| fits(world, c, &extra))
                } else {
                    (!h.candidates.is_empty()).then_some(0)
                }
                .map(|c| (idx, c))
            })
            .collect();
        if viable.is_empty() {
            return Err(NoValidHost(format!(
                "There are not enough hosts available. ({} candidates, {} hosts, {} after filters)",
                stats.candidates, stats.hosts, stats.filtered
            )));
        }
        let weights = weighers::weigh(&hosts, &viable, group, &members_on, config);
        let mut ranked: Vec<usize> = (0..viable.len()).collect();
        // Lent pool hosts come after every other host, the ones a lease
        // needs latest first: lending adds capacity without sending
        // servers where a drain will soon have to move them again.
        let tier = |i: usize| hosts[viable[i].0].lent_until.map_or((0, 0), |until| (1, -until));
        ranked.sort_by(|a, b| {
            tier(*a).cmp(&tier(*b)).then(weights[*b].partial_cmp(&weights[*a]).unwrap_or(std::cmp::Ordering::Equal))
        });
        let subset = config.host_subset_size.max(1).min(ranked.len());
        let pick = ranked.remove(rng.below(subset));
        let (host_idx, cand_idx) = viable[pick];
        let selected = &hosts[host_idx];
        let mut choices =
            vec![HostChoice { root: selected.node.uuid, allocations: allocation_map(&selected.candidates[cand_idx]) }];
        for alt in ranked {
            if choices.len() >= config.max_attempts.max(1) {
                break;
            }
            let (h, c) = viable[alt];
            if hosts[h].node.cell == selected.node.cell {
                choices.push(HostChoice {
                    root: hosts[h].node.uuid,
                    allocations: allocation_map(&hosts[h].candidates[c]),
                });
            }
        }
        let taken = selected.candidates[cand_idx].clone();
        for (provider, class, amount) in &taken {
            *extra.entry(*provider).or_default().entry(*class).or_insert(0) += amount;
        }
        // Every host with a candidate on a provider just taken: the
        // selected host, and, when the candidate took from a provider
        // outside its tree (a sharing provider), any host whose candidates
        // name that provider.
        touched[host_idx] = true;
        let outside = |uuid: &Uuid| {
            world.placement.sharing_providers.contains(uuid)
                || world.placement.provider(uuid).is_none_or(|p| p.row.root != selected.node.uuid)
        };
        if taken.iter().any(|(uuid, _, _)| outside(uuid)) {
            for (host, touched) in hosts.iter().zip(touched.iter_mut()).filter(|(_, t)| !**t) {
                *touched = host.candidates.iter().flatten().any(|(uuid, _, _)| taken.iter().any(|(p, _, _)| p == uuid));
            }
        }
        let selected_host = selected.node.host.clone();
        hosts[host_idx].free.take(&taken);
        if group.is_some() {
            *members_on.entry(selected_host).or_insert(0) += 1;
        }
        out.push(InstanceChoices { instance: *instance, choices });
    }
    Ok((out, stats))
}

#[cfg(test)]
mod tests;
