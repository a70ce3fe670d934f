//! inventories handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn get_inventories(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn create_inventory(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn set_inventories(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_inventories(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn get_inventory(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn update_inventory(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn delete_inventory(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
