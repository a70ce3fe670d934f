//! `GET /`: the version document.

use serde_json::json;

use crate::app::now;
use crate::error::ApiResult;
use crate::microversion::{MAX_VERSION, MIN_VERSION};
use crate::request::{Req, Resp};
use crate::App;

/// The version discovery document; needs no token.
pub fn home(_app: &App, req: &Req) -> ApiResult<Resp> {
    let body = json!({
        "versions": [{
            "id": "v1.0",
            "max_version": MAX_VERSION.to_string(),
            "min_version": MIN_VERSION.to_string(),
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }]
    });
    Ok(Resp::ok(body).last_modified(req, now()))
}
