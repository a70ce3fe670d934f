//! Evacuate and shelve/unshelve: the control writes that give an
//! instance a new home (or none), each one planned write.
//!
//! - [`plan_evacuate_claim`] (Nova's evacuate with placement): the
//!   instance consumer's allocations become *source + destination* in one
//!   write (consumer generation checked, capacity and the server group's
//!   hard policy re-checked), so there is no moment the instance holds no
//!   allocation. There is no migration consumer: the source is down and
//!   its share is dropped later by [`plan_drop_host_allocations`], when the
//!   source comes back and destroys its copy (Nova's
//!   `_destroy_evacuated_instances` and
//!   `remove_provider_tree_from_instance_allocation`), or when the
//!   destination's rebuild fails (the destination's share goes). Counted
//!   usage follows the instance consumer, so while an evacuation is
//!   unfinished the server's cores and RAM count twice, as in Nova with
//!   `count_usage_from_placement`.
//! - [`plan_offload`]: a shelved server leaves its host: its allocations
//!   go (the mapping, request spec and `instances` quota stay).
//! - [`plan_unshelve_claim`]: an offloaded server comes back: its cores
//!   and RAM are checked against counted quota usage (Nova's
//!   `_check_quota_unshelve_offloaded`: instances delta 0) *in the claim
//!   write*, then the first choice that fits and keeps the group's hard
//!   policy is claimed, and the request spec takes the (2.77) zone.

use std::collections::{BTreeSet, HashMap};

use berth_model::allocations::{plan_replace_allocations, AllocationError, ConsumerAllocations, ConsumerGeneration};
use berth_model::{AllocationMap, Change, ChangeSet};
use uuid::Uuid;

use crate::choice::{fits, group_allows, group_hosts, HostChoice};
use crate::moves::MoveClaimed;
use crate::quota::{effective_limit, usage, user_override};
use crate::state::ComputeChange as C;
use crate::{ComputeError, Flavor, Timestamp, World, WorldChangeSet, CONSUMER_TYPE_INSTANCE};

type Result<T> = std::result::Result<T, ComputeError>;

/// An evacuation to claim.
#[derive(Debug, Clone)]
pub struct EvacuateClaim {
    /// Instance evacuated.
    pub instance: Uuid,
    /// The source compute node (root provider) the instance is on.
    pub source: Uuid,
    /// The scheduler's choices, best first (the source excluded).
    pub choices: Vec<HostChoice>,
    /// The instance's cell: an evacuation stays in its cell.
    pub cell: Uuid,
}

/// The root provider of `provider` (itself when unknown).
fn root_of(world: &World, provider: &Uuid) -> Uuid {
    world.placement.provider(provider).map_or(*provider, |p| p.row.root)
}

/// The first choice (in `cell`, enabled, not on `except` roots, keeping
/// the instance's group policy, fitting on top of current usage).
fn first_fit<'c>(
    world: &World,
    instance: &Uuid,
    choices: &'c [HostChoice],
    cell: Uuid,
    except: &BTreeSet<Uuid>,
) -> Option<(&'c HostChoice, crate::ComputeNodeRef)> {
    let none: HashMap<(Uuid, &str), i64> = HashMap::new();
    let group = world.compute.group_of_instance.get(instance).and_then(|g| world.compute.server_groups.get(g));
    let members = group.map(|g| group_hosts(world, g, &BTreeSet::from([*instance])));
    choices.iter().find_map(|choice| {
        if except.contains(&choice.root) {
            return None;
        }
        let node = world.compute.compute_nodes.get(&choice.root)?;
        if node.cell != cell || world.compute.cells.get(&node.cell).is_none_or(|c| c.disabled) {
            return None;
        }
        if let (Some(group), Some(members)) = (group, &members) {
            if !group_allows(group, &node.host, members) {
                return None;
            }
        }
        fits(world, &choice.allocations, &none).then(|| (choice, node.clone()))
    })
}

