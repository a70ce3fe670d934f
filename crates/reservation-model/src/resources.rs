//! The Nova and placement resources of instance reservations, as Blazar
//! makes them, kept in step with the lease in the same planned write.
//!
//! For each `virtual:instance` / `flavor:instance` reservation:
//!
//! - from creation until the end: a private flavor whose id is the
//!   reservation id, named `reservation:<id>`, shaped like one slot, with
//!   the extra specs `aggregate_instance_extra_specs:reservation=<id>` and
//!   `resources:CUSTOM_RESERVATION_<ID>=1` (plus the source flavor's specs
//!   for `flavor:instance`), and the resource class
//!   `CUSTOM_RESERVATION_<ID>`;
//! - while the lease is starting or active: the lease's project may use the
//!   flavor, and each held host's compute node has a child provider
//!   `blazar_<hypervisor_hostname>` with `CUSTOM_RESERVATION_<ID>` inventory
//!   equal to the slots held there.
//!
//! So a boot with the flavor can only land on a held host (the only
//! providers with that class), at most `slots` times per host (placement
//! counts the inventory, exactly per slot), and only inside the window.
//!
//! [`sync`] computes the difference between what exists and what the
//! lease, as it will be after the write, wants. It is idempotent: run
//! again on the result it writes nothing. Inventory still used by
//! allocations is never removed: while the lease lasts it shrinks to the
//! usage (a healed host's servers keep their slots until deleted); once the
//! lease is ending that is a conflict, and the caller retries after the
//! servers are gone.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::inventories::inventory_with_defaults;
use berth_model::{Change, ChangeSet, Inventory, ProviderRow, Uuid};

use super::Result;
use berth_compute_model::lease::{Lease, LeaseStatus, Reservation, ReservationKind, ReservationStatus};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::Flavor;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};

pub use berth_compute_model::lease::RESERVATION_SPEC;

/// `CUSTOM_RESERVATION_<ID>`: the reservation id upper-cased, dashes as
/// underscores (Blazar's resource class).
pub fn reservation_class(reservation: Uuid) -> String {
    format!("CUSTOM_RESERVATION_{}", reservation.to_string().to_uppercase().replace('-', "_"))
}

/// The reservation provider's name for a host (Blazar's `blazar_<host>`).
pub fn reservation_provider_name(hypervisor_hostname: &str) -> String {
    format!("blazar_{hypervisor_hostname}")
}

/// What one instance reservation should have after the write.
struct Wanted {
    /// The flavor (None: it must not exist).
    flavor: Option<Flavor>,
    /// Slots per held compute node (empty: no inventory anywhere).
    slots: BTreeMap<Uuid, i64>,
    /// The lease is ending or gone: inventory still in use is a conflict.
    ending: bool,
}

fn flavor_exists_in(status: LeaseStatus) -> bool {
    matches!(status, LeaseStatus::Pending | LeaseStatus::Starting | LeaseStatus::Active | LeaseStatus::Error)
}

fn inventory_exists_in(status: LeaseStatus) -> bool {
    matches!(status, LeaseStatus::Starting | LeaseStatus::Active)
}

fn wanted(world: &World, lease: Option<&Lease>, reservation: Uuid) -> Wanted {
    let found = lease.and_then(|l| l.reservations.iter().find(|r| r.id == reservation).map(|r| (l, r)));
    let Some((lease, r)) = found else {
        return Wanted { flavor: None, slots: BTreeMap::new(), ending: true };
    };
    let live = r.status != ReservationStatus::Deleted;
    let flavor = (live && flavor_exists_in(lease.status)).then(|| slot_flavor(world, lease, r)).flatten();
    let mut slots = BTreeMap::new();
    if live && inventory_exists_in(lease.status) {
        let tables = &world.compute.leases;
        for a in &r.allocations {
            let Some(host) = tables.hosts.get(&a.host_id) else { continue };
            if let Some(node) = node_of(world, &host.service_name, &host.hypervisor_hostname) {
                *slots.entry(node).or_insert(0) += a.slots;
            }
        }
    }
    Wanted { flavor, slots, ending: !flavor_exists_in(lease.status) }
}

