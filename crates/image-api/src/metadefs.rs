//! Glance's metadata definitions ("metadefs"): the schema documents at
//! `/v2/schemas/metadefs/{kind}`.
//!
//! The documents are Glance's own (`metadef_schemas.json`, one entry per
//! kind: `namespace(s)`, `object(s)`, `property`/`properties`, `tag(s)`,
//! `resource_type(s)`), generated from Glance 33's schema builders so that
//! clients (python-glanceclient validates metadef bodies against them)
//! see the same fields, patterns and required lists.

use std::sync::OnceLock;

use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::Value;

use crate::ImageCtx;

const SCHEMAS: &str = include_str!("metadef_schemas.json");

/// All metadef schema documents by kind (`namespace`, `namespaces`, ...).
pub fn schemas() -> &'static serde_json::Map<String, Value> {
    static PARSED: OnceLock<serde_json::Map<String, Value>> = OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str(SCHEMAS) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    })
}

/// `GET /image/v2/schemas/metadefs/{kind}`.
pub fn schema(_: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let kind = req.param(0);
    schemas()
        .get(kind)
        .map(|doc| Resp::ok(doc.clone()))
        .ok_or_else(|| ApiError::not_found("The resource could not be found."))
}
