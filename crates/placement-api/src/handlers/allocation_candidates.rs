//! `GET /allocation_candidates` (1.10+), as upstream's
//! `handlers/allocation_candidate.py` + `lib.py` (`RequestGroup`,
//! `RequestWideParams`): parse and validate the query per microversion,
//! run the pure engine (`berth-candidates`), render per microversion.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use axum::http::StatusCode;
use berth_candidates::{Answer, CandidatesError, GroupPolicy, Request, RequestGroup};
use regex::Regex;
use serde_json::{json, Map, Value};

use crate::app::now;
use crate::error::{codes, ApiError, ApiResult};
use crate::qparams::{
    normalize_in_tree, normalize_member_of_params, normalize_resources, normalize_traits, normalize_traits_params,
    validate_query_schema,
};
use crate::request::{Req, Resp};
use crate::App;

const GROUP_PAT: &str = "[1-9][0-9]*";
const GROUP_PAT_1_33: &str = "[a-zA-Z0-9_-]{1,64}";

/// `GET /allocation_candidates`.
pub fn list_allocation_candidates(app: &App, req: &Req) -> ApiResult<Resp> {
    req.authorize("placement:allocation_candidates:list")?;
    validate_query_schema(req, &query_schema(req))?;
    let (mut request, trees_named_by_no_provider) = parse_request(req)?;
    let options = &app.options;
    request.max_candidates = options.max_candidates;
    if options.randomize {
        request.randomize_seed = Some(random_seed());
    }
    let body = {
        let world = app.read();
        let state = &world.placement;
        for &group in &trees_named_by_no_provider {
            request.groups[group].in_tree = Some(super::resource_providers::absent_provider(state));
        }
        let answer = berth_candidates::find_packed(state, &request).map_err(|e| match e {
            CandidatesError::ResourceClassNotFound(_) => {
                ApiError::bad_request(format!("Invalid resource class in resources parameter: {e}"))
            }
            CandidatesError::TraitNotFound(_) => ApiError::bad_request(e.to_string()),
        })?;
        if answer.capped {
            // Never silent: a cap that cut viable candidates is counted.
            app.candidates_capped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(request_id = %req.request_id, "allocation candidates capped by --max-allocation-candidates");
        }
        render(|minor| req.at_least(minor), &request, &answer)
    };
    Ok(Resp::raw_json(StatusCode::OK, body).last_modified(req, now()))
}

/// A fresh seed per request for `randomize_allocation_candidates`: std's
/// `RandomState` keys are random per thread and advance per instance.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The query-string schema for the negotiated version (upstream
/// `schemas/allocation_candidate.py`).
fn query_schema(req: &Req) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {"resources": {"type": "string"}},
        "required": ["resources"],
        "additionalProperties": false,
    });
    if req.at_least(16) {
        schema["properties"]["limit"] = json!({
            "type": ["integer", "string"],
            "pattern": "^[1-9][0-9]*$",
            "minimum": 1,
            "minLength": 1,
        });
    }
    if req.at_least(17) {
        schema["properties"]["required"] = json!({"type": ["string"]});
    }
    if req.at_least(21) {
        schema["properties"]["member_of"] = json!({"type": ["string"]});
    }
    if req.at_least(25) {
        let props = schema["properties"].as_object_mut().expect("object");
        props.remove("resources");
        props.remove("required");
        props.remove("member_of");
        props.insert("group_policy".into(), json!({"type": "string", "enum": ["none", "isolate"]}));
        schema.as_object_mut().expect("object").remove("required");
        let pat = if req.at_least(33) { GROUP_PAT_1_33 } else { GROUP_PAT };
        let mut names = vec!["resources", "required", "member_of"];
        if req.at_least(31) {
            names.push("in_tree");
        }
        let pattern_props: Map<String, Value> =
            names.iter().map(|n| (format!("^{n}({pat})?$"), json!({"type": "string"}))).collect();
        schema["patternProperties"] = Value::Object(pattern_props);
    }
    if req.at_least(35) {
        schema["properties"]["root_required"] = json!({"type": ["string"]});
    }
    if req.at_least(36) {
        schema["properties"]["same_subtree"] = json!({"type": ["string"]});
    }
    schema
}

