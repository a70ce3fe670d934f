//! Pure compute control-plane model (Nova's API database and cell
//! databases, in berth's terms).
//!
//! Two kinds of data live here:
//!
//! - **Control data**, held by the control database next to placement and
//!   kept in memory as a [`ComputeState`]: flavors, images, server groups,
//!   cell mappings, host mappings, compute-node references, instance
//!   mappings, build requests, request specs, quotas and host aggregates.
//!   [`World`] joins it with placement's [`berth_model::State`], and every
//!   control write is a [`WorldChangeSet`] planned against the whole world
//!   by a pure function ([`plan`]) and applied with [`World::apply`], the
//!   one mutation path. That is what lets a boot's quota admission, its
//!   server-group policy and its placement claims be one write.
//! - **Cell data** ([`cell`]): instances, services, compute nodes, instance
//!   actions and faults. It lives in each cell's own database and is read
//!   with queries, not kept in memory.
//!
//! The reservation tables ([`lease`]) are control data too, so their types
//! live here, where `World` and [`ComputeChange`] need them; the plans over
//! them are `berth-reservation-model`'s, one floor up.
//!
//! No I/O, no clock (timestamps are arguments), no serde.
#![deny(missing_docs)]

pub mod cell;
pub mod choice;
mod error;
pub mod extra_specs;
pub mod heal;
pub mod lease;
pub mod moves;
pub mod plan;
pub mod pull;
pub mod quota;
pub mod rehome;
mod state;
mod types;
mod world;

pub use error::ComputeError;
pub use state::{ComputeChange, ComputeState, Counted, OwnersEpoch, RowKey};
pub use types::*;
pub use world::{World, WorldChange, WorldChangeSet};

/// Seconds since the Unix epoch (the model never reads the clock).
pub type Timestamp = berth_model::Timestamp;

/// The consumer type of an instance's placement allocations (placement 1.38).
pub const CONSUMER_TYPE_INSTANCE: &str = "INSTANCE";
/// The consumer type of a migration's allocations.
pub const CONSUMER_TYPE_MIGRATION: &str = "MIGRATION";
/// The trait nova sets on the compute node provider of a disabled service.
pub const COMPUTE_STATUS_DISABLED: &str = "COMPUTE_STATUS_DISABLED";