/// The compute node (root provider) of a host.
pub(crate) fn node_of(world: &World, service: &str, hypervisor_hostname: &str) -> Option<Uuid> {
    let nodes = world.compute.nodes_by_host.get(service)?;
    nodes
        .iter()
        .find(|n| world.compute.compute_nodes.get(n).is_some_and(|c| c.node == hypervisor_hostname))
        .or_else(|| nodes.first())
        .copied()
}

/// Blazar's reservation flavor for one instance reservation (without its
/// internal id, which the caller assigns).
fn slot_flavor(world: &World, lease: &Lease, r: &Reservation) -> Option<Flavor> {
    let ReservationKind::Instance { vcpus, memory_mb, disk_gb, source_flavor, .. } = &r.kind else { return None };
    let source = source_flavor.as_deref().and_then(|id| world.compute.flavors.get(id));
    let mut extra_specs = source.map(|f| f.extra_specs.clone()).unwrap_or_default();
    extra_specs.insert(RESERVATION_SPEC.into(), r.id.to_string());
    extra_specs.insert(format!("resources:{}", reservation_class(r.id)), "1".into());
    let mut projects = BTreeSet::new();
    if inventory_exists_in(lease.status) {
        projects.insert(lease.project_id.clone());
    }
    Some(Flavor {
        id: 0,
        flavorid: r.id.to_string(),
        name: format!("reservation:{}", r.id),
        memory_mb: *memory_mb,
        vcpus: *vcpus,
        root_gb: *disk_gb,
        ephemeral_gb: source.map_or(0, |f| f.ephemeral_gb),
        swap: source.map_or(0, |f| f.swap),
        rxtx_factor: 1.0,
        vcpu_weight: None,
        disabled: false,
        is_public: false,
        description: None,
        extra_specs,
        projects,
        created_at: r.created_at,
        updated_at: None,
    })
}

fn instance_reservations(lease: Option<&Lease>) -> impl Iterator<Item = Uuid> + '_ {
    lease
        .into_iter()
        .flat_map(|l| l.reservations.iter())
        .filter(|r| matches!(r.kind, ReservationKind::Instance { .. }))
        .map(|r| r.id)
}

/// A reservation provider being rewritten by this sync.
struct Edit {
    row: ProviderRow,
    /// Its generation now (`None`: created by this write).
    expected: Option<i64>,
    inventories: BTreeMap<String, Inventory>,
}

/// Providers being rewritten by this sync.
#[derive(Default)]
struct Edits {
    providers: BTreeMap<Uuid, Edit>,
    new_providers: i64,
}

impl Edits {
    fn provider<'a>(
        &'a mut self,
        world: &World,
        node: Uuid,
        ids: &mut dyn FnMut() -> Uuid,
        now: Timestamp,
        create: bool,
    ) -> Option<&'a mut Edit> {
        let state = &world.placement;
        let name = reservation_provider_name(&state.provider(&node)?.row.name);
        if let Some(uuid) = state.provider_names.get(&name).copied() {
            let existing = state.provider(&uuid)?;
            return Some(self.providers.entry(uuid).or_insert_with(|| Edit {
                row: existing.row.clone(),
                expected: Some(existing.row.generation),
                inventories: existing.inventories.clone(),
            }));
        }
        if let Some(uuid) = self.providers.iter().find(|(_, e)| e.row.name == name).map(|(u, _)| *u) {
            return self.providers.get_mut(&uuid);
        }
        if !create {
            return None;
        }
        self.new_providers += 1;
        let uuid = ids();
        let root = state.provider(&node)?.row.root;
        let row = ProviderRow {
            id: state.max_provider_id + self.new_providers,
            uuid,
            name,
            generation: 0,
            parent: Some(node),
            root,
            created_at: now,
            updated_at: now,
        };
        Some(self.providers.entry(uuid).or_insert(Edit { row, expected: None, inventories: BTreeMap::new() }))
    }
}