fn key_pattern(verbose: bool) -> &'static Regex {
    static NUMERIC: OnceLock<Regex> = OnceLock::new();
    static VERBOSE: OnceLock<Regex> = OnceLock::new();
    let (cell, pat) = if verbose { (&VERBOSE, GROUP_PAT_1_33) } else { (&NUMERIC, GROUP_PAT) };
    cell.get_or_init(|| Regex::new(&format!("^(resources|required|member_of|in_tree)({pat})?$")).expect("valid regex"))
}

fn py_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Parse and validate everything upstream checks before searching. Also
/// returns the groups whose `in_tree` is a uuid in another spelling than
/// the canonical one: upstream finds no provider by it, so they match
/// nothing (their `in_tree` is to be set to a uuid no provider has).
fn parse_request(req: &Req) -> ApiResult<(Request, Vec<usize>)> {
    let mut request = Request { nested_aware: req.at_least(29), ..Default::default() };

    // Request-wide parameters (`RequestWideParams.from_request`).
    if let Some((_, first)) = req.query.iter().find(|(k, _)| k == "limit") {
        let limit: usize = first.trim().parse().map_err(|_| {
            ApiError::bad_request(format!("Invalid query string parameters: '{first}' does not match '^[1-9][0-9]*$'"))
        })?;
        request.limit = Some(limit);
    }
    if let Some((_, first)) = req.query.iter().find(|(k, _)| k == "group_policy") {
        request.group_policy = Some(if first == "isolate" { GroupPolicy::Isolate } else { GroupPolicy::None });
    }
    let root_required: Vec<&str> = req.query_all("root_required").collect();
    if let Some(value) = root_required.first() {
        if root_required.len() > 1 {
            return Err(ApiError::bad_request("Query parameter 'root_required' may be specified only once.")
                .with_code(codes::ILLEGAL_DUPLICATE_QUERYPARAM));
        }
        let (required, forbidden) = normalize_traits(value, true, false)?;
        let required: BTreeSet<String> = required.into_iter().flatten().collect();
        let conflicts: Vec<String> = forbidden.intersection(&required).cloned().collect();
        if !conflicts.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Conflicting required and forbidden traits found in root_required: {}",
                conflicts.join(", ")
            ))
            .with_code(codes::QUERYPARAM_BAD_VALUE));
        }
        request.root_required = required.into_iter().collect();
        request.root_forbidden = forbidden.into_iter().collect();
    }
    for value in req.query_all("same_subtree") {
        let suffixes: BTreeSet<String> = value.split(',').map(|s| s.trim().to_owned()).collect();
        if suffixes.contains("") {
            return Err(ApiError::bad_request(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
            )
            .with_code(codes::QUERYPARAM_BAD_VALUE));
        }
        request.same_subtrees.push(suffixes.into_iter().collect());
    }

    // Request groups (`RequestGroup.dict_from_request`), in order of first appearance.
    let pattern = key_pattern(req.at_least(33));
    let mut groups: Vec<RequestGroup> = Vec::new();
    let mut trees_named_by_no_provider = Vec::new();
    for (key, value) in &req.query {
        let Some(caps) = pattern.captures(key) else { continue };
        let prefix = caps.get(1).map_or("", |m| m.as_str());
        let suffix = caps.get(2).map_or("", |m| m.as_str());
        let pos = match groups.iter().position(|g| g.suffix == suffix) {
            Some(pos) => pos,
            None => {
                groups.push(RequestGroup { suffix: suffix.to_owned(), ..Default::default() });
                groups.len() - 1
            }
        };
        let group = &mut groups[pos];
        match prefix {
            "resources" => group.resources = normalize_resources(value)?,
            "required" => {
                let name = format!("required{suffix}");
                let values: Vec<&str> = req.query_all(&name).collect();
                let (required, forbidden) = normalize_traits_params(&values, req.version)?;
                group.required_traits = required.into_iter().map(|s| s.into_iter().collect()).collect();
                group.forbidden_traits = forbidden.into_iter().collect();
            }
            "member_of" => {
                let name = format!("member_of{suffix}");
                let values: Vec<&str> = req.query_all(&name).collect();
                let (required, forbidden) = normalize_member_of_params(&values, req.version, suffix)?;
                group.member_of = required.into_iter().map(|s| s.into_iter().collect()).collect();
                group.forbidden_aggregates = forbidden.into_iter().collect();
            }
            _ => match normalize_in_tree(value)? {
                Some(uuid) => {
                    group.in_tree = Some(uuid);
                    trees_named_by_no_provider.retain(|&g| g != pos);
                }
                None => trees_named_by_no_provider.push(pos),
            },
        }
    }

    if req.at_least(36) {
        let resourceless: Vec<String> =
            groups.iter().filter(|g| g.resources.is_empty()).map(|g| g.suffix.clone()).collect();
        if resourceless.len() == groups.len() {
            return Err(ApiError::bad_request("There must be at least one resources or resources[$S] parameter.")
                .with_code(codes::QUERYPARAM_MISSING_VALUE));
        }
        let subtree: BTreeSet<&String> = request.same_subtrees.iter().flatten().collect();
        let mut bad: Vec<String> = resourceless.iter().filter(|s| !subtree.contains(s)).cloned().collect();
        bad.sort();
        if !bad.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Resourceless suffixed group request should be specified in `same_subtree` query param: \
                 bad group(s) - {}.",
                py_list(&bad)
            ))
            .with_code(codes::QUERYPARAM_BAD_VALUE));
        }
        let bad: Vec<String> =
            subtree.iter().filter(|s| !groups.iter().any(|g| &&g.suffix == *s)).map(|s| (*s).clone()).collect();
        if !bad.is_empty() {
            let all: Vec<String> = groups.iter().map(|g| g.suffix.clone()).collect();
            return Err(ApiError::bad_request(format!(
                "Real suffixes should be specified in `same_subtree`: {} not found in {}.",
                py_list(&bad),
                py_list(&all)
            ))
            .with_code(codes::QUERYPARAM_BAD_VALUE));
        }
    } else {
        let orphans: Vec<String> = groups
            .iter()
            .filter(|g| !g.required_traits.is_empty() && g.resources.is_empty())
            .map(|g| format!("required{}", g.suffix))
            .collect();
        if !orphans.is_empty() {
            return Err(ApiError::bad_request(format!(
                "All traits parameters must be associated with resources.  Found the following orphaned traits \
                 keys: {}",
                orphans.join(", ")
            )));
        }
        let orphans: Vec<String> = groups
            .iter()
            .filter(|g| g.resources.is_empty() && (!g.member_of.is_empty() || !g.forbidden_aggregates.is_empty()))
            .map(|g| format!("member_of{}", g.suffix))
            .collect();
        if !orphans.is_empty() {
            return Err(ApiError::bad_request(format!(
                "All member_of parameters must be associated with resources. Found the following orphaned \
                 member_of keys: {}",
                orphans.join(", ")
            )));
        }
        if groups.iter().any(|g| g.resources.is_empty()) {
            return Err(ApiError::bad_request("All request groups must specify resources."));
        }
        if groups.is_empty() {
            return Err(ApiError::bad_request(
                "At least one request group (`resources` or `resources{$S}`) is required.",
            ));
        }
    }
    if req.at_least(22) {
        let mut conflicts: Vec<String> = Vec::new();
        for g in &groups {
            for any in &g.required_traits {
                if any.iter().all(|t| g.forbidden_traits.contains(t)) {
                    let mut names = any.clone();
                    names.sort();
                    conflicts.push(format!("required{}: ({})", g.suffix, names.join(", ")));
                }
            }
        }
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(ApiError::bad_request(format!(
                "Conflicting required and forbidden traits found in the following traits keys: {}",
                conflicts.join(", ")
            )));
        }
    }
    if request.group_policy.is_none() && groups.iter().filter(|g| g.use_same_provider()).count() > 1 {
        return Err(ApiError::bad_request(
            "The \"group_policy\" parameter is required when specifying more than one \"resources{N}\" parameter.",
        ));
    }
    request.groups = groups;
    Ok((request, trees_named_by_no_provider))
}

