//! Parsers under fuzzing (issue 10, item 3): generated and mutated requests
//! sent through the real placement request path — `berth_http::dispatch`
//! with `berth_placement_api::api()`, which is what `berth serve`'s router
//! hands every placement path to, over a real `berth_core::App` on SQLite
//! in a temp dir — in process, without TCP.
//!
//! Properties, for every request:
//! - the dispatch never panics and never answers 5xx;
//! - every 4xx carries placement's error body (`{"errors": [{"status",
//!   "title", "detail", "request_id", ...}]}`, or webob's HTML page when
//!   the client accepted only HTML);
//! - a 4xx, and any GET, leaves the placement state exactly as it was
//!   (compared on the snapshot itself, not through the API);
//! - a 2xx that declares JSON carries JSON (some bodies are written by
//!   hand, without a `Value` tree).
//!
//! Whenever the world is rebuilt, and at the end, the snapshot in memory
//! must also equal a fresh load from the database.
//!
//! A small fixed world (three providers — a compute node, its NUMA child
//! and a sharing disk provider — with inventories, traits, an aggregate
//! and two consumers with allocations) is seeded first, so that mutations
//! of valid requests get past the parsers into the planning code. Requests
//! are built against the live state (current generations, inventories,
//! allocations), so unmutated ones succeed; successful writes move the
//! world away from the seed, and after [`DRIFT_LIMIT`] of them it is
//! rebuilt from scratch.
//!
//! Not generated yet (TODO(nul)): the NUL character U+0000 anywhere (being
//! refused with a 400 across berth-http's parsing by another change), and
//! nothing here looks at allocation order (being reworked too): the
//! snapshot compares allocations as sets.
//!
//! Deterministic: every property runs from the fixed generator seed
//! [`SEED`] (ChaCha; `BERTH_FUZZ_SEED=<u64>` picks another), with the case
//! counts in [`CASES`] (`BERTH_FUZZ_CASES=<factor>` multiplies them for a
//! longer local run). A failure prints the concrete request and response.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use berth_core::App;
use berth_http::{Api, AuthMode, HttpConfig, Server};
use berth_model::{ConsumerRow, Inventory, ProviderRow, ResourceClass, State, Trait, Uuid};
use berth_placement_api::{CandidateOptions, Placement};
use berth_store_sqlite::SqliteStore;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use proptest::prelude::*;
use proptest::sample::{select, subsequence, Index};
use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestCaseError, TestError, TestRunner};
use serde_json::{json, Map, Value};

/// The generator seed of every property (override: `BERTH_FUZZ_SEED`).
const SEED: u64 = 0x6265_7274_685f_667a; // "berth_fz"

/// Cases per property (scaled by `BERTH_FUZZ_CASES`): 4,000 in all.
const CASES: [(&str, u32); 4] =
    [("queries", 1500), ("mutated_bodies", 1500), ("random_bodies", 500), ("header_values", 500)];

/// Successful state-changing writes before the world is rebuilt from the
/// seed.
const DRIFT_LIMIT: usize = 6;

const RP_A: &str = "aaaaaaaa-0000-4000-8000-000000000001"; // compute node "cn1"
const RP_B: &str = "aaaaaaaa-0000-4000-8000-000000000002"; // its NUMA child
const RP_C: &str = "aaaaaaaa-0000-4000-8000-000000000003"; // sharing disk provider
const RP_MISSING: &str = "aaaaaaaa-0000-4000-8000-0000000000ff";
const AGG: &str = "bbbbbbbb-0000-4000-8000-000000000001";
const AGG2: &str = "bbbbbbbb-0000-4000-8000-000000000002";
const CONS1: &str = "cccccccc-0000-4000-8000-000000000001";
const CONS2: &str = "cccccccc-0000-4000-8000-000000000002";
const CONS_NEW: &str = "cccccccc-0000-4000-8000-000000000003";
const PROJECT: &str = "proj-fuzz";
const USER: &str = "user-fuzz";

// ---------------------------------------------------------------------------
// The harness: a real App on SQLite, the placement API, the dispatch.

/// One request on the wire.
#[derive(Clone)]
struct Wire {
    method: Method,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > 1500 {
        format!("{}… ({} bytes)", text.chars().take(1500).collect::<String>(), bytes.len())
    } else {
        text.into_owned()
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} {}", self.method, shown(self.uri.as_bytes()))?;
        for (name, value) in &self.headers {
            writeln!(f, "{name}: {}", shown(value))?;
        }
        write!(f, "\n{}", shown(&self.body))
    }
}

/// A response, read whole.
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}) {}", self.status, self.content_type, shown(&self.body))
    }
}

/// A data directory with a store, the core and placement over it.
struct World {
    dir: PathBuf,
    app: Arc<App>,
    placement: Arc<Placement>,
}

impl World {
    fn open(dir: PathBuf) -> Self {
        let _ = std::fs::remove_dir_all(&dir);
        let store = SqliteStore::open_dir(&dir).expect("open sqlite store");
        let app = Arc::new(App::new(Arc::new(store)).expect("app"));
        // `berth serve`'s defaults: no randomisation, no candidate cap.
        let placement = Arc::new(Placement::new(app.clone(), CandidateOptions::default()));
        World { dir, app, placement }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Debug, Default)]
struct Stats {
    by_status: BTreeMap<u16, usize>,
    /// Error messages (their start) by count, to see how deep the cases
    /// get (printed with `BERTH_FUZZ_VERBOSE=1`).
    by_error: BTreeMap<String, usize>,
    rebuilds: usize,
}

struct Harness {
    tag: &'static str,
    world: World,
    api: Api<Placement>,
    server: Server,
    runtime: tokio::runtime::Runtime,
    /// Successful writes since the last rebuild.
    drift: usize,
    /// Feeds fresh names and uuids into request templates.
    counter: usize,
    stats: Stats,
}

impl Harness {
    fn new(tag: &'static str) -> Self {
        let mut harness = Harness {
            tag,
            world: World::open(Self::dir_for(tag, 0)),
            api: berth_placement_api::api(&BTreeMap::new()).expect("placement api"),
            // `berth serve`'s defaults (noauth2, no CORS, 10 MiB bodies).
            server: Server {
                config: HttpConfig {
                    auth_mode: AuthMode::NoAuth2,
                    validator: None,
                    agent_credentials: None,
                    cors: None,
                    max_body_bytes: 10 * 1024 * 1024,
                },
                metrics: Default::default(),
            },
            runtime: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"),
            drift: 0,
            counter: 0,
            stats: Stats::default(),
        };
        harness.seed();
        harness
    }

    fn dir_for(tag: &str, n: usize) -> PathBuf {
        std::env::temp_dir().join(format!("berth-fuzz-{tag}-{}-{n}", std::process::id()))
    }

