//! Pure lease planning (Blazar's manager decisions, berth's rules):
//! host enrolment, lease admission and updates, events, healing, and the
//! capacity queries of the reservation API.
//!
//! Owns: every plan that takes the control `World` and returns a
//! `WorldChangeSet` for a lease or a reservable host, and the Blazar query
//! language (`Query`). The lease *types* (`Lease`, `ReservableHost`,
//! `LeaseTables`, ...) stay in `berth_compute_model::lease`, because the
//! control `World` holds them and `ComputeChange` carries them; this crate
//! sits one floor up, beside `berth-scheduler`, and depends on
//! `berth-compute-model` (never the other way round).
//!
//! Must not: do I/O, read the clock (times are arguments), use serde, or
//! depend on a runtime, store or API crate (the tidy test in
//! `crates/cli/tests/tidy.rs` checks the pure list).
//!
//! Admission is a plan like any other control write: it reads the current
//! bookings, chooses hosts (or slots on hosts) and returns one `PutLease`.
//! Because plans run one at a time on the caught-up state inside the
//! batch's transaction, two creates for the last host in a window cannot
//! both be admitted, in one process or several.
//!
//! Reserved servers (a boot admitted with its lease, held until the lease
//! starts) are [`reserved`]'s.
//!
//! Capacity over time: a whole-host booking excludes every other booking
//! of that host in an overlapping window; instance slots on a host fit when
//! the *peak* concurrent usage of the host inside the requested window plus
//! the new slots stays within the host's vCPUs, RAM and disk.
//!
//! The plans go by family, one private module each, everything
//! re-exported at the crate root: the query language (`query`),
//! admission (`admission`), updates and deletes (`updates`), events
//! (`events`), reservable hosts (`hosts`), healing (`heal`) and the
//! availability queries (`availability`); then the public modules below.
#![deny(missing_docs)]

mod admission;
mod availability;
pub mod capacity;
pub mod end_policy;
mod events;
mod heal;
mod hosts;
pub mod lending;
pub mod power;
mod query;
pub mod reserved;
pub mod resources;
mod updates;

pub use admission::{
    check_amount, check_min_max, plan_create_lease, plan_create_lease_ending, LeaseRequest, ReservationRequest,
    ACTIVE_SLOTS_KEPT, MINUTES_BEFORE_END, NOT_ENOUGH_HOSTS,
};
pub use availability::{blocking_leases, earliest_window};
pub(crate) use events::finish_lease;
pub use events::{due_events, event_blocked_by, plan_event_begin, plan_event_finish, start_blocked_by};
pub use heal::plan_heal_host;
pub(crate) use heal::{heal_lease, replace_hosts};
pub use hosts::{
    host_allows, plan_delete_host, plan_enrol_host, plan_set_host_reservable, plan_set_property_private,
    plan_update_host, HostEnrolment,
};
pub use query::{hypervisor_field, Op, Prop, Query};
pub use updates::{plan_delete_lease, plan_update_lease, LeaseUpdate, ParseQuery, ReservationUpdate};

type Result<T> = std::result::Result<T, berth_compute_model::ComputeError>;

#[cfg(test)]
mod tests;
