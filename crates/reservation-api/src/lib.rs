//! The reservation API (Blazar v1, mounted at `/reservation/v1`, or at the
//! root of `--reservation-listen`): leases, `os-hosts` with properties and
//! allocations, and berth's extensions (`/availability`, `?dry_run=true`).
//!
//! Owns: Blazar's wire format (request parsing, response bodies, dates,
//! error body, policy rules; [`dates`], [`views`]) and the route table
//! ([`routes`]); the reserved-server hints of `POST /servers` and the
//! boot extension that admits their lease ([`reserved`]). Handlers ([`handlers`]) extract and validate, call
//! `berth-reservation-model`'s plans through the control write path, and
//! wake the lease runner of `berth-reservations`.
//!
//! Must not: talk to a store crate directly (the tidy test checks it),
//! hold lease logic (admission and events are `berth-reservation-model`'s
//! and `berth-reservations`'), or be depended on by anything but the
//! process wiring (`berth-cli`).
//!
//! It borrows the compute API's HTTP helpers (`berth_compute_api::api`:
//! body parsing, noauth2 roles, the mapping of compute errors to HTTP),
//! because the reservation API shares them with Nova (Blazar's API runs
//! on the same oslo stack); that is a dependency on a sibling on the same
//! floor, never on a crate above.

pub mod dates;
pub mod handlers;
pub mod reserved;
pub mod routes;
pub mod views;

use std::sync::Arc;

use berth_reservations::Reservations;

pub use handlers::RULES;
pub use routes::reservation_api;
pub use views::lease_view;

/// What reservation handlers reach.
pub struct ReservationCtx {
    /// The lease runtime (and, through it, the compute runtime and clock).
    pub reservations: Arc<Reservations>,
    /// The control state.
    pub core: Arc<berth_core::App>,
    /// Where the API is mounted on this listener (`/reservation`, or ``
    /// on a dedicated listener).
    pub prefix: &'static str,
}

impl std::fmt::Debug for ReservationCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationCtx").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}
