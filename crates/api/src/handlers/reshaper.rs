//! `POST /reshaper` (1.30): atomically replace the inventories of several
//! providers and the allocations of several consumers, as upstream's
//! `handlers/reshaper.py`.

use std::collections::BTreeMap;

use berth_model::allocations::{self, ReshapeInventories};
use berth_model::inventories::inventory_with_defaults;
use berth_model::{Inventory, Uuid};
use serde_json::{json, Value};

use super::allocations::{consumer_request, multi_schema};
use crate::app::now;
use crate::error::{codes, ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::App;

const MAX_INT: i64 = 0x7FFF_FFFF;
const SQL_SP_FLOAT_MAX: f64 = 3.40282e+38;
const UUID_PATTERN: &str = "^[0-9a-fA-F-]{36}$";
const RC_PATTERN: &str = "^[A-Z0-9_]+$";

/// Upstream's `PUT_INVENTORY_SCHEMA` (one provider's inventories).
fn inventories_schema() -> Value {
    let int = |minimum: i64| json!({"type": "integer", "maximum": MAX_INT, "minimum": minimum});
    let record = json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "total": int(1),
            "reserved": int(0),
            "min_unit": int(1),
            "max_unit": int(1),
            "step_size": int(1),
            "allocation_ratio": {"type": "number", "maximum": SQL_SP_FLOAT_MAX},
        },
        "required": ["total"],
        "additionalProperties": false,
    });
    json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "inventories": {"type": "object", "patternProperties": {RC_PATTERN: record}},
        },
        "required": ["resource_provider_generation", "inventories"],
        "additionalProperties": false,
    })
}

fn schema(req: &Req) -> Value {
    json!({
        "type": "object",
        "properties": {
            "inventories": {
                "type": "object",
                "patternProperties": {UUID_PATTERN: inventories_schema()},
                "minProperties": 1,
                "additionalProperties": false,
            },
            "allocations": multi_schema(req.version.1, 0),
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": false,
    })
}

fn int(value: &Value, name: &str) -> Option<i64> {
    let value = value.get(name)?;
    value.as_i64().or_else(|| value.as_f64().map(|f| f as i64))
}

fn inventory(data: &Value) -> Inventory {
    inventory_with_defaults(
        int(data, "total").unwrap_or(0),
        int(data, "reserved"),
        int(data, "min_unit"),
        int(data, "max_unit"),
        int(data, "step_size"),
        data.get("allocation_ratio").and_then(Value::as_f64),
    )
}

/// `POST /reshaper`.
pub fn reshape(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize(app, "placement:reshaper:reshape")?;
    let data = req.json_body(&schema(req))?;
    let mut inventories = Vec::new();
    for (raw, entry) in data.get("inventories").and_then(Value::as_object).into_iter().flatten() {
        let provider = Uuid::parse_str(raw).map_err(|_| {
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
            .map(|(class, record)| (class.clone(), inventory(record)))
            .collect();
        inventories.push(ReshapeInventories {
            provider,
            generation: int(entry, "resource_provider_generation").unwrap_or(-1),
            inventories: records,
        });
    }
    let mut requests = Vec::new();
    for (raw, consumer_data) in data.get("allocations").and_then(Value::as_object).into_iter().flatten() {
        let consumer = crate::qparams::uuid_like(raw)
            .ok_or_else(|| ApiError::bad_request(format!("Malformed consumer_uuid: {raw}")))?;
        requests.push(consumer_request(req, consumer, consumer_data)?);
    }
    let now = now();
    app.write(|state| Ok((allocations::plan_reshape(state, &inventories, &requests, now)?, ())))?;
    Ok(Resp::no_content())
}
