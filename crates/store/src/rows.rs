//! Loading: backends read their tables into [`Rows`]; one function turns
//! the rows into a [`State`], so both backends agree on the assembly rules
//! (per-provider grouping, parents before children, allocations joined to
//! their consumers).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use berth_compute_model::{ComputeChange, World, WorldChangeSet};
use berth_model::{
    parents_first, AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ProviderRow, Timestamp, Uuid,
};

/// Every table's rows, as a backend reads them (any order).
#[derive(Debug, Default)]
pub struct Rows {
    /// `(id, name, created_at, updated_at)` of each resource class.
    pub resource_classes: Vec<(i64, String, Timestamp, Option<Timestamp>)>,
    /// `(id, name, created_at)` of each trait.
    pub traits: Vec<(i64, String, Timestamp)>,
    /// Provider rows.
    pub providers: Vec<ProviderRow>,
    /// `(provider, resource class, inventory)`.
    pub inventories: Vec<(Uuid, String, Inventory)>,
    /// `(provider, trait)`.
    pub provider_traits: Vec<(Uuid, String)>,
    /// `(provider, aggregate)`.
    pub provider_aggregates: Vec<(Uuid, Uuid)>,
    /// `(consumer, provider, resource class, used)`.
    pub allocations: Vec<(Uuid, Uuid, String, i64)>,
    /// Consumer rows.
    pub consumers: Vec<ConsumerRow>,
    /// The compute control rows, as puts (see [`crate::json::row_change`]).
    pub compute: Vec<ComputeChange>,
}

impl Rows {
    /// Assemble the state these rows describe.
    pub fn into_state(self) -> World {
        let mut set = ChangeSet::new();
        let mut classes = self.resource_classes;
        classes.sort_by_key(|c| c.0);
        for (id, name, created_at, updated_at) in classes {
            set.push(Change::PutResourceClass { id, name, created_at, updated_at });
        }
        let mut traits = self.traits;
        traits.sort_by_key(|t| t.0);
        for (id, name, created_at) in traits {
            set.push(Change::PutTrait { id, name, created_at });
        }
        let mut providers = self.providers;
        providers.sort_by_key(|p| p.id);
        for idx in parents_first(&providers) {
            set.push(Change::PutProvider { row: providers[idx].clone(), expected_generation: None });
        }
        let mut inventories: BTreeMap<Uuid, BTreeMap<String, Inventory>> = BTreeMap::new();
        for (provider, class, inventory) in self.inventories {
            inventories.entry(provider).or_default().insert(class, inventory);
        }
        for (provider, inventories) in inventories {
            set.push(Change::SetInventories { provider, inventories });
        }
        let mut traits: BTreeMap<Uuid, BTreeSet<String>> = BTreeMap::new();
        for (provider, name) in self.provider_traits {
            traits.entry(provider).or_default().insert(name);
        }
        for (provider, traits) in traits {
            set.push(Change::SetProviderTraits { provider, traits });
        }
        let mut aggregates: BTreeMap<Uuid, BTreeSet<Uuid>> = BTreeMap::new();
        for (provider, aggregate) in self.provider_aggregates {
            aggregates.entry(provider).or_default().insert(aggregate);
        }
        for (provider, aggregates) in aggregates {
            set.push(Change::SetProviderAggregates { provider, aggregates });
        }
        // Allocation rows come in row-id (written) order: consumers are put
        // in the order of their first row, which gives their relative
        // write order back; those without allocations come first.
        let mut allocations: HashMap<Uuid, AllocationMap> = HashMap::new();
        let mut written: Vec<Uuid> = Vec::new();
        for (consumer, provider, class, used) in self.allocations {
            let entry = allocations.entry(consumer).or_insert_with(|| {
                written.push(consumer);
                AllocationMap::new()
            });
            entry.entry(provider).or_default().insert(class, used);
        }
        let mut rows: HashMap<Uuid, ConsumerRow> = HashMap::with_capacity(self.consumers.len());
        for row in self.consumers {
            if allocations.contains_key(&row.uuid) {
                rows.insert(row.uuid, row);
            } else {
                set.push(Change::PutConsumer { row, expected_generation: None, allocations: AllocationMap::new() });
            }
        }
        for uuid in written {
            let (Some(row), Some(allocations)) = (rows.remove(&uuid), allocations.remove(&uuid)) else { continue };
            set.push(Change::PutConsumer { row, expected_generation: None, allocations });
        }
        let mut world = World::default();
        let mut all = WorldChangeSet::from(set);
        for change in self.compute {
            all.compute(change);
        }
        world.apply(&all);
        world
    }
}
