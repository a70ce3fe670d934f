//! Pure placement domain model.
//!
//! Everything placement knows lives in a [`State`]: providers with their
//! inventories, traits and aggregates, consumers with their allocations,
//! resource classes and traits. Every write is *planned* against a `State`
//! by a pure function that validates it and returns a [`ChangeSet`]; the
//! store commits the change set (checking the generation preconditions
//! inside its transaction) and only then is it applied to the in-memory
//! `State` with [`State::apply`]. No function here does I/O or reads the
//! clock: timestamps are passed in.
//!
//! It must not depend on anything that does I/O, async or serialisation (the
//! tidy test checks).
#![deny(missing_docs)]

mod change;
mod error;
mod state;
#[cfg(test)]
mod test_support;

pub mod aggregates;
pub mod allocations;
pub mod import;
pub mod inventories;
pub mod providers;
pub mod query;
pub mod resource_classes;
pub mod search_index;
pub mod traits;

pub use change::{parents_first, Change, ChangeSet, ConsumerRow, ProviderRow};
pub use error::ModelError;
pub use state::{
    standard_resource_classes, standard_traits, Consumer, Inventory, Provider, ResourceClass, State, Trait,
    CUSTOM_RESOURCE_CLASS_BASE_ID,
};
pub use uuid::Uuid;

/// Seconds since the Unix epoch. Passed in by the caller; the model never
/// reads the clock.
pub type Timestamp = i64;

/// Allocations of one consumer: provider uuid -> resource class -> amount,
/// both levels in the order they were written (the request body's order),
/// which is the order upstream lists them in `GET /allocations/{consumer}`.
/// Equality ignores the order.
pub type AllocationMap = indexmap::IndexMap<Uuid, ClassAmounts>;

/// One provider's part of an allocation: resource class -> amount, in
/// written order.
pub type ClassAmounts = indexmap::IndexMap<String, i64>;

/// Result alias for model operations.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
