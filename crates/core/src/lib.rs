//! The control plane's core, shared by every API: [`App`] holds the
//! in-memory snapshot of the control database and its one write path
//! (plan against the snapshot, apply, group-commit to the store, undo on
//! failure), plus the change-feed catch-up that keeps several processes on
//! one database in step. It knows nothing of HTTP: handlers of every API
//! crate call [`App::read`] and [`App::write`].

mod app;
pub mod import;
mod metrics;

pub use app::{now, App};
pub use metrics::CoreMetrics;
