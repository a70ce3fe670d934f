//! `ComputeError`: what compute planning can refuse, in the terms the API
//! maps to Nova's error bodies.

/// Why a compute plan was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputeError {
    /// The named thing does not exist (404 `itemNotFound`).
    #[error("{0}")]
    NotFound(String),
    /// The request is invalid (400 `badRequest`).
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with current state (409 `conflictingRequest`).
    #[error("{0}")]
    Conflict(String),
    /// A quota would be exceeded (403 `forbidden`, Nova's `OverQuota`).
    #[error("{0}")]
    OverQuota(String),
    /// Not allowed for this caller (403 `forbidden`).
    #[error("{0}")]
    Forbidden(String),
}