    fn send(&self, wire: &Wire) -> Answer {
        let mut builder = Request::builder().method(wire.method.clone()).uri(wire.uri.as_str());
        for (name, value) in &wire.headers {
            // What a client cannot put on the wire (hyper refuses it before
            // any application sees it) is not sent.
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
                builder = builder.header(name, value);
            }
        }
        if !wire.body.is_empty() {
            builder = builder.header("content-length", wire.body.len());
        }
        let request = builder.body(Body::from(wire.body.clone())).expect("request");
        let path = request.uri().path().to_owned();
        let placement = &self.world.placement;
        let response = self.runtime.block_on(berth_http::dispatch(placement, &self.api, &self.server, &path, request));
        let status = response.status().as_u16();
        let content_type =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let body = self.runtime.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).expect("body");
        Answer { status, content_type, body: body.to_vec() }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot::of(&self.world.app.read().placement)
    }

    /// The snapshot in memory equals a fresh load from the database.
    fn check_durable(&self) -> Result<(), TestCaseError> {
        let loaded = self.world.app.store().load().map_err(|e| TestCaseError::fail(format!("load: {e}")))?;
        let mut on_disk = Snapshot::of(&loaded.state.placement);
        let mut in_memory = self.snapshot();
        // Id high-water marks are kept in memory only.
        on_disk.counters = (0, 0, 0);
        in_memory.counters = (0, 0, 0);
        if on_disk != in_memory {
            return Err(TestCaseError::fail(format!(
                "[{}] memory and database disagree:\n{}",
                self.tag,
                in_memory.diff(&on_disk)
            )));
        }
        Ok(())
    }

    fn rebuild(&mut self) -> Result<(), TestCaseError> {
        self.check_durable()?;
        self.stats.rebuilds += 1;
        self.world = World::open(Self::dir_for(self.tag, self.stats.rebuilds));
        self.drift = 0;
        self.seed();
        Ok(())
    }

    fn generation(&self, rp: &str) -> i64 {
        let world = self.world.app.read();
        Uuid::parse_str(rp).ok().and_then(|u| world.placement.provider(&u).map(|p| p.row.generation)).unwrap_or(0)
    }

    fn seed_call(&self, method: Method, path: &str, body: Option<Value>) {
        let mut headers = vec![
            ("openstack-api-version".to_owned(), b"placement latest".to_vec()),
            ("x-auth-token".to_owned(), b"admin".to_vec()),
        ];
        let body = match body {
            Some(value) => {
                headers.push(("content-type".to_owned(), b"application/json".to_vec()));
                serde_json::to_vec(&value).expect("json")
            }
            None => Vec::new(),
        };
        let wire = Wire { method, uri: path.to_owned(), headers, body };
        let answer = self.send(&wire);
        assert!(answer.status < 300, "seeding failed:\n{wire:?}\n-> {answer:?}");
    }

    /// The fixed world every property starts from.
    fn seed(&mut self) {
        use Method as M;
        self.seed_call(M::POST, "/resource_classes", Some(json!({"name": "CUSTOM_MAGIC"})));
        self.seed_call(M::PUT, "/traits/CUSTOM_FOO", None);
        self.seed_call(M::POST, "/resource_providers", Some(json!({"name": "cn1", "uuid": RP_A})));
        self.seed_call(
            M::POST,
            "/resource_providers",
            Some(json!({"name": "cn1_numa0", "uuid": RP_B, "parent_provider_uuid": RP_A})),
        );
        self.seed_call(M::POST, "/resource_providers", Some(json!({"name": "shared_disk", "uuid": RP_C})));
        let inventories = [
            (
                RP_A,
                json!({"VCPU": {"total": 8, "allocation_ratio": 2.0}, "MEMORY_MB": {"total": 4096, "reserved": 512},
                          "DISK_GB": {"total": 100, "max_unit": 50}}),
            ),
            (RP_B, json!({"VCPU": {"total": 4}, "CUSTOM_MAGIC": {"total": 16, "step_size": 2}})),
            (RP_C, json!({"DISK_GB": {"total": 1000, "min_unit": 5}})),
        ];
        for (rp, records) in inventories {
            let generation = self.generation(rp);
            self.seed_call(
                M::PUT,
                &format!("/resource_providers/{rp}/inventories"),
                Some(json!({"resource_provider_generation": generation, "inventories": records})),
            );
        }
        for (rp, traits) in
            [(RP_A, json!(["HW_CPU_X86_AVX2", "CUSTOM_FOO"])), (RP_C, json!(["MISC_SHARES_VIA_AGGREGATE"]))]
        {
            let generation = self.generation(rp);
            self.seed_call(
                M::PUT,
                &format!("/resource_providers/{rp}/traits"),
                Some(json!({"traits": traits, "resource_provider_generation": generation})),
            );
        }
        for rp in [RP_A, RP_C] {
            let generation = self.generation(rp);
            self.seed_call(
                M::PUT,
                &format!("/resource_providers/{rp}/aggregates"),
                Some(json!({"aggregates": [AGG], "resource_provider_generation": generation})),
            );
        }
        self.seed_call(
            M::PUT,
            &format!("/allocations/{CONS1}"),
            Some(json!({
                "allocations": {RP_A: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}, RP_C: {"resources": {"DISK_GB": 10}}},
                "project_id": PROJECT, "user_id": USER, "consumer_generation": null, "consumer_type": "INSTANCE",
            })),
        );
        self.seed_call(
            M::PUT,
            &format!("/allocations/{CONS2}"),
            Some(json!({
                "allocations": {RP_B: {"resources": {"VCPU": 1, "CUSTOM_MAGIC": 2}}},
                "project_id": PROJECT, "user_id": "other-user", "consumer_generation": null,
                "consumer_type": "MIGRATION",
            })),
        );
    }

    /// Send one generated case and check every property.
    fn run(&mut self, case: &Case) -> Result<(), TestCaseError> {
        self.counter += 1;
        let wire = self.wire(case);
        let before = self.snapshot();
        let answer = self.send(&wire);
        let after = self.snapshot();
        *self.stats.by_status.entry(answer.status).or_default() += 1;
        if answer.status >= 400 {
            let body: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
            let detail = body.pointer("/errors/0/detail").and_then(Value::as_str).unwrap_or("(not JSON)");
            let message = detail.rsplit("\n\n").next().unwrap_or(detail).trim();
            let key = format!("{} {}", answer.status, message.chars().take(70).collect::<String>());
            *self.stats.by_error.entry(key).or_default() += 1;
        }
        let context = || format!("[{}] request:\n{wire:?}\n\nresponse: {answer:?}", self.tag);
        if answer.status >= 500 {
            return Err(TestCaseError::fail(format!("5xx answer\n{}", context())));
        }
        if answer.status >= 400 {
            check_error_body(&wire, &answer).map_err(|why| TestCaseError::fail(format!("{why}\n{}", context())))?;
            if before != after {
                return Err(TestCaseError::fail(format!(
                    "a {} changed the state:\n{}\n{}",
                    answer.status,
                    before.diff(&after),
                    context()
                )));
            }
        }
        if answer.status < 300
            && answer.content_type == "application/json"
            && serde_json::from_slice::<Value>(&answer.body).is_err()
        {
            return Err(TestCaseError::fail(format!(
                "a {} with a body that is not JSON\n{}",
                answer.status,
                context()
            )));
        }
        if wire.method == Method::GET && before != after {
            return Err(TestCaseError::fail(format!(
                "a GET changed the state:\n{}\n{}",
                before.diff(&after),
                context()
            )));
        }
        if before != after {
            self.drift += 1;
            if self.drift >= DRIFT_LIMIT {
                self.rebuild()?;
            }
        }
        Ok(())
    }

    /// The concrete request for `case` against the live state.
    fn wire(&self, case: &Case) -> Wire {
        let minor = case.version.minor();
        let (method, path, template) = {
            let world = self.world.app.read();
            match &case.route {
                Route::Read(read) => (Method::GET, read.path(), None),
                Route::Write(write) => write.build(minor, &world.placement, self.counter),
            }
        };
        let method = case.method.clone().unwrap_or(method);
        let body = match &case.route {
            Route::Read(_) => case.body.bytes(None),
            Route::Write(_) => case.body.bytes(template),
        };
        // Request targets stay under what `http` accepts (64 KiB; hyper
        // answers longer ones itself, before any application).
        let mut path = path;
        for (at, text) in &case.path_splices {
            // After the leading '/', at a char boundary (encoded paths are
            // ASCII).
            path.insert_str(1 + at.index(path.len()), text);
        }
        truncate_ascii(&mut path, MAX_TARGET / 2);
        let mut query = encode_query(&case.query, &case.query_mutations);
        truncate_ascii(&mut query, MAX_TARGET / 2);
        let uri = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
        // Whatever a client could not send as a request target is sent
        // percent-encoded (hyper refuses the raw form with its own 400).
        let uri = if uri.parse::<Uri>().is_ok() {
            uri
        } else {
            let mut query = utf8_percent_encode(&query, QUERY_FALLBACK).to_string();
            truncate_ascii(&mut query, MAX_TARGET / 2);
            format!("{path}?{query}")
        };
        let mut headers = Vec::new();
        if let Some(value) = case.version.header() {
            headers.push(("openstack-api-version".to_owned(), value.into_bytes()));
        }
        headers.extend(case.headers.list());
        Wire { method, uri, headers, body }
    }
}