/// Claim an evacuation: the instance consumer keeps its source
/// allocations and adds the first fitting choice's (see the module doc).
/// `NoRoom` writes nothing.
pub fn plan_evacuate_claim(
    world: &World,
    claim: &EvacuateClaim,
    now: Timestamp,
) -> Result<(WorldChangeSet, MoveClaimed)> {
    let Some(consumer) = world.placement.consumers.get(&claim.instance) else {
        return Err(ComputeError::Conflict(format!("Instance {} has no allocations to evacuate.", claim.instance)));
    };
    if consumer.allocations.is_empty() {
        return Err(ComputeError::Conflict(format!("Instance {} has no allocations to evacuate.", claim.instance)));
    }
    let roots: BTreeSet<Uuid> = consumer.allocations.keys().map(|p| root_of(world, p)).collect();
    if roots.iter().any(|r| *r != claim.source && world.compute.compute_nodes.contains_key(r)) {
        return Err(ComputeError::Conflict(format!(
            "Instance {} already holds allocations on another host: an evacuation is under way.",
            claim.instance
        )));
    }
    let Some((choice, node)) =
        first_fit(world, &claim.instance, &claim.choices, claim.cell, &BTreeSet::from([claim.source]))
    else {
        return Ok((WorldChangeSet::new(), MoveClaimed::NoRoom));
    };
    let mut merged: AllocationMap = consumer.allocations.clone();
    for (provider, amounts) in &choice.allocations {
        // A provider the instance already holds is one source and
        // destination share (a disk pool shared through an aggregate): it
        // is not claimed twice, or its second share would stay after the
        // source's clean-up (Nova's `_move_operation_alloc_request`).
        if consumer.allocations.contains_key(provider) {
            continue;
        }
        let entry = merged.entry(*provider).or_default();
        for (class, amount) in amounts {
            *entry.entry(class.clone()).or_insert(0) += amount;
        }
    }
    let request = ConsumerAllocations {
        consumer: claim.instance,
        project_id: consumer.row.project_id.clone(),
        user_id: consumer.row.user_id.clone(),
        generation: ConsumerGeneration::Is(consumer.row.generation),
        consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
        allocations: merged,
    };
    let placement = match plan_replace_allocations(&world.placement, &[request], now) {
        Ok(placement) => placement,
        Err(AllocationError::InvalidInventory(_)) => return Ok((WorldChangeSet::new(), MoveClaimed::NoRoom)),
        Err(err) => return Err(ComputeError::Conflict(format!("{err:?}"))),
    };
    let mut set = WorldChangeSet::new();
    set.placement(placement);
    Ok((set, MoveClaimed::Claimed(node)))
}

/// Drop the instance's allocations on the tree of compute node `root`
/// (the source of an evacuation once it destroyed its copy, or the
/// destination of a failed rebuild). Writes nothing when the instance
/// holds nothing there; refuses rather than leave the instance with no
/// allocation at all.
pub fn plan_drop_host_allocations(
    world: &World,
    instance: &Uuid,
    root: &Uuid,
    now: Timestamp,
) -> Result<WorldChangeSet> {
    let Some(consumer) = world.placement.consumers.get(instance) else { return Ok(WorldChangeSet::new()) };
    let kept: AllocationMap =
        consumer.allocations.iter().filter(|(p, _)| root_of(world, p) != *root).map(|(p, a)| (*p, a.clone())).collect();
    if kept.len() == consumer.allocations.len() {
        return Ok(WorldChangeSet::new());
    }
    if kept.is_empty() {
        return Err(ComputeError::Conflict(format!(
            "Instance {instance} holds allocations only on compute node {root}: they are kept."
        )));
    }
    let request = ConsumerAllocations {
        consumer: *instance,
        project_id: consumer.row.project_id.clone(),
        user_id: consumer.row.user_id.clone(),
        generation: ConsumerGeneration::Is(consumer.row.generation),
        consumer_type: None,
        allocations: kept,
    };
    let placement = plan_replace_allocations(&world.placement, &[request], now)
        .map_err(|e| ComputeError::Conflict(format!("Unable to drop the allocations: {e:?}")))?;
    let mut set = WorldChangeSet::new();
    set.placement(placement);
    Ok(set)
}

/// Offload a shelved instance: its allocations go (nothing when already
/// gone).
pub fn plan_offload(world: &World, instance: &Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    if let Some(consumer) = world.placement.consumers.get(instance) {
        set.placement(ChangeSet {
            changes: vec![Change::DeleteConsumer { uuid: *instance, expected_generation: consumer.row.generation }],
        });
    }
    set
}

