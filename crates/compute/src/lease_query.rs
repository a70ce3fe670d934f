//! Blazar's requirement language (`hypervisor_properties`,
//! `resource_properties`): JSON text such as `["==", "$vcpus", "8"]` or
//! `["and", [">=", "$memory_mb", "4096"], ["==", "$gpu", "true"]]`, parsed
//! into the model's [`Query`]. `""` and `"[]"` mean no requirement; `or`
//! is berth's extension.

use berth_compute_model::lease_plan::{Op, Query};
use serde_json::Value;

fn malformed(text: &str) -> String {
    format!("Malformed requirements {text}")
}

fn query_from(value: &Value, text: &str) -> Result<Query, String> {
    let list = value.as_array().ok_or_else(|| malformed(text))?;
    let head = list.first().and_then(Value::as_str).ok_or_else(|| malformed(text))?;
    if head.eq_ignore_ascii_case("and") || head.eq_ignore_ascii_case("or") {
        let parts = list[1..].iter().map(|v| query_from(v, text)).collect::<Result<Vec<_>, _>>()?;
        if parts.is_empty() {
            return Err(malformed(text));
        }
        return Ok(if head.eq_ignore_ascii_case("and") { Query::And(parts) } else { Query::Or(parts) });
    }
    let op = Op::parse(head).ok_or_else(|| malformed(text))?;
    if list.len() != 3 {
        return Err(malformed(text));
    }
    let key = list[1].as_str().and_then(|k| k.strip_prefix('$')).ok_or_else(|| malformed(text))?;
    let value = match &list[2] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => return Err(malformed(text)),
    };
    Ok(Query::Cmp { op, key: key.to_owned(), value })
}

/// Parse a requirement text; the error is Blazar's message.
pub fn parse(text: &str) -> Result<Option<Query>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(trimmed).map_err(|_| malformed(text))?;
    if value.as_array().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    query_from(&value, text).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_blazar() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("[]").unwrap(), None);
        let q = parse(r#"["and", [">=", "$vcpus", "4"], ["==", "$gpu", true]]"#).unwrap().unwrap();
        let host = |k: &str| match k {
            "vcpus" => Some("8".to_string()),
            "gpu" => Some("true".to_string()),
            _ => None,
        };
        assert!(q.matches(&host));
        let q = parse(r#"["or", ["<", "$vcpus", "4"], ["==", "$gpu", "false"]]"#).unwrap().unwrap();
        assert!(!q.matches(&host));
        assert!(parse(r#"["~", "$a", "b"]"#).is_err());
        assert_eq!(parse(r#"["==", "a", "b"]"#).unwrap_err(), r#"Malformed requirements ["==", "a", "b"]"#);
        assert!(parse("not json").is_err());
        assert!(parse(r#"["and"]"#).is_err());
    }
}
