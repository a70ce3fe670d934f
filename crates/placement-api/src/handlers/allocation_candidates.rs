//! `GET /allocation_candidates` (1.10+), as upstream's
//! `handlers/allocation_candidate.py` + `lib.py` (`RequestGroup`,
//! `RequestWideParams`): parse and validate the query per microversion,
//! run the pure engine (`berth-candidates`), render per microversion.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use axum::http::StatusCode;
use berth_candidates::{Candidates, CandidatesError, GroupPolicy, Request, RequestGroup};
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
        let candidates = berth_candidates::find(state, &request).map_err(|e| match e {
            CandidatesError::ResourceClassNotFound(_) => {
                ApiError::bad_request(format!("Invalid resource class in resources parameter: {e}"))
            }
            CandidatesError::TraitNotFound(_) => ApiError::bad_request(e.to_string()),
        })?;
        if candidates.capped {
            // Never silent: a cap that cut viable candidates is counted.
            app.candidates_capped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(request_id = %req.request_id, "allocation candidates capped by --max-allocation-candidates");
        }
        render(|minor| req.at_least(minor), &request, &candidates)
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
/// bytes (no `Value` tree): exactly the bytes `serde_json::to_vec` would
/// give for the `Value` upstream's shape describes (see `tests::oracle`).
fn render(at_least: impl Fn(u16) -> bool, request: &Request, candidates: &Candidates) -> Vec<u8> {
    let mut w = JsonOut::with_capacity(estimate_size(candidates));
    let v12 = at_least(12);
    let v34 = at_least(34);
    w.raw(b"{\"allocation_requests\":[");
    for (i, ar) in candidates.allocation_requests.iter().enumerate() {
        if i > 0 {
            w.raw(b",");
        }
        if v12 {
            w.raw(b"{\"allocations\":{");
            for (j, (rp, res)) in ar.allocations.iter().enumerate() {
                if j > 0 {
                    w.raw(b",");
                }
                w.uuid(rp);
                w.raw(b":{\"resources\":");
                w.amounts(res);
                w.raw(b"}");
            }
            w.raw(b"}");
            if v34 {
                w.raw(b",\"mappings\":{");
                for (j, (suffix, rps)) in ar.mappings.iter().enumerate() {
                    if j > 0 {
                        w.raw(b",");
                    }
                    w.str(suffix);
                    w.raw(b":[");
                    for (k, rp) in rps.iter().enumerate() {
                        if k > 0 {
                            w.raw(b",");
                        }
                        w.uuid(rp);
                    }
                    w.raw(b"]");
                }
                w.raw(b"}");
            }
            w.raw(b"}");
        } else {
            w.raw(b"{\"allocations\":[");
            for (j, (rp, res)) in ar.allocations.iter().enumerate() {
                if j > 0 {
                    w.raw(b",");
                }
                w.raw(b"{\"resource_provider\":{\"uuid\":");
                w.uuid(rp);
                w.raw(b"},\"resources\":");
                w.amounts(res);
                w.raw(b"}");
            }
            w.raw(b"]}");
        }
    }
    w.raw(b"],\"provider_summaries\":{");
    let all_resources = at_least(27);
    let v17 = at_least(17);
    let v29 = at_least(29);
    // Requested classes (a handful): a linear scan beats a set.
    let requested: Vec<&str> =
        request.groups.iter().flat_map(|g| g.resources.iter().map(|(rc, _)| rc.as_str())).collect();
    for (i, s) in candidates.provider_summaries.iter().enumerate() {
        if i > 0 {
            w.raw(b",");
        }
        w.uuid(&s.uuid);
        w.raw(b":{\"resources\":{");
        let mut first = true;
        for r in s.resources.iter().filter(|r| all_resources || requested.contains(&r.resource_class)) {
            if !first {
                w.raw(b",");
            }
            first = false;
            w.str(r.resource_class);
            w.raw(b":{\"capacity\":");
            w.int(r.capacity);
            w.raw(b",\"used\":");
            w.int(r.used);
            w.raw(b"}");
        }
        w.raw(b"}");
        if v17 {
            w.raw(b",\"traits\":[");
            for (k, t) in s.traits.iter().enumerate() {
                if k > 0 {
                    w.raw(b",");
                }
                w.str(t);
            }
            w.raw(b"]");
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
        w.raw(b"}");
    }
    w.raw(b"}}");
    w.into_bytes()
}

/// A generous guess of the body size, so the buffer rarely regrows.
fn estimate_size(c: &Candidates) -> usize {
    let areqs: usize = c
        .allocation_requests
        .iter()
        .map(|ar| {
            ar.allocations.iter().map(|(_, res)| 64 + 24 * res.len()).sum::<usize>()
                + ar.mappings.iter().map(|(_, rps)| 16 + 40 * rps.len()).sum::<usize>()
                + 40
        })
        .sum();
    let summaries: usize =
        c.provider_summaries.iter().map(|s| 160 + 48 * s.resources.len() + 32 * s.traits.len()).sum();
    64 + areqs + summaries
}

/// A minimal JSON writer with serde_json's compact formatting and string
/// escaping.
struct JsonOut {
    buf: Vec<u8>,
}

impl JsonOut {
    fn with_capacity(n: usize) -> Self {
        Self { buf: Vec::with_capacity(n) }
    }

    fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A quoted, escaped string (escapes exactly what serde_json escapes:
    /// `"`, `\` and control characters below 0x20).
    fn str(&mut self, s: &str) {
        let bytes = s.as_bytes();
        // Class and trait names never need escaping in practice: test all
        // bytes at once (no early exit, so the check vectorises) and copy.
        if !bytes.iter().fold(false, |any, &b| any | (b < 0x20) | (b == b'"') | (b == b'\\')) {
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

    /// A quoted uuid in hyphenated lower-case form (hex digits and
    /// hyphens: nothing to escape).
    fn uuid(&mut self, u: &uuid::Uuid) {
        let mut tmp = [0u8; uuid::fmt::Hyphenated::LENGTH];
        self.buf.push(b'"');
        self.buf.extend_from_slice(u.hyphenated().encode_lower(&mut tmp).as_bytes());
        self.buf.push(b'"');
    }

    fn int(&mut self, n: i64) {
        let mut tmp = [0u8; 20];
        let mut pos = tmp.len();
        let mut v = n.unsigned_abs();
        loop {
            pos -= 1;
            tmp[pos] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if n < 0 {
            self.buf.push(b'-');
        }
        self.buf.extend_from_slice(&tmp[pos..]);
    }

    /// `{"CLASS":amount,...}`.
    fn amounts(&mut self, res: &[(&str, i64)]) {
        self.buf.push(b'{');
        for (k, (rc, n)) in res.iter().enumerate() {
            if k > 0 {
                self.buf.push(b',');
            }
            self.str(rc);
            self.buf.push(b':');
            self.int(*n);
        }
        self.buf.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_candidates::{AllocationRequest, ProviderSummary, SummaryResource};
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

    fn sample() -> (Request, Candidates<'static>) {
        let u = |n: u128| Uuid::from_u128(0x1234_5678_9abc_4def_8000_0000_0000_0000 + n);
        let request = Request {
            groups: vec![
                RequestGroup {
                    resources: vec![("VCPU".into(), 1), ("CUSTOM_\"Q\\\n".into(), 2)],
                    ..Default::default()
                },
                RequestGroup { suffix: "_X".into(), resources: vec![("DISK_GB".into(), 5)], ..Default::default() },
            ],
            ..Default::default()
        };
        fn areq<'a>(
            allocations: Vec<(Uuid, Vec<(&'a str, i64)>)>,
            mappings: Vec<(&'a str, Vec<Uuid>)>,
        ) -> AllocationRequest<'a> {
            AllocationRequest {
                allocations: allocations.into_iter().map(|(rp, amounts)| (rp, amounts.into_iter().collect())).collect(),
                mappings: mappings.into_iter().map(|(suffix, rps)| (suffix, rps.into_iter().collect())).collect(),
            }
        }
        let candidates = Candidates {
            allocation_requests: vec![
                areq(
                    vec![(u(1), vec![("VCPU", 1), ("CUSTOM_\"Q\\\n", 2)]), (u(2), vec![("DISK_GB", -5)])],
                    vec![("", vec![u(1)]), ("_X", vec![u(2), u(3)])],
                ),
                areq(vec![(u(3), vec![("DISK_GB", 1234567890123)])], vec![]),
            ],
            provider_summaries: vec![
                ProviderSummary {
                    uuid: u(1),
                    parent: None,
                    root: u(1),
                    resources: [
                        SummaryResource { resource_class: "VCPU", capacity: 8, used: 0 },
                        SummaryResource { resource_class: "CUSTOM_\"Q\\\n", capacity: i64::MAX, used: i64::MIN },
                        SummaryResource { resource_class: "MEMORY_MB", capacity: 1, used: 2 },
                    ]
                    .into_iter()
                    .collect(),
                    traits: ["HW_CPU_X86_AVX2", "CUSTOM_\u{1}\u{1f}\u{8}\u{c}\t\r\u{7f}é"].into_iter().collect(),
                },
                ProviderSummary {
                    uuid: u(2),
                    parent: Some(u(1)),
                    root: u(1),
                    resources: Default::default(),
                    traits: Default::default(),
                },
            ],
            capped: false,
        };
        (request, candidates)
    }

    #[test]
    fn bytes_match_value_rendering_at_every_version() {
        let (request, candidates) = sample();
        for minor in 10..=39u16 {
            let at_least = |m: u16| minor >= m;
            let expected = serde_json::to_vec(&oracle(at_least, &request, &candidates)).expect("serialises");
            let got = render(at_least, &request, &candidates);
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected), "1.{minor}");
        }
    }

    #[test]
    fn random_seeds_differ_per_request() {
        let seeds: std::collections::BTreeSet<u64> = (0..16).map(|_| super::random_seed()).collect();
        assert_eq!(seeds.len(), 16);
    }

    #[test]
    fn empty_answer() {
        let got = render(|_| true, &Request::default(), &Candidates::default());
        assert_eq!(got, b"{\"allocation_requests\":[],\"provider_summaries\":{}}");
    }
}