/// Placement's error format for a 4xx.
fn check_error_body(wire: &Wire, answer: &Answer) -> Result<(), String> {
    if answer.content_type.starts_with("text/html") {
        let accept = wire
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("accept"))
            .map(|(_, value)| String::from_utf8_lossy(value).to_ascii_lowercase())
            .collect::<String>();
        if !accept.contains("text/html") {
            return Err("an HTML error although HTML was not asked for".into());
        }
        let body = String::from_utf8_lossy(&answer.body);
        if !body.contains(&format!("<h1>{} ", answer.status)) {
            return Err("HTML error page without its status".into());
        }
        return Ok(());
    }
    if answer.content_type != "application/json" {
        return Err(format!("error with content type {:?}", answer.content_type));
    }
    let body: Value = serde_json::from_slice(&answer.body).map_err(|e| format!("error body is not JSON: {e}"))?;
    let errors = body.get("errors").and_then(Value::as_array).ok_or("error body without an \"errors\" list")?;
    if errors.is_empty() {
        return Err("empty \"errors\" list".into());
    }
    for error in errors {
        if error.get("status").and_then(Value::as_u64) != Some(u64::from(answer.status)) {
            return Err("error \"status\" differs from the response status".into());
        }
        if error.get("title").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err("error without a \"title\"".into());
        }
        if error.get("detail").and_then(Value::as_str).is_none() {
            return Err("error without a \"detail\"".into());
        }
        if !error.get("request_id").and_then(Value::as_str).is_some_and(|r| r.starts_with("req-")) {
            return Err("error without a \"request_id\"".into());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The snapshot compared before and after each request.

#[derive(Debug, PartialEq)]
struct ProviderView {
    row: ProviderRow,
    inventories: BTreeMap<String, Inventory>,
    traits: BTreeSet<String>,
    aggregates: BTreeSet<Uuid>,
    usages: BTreeMap<String, i64>,
    consumers: BTreeSet<Uuid>,
    children: BTreeSet<Uuid>,
}

#[derive(Debug, PartialEq)]
struct ConsumerView {
    row: ConsumerRow,
    // TODO(nul): the order allocations are kept in is being reworked by
    // another engineer; compared as sets until then (nothing generated here
    // asserts on allocation order).
    allocations: BTreeMap<Uuid, BTreeMap<String, i64>>,
}

/// Everything placement keeps that a request could change (derived
/// search indexes excepted), in canonical order.
#[derive(Debug, PartialEq)]
struct Snapshot {
    providers: BTreeMap<Uuid, ProviderView>,
    provider_names: BTreeMap<String, Uuid>,
    provider_order: Vec<Uuid>,
    consumers: BTreeMap<Uuid, ConsumerView>,
    resource_classes: BTreeMap<String, ResourceClass>,
    traits: BTreeMap<String, Trait>,
    /// Highest provider, trait and custom class ids handed out.
    counters: (i64, i64, i64),
}

impl Snapshot {
    fn of(state: &State) -> Self {
        let providers = state
            .providers
            .iter()
            .map(|(uuid, p)| {
                let view = ProviderView {
                    row: p.row.clone(),
                    inventories: p.inventories.clone(),
                    traits: p.traits.clone(),
                    aggregates: p.aggregates.clone(),
                    usages: p.usages.iter().filter(|(_, used)| **used != 0).map(|(c, u)| (c.clone(), *u)).collect(),
                    consumers: p.consumers.clone(),
                    children: p.children.clone(),
                };
                (*uuid, view)
            })
            .collect();
        let consumers = state
            .consumers
            .iter()
            .map(|(uuid, c)| {
                let allocations = c
                    .allocations
                    .iter()
                    .map(|(rp, amounts)| (*rp, amounts.iter().map(|(class, n)| (class.clone(), *n)).collect()))
                    .collect();
                (*uuid, ConsumerView { row: c.row.clone(), allocations })
            })
            .collect();
        Snapshot {
            providers,
            provider_names: state.provider_names.iter().map(|(n, u)| (n.clone(), *u)).collect(),
            provider_order: state.provider_order.values().copied().collect(),
            consumers,
            resource_classes: state.resource_classes.clone(),
            traits: state.traits.clone(),
            counters: (state.max_provider_id, state.max_trait_id, state.max_resource_class_id),
        }
    }

    /// What differs, entry by entry.
    fn diff(&self, other: &Snapshot) -> String {
        fn maps<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
            what: &str,
            a: &BTreeMap<K, V>,
            b: &BTreeMap<K, V>,
            out: &mut String,
        ) {
            let keys: BTreeSet<&K> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (x, y) = (a.get(key), b.get(key));
                if x != y {
                    out.push_str(&format!("  {what} {key:?}:\n    before {x:?}\n    after  {y:?}\n"));
                }
            }
        }
        let mut out = String::new();
        maps("provider", &self.providers, &other.providers, &mut out);
        maps("provider name", &self.provider_names, &other.provider_names, &mut out);
        maps("consumer", &self.consumers, &other.consumers, &mut out);
        maps("resource class", &self.resource_classes, &other.resource_classes, &mut out);
        maps("trait", &self.traits, &other.traits, &mut out);
        if self.provider_order != other.provider_order {
            out.push_str(&format!("  provider order {:?} -> {:?}\n", self.provider_order, other.provider_order));
        }
        if self.counters != other.counters {
            out.push_str(&format!("  id counters {:?} -> {:?}\n", self.counters, other.counters));
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Generated cases.

#[derive(Debug, Clone)]
enum Route {
    Read(Read),
    Write(Write),
}

/// Query parameters in order (repeats kept).
type Pairs = Vec<(String, String)>;

/// A GET route with its path segments.
#[derive(Debug, Clone)]
enum Read {
    Root,
    AllocationCandidates,
    ResourceProviders,
    Usages,
    Traits,
    ResourceClasses,
    Provider(String),
    ProviderPart(String, &'static str),
    Inventory(String, String),
    Consumer(String),
    ResourceClass(String),
    Trait(String),
}

impl Read {
    fn min_minor(&self) -> u16 {
        match self {
            Read::AllocationCandidates => 10,
            Read::Usages => 9,
            Read::Traits | Read::Trait(_) => 6,
            Read::ResourceClasses | Read::ResourceClass(_) => 2,
            Read::ProviderPart(_, "traits") => 6,
            Read::ProviderPart(_, "aggregates") => 1,
            _ => 0,
        }
    }

    fn path(&self) -> String {
        match self {
            Read::Root => "/".into(),
            Read::AllocationCandidates => "/allocation_candidates".into(),
            Read::ResourceProviders => "/resource_providers".into(),
            Read::Usages => "/usages".into(),
            Read::Traits => "/traits".into(),
            Read::ResourceClasses => "/resource_classes".into(),
            Read::Provider(rp) => format!("/resource_providers/{}", seg(rp)),
            Read::ProviderPart(rp, part) => format!("/resource_providers/{}/{part}", seg(rp)),
            Read::Inventory(rp, rc) => format!("/resource_providers/{}/inventories/{}", seg(rp), seg(rc)),
            Read::Consumer(c) => format!("/allocations/{}", seg(c)),
            Read::ResourceClass(rc) => format!("/resource_classes/{}", seg(rc)),
            Read::Trait(name) => format!("/traits/{}", seg(name)),
        }
    }

    /// Valid query parameters of this route, for the generator to pick from
    /// (`base` always, `extra` as a random subsequence).
    fn query_pool(&self) -> (Pairs, Pairs) {
        let p = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        match self {
            Read::AllocationCandidates => (
                vec![p("resources", "VCPU:1,MEMORY_MB:512")],
                vec![
                    p("resources", "DISK_GB:10"),
                    p("required", "HW_CPU_X86_AVX2"),
                    p("required", "!CUSTOM_FOO"),
                    p("required", "in:HW_CPU_X86_AVX2,CUSTOM_FOO"),
                    p("member_of", &format!("in:{AGG},{AGG2}")),
                    p("member_of", &format!("!{AGG2}")),
                    p("in_tree", RP_A),
                    p("limit", "5"),
                    p("group_policy", "isolate"),
                    p("resources1", "VCPU:1"),
                    p("required1", "CUSTOM_FOO"),
                    p("member_of1", AGG),
                    p("in_tree1", RP_A),
                    p("resources_NUMA", "CUSTOM_MAGIC:2"),
                    p("same_subtree", "_NUMA,1"),
                    p("root_required", "HW_CPU_X86_AVX2,!CUSTOM_BAR"),
                    p("resources2", "DISK_GB:5"),
                    p("required_NUMA", "!HW_CPU_X86_AVX2"),
                ],
            ),
            Read::ResourceProviders => (
                vec![],
                vec![
                    p("name", "cn1"),
                    p("uuid", RP_A),
                    p("member_of", &format!("in:{AGG},{AGG2}")),
                    p("member_of", &format!("!{AGG2}")),
                    p("resources", "VCPU:1,DISK_GB:10"),
                    p("in_tree", RP_A),
                    p("required", "HW_CPU_X86_AVX2"),
                    p("required", "!CUSTOM_FOO"),
                    p("required", "in:CUSTOM_FOO,MISC_SHARES_VIA_AGGREGATE"),
                ],
            ),
            Read::Usages => (
                vec![p("project_id", PROJECT)],
                vec![
                    p("user_id", USER),
                    p("consumer_type", "INSTANCE"),
                    p("consumer_type", "all"),
                    p("consumer_type", "unknown"),
                ],
            ),
            Read::Traits => (
                vec![],
                vec![
                    p("name", "in:HW_CPU_X86_AVX2,CUSTOM_FOO"),
                    p("name", "startswith:CUSTOM_"),
                    p("associated", "true"),
                    p("associated", "false"),
                ],
            ),
            _ => (vec![], vec![]),
        }
    }
}

/// A write route with its path segments; the body is built against the
/// live state.
#[derive(Debug, Clone)]
enum Write {
    CreateProvider { uuid: bool, parent: Option<String> },
    UpdateProvider { rp: String, rename: u8, parent: Option<String> },
    DeleteProvider { rp: String },
    SetInventories { rp: String, add: Option<String> },
    CreateInventory { rp: String, rc: String },
    UpdateInventory { rp: String, rc: String },
    DeleteInventories { rp: String },
    DeleteInventory { rp: String, rc: String },
    SetAggregates { rp: String },
    SetProviderTraits { rp: String },
    DeleteProviderTraits { rp: String },
    PutTrait { name: String },
    DeleteTrait { name: String },
    CreateResourceClass { name: String },
    UpdateResourceClass { name: String },
    DeleteResourceClass { name: String },
    PutAllocations { consumer: String, shape: u8 },
    PostAllocations { consumers: Vec<(String, u8)> },
    DeleteAllocations { consumer: String },
    Reshape { rp: String, consumer: String },
}

/// One provider's inventories as request records.
fn inventory_records(state: &State, rp: &str) -> Map<String, Value> {
    let provider = Uuid::parse_str(rp).ok().and_then(|u| state.provider(&u));
    let mut out = Map::new();
    for (class, inv) in provider.map(|p| &p.inventories).into_iter().flatten() {
        out.insert(
            class.clone(),
            json!({"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit, "max_unit": inv.max_unit,
                   "step_size": inv.step_size, "allocation_ratio": inv.allocation_ratio}),
        );
    }
    if out.is_empty() {
        out.insert("VCPU".into(), json!({"total": 4}));
    }
    out
}

/// A consumer's allocation body (dict form) at `minor`: its current
/// allocations with `shape` 0, else one of a few valid requests.
fn consumer_body(state: &State, consumer: &str, shape: u8, minor: u16) -> Value {
    let existing = Uuid::parse_str(consumer).ok().and_then(|u| state.consumers.get(&u));
    let allocations = match (shape % 5, existing) {
        (0, Some(c)) => {
            let mut out = Map::new();
            for (rp, amounts) in &c.allocations {
                out.insert(rp.to_string(), json!({"resources": amounts}));
            }
            Value::Object(out)
        }
        (1, _) => json!({RP_B: {"resources": {"VCPU": 1, "CUSTOM_MAGIC": 2}}}),
        (2, _) => json!({RP_A: {"resources": {"VCPU": 1}}, RP_C: {"resources": {"DISK_GB": 5}}}),
        (3, _) => json!({}),
        _ => json!({RP_A: {"resources": {"VCPU": 2, "MEMORY_MB": 256}, "generation": 1}}),
    };
    let mut body = json!({
        "allocations": allocations,
        "project_id": existing.map_or(PROJECT, |c| c.row.project_id.as_str()),
        "user_id": existing.map_or(USER, |c| c.row.user_id.as_str()),
    });
    if minor >= 28 {
        body["consumer_generation"] = json!(existing.map(|c| c.row.generation));
    }
    if minor >= 34 && shape.is_multiple_of(2) {
        body["mappings"] = json!({"_NUMA": [RP_B], "1": [RP_A]});
    }
    if minor >= 38 {
        body["consumer_type"] = json!(existing.and_then(|c| c.row.consumer_type.clone()).unwrap_or("INSTANCE".into()));
    }
    body
}

impl Write {
    fn min_minor(&self) -> u16 {
        match self {
            Write::SetAggregates { .. } => 1,
            Write::CreateResourceClass { .. }
            | Write::UpdateResourceClass { .. }
            | Write::DeleteResourceClass { .. } => 2,
            Write::SetInventories { .. } | Write::DeleteInventories { .. } => 5,
            Write::SetProviderTraits { .. }
            | Write::DeleteProviderTraits { .. }
            | Write::PutTrait { .. }
            | Write::DeleteTrait { .. } => 6,
            Write::PutAllocations { .. } => 0,
            Write::PostAllocations { .. } => 13,
            Write::Reshape { .. } => 30,
            _ => 0,
        }
    }

    /// Method, path and the valid body for the live `state` at `minor`.
    fn build(&self, minor: u16, state: &State, n: usize) -> (Method, String, Option<Value>) {
        use Method as M;
        let generation =
            |rp: &str| Uuid::parse_str(rp).ok().and_then(|u| state.provider(&u)).map_or(0, |p| p.row.generation);
        let rp_path = |rp: &str| format!("/resource_providers/{}", seg(rp));
        let fresh_uuid = Uuid::from_u128(0xdddd_dddd_0000_4000_8000_0000_0000_0000 | n as u128).to_string();
        match self {
            Write::CreateProvider { uuid, parent } => {
                let mut body = json!({"name": format!("fuzz-{n}")});
                if *uuid {
                    body["uuid"] = json!(fresh_uuid);
                }
                if let Some(parent) = parent.as_ref().filter(|_| minor >= 14) {
                    body["parent_provider_uuid"] = json!(parent);
                }
                (M::POST, "/resource_providers".into(), Some(body))
            }
            Write::UpdateProvider { rp, rename, parent } => {
                let current = Uuid::parse_str(rp).ok().and_then(|u| state.provider(&u));
                let name = match rename % 3 {
                    0 => current.map_or("cn1".to_owned(), |p| p.row.name.clone()),
                    1 => format!("fuzz-renamed-{n}"),
                    _ => "shared_disk".to_owned(),
                };
                let mut body = json!({"name": name});
                if minor >= 14 {
                    body["parent_provider_uuid"] = match parent {
                        Some(parent) => json!(parent),
                        None => json!(current.and_then(|p| p.row.parent).map(|u| u.to_string())),
                    };
                }
                (M::PUT, rp_path(rp), Some(body))
            }
            Write::DeleteProvider { rp } => (M::DELETE, rp_path(rp), None),
            Write::SetInventories { rp, add } => {
                let mut records = inventory_records(state, rp);
                if let Some(class) = add {
                    records.insert(class.clone(), json!({"total": 10, "reserved": 1}));
                }
                let body = json!({"resource_provider_generation": generation(rp), "inventories": records});
                (M::PUT, format!("{}/inventories", rp_path(rp)), Some(body))
            }
            Write::CreateInventory { rp, rc } => {
                let body = json!({"resource_class": rc, "total": 32, "reserved": 0, "min_unit": 1, "max_unit": 32,
                                  "step_size": 1, "allocation_ratio": 1.0});
                (M::POST, format!("{}/inventories", rp_path(rp)), Some(body))
            }
            Write::UpdateInventory { rp, rc } => {
                let body = json!({"resource_provider_generation": generation(rp), "total": 64, "reserved": 2,
                                  "min_unit": 1, "max_unit": 64, "step_size": 1, "allocation_ratio": 1.5});
                (M::PUT, format!("{}/inventories/{}", rp_path(rp), seg(rc)), Some(body))
            }
            Write::DeleteInventories { rp } => (M::DELETE, format!("{}/inventories", rp_path(rp)), None),
            Write::DeleteInventory { rp, rc } => (M::DELETE, format!("{}/inventories/{}", rp_path(rp), seg(rc)), None),
            Write::SetAggregates { rp } => {
                let body = if minor >= 19 {
                    json!({"aggregates": [AGG, AGG2], "resource_provider_generation": generation(rp)})
                } else {
                    json!([AGG, AGG2])
                };
                (M::PUT, format!("{}/aggregates", rp_path(rp)), Some(body))
            }
            Write::SetProviderTraits { rp } => {
                let body = json!({"traits": ["HW_CPU_X86_AVX2", "CUSTOM_FOO", "HW_CPU_X86_SSE"],
                                  "resource_provider_generation": generation(rp)});
                (M::PUT, format!("{}/traits", rp_path(rp)), Some(body))
            }
            Write::DeleteProviderTraits { rp } => (M::DELETE, format!("{}/traits", rp_path(rp)), None),
            Write::PutTrait { name } => (M::PUT, format!("/traits/{}", seg(name)), None),
            Write::DeleteTrait { name } => (M::DELETE, format!("/traits/{}", seg(name)), None),
            Write::CreateResourceClass { name } => (M::POST, "/resource_classes".into(), Some(json!({"name": name}))),
            Write::UpdateResourceClass { name } => {
                let body = (minor < 7).then(|| json!({"name": format!("CUSTOM_RENAMED_{n}")}));
                (M::PUT, format!("/resource_classes/{}", seg(name)), body)
            }
            Write::DeleteResourceClass { name } => (M::DELETE, format!("/resource_classes/{}", seg(name)), None),
            Write::PutAllocations { consumer, shape } => {
                let body = if minor >= 12 {
                    consumer_body(state, consumer, *shape, minor)
                } else {
                    // The list form of 1.0-1.11 (owner from 1.8).
                    let mut body = json!({"allocations": [
                        {"resource_provider": {"uuid": RP_A}, "resources": {"VCPU": 1, "MEMORY_MB": 128}},
                        {"resource_provider": {"uuid": RP_C}, "resources": {"DISK_GB": 5}},
                    ]});
                    if minor >= 8 {
                        body["project_id"] = json!(PROJECT);
                        body["user_id"] = json!(USER);
                    }
                    body
                };
                (M::PUT, format!("/allocations/{}", seg(consumer)), Some(body))
            }
            Write::PostAllocations { consumers } => {
                let body: Map<String, Value> = consumers
                    .iter()
                    .map(|(consumer, shape)| (consumer.clone(), consumer_body(state, consumer, *shape, minor)))
                    .collect();
                (M::POST, "/allocations".into(), Some(Value::Object(body)))
            }
            Write::DeleteAllocations { consumer } => (M::DELETE, format!("/allocations/{}", seg(consumer)), None),
            Write::Reshape { rp, consumer } => {
                let body = json!({
                    "inventories": {rp.clone(): {"resource_provider_generation": generation(rp),
                                                  "inventories": inventory_records(state, rp)}},
                    "allocations": {consumer.clone(): consumer_body(state, consumer, 0, minor)},
                });
                (M::POST, "/reshaper".into(), Some(body))
            }
        }
    }
}

/// The `OpenStack-API-Version` header, and the microversion the request
/// templates are built for.
#[derive(Debug, Clone)]
enum VersionChoice {
    /// `placement 1.N` in one of a few spellings.
    Minor(u16, u8),
    Latest,
    Absent,
    Raw(String),
}

impl VersionChoice {
    fn minor(&self) -> u16 {
        match self {
            VersionChoice::Minor(minor, _) => *minor,
            VersionChoice::Absent => 0,
            VersionChoice::Latest | VersionChoice::Raw(_) => 39,
        }
    }

    fn header(&self) -> Option<String> {
        match self {
            VersionChoice::Minor(minor, style) => Some(match style % 5 {
                0 | 1 => format!("placement 1.{minor}"),
                2 => format!("PLACEMENT 1.{minor}"),
                3 => format!("compute 2.1, placement 1.{minor}"),
                _ => format!("  placement   1.{minor}  "),
            }),
            VersionChoice::Latest => Some("placement latest".into()),
            VersionChoice::Absent => None,
            VersionChoice::Raw(text) => Some(text.clone()),
        }
    }
}

/// Auth, content and extra headers.
#[derive(Debug, Clone)]
struct Headers {
    token: Option<String>,
    content_type: Option<String>,
    accept: Option<String>,
    extra: Vec<(String, Vec<u8>)>,
}

impl Headers {
    fn list(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for (name, value) in
            [("x-auth-token", &self.token), ("content-type", &self.content_type), ("accept", &self.accept)]
        {
            if let Some(value) = value {
                out.push((name.to_owned(), value.clone().into_bytes()));
            }
        }
        out.extend(self.extra.iter().cloned());
        out
    }
}

/// A change to the query, on its decoded pairs or on the encoded text.
#[derive(Debug, Clone)]
enum QueryMutation {
    Drop(Index),
    Duplicate(Index),
    SetValue(Index, String),
    SetKey(Index, String),
    Append(String, String),
    InsertChar(Index, Index, char),
    DeleteChar(Index, Index),
    ReplaceChar(Index, Index, char),
    /// Raw text spliced into the encoded query.
    Raw(Index, String),
    /// A pair's value rewritten in its key's own grammar, from edge pieces.
    Grammar(Index, Grammar),
    /// A new pair whose value follows its key's grammar.
    AppendGrammar(String, Grammar),
}

/// One item of a query value: whatever the key's grammar needs of it.
#[derive(Debug, Clone)]
struct Piece {
    class: String,
    trait_name: String,
    uuid: String,
    number: String,
    suffix: String,
    forbidden: bool,
}

/// A query value built from edge pieces in the grammar of its key
/// (`resources`: `CLASS:N,...`; `required`: `[in:]T,!T`; `member_of`:
/// `[!][in:]U,U`; ...), so that generated values get past the first
/// split into the number, uuid and trait parsers.
#[derive(Debug, Clone)]
struct Grammar {
    prefix: u8,
    separator: u8,
    pieces: Vec<Piece>,
}

impl Grammar {
    fn value_for(&self, key: &str) -> String {
        let separator = match self.separator % 8 {
            0 => ",,",
            1 => ", ",
            _ => ",",
        };
        let join = |items: Vec<String>| items.join(separator);
        // Suffixed group keys (`resources1`, `member_of_NUMA`) share their
        // prefix's grammar.
        let kind = ["resources", "required", "member_of", "in_tree"].into_iter().find(|k| key.starts_with(k));
        let kind = kind.unwrap_or(key);
        let first = self.pieces.first();
        match kind {
            "resources" => join(self.pieces.iter().map(|p| format!("{}:{}", p.class, p.number)).collect()),
            "required" | "root_required" => {
                let prefix = if self.prefix.is_multiple_of(4) { "in:" } else { "" };
                let names = self
                    .pieces
                    .iter()
                    .map(|p| format!("{}{}", if p.forbidden { "!" } else { "" }, p.trait_name))
                    .collect();
                format!("{prefix}{}", join(names))
            }
            "member_of" => {
                let prefix = ["", "in:", "!in:", "!", "in:", ""][usize::from(self.prefix % 6)];
                format!("{prefix}{}", join(self.pieces.iter().map(|p| p.uuid.clone()).collect()))
            }
            "in_tree" | "uuid" => first.map(|p| p.uuid.clone()).unwrap_or_default(),
            "limit" => first.map(|p| p.number.clone()).unwrap_or_default(),
            "same_subtree" => join(self.pieces.iter().map(|p| p.suffix.clone()).collect()),
            "group_policy" => ["isolate", "none", "", "ISOLATE"][usize::from(self.prefix % 4)].to_owned(),
            _ => join(self.pieces.iter().map(|p| p.trait_name.clone()).collect()),
        }
    }
}

/// A change to a JSON body, at a node picked among all of its nodes.
#[derive(Debug, Clone)]
enum JsonMutation {
    Drop(Index),
    Replace(Index, Value),
    Insert(Index, String, Value),
    Wrap(Index, u8),
    Duplicate(Index),
    RenameKey(Index, String),
}

/// A change to the serialised body.
#[derive(Debug, Clone)]
enum ByteMutation {
    Insert(Index, u8),
    Delete(Index),
    Replace(Index, u8),
    Truncate(Index),
    Splice(Index, String),
}

/// How the body is made.
#[derive(Debug, Clone)]
enum BodyGen {
    /// The route's valid body with these mutations.
    Template(Vec<JsonMutation>),
    /// The route's valid body, serialised, with these byte changes.
    Bytes(Vec<ByteMutation>),
    /// A random JSON value.
    Random(Value),
    /// Random bytes.
    Raw(Vec<u8>),
}

impl BodyGen {
    fn bytes(&self, template: Option<Value>) -> Vec<u8> {
        match self {
            BodyGen::Template(mutations) => match template {
                None if mutations.is_empty() => Vec::new(),
                template => {
                    let mut value = template.unwrap_or_else(|| json!({}));
                    for mutation in mutations {
                        mutate_json(&mut value, mutation);
                    }
                    serde_json::to_vec(&value).expect("json")
                }
            },
            BodyGen::Bytes(mutations) => {
                let mut bytes = template.map(|t| serde_json::to_vec(&t).expect("json")).unwrap_or_default();
                for mutation in mutations {
                    mutate_bytes(&mut bytes, mutation);
                }
                bytes
            }
            BodyGen::Random(value) => serde_json::to_vec(value).expect("json"),
            BodyGen::Raw(bytes) => bytes.clone(),
        }
    }
}

/// One generated request.
#[derive(Debug, Clone)]
struct Case {
    route: Route,
    /// Overrides the route's method (header fuzzing).
    method: Option<Method>,
    /// Raw text spliced into the encoded path (`%FF`, `//`, `/..`).
    path_splices: Vec<(Index, String)>,
    query: Vec<(String, String)>,
    query_mutations: Vec<QueryMutation>,
    body: BodyGen,
    version: VersionChoice,
    headers: Headers,
}

// ---------------------------------------------------------------------------
// Encoding and mutation.

/// Path segments and query text keep only what never needs escaping.
const SEGMENT: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b':').remove(b',').remove(b'!');

/// Everything but `&`, `=` and `%` when a spliced query is not a valid
/// request target.
const QUERY_FALLBACK: &AsciiSet = &NON_ALPHANUMERIC.remove(b'&').remove(b'=').remove(b'%');

/// Longest request target sent (`http` refuses 64 KiB and more).
const MAX_TARGET: usize = 60_000;

/// Cut encoded (ASCII) text to at most `max` bytes.
fn truncate_ascii(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

fn seg(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

fn encode_query(pairs: &[(String, String)], mutations: &[QueryMutation]) -> String {
    let mut pairs = pairs.to_vec();
    let mut raw = Vec::new();
    for mutation in mutations {
        let pick = |pairs: &[(String, String)], idx: &Index| (!pairs.is_empty()).then(|| idx.index(pairs.len()));
        match mutation {
            QueryMutation::Drop(idx) => {
                if let Some(i) = pick(&pairs, idx) {
                    pairs.remove(i);
                }
            }
            QueryMutation::Duplicate(idx) => {
                if let Some(i) = pick(&pairs, idx) {
                    pairs.insert(i, pairs[i].clone());
                }
            }
            QueryMutation::SetValue(idx, value) => {
                if let Some(i) = pick(&pairs, idx) {
                    pairs[i].1 = value.clone();
                }
            }
            QueryMutation::SetKey(idx, key) => {
                if let Some(i) = pick(&pairs, idx) {
                    pairs[i].0 = key.clone();
                }
            }
            QueryMutation::Append(key, value) => pairs.push((key.clone(), value.clone())),
            QueryMutation::InsertChar(idx, at, c) => {
                if let Some(i) = pick(&pairs, idx) {
                    edit_chars(&mut pairs[i].1, at, |chars, pos| chars.insert(pos.min(chars.len()), *c));
                }
            }
            QueryMutation::DeleteChar(idx, at) => {
                if let Some(i) = pick(&pairs, idx) {
                    edit_chars(&mut pairs[i].1, at, |chars, pos| {
                        if pos < chars.len() {
                            chars.remove(pos);
                        }
                    });
                }
            }
            QueryMutation::ReplaceChar(idx, at, c) => {
                if let Some(i) = pick(&pairs, idx) {
                    edit_chars(&mut pairs[i].1, at, |chars, pos| {
                        if pos < chars.len() {
                            chars[pos] = *c;
                        }
                    });
                }
            }
            QueryMutation::Raw(at, text) => raw.push((*at, text.clone())),
            QueryMutation::Grammar(idx, grammar) => {
                if let Some(i) = pick(&pairs, idx) {
                    pairs[i].1 = grammar.value_for(&pairs[i].0);
                }
            }
            QueryMutation::AppendGrammar(key, grammar) => pairs.push((key.clone(), grammar.value_for(key))),
        }
    }
    let mut query = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", utf8_percent_encode(k, SEGMENT), utf8_percent_encode(v, SEGMENT)))
        .collect::<Vec<_>>()
        .join("&");
    for (at, text) in raw {
        // Splice at a char boundary (the encoded text is ASCII).
        let pos = at.index(query.len() + 1);
        query.insert_str(pos, &text);
    }
    query
}

fn edit_chars(text: &mut String, at: &Index, edit: impl FnOnce(&mut Vec<char>, usize)) {
    let mut chars: Vec<char> = text.chars().collect();
    let pos = at.index(chars.len() + 1);
    edit(&mut chars, pos);
    *text = chars.into_iter().collect();
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Item(usize),
}

/// Every node of `value`, pre-order (the root is `[]`).
fn node_paths(value: &Value) -> Vec<Vec<Step>> {
    fn walk(value: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        out.push(path.clone());
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    path.push(Step::Key(key.clone()));
                    walk(child, path, out);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    path.push(Step::Item(i));
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

fn node_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut node = value;
    for step in path {
        node = match step {
            Step::Key(key) => node.as_object_mut()?.get_mut(key)?,
            Step::Item(i) => node.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(node)
}

fn mutate_json(value: &mut Value, mutation: &JsonMutation) {
    let paths = node_paths(value);
    let at = |idx: &Index| paths[idx.index(paths.len())].clone();
    match mutation {
        JsonMutation::Drop(idx) => {
            let path = at(idx);
            let Some((last, parent)) = path.split_last() else {
                *value = Value::Null;
                return;
            };
            match (node_mut(value, parent), last) {
                (Some(Value::Object(map)), Step::Key(key)) => {
                    map.remove(key);
                }
                (Some(Value::Array(items)), Step::Item(i)) => {
                    items.remove(*i);
                }
                _ => {}
            }
        }
        JsonMutation::Replace(idx, new) => {
            if let Some(node) = node_mut(value, &at(idx)) {
                *node = new.clone();
            }
        }
        JsonMutation::Insert(idx, key, new) => {
            if let Some(node) = node_mut(value, &at(idx)) {
                match node {
                    Value::Object(map) => {
                        map.insert(key.clone(), new.clone());
                    }
                    Value::Array(items) => items.push(new.clone()),
                    other => *other = json!({key.clone(): new.clone()}),
                }
            }
        }
        JsonMutation::Wrap(idx, depth) => {
            if let Some(node) = node_mut(value, &at(idx)) {
                let mut wrapped = node.take();
                for level in 0..*depth {
                    wrapped = if level % 2 == 0 { json!([wrapped]) } else { json!({"x": wrapped}) };
                }
                *node = wrapped;
            }
        }
        JsonMutation::Duplicate(idx) => {
            let path = at(idx);
            let Some((last, parent)) = path.split_last() else { return };
            let Some(copy) = node_mut(value, &path).map(|n| n.clone()) else { return };
            match (node_mut(value, parent), last) {
                (Some(Value::Object(map)), Step::Key(key)) => {
                    map.insert(format!("{key}_"), copy);
                }
                (Some(Value::Array(items)), Step::Item(i)) => items.insert(*i, copy),
                _ => {}
            }
        }
        JsonMutation::RenameKey(idx, new_key) => {
            let path = at(idx);
            let Some((Step::Key(key), parent)) = path.split_last() else { return };
            if let Some(Value::Object(map)) = node_mut(value, parent) {
                if let Some(child) = map.remove(key) {
                    map.insert(new_key.clone(), child);
                }
            }
        }
    }
}

fn mutate_bytes(bytes: &mut Vec<u8>, mutation: &ByteMutation) {
    let len = bytes.len();
    match mutation {
        ByteMutation::Insert(at, b) => bytes.insert(at.index(len + 1), *b),
        ByteMutation::Delete(at) if len > 0 => {
            bytes.remove(at.index(len));
        }
        ByteMutation::Replace(at, b) if len > 0 => bytes[at.index(len)] = *b,
        ByteMutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
        ByteMutation::Splice(at, text) => {
            let pos = at.index(len + 1);
            bytes.splice(pos..pos, text.bytes());
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Strategies.

/// Characters for generated text: mostly what names and queries are made
/// of, plus separators, control characters and any Unicode.
fn fuzz_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('A', 'Z'),
        2 => prop::char::range('0', '9'),
        1 => Just('_'),
        1 => prop::char::range('a', 'z'),
        2 => select(vec![':', ',', '!', '-', '=', '&', '%', '+', ' ', '"', '\\', '/', '.', '{', '}', '[', ']', '#', '?', ';']),
        // TODO(nul): U+0000 is being refused with a 400 across berth-http's
        // parsing by another engineer; start this range at '\u{0}' then.
        1 => prop::char::range('\u{1}', '\u{1f}'),
        1 => any::<char>().prop_filter("no NUL until TODO(nul) is done", |c| *c != '\0'),
    ]
}

/// Names, numbers and uuids the parsers know, and some they must refuse.
fn known_words() -> Vec<String> {
    [
        "",
        " ",
        "VCPU",
        "MEMORY_MB",
        "DISK_GB",
        "CUSTOM_MAGIC",
        "CUSTOM_FOO",
        "CUSTOM_NEW",
        "HW_CPU_X86_AVX2",
        "MISC_SHARES_VIA_AGGREGATE",
        "custom_lower",
        "CUSTOM_",
        "in:",
        "!in:",
        "!",
        "!!",
        "in:,",
        ":",
        ",",
        "VCPU:",
        ":1",
        "VCPU:1:2",
        "VCPU:1,",
        "VCPU:0",
        "VCPU:-1",
        "VCPU:+1",
        "VCPU:1_0",
        "VCPU:99999999999999999999",
        "VCPU:9223372036854775807",
        "-1",
        "0",
        "1",
        "5",
        "1.5",
        "1e3",
        "true",
        "false",
        "null",
        "none",
        "isolate",
        "all",
        "unknown",
        "INSTANCE",
        "latest",
        "startswith:",
        "in:CUSTOM_FOO,",
        "9223372036854775808",
        "-9223372036854775808",
        "2147483648",
        "_NUMA",
        "1",
        "é",
        "日本",
        "🦀",
        "\u{202e}",
        "\u{7f}",
        "\t",
        "\r\n",
        "{}",
        "[]",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([RP_A, RP_B, RP_C, RP_MISSING, AGG, AGG2, CONS1, CONS_NEW].iter().map(|s| (*s).to_owned()))
    .chain([RP_A.to_uppercase(), RP_A.replace('-', ""), format!("{{{RP_A}}}"), format!("urn:uuid:{RP_A}")])
    .chain([format!("in:{AGG},{AGG2}"), format!("!in:{AGG}"), format!("{AGG},{AGG2}"), format!("!{AGG}")])
    .collect()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(known_words()),
        3 => prop::collection::vec(fuzz_char(), 0..24).prop_map(String::from_iter),
        1 => (select(vec!['A', 'x', 'é', '🦀', '\u{1}']), select(vec![199usize, 200, 201, 255, 256, 1024, 70_000]))
            .prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
}

/// Scalars with the edges the parsers must survive.
fn scalar() -> impl Strategy<Value = Value> {
    let ints: Vec<i64> = vec![
        0,
        1,
        -1,
        2,
        7,
        64,
        0x7FFF_FFFF,
        0x8000_0000,
        -0x8000_0000,
        i64::from(u32::MAX),
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
        1 << 53,
    ];
    let floats = vec![
        0.5,
        -0.0,
        0.0,
        1.0,
        3.0,
        -3.0,
        1e300,
        -1e300,
        1e-300,
        2147483647.0,
        2147483648.0,
        3.40282e38,
        3.5e38,
        f64::MAX,
        9.3e18,
    ];
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        3 => select(ints).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => select(vec![u64::MAX, 1 << 63]).prop_map(Value::from),
        2 => select(floats).prop_map(|f| json!(f)),
        4 => text().prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn json_mutation() -> impl Strategy<Value = JsonMutation> {
    prop_oneof![
        2 => any::<Index>().prop_map(JsonMutation::Drop),
        5 => (any::<Index>(), json_value()).prop_map(|(i, v)| JsonMutation::Replace(i, v)),
        2 => (any::<Index>(), text(), json_value()).prop_map(|(i, k, v)| JsonMutation::Insert(i, k, v)),
        1 => (any::<Index>(), select(vec![1u8, 2, 3, 40, 200])).prop_map(|(i, d)| JsonMutation::Wrap(i, d)),
        1 => any::<Index>().prop_map(JsonMutation::Duplicate),
        1 => (any::<Index>(), text()).prop_map(|(i, k)| JsonMutation::RenameKey(i, k)),
    ]
}

/// Bytes for raw body edits. TODO(nul): include 0x00 once NUL is refused
/// everywhere.
fn body_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => select(b"{}[]\",:0123456789-+.eE \\ntrufalsnul".to_vec()),
        1 => 1u8..=255,
    ]
}

fn byte_mutation() -> impl Strategy<Value = ByteMutation> {
    prop_oneof![
        3 => (any::<Index>(), body_byte()).prop_map(|(i, b)| ByteMutation::Insert(i, b)),
        3 => any::<Index>().prop_map(ByteMutation::Delete),
        3 => (any::<Index>(), body_byte()).prop_map(|(i, b)| ByteMutation::Replace(i, b)),
        1 => any::<Index>().prop_map(ByteMutation::Truncate),
        2 => (any::<Index>(), select(vec![
            "1e400", "-1e400", "99999999999999999999999", "\\ud800", "\\uDFFF", "\"\\u00e9\"", "NaN", "Infinity",
            ",,", "{\"a\":", "]]]]", "\"\\", "0x10", "01", "-", ".5", "1.", "\u{feff}",
        ]).prop_map(str::to_owned)).prop_map(|(i, t)| ByteMutation::Splice(i, t)),
    ]
}

fn rp_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => select(vec![RP_A, RP_B, RP_C]).prop_map(str::to_owned),
        1 => Just(RP_MISSING.to_owned()),
        1 => mangled_uuid(RP_A),
        1 => text(),
    ]
}

fn consumer_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => select(vec![CONS1, CONS2, CONS_NEW]).prop_map(str::to_owned),
        1 => mangled_uuid(CONS1),
        1 => text(),
    ]
}

fn class_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(vec!["VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_MAGIC", "CUSTOM_NEW", "IPV4_ADDRESS"])
            .prop_map(str::to_owned),
        1 => text(),
    ]
}

fn trait_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(vec!["CUSTOM_FOO", "CUSTOM_NEW", "HW_CPU_X86_AVX2", "MISC_SHARES_VIA_AGGREGATE"])
            .prop_map(str::to_owned),
        1 => text(),
    ]
}

