//! Parsers for the query parameters shared by `GET /resource_providers` and
//! `GET /allocation_candidates`: `resources`, `required` (traits),
//! `member_of` and `in_tree`. Pure functions over the raw value(s) and the
//! microversion, answering upstream's (`placement/util.py`) 400 messages.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::microversion::Version;
use crate::request::Req;

/// Required traits (each set is an any-of group; all groups must hold)
/// and forbidden traits.
pub type TraitFilter = (Vec<BTreeSet<String>>, BTreeSet<String>);

/// Required aggregates (each set is an any-of group; all groups must hold)
/// and forbidden aggregates.
pub type AggregateFilter = (Vec<BTreeSet<Uuid>>, BTreeSet<Uuid>);

/// oslo `uuidutils.is_uuid_like`, returning the parsed uuid (any spelling
/// Python's `uuid.UUID` reads: bare hex, braces, `urn:uuid:`, either case).
pub fn uuid_like(value: &str) -> Option<Uuid> {
    crate::schema::uuid_like(value)
}

/// The uuid of a provider as upstream finds it: by comparing the text
/// with the stored (canonical: lowercase, dashed) uuid, so any other
/// spelling names no provider.
pub fn canonical_uuid(value: &str) -> Option<Uuid> {
    Uuid::parse_str(value).ok().filter(|uuid| uuid.to_string() == value)
}

/// Validate the query against a JSON schema the way upstream's
/// `validate_query_params` does: the last value of each key, jsonschema's
/// own format checker (`uuid` wants the dashed form), and a query that is
/// not UTF-8 is a 400 like webob's `UnicodeDecodeError` there.
pub fn validate_query_schema(req: &Req, schema: &Value) -> ApiResult<()> {
    let invalid = |why: String| ApiError::bad_request(format!("Invalid query string parameters: {why}"));
    if let Some(why) = req.query_decode_error() {
        return Err(invalid(why));
    }
    let mut object = Map::new();
    for (key, value) in &req.query {
        object.insert(key.clone(), Value::String(value.clone()));
    }
    crate::schema::validate_query(schema, &Value::Object(object)).map_err(|e| invalid(e.to_string()))
}

/// `normalize_resources_qs_param`: `CLASS:N,CLASS:N` into (class, amount)
/// pairs in request order; a repeated class keeps its last amount.
pub fn normalize_resources(value: &str) -> ApiResult<Vec<(String, i64)>> {
    if value.trim().is_empty() {
        return Err(ApiError::bad_request(
            "Badly formed resources parameter. Expected resources query string parameter in form: \
             ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.",
        ));
    }
    let mut out: Vec<(String, i64)> = Vec::new();
    for item in value.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        let [class, amount] = parts[..] else {
            return Err(ApiError::bad_request(format!(
                "Badly formed resources parameter. Expected resources query string parameter in form: \
                 ?resources=VCPU:2,MEMORY_MB:1024. Got: {item}."
            )));
        };
        let parsed = parse_python_int(amount).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Requested resource {class} expected positive integer amount. Got: {amount}."
            ))
        })?;
        if parsed < 1 {
            return Err(ApiError::bad_request(format!(
                "Requested resource {class} requires amount >= 1. Got: {parsed}."
            )));
        }
        match out.iter_mut().find(|(c, _)| c == class) {
            Some(existing) => existing.1 = parsed,
            None => out.push((class.to_owned(), parsed)),
        }
    }
    Ok(out)
}

