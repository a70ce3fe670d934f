//! The in-memory placement state and the one function that mutates it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::{AllocationMap, Change, ChangeSet, ConsumerRow, ProviderRow, Timestamp};

/// Ids of custom resource classes start here, as upstream's do, so standard
/// classes added by later os-resource-classes releases never collide.
pub const CUSTOM_RESOURCE_CLASS_BASE_ID: i64 = 10000;

const STANDARD_TRAITS: &str = include_str!("../data/standard_traits.txt");
const STANDARD_RESOURCE_CLASSES: &str = include_str!("../data/standard_resource_classes.txt");

fn data_lines(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// Standard trait names (os-traits 3.9.0).
pub fn standard_traits() -> impl Iterator<Item = &'static str> {
    data_lines(STANDARD_TRAITS)
}

/// Standard resource class names in upstream id order (os-resource-classes 1.1.0).
pub fn standard_resource_classes() -> impl Iterator<Item = &'static str> {
    data_lines(STANDARD_RESOURCE_CLASSES)
}

/// One inventory record of a provider for one resource class.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// Total amount.
    pub total: i64,
    /// Amount reserved for other uses.
    pub reserved: i64,
    /// Smallest single allocation.
    pub min_unit: i64,
    /// Largest single allocation.
    pub max_unit: i64,
    /// Allocations must be a multiple of this.
    pub step_size: i64,
    /// Overcommit ratio.
    pub allocation_ratio: f64,
}

impl Inventory {
    /// Usable capacity: `(total - reserved) * allocation_ratio`, computed in
    /// floating point and truncated as upstream does.
    pub fn capacity(&self) -> i64 {
        ((self.total - self.reserved) as f64 * self.allocation_ratio) as i64
    }
}

/// A resource provider with its inventories, traits and aggregates.
#[derive(Debug, Clone)]
pub struct Provider {
    /// Scalar columns.
    pub row: ProviderRow,
    /// Inventories by resource class.
    pub inventories: BTreeMap<String, Inventory>,
    /// Trait names.
    pub traits: BTreeSet<String>,
    /// Aggregate uuids.
    pub aggregates: BTreeSet<Uuid>,
    /// Derived: amount used per resource class.
    pub usages: BTreeMap<String, i64>,
    /// Derived: consumers with allocations against this provider.
    pub consumers: BTreeSet<Uuid>,
    /// Derived: direct children.
    pub children: BTreeSet<Uuid>,
}

impl Provider {
    fn new(row: ProviderRow) -> Self {
        Self {
            row,
            inventories: BTreeMap::new(),
            traits: BTreeSet::new(),
            aggregates: BTreeSet::new(),
            usages: BTreeMap::new(),
            consumers: BTreeSet::new(),
            children: BTreeSet::new(),
        }
    }

    /// The provider's uuid.
    pub fn uuid(&self) -> Uuid {
        self.row.uuid
    }

    /// Usage of one resource class (0 when none).
    pub fn used(&self, resource_class: &str) -> i64 {
        self.usages.get(resource_class).copied().unwrap_or(0)
    }
}

/// A consumer and its allocations.
#[derive(Debug, Clone)]
pub struct Consumer {
    /// Scalar columns.
    pub row: ConsumerRow,
    /// Allocations: provider -> class -> amount, in written order.
    pub allocations: AllocationMap,
    /// When its allocations were last written, relative to the other
    /// consumers (higher is later). Upstream re-inserts a consumer's rows
    /// on every write and lists a provider's allocations by (class id,
    /// amount, row id); this is the row-id part.
    pub written: u64,
}

/// A resource class (standard or custom).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceClass {
    /// Internal id (standard: position; custom: >= 10000).
    pub id: i64,
    /// Name.
    pub name: String,
    /// Creation time (0 for standard classes, which have none).
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Option<Timestamp>,
}

/// A trait (standard or custom).
#[derive(Debug, Clone, PartialEq)]
pub struct Trait {
    /// Internal id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Creation time.
    pub created_at: Timestamp,
}

/// The trait that makes a provider share its inventory with the trees of
/// its aggregates.
const SHARES_VIA_AGGREGATE: &str = "MISC_SHARES_VIA_AGGREGATE";

