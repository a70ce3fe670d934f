//! A small JSON Schema (draft 4/7 subset) validator whose messages read
//! like Python `jsonschema`'s, because placement clients and upstream's
//! tests match on them ("'name' is a required property", "Failed
//! validating 'maxLength'"). Supported keywords: type, properties,
//! required, additionalProperties, patternProperties, minProperties,
//! maxProperties, items, minItems, maxItems, uniqueItems, minLength,
//! maxLength, pattern, minimum, maximum, enum, anyOf, oneOf, format(uuid).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

/// A validation failure.
#[derive(Debug, Clone)]
pub struct SchemaError {
    /// jsonschema-style message, e.g. `'x' is a required property`.
    pub message: String,
    /// The failing keyword.
    pub keyword: &'static str,
    /// JSON path of the failing schema node, as `['properties']['name']`.
    pub schema_path: String,
    /// Depth of the failing instance (for best-match selection).
    pub depth: usize,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n\nFailed validating '{}' in schema{}", self.message, self.keyword, self.schema_path)
    }
}

fn regex(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut guard = cache.lock().ok()?;
    guard.entry(pattern.to_owned()).or_insert_with(|| Regex::new(pattern).ok()).clone()
}

/// Python `repr` of a JSON value, as jsonschema prints instances.
pub fn py_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", py_str(k), py_repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn py_str(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => match value {
            Value::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => false,
        },
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// What Python's `uuid.UUID(text)` parses before reading the digits:
/// `urn:` and `uuid:` removed anywhere, `{` and `}` stripped from both
/// ends, every `-` removed.
fn uuid_hex(text: &str) -> String {
    text.replace("urn:", "").replace("uuid:", "").trim_matches(|c| c == '{' || c == '}').replace('-', "")
}

/// oslo `uuidutils.is_uuid_like`, returning the uuid: the text is a uuid
/// in any spelling Python's `uuid.UUID` reads exactly (dashed or not,
/// either case, in braces, `urn:uuid:`). The format `uuid` of request
/// bodies (placement's and nova's format checkers).
pub fn uuid_like(text: &str) -> Option<uuid::Uuid> {
    let hex = uuid_hex(text);
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().map(uuid::Uuid::from_u128)
}

/// Python `int(text, 16)` accepts it: surrounding whitespace, a sign, a
/// `0x` prefix, single underscores between digits.
fn python_int16(text: &str) -> bool {
    let t = text.trim_matches(|c: char| c.is_whitespace());
    let t = t.strip_prefix(['+', '-']).unwrap_or(t);
    let (t, prefixed) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(rest) => (rest, true),
        None => (t, false),
    };
    let t = if prefixed { t.strip_prefix('_').unwrap_or(t) } else { t };
    !t.is_empty() && t.split('_').all(|run| !run.is_empty() && run.chars().all(|c| c.is_ascii_hexdigit()))
}

/// jsonschema's own `uuid` format (`FormatChecker()` as placement's
/// `validate_query_params` uses it): `uuid.UUID(text)` parses, and the
/// text has dashes at 8, 13, 18 and 23 (so no bare hex, braces or urn).
pub fn is_jsonschema_uuid(text: &str) -> bool {
    let hex = uuid_hex(text);
    let chars: Vec<char> = text.chars().collect();
    hex.chars().count() == 32 && python_int16(&hex) && [8, 13, 18, 23].iter().all(|&i| chars.get(i) == Some(&'-'))
}

/// Which checker the `uuid` format uses.
#[derive(Debug, Clone, Copy)]
enum Formats {
    /// oslo `is_uuid_like` (bodies).
    Oslo,
    /// jsonschema's `FormatChecker()` (placement's query strings).
    JsonSchema,
}

/// Add to `found` every regular expression `schema` uses (`pattern`
/// values and `patternProperties` keys), at any depth. The validator skips
/// a pattern it cannot compile, so tests check each one with this.
pub fn collect_patterns(schema: &Value, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, sub) in map {
                if key == "pattern" {
                    found.extend(sub.as_str().map(str::to_owned));
                }
                if key == "patternProperties" {
                    found.extend(sub.as_object().into_iter().flat_map(|m| m.keys().cloned()));
                }
                collect_patterns(sub, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_patterns(i, found)),
        _ => {}
    }
}

