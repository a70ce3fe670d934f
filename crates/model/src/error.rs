//! Typed errors of planning functions. The API crate maps each variant to an
//! HTTP status and a placement error `code` in exactly one table.

/// Why a planned write (or a lookup) was refused. The string is the
/// human-readable `detail` shown to the client; it never contains SQL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The named resource does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// A provider that is referenced by the request does not exist, reported
    /// as `placement.resource_provider.not_found` (400/404 per handler).
    #[error("{0}")]
    ProviderNotFound(String),
    /// The request is well-formed JSON but semantically invalid (400).
    #[error("{0}")]
    Invalid(String),
    /// A provider or consumer generation did not match (409,
    /// `placement.concurrent_update`).
    #[error("{0}")]
    GenerationConflict(String),
    /// Inventory cannot change because allocations use it (409,
    /// `placement.inventory.inuse`).
    #[error("{0}")]
    InventoryInUse(String),
    /// A name is already taken (409, `placement.duplicate_name`).
    #[error("{0}")]
    DuplicateName(String),
    /// A provider cannot be deleted because allocations use it (409,
    /// `placement.resource_provider.inuse`).
    #[error("{0}")]
    ProviderInUse(String),
    /// A provider cannot be deleted because it has children (409,
    /// `placement.resource_provider.cannot_delete_parent`).
    #[error("{0}")]
    CannotDeleteParent(String),
    /// Any other conflict (409, `placement.undefined_code`), e.g. a
    /// capacity violation or a resource class in use.
    #[error("{0}")]
    Conflict(String),
}