/// Everything placement knows, indexed for the queries the API makes.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Providers by uuid.
    pub providers: HashMap<Uuid, Provider>,
    /// Provider uuids by internal id: creation order, which is list order.
    pub provider_order: BTreeMap<i64, Uuid>,
    /// Provider uuid by name.
    pub provider_names: HashMap<String, Uuid>,
    /// Consumers by uuid.
    pub consumers: HashMap<Uuid, Consumer>,
    /// Resource classes by name.
    pub resource_classes: BTreeMap<String, ResourceClass>,
    /// Traits by name.
    pub traits: BTreeMap<String, Trait>,
    /// Highest provider id ever handed out.
    pub max_provider_id: i64,
    /// Highest trait id ever handed out.
    pub max_trait_id: i64,
    /// Highest custom resource class id ever handed out.
    pub max_resource_class_id: i64,
    /// Derived: providers with the `MISC_SHARES_VIA_AGGREGATE` trait (so
    /// that a search learns whether any provider shares without looking at
    /// every provider's traits).
    pub sharing_providers: BTreeSet<Uuid>,
    /// Derived: allocation writes applied so far (see [`Consumer::written`]).
    pub allocation_writes: u64,
    /// Derived: provider ids by trait, aggregate and class with room.
    pub search: crate::search_index::SearchIndex,
    /// Derived: the providers' positions and tree shape, cached between
    /// changes of shape.
    pub topology: crate::search_index::TopologyCache,
}

impl State {
    /// The providers' positions and tree shape (built on first use after a
    /// change of shape, then shared).
    pub fn topology(&self) -> &crate::search_index::Topology {
        self.topology.get(self)
    }

    /// An empty state holding only the standard traits and resource classes,
    /// stamped with `now`.
    pub fn with_standard_data(now: Timestamp) -> Self {
        let mut state = State::default();
        for change in state.standard_data_changes(now).changes {
            state.apply_one(&change);
        }
        state
    }

    /// Changes that add any standard trait or resource class missing from
    /// this state (what upstream's start-up sync does).
    pub fn standard_data_changes(&self, now: Timestamp) -> ChangeSet {
        let mut set = ChangeSet::new();
        for (idx, name) in standard_resource_classes().enumerate() {
            if !self.resource_classes.contains_key(name) {
                set.push(Change::PutResourceClass {
                    id: idx as i64,
                    name: name.to_owned(),
                    created_at: now,
                    updated_at: None,
                });
            }
        }
        let mut next_trait_id = self.max_trait_id;
        for name in standard_traits() {
            if !self.traits.contains_key(name) {
                next_trait_id += 1;
                set.push(Change::PutTrait { id: next_trait_id, name: name.to_owned(), created_at: now });
            }
        }
        set
    }

    /// Look up a provider.
    pub fn provider(&self, uuid: &Uuid) -> Option<&Provider> {
        self.providers.get(uuid)
    }

    /// Providers in list order (creation order).
    pub fn providers_in_order(&self) -> impl Iterator<Item = &Provider> {
        self.provider_order.values().filter_map(|uuid| self.providers.get(uuid))
    }

    /// All descendants of a provider (not including itself), depth first.
    pub fn descendants(&self, uuid: &Uuid) -> Vec<Uuid> {
        let mut out = Vec::new();
        let mut stack = vec![*uuid];
        while let Some(current) = stack.pop() {
            if let Some(provider) = self.providers.get(&current) {
                for child in &provider.children {
                    out.push(*child);
                    stack.push(*child);
                }
            }
        }
        out
    }

