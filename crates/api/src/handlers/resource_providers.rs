//! resource_providers handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn list_resource_providers(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn create_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn get_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn update_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