/// The id of the snapshot image a shelve takes of `instance` (Nova's
/// `shelved_image_id`). It is derived from the instance's id, so no row
/// has to carry it: a server has at most one shelve snapshot at a time,
/// and every path that forgets a server finds and deletes it. The mask
/// leaves the version and variant bits alone, so the id is a v4 uuid
/// like any other image's.
pub fn shelved_image_id(instance: &Uuid) -> Uuid {
    const MASK: u128 = 0x5eb5_e1ed_5eb5_0eb5_0eb5_5eb5_e1ed_5eb5;
    Uuid::from_u128(instance.as_u128() ^ MASK)
}

/// Image properties a snapshot does not inherit from the image its
/// server was booted from (Nova's `NON_INHERITABLE_IMAGE_PROPERTIES`,
/// and the `os_glance` namespace Glance reserves).
pub(crate) const NOT_INHERITED: &[&str] = &[
    "cinder_encryption_key_id",
    "cinder_encryption_key_deletion_policy",
    "img_signature",
    "img_signature_hash_method",
    "img_signature_key_type",
    "img_signature_certificate_uuid",
];

/// What a shelve snapshot is taken of.
#[derive(Debug, Clone)]
pub struct ShelveSnapshot<'a> {
    /// The shelved instance.
    pub instance: Uuid,
    /// Its display name (the image is `<name>-shelved`).
    pub display_name: &'a str,
    /// Its owner's project (the image's owner) and user.
    pub project_id: &'a str,
    /// The user whose server it is (Nova records the caller's).
    pub user_id: &'a str,
    /// The image it was booted from (`None`: volume-backed, no snapshot).
    pub image_ref: Option<Uuid>,
    /// That image's properties as recorded at boot.
    pub image_properties: &'a std::collections::BTreeMap<String, String>,
}

