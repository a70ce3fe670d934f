//! Handlers of the compute-side APIs, one module per area: `servers`,
//! `flavors`, `resources` (server groups, quotas, limits, hypervisors,
//! services, aggregates, zones, versions), `keypairs`, `agents` (agent, admin and
//! identity APIs) and `credentials` (per-host agent credentials).

pub mod agents;
pub mod credentials;
pub mod flavors;
pub mod keypairs;
pub mod migrations;
pub mod resources;
pub mod servers;