/// A uuid in a form only some parsers accept, or slightly broken.
fn mangled_uuid(uuid: &'static str) -> impl Strategy<Value = String> {
    (0u8..8, any::<Index>(), fuzz_char()).prop_map(move |(how, at, c)| {
        let mut chars: Vec<char> = uuid.chars().collect();
        match how {
            0 => uuid.to_uppercase(),
            1 => uuid.replace('-', ""),
            2 => format!("{{{uuid}}}"),
            3 => format!("urn:uuid:{uuid}"),
            4 => {
                let i = at.index(chars.len());
                chars[i] = c;
                chars.into_iter().collect()
            }
            5 => chars[..at.index(chars.len())].iter().collect(),
            6 => format!("{uuid}{c}"),
            _ => format!("{uuid}/.."),
        }
    })
}

fn read_route() -> impl Strategy<Value = Read> {
    let parts = select(vec!["inventories", "aggregates", "traits", "allocations", "usages"]);
    prop_oneof![
        8 => Just(Read::AllocationCandidates),
        5 => Just(Read::ResourceProviders),
        3 => Just(Read::Usages),
        2 => Just(Read::Traits),
        1 => Just(Read::ResourceClasses),
        1 => Just(Read::Root),
        1 => rp_segment().prop_map(Read::Provider),
        2 => (rp_segment(), parts).prop_map(|(rp, part)| Read::ProviderPart(rp, part)),
        1 => (rp_segment(), class_segment()).prop_map(|(rp, rc)| Read::Inventory(rp, rc)),
        1 => consumer_segment().prop_map(Read::Consumer),
        1 => class_segment().prop_map(Read::ResourceClass),
        1 => trait_segment().prop_map(Read::Trait),
    ]
}

