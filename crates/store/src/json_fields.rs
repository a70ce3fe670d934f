//! The field readers and writers of the stored JSON rows, shared by
//! [`crate::json`] (compute rows) and [`crate::lease_json`] (reservation
//! rows). Both codecs import these and neither imports the other's
//! helpers: `json` only dispatches the reservation row kinds to
//! `lease_json`, so the modules form a chain, not a knot.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::StoreError;

/// A stored row that could not be decoded.
pub(crate) type Result<T> = std::result::Result<T, StoreError>;

pub(crate) fn bad(what: &str) -> StoreError {
    StoreError::Internal(format!("malformed stored JSON: {what}"))
}

pub(crate) fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value> {
    v.get(key).ok_or_else(|| bad(key))
}

pub(crate) fn s(v: &Value, key: &str) -> Result<String> {
    field(v, key)?.as_str().map(str::to_owned).ok_or_else(|| bad(key))
}

pub(crate) fn opt_s(v: &Value, key: &str) -> Result<Option<String>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_str().map(|t| Some(t.to_owned())).ok_or_else(|| bad(key)),
    }
}

pub(crate) fn i(v: &Value, key: &str) -> Result<i64> {
    field(v, key)?.as_i64().ok_or_else(|| bad(key))
}

pub(crate) fn opt_i(v: &Value, key: &str) -> Result<Option<i64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_i64().map(Some).ok_or_else(|| bad(key)),
    }
}

pub(crate) fn f(v: &Value, key: &str) -> Result<f64> {
    field(v, key)?.as_f64().ok_or_else(|| bad(key))
}

pub(crate) fn b(v: &Value, key: &str) -> Result<bool> {
    field(v, key)?.as_bool().ok_or_else(|| bad(key))
}

pub(crate) fn uuid(v: &Value, key: &str) -> Result<Uuid> {
    Uuid::parse_str(&s(v, key)?).map_err(|_| bad(key))
}

pub(crate) fn opt_uuid(v: &Value, key: &str) -> Result<Option<Uuid>> {
    opt_s(v, key)?.map(|t| Uuid::parse_str(&t).map_err(|_| bad(key))).transpose()
}

pub(crate) fn str_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}

pub(crate) fn get_str_map(v: &Value, key: &str) -> Result<BTreeMap<String, String>> {
    let Some(obj) = v.get(key).and_then(Value::as_object) else { return Ok(BTreeMap::new()) };
    obj.iter().map(|(k, x)| x.as_str().map(|t| (k.clone(), t.to_owned())).ok_or_else(|| bad(key))).collect()
}

pub(crate) fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    let Some(list) = v.get(key).and_then(Value::as_array) else { return Ok(Vec::new()) };
    list.iter().map(|x| x.as_str().map(str::to_owned).ok_or_else(|| bad(key))).collect()
}

pub(crate) fn uuids(v: &Value, key: &str) -> Result<Vec<Uuid>> {
    strings(v, key)?.iter().map(|t| Uuid::parse_str(t).map_err(|_| bad(key))).collect()
}

pub(crate) fn uuid_list(list: &[Uuid]) -> Value {
    Value::Array(list.iter().map(|u| Value::String(u.to_string())).collect())
}

pub(crate) fn hints(map: &BTreeMap<String, Vec<String>>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

pub(crate) fn get_hints(v: &Value, key: &str) -> Result<BTreeMap<String, Vec<String>>> {
    let Some(obj) = v.get(key).and_then(Value::as_object) else { return Ok(BTreeMap::new()) };
    let mut out = BTreeMap::new();
    for (k, x) in obj {
        let list = x.as_array().ok_or_else(|| bad(key))?;
        out.insert(
            k.clone(),
            list.iter().map(|y| y.as_str().map(str::to_owned).ok_or_else(|| bad(key))).collect::<Result<_>>()?,
        );
    }
    Ok(out)
}
