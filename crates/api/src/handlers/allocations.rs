//! allocations handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn list_for_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn set_allocations(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn list_for_consumer(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn set_allocations_for_consumer(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_allocations(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
