//! [`ServiceError`]: why an operation of the compute runtime failed, and
//! how the runtime's own errors (control writes, stores, cells) become
//! one. Every operation module returns it; it uses none of them.

use berth_compute_model::ComputeError;
use berth_store::StoreError;

use crate::cells::CellError;
use crate::control::WriteError;

/// Why a server operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Refused by the model (404, 400, 409, 403 quota, ...).
    #[error(transparent)]
    Refused(#[from] ComputeError),
    /// A database is unavailable (503).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (500; details logged).
    #[error("{0}")]
    Internal(String),
}

impl From<WriteError> for ServiceError {
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::Refused(e) => ServiceError::Refused(e),
            WriteError::Store(e) => e.into(),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable(m) => ServiceError::Unavailable(m),
            StoreError::Conflict(m) => {
                ServiceError::Refused(ComputeError::Conflict(format!("Concurrent update, retry the request: {m}")))
            }
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<CellError> for ServiceError {
    fn from(err: CellError) -> Self {
        match err {
            CellError::Store(e) => e.into(),
            other => ServiceError::Unavailable(other.to_string()),
        }
    }
}
