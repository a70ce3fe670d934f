//! `POST /reshaper` (1.30): atomically replace the inventories of several
//! providers and the allocations of several consumers, as upstream's
//! `handlers/reshaper.py`.

use std::collections::BTreeMap;

use berth_model::allocations::{self, ReshapeInventories};
use berth_model::Inventory;
use serde_json::{json, Value};

use super::allocations::{consumer_request, multi_schema};
use super::inventories::{int_field, inventory_from, put_all_schema};
use crate::app::now;
use crate::error::{codes, ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::App;

const UUID_PATTERN: &str = "^[0-9a-fA-F-]{36}$";

fn schema(req: &Req) -> Value {
    json!({
        "type": "object",
        "properties": {
            "inventories": {
                "type": "object",
                "patternProperties": {UUID_PATTERN: put_all_schema()},
                "minProperties": 1,
                "additionalProperties": false,
            },
            "allocations": multi_schema(req.version.1, 0),
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": false,
    })
}

/// `POST /reshaper`.
pub fn reshape(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:reshaper:reshape")?;
    let data = req.json_body(&schema(req))?;
    let mut inventories = Vec::new();
    for (raw, entry) in data.get("inventories").and_then(Value::as_object).into_iter().flatten() {
        let provider = super::resource_providers::path_uuid(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Resource provider {raw} in inventories not found: No resource provider with uuid {raw} found"
            ))
            .with_code(codes::RESOURCE_PROVIDER_NOT_FOUND)
        })?;
        let records: BTreeMap<String, Inventory> = entry
            .get("inventories")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(class, record)| (class.clone(), inventory_from(record)))
            .collect();
        inventories.push(ReshapeInventories {
            provider,
            generation: int_field(entry, "resource_provider_generation").unwrap_or(-1),
            inventories: records,
        });
    }
    let mut requests = Vec::new();
    for (raw, consumer_data) in data.get("allocations").and_then(Value::as_object).into_iter().flatten() {
        let consumer = crate::qparams::uuid_like(raw)
            .ok_or_else(|| ApiError::bad_request(format!("Malformed consumer_uuid: {raw}")))?;
        let (request, unnamed) = consumer_request(req, consumer, consumer_data);
        if let Some(raw) = unnamed {
            return Err(super::allocations::missing_provider(&raw));
        }
        requests.push(request);
    }
    let now = now();
    app.write(|state| Ok((allocations::plan_reshape(state, &inventories, &requests, now)?, ())))?;
    Ok(Resp::no_content())
}