    /// The change set that, applied after `set`, restores every entity
    /// `set` touches to its state in `self` (which must be the state `set`
    /// is about to be applied to). Used to take back writes that were
    /// applied in memory ahead of a group commit that then failed.
    pub fn undo_for(&self, set: &ChangeSet) -> ChangeSet {
        let mut providers: BTreeSet<Uuid> = BTreeSet::new();
        let mut consumers: BTreeSet<Uuid> = BTreeSet::new();
        let mut classes: BTreeSet<String> = BTreeSet::new();
        let mut traits: BTreeSet<String> = BTreeSet::new();
        for change in &set.changes {
            match change {
                Change::PutProvider { row, .. } => {
                    providers.insert(row.uuid);
                }
                Change::DeleteProvider { uuid, .. } => {
                    providers.insert(*uuid);
                }
                Change::SetInventories { provider, .. }
                | Change::SetProviderTraits { provider, .. }
                | Change::SetProviderAggregates { provider, .. } => {
                    providers.insert(*provider);
                }
                Change::PutConsumer { row, .. } => {
                    consumers.insert(row.uuid);
                }
                Change::DeleteConsumer { uuid, .. } => {
                    consumers.insert(*uuid);
                }
                Change::PutResourceClass { name, .. } | Change::DeleteResourceClass { name } => {
                    classes.insert(name.clone());
                }
                Change::PutTrait { name, .. } | Change::DeleteTrait { name } => {
                    traits.insert(name.clone());
                }
            }
        }
        let mut undo = ChangeSet::new();
        // 1. Providers that existed come back as they were, parents first.
        let mut existing: Vec<&Provider> = providers.iter().filter_map(|u| self.providers.get(u)).collect();
        existing.sort_by_key(|p| p.row.id);
        let rows: Vec<ProviderRow> = existing.iter().map(|p| p.row.clone()).collect();
        for idx in crate::parents_first(&rows) {
            let p = existing[idx];
            undo.push(Change::PutProvider { row: p.row.clone(), expected_generation: None });
            undo.push(Change::SetInventories { provider: p.uuid(), inventories: p.inventories.clone() });
            undo.push(Change::SetProviderTraits { provider: p.uuid(), traits: p.traits.clone() });
            undo.push(Change::SetProviderAggregates { provider: p.uuid(), aggregates: p.aggregates.clone() });
        }
        // 2. Consumers: old allocations back, or gone if they were new.
        for uuid in &consumers {
            match self.consumers.get(uuid) {
                Some(c) => undo.push(Change::PutConsumer {
                    row: c.row.clone(),
                    expected_generation: None,
                    allocations: c.allocations.clone(),
                }),
                None => undo.push(Change::DeleteConsumer { uuid: *uuid, expected_generation: 0 }),
            }
        }
        // 3. Providers that are new disappear again, children first
        //    (the set creates parents before children).
        let mut created: Vec<Uuid> = Vec::new();
        for change in &set.changes {
            if let Change::PutProvider { row, .. } = change {
                if !self.providers.contains_key(&row.uuid) && !created.contains(&row.uuid) {
                    created.push(row.uuid);
                }
            }
        }
        for uuid in created.into_iter().rev() {
            undo.push(Change::DeleteProvider { uuid, expected_generation: 0 });
        }
        // 4. Resource classes and traits.
        for name in classes {
            match self.resource_classes.get(&name) {
                Some(rc) => undo.push(Change::PutResourceClass {
                    id: rc.id,
                    name: rc.name.clone(),
                    created_at: rc.created_at,
                    updated_at: rc.updated_at,
                }),
                None => undo.push(Change::DeleteResourceClass { name }),
            }
        }
        for name in traits {
            match self.traits.get(&name) {
                Some(t) => undo.push(Change::PutTrait { id: t.id, name: t.name.clone(), created_at: t.created_at }),
                None => undo.push(Change::DeleteTrait { name }),
            }
        }
        undo
    }

    /// Apply a committed change set. Must only be called with change sets
    /// produced by planning against this state (or loaded from the store).
    pub fn apply(&mut self, set: &ChangeSet) {
        for change in &set.changes {
            self.apply_one(change);
        }
    }

