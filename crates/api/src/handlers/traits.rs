//! traits handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn list_traits(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn get_trait(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn put_trait(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_trait(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn list_traits_for_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn update_traits_for_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_traits_for_resource_provider(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
