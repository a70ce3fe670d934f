//! Compute API tests: the real binary with real agent processes, each test
//! ending with the invariants of `support::check_invariants`.

mod agent_events;
mod api_gaps;
mod api_reads;
mod bad_input;
mod boot;
mod cells;
mod dashboard;
mod evacuate;
mod groups;
mod heal;
mod keypairs;
mod lease_end;
mod leases;
mod lending;
mod libvirt;
mod libvirt_moves;
mod live_migration;
mod lock;
mod metadata;
mod moves;
mod pause;
mod power;
mod prefilters;
mod pull;
mod quota;
mod race;
mod rebuild;
mod reschedule;
mod reserved;
mod reshape;
mod shelve;
mod snapshots;
pub(crate) mod support;
mod task_payload;
