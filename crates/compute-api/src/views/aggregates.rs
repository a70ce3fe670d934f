//! `/os-aggregates` bodies (Nova's `aggregates.py` `_marshall_aggregate`).

use serde_json::{json, Map, Value};

use berth_compute_model::Aggregate;

use super::{opt_str, string_map, strtime, strtime_or_null, wrap};
use crate::ComputeVersion;

/// One aggregate, keys in Nova's object-field order: `id`, `uuid` (2.41+),
/// `name`, `hosts`, `metadata`, `created_at`, `updated_at`, `deleted_at`
/// (always `null`), `deleted` (always `false`), `availability_zone` (the
/// `availability_zone` metadata, or `null`). Times are naive ISO with
/// microseconds, as Nova prints them.
pub fn item(version: ComputeVersion, aggregate: &Aggregate) -> Value {
    let mut body = Map::new();
    body.insert("id".into(), json!(aggregate.id));
    if version.at_least(41) {
        body.insert("uuid".into(), json!(aggregate.uuid.to_string()));
    }
    body.insert("name".into(), json!(aggregate.name));
    body.insert("hosts".into(), json!(aggregate.hosts));
    body.insert("metadata".into(), string_map(&aggregate.metadata));
    body.insert("created_at".into(), json!(strtime(aggregate.created_at)));
    body.insert("updated_at".into(), strtime_or_null(aggregate.updated_at));
    body.insert("deleted_at".into(), Value::Null);
    body.insert("deleted".into(), json!(false));
    body.insert("availability_zone".into(), opt_str(aggregate.availability_zone()));
    Value::Object(body)
}

/// The body of `GET /os-aggregates/{id}`, `PUT /os-aggregates/{id}` and
/// the `add_host`, `remove_host` and `set_metadata` actions.
pub fn show(version: ComputeVersion, aggregate: &Aggregate) -> Value {
    wrap("aggregate", item(version, aggregate))
}

/// The `POST /os-aggregates` body: the aggregate without `hosts` and
/// `metadata` (as Nova's v2 API answered).
pub fn create(version: ComputeVersion, aggregate: &Aggregate) -> Value {
    let mut body = item(version, aggregate);
    if let Value::Object(map) = &mut body {
        map.remove("hosts");
        map.remove("metadata");
    }
    wrap("aggregate", body)
}

/// The `GET /os-aggregates` body.
pub fn index(version: ComputeVersion, aggregates: &[Aggregate]) -> Value {
    wrap("aggregates", Value::Array(aggregates.iter().map(|a| item(version, a)).collect()))
}
