//! Planning the import of another Placement's data (`berth import
//! placement`): the rows a reader took from the old Placement's database,
//! as a [`Dump`], become change sets planned against the current state,
//! one per batch, like every other write.
//!
//! Each plan writes only what differs from the state it is planned
//! against, so a second import of the same data plans nothing (the
//! import is idempotent), and a re-run after an interrupted import only
//! writes the batches that did not commit. Source rows win over rows
//! berth already has under the same uuid (`--merge`); a name or id that
//! clashes with a different berth row is refused, never overwritten.
//!
//! The source's data is taken as it is: generations, trees and
//! allocations are copied, not re-validated against capacity (the old
//! Placement accepted them; an allocation ratio lowered since then may
//! leave a provider over capacity, which berth, like upstream, then
//! refuses to make worse).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use uuid::Uuid;

use crate::{
    AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ModelError, ProviderRow, Result, State, Timestamp,
    CUSTOM_RESOURCE_CLASS_BASE_ID,
};

/// Everything read from the old Placement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dump {
    /// Custom resource classes: (source id, name), in id order.
    pub resource_classes: Vec<(i64, String, Timestamp)>,
    /// Every trait name the source knows (standard and custom), with its
    /// creation time.
    pub traits: Vec<(String, Timestamp)>,
    /// Providers, parents before their children.
    pub providers: Vec<DumpProvider>,
    /// Consumers with their allocations.
    pub consumers: Vec<DumpConsumer>,
    /// Rows counted in the source that have no field of their own in the
    /// state (projects, users, consumer types, aggregates, allocations).
    pub counts: SourceCounts,
}

/// Counts of the source's rows, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// `projects` rows.
    pub projects: usize,
    /// `users` rows.
    pub users: usize,
    /// `consumer_types` rows.
    pub consumer_types: usize,
    /// `placement_aggregates` rows.
    pub aggregates: usize,
    /// `inventories` rows.
    pub inventories: usize,
    /// `allocations` rows.
    pub allocations: usize,
    /// Consumers without any allocation (upstream deletes them; not
    /// imported).
    pub empty_consumers: usize,
}

/// One provider of the source with what hangs off it.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpProvider {
    /// Uuid.
    pub uuid: Uuid,
    /// Name.
    pub name: String,
    /// Generation.
    pub generation: i64,
    /// Parent.
    pub parent: Option<Uuid>,
    /// Root of its tree.
    pub root: Uuid,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Timestamp,
    /// Inventories by class name.
    pub inventories: BTreeMap<String, Inventory>,
    /// Trait names.
    pub traits: BTreeSet<String>,
    /// Aggregate uuids.
    pub aggregates: BTreeSet<Uuid>,
}

/// One consumer of the source with its allocations.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpConsumer {
    /// The row (project and user as their external ids).
    pub row: ConsumerRow,
    /// Allocations in the source's row order.
    pub allocations: AllocationMap,
}

/// What one plan wrote, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Custom resource classes added.
    pub resource_classes: usize,
    /// Traits added.
    pub traits: usize,
    /// Provider rows added or changed.
    pub providers: usize,
    /// Providers whose inventories were replaced.
    pub inventories: usize,
    /// Providers whose traits were replaced.
    pub provider_traits: usize,
    /// Providers whose aggregates were replaced.
    pub provider_aggregates: usize,
    /// Consumers (with their allocations) added or changed.
    pub consumers: usize,
}

impl Written {
    /// Add another plan's counts.
    pub fn add(&mut self, other: Written) {
        self.resource_classes += other.resource_classes;
        self.traits += other.traits;
        self.providers += other.providers;
        self.inventories += other.inventories;
        self.provider_traits += other.provider_traits;
        self.provider_aggregates += other.provider_aggregates;
        self.consumers += other.consumers;
    }

    /// Nothing was written.
    pub fn is_empty(&self) -> bool {
        *self == Written::default()
    }
}

