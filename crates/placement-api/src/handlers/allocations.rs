//! `/allocations/{consumer_uuid}` (GET, PUT, DELETE), `POST /allocations`
//! (1.13) and `GET /resource_providers/{uuid}/allocations`, as upstream's
//! `handlers/allocation.py`. The PUT body is a list of allocations before
//! 1.12 and a dict keyed by provider from 1.12; consumer generations are
//! required from 1.28, `mappings` accepted from 1.34, `consumer_type`
//! required from 1.38.

use berth_model::allocations::{self, AllocationError, ConsumerAllocations, ConsumerGeneration};
use berth_model::{AllocationMap, State, Uuid};
use serde_json::{json, Map, Value};

use super::resource_providers::path_uuid;
use crate::app::now;
use crate::error::{codes, ApiError, ApiResult};
use crate::qparams::uuid_like;
use crate::request::{Req, Resp};
use crate::App;

/// Project and user recorded for consumers written before 1.8 without them
/// (upstream's `incomplete_consumer_project_id` / `_user_id` default).
pub const INCOMPLETE_CONSUMER_ID: &str = "00000000-0000-0000-0000-000000000000";

const UUID_PATTERN: &str = "^[0-9a-fA-F-]{36}$";
const RC_PATTERN: &str = "^[A-Z0-9_]+$";
const GROUP_PATTERN: &str = "[a-zA-Z0-9_-]{1,64}";

fn resources_schema() -> Value {
    json!({
        "type": "object",
        "minProperties": 1,
        "patternProperties": {RC_PATTERN: {"type": "integer", "minimum": 1}},
        "additionalProperties": false,
    })
}

fn id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255})
}

/// `ALLOCATION_SCHEMA` (1.0-1.7) and `_V1_8` (1.8-1.11): the list form.
fn list_schema(with_owner: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "allocations": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "resource_provider": {
                            "type": "object",
                            "properties": {"uuid": {"type": "string", "format": "uuid"}},
                            "additionalProperties": false,
                            "required": ["uuid"],
                        },
                        "resources": resources_schema(),
                    },
                    "required": ["resource_provider", "resources"],
                    "additionalProperties": false,
                },
            },
        },
        "required": ["allocations"],
        "additionalProperties": false,
    });
    if with_owner {
        schema["properties"]["project_id"] = id_schema();
        schema["properties"]["user_id"] = id_schema();
        schema["required"] = json!(["allocations", "project_id", "user_id"]);
    }
    schema
}

/// The dict form of one consumer's allocations at `minor` (PUT from 1.12,
/// and each consumer of POST /allocations and the reshaper). `deletable`
/// allows an empty allocations object.
pub(crate) fn consumer_schema(minor: u16, deletable: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "allocations": {
                "type": "object",
                "minProperties": if deletable { 0 } else { 1 },
                "patternProperties": {
                    UUID_PATTERN: {
                        "type": "object",
                        "properties": {
                            "generation": {"type": "integer"},
                            "resources": resources_schema(),
                        },
                        "required": ["resources"],
                        "additionalProperties": false,
                    },
                },
                "additionalProperties": false,
            },
            "project_id": id_schema(),
            "user_id": id_schema(),
        },
        "additionalProperties": false,
        "required": ["allocations", "project_id", "user_id"],
    });
    let mut required = vec!["allocations", "project_id", "user_id"];
    if minor >= 28 {
        schema["properties"]["consumer_generation"] =
            json!({"type": ["integer", "null"], "additionalProperties": false});
        required.push("consumer_generation");
    }
    if minor >= 34 {
        schema["properties"]["mappings"] = json!({
            "type": "object",
            "minProperties": 1,
            "patternProperties": {
                GROUP_PATTERN: {"type": "array", "minItems": 1, "items": {"type": "string", "format": "uuid"}},
            },
        });
    }
    if minor >= 38 {
        schema["properties"]["consumer_type"] =
            json!({"type": "string", "pattern": RC_PATTERN, "minLength": 1, "maxLength": 255});
        required.push("consumer_type");
    }
    schema["required"] = json!(required);
    schema
}

