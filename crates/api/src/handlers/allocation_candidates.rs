//! allocation_candidates handlers.

use crate::error::ApiResult;
use crate::request::{Req, Resp};
use crate::App;

/// Not built yet.
pub fn list_allocation_candidates(_app: &App, _req: &Req) -> ApiResult<Resp> {
    Err(super::not_implemented())
}
