//! `/resource_classes` handlers (upstream `handlers/resource_class.py`).
//!
//! PUT changes meaning at 1.7: up to 1.6 it renames a custom class (JSON
//! body `{"name": ...}`), from 1.7 it is a bodiless idempotent create
//! (201 created, 204 already there).

use axum::http::StatusCode;
use berth_model::{resource_classes as model, ResourceClass};
use serde_json::{json, Value};

use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::{schema, App};

/// `POST_RC_SCHEMA_V1_2` (also `PUT_RC_SCHEMA_V1_2`).
fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255}
        },
        "required": ["name"],
        "additionalProperties": false
    })
}

fn class_path(name: &str) -> String {
    format!("/resource_classes/{name}")
}

fn class_json(rc: &ResourceClass) -> Value {
    json!({
        "name": rc.name,
        "links": [{"rel": "self", "href": class_path(&rc.name)}],
    })
}

fn body_name(body: &Value) -> ApiResult<String> {
    body.get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request("JSON does not validate: 'name' is a required property"))
}

/// `GET /resource_classes`: all classes in id order.
pub fn list_resource_classes(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_classes:list")?;
    let world = app.read();
    let state = &world.placement;
    let classes = model::list(state);
    // Standard classes have no modification time: upstream then uses now.
    let mut last_modified: Option<i64> = None;
    let mut any_unknown = false;
    for rc in &classes {
        match model::last_modified(rc) {
            Some(at) => last_modified = Some(last_modified.map_or(at, |m| m.max(at))),
            None => any_unknown = true,
        }
    }
    let when = if any_unknown { now() } else { last_modified.unwrap_or_else(now) };
    let body = json!({"resource_classes": classes.iter().map(|rc| class_json(rc)).collect::<Vec<_>>()});
    Ok(Resp::ok(body).last_modified(req, when))
}

/// `POST /resource_classes`: create a custom class.
pub fn create_resource_class(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_classes:create")?;
    let body = req.json_body(&name_schema())?;
    let name = body_name(&body)?;
    let rc = app.write(|state| model::plan_create(state, &name, now()).map_err(Into::into))?;
    Ok(Resp::empty(StatusCode::CREATED).location(req.url(&class_path(&rc.name))))
}

/// `GET /resource_classes/{name}`.
pub fn get_resource_class(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_classes:show")?;
    let world = app.read();
    let state = &world.placement;
    let rc = model::get(state, req.param(0))?;
    let when = model::last_modified(rc).unwrap_or_else(now);
    Ok(Resp::ok(class_json(rc)).last_modified(req, when))
}

/// `PUT /resource_classes/{name}`: rename (1.2–1.6) or ensure (1.7+).
pub fn update_resource_class(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_classes:update")?;
    let name = req.param(0).to_owned();
    if req.at_least(7) {
        schema::validate(&name_schema(), &json!({"name": name}))
            .map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))?;
        let existing = app.read().placement.resource_classes.get(&name).cloned();
        let (rc, created) = match existing {
            Some(rc) => (rc, false),
            None => app.write(|state| model::plan_ensure(state, &name, now()).map_err(Into::into))?,
        };
        let status = if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT };
        return Ok(Resp::empty(status).location(req.url(&class_path(&rc.name))));
    }
    let body = req.json_body(&name_schema())?;
    let new_name = body_name(&body)?;
    let rc = app.write(|state| model::plan_rename(state, &name, &new_name, now()).map_err(Into::into))?;
    Ok(Resp::ok(class_json(&rc)))
}

/// `DELETE /resource_classes/{name}`: custom classes not in use only.
pub fn delete_resource_class(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_classes:delete")?;
    let name = req.param(0).to_owned();
    app.write(|state| model::plan_delete(state, &name).map_err(Into::into))?;
    Ok(Resp::no_content())
}