/// Does the state hold anything besides the standard traits and classes
/// (an import into it needs `--merge`)?
pub fn holds_data(state: &State) -> bool {
    !state.providers.is_empty()
        || !state.consumers.is_empty()
        || state.resource_classes.keys().any(|name| name.starts_with("CUSTOM_"))
        || state.traits.keys().any(|name| name.starts_with("CUSTOM_"))
}

/// Plan the custom resource classes and the traits berth lacks. A class
/// keeps its source id when berth has not handed that id out.
pub fn plan_import_classes_and_traits(state: &State, dump: &Dump) -> Result<(ChangeSet, Written)> {
    let mut set = ChangeSet::new();
    let mut written = Written::default();
    let taken: HashSet<i64> = state.resource_classes.values().map(|rc| rc.id).collect();
    let mut next_class_id = state.max_resource_class_id.max(CUSTOM_RESOURCE_CLASS_BASE_ID - 1);
    let mut planned_ids = HashSet::new();
    for (source_id, name, created_at) in &dump.resource_classes {
        if state.resource_classes.contains_key(name) {
            continue;
        }
        if !name.starts_with("CUSTOM_") {
            return Err(ModelError::Invalid(format!(
                "resource class {name} (id {source_id}) is neither custom nor a standard class berth knows"
            )));
        }
        let id = if *source_id >= CUSTOM_RESOURCE_CLASS_BASE_ID
            && !taken.contains(source_id)
            && !planned_ids.contains(source_id)
        {
            *source_id
        } else {
            next_class_id = next_class_id.max(planned_ids.iter().copied().max().unwrap_or(0)) + 1;
            next_class_id
        };
        planned_ids.insert(id);
        set.push(Change::PutResourceClass { id, name: name.clone(), created_at: *created_at, updated_at: None });
        written.resource_classes += 1;
    }
    let mut next_trait_id = state.max_trait_id;
    for (name, created_at) in &dump.traits {
        if state.traits.contains_key(name) {
            continue;
        }
        next_trait_id += 1;
        set.push(Change::PutTrait { id: next_trait_id, name: name.clone(), created_at: *created_at });
        written.traits += 1;
    }
    Ok((set, written))
}

/// Plan one batch of providers (parents before children, across batches
/// too): rows, inventories, traits and aggregates that differ from the
/// state. The classes and traits they name must exist already (imported
/// by [`plan_import_classes_and_traits`] in an earlier write).
pub fn plan_import_providers(state: &State, batch: &[DumpProvider]) -> Result<(ChangeSet, Written)> {
    let mut set = ChangeSet::new();
    let mut written = Written::default();
    let mut next_id = state.max_provider_id;
    let mut in_batch: HashSet<Uuid> = HashSet::new();
    for provider in batch {
        for class in provider.inventories.keys() {
            if !state.resource_classes.contains_key(class) {
                return Err(ModelError::Invalid(format!("provider {}: unknown resource class {class}", provider.uuid)));
            }
        }
        if let Some(name) = provider.traits.iter().find(|name| !state.traits.contains_key(*name)) {
            return Err(ModelError::Invalid(format!("provider {}: unknown trait {name}", provider.uuid)));
        }
        for linked in provider.parent.iter().chain([&provider.root]) {
            if *linked != provider.uuid && !state.providers.contains_key(linked) && !in_batch.contains(linked) {
                return Err(ModelError::Invalid(format!(
                    "provider {}: its parent or root {linked} comes after it or is missing",
                    provider.uuid
                )));
            }
        }
        if let Some(other) = state.provider_names.get(&provider.name).filter(|other| **other != provider.uuid) {
            return Err(ModelError::DuplicateName(format!(
                "provider {} is named {:?}, which berth's provider {other} already has",
                provider.uuid, provider.name
            )));
        }
        let existing = state.providers.get(&provider.uuid);
        let row_changed = existing.is_none_or(|p| {
            p.row.name != provider.name
                || p.row.generation != provider.generation
                || p.row.parent != provider.parent
                || p.row.root != provider.root
        });
        if row_changed {
            let id = match existing {
                Some(p) => p.row.id,
                None => {
                    next_id += 1;
                    next_id
                }
            };
            set.push(Change::PutProvider {
                row: ProviderRow {
                    id,
                    uuid: provider.uuid,
                    name: provider.name.clone(),
                    generation: provider.generation,
                    parent: provider.parent,
                    root: provider.root,
                    created_at: provider.created_at,
                    updated_at: provider.updated_at,
                },
                expected_generation: existing.map(|p| p.row.generation),
            });
            written.providers += 1;
        }
        if existing.map_or(!provider.inventories.is_empty(), |p| p.inventories != provider.inventories) {
            set.push(Change::SetInventories { provider: provider.uuid, inventories: provider.inventories.clone() });
            written.inventories += 1;
        }
        if existing.map_or(!provider.traits.is_empty(), |p| p.traits != provider.traits) {
            set.push(Change::SetProviderTraits { provider: provider.uuid, traits: provider.traits.clone() });
            written.provider_traits += 1;
        }
        if existing.map_or(!provider.aggregates.is_empty(), |p| p.aggregates != provider.aggregates) {
            set.push(Change::SetProviderAggregates {
                provider: provider.uuid,
                aggregates: provider.aggregates.clone(),
            });
            written.provider_aggregates += 1;
        }
        in_batch.insert(provider.uuid);
    }
    Ok((set, written))
}