fn write_route() -> impl Strategy<Value = Write> {
    let parent = || prop::option::of(rp_segment());
    prop_oneof![
        2 => (any::<bool>(), parent()).prop_map(|(uuid, parent)| Write::CreateProvider { uuid, parent }),
        2 => (rp_segment(), any::<u8>(), parent()).prop_map(|(rp, rename, parent)| Write::UpdateProvider { rp, rename, parent }),
        1 => rp_segment().prop_map(|rp| Write::DeleteProvider { rp }),
        3 => (rp_segment(), prop::option::of(class_segment())).prop_map(|(rp, add)| Write::SetInventories { rp, add }),
        2 => (rp_segment(), class_segment()).prop_map(|(rp, rc)| Write::CreateInventory { rp, rc }),
        3 => (rp_segment(), class_segment()).prop_map(|(rp, rc)| Write::UpdateInventory { rp, rc }),
        1 => rp_segment().prop_map(|rp| Write::DeleteInventories { rp }),
        1 => (rp_segment(), class_segment()).prop_map(|(rp, rc)| Write::DeleteInventory { rp, rc }),
        2 => rp_segment().prop_map(|rp| Write::SetAggregates { rp }),
        2 => rp_segment().prop_map(|rp| Write::SetProviderTraits { rp }),
        1 => rp_segment().prop_map(|rp| Write::DeleteProviderTraits { rp }),
        1 => trait_segment().prop_map(|name| Write::PutTrait { name }),
        1 => trait_segment().prop_map(|name| Write::DeleteTrait { name }),
        1 => class_segment().prop_map(|name| Write::CreateResourceClass { name }),
        1 => class_segment().prop_map(|name| Write::UpdateResourceClass { name }),
        1 => class_segment().prop_map(|name| Write::DeleteResourceClass { name }),
        6 => (consumer_segment(), any::<u8>()).prop_map(|(consumer, shape)| Write::PutAllocations { consumer, shape }),
        3 => prop::collection::vec((consumer_segment(), any::<u8>()), 1..3)
            .prop_map(|consumers| Write::PostAllocations { consumers }),
        1 => consumer_segment().prop_map(|consumer| Write::DeleteAllocations { consumer }),
        3 => (rp_segment(), consumer_segment()).prop_map(|(rp, consumer)| Write::Reshape { rp, consumer }),
    ]
}