    fn apply_one(&mut self, change: &Change) {
        match change {
            Change::PutProvider { row, .. } => self.put_provider(row.clone()),
            Change::DeleteProvider { uuid, .. } => self.delete_provider(uuid),
            Change::SetInventories { provider, inventories } => {
                if let Some(p) = self.providers.get_mut(provider) {
                    self.search.remove_room(p);
                    p.inventories = inventories.clone();
                    self.search.add_room(p);
                }
            }
            Change::SetProviderTraits { provider, traits } => {
                if let Some(p) = self.providers.get_mut(provider) {
                    self.search.remove_traits(p);
                    p.traits = traits.clone();
                    self.search.add_traits(p);
                    let was_sharing = self.sharing_providers.contains(provider);
                    if traits.contains(SHARES_VIA_AGGREGATE) {
                        self.sharing_providers.insert(*provider);
                    } else {
                        self.sharing_providers.remove(provider);
                    }
                    if was_sharing != traits.contains(SHARES_VIA_AGGREGATE) {
                        self.topology.invalidate();
                    }
                }
            }
            Change::SetProviderAggregates { provider, aggregates } => {
                if let Some(p) = self.providers.get_mut(provider) {
                    self.search.remove_aggregates(p);
                    p.aggregates = aggregates.clone();
                    self.search.add_aggregates(p);
                }
            }
            Change::PutConsumer { row, allocations, .. } => {
                self.remove_consumer_allocations(&row.uuid);
                self.add_consumer_allocations(&row.uuid, allocations);
                self.allocation_writes += 1;
                let written = self.allocation_writes;
                self.consumers
                    .insert(row.uuid, Consumer { row: row.clone(), allocations: allocations.clone(), written });
            }
            Change::DeleteConsumer { uuid, .. } => {
                self.remove_consumer_allocations(uuid);
                self.consumers.remove(uuid);
            }
            Change::PutResourceClass { id, name, created_at, updated_at } => {
                // A rename (1.2-1.6) re-uses the id under a new name.
                self.resource_classes.retain(|other, rc| rc.id != *id || other == name);
                if *id >= CUSTOM_RESOURCE_CLASS_BASE_ID {
                    self.max_resource_class_id = self.max_resource_class_id.max(*id);
                }
                self.resource_classes.insert(
                    name.clone(),
                    ResourceClass { id: *id, name: name.clone(), created_at: *created_at, updated_at: *updated_at },
                );
            }
            Change::DeleteResourceClass { name } => {
                self.resource_classes.remove(name);
            }
            Change::PutTrait { id, name, created_at } => {
                self.max_trait_id = self.max_trait_id.max(*id);
                self.traits.insert(name.clone(), Trait { id: *id, name: name.clone(), created_at: *created_at });
            }
            Change::DeleteTrait { name } => {
                self.traits.remove(name);
            }
        }
    }

    fn put_provider(&mut self, row: ProviderRow) {
        self.max_provider_id = self.max_provider_id.max(row.id);
        let uuid = row.uuid;
        let old_parent;
        match self.providers.get_mut(&uuid) {
            Some(existing) => {
                old_parent = existing.row.parent;
                if existing.row.name != row.name {
                    self.provider_names.remove(&existing.row.name);
                }
                if existing.row.parent != row.parent || existing.row.root != row.root || existing.row.id != row.id {
                    self.topology.invalidate();
                }
                existing.row = row.clone();
            }
            None => {
                old_parent = None;
                self.topology.invalidate();
                self.provider_order.insert(row.id, uuid);
                self.providers.insert(uuid, Provider::new(row.clone()));
            }
        }
        self.provider_names.insert(row.name.clone(), uuid);
        if old_parent != row.parent {
            if let Some(old) = old_parent.and_then(|p| self.providers.get_mut(&p)) {
                old.children.remove(&uuid);
            }
        }
        if let Some(parent) = row.parent.and_then(|p| self.providers.get_mut(&p)) {
            parent.children.insert(uuid);
        }
    }

    fn delete_provider(&mut self, uuid: &Uuid) {
        if let Some(provider) = self.providers.remove(uuid) {
            self.search.remove_provider(&provider);
            self.topology.invalidate();
            self.sharing_providers.remove(uuid);
            self.provider_order.remove(&provider.row.id);
            self.provider_names.remove(&provider.row.name);
            if let Some(parent) = provider.row.parent.and_then(|p| self.providers.get_mut(&p)) {
                parent.children.remove(uuid);
            }
        }
    }

    fn remove_consumer_allocations(&mut self, consumer: &Uuid) {
        let Some(existing) = self.consumers.get(consumer) else { return };
        for (provider_uuid, amounts) in &existing.allocations {
            if let Some(provider) = self.providers.get_mut(provider_uuid) {
                self.search.remove_room(provider);
                provider.consumers.remove(consumer);
                for (class, amount) in amounts {
                    if let Some(used) = provider.usages.get_mut(class) {
                        *used -= amount;
                        if *used <= 0 {
                            provider.usages.remove(class);
                        }
                    }
                }
                self.search.add_room(provider);
            }
        }
    }

