//! `/resource_providers` and `/resource_providers/{uuid}`: list (with the
//! filters of 1.3-1.39), create, show, update (rename, parent changes) and
//! delete, as upstream's `handlers/resource_provider.py`.

use axum::http::StatusCode;
use berth_model::{providers, query, Uuid};
use serde_json::{json, Value};

use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::qparams;
use crate::request::{Req, Resp};
use crate::{wire, App};

/// The uuid in a path segment, only in its canonical (lowercase, dashed)
/// form: upstream compares the string with the stored one.
pub(crate) fn path_uuid(raw: &str) -> Option<Uuid> {
    qparams::canonical_uuid(raw)
}

/// The provider a uuid-like text names, for the planner: the uuid when the
/// text is canonical, otherwise one that no provider has (upstream finds
/// no provider by another spelling, so the planner answers as for a
/// provider that does not exist).
pub(crate) fn provider_ref(state: &berth_model::State, text: &str) -> Uuid {
    path_uuid(text).unwrap_or_else(|| absent_provider(state))
}

/// A uuid no provider of `state` has.
pub(crate) fn absent_provider(state: &berth_model::State) -> Uuid {
    let mut n = u128::MAX;
    while state.providers.contains_key(&Uuid::from_u128(n)) {
        n -= 1;
    }
    Uuid::from_u128(n)
}

fn name_schema() -> Value {
    json!({"type": "string", "maxLength": 200})
}

fn parent_schema() -> Value {
    json!({"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]})
}

fn post_schema(req: &Req) -> Value {
    let mut properties = json!({"name": name_schema(), "uuid": {"type": "string", "format": "uuid"}});
    if req.at_least(14) {
        properties["parent_provider_uuid"] = parent_schema();
    }
    json!({"type": "object", "properties": properties, "required": ["name"], "additionalProperties": false})
}

fn put_schema(req: &Req) -> Value {
    let mut properties = json!({"name": name_schema()});
    if req.at_least(14) {
        properties["parent_provider_uuid"] = parent_schema();
    }
    json!({"type": "object", "properties": properties, "required": ["name"], "additionalProperties": false})
}

/// The query schema of `GET /resource_providers` for the request's version.
fn list_query_schema(req: &Req) -> Value {
    let mut properties = json!({
        "name": {"type": "string"},
        "uuid": {"type": "string", "format": "uuid"},
    });
    if req.at_least(3) {
        properties["member_of"] = json!({"type": "string"});
    }
    if req.at_least(4) {
        properties["resources"] = json!({"type": "string"});
    }
    if req.at_least(14) {
        properties["in_tree"] = json!({"type": "string", "format": "uuid"});
    }
    if req.at_least(18) {
        properties["required"] = json!({"type": "string"});
    }
    json!({"type": "object", "properties": properties, "additionalProperties": false})
}

/// A uuid given as a string (body or query): parsed leniently as upstream
/// accepts any uuid-like form.
fn parse_uuid(text: &str) -> ApiResult<Uuid> {
    qparams::uuid_like(text).ok_or_else(|| ApiError::bad_request(format!("Invalid uuid {text}")))
}

/// `GET /resource_providers`.
pub fn list_resource_providers(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:list")?;
    qparams::validate_query_schema(req, &list_query_schema(req))?;
    let mut filter = query::ProviderFilter::default();
    // A uuid or in_tree value that is not in canonical form matches no
    // stored provider (upstream compares strings). An unknown in_tree
    // provider ends the query before traits and classes are looked up; a
    // uuid that matches nothing does not.
    let mut uuid_matches_nothing = false;
    let mut tree_matches_nothing = false;
    let member_of: Vec<&str> = req.query_all("member_of").collect();
    if !member_of.is_empty() {
        (filter.member_of, filter.forbidden_aggregates) =
            qparams::normalize_member_of_params(&member_of, req.version, "")?;
    }
    let required: Vec<&str> = req.query_all("required").collect();
    if !required.is_empty() {
        (filter.required_traits, filter.forbidden_traits) = qparams::normalize_traits_params(&required, req.version)?;
    }
    if let Some(uuid) = req.query_one("uuid").filter(|v| !v.is_empty()) {
        match path_uuid(uuid) {
            Some(uuid) => filter.uuid = Some(uuid),
            None => uuid_matches_nothing = true,
        }
    }
    if let Some(name) = req.query_one("name").filter(|v| !v.is_empty()) {
        filter.name = Some(name.to_owned());
    }
    if let Some(in_tree) = req.query_one("in_tree").filter(|v| !v.is_empty()) {
        match path_uuid(in_tree) {
            Some(uuid) => filter.in_tree = Some(uuid),
            None => tree_matches_nothing = true,
        }
    }
    if let Some(resources) = req.query_one("resources") {
        filter.resources = qparams::normalize_resources(resources)?;
    }
    let world = app.read();
    let state = &world.placement;
    let mut found = if tree_matches_nothing { Vec::new() } else { query::list_providers(state, &filter)? };
    if uuid_matches_nothing {
        found.clear();
    }
    let last_modified = found.iter().map(|p| p.row.updated_at.max(p.row.created_at)).max().unwrap_or_else(now);
    // Written one provider at a time: a large cloud's listing would
    // otherwise exist as a tree of JSON values (several KiB per provider)
    // next to its bytes.
    let mut out = Vec::with_capacity(64 + found.len() * 600);
    out.extend_from_slice(b"{\"resource_providers\":[");
    for (i, p) in found.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &wire::provider(req, p)).map_err(|_| ApiError::internal())?;
    }
    out.extend_from_slice(b"]}");
    Ok(Resp::raw_json(StatusCode::OK, out).last_modified(req, last_modified))
}