fn raw_version() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec![
            "placement 1.40", "placement 2.0", "placement 0.9", "placement 1.", "placement .5", "placement 1.5.1",
            "placement one.two", "placement 01.020", "placement 1.65536", "placement 1.99999999999999999999",
            "placement -1.2", "placement", "placement latest extra", "PLACEMENT LaTeSt", "placement 1.0x",
            "placement\t1.20", "compute 2.90", "placement 1.2, placement 1.30", ",", "",
        ]).prop_map(str::to_owned),
        1 => text(),
    ]
}

/// A version for a route served from `min`: mostly a served one.
fn version(min: u16) -> impl Strategy<Value = VersionChoice> {
    prop_oneof![
        10 => (min..=39u16, any::<u8>()).prop_map(|(m, style)| VersionChoice::Minor(m, style)),
        2 => (0..=39u16, any::<u8>()).prop_map(|(m, style)| VersionChoice::Minor(m, style)),
        2 => Just(VersionChoice::Latest),
        1 => Just(VersionChoice::Absent),
        1 => raw_version().prop_map(VersionChoice::Raw),
    ]
}

/// Mostly well-behaved headers: each kind of odd value has weight `junk`
/// against 100 for the usual one.
fn header_choices(junk: u32) -> impl Strategy<Value = Headers> {
    let token = prop_oneof![
        100 => Just(Some("admin".to_owned())),
        junk => Just(None),
        junk => Just(Some(format!("{USER}:{PROJECT}"))),
        junk => Just(Some("admin:other-project".to_owned())),
        junk => text().prop_map(Some),
    ];
    let content_type = prop_oneof![
        100 => Just(Some("application/json".to_owned())),
        junk => select(vec![
            "application/json; charset=UTF-8", "APPLICATION/JSON", "application/json;", "text/plain",
            "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", " ",
        ]).prop_map(|s| Some(s.to_owned())),
        junk => Just(None),
        junk => text().prop_map(Some),
    ];
    let accept = prop_oneof![
        100 => Just(None),
        junk => select(vec![
            "application/json", "*/*", "text/html", "application/xml", "text/html, application/json;q=0",
            "application/json;q=0", "application/*", "text/*", "application/json;q=abc", "", ";;;", "*/*;q=0.0",
        ]).prop_map(|s| Some(s.to_owned())),
        junk => text().prop_map(Some),
    ];
    let extra_name = select(vec![
        "x-roles",
        "x-project-id",
        "x-tenant-id",
        "openstack-system-scope",
        "x-openstack-placement-api-version",
        "openstack-api-version",
        "x-forwarded-proto",
        "host",
        "origin",
        "x-identity-status",
        "x-user-id",
        "access-control-request-method",
        "accept-encoding",
        "transfer-encoding-x",
    ]);
    let extra_value = prop_oneof![
        3 => text().prop_map(String::into_bytes),
        1 => prop::collection::vec(1u8..=255, 0..40),
    ];
    let extra =
        prop::collection::vec((extra_name.prop_map(str::to_owned), extra_value), 0..=(junk as usize / 8).min(4));
    (token, content_type, accept, extra).prop_map(|(token, content_type, accept, extra)| Headers {
        token,
        content_type,
        accept,
        extra,
    })
}