/// The response body for the negotiated version, serialised straight into
/// bytes (no `Value` tree, no intermediate candidates): exactly the bytes
/// `serde_json::to_vec` would give for the `Value` upstream's shape
/// describes (see `tests::oracle`).
fn render(at_least: impl Fn(u16) -> bool, request: &Request, answer: &Answer<'_>) -> Vec<u8> {
    let mut w = JsonOut::with_capacity(estimate_size(answer));
    let v12 = at_least(12);
    let v34 = at_least(34);
    // The few class names and suffixes, quoted and escaped once: `"VCPU":`
    // and `"_SUFFIX":[`.
    let key = |name: &str, after: &[u8]| {
        let mut k = JsonOut::with_capacity(name.len() + 4);
        k.str(name);
        k.raw(after);
        k.into_bytes()
    };
    let class_keys: Vec<Vec<u8>> = answer.classes.iter().map(|c| key(c, b":")).collect();
    let suffix_keys: Vec<Vec<u8>> = answer.suffixes.iter().map(|s| key(s, b":[")).collect();
    w.raw(b"{\"allocation_requests\":[");
    for (i, ar) in answer.requests.iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.raw(if v12 { b"{\"allocations\":{" } else { b"{\"allocations\":[" });
        // Providers in first-use order, each with its amounts in order.
        let amounts = &ar.amounts[..];
        let mut first = true;
        for (j, &(rp, _, _)) in amounts.iter().enumerate() {
            if amounts[..j].iter().any(|e| e.0 == rp) {
                continue;
            }
            if !first {
                w.byte(b',');
            }
            first = false;
            let uuid = &answer.uuids[rp as usize];
            if v12 {
                w.uuid(uuid);
                w.raw(b":{\"resources\":");
            } else {
                w.raw(b"{\"resource_provider\":{\"uuid\":");
                w.uuid(uuid);
                w.raw(b"},\"resources\":");
            }
            w.byte(b'{');
            for (k, &(_, rc, n)) in amounts[j..].iter().filter(|e| e.0 == rp).enumerate() {
                if k > 0 {
                    w.byte(b',');
                }
                w.raw(&class_keys[usize::from(rc)]);
                w.int(n);
            }
            w.raw(b"}}");
        }
        if !v12 {
            w.raw(b"]}");
            continue;
        }
        w.byte(b'}');
        if v34 {
            w.raw(b",\"mappings\":{");
            for (g, rps) in ar.mappings.iter().enumerate() {
                if g > 0 {
                    w.byte(b',');
                }
                w.raw(&suffix_keys[g]);
                for (k, rp) in rps.iter().enumerate() {
                    if k > 0 {
                        w.byte(b',');
                    }
                    w.uuid(&answer.uuids[*rp as usize]);
                }
                w.byte(b']');
            }
            w.byte(b'}');
        }
        w.byte(b'}');
    }
    w.raw(b"],\"provider_summaries\":{");
    let all_resources = at_least(27);
    let v17 = at_least(17);
    let v29 = at_least(29);
    // Requested classes (a handful): a linear scan beats a set.
    let requested: Vec<&str> =
        request.groups.iter().flat_map(|g| g.resources.iter().map(|(rc, _)| rc.as_str())).collect();
    for (i, s) in answer.summaries().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.uuid(&s.uuid);
        w.raw(b":{\"resources\":{");
        let mut first = true;
        for r in s.resources.iter().filter(|r| all_resources || requested.contains(&r.resource_class)) {
            if !first {
                w.byte(b',');
            }
            first = false;
            w.str(r.resource_class);
            w.raw(b":{\"capacity\":");
            w.int(r.capacity);
            w.raw(b",\"used\":");
            w.int(r.used);
            w.byte(b'}');
        }
        w.byte(b'}');
        if v17 {
            w.raw(b",\"traits\":[");
            for (k, t) in s.traits.iter().enumerate() {
                if k > 0 {
                    w.byte(b',');
                }
                w.str(t);
            }
            w.byte(b']');
        }
        if v29 {
            w.raw(b",\"parent_provider_uuid\":");
            match &s.parent {
                Some(u) => w.uuid(u),
                None => w.raw(b"null"),
            }
            w.raw(b",\"root_provider_uuid\":");
            w.uuid(&s.root);
        }
        w.byte(b'}');
    }
    w.raw(b"}}");
    w.into_bytes()
}