/// Python `int(str)`: surrounding whitespace, an optional sign, digits
/// with single underscores between them.
fn parse_python_int(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let cleaned: String = digits.chars().filter(|c| *c != '_').collect();
    if !cleaned.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let magnitude: i64 = cleaned.parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// `normalize_traits_qs_param`: one `required` value. `in:A,B` (1.39) is
/// one any-of group; otherwise each name is its own group and `!NAME`
/// (1.22) is forbidden.
pub fn normalize_traits(value: &str, allow_forbidden: bool, allow_any_traits: bool) -> ApiResult<TraitFilter> {
    if let Some(rest) = value.strip_prefix("in:") {
        if !allow_any_traits {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported \
                 since microversion 1.39. Got: {value}"
            )));
        }
        let any_of: BTreeSet<String> = rest.split(',').map(|s| s.trim().to_owned()).collect();
        if any_of.iter().any(String::is_empty) {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: Expected 'required' parameter value of the form: \
                 in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {value}"
            )));
        }
        if any_of.iter().any(|t| t.starts_with('!')) {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not \
                 support forbidden traits. Got: {value}"
            )));
        }
        return Ok((vec![any_of], BTreeSet::new()));
    }
    let all: Vec<&str> = value.split(',').map(str::trim).collect();
    // Upstream strips any number of leading '!' (a documented quirk).
    let forbidden: BTreeSet<String> =
        all.iter().filter(|t| t.starts_with('!')).map(|t| t.trim_start_matches('!').to_owned()).collect();
    if all.iter().any(|t| t.is_empty()) || forbidden.iter().any(String::is_empty) {
        let expected = if allow_forbidden { "HW_CPU_X86_VMX,!CUSTOM_MAGIC" } else { "HW_CPU_X86_VMX,CUSTOM_MAGIC" };
        return Err(ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'required' parameter value of the form: {expected}. \
             Got an empty trait in: {value}"
        )));
    }
    let required: Vec<BTreeSet<String>> =
        all.iter().filter(|t| !t.starts_with('!')).map(|t| BTreeSet::from([(*t).to_owned()])).collect();
    if !forbidden.is_empty() && !allow_forbidden {
        return Err(ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'required' parameter value of the form: \
             HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}"
        )));
    }
    Ok((required, forbidden))
}

/// `normalize_traits_qs_params`: all values of one `required<suffix>`
/// parameter. Before 1.39 only the last value counts.
pub fn normalize_traits_params(values: &[&str], version: Version) -> ApiResult<TraitFilter> {
    let allow_forbidden = version.at_least(22);
    let allow_any_traits = version.at_least(39);
    let values = if allow_any_traits { values } else { &values[values.len().saturating_sub(1)..] };
    let mut required = Vec::new();
    let mut forbidden = BTreeSet::new();
    for value in values {
        let (r, f) = normalize_traits(value, allow_forbidden, allow_any_traits)?;
        required.extend(r);
        forbidden.extend(f);
    }
    Ok((required, forbidden))
}

/// `normalize_member_of_qs_param`: one `member_of` value: `UUID`, `!UUID`,
/// `in:U1,U2` or `!in:U1,U2`. Returns whether it forbids, and its
/// aggregates. Any uuid-like spelling is accepted, but upstream compares
/// the text with the stored uuids, so a spelling other than the canonical
/// one is in no set: a required group of only such names matches nothing.
pub fn normalize_member_of(value: &str) -> ApiResult<(bool, BTreeSet<Uuid>)> {
    if value.contains(',') && !(value.starts_with("in:") || value.starts_with("!in:")) {
        return Err(ApiError::bad_request(format!(
            "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the \
             valid microversion. Got: {value}"
        )));
    }
    let (forbid, list) = if let Some(rest) = value.strip_prefix("!in:") {
        (true, rest)
    } else if let Some(rest) = value.strip_prefix('!') {
        (true, rest)
    } else if let Some(rest) = value.strip_prefix("in:") {
        (false, rest)
    } else {
        (false, value)
    };
    let mut uuids = BTreeSet::new();
    for item in list.split(',') {
        uuid_like(item).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). \
                 Got: {item}"
            ))
        })?;
        uuids.extend(canonical_uuid(item));
    }
    Ok((forbid, uuids))
}

/// `normalize_member_of_qs_params`: all values of `member_of<suffix>`.
/// Repeating needs 1.24, forbidden aggregates need 1.32.
pub fn normalize_member_of_params(values: &[&str], version: Version, suffix: &str) -> ApiResult<AggregateFilter> {
    if !version.at_least(24) && values.len() > 1 {
        return Err(ApiError::bad_request(format!("Multiple member_of{suffix} parameters are not supported")));
    }
    let mut required = Vec::new();
    let mut forbidden = BTreeSet::new();
    for value in values {
        let (forbid, aggregates) = normalize_member_of(value)?;
        if !forbid {
            required.push(aggregates);
        } else {
            if !version.at_least(32) {
                return Err(ApiError::bad_request(format!(
                    "Forbidden member_of{suffix} parameters are not supported in the specified microversion"
                )));
            }
            forbidden.extend(aggregates);
        }
    }
    Ok((required, forbidden))
}