/// The body of `POST /allocations` (and the reshaper's `allocations`, with
/// `min_properties` 0) at `minor`.
pub(crate) fn multi_schema(minor: u16, min_properties: u64) -> Value {
    // Upstream's POST_ALLOCATIONS_V1_13 is keyed by consumer with the
    // deletable 1.12 form; 1.28, 1.34 and 1.38 add to it.
    let minor = if minor >= 38 {
        38
    } else if minor >= 34 {
        34
    } else if minor >= 28 {
        28
    } else {
        12
    };
    json!({
        "type": "object",
        "minProperties": min_properties,
        "additionalProperties": false,
        "patternProperties": {UUID_PATTERN: consumer_schema(minor, true)},
    })
}

/// An integer from validated JSON (`3.0` counts as an integer).
fn int(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| value.as_f64().map(|f| f as i64))
}

pub(crate) fn missing_provider(raw: &str) -> ApiError {
    ApiError::bad_request(format!("Allocation for resource provider '{raw}' that does not exist."))
}

/// Dict-form allocations (`{rp_uuid: {"resources": {...}}}`) as a map,
/// and the first key that names no provider: upstream looks providers up
/// by the text, so a spelling other than the canonical one names none
/// (refused as a provider that does not exist, after the consumer
/// generations are checked, as upstream orders them).
fn allocation_map(allocations: &Map<String, Value>) -> (AllocationMap, Option<String>) {
    let mut out = AllocationMap::new();
    let mut unnamed = None;
    for (raw, entry) in allocations {
        let Some(provider) = path_uuid(raw) else {
            unnamed.get_or_insert_with(|| raw.clone());
            continue;
        };
        let amounts = out.entry(provider).or_default();
        amounts.clear();
        if let Some(resources) = entry.get("resources").and_then(Value::as_object) {
            for (class, amount) in resources {
                amounts.insert(class.clone(), int(amount).unwrap_or(0));
            }
        }
    }
    (out, unnamed)
}

/// One consumer's dict-form data (as validated) into a model request, and
/// the first allocation key that names no provider (see
/// [`allocation_map`]).
pub(crate) fn consumer_request(req: &Req, consumer: Uuid, data: &Value) -> (ConsumerAllocations, Option<String>) {
    let empty = Map::new();
    let (allocations, unnamed) = allocation_map(data.get("allocations").and_then(Value::as_object).unwrap_or(&empty));
    let request = ConsumerAllocations {
        consumer,
        project_id: text(data, "project_id"),
        user_id: text(data, "user_id"),
        generation: generation(req, data),
        consumer_type: consumer_type(req, data),
        allocations,
    };
    (request, unnamed)
}

fn text(data: &Value, name: &str) -> String {
    data.get(name).and_then(Value::as_str).unwrap_or(INCOMPLETE_CONSUMER_ID).to_owned()
}

fn generation(req: &Req, data: &Value) -> ConsumerGeneration {
    if !req.at_least(28) {
        return ConsumerGeneration::Unchecked;
    }
    match data.get("consumer_generation").and_then(int) {
        Some(g) => ConsumerGeneration::Is(g),
        None => ConsumerGeneration::New,
    }
}

fn consumer_type(req: &Req, data: &Value) -> Option<String> {
    if !req.at_least(38) {
        return None;
    }
    data.get("consumer_type").and_then(Value::as_str).map(str::to_owned)
}

/// The consumer uuid of a path or body key, normalised as upstream's
/// `str(uuid.UUID(...))`.
fn consumer_uuid(raw: &str) -> ApiResult<Uuid> {
    uuid_like(raw).ok_or_else(|| ApiError::bad_request(format!("Malformed consumer_uuid: {raw}")))
}

