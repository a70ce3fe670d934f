//! Test support: Nova api-samples templates matched with typed wildcards,
//! Nova's response and request schemas by microversion, and berth's
//! validator.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use berth_compute_api::views::Links;
use berth_compute_api::ComputeVersion;

/// The project id Nova's samples use.
pub(crate) const PROJECT: &str = "6f70656e737461636b20342065766572";
/// The host Nova's samples use for endpoints.
pub(crate) const HOST: &str = "http://openstack.example.com";

/// Links as Nova's sample tests build them (project id in the URL).
pub(crate) fn links() -> Links {
    Links::new(HOST, Some(PROJECT))
}

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join(name)
}

/// The raw text of a sample template (`resource/[v2.N/]name.json.tpl`).
pub(crate) fn sample_text(path: &str) -> String {
    let file = dir("samples").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Marker prefix of a placeholder that stood outside a JSON string.
const BARE: &str = "\u{1}bare:";

/// Parse a response template: placeholders outside strings (`"n": %(x)s`)
/// become marker strings so the text is JSON.
pub(crate) fn template(path: &str) -> Value {
    let text = sample_text(path);
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        if !in_string && rest.starts_with("%(") {
            let end = rest.find(")s").expect("placeholder end");
            out.push_str(&format!("\"\\u0001bare:{}\"", &rest[2..end]));
            rest = &rest[end + 2..];
            continue;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{path}: {e}\n{out}"))
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_digit() || ('a'..='f').contains(&c)
            }
        })
}

fn is_time(s: &str, fraction: bool, zulu: bool) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let base = b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let tail = &s[19.min(s.len())..];
    base && match (fraction, zulu) {
        (true, false) => tail.len() == 7 && tail.starts_with('.') && tail[1..].bytes().all(|c| c.is_ascii_digit()),
        (false, true) => tail == "Z",
        _ => false,
    }
}