/// `normalize_in_tree_qs_params`: a provider uuid in any uuid-like
/// spelling; `None` when it is not the canonical one (it names no
/// provider, see [`canonical_uuid`]).
pub fn normalize_in_tree(value: &str) -> ApiResult<Option<Uuid>> {
    let trimmed = value.trim();
    uuid_like(trimmed).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: {value}"
        ))
    })?;
    Ok(canonical_uuid(trimmed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "4e8e5957-649f-477b-9e5b-f1f75b21c03c";
    const U2: &str = "bee4d1b0-2b79-4b4b-b3a5-7b7f6a0ab8d0";

    #[test]
    fn resources() {
        assert_eq!(
            normalize_resources("VCPU:2,DISK_GB:10,VCPU:3").expect("ok"),
            vec![("VCPU".to_owned(), 3), ("DISK_GB".to_owned(), 10)]
        );
        let e = normalize_resources("").unwrap_err();
        assert!(e.detail.ends_with("Got: empty string."), "{}", e.detail);
        let e = normalize_resources("VCPU").unwrap_err();
        assert!(e.detail.ends_with("Got: VCPU."), "{}", e.detail);
        let e = normalize_resources("VCPU:x").unwrap_err();
        assert_eq!(e.detail, "Requested resource VCPU expected positive integer amount. Got: x.");
        let e = normalize_resources("VCPU:-1").unwrap_err();
        assert_eq!(e.detail, "Requested resource VCPU requires amount >= 1. Got: -1.");
        assert_eq!(normalize_resources("VCPU: 1_0").expect("python int"), vec![("VCPU".to_owned(), 10)]);
    }

    #[test]
    fn traits() {
        let (r, f) = normalize_traits_params(&["A,!B", "C"], Version(1, 22)).expect("ok");
        assert_eq!(r, vec![BTreeSet::from(["C".to_owned()])], "only the last value before 1.39");
        assert!(f.is_empty());
        let (r, f) = normalize_traits_params(&["A,!B", "in:C,D"], Version(1, 39)).expect("ok");
        assert_eq!(r.len(), 2);
        assert_eq!(f, BTreeSet::from(["B".to_owned()]));
        assert!(normalize_traits("!B", false, false).unwrap_err().detail.ends_with("Got: !B"));
        assert!(normalize_traits("in:A", true, false).unwrap_err().detail.contains("since microversion 1.39"));
        assert!(normalize_traits("A,,B", true, true).unwrap_err().detail.contains("Got an empty trait"));
        assert!(normalize_traits("in:A,!B", true, true).unwrap_err().detail.contains("does not support forbidden"));
    }

    #[test]
    fn member_of() {
        let both = format!("in:{U1},{U2}");
        let (r, f) = normalize_member_of_params(&[both.as_str()], Version(1, 3), "").expect("ok");
        assert_eq!(r[0].len(), 2);
        assert!(f.is_empty());
        let e = normalize_member_of_params(&[U1, U2], Version(1, 23), "").unwrap_err();
        assert_eq!(e.detail, "Multiple member_of parameters are not supported");
        let forbidden = format!("!{U1}");
        let e = normalize_member_of_params(&[forbidden.as_str()], Version(1, 31), "").unwrap_err();
        assert!(e.detail.starts_with("Forbidden member_of parameters are not supported"));
        let (_, f) = normalize_member_of_params(&[forbidden.as_str()], Version(1, 32), "").expect("ok");
        assert_eq!(f.len(), 1);
        let e = normalize_member_of("in:nope").unwrap_err();
        assert!(e.detail.contains("Expected 'member_of' parameter to contain valid UUID(s). Got: nope"));
        assert!(normalize_member_of(&format!("{U1},{U2}")).unwrap_err().detail.contains("must be prefixed"));
    }

    #[test]
    fn uuid_forms() {
        assert!(uuid_like(&U1.replace('-', "")).is_some());
        assert!(uuid_like(&U1.to_uppercase()).is_some());
        assert!(uuid_like("not-a-uuid").is_none());
        assert!(normalize_in_tree("x").is_err());
        // Other spellings are uuids, but name no provider or aggregate.
        assert_eq!(normalize_in_tree(&U1.replace('-', "")).expect("uuid-like"), None);
        assert_eq!(normalize_in_tree(U1).expect("uuid").map(|u| u.to_string()).as_deref(), Some(U1));
        let braced = format!("{{{U1}}}");
        let (required, _) = normalize_member_of_params(&[braced.as_str()], Version(1, 3), "").expect("uuid-like");
        assert_eq!(required, vec![BTreeSet::new()], "a required group that matches nothing");
        let forbidden = format!("!{}", U1.to_uppercase());
        let (required, forbidden) =
            normalize_member_of_params(&[forbidden.as_str()], Version(1, 32), "").expect("uuid-like");
        assert!(required.is_empty() && forbidden.is_empty());
    }
}
