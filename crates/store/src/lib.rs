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
//!   in-memory state up to date), then calls the caller's planning closure
//!   with a [`MemberWrite`]. The closure writes each writer's
//!   [`WorldChangeSet`] through it, one at a time and each isolated (a
//!   savepoint): a change set the database refuses for its own sake
//!   ([`StoreError::is_per_change`]) is rolled back alone, and the others
//!   stay in the transaction. The store then commits atomically and
//!   durably. Any other error loses the whole transaction: nothing is
//!   committed and `write` returns that error;
//! - [`Store::changes_since`] lets a process follow the writes of others
//!   (the change feed that keeps each process's snapshot fresh).
//!
//! A successful `write` means the transaction is durable (fsync'd by the
//! database).
//!
//! It must not decide anything (plans are the pure crates') and knows no SQL
//! driver (only the backends do).
#![deny(missing_docs)]

use berth_compute_model::{World, WorldChangeSet};

pub mod cell;
pub mod cell_sql;
pub mod json;
mod json_fields;
pub mod lease_json;
pub mod placement_source;
mod rows;
pub use cell::{CellOp, CellOutcome, CellStore, Expect, InstanceUpdate, MigrationUpdate};
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
    /// The database refused this change for its own sake (a value it
    /// cannot hold, out of range, a check or constraint): the API should
    /// have refused it first.
    #[error("the database refused the change: {0}")]
    Rejected(String),
    /// Anything else (corruption, bug). Never shown to API clients verbatim.
    #[error("store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// Does the error belong to one change set, not to the database as a
    /// whole? Only that change set's writer fails; the transaction goes on.
    pub fn is_per_change(&self) -> bool {
        matches!(self, StoreError::Rejected(_) | StoreError::Conflict(_))
    }
}

impl Clone for StoreError {
    fn clone(&self) -> Self {
        match self {
            StoreError::Conflict(m) => StoreError::Conflict(m.clone()),
            StoreError::FeedGap(s) => StoreError::FeedGap(*s),
            StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
            StoreError::Rejected(m) => StoreError::Rejected(m.clone()),
            StoreError::Internal(m) => StoreError::Internal(m.clone()),
        }
    }
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

/// Writes one writer's change set inside the open transaction, isolated
/// from the others: on an error for which [`StoreError::is_per_change`]
/// holds, this change set alone is rolled back and the transaction goes
/// on; on any other error the transaction is lost and [`Store::write`]
/// fails with it.
pub type MemberWrite<'a> = dyn FnMut(&WorldChangeSet) -> Result<(), StoreError> + 'a;

/// The planning step run inside a write transaction. It receives the
/// changes committed by others since the caller's last seen sequence
/// number and a [`MemberWrite`]; it writes every change set through it and
/// returns the union of those that were written (the change-feed entry),
/// or `None` when nothing was.
pub type PlanFn<'a> = dyn FnMut(CatchUp, &mut MemberWrite<'_>) -> Option<WorldChangeSet> + 'a;

/// Run a backend's planning step: hand `plan` the catch-up and a
/// [`MemberWrite`] built on `write_isolated` (which writes one change set
/// under a savepoint). The first error that is not one change's own loses
/// the transaction: every later write gets it too, and it is returned
/// here, so the backend must not commit. Otherwise returns the non-empty
/// union of what was written, if any.
pub fn run_plan(
    plan: &mut PlanFn<'_>,
    catch_up: CatchUp,
    mut write_isolated: impl FnMut(&WorldChangeSet) -> Result<(), StoreError>,
) -> Result<Option<WorldChangeSet>, StoreError> {
    let mut lost: Option<StoreError> = None;
    let written = plan(catch_up, &mut |changes| {
        if let Some(err) = &lost {
            return Err(err.clone());
        }
        let result = write_isolated(changes);
        if let Err(err) = &result {
            if !err.is_per_change() {
                lost = Some(err.clone());
            }
        }
        result
    });
    match lost {
        Some(err) => Err(err),
        None => Ok(written.filter(|set| !set.is_empty())),
    }
}

/// Commit one change set outside group commit (start-up data, tests):
/// its refusal is the error.
pub fn write_one<S: Store + ?Sized>(store: &S, seen: Seq, changes: WorldChangeSet) -> Result<Option<Seq>, StoreError> {
    let mut once = Some(changes);
    let mut refused = None;
    let seq = store.write(seen, &mut |_, write| {
        let changes = once.take().filter(|c| !c.is_empty())?;
        match write(&changes) {
            Ok(()) => Some(changes),
            Err(err) => {
                refused = Some(err);
                None
            }
        }
    })?;
    match refused {
        Some(err) => Err(err),
        None => Ok(seq),
    }
}

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

    /// Can other processes write to this database, so that a process must
    /// follow the change feed to see their writes? (An embedded database
    /// serves one process: no.)
    fn shared(&self) -> bool {
        false
    }

    /// The sequence number of the newest committed change (0 when none
    /// or without a feed): one cheap query that tells a read barrier
    /// whether there is anything to catch up on.
    fn feed_head(&self) -> Result<Seq, StoreError> {
        Ok(0)
    }

    /// Hand `payload` to the other processes on this database that
    /// listen ([`Store::listen_peers`]). A hint, not a durable message:
    /// one sent while nobody listens, or lost with a connection, is gone,
    /// so what it tells must also be found another way. Nothing to do on a
    /// database no other process uses.
    fn notify_peers(&self, _payload: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// Call `on` with each payload another process hands over with
    /// [`Store::notify_peers`] (never this process's own), on a thread of
    /// the store's, reconnecting after a lost connection. Returns false
    /// when there are no peers to listen to.
    fn listen_peers(&self, _on: Box<dyn Fn(&str) + Send + Sync>) -> bool {
        false
    }
}
