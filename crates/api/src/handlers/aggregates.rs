//! aggregates handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn get_aggregates(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}

/// Not built yet.
pub fn set_aggregates(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
