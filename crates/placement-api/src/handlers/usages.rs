//! `GET /resource_providers/{uuid}/usages` and `GET /usages` (1.9; grouped
//! by consumer type with `consumer_count` from 1.38), as upstream's
//! `handlers/usage.py`. Usages are "now": Last-Modified is the current time.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{State, Uuid};
use serde_json::{json, Map, Value};

use super::resource_providers::path_uuid;
use crate::app::now;
use crate::error::{ApiError, ApiResult};
use crate::policy::Target;
use crate::qparams::validate_query_schema;
use crate::request::{Req, Resp};
use crate::App;

/// `GET /resource_providers/{uuid}/usages`: every inventory class with its
/// usage (0 when unused).
pub fn list_usages(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:resource_providers:usages")?;
    let raw = req.param(0);
    let world = app.read();
    let state = &world.placement;
    let provider = path_uuid(raw).and_then(|uuid| state.provider(&uuid)).ok_or_else(|| {
        ApiError::not_found(format!(
            "No resource provider with uuid {raw} found: No resource provider with uuid {raw} found"
        ))
    })?;
    let usages: Map<String, Value> =
        provider.inventories.keys().map(|class| (class.clone(), json!(provider.used(class)))).collect();
    let body = json!({"resource_provider_generation": provider.row.generation, "usages": usages});
    Ok(Resp::ok(body).last_modified(req, now()))
}

fn query_schema(req: &Req) -> Value {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 255});
    let mut schema = json!({
        "type": "object",
        "properties": {"project_id": id, "user_id": id},
        "required": ["project_id"],
        "additionalProperties": false,
    });
    if req.at_least(38) {
        schema["properties"]["consumer_type"] = json!({
            "type": "string",
            "pattern": "^[A-Z0-9_]+$|^all|^unknown$",
            "minLength": 1,
            "maxLength": 255,
        });
    }
    schema
}

/// Usage per class and the set of consumers contributing, for the
/// consumers of `project_id` (and `user_id`) that `keep` selects.
#[derive(Default)]
struct Totals {
    usages: BTreeMap<String, i64>,
    consumers: BTreeSet<Uuid>,
}

fn totals_by<'a>(
    state: &'a State,
    project_id: &str,
    user_id: Option<&str>,
    mut group: impl FnMut(Option<&'a str>) -> Option<String>,
) -> BTreeMap<String, Totals> {
    let mut out: BTreeMap<String, Totals> = BTreeMap::new();
    for (uuid, consumer) in &state.consumers {
        if consumer.row.project_id != project_id || user_id.is_some_and(|u| consumer.row.user_id != u) {
            continue;
        }
        if consumer.allocations.is_empty() {
            continue;
        }
        let Some(key) = group(consumer.row.consumer_type.as_deref()) else { continue };
        let totals = out.entry(key).or_default();
        totals.consumers.insert(*uuid);
        for amounts in consumer.allocations.values() {
            for (class, amount) in amounts {
                *totals.usages.entry(class.clone()).or_insert(0) += amount;
            }
        }
    }
    out
}

/// `GET /usages?project_id=&user_id=[&consumer_type=]` (1.9).
pub fn get_total_usages(app: &App, req: &Req) -> ApiResult<Resp> {
    let project_id = req.query_one("project_id");
    let user_id = req.query_one("user_id");
    let mut target = Target::default();
    target.values.insert("project_id".to_owned(), project_id.unwrap_or("None").to_owned());
    req.authorize_target("placement:usages", &target)?;
    validate_query_schema(req, &query_schema(req))?;
    let project_id = project_id.unwrap_or("");
    let world = app.read();
    let state = &world.placement;
    let body = if req.at_least(38) {
        let wanted = req.query_one("consumer_type");
        let groups = totals_by(state, project_id, user_id, |ct| match wanted {
            None => Some(ct.unwrap_or("unknown").to_owned()),
            Some("all") => Some("all".to_owned()),
            Some("unknown") => ct.is_none().then(|| "unknown".to_owned()),
            Some(name) => (ct == Some(name)).then(|| name.to_owned()),
        });
        let mut usages = Map::new();
        for (key, totals) in groups {
            let mut group: Map<String, Value> =
                totals.usages.into_iter().map(|(class, used)| (class, json!(used))).collect();
            group.insert("consumer_count".to_owned(), json!(totals.consumers.len()));
            usages.insert(key, Value::Object(group));
        }
        json!({"usages": usages})
    } else {
        let groups = totals_by(state, project_id, user_id, |_| Some(String::new()));
        let usages: Map<String, Value> =
            groups.into_values().flat_map(|totals| totals.usages).map(|(class, used)| (class, json!(used))).collect();
        json!({"usages": usages})
    };
    Ok(Resp::ok(body).last_modified(req, now()))
}