/// Append to `set` what makes Nova and placement match the instance
/// reservations of `new` (the lease as this write leaves it; `None`: the
/// lease is deleted), where `old` is the lease as it is now.
pub(crate) fn sync(
    world: &World,
    old: Option<&Lease>,
    new: Option<&Lease>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
    set: &mut WorldChangeSet,
) -> Result<()> {
    let reservations: BTreeSet<Uuid> = instance_reservations(old).chain(instance_reservations(new)).collect();
    if reservations.is_empty() {
        return Ok(());
    }
    let state = &world.placement;
    let mut placement = ChangeSet::new();
    let mut edits = Edits::default();
    let mut next_flavor = world.compute.max_flavor_id;
    // Classes created by this write take consecutive ids from the next free one.
    let mut next_class = berth_model::resource_classes::next_id(state) - 1;
    let mut drop_classes = Vec::new();
    for rid in reservations {
        let want = wanted(world, new, rid);
        let class = reservation_class(rid);

        // Flavor.
        let current = world.compute.flavors.get(&rid.to_string());
        match (&want.flavor, current) {
            (Some(flavor), Some(have)) => {
                let mut flavor = flavor.clone();
                flavor.id = have.id;
                flavor.created_at = have.created_at;
                flavor.updated_at = have.updated_at;
                if flavor != *have {
                    flavor.updated_at = Some(now);
                    set.compute(C::PutFlavor(flavor));
                }
            }
            (Some(flavor), None) => {
                next_flavor += 1;
                let mut flavor = flavor.clone();
                flavor.id = next_flavor;
                flavor.created_at = now;
                set.compute(C::PutFlavor(flavor));
            }
            (None, Some(_)) => set.compute(C::DeleteFlavor(rid.to_string())),
            (None, None) => {}
        }

        // Resource class: exists with the flavor.
        let class_exists = state.resource_classes.contains_key(&class);
        if want.flavor.is_some() && !class_exists {
            next_class += 1;
            placement.push(Change::PutResourceClass {
                id: next_class,
                name: class.clone(),
                created_at: now,
                updated_at: None,
            });
        }

        // Inventory on each held node's reservation provider.
        let mut nodes: BTreeSet<Uuid> = want.slots.keys().copied().collect();
        for p in state.providers.values().filter(|p| p.inventories.contains_key(&class)) {
            if let Some(parent) = p.row.parent {
                nodes.insert(parent);
            }
        }
        for node in nodes {
            let slots = want.slots.get(&node).copied().unwrap_or(0);
            let Some(Edit { row, inventories, .. }) = edits.provider(world, node, ids, now, slots > 0) else {
                continue;
            };
            let used = state.provider(&row.uuid).map_or(0, |p| p.used(&class));
            let total = slots.max(used);
            if used > slots && want.ending {
                return Err(ComputeError::Conflict(format!(
                    "Servers still use reservation {rid} on {}; retry once they are deleted",
                    row.name
                )));
            }
            if total == 0 {
                inventories.remove(&class);
            } else {
                let inventory = inventories
                    .entry(class.clone())
                    .or_insert_with(|| inventory_with_defaults(total, None, None, None, None, None));
                inventory.total = total;
                inventory.max_unit = inventory.max_unit.max(1);
            }
        }
        if want.flavor.is_none() && class_exists {
            drop_classes.push(class);
        }
    }

    for (uuid, Edit { mut row, expected, inventories }) in edits.providers {
        let unchanged = expected.is_some() && state.provider(&uuid).is_some_and(|p| p.inventories == inventories);
        if unchanged {
            continue;
        }
        row.generation += 1;
        row.updated_at = now;
        match expected {
            // A new provider is created at generation 1, then given its
            // inventory (as creating it and putting inventory would).
            None => {
                placement.push(Change::PutProvider { row, expected_generation: None });
                placement.push(Change::SetInventories { provider: uuid, inventories });
            }
            Some(before) => {
                placement.push(Change::SetInventories { provider: uuid, inventories });
                placement.push(Change::PutProvider { row, expected_generation: Some(before) });
            }
        }
    }
    for class in drop_classes {
        placement.push(Change::DeleteResourceClass { name: class });
    }
    if !placement.is_empty() {
        set.placement(placement);
    }
    Ok(())
}

/// The write that brings an existing lease's instance-reservation
/// resources in line with its status (the start and end actions of the
/// event runner). `None` when nothing is to be done.
pub fn plan_sync_lease_resources(
    world: &World,
    lease_id: Uuid,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<Option<WorldChangeSet>> {
    let lease = world.compute.leases.leases.get(&lease_id);
    let mut set = WorldChangeSet::new();
    sync(world, lease, lease, ids, now, &mut set)?;
    Ok((!set.is_empty()).then_some(set))
}
