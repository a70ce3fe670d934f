//! Handlers of the compute-side APIs, one module per area: `servers`,
//! `flavors`, `resources` (server groups, quotas and quota classes,
//! limits, hypervisors, services, aggregates, zones, versions,
//! extensions), `keypairs`, `hosts` (`os-hosts` and the hypervisor routes
//! of older microversions), `images` (the image proxy), `usage` (tenant usage, the usage audit log),
//! `events` (server external events), `agents` (agent, admin and identity
//! APIs) and `credentials` (per-host agent credentials).

pub mod agents;
pub mod credentials;
pub mod events;
pub mod flavors;
pub mod hosts;
pub mod images;
pub mod keypairs;
pub mod migrations;
pub mod resources;
pub mod servers;
pub mod usage;