/// `POST /resource_providers`: 201 without body before 1.20, 200 with the
/// provider from 1.20; `Location` either way.
pub fn create_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.require_json()?;
    req.authorize("placement:resource_providers:create")?;
    let body = req.json_body(&post_schema(req))?;
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    let uuid = match body.get("uuid").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(text) => parse_uuid(text)?,
        None => Uuid::new_v4(),
    };
    let parent = body.get("parent_provider_uuid").and_then(Value::as_str);
    let row = app.write(|state| {
        let parent = parent.map(|text| provider_ref(state, text));
        providers::plan_create_provider(state, uuid, &name, parent, now()).map_err(Into::into)
    })?;
    let location = req.url(&format!("/resource_providers/{uuid}"));
    if !req.at_least(20) {
        return Ok(Resp::empty(StatusCode::CREATED).location(location));
    }
    Ok(Resp::ok(wire::provider_row(req, &row)).location(location).last_modified(req, row.created_at))
}

/// `GET /resource_providers/{uuid}`.
pub fn get_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:show")?;
    let raw = req.param(0);
    let not_found = || ApiError::not_found(format!("No resource provider with uuid {raw} found"));
    let uuid = path_uuid(raw).ok_or_else(not_found)?;
    let world = app.read();
    let state = &world.placement;
    let provider = state.provider(&uuid).ok_or_else(not_found)?;
    let modified = provider.row.updated_at.max(provider.row.created_at);
    Ok(Resp::ok(wire::provider(req, provider)).last_modified(req, modified))
}

/// `DELETE /resource_providers/{uuid}`.
pub fn delete_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:delete")?;
    let raw = req.param(0);
    let uuid = path_uuid(raw)
        .ok_or_else(|| ApiError::not_found(format!("No resource provider with uuid {raw} found for delete")))?;
    app.write(|state| Ok((providers::plan_delete_provider(state, uuid)?, ())))?;
    Ok(Resp::no_content())
}

/// `PUT /resource_providers/{uuid}`: rename and, from 1.14, set the parent
/// (re-parenting and un-parenting from 1.37).
pub fn update_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.require_json()?;
    req.authorize("placement:resource_providers:update")?;
    let raw = req.param(0);
    let not_found = || ApiError::not_found(format!("No resource provider with uuid {raw} found"));
    let uuid = path_uuid(raw).ok_or_else(not_found)?;
    if app.read().placement.provider(&uuid).is_none() {
        return Err(not_found());
    }
    let body = req.json_body(&put_schema(req))?;
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    let allow_reparenting = req.at_least(37);
    let row = app.write(|state| {
        let parent = match body.get("parent_provider_uuid") {
            None => None,
            Some(Value::String(text)) => Some(Some(provider_ref(state, text))),
            Some(_) => Some(None),
        };
        providers::plan_update_provider(state, uuid, &name, parent, allow_reparenting, now()).map_err(Into::into)
    })?;
    Ok(Resp::ok(wire::provider_row(req, &row)).last_modified(req, row.updated_at))
}
