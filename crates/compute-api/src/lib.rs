//! The wire layer of berth's Nova-compatible compute API (OpenStack Nova 34,
//! microversions 2.1 to 2.104), and berth's agent, admin and identity
//! endpoints. The Glance image subset and the Blazar reservation API have
//! crates of their own (`berth-image-api`, `berth-reservation-api`); they
//! borrow [`api`]'s helpers and [`views::isotime`]/[`views::form_encode`].
//!
//!
//! - [`views`]: domain values (`berth-compute-model` types, which are not
//!   `Serialize`) to response bodies, per microversion;
//! - [`schemas`]: request-body JSON schemas, per microversion, in the
//!   draft-4 dialect of berth's validator (`berth_http::schema`).
//!
//! The handlers ([`handlers`], [`routes`], [`api`]) put them on the
//! berth-http foundation over the compute runtime (`berth-compute`).
//!
//! Views and schemas are pure functions: no I/O, no HTTP types, no clock
//! (times are the model's Unix seconds), no policy engine (callers pass
//! what policy allows as booleans). Handlers extract the microversion into
//! a [`ComputeVersion`], load the domain values, and call one view.
//!
//! # Microversions that change a body
//!
//! One line per microversion that changes a response (R) or request (Q)
//! body handled here, or removes a route (—); a microversion not listed
//! changes nothing here.
//!
//! | Version | Body | Change |
//! |---|---|---|
//! | 2.1  | all | base shapes (v2.0 compatible) |
//! | 2.2  | R keypair; Q keypair create | `type` (`ssh`, `x509`); create answers 201, delete 204 |
//! | 2.3  | R server | admin extended attributes: `OS-EXT-SRV-ATTR:hostname`, `kernel_id`, `launch_index`, `ramdisk_id`, `reservation_id`, `root_device_name`, `user_data` |
//! | 2.9  | R server | `locked` |
//! | 2.10 | Q keypair create, keypair queries | `user_id` (admins act for another user) |
//! | 2.11 | R service, Q service update | `forced_down`; legacy `PUT /os-services/force-down` |
//! | 2.13 | R server group | `project_id`, `user_id` |
//! | 2.14 | Q evacuate; R evacuate | `onSharedStorage` gone; no `adminPass` answer (200, no body) |
//! | 2.15 | Q server group create | `soft-affinity`, `soft-anti-affinity` policies |
//! | 2.16 | R server | `host_status` (policy: all, unknown-only, hidden) |
//! | 2.19 | R server, Q server create/update | `description` |
//! | 2.26 | R server | `tags` |
//! | 2.28 | R hypervisor | `cpu_info` is an object, not a JSON string |
//! | 2.29 | Q evacuate | `force` (taken as a requested host; berth's scheduler still checks it) |
//! | 2.32 | Q server create | `tag` on networks and block devices |
//! | 2.33 | R hypervisor list | `hypervisors_links` paging |
//! | 2.33 | Q server create | block-device `tag` dropped again (until 2.42) |
//! | 2.35 | R keypair list | `limit`, `marker`, `keypairs_links` |
//! | 2.36 | R quota set, limits; Q quota update | network quotas and limits gone (`fixed_ips`, `floating_ips`, `security_groups`, `security_group_rules`) |
//! | 2.37 | Q server create | `networks` required: `"none"`, `"auto"` or a list of uuids (network `tag` dropped until 2.42) |
//! | 2.40 | R tenant usage | `limit`/`marker` over servers, `tenant_usage[s]_links` |
//! | 2.39 | R limits | `maxImageMeta` gone |
//! | 2.41 | R aggregate | `uuid` |
//! | 2.42 | Q server create | `tag` on networks and block devices again |
//! | 2.43 | — | `/os-hosts` gone (404) |
//! | 2.47 | R server | embedded `flavor` (`vcpus`, `ram`, `disk`, `ephemeral`, `swap`, `original_name`, `extra_specs` if allowed) instead of a flavor link |
//! | 2.48 | R server diagnostics | Nova's standard shape instead of the driver's flat object |
//! | 2.50 | R quota class set; Q quota class update | `server_groups`, `server_group_members` shown; network quotas gone |
//! | 2.51 | R instance action | non-admins see events (without `traceback`) |
//! | 2.51 | Q server external events | `volume-extended` |
//! | 2.52 | Q server create | `tags` |
//! | 2.53 | R service, hypervisor; Q service update | uuid `id`s; `PUT /os-services/{id}` with `status`, `disabled_reason`, `forced_down` |
//! | 2.53 | — | `/os-hypervisors/{pattern}/search` and `/servers` gone (404) |
//! | 2.55 | R flavor; Q flavor create/update | `description`; `PUT /flavors/{id}` |
//! | 2.57 | R quota set, limits; Q server create, quota update | `personality` and the `injected_file*` quotas and limits gone |
//! | 2.57 | R quota class set; Q quota class update | the `injected_file*` quotas gone |
//! | 2.58 | R instance action | `updated_at`; paging `links` |
//! | 2.61 | R flavor | `extra_specs` (if allowed) |
//! | 2.62 | R instance action event | `hostId`; `host` (if events allowed) |
//! | 2.63 | R server; Q server create | `trusted_image_certificates` |
//! | 2.64 | R server group; Q server group create | `policy` + `rules` instead of `policies` + `metadata` |
//! | 2.67 | Q server create | block-device `volume_type` |
//! | 2.68 | Q evacuate | `force` gone again |
//! | 2.69 | R server, service | down-cell stubs (`status: UNKNOWN`) |
//! | 2.71 | R server (show, update; not detail) | `server_groups` |
//! | 2.73 | R server | `locked_reason` |
//! | 2.74 | Q server create | `host`, `hypervisor_hostname` |
//! | 2.75 | Q keypair queries | unknown query parameters refused |
//! | 2.75 | R flavor, server update, hypervisor | `swap` is `0` not `""`; `PUT /servers/{id}` answers the full server; `servers: []` when asked and none |
//! | 2.75 | Q tenant usage | unknown query parameters refused |
//! | 2.76 | Q server external events | `power-update` (needs `tag`) |
//! | 2.77 | Q unshelve | `null` or `{"availability_zone": name}` |
//! | 2.82 | Q server external events | `accelerator-request-bound` |
//! | 2.84 | R instance action event | `details` (if allowed) |
//! | 2.88 | R hypervisor | usage fields and `cpu_info` gone, `uptime` added |
//! | 2.88 | — | `/os-hypervisors/statistics` and `/{id}/uptime` gone (404) |
//! | 2.90 | R server; Q server create/update | `OS-EXT-SRV-ATTR:hostname` for everyone; `hostname` (RFC 1123 label) |
//! | 2.91 | Q unshelve | `availability_zone` may be `null` (unpin), `host` (admin) |
//! | 2.92 | Q keypair create | `public_key` required (no generation); names may hold `@` and `.` |
//! | 2.93 | Q server external events | `volume-reimaged` |
//! | 2.94 | Q server create/update | `hostname` may be an FQDN |
//! | 2.95 | Q evacuate | the evacuated server ends SHUTOFF |
//! | 2.96 | R server | `pinned_availability_zone` |
//! | 2.98 | R server | `image.properties` |
//! | 2.100 | R server | `scheduler_hints` |
//! | 2.102 | R flavor; Q flavor create | `rxtx_factor` and `OS-FLV-DISABLED:disabled` gone |
//! | 2.102 | Q extensions, audit log, quota class, diagnostics, server password | unknown query parameters refused |
//! | 2.104 | Q server update | `pinned_availability_zone` |
//!
//! # Fidelity
//!
//! Views follow Nova's view code (key order included). The tests check
//! them against Nova's api-samples templates and Nova 34's own response
//! schemas, and check every request schema against Nova's after a fixed
//! list of rewrites for keywords berth's validator lacks (see
//! [`schemas`]).
#![deny(missing_docs)]

pub mod api;
pub mod handlers;
pub mod keys;
mod policy_rules;
pub mod routes;
pub mod schemas;
mod version;
pub mod views;

pub use api::ComputeCtx;
pub use policy_rules::RULES;
pub use version::ComputeVersion;