fn query_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec![
            "resources", "required", "member_of", "in_tree", "limit", "group_policy", "root_required",
            "same_subtree", "resources1", "required1", "member_of1", "in_tree1", "resources_NUMA", "resources0",
            "resources01", "resources-", "resources_", "name", "uuid", "project_id", "user_id", "consumer_type",
            "associated", "Resources", "resources ", "",
        ]).prop_map(str::to_owned),
        1 => text(),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    let class = prop_oneof![
        8 => select(vec!["VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_MAGIC", "CUSTOM_NEW", "SRIOV_NET_VF", "vcpu", ""])
            .prop_map(str::to_owned),
        1 => text(),
    ];
    let trait_name = prop_oneof![
        8 => select(vec![
            "HW_CPU_X86_AVX2", "CUSTOM_FOO", "MISC_SHARES_VIA_AGGREGATE", "HW_CPU_X86_SSE", "CUSTOM_NOPE", "", "!",
            "in:",
        ]).prop_map(str::to_owned),
        1 => text(),
    ];
    let uuid = prop_oneof![
        6 => select(vec![AGG, AGG2, RP_A, RP_B, RP_C, RP_MISSING]).prop_map(str::to_owned),
        2 => mangled_uuid(AGG),
        1 => text(),
    ];
    let number = prop_oneof![
        8 => select(vec![
            "0", "1", "2", "5", "-1", "+3", " 4 ", "1_0", "_1", "1__0", "1000000", "2147483647", "2147483648",
            "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
            "99999999999999999999", "1.5", "1e3", "0x10", "", "٣", "00", "-0",
        ]).prop_map(str::to_owned),
        1 => text(),
    ];
    let suffix = prop_oneof![
        6 => select(vec!["", "1", "2", "_NUMA", "_A", "0", "01", "-", "_", "x_y-z"]).prop_map(str::to_owned),
        1 => Just("x".repeat(65)),
        1 => text(),
    ];
    (class, trait_name, uuid, number, suffix, prop::bool::weighted(0.25)).prop_map(
        |(class, trait_name, uuid, number, suffix, forbidden)| Piece {
            class,
            trait_name,
            uuid,
            number,
            suffix,
            forbidden,
        },
    )
}