/// Error wording of `PUT /allocations/{c}`.
fn put_error(consumer: Uuid, err: AllocationError) -> ApiError {
    match err {
        AllocationError::ConsumerConflict(m) => ApiError::conflict(m).with_code(codes::CONCURRENT_UPDATE),
        AllocationError::ProviderMissing(m) => ApiError::bad_request(m),
        AllocationError::ClassNotFound(m) => {
            ApiError::bad_request(format!("Unable to allocate inventory for consumer {consumer}: {m}"))
        }
        AllocationError::InvalidInventory(m) => ApiError::conflict(format!("Unable to allocate inventory: {m}")),
    }
}

/// Error wording of `POST /allocations`.
fn post_error(err: AllocationError) -> ApiError {
    match err {
        AllocationError::ConsumerConflict(m) => ApiError::conflict(m).with_code(codes::CONCURRENT_UPDATE),
        AllocationError::ProviderMissing(m) => ApiError::bad_request(m),
        AllocationError::ClassNotFound(m) => ApiError::bad_request(format!("Unable to allocate inventory {m}")),
        AllocationError::InvalidInventory(m) => ApiError::conflict(format!("Unable to allocate inventory: {m}")),
    }
}

/// `GET /resource_providers/{uuid}/allocations`.
pub fn list_for_resource_provider(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:allocations:list")?;
    let raw = req.param(0);
    let world = app.read();
    let state = &world.placement;
    let provider = path_uuid(raw).and_then(|uuid| state.provider(&uuid)).ok_or_else(|| {
        ApiError::not_found(format!("Resource provider '{raw}' not found: No resource provider with uuid {raw} found"))
    })?;
    // Upstream's order: rows sorted by (class id, amount, row id), each
    // consumer where its first row falls, its classes in class-id order.
    let mut rows: Vec<(i64, i64, u64, &berth_model::Consumer, &str)> = Vec::new();
    for consumer_uuid in &provider.consumers {
        let Some(consumer) = state.consumers.get(consumer_uuid) else { continue };
        let Some(amounts) = consumer.allocations.get(&provider.uuid()) else { continue };
        for (class, used) in amounts {
            let class_id = state.resource_classes.get(class).map_or(i64::MAX, |rc| rc.id);
            rows.push((class_id, *used, consumer.written, consumer, class.as_str()));
        }
    }
    rows.sort_unstable_by_key(|(class_id, used, written, consumer, _)| (*class_id, *used, *written, consumer.row.uuid));
    let mut allocations = Map::new();
    let mut last_modified = None;
    for (_, used, _, consumer, class) in rows {
        let key = consumer.row.uuid.to_string();
        let entry = allocations.entry(key).or_insert_with(|| {
            let mut entry = json!({"resources": {}});
            if req.at_least(28) {
                entry["consumer_generation"] = json!(consumer.row.generation);
            }
            entry
        });
        entry["resources"][class] = json!(used);
        last_modified = last_modified.max(Some(consumer.row.updated_at));
    }
    let body = json!({
        "allocations": allocations,
        "resource_provider_generation": provider.row.generation,
    });
    Ok(Resp::ok(body).last_modified(req, last_modified.unwrap_or_else(now)))
}

/// `GET /allocations/{consumer_uuid}`: never 404, only empty.
pub fn list_for_consumer(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:allocations:list")?;
    let world = app.read();
    let state = &world.placement;
    let consumer = path_uuid(req.param(0)).and_then(|uuid| state.consumers.get(&uuid));
    let (body, last_modified) = match consumer.filter(|c| !c.allocations.is_empty()) {
        None => (json!({"allocations": {}}), now()),
        Some(consumer) => (consumer_json(req, state, consumer), consumer.row.updated_at),
    };
    Ok(Resp::ok(body).last_modified(req, last_modified))
}

