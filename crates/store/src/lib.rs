//! The domain-level storage interface.
//!
//! A store does three things, all in placement terms (only backends know
//! SQL):
//!
//! - [`Store::load`] returns the whole control state (a [`World`]:
//!   placement plus the compute control tables) and the change sequence
//!   number it reflects (at start-up, or to resynchronise);
//! - [`Store::write`] runs one write transaction: inside it, the store first
//!   hands the caller every change committed by *other* processes since the
//!   sequence number the caller has seen (so the caller can bring its
//!   in-memory state up to date), then calls the caller's planning closure,
//!   and commits the [`WorldChangeSet`] it returns atomically and durably. Every
//!   generation precondition in the change set is compared-and-swapped
//!   inside the transaction; if one fails nothing is written and
//!   [`StoreError::Conflict`] is returned;
//! - [`Store::changes_since`] lets a process follow the writes of others
//!   (the change feed that keeps each process's snapshot fresh).
//!
//! A successful `write` means the transaction is durable (fsync'd by the
//! database).
#![deny(missing_docs)]

use berth_compute_model::{World, WorldChangeSet};

pub mod cell;
pub mod cell_sql;
pub mod json;
mod rows;
pub use cell::{CellOp, CellOutcome, CellStore, Expect, InstanceUpdate};
pub use rows::Rows;

#[cfg(feature = "testing")]
mod cell_testing;
#[cfg(feature = "testing")]
pub mod testing;

/// Position in the store's change feed. Strictly increasing in commit order.
pub type Seq = i64;

/// Errors a store can report.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A generation precondition or uniqueness constraint failed: another
    /// writer changed the data the plan was made against.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The change feed no longer holds every change after the caller's last
    /// seen sequence number (old entries were pruned): reload the snapshot
    /// with [`Store::load`] instead of catching up.
    #[error("change feed pruned past sequence {0}; reload required")]
    FeedGap(Seq),
    /// The database could not be reached or is not usable right now.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Anything else (corruption, bug). Never shown to API clients verbatim.
    #[error("store error: {0}")]
    Internal(String),
}

/// A full snapshot and the change sequence number it reflects.
#[derive(Debug)]
pub struct Loaded {
    /// The state.
    pub state: World,
    /// Last change included.
    pub seq: Seq,
}

/// Changes committed by other writers, in commit order.
pub type CatchUp = Vec<(Seq, WorldChangeSet)>;

/// The planning step run inside a write transaction. It receives the
/// changes committed by others since the caller's last seen sequence
/// number and returns the change set to commit, or `None` to roll back.
pub type PlanFn<'a> = dyn FnMut(CatchUp) -> Option<WorldChangeSet> + 'a;

/// A placement store backend.
pub trait Store: Send + Sync {
    /// Read the complete state.
    fn load(&self) -> Result<Loaded, StoreError>;

    /// Run one write transaction (see the crate docs). Returns the sequence
    /// number of the committed change, or `None` when the plan rolled back
    /// or had nothing to write.
    fn write(&self, seen: Seq, plan: &mut PlanFn<'_>) -> Result<Option<Seq>, StoreError>;

    /// Changes committed after `seen`, in commit order.
    fn changes_since(&self, seen: Seq) -> Result<CatchUp, StoreError>;

    /// Is the database reachable? (health checks)
    fn ping(&self) -> Result<(), StoreError>;

    /// A short name for logs and metrics ("sqlite", "postgres").
    fn backend_name(&self) -> &'static str;
}
