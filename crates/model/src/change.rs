//! Change sets: the only way state changes.
//!
//! A change set is a list of row-level replacements produced by a planning
//! function. Each change that touches a provider or consumer carries the
//! generation the plan was made against; the store must refuse the whole
//! set (with a conflict) when the row in the database no longer has that
//! generation. That compare-and-swap is what keeps several processes (or a
//! stale snapshot) from ever committing a plan computed on outdated data.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::{AllocationMap, Inventory, Timestamp};

/// The scalar columns of a provider row.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRow {
    /// Internal id; creation order, used for list ordering.
    pub id: i64,
    /// Public identifier.
    pub uuid: Uuid,
    /// Unique name.
    pub name: String,
    /// Generation after this change.
    pub generation: i64,
    /// Parent provider, if any.
    pub parent: Option<Uuid>,
    /// Root of the provider's tree (itself for a root).
    pub root: Uuid,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update time.
    pub updated_at: Timestamp,
}

/// The scalar columns of a consumer row.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerRow {
    /// Consumer identifier.
    pub uuid: Uuid,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// Generation after this change.
    pub generation: i64,
    /// Consumer type (1.38), if set.
    pub consumer_type: Option<String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update time.
    pub updated_at: Timestamp,
}

/// One row-level change.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Insert (when `expected_generation` is `None`) or update a provider row.
    /// An update must find the row at `expected_generation`.
    PutProvider {
        /// New row contents.
        row: ProviderRow,
        /// Generation the row must have now; `None` means "must not exist".
        expected_generation: Option<i64>,
    },
    /// Delete a provider (and its inventories, traits, aggregates).
    DeleteProvider {
        /// Provider to delete.
        uuid: Uuid,
        /// Generation the row must have now.
        expected_generation: i64,
    },
    /// Replace all inventories of a provider.
    SetInventories {
        /// Provider.
        provider: Uuid,
        /// New inventories by resource class.
        inventories: BTreeMap<String, Inventory>,
    },
    /// Replace the traits of a provider.
    SetProviderTraits {
        /// Provider.
        provider: Uuid,
        /// New trait names.
        traits: BTreeSet<String>,
    },
    /// Replace the aggregates of a provider.
    SetProviderAggregates {
        /// Provider.
        provider: Uuid,
        /// New aggregate uuids.
        aggregates: BTreeSet<Uuid>,
    },
    /// Insert or update a consumer and replace all of its allocations.
    PutConsumer {
        /// New row contents.
        row: ConsumerRow,
        /// Generation the row must have now; `None` means "must not exist".
        expected_generation: Option<i64>,
        /// All allocations of the consumer after the change.
        allocations: AllocationMap,
    },
    /// Delete a consumer and its allocations.
    DeleteConsumer {
        /// Consumer to delete.
        uuid: Uuid,
        /// Generation the row must have now.
        expected_generation: i64,
    },
    /// Insert or update a resource class.
    PutResourceClass {
        /// Internal id.
        id: i64,
        /// Name.
        name: String,
        /// Creation time.
        created_at: Timestamp,
        /// Last update time, if ever updated.
        updated_at: Option<Timestamp>,
    },
    /// Delete a custom resource class.
    DeleteResourceClass {
        /// Name.
        name: String,
    },
    /// Insert a trait.
    PutTrait {
        /// Internal id.
        id: i64,
        /// Name.
        name: String,
        /// Creation time.
        created_at: Timestamp,
    },
    /// Delete a custom trait.
    DeleteTrait {
        /// Name.
        name: String,
    },
}

/// An ordered list of changes committed atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeSet {
    /// The changes, in the order they must be applied.
    pub changes: Vec<Change>,
}

impl ChangeSet {
    /// An empty change set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a change.
    pub fn push(&mut self, change: Change) {
        self.changes.push(change);
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// Indexes of `rows` ordered so that every parent precedes its children
/// (creation order otherwise). Loading must apply providers in this order:
/// after a re-parent (1.37) a child can have a smaller id than its parent.
pub fn parents_first(rows: &[ProviderRow]) -> Vec<usize> {
    let by_uuid: std::collections::HashMap<Uuid, usize> = rows.iter().enumerate().map(|(i, r)| (r.uuid, i)).collect();
    let mut placed = vec![false; rows.len()];
    let mut order = Vec::with_capacity(rows.len());
    for start in 0..rows.len() {
        let mut chain = Vec::new();
        let mut current = Some(start);
        while let Some(idx) = current {
            if placed[idx] || chain.contains(&idx) {
                break;
            }
            chain.push(idx);
            current = rows[idx].parent.and_then(|p| by_uuid.get(&p).copied());
        }
        for idx in chain.into_iter().rev() {
            placed[idx] = true;
            order.push(idx);
        }
    }
    order
}
