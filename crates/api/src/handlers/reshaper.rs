//! reshaper handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn reshape(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
