//! `/resource_providers/{uuid}/aggregates` handlers (upstream
//! `handlers/aggregate.py`). Before 1.19 the body is a bare list and the
//! generation is neither checked nor bumped; from 1.19 the body is
//! `{"aggregates": [...], "resource_provider_generation": N}` and responses
//! carry the generation.

use berth_model::aggregates as model;
use berth_model::Uuid;
use serde_json::{json, Value};

use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::App;

/// First microversion whose aggregates carry the provider generation.
const INCLUDE_GENERATION: u16 = 19;

/// `_AGGREGATES_LIST_SCHEMA`.
fn list_schema() -> Value {
    json!({"type": "array", "items": {"type": "string", "format": "uuid"}, "uniqueItems": true})
}

/// `PUT_AGGREGATES_SCHEMA_V1_19`.
fn put_schema_1_19() -> Value {
    json!({
        "type": "object",
        "properties": {
            "aggregates": list_schema(),
            "resource_provider_generation": {"type": "integer"}
        },
        "required": ["aggregates", "resource_provider_generation"],
        "additionalProperties": false
    })
}

fn respond(req: &Req, aggregates: Vec<String>, generation: i64) -> Resp {
    let mut body = json!({"aggregates": aggregates});
    if req.at_least(INCLUDE_GENERATION) {
        body["resource_provider_generation"] = json!(generation);
    }
    // Upstream records no time for aggregate associations and uses now.
    Resp::ok(body).last_modified(req, now())
}

/// `GET /resource_providers/{uuid}/aggregates`.
pub fn get_aggregates(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:aggregates:list")?;
    let world = app.read();
    let state = &world.placement;
    let (aggregates, generation) = model::provider_aggregates(state, req.param(0))?;
    Ok(respond(req, aggregates.iter().map(Uuid::to_string).collect(), generation))
}

/// `PUT /resource_providers/{uuid}/aggregates`: replace the provider's
/// aggregates.
pub fn set_aggregates(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:aggregates:update")?;
    let uuid = req.param(0).to_owned();
    // Upstream looks the provider up before reading the body.
    model::find_provider(&app.read().placement, &uuid)?;
    let consider_generation = req.at_least(INCLUDE_GENERATION);
    let (list, expected) = if consider_generation {
        let body = req.json_body(&put_schema_1_19())?;
        // Validated as an integer: `3.0` is one, and one beyond 64 bits
        // simply matches no generation (409), as upstream.
        let generation = super::inventories::int_field(&body, "resource_provider_generation");
        (body.get("aggregates").cloned().unwrap_or(Value::Null), generation)
    } else {
        (req.json_body(&list_schema())?, None)
    };
    if consider_generation && expected.is_none() {
        return Err(ApiError::bad_request("JSON does not validate: resource_provider_generation is not an integer"));
    }
    let given: Vec<String> = list
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let parsed = given
        .iter()
        .map(|s| {
            crate::qparams::uuid_like(s)
                .ok_or_else(|| ApiError::bad_request(format!("JSON does not validate: '{s}' is not a 'uuid'")))
        })
        .collect::<ApiResult<Vec<Uuid>>>()?;
    let generation =
        app.write(|state| model::plan_set_aggregates(state, &uuid, &parsed, expected, now()).map_err(Into::into))?;
    Ok(respond(req, given, generation))
}