/// Does `text` fit placeholder `name`? Endpoints are exact; kinds Nova's
/// tests give a regular expression are checked; the rest match anything.
fn placeholder_fits(name: &str, text: &str) -> bool {
    match name {
        "compute_endpoint" => text == format!("{HOST}/{PROJECT}"),
        "versioned_compute_endpoint" => text == format!("{HOST}/v2.1/{PROJECT}"),
        "host" => text == HOST,
        "max_api_version" => text == ComputeVersion::MAX.to_string(),
        "uuid" | "instance_1" => is_uuid(text),
        "isotime" => is_time(text, false, true),
        "strtime" => is_time(text, true, false),
        "request_id" => text.strip_prefix("req-").is_some_and(is_uuid),
        "hostid" | "event_hostId" => {
            text.is_empty()
                || (text.len() == 56 && text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
        }
        "reservation_id" => text.len() == 10 && text.starts_with("r-"),
        "int" => !text.is_empty() && text.bytes().all(|c| c.is_ascii_digit()),
        _ => true,
    }
}

/// Match `text` against a template string with `%(name)s` placeholders.
fn glob(template: &str, text: &str) -> bool {
    let Some(start) = template.find("%(") else { return template == text };
    let Some(len) = template[start..].find(")s") else { return template == text };
    let (literal, name, after) = (&template[..start], &template[start + 2..start + len], &template[start + len + 2..]);
    let Some(rest) = text.strip_prefix(literal) else { return false };
    // Try every split, shortest capture first.
    (0..=rest.len())
        .filter(|i| rest.is_char_boundary(*i))
        .any(|i| placeholder_fits(name, &rest[..i]) && glob(after, &rest[i..]))
}

fn bare_fits(name: &str, value: &Value) -> bool {
    match name {
        "strtime_or_none" => value.is_null() || value.as_str().is_some_and(|s| is_time(s, true, false)),
        "strtime" => value.as_str().is_some_and(|s| is_time(s, true, false)),
        "int" => value.is_i64() || value.is_u64(),
        _ => true,
    }
}

fn compare(expected: &Value, actual: &Value, path: &str, skip: &[&str], errors: &mut Vec<String>) {
    if skip.contains(&path) {
        return;
    }
    match (expected, actual) {
        (Value::String(t), _) if t.starts_with(BARE) => {
            if !bare_fits(&t[BARE.len()..], actual) {
                errors.push(format!("{path}: {actual} does not fit %({})s", &t[BARE.len()..]));
            }
        }
        // Nova's tests compare rendered text, so a quoted placeholder also
        // matches a number ("id": "%(hypervisor_id)s" before 2.53).
        (Value::String(t), Value::Number(n)) if t.starts_with("%(") && t.ends_with(")s") && !t[2..].contains("%(") => {
            let name = &t[2..t.len() - 2];
            if !placeholder_fits(name, &n.to_string()) {
                errors.push(format!("{path}: {n} does not fit {t:?}"));
            }
        }
        (Value::String(t), Value::String(a)) if t.contains("%(") => {
            if !glob(t, a) {
                errors.push(format!("{path}: {a:?} does not match {t:?}"));
            }
        }
        (Value::Object(e), Value::Object(a)) => {
            for key in e.keys().chain(a.keys().filter(|k| !e.contains_key(*k))) {
                let sub = format!("{path}/{key}");
                if skip.contains(&sub.as_str()) {
                    continue;
                }
                match (e.get(key), a.get(key)) {
                    (Some(ev), Some(av)) => compare(ev, av, &sub, skip, errors),
                    (Some(_), None) => errors.push(format!("{sub}: missing")),
                    (None, Some(av)) => errors.push(format!("{sub}: unexpected ({av})")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                errors.push(format!("{path}: {} items, sample has {}", a.len(), e.len()));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                compare(ev, av, &format!("{path}/{i}"), skip, errors);
            }
        }
        _ => {
            if expected != actual {
                errors.push(format!("{path}: {actual} != sample {expected}"));
            }
        }
    }
}

/// Assert that `actual` matches the sample template at `path`, ignoring
/// the JSON pointers in `skip` (present or not, any value): the places
/// where berth deliberately differs (no networks, no volumes, ...).
pub(crate) fn assert_sample(actual: &Value, path: &str, skip: &[&str]) {
    let expected = template(path);
    let mut errors = Vec::new();
    compare(&expected, actual, "", skip, &mut errors);
    assert!(
        errors.is_empty(),
        "{path}:\n  {}\nactual: {}",
        errors.join("\n  "),
        serde_json::to_string_pretty(actual).unwrap_or_default()
    );
}

type Rows = Map<String, Value>;

fn load_rows(name: &str) -> Rows {
    let text = std::fs::read_to_string(dir("nova").join(name)).expect("schema fixture");
    match serde_json::from_str(&text).expect("schema fixture JSON") {
        Value::Object(map) => map,
        _ => panic!("{name}: not an object"),
    }
}

fn pick(rows: &Rows, key: &str, version: ComputeVersion) -> Option<Value> {
    let rows = rows.get(key).unwrap_or_else(|| panic!("no Nova schema for {key}")).as_array()?;
    rows.iter().find_map(|row| {
        let (low, high) = (row[0].as_u64()?, row[1].as_u64()?);
        (low..=high).contains(&u64::from(version.0)).then(|| row[2].clone())
    })
}

/// Nova's request schema for `controller.method` at `version`, if the
/// method exists then.
pub(crate) fn nova_request_schema(key: &str, version: ComputeVersion) -> Option<Value> {
    static ROWS: OnceLock<Rows> = OnceLock::new();
    pick(ROWS.get_or_init(|| load_rows("request-schemas.json")), key, version)
}

/// Read a Nova response schema the way berth's validator can check it:
/// `const` becomes a one-value `enum`, and `oneOf` becomes `anyOf`
/// (alternatives that differ only by `format` would all match).
fn loosen(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| match k.as_str() {
                    "const" => ("enum".to_owned(), Value::Array(vec![v])),
                    "oneOf" => ("anyOf".to_owned(), loosen(v)),
                    _ => (k, loosen(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(loosen).collect()),
        other => other,
    }
}

/// Nova's response schema for `controller.method` at `version`, loosened.
pub(crate) fn nova_response_schema(key: &str, version: ComputeVersion) -> Value {
    static ROWS: OnceLock<Rows> = OnceLock::new();
    let rows = ROWS.get_or_init(|| load_rows("response-schemas.json"));
    loosen(pick(rows, key, version).unwrap_or_else(|| panic!("no Nova response schema for {key} at {version}")))
}

/// Assert that `body` validates against Nova's response schema for
/// `controller.method` at `version`.
pub(crate) fn assert_nova_response(key: &str, version: ComputeVersion, body: &Value) {
    let schema = nova_response_schema(key, version);
    if let Err(e) = berth_http::schema::validate(&schema, body) {
        panic!("{key} at {version}: {e}\nbody: {}", serde_json::to_string_pretty(body).unwrap_or_default());
    }
}

/// Every served microversion.
pub(crate) fn all_versions() -> impl Iterator<Item = ComputeVersion> {
    (ComputeVersion::MIN.0..=ComputeVersion::MAX.0).map(ComputeVersion)
}
