//! The Glance v2 image subset berth serves at `/image/v2`: list, show,
//! create, delete, image data (upload and download, streamed to and from
//! a filesystem or S3 object store with Glance's checksums: [`data`],
//! [`objects`]), and the schema
//! documents clients fetch. Images carry the properties the scheduler reads
//! (`trait:*`, `hw_*`, `img_*`, `disk_format`).
//!
//! Owns: Glance's wire format ([`views`], [`schemas`], the error body in
//! [`routes`]) and the image route table. Images themselves are
//! compute-model control data (`berth_compute_model::Image`, written with
//! `plan_put_image` / `plan_delete_image`), because the compute API boots
//! from them and the lease runner snapshots into them; the visibility
//! rule both APIs apply is `Image::visible_to`.
//!
//! Must not: talk to a store crate directly (the tidy test checks it),
//! or need the compute runtime: handlers reach only the control state
//! and the image data directory ([`ImageCtx`]).
//!
//! It borrows the compute API's HTTP helpers (`berth_compute_api::api`:
//! body validation with Nova's messages, noauth2 roles, error mapping;
//! `views::isotime`), a dependency on a sibling on the same floor.

pub mod actions;
pub mod data;
pub mod handlers;
pub mod import;
pub mod listing;
pub mod members;
pub mod metadef_catalog;
pub mod metadef_tags;
pub mod metadefs;
pub mod objects;
pub mod patch;
pub mod routes;
pub mod schemas;
mod streamed;
pub mod views;

use std::sync::Arc;

pub use routes::image_api;

/// What image handlers reach.
pub struct ImageCtx {
    /// The control state (images live there).
    pub core: Arc<berth_core::App>,
    /// Where image data lives.
    pub store: Arc<data::ImageStore>,
}

impl std::fmt::Debug for ImageCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageCtx").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
