//! What an instance's allocation should be, for the control plane's heal
//! (`nova-manage placement heal_allocations`): the resources its request
//! spec's flavor asks for, on its own host, without the scheduling-only
//! constraints (traits, aggregates, zones, disabled hosts), which were
//! checked when it was placed and may have changed since.

use std::collections::BTreeMap;

use berth_compute_model::{RequestSpec, World};
use berth_model::AllocationMap;
use uuid::Uuid;

use crate::{placement_query, Config, NoValidHost};

/// The placement request for `spec`'s resources only, every group kept
/// inside the tree of `node` (all groups when `node` is `None`).
fn resources_request(
    world: &World,
    spec: &RequestSpec,
    node: Option<Uuid>,
) -> Result<berth_candidates::Request, NoValidHost> {
    let mut spec = spec.clone();
    spec.availability_zone = None;
    spec.force_host = None;
    spec.force_node = None;
    let config = Config {
        query_placement_for_image_type_support: false,
        image_metadata_prefilter: false,
        limit_tenants_to_placement_aggregate: false,
        enable_isolated_aggregate_filtering: false,
        ..Config::default()
    };
    let mut request = placement_query(world, &spec, &config)?.request;
    request.root_required.clear();
    request.root_forbidden.clear();
    request.limit = Some(1);
    request.skip_summaries = true;
    request.rotate = None;
    request.randomize_seed = None;
    for group in &mut request.groups {
        group.required_traits.clear();
        group.forbidden_traits.clear();
        group.member_of.clear();
        group.forbidden_aggregates.clear();
        group.in_tree = node;
    }
    request.groups.retain(|g| !g.resources.is_empty());
    Ok(request)
}

/// What `spec`'s flavor asks for in total, by resource class.
pub fn flavor_amounts(world: &World, spec: &RequestSpec) -> Result<BTreeMap<String, i64>, NoValidHost> {
    let request = resources_request(world, spec, None)?;
    let mut out = BTreeMap::new();
    for group in &request.groups {
        for (class, amount) in &group.resources {
            *out.entry(class.clone()).or_insert(0) += amount;
        }
    }
    Ok(out)
}

/// An allocation for `spec`'s flavor inside the tree of compute node
/// `node` that fits its free capacity now; `None` when it has no room.
/// A proposal: the write that uses it re-checks capacity exactly.
pub fn allocation_on(world: &World, spec: &RequestSpec, node: Uuid) -> Result<Option<AllocationMap>, NoValidHost> {
    let request = resources_request(world, spec, Some(node))?;
    if request.groups.is_empty() {
        return Ok(None);
    }
    let candidates = berth_candidates::find(&world.placement, &request)
        .map_err(|e| NoValidHost(format!("Placement refused the request: {e}")))?;
    Ok(candidates.allocation_requests.first().map(|first| {
        let mut map = AllocationMap::new();
        for (provider, amounts) in &first.allocations {
            for (class, amount) in amounts {
                map.entry(*provider).or_default().insert((*class).to_owned(), *amount);
            }
        }
        map
    }))
}
