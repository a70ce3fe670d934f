//! Handlers, one module per resource. Each handler: authorize, extract and
//! validate input, call the model (read the snapshot or plan a write via
//! `App::write`), convert to the wire shape.

pub mod aggregates;
pub mod allocation_candidates;
pub mod allocations;
pub mod inventories;
pub mod reshaper;
pub mod resource_classes;
pub mod resource_providers;
pub mod root;
pub mod traits;
pub mod usages;
