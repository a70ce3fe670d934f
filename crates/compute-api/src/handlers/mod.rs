//! Handlers of the compute-side APIs, one module per area: `servers`,
//! `flavors`, `resources` (server groups, quotas,
//! limits, hypervisors, services, aggregates, zones, versions) and `agents`
//! (agent, admin and identity APIs).

pub mod agents;
pub mod flavors;
pub mod migrations;
pub mod resources;
pub mod servers;