/// A generous guess of the body size, so the buffer rarely regrows.
fn estimate_size(answer: &Answer<'_>) -> usize {
    let areqs: usize = answer
        .requests
        .iter()
        .map(|ar| 64 * ar.amounts.len() + ar.mappings.iter().map(|rps| 16 + 40 * rps.len()).sum::<usize>() + 40)
        .sum();
    let summaries: usize = answer.summarised.iter().map(|p| 160 + 48 * p.inventories.len() + 32 * p.traits.len()).sum();
    64 + areqs + summaries
}

/// A minimal JSON writer with serde_json's compact formatting and string
/// escaping.
struct JsonOut {
    buf: Vec<u8>,
    /// The uuid written last and its quoted form: a provider's uuid comes
    /// twice in a row in the common answer (an allocation and its mapping;
    /// a root provider's summary and its `root_provider_uuid`), so it is
    /// formatted once for both.
    last_uuid: uuid::Uuid,
    last_quoted: [u8; QUOTED_UUID_LEN],
}

/// A hyphenated uuid and its two quotes.
const QUOTED_UUID_LEN: usize = uuid::fmt::Hyphenated::LENGTH + 2;

/// `"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"` in lower case (hex digits
/// and hyphens: nothing to escape), without the uuid crate's generic
/// formatting path.
fn quoted_uuid(u: &uuid::Uuid) -> [u8; QUOTED_UUID_LEN] {
    /// Each byte's two hex digits.
    const PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        pairs
    };
    let b = u.as_bytes();
    let mut out = [b'-'; QUOTED_UUID_LEN];
    out[0] = b'"';
    out[QUOTED_UUID_LEN - 1] = b'"';
    // Each byte's digits after the opening quote and around the hyphens
    // at 9, 14, 19 and 24 (unrolled: constant offsets, no bounds checks).
    macro_rules! put {
        ($($i:literal => $at:literal),*) => {
            $(out[$at..$at + 2].copy_from_slice(&PAIRS[usize::from(b[$i])]);)*
        };
    }
    put!(0 => 1, 1 => 3, 2 => 5, 3 => 7, 4 => 10, 5 => 12, 6 => 15, 7 => 17, 8 => 20, 9 => 22, 10 => 25, 11 => 27,
        12 => 29, 13 => 31, 14 => 33, 15 => 35);
    out
}

