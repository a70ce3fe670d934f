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
    /// Allocations: provider -> class -> amount.
    pub allocations: AllocationMap,
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
}

impl State {
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
                    p.inventories = inventories.clone();
                }
            }
            Change::SetProviderTraits { provider, traits } => {
                if let Some(p) = self.providers.get_mut(provider) {
                    p.traits = traits.clone();
                }
            }
            Change::SetProviderAggregates { provider, aggregates } => {
                if let Some(p) = self.providers.get_mut(provider) {
                    p.aggregates = aggregates.clone();
                }
            }
            Change::PutConsumer { row, allocations, .. } => {
                self.remove_consumer_allocations(&row.uuid);
                self.add_consumer_allocations(&row.uuid, allocations);
                self.consumers
                    .insert(row.uuid, Consumer { row: row.clone(), allocations: allocations.clone() });
            }
            Change::DeleteConsumer { uuid, .. } => {
                self.remove_consumer_allocations(uuid);
                self.consumers.remove(uuid);
            }
            Change::PutResourceClass { id, name, created_at, updated_at } => {
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
                existing.row = row.clone();
            }
            None => {
                old_parent = None;
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
                provider.consumers.remove(consumer);
                for (class, amount) in amounts {
                    if let Some(used) = provider.usages.get_mut(class) {
                        *used -= amount;
                        if *used <= 0 {
                            provider.usages.remove(class);
                        }
                    }
                }
            }
        }
    }

    fn add_consumer_allocations(&mut self, consumer: &Uuid, allocations: &AllocationMap) {
        for (provider_uuid, amounts) in allocations {
            if let Some(provider) = self.providers.get_mut(provider_uuid) {
                provider.consumers.insert(*consumer);
                for (class, amount) in amounts {
                    *provider.usages.entry(class.clone()).or_insert(0) += amount;
                }
            }
        }
    }
}
