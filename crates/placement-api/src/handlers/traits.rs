//! `/traits` and `/resource_providers/{uuid}/traits` handlers (upstream
//! `handlers/trait.py`).

use axum::http::StatusCode;
use berth_model::traits::{self as model, TraitFilter};
use berth_model::Trait;
use serde_json::{json, Value};

use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::request::{Req, Resp};
use crate::{schema, App};

const INVALID_TRAIT: &str = "The trait is invalid. A valid trait must be no longer than 255 characters, start with \
                             the prefix \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"";

/// `CUSTOM_TRAIT`.
fn custom_trait_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^CUSTOM_[A-Z0-9_]+$"})
}

/// `SET_TRAITS_FOR_RP_SCHEMA`.
fn set_traits_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "traits": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 255}},
            "resource_provider_generation": {"type": "integer"}
        },
        "required": ["traits", "resource_provider_generation"],
        "additionalProperties": false
    })
}

/// `LIST_TRAIT_SCHEMA`.
fn list_query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "associated": {"type": "string"}},
        "additionalProperties": false
    })
}

fn trait_path(name: &str) -> String {
    format!("/traits/{name}")
}

/// Names of `traits` and the newest creation time among them (now when
/// there are none), as upstream's `_serialize_traits`.
fn serialize(traits: &[&Trait]) -> (Vec<String>, i64) {
    let names = traits.iter().map(|t| t.name.clone()).collect();
    let last_modified = traits.iter().map(|t| t.created_at).max().unwrap_or_else(now);
    (names, last_modified)
}

fn parse_filter(req: &Req) -> ApiResult<TraitFilter> {
    crate::qparams::validate_query_schema(req, &list_query_schema())?;
    let mut filter = TraitFilter::default();
    if let Some(name) = req.query_one("name") {
        let Some((op, value)) = name.split_once(':') else {
            return Err(ApiError::bad_request(format!(
                "Badly formatted name parameter. Expected name query string parameter in form: \
                 ?name=[in|startswith]:[name1,name2|prefix]. Got: \"{name}\""
            )));
        };
        match op {
            "in" => filter.name_in = Some(value.split(',').map(str::to_owned).collect()),
            "startswith" => filter.prefix = Some(value.to_owned()),
            _ => {}
        }
    }
    if let Some(associated) = req.query_one("associated") {
        filter.associated = match associated.to_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                return Err(ApiError::bad_request(
                    "The query parameter \"associated\" only accepts \"true\" or \"false\"",
                ))
            }
        };
    }
    Ok(filter)
}

/// `GET /traits` with the `name` and `associated` filters.
pub fn list_traits(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:traits:list")?;
    let filter = parse_filter(req)?;
    let world = app.read();
    let state = &world.placement;
    let (names, last_modified) = serialize(&model::list(state, &filter));
    Ok(Resp::ok(json!({"traits": names})).last_modified(req, last_modified))
}

/// `GET /traits/{name}`: 204 when it exists.
pub fn get_trait(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:traits:show")?;
    let world = app.read();
    let state = &world.placement;
    let found = model::get(state, req.param(0))?;
    Ok(Resp::no_content().last_modified(req, found.created_at))
}

/// `PUT /traits/{name}`: create a custom trait (201) or confirm it (204).
pub fn put_trait(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:traits:update")?;
    let name = req.param(0).to_owned();
    if !schema::is_valid(&custom_trait_schema(), &Value::String(name.clone())) {
        return Err(ApiError::bad_request(INVALID_TRAIT));
    }
    let existing = app.read().placement.traits.get(&name).cloned();
    let (found, created) = match existing {
        Some(found) => (found, false),
        None => app.write(|state| model::plan_ensure(state, &name, now()).map_err(Into::into))?,
    };
    let status = if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT };
    Ok(Resp::empty(status).location(req.url(&trait_path(&found.name))).last_modified(req, found.created_at))
}

/// `DELETE /traits/{name}`: custom traits no provider has.
pub fn delete_trait(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:traits:delete")?;
    let name = req.param(0).to_owned();
    app.write(|state| model::plan_delete(state, &name).map_err(Into::into))?;
    Ok(Resp::no_content())
}

/// `GET /resource_providers/{uuid}/traits`.
pub fn list_traits_for_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:traits:list")?;
    let world = app.read();
    let state = &world.placement;
    let (traits, generation) = model::provider_traits(state, req.param(0))?;
    let (names, last_modified) = serialize(&traits);
    let body = json!({"traits": names, "resource_provider_generation": generation});
    Ok(Resp::ok(body).last_modified(req, last_modified))
}

/// `PUT /resource_providers/{uuid}/traits`: replace the provider's traits.
pub fn update_traits_for_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:traits:update")?;
    let body = req.json_body(&set_traits_schema())?;
    // Validated as an integer: `3.0` is one, and one beyond 64 bits simply
    // matches no generation (409), as upstream.
    let generation = super::inventories::int_field(&body, "resource_provider_generation");
    let Some(generation) = generation else {
        return Err(ApiError::bad_request("JSON does not validate: resource_provider_generation is not an integer"));
    };
    let wanted: Vec<String> = body
        .get("traits")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let uuid = req.param(0).to_owned();
    let new_generation = app.write(|state| {
        model::plan_set_provider_traits(state, &uuid, &wanted, Some(generation), now()).map_err(Into::into)
    })?;
    let world = app.read();
    let state = &world.placement;
    let mut traits: Vec<&Trait> = state.traits.values().filter(|t| wanted.contains(&t.name)).collect();
    traits.sort_by_key(|t| t.id);
    let (names, last_modified) = serialize(&traits);
    let body = json!({"traits": names, "resource_provider_generation": new_generation});
    Ok(Resp::ok(body).last_modified(req, last_modified))
}

/// `DELETE /resource_providers/{uuid}/traits`: remove all of them.
pub fn delete_traits_for_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:traits:delete")?;
    let uuid = req.param(0).to_owned();
    app.write(|state| model::plan_set_provider_traits(state, &uuid, &[], None, now()).map_err(Into::into))?;
    Ok(Resp::no_content())
}