fn consumer_json(req: &Req, state: &State, consumer: &berth_model::Consumer) -> Value {
    let mut allocations = Map::new();
    for (provider, amounts) in &consumer.allocations {
        let generation = state.provider(provider).map_or(0, |p| p.row.generation);
        allocations.insert(provider.to_string(), json!({"resources": amounts, "generation": generation}));
    }
    let mut body = json!({"allocations": allocations});
    if req.at_least(12) {
        body["project_id"] = json!(consumer.row.project_id);
        body["user_id"] = json!(consumer.row.user_id);
        if req.at_least(28) {
            body["consumer_generation"] = json!(consumer.row.generation);
        }
        if req.at_least(38) {
            body["consumer_type"] = json!(consumer.row.consumer_type.as_deref().unwrap_or("unknown"));
        }
    }
    body
}

/// `PUT /allocations/{consumer_uuid}`.
pub fn set_allocations_for_consumer(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:allocations:update")?;
    let consumer = consumer_uuid(req.param(0))?;
    let (request, unnamed) = if req.at_least(12) {
        let data = req.json_body(&consumer_schema(req.version.1, req.at_least(28)))?;
        consumer_request(req, consumer, &data)
    } else {
        let data = req.json_body(&list_schema(req.at_least(8)))?;
        let mut allocations = AllocationMap::new();
        for item in data.get("allocations").and_then(Value::as_array).into_iter().flatten() {
            let raw = item.pointer("/resource_provider/uuid").and_then(Value::as_str).unwrap_or("");
            let provider = path_uuid(raw).ok_or_else(|| missing_provider(raw))?;
            let amounts: berth_model::ClassAmounts = item
                .get("resources")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(class, amount)| (class.clone(), int(amount).unwrap_or(0)))
                .collect();
            allocations.insert(provider, amounts);
        }
        let request = ConsumerAllocations {
            consumer,
            project_id: text(&data, "project_id"),
            user_id: text(&data, "user_id"),
            generation: ConsumerGeneration::Unchecked,
            consumer_type: None,
            allocations,
        };
        (request, None)
    };
    let now = now();
    app.write(|state| {
        if let Some(raw) = &unnamed {
            allocations::check_consumer_generations(state, std::slice::from_ref(&request))
                .map_err(|e| put_error(consumer, e))?;
            return Err(missing_provider(raw));
        }
        let set = allocations::plan_replace_allocations(state, std::slice::from_ref(&request), now)
            .map_err(|e| put_error(consumer, e))?;
        Ok((set, ()))
    })?;
    Ok(Resp::no_content())
}

/// `POST /allocations` (1.13): several consumers at once; an empty
/// `allocations` removes that consumer's allocations.
pub fn set_allocations(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:allocations:manage")?;
    let data = req.json_body(&multi_schema(req.version.1, 1))?;
    let mut requests = Vec::new();
    let mut unnamed = None;
    for (raw, consumer_data) in data.as_object().into_iter().flatten() {
        let consumer = consumer_uuid(raw)?;
        let (request, unnamed_here) = consumer_request(req, consumer, consumer_data);
        requests.push(request);
        unnamed = unnamed.or(unnamed_here);
    }
    let now = now();
    app.write(|state| {
        if let Some(raw) = &unnamed {
            allocations::check_consumer_generations(state, &requests).map_err(post_error)?;
            return Err(missing_provider(raw));
        }
        let set = allocations::plan_replace_allocations(state, &requests, now).map_err(post_error)?;
        Ok((set, ()))
    })?;
    Ok(Resp::no_content())
}

/// `DELETE /allocations/{consumer_uuid}`.
pub fn delete_allocations(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:allocations:delete")?;
    let raw = req.param(0);
    // Upstream looks the raw string up: only the canonical form matches.
    let Some(consumer) = path_uuid(raw) else {
        return Err(ApiError::not_found(format!("No allocations for consumer '{raw}'")));
    };
    app.write(|state| Ok((allocations::plan_delete_allocations(state, consumer)?, ())))?;
    Ok(Resp::no_content())
}