/// Does `bytes` hold a byte serde_json escapes (`"`, `\` or a control
/// character below 0x20)? Eight bytes at a time (class and trait names
/// are short and never need escaping in practice).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Some byte of `v` below `n` (n <= 0x80): exact as a yes/no answer.
    let any_below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGHS != 0;
    let word = |v: u64| {
        any_below(v, 0x20) || any_below(v ^ (ONES * u64::from(b'"')), 1) || any_below(v ^ (ONES * u64::from(b'\\')), 1)
    };
    if bytes.len() < 8 {
        // Pad with a byte that needs no escaping.
        let mut padded = [b'A'; 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        return word(u64::from_le_bytes(padded));
    }
    let chunks = bytes.chunks_exact(8);
    let tail_start = bytes.len() - 8;
    chunks.map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).any(word)
        || word(u64::from_le_bytes(bytes[tail_start..].try_into().expect("8 bytes")))
}

impl JsonOut {
    fn with_capacity(n: usize) -> Self {
        let nil = uuid::Uuid::nil();
        Self { buf: Vec::with_capacity(n), last_uuid: nil, last_quoted: quoted_uuid(&nil) }
    }

    fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// One byte (a push, not a one-byte copy).
    fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }

    /// A quoted, escaped string (escapes exactly what serde_json escapes:
    /// `"`, `\` and control characters below 0x20).
    fn str(&mut self, s: &str) {
        let bytes = s.as_bytes();
        if !needs_escape(bytes) {
            self.buf.reserve(bytes.len() + 2);
            self.buf.push(b'"');
            self.buf.extend_from_slice(bytes);
            self.buf.push(b'"');
            return;
        }
        self.buf.push(b'"');
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let esc: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..=0x1f => b"",
                _ => continue,
            };
            self.buf.extend_from_slice(&bytes[start..i]);
            if esc.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.buf.extend_from_slice(b"\\u00");
                self.buf.push(HEX[(b >> 4) as usize]);
                self.buf.push(HEX[(b & 0xf) as usize]);
            } else {
                self.buf.extend_from_slice(esc);
            }
            start = i + 1;
        }
        self.buf.extend_from_slice(&bytes[start..]);
        self.buf.push(b'"');
    }

    /// A quoted uuid in hyphenated lower-case form.
    fn uuid(&mut self, u: &uuid::Uuid) {
        if *u != self.last_uuid {
            self.last_uuid = *u;
            self.last_quoted = quoted_uuid(u);
        }
        self.buf.extend_from_slice(&self.last_quoted);
    }

    fn int(&mut self, n: i64) {
        self.buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_candidates::Candidates;
    use berth_model::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ProviderRow, State};
    use uuid::Uuid;

    /// The former `Value`-tree rendering, kept as the reference.
    fn oracle(at_least: impl Fn(u16) -> bool, request: &Request, candidates: &Candidates) -> Value {
        let allocation_requests: Vec<Value> = candidates
            .allocation_requests
            .iter()
            .map(|ar| {
                if at_least(12) {
                    let allocations: Map<String, Value> = ar
                        .allocations
                        .iter()
                        .map(|(rp, res)| {
                            let resources: Map<String, Value> =
                                res.iter().map(|(rc, n)| ((*rc).to_owned(), json!(n))).collect();
                            (rp.to_string(), json!({"resources": resources}))
                        })
                        .collect();
                    let mut out = json!({"allocations": allocations});
                    if at_least(34) {
                        let mappings: Map<String, Value> = ar
                            .mappings
                            .iter()
                            .map(|(suffix, rps)| {
                                ((*suffix).to_owned(), Value::Array(rps.iter().map(|u| json!(u.to_string())).collect()))
                            })
                            .collect();
                        out["mappings"] = Value::Object(mappings);
                    }
                    out
                } else {
                    let allocations: Vec<Value> = ar
                        .allocations
                        .iter()
                        .map(|(rp, res)| {
                            let resources: Map<String, Value> =
                                res.iter().map(|(rc, n)| ((*rc).to_owned(), json!(n))).collect();
                            json!({"resource_provider": {"uuid": rp.to_string()}, "resources": resources})
                        })
                        .collect();
                    json!({"allocations": allocations})
                }
            })
            .collect();
        let all_resources = at_least(27);
        let requested: BTreeSet<&str> =
            request.groups.iter().flat_map(|g| g.resources.iter().map(|(rc, _)| rc.as_str())).collect();
        let summaries: Map<String, Value> = candidates
            .provider_summaries
            .iter()
            .map(|s| {
                let resources: Map<String, Value> = s
                    .resources
                    .iter()
                    .filter(|r| all_resources || requested.contains(r.resource_class))
                    .map(|r| (r.resource_class.to_owned(), json!({"capacity": r.capacity, "used": r.used})))
                    .collect();
                let mut out = json!({"resources": resources});
                if at_least(17) {
                    out["traits"] = json!(s.traits.as_slice());
                }
                if at_least(29) {
                    out["parent_provider_uuid"] = json!(s.parent.map(|u| u.to_string()));
                    out["root_provider_uuid"] = json!(s.root.to_string());
                }
                (s.uuid.to_string(), out)
            })
            .collect();
        json!({"allocation_requests": allocation_requests, "provider_summaries": summaries})
    }

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(0x1234_5678_9abc_4def_8000_0000_0000_0000 + n)
    }

    const WEIRD_RC: &str = "CUSTOM_\"Q\\\n";
    const WEIRD_TRAIT: &str = "CUSTOM_\u{1}\u{1f}\u{8}\u{c}\t\r\u{7f}é";

    /// Two trees (a compute node with a disk child; a lone node) with a
    /// class and a trait whose names need escaping, and some usage.
    fn sample_state() -> State {
        let mut state = State::with_standard_data(0);
        let mut set = ChangeSet::new();
        set.push(Change::PutResourceClass { id: 90_000, name: WEIRD_RC.into(), created_at: 0, updated_at: None });
        set.push(Change::PutTrait { id: 90_000, name: WEIRD_TRAIT.into(), created_at: 0 });
        let inv = |total: i64| Inventory {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: 1.0,
        };
        type Spec<'s> = (u128, Option<u128>, Vec<(&'s str, i64)>, Vec<&'s str>);
        let specs: [Spec<'_>; 3] = [
            (
                1,
                None,
                vec![("VCPU", 8), (WEIRD_RC, 1_234_567_890_123), ("MEMORY_MB", 4096)],
                vec!["HW_CPU_X86_AVX2", WEIRD_TRAIT],
            ),
            (2, Some(1), vec![("DISK_GB", 100)], vec![]),
            (3, None, vec![("VCPU", 4), ("DISK_GB", 5000)], vec!["HW_CPU_X86_AVX2"]),
        ];
        for (id, (n, parent, inventories, traits)) in specs.iter().enumerate() {
            set.push(Change::PutProvider {
                row: ProviderRow {
                    id: id as i64 + 1,
                    uuid: u(*n),
                    name: format!("rp{n}"),
                    generation: 0,
                    parent: parent.map(u),
                    root: u(parent.unwrap_or(*n)),
                    created_at: 0,
                    updated_at: 0,
                },
                expected_generation: None,
            });
            set.push(Change::SetInventories {
                provider: u(*n),
                inventories: inventories.iter().map(|(rc, total)| ((*rc).to_owned(), inv(*total))).collect(),
            });
            set.push(Change::SetProviderTraits {
                provider: u(*n),
                traits: traits.iter().map(|t| (*t).to_owned()).collect(),
            });
        }
        let mut allocations = AllocationMap::new();
        allocations.insert(u(1), [("VCPU".to_owned(), 2), ("MEMORY_MB".to_owned(), 512)].into_iter().collect());
        allocations.insert(u(3), [("DISK_GB".to_owned(), 70)].into_iter().collect());
        set.push(Change::PutConsumer {
            row: ConsumerRow {
                uuid: u(99),
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 0,
                consumer_type: None,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
            allocations,
        });
        state.apply(&set);
        state
    }

    fn group(suffix: &str, resources: &[(&str, i64)]) -> RequestGroup {
        RequestGroup {
            suffix: suffix.into(),
            resources: resources.iter().map(|(rc, n)| ((*rc).to_owned(), *n)).collect(),
            ..Default::default()
        }
    }

    /// Requests with one and several groups, one and several providers
    /// per candidate and per group.
    fn sample_requests() -> Vec<Request> {
        let request = |groups: Vec<RequestGroup>| Request {
            groups,
            nested_aware: true,
            group_policy: Some(GroupPolicy::None),
            ..Default::default()
        };
        vec![
            request(vec![group("", &[("VCPU", 1), (WEIRD_RC, 2)]), group("_X", &[("DISK_GB", 5)])]),
            request(vec![group("", &[("DISK_GB", 5)])]),
            request(vec![group("", &[("VCPU", 1), ("DISK_GB", 5)])]),
            request(vec![group("_A", &[("VCPU", 1)]), group("_B", &[("DISK_GB", 5)])]),
        ]
    }

    #[test]
    fn bytes_match_value_rendering_at_every_version() {
        let state = sample_state();
        for request in sample_requests() {
            let answer = berth_candidates::find_packed(&state, &request).expect("known classes");
            assert!(!answer.requests.is_empty(), "{request:?}");
            let candidates = answer.to_candidates();
            for minor in 10..=39u16 {
                let at_least = |m: u16| minor >= m;
                let expected = serde_json::to_vec(&oracle(at_least, &request, &candidates)).expect("serialises");
                let got = render(at_least, &request, &answer);
                assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected), "1.{minor}");
            }
        }
    }

    #[test]
    fn escape_check_and_uuid_format_match_the_plain_ones() {
        let naive = |s: &[u8]| s.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        let alphabet: &[u8] = b"AZ_09\"\\\x00\x1f\x20\x7f\xc3\xa9";
        for len in 0..20 {
            for (k, &special) in alphabet.iter().enumerate() {
                for at in 0..len {
                    let mut s = vec![b'A' + (k as u8 % 26); len];
                    s[at] = special;
                    assert_eq!(needs_escape(&s), naive(&s), "{s:?}");
                }
            }
            assert!(!needs_escape(&vec![b'Q'; len]));
        }
        for n in [0u128, 1, u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
            let u = Uuid::from_u128(n);
            assert_eq!(quoted_uuid(&u)[..], format!("\"{u}\"").into_bytes()[..]);
        }
    }

    #[test]
    fn random_seeds_differ_per_request() {
        let seeds: std::collections::BTreeSet<u64> = (0..16).map(|_| super::random_seed()).collect();
        assert_eq!(seeds.len(), 16);
    }

    #[test]
    fn empty_answer() {
        let state = State::with_standard_data(0);
        let request = Request { groups: vec![group("", &[("VCPU", 1)])], ..Default::default() };
        let answer = berth_candidates::find_packed(&state, &request).expect("known class");
        let got = render(|_| true, &request, &answer);
        assert_eq!(got, b"{\"allocation_requests\":[],\"provider_summaries\":{}}");
    }
}