/// Validate `instance` against `schema`; on failure return the error
/// jsonschema's `best_match` would pick (the shallowest, first found).
pub fn validate(schema: &Value, instance: &Value) -> Result<(), SchemaError> {
    validate_with(schema, instance, Formats::Oslo)
}

/// [`validate`] with jsonschema's own format checker, as placement's
/// `validate_query_params` validates query strings: the `uuid` format
/// wants the dashed form ([`is_jsonschema_uuid`]).
pub fn validate_query(schema: &Value, instance: &Value) -> Result<(), SchemaError> {
    validate_with(schema, instance, Formats::JsonSchema)
}

fn validate_with(schema: &Value, instance: &Value, formats: Formats) -> Result<(), SchemaError> {
    let mut errors = Vec::new();
    check(schema, instance, "", 0, formats, &mut errors);
    let weak = |e: &SchemaError| e.keyword == "anyOf" || e.keyword == "oneOf";
    let best = errors.into_iter().min_by_key(|e| (e.depth, weak(e)));
    match best {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// True when `instance` validates.
pub fn is_valid(schema: &Value, instance: &Value) -> bool {
    is_valid_with(schema, instance, Formats::Oslo)
}

fn is_valid_with(schema: &Value, instance: &Value, formats: Formats) -> bool {
    let mut errors = Vec::new();
    check(schema, instance, "", 0, formats, &mut errors);
    errors.is_empty()
}

fn err(errors: &mut Vec<SchemaError>, keyword: &'static str, path: &str, depth: usize, message: String) {
    errors.push(SchemaError { message, keyword, schema_path: format!("{path}['{keyword}']"), depth });
}

fn check(schema: &Value, instance: &Value, path: &str, depth: usize, formats: Formats, errors: &mut Vec<SchemaError>) {
    let Some(schema) = schema.as_object() else { return };
    for (keyword, spec) in schema {
        match keyword.as_str() {
            "type" => {
                let names: Vec<&str> = match spec {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
                    _ => continue,
                };
                if !names.iter().any(|n| type_matches(n, instance)) {
                    let shown = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
                    err(errors, "type", path, depth, format!("{} is not of type {shown}", py_repr(instance)));
                }
            }
            "enum" => {
                if let Some(options) = spec.as_array() {
                    if !options.contains(instance) {
                        err(
                            errors,
                            "enum",
                            path,
                            depth,
                            format!("{} is not one of {}", py_repr(instance), py_repr(spec)),
                        );
                    }
                }
            }
            "format" if spec == "uuid" => {
                if let Some(s) = instance.as_str() {
                    let ok = match formats {
                        Formats::Oslo => uuid_like(s).is_some(),
                        Formats::JsonSchema => is_jsonschema_uuid(s),
                    };
                    if !ok {
                        err(errors, "format", path, depth, format!("{} is not a 'uuid'", py_repr(instance)));
                    }
                }
            }
            "anyOf" | "oneOf" => {
                if let Some(options) = spec.as_array() {
                    let n_valid = options.iter().filter(|s| is_valid_with(s, instance, formats)).count();
                    let keyword: &'static str = if keyword == "anyOf" { "anyOf" } else { "oneOf" };
                    if n_valid == 0 {
                        err(
                            errors,
                            keyword,
                            path,
                            depth,
                            format!("{} is not valid under any of the given schemas", py_repr(instance)),
                        );
                    } else if keyword == "oneOf" && n_valid > 1 {
                        err(
                            errors,
                            keyword,
                            path,
                            depth,
                            format!("{} is valid under each of the given schemas", py_repr(instance)),
                        );
                    }
                }
            }
            _ => {}
        }
        match instance {
            Value::Object(map) => check_object(keyword, spec, schema, map, instance, path, depth, formats, errors),
            Value::Array(items) => match keyword.as_str() {
                "items" => {
                    for item in items {
                        check(spec, item, &format!("{path}['items']"), depth + 1, formats, errors);
                    }
                }
                "minItems" if spec.as_u64().is_some_and(|min| (items.len() as u64) < min) => {
                    let msg = if items.is_empty() {
                        "[] should be non-empty".to_owned()
                    } else {
                        format!("{} is too short", py_repr(instance))
                    };
                    err(errors, "minItems", path, depth, msg);
                }
                "maxItems" if spec.as_u64().is_some_and(|max| (items.len() as u64) > max) => {
                    err(errors, "maxItems", path, depth, format!("{} is too long", py_repr(instance)));
                }
                "uniqueItems" if spec == &Value::Bool(true) => {
                    let dup = items.iter().enumerate().any(|(i, a)| items[..i].contains(a));
                    if dup {
                        err(
                            errors,
                            "uniqueItems",
                            path,
                            depth,
                            format!("{} has non-unique elements", py_repr(instance)),
                        );
                    }
                }
                _ => {}
            },
            Value::String(s) => match keyword.as_str() {
                "minLength" if spec.as_u64().is_some_and(|min| (s.chars().count() as u64) < min) => {
                    let msg = if s.is_empty() {
                        "'' should be non-empty".to_owned()
                    } else {
                        format!("{} is too short", py_repr(instance))
                    };
                    err(errors, "minLength", path, depth, msg);
                }
                "maxLength" if spec.as_u64().is_some_and(|max| (s.chars().count() as u64) > max) => {
                    err(errors, "maxLength", path, depth, format!("{} is too long", py_repr(instance)));
                }
                "pattern" => {
                    if let Some(pattern) = spec.as_str() {
                        if regex(pattern).is_some_and(|re| !re.is_match(s)) {
                            err(
                                errors,
                                "pattern",
                                path,
                                depth,
                                format!("{} does not match {}", py_repr(instance), py_str(pattern)),
                            );
                        }
                    }
                }
                _ => {}
            },
            Value::Number(n) if type_matches("number", instance) => {
                let v = n.as_f64().unwrap_or(0.0);
                match keyword.as_str() {
                    "minimum" if spec.as_f64().is_some_and(|min| v < min) => {
                        err(errors, "minimum", path, depth, format!("{} is less than the minimum of {}", n, spec));
                    }
                    "maximum" if spec.as_f64().is_some_and(|max| v > max) => {
                        err(errors, "maximum", path, depth, format!("{} is greater than the maximum of {}", n, spec));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

#[expect(clippy::too_many_arguments)]
fn check_object(
    keyword: &str,
    spec: &Value,
    schema: &Map<String, Value>,
    map: &Map<String, Value>,
    instance: &Value,
    path: &str,
    depth: usize,
    formats: Formats,
    errors: &mut Vec<SchemaError>,
) {
    match keyword {
        "properties" => {
            if let Some(props) = spec.as_object() {
                for (name, sub) in props {
                    if let Some(value) = map.get(name) {
                        check(sub, value, &format!("{path}['properties']['{name}']"), depth + 1, formats, errors);
                    }
                }
            }
        }
        "patternProperties" => {
            if let Some(patterns) = spec.as_object() {
                for (pattern, sub) in patterns {
                    let Some(re) = regex(pattern) else { continue };
                    for (name, value) in map {
                        if re.is_match(name) {
                            check(
                                sub,
                                value,
                                &format!("{path}['patternProperties']['{pattern}']"),
                                depth + 1,
                                formats,
                                errors,
                            );
                        }
                    }
                }
            }
        }
        "required" => {
            if let Some(required) = spec.as_array() {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        err(errors, "required", path, depth, format!("{} is a required property", py_str(name)));
                    }
                }
            }
        }
        "minProperties" if spec.as_u64().is_some_and(|min| (map.len() as u64) < min) => {
            let msg = if map.is_empty() {
                "{} should be non-empty".to_owned()
            } else {
                format!("{} does not have enough properties", py_repr(instance))
            };
            err(errors, "minProperties", path, depth, msg);
        }
        "maxProperties" if spec.as_u64().is_some_and(|max| (map.len() as u64) > max) => {
            err(errors, "maxProperties", path, depth, format!("{} has too many properties", py_repr(instance)));
        }
        "additionalProperties" => {
            let props = schema.get("properties").and_then(Value::as_object);
            let patterns: Vec<(String, Regex)> = schema
                .get("patternProperties")
                .and_then(Value::as_object)
                .map(|p| p.keys().filter_map(|k| regex(k).map(|re| (k.clone(), re))).collect())
                .unwrap_or_default();
            let extras: Vec<&String> = map
                .keys()
                .filter(|k| {
                    !props.is_some_and(|p| p.contains_key(*k)) && !patterns.iter().any(|(_, re)| re.is_match(k))
                })
                .collect();
            match spec {
                Value::Bool(false) if !extras.is_empty() => {
                    if !patterns.is_empty() {
                        let pats = patterns.iter().map(|(p, _)| py_str(p)).collect::<Vec<_>>().join(", ");
                        let names = extras.iter().map(|k| py_str(k)).collect::<Vec<_>>().join(", ");
                        let verb = if extras.len() == 1 { "does" } else { "do" };
                        err(
                            errors,
                            "additionalProperties",
                            path,
                            depth,
                            format!("{names} {verb} not match any of the regexes: {pats}"),
                        );
                    } else {
                        let names = extras.iter().map(|k| py_str(k)).collect::<Vec<_>>().join(", ");
                        let verb = if extras.len() == 1 { "was" } else { "were" };
                        err(
                            errors,
                            "additionalProperties",
                            path,
                            depth,
                            format!("Additional properties are not allowed ({names} {verb} unexpected)"),
                        );
                    }
                }
                Value::Object(_) => {
                    for name in extras {
                        if let Some(value) = map.get(name) {
                            check(spec, value, &format!("{path}['additionalProperties']"), depth + 1, formats, errors);
                        }
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_match_jsonschema() {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 3}, "n": {"type": "integer", "minimum": 1}},
            "required": ["name"],
            "additionalProperties": false
        });
        let e = validate(&schema, &json!({})).unwrap_err();
        assert_eq!(e.message, "'name' is a required property");
        let e = validate(&schema, &json!({"name": "abcd"})).unwrap_err();
        assert!(e.to_string().contains("Failed validating 'maxLength'"), "{e}");
        let e = validate(&schema, &json!({"name": "a", "bad_field": 1})).unwrap_err();
        assert_eq!(e.message, "Additional properties are not allowed ('bad_field' was unexpected)");
        let e = validate(&schema, &json!({"name": "a", "n": 0})).unwrap_err();
        assert_eq!(e.message, "0 is less than the minimum of 1");
        let e = validate(&schema, &json!({"name": 1})).unwrap_err();
        assert_eq!(e.message, "1 is not of type 'string'");
        assert!(validate(&schema, &json!({"name": "abc", "n": 2})).is_ok());
    }

    #[test]
    fn uuid_format() {
        let schema = json!({"type": "string", "format": "uuid"});
        assert!(validate(&schema, &json!("5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11")).is_ok());
        assert!(validate(&schema, &json!("5a2a8ab454d84a3c9d072e9a1f4c4c11")).is_ok());
        assert!(validate(&schema, &json!("not-a-uuid")).is_err());
        // oslo is_uuid_like: braces, urn and upper case are uuids too.
        for text in [
            "{5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11}",
            "urn:uuid:5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11",
            "5A2A8AB4-54D8-4A3C-9D07-2E9A1F4C4C11",
        ] {
            assert_eq!(uuid_like(text).map(|u| u.to_string()).as_deref(), Some("5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11"));
            assert!(validate(&schema, &json!(text)).is_ok(), "{text}");
        }
        assert!(uuid_like("5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c1").is_none());
        assert!(uuid_like("+a2a8ab454d84a3c9d072e9a1f4c4c11").is_none());
        // jsonschema's checker (placement's query strings) wants the dashes.
        assert!(validate_query(&schema, &json!("5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11")).is_ok());
        assert!(validate_query(&schema, &json!("5A2A8AB4-54D8-4A3C-9D07-2E9A1F4C4C11")).is_ok());
        for text in [
            "5a2a8ab454d84a3c9d072e9a1f4c4c11",
            "{5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11}",
            "urn:uuid:5a2a8ab4-54d8-4a3c-9d07-2e9a1f4c4c11",
        ] {
            let e = validate_query(&schema, &json!(text)).unwrap_err();
            assert_eq!(e.message, format!("'{text}' is not a 'uuid'"));
        }
    }
}
