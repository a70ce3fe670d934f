//! Handlers of the compute-side APIs, one module per area: `servers`,
//! `flavors`, `images` (Glance), `resources` (server groups, quotas,
//! limits, hypervisors, services, aggregates, zones, versions) and `agents`
//! (agent, admin and identity APIs).

pub mod agents;
pub mod flavors;
pub mod images;
pub mod migrations;
pub mod resources;
pub mod servers;
