//! Blazar's requirement language (`hypervisor_properties`,
//! `resource_properties`): JSON text such as `["==", "$vcpus", "8"]` or
//! `["and", [">=", "$memory_mb", "4096"], ["==", "$gpu", "true"]]`, parsed
//! into the model's [`Query`]. `""` and `"[]"` mean no requirement. A
//! string literal keeps Blazar's meaning (extra capabilities compare as
//! strings, integer hypervisor fields as numbers); berth's extensions are
//! `or`, `and`/`or` in any case, and JSON number literals, which compare
//! numerically (`["<", "$level", 9]`).

use berth_reservation_model::{Op, Query};
use serde_json::Value;

fn malformed(text: &str) -> String {
    format!("Malformed requirements {text}")
}

/// Python's `repr` of parsed JSON: Blazar names a malformed requirement
/// that parsed as JSON by the `repr` of the innermost list it refused
/// (`['==', '$level']`).
fn py_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(b) => (if *b { "True" } else { "False" }).into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut out = String::from(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        Value::Array(list) => format!("[{}]", list.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", py_repr(&Value::String(k.clone())), py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn query_from(value: &Value) -> Result<Query, String> {
    let refused = || malformed(&py_repr(value));
    let list = value.as_array().ok_or_else(refused)?;
    let head = list.first().and_then(Value::as_str).ok_or_else(refused)?;
    if head.eq_ignore_ascii_case("and") || head.eq_ignore_ascii_case("or") {
        if list.len() < 2 {
            return Err(refused());
        }
        let parts = list[1..].iter().map(query_from).collect::<Result<Vec<_>, _>>()?;
        return Ok(if head.eq_ignore_ascii_case("and") { Query::And(parts) } else { Query::Or(parts) });
    }
    let op = Op::parse(head).ok_or_else(refused)?;
    if list.len() != 3 {
        return Err(refused());
    }
    let key = list[1].as_str().and_then(|k| k.strip_prefix('$')).filter(|k| !k.is_empty()).ok_or_else(refused)?;
    let key = key.to_owned();
    match &list[2] {
        Value::String(s) if !s.is_empty() => Ok(Query::Cmp { op, key, value: s.clone() }),
        // Extension (Blazar refuses numbers): compared as numbers.
        Value::Number(n) => n.as_f64().map(|value| Query::Num { op, key, value }).ok_or_else(refused),
        Value::Bool(b) => Ok(Query::Cmp { op, key, value: b.to_string() }),
        _ => Err(refused()),
    }
}

/// Parse a requirement text; the error is Blazar's message (the text when
/// it is not JSON, else the `repr` of the part refused).
pub fn parse(text: &str) -> Result<Option<Query>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(trimmed).map_err(|_| malformed(text))?;
    if value.as_array().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    query_from(&value).map(Some)
}

#[cfg(test)]
mod tests {
    use berth_reservation_model::Prop;

    use super::*;

    #[test]
    fn parses_like_blazar() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("[]").unwrap(), None);
        let q = parse(r#"["and", [">=", "$vcpus", "4"], ["==", "$gpu", true]]"#).unwrap().unwrap();
        let host = |k: &str| match k {
            "vcpus" => Some(Prop::Int(8)),
            "gpu" => Some(Prop::Text("true".to_string())),
            _ => None,
        };
        assert!(q.matches(&host));
        let q = parse(r#"["or", ["<", "$vcpus", "4"], ["==", "$gpu", "false"]]"#).unwrap().unwrap();
        assert!(!q.matches(&host));
        assert!(parse(r#"["~", "$a", "b"]"#).is_err());
        // Blazar 18 names the refused part as Python prints it.
        assert_eq!(parse(r#"["==", "a", "b"]"#).unwrap_err(), "Malformed requirements ['==', 'a', 'b']");
        assert_eq!(
            parse(r#"["and", ["==", "$a", "b"], ["==", "$level"]]"#).unwrap_err(),
            "Malformed requirements ['==', '$level']"
        );
        assert_eq!(parse(r#"["==", "$a", ""]"#).unwrap_err(), "Malformed requirements ['==', '$a', '']");
        assert_eq!(parse(r#"["==", "$", "x"]"#).unwrap_err(), "Malformed requirements ['==', '$', 'x']");
        assert_eq!(parse(r#"["~", "$a", "it's"]"#).unwrap_err(), r#"Malformed requirements ['~', '$a', "it's"]"#);
        assert_eq!(parse("[oops").unwrap_err(), "Malformed requirements [oops", "not JSON: the text");
        assert!(parse("not json").is_err());
        assert!(parse(r#"["and"]"#).is_err());
    }

    /// Blazar compares extra capabilities as strings (`"10" < "9"`) and
    /// integer hypervisor fields as numbers; a JSON number literal compares
    /// numerically.
    #[test]
    fn string_literals_keep_blazars_meaning_numbers_compare_numerically() {
        let level = |v: &'static str| move |k: &str| (k == "level").then(|| Prop::Text(v.to_string()));
        let below_9 = parse(r#"["<", "$level", "9"]"#).unwrap().unwrap();
        let picked: Vec<&str> = ["10", "9", "2"].into_iter().filter(|v| below_9.matches(&level(v))).collect();
        assert_eq!(picked, ["10", "2"], "string comparison, as Blazar");
        let below_9 = parse(r#"["<", "$level", 9]"#).unwrap().unwrap();
        let picked: Vec<&str> = ["10", "9", "2", "x"].into_iter().filter(|v| below_9.matches(&level(v))).collect();
        assert_eq!(picked, ["2"], "a JSON number compares numerically; text that is no number never matches");
        let eq = parse(r#"["==", "$level", "1.0"]"#).unwrap().unwrap();
        assert!(!eq.matches(&level("1")), "strings: 1 is not 1.0");
        let vcpus = parse(r#"["<", "$vcpus", "10"]"#).unwrap().unwrap();
        assert!(vcpus.matches(&|_: &str| Some(Prop::Int(8))), "an integer column compares as a number (SQL)");
    }
}