fn grammar() -> impl Strategy<Value = Grammar> {
    (any::<u8>(), any::<u8>(), prop::collection::vec(piece(), 1..4)).prop_map(|(prefix, separator, pieces)| Grammar {
        prefix,
        separator,
        pieces,
    })
}

fn query_mutation() -> impl Strategy<Value = QueryMutation> {
    let raw = select(vec![
        // TODO(nul): "%00" once NUL is refused everywhere.
        "%",
        "%zz",
        "%F",
        "%FF",
        "%C3%28",
        "%ED%A0%80",
        "&",
        "&&",
        "=",
        "==",
        "+",
        "%2C",
        "%3A",
        "%26",
        "%3D",
        ";",
        "%E2%80%AE",
        "%F0%9F%A6%80",
        "%7F",
        "%0A",
        "%20",
    ]);
    prop_oneof![
        2 => any::<Index>().prop_map(QueryMutation::Drop),
        2 => any::<Index>().prop_map(QueryMutation::Duplicate),
        3 => (any::<Index>(), text()).prop_map(|(i, v)| QueryMutation::SetValue(i, v)),
        1 => (any::<Index>(), query_key()).prop_map(|(i, k)| QueryMutation::SetKey(i, k)),
        2 => (query_key(), text()).prop_map(|(k, v)| QueryMutation::Append(k, v)),
        3 => (any::<Index>(), any::<Index>(), fuzz_char()).prop_map(|(i, at, c)| QueryMutation::InsertChar(i, at, c)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, at)| QueryMutation::DeleteChar(i, at)),
        3 => (any::<Index>(), any::<Index>(), fuzz_char()).prop_map(|(i, at, c)| QueryMutation::ReplaceChar(i, at, c)),
        2 => (any::<Index>(), raw.prop_map(str::to_owned)).prop_map(|(at, t)| QueryMutation::Raw(at, t)),
        6 => (any::<Index>(), grammar()).prop_map(|(i, g)| QueryMutation::Grammar(i, g)),
        3 => (query_key(), grammar()).prop_map(|(k, g)| QueryMutation::AppendGrammar(k, g)),
    ]
}

fn path_splices() -> impl Strategy<Value = Vec<(Index, String)>> {
    let splice = select(vec![
        "%FF",
        "%C3%28",
        "%2F",
        "%2f",
        "//",
        "/..",
        "/.",
        "%",
        "%zz",
        "/",
        "%20",
        "+",
        ";x=1",
        "%E2%80%AE",
        "%25",
    ]);
    prop_oneof![
        9 => Just(Vec::new()),
        1 => prop::collection::vec((any::<Index>(), splice.prop_map(str::to_owned)), 1..3),
    ]
}

/// Valid query parameters of `read` (its base ones and a random
/// selection of the others, shuffled).
fn query_for(read: &Read) -> impl Strategy<Value = Vec<(String, String)>> {
    let (base, extra) = read.query_pool();
    let n = extra.len();
    subsequence(extra, 0..=n.min(6))
        .prop_map(move |picked| base.iter().cloned().chain(picked).collect::<Vec<_>>())
        .prop_shuffle()
}

/// GETs with valid queries, mutated.
fn query_cases() -> impl Strategy<Value = Case> {
    read_route().prop_flat_map(|read| {
        (
            query_for(&read),
            prop::collection::vec(query_mutation(), 0..5),
            version(read.min_minor()),
            header_choices(2),
            path_splices(),
            Just(read),
        )
            .prop_map(|(query, query_mutations, version, headers, path_splices, read)| Case {
                route: Route::Read(read),
                method: None,
                path_splices,
                query,
                query_mutations,
                body: BodyGen::Raw(Vec::new()),
                version,
                headers,
            })
    })
}

/// Writes with valid bodies, mutated as JSON or as bytes.
fn mutated_body_cases() -> impl Strategy<Value = Case> {
    write_cases(
        prop_oneof![
            7 => prop::collection::vec(json_mutation(), 0..4).prop_map(BodyGen::Template),
            3 => prop::collection::vec(byte_mutation(), 1..4).prop_map(BodyGen::Bytes),
        ]
        .boxed(),
    )
}

/// Writes with random JSON, random bytes or heavily mutated bodies.
fn random_body_cases() -> impl Strategy<Value = Case> {
    write_cases(
        prop_oneof![
            5 => json_value().prop_map(BodyGen::Random),
            2 => prop::collection::vec(body_byte(), 0..64).prop_map(BodyGen::Raw),
            3 => prop::collection::vec(json_mutation(), 4..10).prop_map(BodyGen::Template),
        ]
        .boxed(),
    )
}

/// A write route with bodies from `body`, at a microversion the route has.
fn write_cases(body: BoxedStrategy<BodyGen>) -> impl Strategy<Value = Case> {
    write_route().prop_flat_map(move |write| {
        (body.clone(), version(write.min_minor()), header_choices(2), Just(write)).prop_map(
            |(body, version, headers, write)| Case {
                route: Route::Write(write),
                method: None,
                path_splices: Vec::new(),
                query: Vec::new(),
                query_mutations: Vec::new(),
                body,
                version,
                headers,
            },
        )
    })
}

/// Any route, odd headers and methods, bodies lightly mutated.
fn header_cases() -> impl Strategy<Value = Case> {
    let route = prop_oneof![read_route().prop_map(Route::Read), write_route().prop_map(Route::Write)];
    let method = prop_oneof![
        6 => Just(None),
        1 => select(vec![
            Method::GET, Method::PUT, Method::POST, Method::DELETE, Method::PATCH, Method::HEAD, Method::OPTIONS,
        ]).prop_map(Some),
    ];
    let version = prop_oneof![
        3 => version(0),
        2 => raw_version().prop_map(VersionChoice::Raw),
    ];
    (
        route,
        method,
        prop::collection::vec(json_mutation(), 0..2).prop_map(BodyGen::Template),
        version,
        header_choices(30),
        path_splices(),
    )
        .prop_map(|(route, method, body, version, headers, path_splices)| {
            let query = match &route {
                Route::Read(read) => read.query_pool().0,
                Route::Write(_) => Vec::new(),
            };
            Case { route, method, path_splices, query, query_mutations: Vec::new(), body, version, headers }
        })
}

// ---------------------------------------------------------------------------
// The properties.

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn cases_of(name: &str) -> u32 {
    let base = CASES.iter().find(|(n, _)| *n == name).map_or(100, |(_, n)| *n);
    let factor = env_number("BERTH_FUZZ_CASES").unwrap_or(1).max(1);
    base.saturating_mul(u32::try_from(factor).unwrap_or(u32::MAX))
}

/// Run `strategy` for the named property on a fresh seeded world.
fn fuzz<S: Strategy<Value = Case>>(name: &'static str, strategy: S) {
    let started = std::time::Instant::now();
    let cases = cases_of(name);
    let seed = env_number("BERTH_FUZZ_SEED").unwrap_or(SEED);
    let config = Config {
        cases,
        // Shrinking replays cases against a world that moves on; keep it
        // short, the failure message already shows the whole request.
        max_shrink_iters: 64,
        max_shrink_time: 20_000,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    };
    let harness = RefCell::new(Harness::new(name));
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |case| harness.borrow_mut().run(&case));
    let harness = harness.into_inner();
    match result {
        Ok(()) => {}
        // The reason holds the concrete request and response; the
        // generated case itself (often large) is left out.
        Err(TestError::Fail(reason, _)) => panic!("fuzz_placement::{name} (seed {seed:#x}) failed: {reason}"),
        Err(TestError::Abort(reason)) => panic!("fuzz_placement::{name} (seed {seed:#x}) aborted: {reason}"),
    }
    if let Err(err) = harness.check_durable() {
        panic!("fuzz_placement::{name}: {err}");
    }
    eprintln!(
        "fuzz_placement::{name}: {cases} cases, seed {seed:#x}, {:.1}s, statuses {:?}, {} rebuilds",
        started.elapsed().as_secs_f64(),
        harness.stats.by_status,
        harness.stats.rebuilds
    );
    if env_number("BERTH_FUZZ_VERBOSE").is_some_and(|v| v > 0) {
        let mut errors: Vec<(&String, &usize)> = harness.stats.by_error.iter().collect();
        errors.sort_by_key(|(message, n)| (std::cmp::Reverse(**n), (*message).clone()));
        for (message, n) in errors {
            eprintln!("  {n:5} {message}");
        }
    }
}

#[test]
fn queries() {
    fuzz("queries", query_cases());
}

#[test]
fn mutated_bodies() {
    fuzz("mutated_bodies", mutated_body_cases());
}

#[test]
fn random_bodies() {
    fuzz("random_bodies", random_body_cases());
}

#[test]
fn header_values() {
    fuzz("header_values", header_cases());
}