/// The `<name>-shelved` image of `snapshot` in `status`.
fn shelve_image(
    world: &World,
    snapshot: &ShelveSnapshot<'_>,
    base: Uuid,
    status: &str,
    now: Timestamp,
) -> crate::Image {
    let base_image = world.compute.images.get(&base);
    let mut properties: std::collections::BTreeMap<String, String> = snapshot
        .image_properties
        .iter()
        .filter(|(k, _)| !NOT_INHERITED.contains(&k.as_str()) && !k.starts_with("os_glance"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    properties.insert("image_type".to_owned(), "snapshot".to_owned());
    properties.insert("instance_uuid".to_owned(), snapshot.instance.to_string());
    properties.insert("user_id".to_owned(), snapshot.user_id.to_owned());
    properties.insert("base_image_ref".to_owned(), base.to_string());
    crate::Image {
        id: shelved_image_id(&snapshot.instance),
        name: Some(format!("{}-shelved", snapshot.display_name)),
        status: status.to_owned(),
        visibility: "private".to_owned(),
        protected: false,
        owner: Some(snapshot.project_id.to_owned()),
        disk_format: Some(base_image.and_then(|i| i.disk_format.clone()).unwrap_or_else(|| "qcow2".to_owned())),
        container_format: Some("bare".to_owned()),
        min_disk: base_image.map_or(0, |i| i.min_disk),
        min_ram: base_image.map_or(0, |i| i.min_ram),
        size: None,
        hashes: None,
        tags: Vec::new(),
        properties,
        members: std::collections::BTreeMap::new(),
        created_at: now,
        updated_at: now,
    }
}

/// Record the image a shelve uploads to, when the shelve starts (Nova's
/// API creates it before the compute host snapshots): the `<name>-shelved`
/// image (`image_type=snapshot`, `instance_uuid`, `base_image_ref`, the
/// base image's inheritable properties, private to the server's project),
/// `queued` for the host's upload. A shelve starts only from a server
/// that is not shelved, so an image already there was left by a crash
/// before an unshelve could delete it: it is replaced (its data must go).
/// Returns whether an image was recorded (none for a volume-backed
/// server).
pub fn plan_queue_shelve_snapshot(
    world: &World,
    snapshot: &ShelveSnapshot<'_>,
    now: Timestamp,
) -> (WorldChangeSet, bool) {
    let mut set = WorldChangeSet::new();
    let Some(base) = snapshot.image_ref else { return (set, false) };
    set.compute(C::PutImage(shelve_image(world, snapshot, base, "queued", now)));
    (set, true)
}

/// Make sure the snapshot a shelve took is recorded once the host reports
/// the server shelved: the image the shelve started with (uploaded by the
/// host, or still waiting) is kept; without one (a shelve started before
/// the image was recorded, or a host that uploads nothing) it is recorded
/// `active` without data. Nothing for a volume-backed server.
pub fn plan_shelve_snapshot(world: &World, snapshot: &ShelveSnapshot<'_>, now: Timestamp) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    let Some(base) = snapshot.image_ref else { return set };
    if world.compute.images.contains_key(&shelved_image_id(&snapshot.instance)) {
        return set;
    }
    set.compute(C::PutImage(shelve_image(world, snapshot, base, "active", now)));
    set
}

/// Delete `instance`'s shelve snapshot, if there is one (its unshelve
/// is done, or the server is gone).
pub fn plan_drop_shelve_snapshot(world: &World, instance: &Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    let id = shelved_image_id(instance);
    if world.compute.images.contains_key(&id) {
        set.compute(C::DeleteImage(id));
    }
    set
}

/// An unshelve of an offloaded instance to claim.
#[derive(Debug, Clone)]
pub struct UnshelveClaim {
    /// Instance unshelved.
    pub instance: Uuid,
    /// Its owner (quota is counted for them).
    pub project_id: String,
    /// Its owner user.
    pub user_id: String,
    /// Its flavor.
    pub flavor: Flavor,
    /// The scheduler's choices, best first.
    pub choices: Vec<HostChoice>,
    /// The instance's cell.
    pub cell: Uuid,
    /// The zone the request spec takes (2.77: `Some(None)` unpins it;
    /// `None`: unchanged).
    pub availability_zone: Option<Option<String>>,
}

/// The quota check of an unshelve (Nova's
/// `_check_quota_unshelve_offloaded`): the flavor's cores and RAM against
/// counted usage (an offloaded server counts neither), instances delta 0.
/// Nova's `OverQuota` text: `Quota exceeded for resources: ['cores']`.
pub fn check_unshelve_quota(world: &World, project: &str, user: &str, flavor: &Flavor) -> Result<()> {
    let per_user = ["cores", "instances", "ram"].iter().any(|r| user_override(world, project, user, r).is_some());
    let mut scopes: Vec<Option<&str>> = vec![None];
    if per_user {
        scopes.push(Some(user));
    }
    let mut overs: Vec<&str> = Vec::new();
    for (resource, delta) in [("cores", flavor.vcpus), ("ram", flavor.memory_mb)] {
        if delta <= 0 {
            continue;
        }
        let over = scopes.iter().any(|scope| {
            let limit = effective_limit(world, project, *scope, resource);
            limit >= 0 && usage(world, project, *scope, resource) + delta > limit
        });
        if over {
            overs.push(resource);
        }
    }
    if overs.is_empty() {
        return Ok(());
    }
    overs.sort_unstable();
    let listed: Vec<String> = overs.iter().map(|o| format!("'{o}'")).collect();
    Err(ComputeError::OverQuota(format!("Quota exceeded for resources: [{}]", listed.join(", "))))
}

/// Claim an unshelve: quota, then the first choice that fits and keeps
/// the group's policy, and the request spec's zone — one write. `NoRoom`
/// writes nothing.
pub fn plan_unshelve_claim(
    world: &World,
    claim: &UnshelveClaim,
    now: Timestamp,
) -> Result<(WorldChangeSet, MoveClaimed)> {
    let generation = match world.placement.consumers.get(&claim.instance) {
        Some(consumer) if !consumer.allocations.is_empty() => {
            return Err(ComputeError::Conflict(format!("Instance {} already holds allocations.", claim.instance)));
        }
        Some(consumer) => ConsumerGeneration::Is(consumer.row.generation),
        None => ConsumerGeneration::New,
    };
    check_unshelve_quota(world, &claim.project_id, &claim.user_id, &claim.flavor)?;
    let Some((choice, node)) = first_fit(world, &claim.instance, &claim.choices, claim.cell, &BTreeSet::new()) else {
        return Ok((WorldChangeSet::new(), MoveClaimed::NoRoom));
    };
    let request = ConsumerAllocations {
        consumer: claim.instance,
        project_id: claim.project_id.clone(),
        user_id: claim.user_id.clone(),
        generation,
        consumer_type: Some(CONSUMER_TYPE_INSTANCE.to_owned()),
        allocations: choice.allocations.clone(),
    };
    let placement = match plan_replace_allocations(&world.placement, &[request], now) {
        Ok(placement) => placement,
        Err(AllocationError::InvalidInventory(_)) => return Ok((WorldChangeSet::new(), MoveClaimed::NoRoom)),
        Err(err) => return Err(ComputeError::Conflict(format!("{err:?}"))),
    };
    let mut set = WorldChangeSet::new();
    set.placement(placement);
    if let (Some(zone), Some(spec)) = (&claim.availability_zone, world.compute.request_specs.get(&claim.instance)) {
        if spec.availability_zone != *zone {
            let mut spec = spec.clone();
            spec.availability_zone = zone.clone();
            set.compute(C::PutRequestSpec(spec));
        }
    }
    Ok((set, MoveClaimed::Claimed(node)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::tests::{admit, choice, world_with_hosts};
    use crate::plan::{plan_claim, plan_create_server_group, plan_set_quotas, InstanceChoices};
    use crate::world::tests::flavor;
    use crate::{GroupPolicy, ServerGroup};

    /// Hosts (provider names) the instance holds VCPU on, sorted.
    fn hosts_of(world: &World, instance: &Uuid) -> Vec<String> {
        let mut out: Vec<String> = world.placement.consumers[instance]
            .allocations
            .keys()
            .map(|p| world.placement.provider(p).expect("provider").row.name.clone())
            .collect();
        out.sort();
        out
    }

    fn placed(world: &mut World, roots: &[Uuid], host: usize, group: Option<Uuid>) -> Uuid {
        let instance = admit(world, 1, group)[0];
        let claims = vec![InstanceChoices { instance, choices: vec![choice(roots[host], 1)] }];
        let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
        world.apply(&set);
        instance
    }

    fn evacuate(
        world: &World,
        instance: Uuid,
        source: Uuid,
        choices: Vec<HostChoice>,
    ) -> (WorldChangeSet, MoveClaimed) {
        let cell = world.compute.compute_nodes[&source].cell;
        plan_evacuate_claim(world, &EvacuateClaim { instance, source, choices, cell }, 3).expect("planned")
    }

    #[test]
    fn evacuation_holds_both_hosts_then_only_the_destination() {
        let (mut world, roots) = world_with_hosts(3);
        let instance = placed(&mut world, &roots, 0, None);
        let (set, claimed) = evacuate(&world, instance, roots[0], vec![choice(roots[1], 1)]);
        assert!(matches!(claimed, MoveClaimed::Claimed(ref n) if n.uuid == roots[1]));
        world.apply(&set);
        assert_eq!(hosts_of(&world, &instance), ["h0", "h1"], "source + destination in one write");
        assert_eq!(world.compute.counted("p", None).cores, 2, "counted twice until the source cleans up, as Nova");
        // A second evacuation while one is under way is refused.
        let again = EvacuateClaim { instance, source: roots[0], choices: vec![choice(roots[2], 1)], cell: Uuid::nil() };
        assert!(matches!(plan_evacuate_claim(&world, &again, 3), Err(ComputeError::Conflict(_))));
        world.apply(&plan_drop_host_allocations(&world, &instance, &roots[0], 4).expect("dropped"));
        assert_eq!(hosts_of(&world, &instance), ["h1"]);
        assert!(plan_drop_host_allocations(&world, &instance, &roots[0], 4).expect("no-op").is_empty());
        assert!(
            matches!(plan_drop_host_allocations(&world, &instance, &roots[1], 4), Err(ComputeError::Conflict(_))),
            "never down to no allocation"
        );
    }

    /// Hosts sharing a disk pool: the evacuation claims the destination's
    /// own providers and keeps the one pool share, so once the source
    /// cleaned up the instance holds exactly what a boot there would.
    #[test]
    fn an_evacuation_does_not_claim_a_shared_pool_twice() {
        let (mut world, roots) = world_with_hosts(2);
        let pool = Uuid::new_v4();
        let mut set = berth_model::ChangeSet::new();
        set.push(berth_model::Change::PutProvider {
            row: berth_model::ProviderRow {
                id: 100,
                uuid: pool,
                name: "pool".into(),
                generation: 0,
                parent: None,
                root: pool,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        let disk = berth_model::Inventory {
            total: 100,
            reserved: 0,
            min_unit: 1,
            max_unit: 100,
            step_size: 1,
            allocation_ratio: 1.0,
        };
        set.push(berth_model::Change::SetInventories {
            provider: pool,
            inventories: [("DISK_GB".to_owned(), disk)].into(),
        });
        world.apply(&set.into());
        let with_disk = |root: Uuid| {
            let mut c = choice(root, 1);
            c.allocations.entry(pool).or_default().insert("DISK_GB".into(), 10);
            c
        };
        let instance = admit(&mut world, 1, None)[0];
        let claims = vec![InstanceChoices { instance, choices: vec![with_disk(roots[0])] }];
        world.apply(&plan_claim(&world, &claims, 2, None).expect("plan").expect("fits").0);
        let (set, claimed) = evacuate(&world, instance, roots[0], vec![with_disk(roots[1])]);
        assert!(matches!(claimed, MoveClaimed::Claimed(ref n) if n.uuid == roots[1]));
        world.apply(&set);
        assert_eq!(hosts_of(&world, &instance), ["h0", "h1", "pool"]);
        assert_eq!(world.placement.provider(&pool).expect("pool").used("DISK_GB"), 10, "one share of the pool");
        world.apply(&plan_drop_host_allocations(&world, &instance, &roots[0], 4).expect("dropped"));
        let held = &world.placement.consumers[&instance].allocations;
        assert_eq!(held, &with_disk(roots[1]).allocations, "exactly a boot's allocation on the destination");
    }

    #[test]
    fn concurrent_evacuations_keep_hard_anti_affinity() {
        let (mut world, roots) = world_with_hosts(4);
        let group = ServerGroup {
            uuid: Uuid::new_v4(),
            name: "g".into(),
            project_id: "p".into(),
            user_id: "u".into(),
            policy: GroupPolicy::AntiAffinity,
            max_server_per_host: None,
            members: vec![],
            created_at: 0,
        };
        world.apply(&plan_create_server_group(&world, group.clone()).expect("group"));
        let a = placed(&mut world, &roots, 0, Some(group.uuid));
        let b = placed(&mut world, &roots, 1, Some(group.uuid));
        // Both were scheduled onto h2 before either claimed.
        let (set, _) = evacuate(&world, a, roots[0], vec![choice(roots[2], 1)]);
        world.apply(&set);
        let (set, claimed) = evacuate(&world, b, roots[1], vec![choice(roots[2], 1)]);
        assert!(set.is_empty());
        assert_eq!(claimed, MoveClaimed::NoRoom, "h2 holds a member (being evacuated there)");
        let (_, claimed) = evacuate(&world, b, roots[1], vec![choice(roots[2], 1), choice(roots[3], 1)]);
        assert!(matches!(claimed, MoveClaimed::Claimed(ref n) if n.uuid == roots[3]));
        // The source still counts too until it is cleaned up.
        let (_, claimed) = evacuate(&world, b, roots[1], vec![choice(roots[0], 1)]);
        assert_eq!(claimed, MoveClaimed::NoRoom);
    }

    #[test]
    fn unshelve_checks_quota_in_the_claim() {
        let (mut world, roots) = world_with_hosts(2);
        let mut limits = BTreeMap::new();
        limits.insert("cores".to_owned(), 2);
        world.apply(&plan_set_quotas(&world, "p", None, &limits, false).expect("quota"));
        let shelved = placed(&mut world, &roots, 0, None);
        world.apply(&plan_offload(&world, &shelved));
        assert!(!world.placement.consumers.contains_key(&shelved));
        assert_eq!(world.compute.counted("p", None).cores, 0, "offloaded: no cores counted");
        assert_eq!(world.compute.instance_count("p", None), 1, "still an instance");
        let other = placed(&mut world, &roots, 1, None);
        let claim = UnshelveClaim {
            instance: shelved,
            project_id: "p".into(),
            user_id: "u".into(),
            flavor: flavor(2, 512),
            choices: vec![choice(roots[0], 2)],
            cell: world.compute.compute_nodes[&roots[0]].cell,
            availability_zone: Some(Some("az1".into())),
        };
        assert_eq!(
            plan_unshelve_claim(&world, &claim, 5).unwrap_err(),
            ComputeError::OverQuota("Quota exceeded for resources: ['cores']".into())
        );
        world.apply(&plan_offload(&world, &other));
        let (set, claimed) = plan_unshelve_claim(&world, &claim, 5).expect("claimed");
        assert!(matches!(claimed, MoveClaimed::Claimed(ref n) if n.uuid == roots[0]));
        world.apply(&set);
        assert_eq!(hosts_of(&world, &shelved), ["h0"]);
        assert_eq!(world.compute.counted("p", None).cores, 2);
        assert_eq!(world.compute.request_specs[&shelved].availability_zone.as_deref(), Some("az1"));
    }
}
