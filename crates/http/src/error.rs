//! `ApiError` and the one table that maps errors to HTTP status and the
//! placement error `code`.

use axum::http::StatusCode;
use berth_model::ModelError;
use berth_store::StoreError;

/// Placement error codes (placement/errors.py), shown from microversion 1.23.
pub mod codes {
    /// No specific code.
    pub const DEFAULT: &str = "placement.undefined_code";
    /// Inventory in use by allocations.
    pub const INVENTORY_INUSE: &str = "placement.inventory.inuse";
    /// Generation mismatch.
    pub const CONCURRENT_UPDATE: &str = "placement.concurrent_update";
    /// Name already used.
    pub const DUPLICATE_NAME: &str = "placement.duplicate_name";
    /// Provider has allocations.
    pub const PROVIDER_IN_USE: &str = "placement.resource_provider.inuse";
    /// Provider has children.
    pub const PROVIDER_CANNOT_DELETE_PARENT: &str = "placement.resource_provider.cannot_delete_parent";
    /// Referenced provider does not exist.
    pub const RESOURCE_PROVIDER_NOT_FOUND: &str = "placement.resource_provider.not_found";
    /// A query parameter was given twice.
    pub const ILLEGAL_DUPLICATE_QUERYPARAM: &str = "placement.query.duplicate_key";
    /// A query parameter has a bad value.
    pub const QUERYPARAM_BAD_VALUE: &str = "placement.query.bad_value";
    /// A query parameter is missing its value.
    pub const QUERYPARAM_MISSING_VALUE: &str = "placement.query.missing_value";
}

/// An error answered to the client in placement's error format.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human readable detail.
    pub detail: String,
    /// Placement error code (emitted from 1.23).
    pub code: &'static str,
    /// Extra headers (e.g. `allow` on 405).
    pub headers: Vec<(&'static str, String)>,
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with the default code.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self { status, detail: detail.into(), code: codes::DEFAULT, headers: Vec::new() }
    }

    /// Set the error code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// 400 Bad Request.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }

    /// 404 Not Found.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }

    /// 409 Conflict.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }

    /// 403 Forbidden.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, detail)
    }

    /// 500, without leaking internals.
    pub fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "An internal error occurred; see the server log.")
    }

    /// 503 when the database is unreachable.
    pub fn unavailable() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "The placement database is unavailable; retry later.")
    }

    /// Title as webob derives it from the status.
    pub fn title(&self) -> &'static str {
        status_title(self.status)
    }
}

/// The reason phrase webob uses as error title.
pub fn status_title(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Long",
        415 => "Unsupported Media Type",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => status.canonical_reason().unwrap_or("Error"),
    }
}

impl From<ModelError> for ApiError {
    fn from(err: ModelError) -> Self {
        match err {
            ModelError::NotFound(m) => ApiError::not_found(m),
            ModelError::ProviderNotFound(m) => ApiError::bad_request(m).with_code(codes::RESOURCE_PROVIDER_NOT_FOUND),
            ModelError::Invalid(m) => ApiError::bad_request(m),
            ModelError::GenerationConflict(m) => ApiError::conflict(m).with_code(codes::CONCURRENT_UPDATE),
            ModelError::InventoryInUse(m) => ApiError::conflict(m).with_code(codes::INVENTORY_INUSE),
            ModelError::DuplicateName(m) => ApiError::conflict(m).with_code(codes::DUPLICATE_NAME),
            ModelError::ProviderInUse(m) => ApiError::conflict(m).with_code(codes::PROVIDER_IN_USE),
            ModelError::CannotDeleteParent(m) => ApiError::conflict(m).with_code(codes::PROVIDER_CANNOT_DELETE_PARENT),
            ModelError::Conflict(m) => ApiError::conflict(m),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Conflict(_) => ApiError::conflict(
                "Another process changed the data this request was planned against; retry the request.",
            )
            .with_code(codes::CONCURRENT_UPDATE),
            StoreError::Unavailable(msg) => {
                tracing::error!(error = %msg, "database unavailable");
                ApiError::unavailable()
            }
            StoreError::FeedGap(seq) => {
                tracing::error!(seq, "change feed gap reached a client request");
                ApiError::internal()
            }
            StoreError::Rejected(msg) => {
                // Validation should have refused it first: worth a look.
                tracing::warn!(error = %msg, "the database refused a change");
                ApiError::bad_request("The request contains data the database cannot store.")
            }
            StoreError::Internal(msg) => {
                tracing::error!(error = %msg, "store failure");
                ApiError::internal()
            }
        }
    }
}