    fn add_consumer_allocations(&mut self, consumer: &Uuid, allocations: &AllocationMap) {
        for (provider_uuid, amounts) in allocations {
            if let Some(provider) = self.providers.get_mut(provider_uuid) {
                self.search.remove_room(provider);
                provider.consumers.insert(*consumer);
                for (class, amount) in amounts {
                    *provider.usages.entry(class.clone()).or_insert(0) += amount;
                }
                self.search.add_room(provider);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(state: &State) -> String {
        let mut out = String::new();
        for p in state.providers_in_order() {
            out.push_str(&format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?}\n",
                p.row, p.inventories, p.traits, p.aggregates, p.usages, p.consumers, p.children
            ));
        }
        let mut consumers: Vec<_> =
            state.consumers.values().map(|c| format!("{:?} {:?}", c.row, c.allocations)).collect();
        consumers.sort();
        out.push_str(&consumers.join("\n"));
        out.push_str(&format!("{:?} {:?}", state.resource_classes.keys().collect::<Vec<_>>(), state.traits.len()));
        out
    }

    fn row(id: i64, uuid: Uuid, generation: i64, parent: Option<Uuid>, root: Uuid) -> ProviderRow {
        ProviderRow { id, uuid, name: format!("p{id}"), generation, parent, root, created_at: 1, updated_at: 1 }
    }

    /// Applying a change set and then its undo restores the exact state,
    /// for creations, updates, re-parenting, allocations and deletions.
    #[test]
    fn undo_restores_state() {
        let mut state = State::with_standard_data(0);
        let (root, child, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let inv = Inventory { total: 8, reserved: 0, min_unit: 1, max_unit: 8, step_size: 1, allocation_ratio: 1.0 };
        let mut setup = ChangeSet::new();
        setup.push(Change::PutProvider { row: row(1, root, 0, None, root), expected_generation: None });
        setup.push(Change::PutProvider { row: row(2, child, 0, Some(root), root), expected_generation: None });
        setup.push(Change::SetInventories { provider: child, inventories: [("VCPU".to_owned(), inv.clone())].into() });
        let consumer = Uuid::new_v4();
        let mut allocs = AllocationMap::new();
        allocs.entry(child).or_default().insert("VCPU".into(), 2);
        setup.push(Change::PutConsumer {
            row: ConsumerRow {
                uuid: consumer,
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 1,
                consumer_type: None,
                created_at: 1,
                updated_at: 1,
            },
            expected_generation: None,
            allocations: allocs,
        });
        state.apply(&setup);
        let before = fingerprint(&state);

        let mut set = ChangeSet::new();
        // New provider, re-parent the child under it, change inventories,
        // move the consumer's allocation, add a custom class and trait.
        set.push(Change::PutProvider { row: row(3, other, 0, None, other), expected_generation: None });
        set.push(Change::PutProvider { row: row(2, child, 1, Some(other), other), expected_generation: Some(0) });
        set.push(Change::SetInventories {
            provider: child,
            inventories: [("VCPU".to_owned(), Inventory { total: 16, ..inv })].into(),
        });
        let mut moved = AllocationMap::new();
        moved.entry(child).or_default().insert("VCPU".into(), 5);
        set.push(Change::PutConsumer {
            row: ConsumerRow {
                uuid: consumer,
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 2,
                consumer_type: None,
                created_at: 1,
                updated_at: 2,
            },
            expected_generation: Some(1),
            allocations: moved,
        });
        set.push(Change::PutResourceClass { id: 10001, name: "CUSTOM_X".into(), created_at: 2, updated_at: None });
        set.push(Change::PutTrait { id: 9999, name: "CUSTOM_Y".into(), created_at: 2 });
        let undo = state.undo_for(&set);
        state.apply(&set);
        assert_ne!(fingerprint(&state), before);
        state.apply(&undo);
        assert_eq!(fingerprint(&state), before);

        // Deletions come back too.
        let mut delete = ChangeSet::new();
        delete.push(Change::DeleteConsumer { uuid: consumer, expected_generation: 1 });
        delete.push(Change::DeleteProvider { uuid: child, expected_generation: 0 });
        let undo = state.undo_for(&delete);
        state.apply(&delete);
        state.apply(&undo);
        assert_eq!(fingerprint(&state), before);
    }
}
