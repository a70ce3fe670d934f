//! `/resource_providers/{uuid}/inventories[/{resource_class}]`: list, set
//! all, add one, show one, update one, delete one, delete all (1.5), as
//! upstream's `handlers/inventory.py`.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use berth_model::inventories::{self, ReservedRule};
use berth_model::{Inventory, Provider, State, Uuid};
use serde_json::{json, Map, Value};

use super::resource_providers::path_uuid;
use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::App;

const MAX_INT: i64 = 0x7FFF_FFFF;
const SQL_SP_FLOAT_MAX: f64 = 3.40282e+38;
const RC_PATTERN: &str = "^[A-Z0-9_]+$";

/// Upstream's `BASE_INVENTORY_SCHEMA` fields.
fn record_properties() -> Value {
    let int = |minimum: i64| json!({"type": "integer", "maximum": MAX_INT, "minimum": minimum});
    json!({
        "resource_provider_generation": {"type": "integer"},
        "total": int(1),
        "reserved": int(0),
        "min_unit": int(1),
        "max_unit": int(1),
        "step_size": int(1),
        "allocation_ratio": {"type": "number", "maximum": SQL_SP_FLOAT_MAX},
    })
}

fn base_schema() -> Value {
    json!({
        "type": "object",
        "properties": record_properties(),
        "required": ["total", "resource_provider_generation"],
        "additionalProperties": false,
    })
}

fn post_schema() -> Value {
    let mut properties = record_properties();
    properties["resource_class"] = json!({"type": "string", "pattern": RC_PATTERN});
    json!({
        "type": "object",
        "properties": properties,
        "required": ["total", "resource_class"],
        "additionalProperties": false,
    })
}

/// Upstream's `PUT_INVENTORY_SCHEMA` (one provider's inventories); the
/// reshaper uses it per provider.
pub(super) fn put_all_schema() -> Value {
    let record = json!({
        "type": "object",
        "properties": record_properties(),
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

/// An integer field; JSON Schema "integer" also admits `3.0`.
pub(super) fn int_field(data: &Value, name: &str) -> Option<i64> {
    let value = data.get(name)?;
    value.as_i64().or_else(|| value.as_f64().map(|f| f as i64))
}

/// An inventory record from validated JSON, with upstream's defaults.
pub(super) fn inventory_from(data: &Value) -> Inventory {
    inventories::inventory_with_defaults(
        int_field(data, "total").unwrap_or(0),
        int_field(data, "reserved"),
        int_field(data, "min_unit"),
        int_field(data, "max_unit"),
        int_field(data, "step_size"),
        data.get("allocation_ratio").and_then(Value::as_f64),
    )
}

fn inventory_json(inventory: &Inventory) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("total".into(), json!(inventory.total));
    out.insert("reserved".into(), json!(inventory.reserved));
    out.insert("min_unit".into(), json!(inventory.min_unit));
    out.insert("max_unit".into(), json!(inventory.max_unit));
    out.insert("step_size".into(), json!(inventory.step_size));
    out.insert("allocation_ratio".into(), json!(inventory.allocation_ratio));
    out
}

/// One inventory with the provider generation (omitted when 0, as
/// upstream's `if generation:` does).
fn one_inventory(inventory: &Inventory, generation: i64) -> Value {
    let mut out = inventory_json(inventory);
    if generation != 0 {
        out.insert("resource_provider_generation".into(), json!(generation));
    }
    Value::Object(out)
}

fn all_inventories(inventories: &BTreeMap<String, Inventory>, generation: i64) -> Value {
    let by_class: Map<String, Value> =
        inventories.iter().map(|(class, inv)| (class.clone(), Value::Object(inventory_json(inv)))).collect();
    json!({"resource_provider_generation": generation, "inventories": by_class})
}

fn reserved_rule(req: &Req) -> ReservedRule {
    if req.at_least(26) {
        ReservedRule::UpToTotal
    } else {
        ReservedRule::LessThanTotal
    }
}

fn provider_not_found(raw: &str) -> ApiError {
    ApiError::not_found(format!("No resource provider with uuid {raw} found"))
}

/// The provider uuid of the path, which must exist (404 otherwise, as
/// upstream loads the provider before reading the body).
fn existing_provider(app: &App, req: &Req) -> ApiResult<Uuid> {
    let raw = req.param(0);
    let uuid = path_uuid(raw).ok_or_else(|| provider_not_found(raw))?;
    if app.read().placement.provider(&uuid).is_none() {
        return Err(provider_not_found(raw));
    }
    Ok(uuid)
}

/// The provider named in a read path, or upstream's (doubled) 404 message.
fn provider_for_read<'s>(state: &'s State, raw: &str) -> ApiResult<&'s Provider> {
    let not_found = || {
        let inner = format!("No resource provider with uuid {raw} found");
        ApiError::not_found(format!("{inner} : {inner}"))
    };
    let uuid = path_uuid(raw).ok_or_else(not_found)?;
    state.provider(&uuid).ok_or_else(not_found)
}