/// Plan one batch of consumers: each one whose row or allocations differ
/// from the state is written whole. Every provider and class they use
/// must exist already.
pub fn plan_import_consumers(state: &State, batch: &[DumpConsumer]) -> Result<(ChangeSet, Written)> {
    let mut set = ChangeSet::new();
    let mut written = Written::default();
    for consumer in batch {
        for (provider, amounts) in &consumer.allocations {
            if !state.providers.contains_key(provider) {
                return Err(ModelError::Invalid(format!(
                    "consumer {}: allocation against unknown provider {provider}",
                    consumer.row.uuid
                )));
            }
            if let Some(class) = amounts.keys().find(|class| !state.resource_classes.contains_key(*class)) {
                return Err(ModelError::Invalid(format!(
                    "consumer {}: unknown resource class {class}",
                    consumer.row.uuid
                )));
            }
        }
        let existing = state.consumers.get(&consumer.row.uuid);
        let same = existing.is_some_and(|c| {
            c.row.project_id == consumer.row.project_id
                && c.row.user_id == consumer.row.user_id
                && c.row.generation == consumer.row.generation
                && c.row.consumer_type == consumer.row.consumer_type
                && c.allocations == consumer.allocations
        });
        if same {
            continue;
        }
        set.push(Change::PutConsumer {
            row: consumer.row.clone(),
            expected_generation: existing.map(|c| c.row.generation),
            allocations: consumer.allocations.clone(),
        });
        written.consumers += 1;
    }
    Ok((set, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(total: i64) -> Inventory {
        Inventory { total, reserved: 0, min_unit: 1, max_unit: total, step_size: 1, allocation_ratio: 1.0 }
    }

    fn provider(uuid: Uuid, name: &str, parent: Option<Uuid>, root: Uuid) -> DumpProvider {
        DumpProvider {
            uuid,
            name: name.into(),
            generation: 3,
            parent,
            root,
            created_at: 1,
            updated_at: 2,
            inventories: [("CUSTOM_GOLD".to_owned(), inventory(4))].into(),
            traits: ["CUSTOM_FAST".to_owned()].into(),
            aggregates: [Uuid::from_u128(7)].into(),
        }
    }

    fn dump() -> Dump {
        let (root, child) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut allocations = AllocationMap::new();
        allocations.entry(child).or_default().insert("CUSTOM_GOLD".into(), 2);
        Dump {
            resource_classes: vec![(10000, "CUSTOM_GOLD".into(), 1)],
            traits: vec![("CUSTOM_FAST".into(), 1), ("HW_CPU_X86_AVX2".into(), 1)],
            providers: vec![provider(root, "root", None, root), provider(child, "child", Some(root), root)],
            consumers: vec![DumpConsumer {
                row: ConsumerRow {
                    uuid: Uuid::from_u128(9),
                    project_id: "p".into(),
                    user_id: "u".into(),
                    generation: 5,
                    consumer_type: Some("INSTANCE".into()),
                    created_at: 1,
                    updated_at: 1,
                },
                allocations,
            }],
            counts: SourceCounts::default(),
        }
    }

    /// Import everything into `state`, applying each plan; returns what
    /// was written.
    fn import(state: &mut State, dump: &Dump) -> Written {
        let mut total = Written::default();
        let (set, written) = plan_import_classes_and_traits(state, dump).expect("classes");
        state.apply(&set);
        total.add(written);
        let (set, written) = plan_import_providers(state, &dump.providers).expect("providers");
        state.apply(&set);
        total.add(written);
        let (set, written) = plan_import_consumers(state, &dump.consumers).expect("consumers");
        state.apply(&set);
        total.add(written);
        total
    }

    /// The data arrives whole, and a second import plans nothing.
    #[test]
    fn import_is_complete_and_idempotent() {
        let mut state = State::with_standard_data(0);
        assert!(!holds_data(&state));
        let written = import(&mut state, &dump());
        assert_eq!((written.resource_classes, written.providers, written.consumers), (1, 2, 1));
        assert!(holds_data(&state));
        let child = state.provider(&Uuid::from_u128(2)).expect("child");
        assert_eq!(
            (child.row.generation, child.row.parent, child.row.root),
            (3, Some(Uuid::from_u128(1)), Uuid::from_u128(1))
        );
        assert_eq!(child.used("CUSTOM_GOLD"), 2);
        assert_eq!(state.resource_classes["CUSTOM_GOLD"].id, 10000);
        let consumer = &state.consumers[&Uuid::from_u128(9)];
        assert_eq!((consumer.row.generation, consumer.row.consumer_type.as_deref()), (5, Some("INSTANCE")));
        assert!(import(&mut state, &dump()).is_empty(), "a second import writes nothing");
    }

    /// A changed source is brought over with the generations berth has
    /// as the compare-and-swap preconditions.
    #[test]
    fn changes_are_planned_against_current_generations() {
        let mut state = State::with_standard_data(0);
        import(&mut state, &dump());
        let mut changed = dump();
        changed.providers[1].generation = 4;
        changed.consumers[0].row.generation = 6;
        let (set, written) = plan_import_providers(&state, &changed.providers).expect("plan");
        assert_eq!(written.providers, 1);
        assert!(matches!(&set.changes[0], Change::PutProvider { expected_generation: Some(3), .. }));
        let (set, _) = plan_import_consumers(&state, &changed.consumers).expect("plan");
        assert!(matches!(&set.changes[0], Change::PutConsumer { expected_generation: Some(5), .. }));
    }

    /// Clashes and missing references are refused, not overwritten.
    #[test]
    fn clashes_are_refused() {
        let mut state = State::with_standard_data(0);
        import(&mut state, &dump());
        let mut clash = dump();
        clash.providers[0].uuid = Uuid::from_u128(100);
        clash.providers[0].root = Uuid::from_u128(100);
        let err = plan_import_providers(&state, &clash.providers[..1]).expect_err("name clash");
        assert!(matches!(err, ModelError::DuplicateName(_)), "{err:?}");
        let orphan = provider(Uuid::from_u128(5), "orphan", Some(Uuid::from_u128(6)), Uuid::from_u128(6));
        assert!(plan_import_providers(&state, &[orphan]).is_err());
        let mut unknown = dump();
        unknown.providers[0].inventories.insert("CUSTOM_NOPE".into(), inventory(1));
        assert!(plan_import_providers(&state, &unknown.providers).is_err());
    }
}
