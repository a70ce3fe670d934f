//! The domain-level storage interface.
//!
//! A store does two things: [`Store::load`] returns the whole placement
//! [`State`] (at start-up, or to resynchronise), and [`Store::commit`]
//! makes a [`ChangeSet`] durable atomically. `commit` enforces every
//! generation precondition in the change set inside its transaction (a
//! compare-and-swap on the provider/consumer row); when one fails, nothing
//! is written and [`StoreError::Conflict`] is returned. A successful return
//! means the transaction is durable (fsync'd by the database).
//!
//! Only the backend crates know SQL; this crate knows placement terms.
#![deny(missing_docs)]

use berth_model::{ChangeSet, State};

/// Errors a store can report.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A generation precondition or uniqueness constraint failed: another
    /// writer changed the data the plan was made against.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database could not be reached or is not usable right now.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Anything else (corruption, bug). Never shown to API clients verbatim.
    #[error("store error: {0}")]
    Internal(String),
}

/// A placement store backend.
pub trait Store: Send + Sync {
    /// Read the complete state.
    fn load(&self) -> Result<State, StoreError>;

    /// Commit a change set atomically and durably, checking its generation
    /// preconditions inside the transaction.
    fn commit(&self, changes: &ChangeSet) -> Result<(), StoreError>;

    /// A short name for logs and metrics ("sqlite", "postgres").
    fn backend_name(&self) -> &'static str;
}