/// `GET /resource_providers/{uuid}/inventories`.
pub fn get_inventories(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:inventories:list")?;
    let raw = req.param(0);
    let world = app.read();
    let state = &world.placement;
    let provider = provider_for_read(state, raw)?;
    let body = all_inventories(&provider.inventories, provider.row.generation);
    Ok(Resp::ok(body).last_modified(req, provider.row.updated_at))
}

/// `POST /resource_providers/{uuid}/inventories`: add one class (201).
pub fn create_inventory(app: &App, req: &Req) -> ApiResult<Resp> {
    req.require_json()?;
    req.authorize("placement:resource_providers:inventories:create")?;
    let uuid = existing_provider(app, req)?;
    let data = req.json_body(&post_schema())?;
    let class = data["resource_class"].as_str().unwrap_or_default().to_owned();
    let inventory = inventory_from(&data);
    let rule = reserved_rule(req);
    let at = now();
    let generation = app.write(|state| {
        inventories::plan_create_inventory(state, uuid, &class, inventory.clone(), rule, at).map_err(Into::into)
    })?;
    Ok(Resp::json(StatusCode::CREATED, one_inventory(&inventory, generation))
        .location(req.url(&format!("/resource_providers/{uuid}/inventories/{class}")))
        .last_modified(req, at))
}

/// `PUT /resource_providers/{uuid}/inventories`: replace all.
pub fn set_inventories(app: &App, req: &Req) -> ApiResult<Resp> {
    req.require_json()?;
    req.authorize("placement:resource_providers:inventories:update")?;
    let uuid = existing_provider(app, req)?;
    let data = req.json_body(&put_all_schema())?;
    let generation = int_field(&data, "resource_provider_generation").unwrap_or(-1);
    let wanted: BTreeMap<String, Inventory> = data["inventories"]
        .as_object()
        .map(|records| records.iter().map(|(class, record)| (class.clone(), inventory_from(record))).collect())
        .unwrap_or_default();
    let rule = reserved_rule(req);
    let at = now();
    let new_generation = app.write(|state| {
        inventories::plan_set_inventories(state, uuid, generation, wanted.clone(), rule, at).map_err(Into::into)
    })?;
    Ok(Resp::ok(all_inventories(&wanted, new_generation)).last_modified(req, at))
}

/// `DELETE /resource_providers/{uuid}/inventories` (1.5): remove all.
pub fn delete_inventories(app: &App, req: &Req) -> ApiResult<Resp> {
    // Upstream's `version_handler('1.5', status_code=405)`: older versions
    // get 405 rather than the usual 404 for a missing endpoint.
    if !req.at_least(5) {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("The method {} is not allowed for this resource.", req.method),
        ));
    }
    req.authorize("placement:resource_providers:inventories:delete")?;
    let uuid = existing_provider(app, req)?;
    let at = now();
    app.write(|state| Ok((inventories::plan_delete_all_inventories(state, uuid, at)?, ())))?;
    Ok(Resp::no_content())
}

/// `GET /resource_providers/{uuid}/inventories/{resource_class}`.
pub fn get_inventory(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:inventories:show")?;
    let raw = req.param(0);
    let class = req.param(1);
    let world = app.read();
    let state = &world.placement;
    let provider = provider_for_read(state, raw)?;
    let inventory = provider
        .inventories
        .get(class)
        .ok_or_else(|| ApiError::not_found(format!("No inventory of class {class} for {raw}")))?;
    Ok(Resp::ok(one_inventory(inventory, provider.row.generation)).last_modified(req, provider.row.updated_at))
}

/// `PUT /resource_providers/{uuid}/inventories/{resource_class}`.
pub fn update_inventory(app: &App, req: &Req) -> ApiResult<Resp> {
    req.require_json()?;
    req.authorize("placement:resource_providers:inventories:update")?;
    let uuid = existing_provider(app, req)?;
    let class = req.param(1).to_owned();
    let data = req.json_body(&base_schema())?;
    let generation = int_field(&data, "resource_provider_generation").unwrap_or(-1);
    let inventory = inventory_from(&data);
    let rule = reserved_rule(req);
    let at = now();
    let new_generation = app.write(|state| {
        inventories::plan_update_inventory(state, uuid, &class, generation, inventory.clone(), rule, at)
            .map_err(Into::into)
    })?;
    Ok(Resp::ok(one_inventory(&inventory, new_generation)).last_modified(req, at))
}

/// `DELETE /resource_providers/{uuid}/inventories/{resource_class}`.
pub fn delete_inventory(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:inventories:delete")?;
    let uuid = existing_provider(app, req)?;
    let class = req.param(1).to_owned();
    let at = now();
    app.write(|state| Ok((inventories::plan_delete_inventory(state, uuid, &class, at)?, ())))?;
    Ok(Resp::no_content())
}
