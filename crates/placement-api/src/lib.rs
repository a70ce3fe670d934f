//! The Placement API (microversions 1.0–1.39) on the berth-http
//! foundation: the route table, one handler module per resource, the wire
//! shapes, placement's error body (`{"errors": [...]}` with `code` from
//! 1.23, or HTML when asked) and upstream's policy rule names and
//! defaults. Handlers are `fn(&Placement, &Req) -> ApiResult<Resp>`:
//! extract, call the model through the core's [`berth_core::App`],
//! convert.
//!
//! It must not plan or store anything itself: plans are `berth-model`'s, the
//! write path is `berth-core`'s, and it never uses a store crate directly.

pub mod handlers;
mod policy_rules;
pub mod qparams;
pub mod routes;
pub mod wire;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use berth_http::microversion::{placement_invalid, placement_parse, placement_unacceptable};
use berth_http::{accepts_json, error_response, html_escape, Api, ApiError, Version, VersionSpec};
use serde_json::json;

// The foundation's modules under the names the handlers use.
pub use berth_http::{auth, error, policy, request, schema};

pub use policy_rules::RULES;

/// Microversions: the served range.
pub mod microversion {
    pub use berth_http::microversion::*;

    /// The lowest microversion served.
    pub const MIN_VERSION: Version = Version(1, 0);
    /// The highest microversion served.
    pub const MAX_VERSION: Version = Version(1, 39);
}

/// Time, for handlers.
pub(crate) mod app {
    pub(crate) use berth_core::now;
}

/// Allocation-candidate options (upstream `[placement]`
/// `randomize_allocation_candidates`, `max_allocation_candidates`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateOptions {
    /// Shuffle the allocation requests (a random sample with `limit`).
    pub randomize: bool,
    /// Generate at most this many allocation requests per request,
    /// breadth-first across provider trees; `None` is unlimited.
    pub max_candidates: Option<usize>,
}

/// What placement handlers reach: the core (snapshot and write path) and
/// placement's own options and counters.
#[derive(Debug)]
pub struct Placement {
    /// The control state.
    pub core: Arc<berth_core::App>,
    /// `GET /allocation_candidates` options.
    pub options: CandidateOptions,
    /// GET /allocation_candidates answers cut by `--max-allocation-candidates`.
    pub candidates_capped: AtomicU64,
}

impl std::ops::Deref for Placement {
    type Target = berth_core::App;

    fn deref(&self) -> &berth_core::App {
        &self.core
    }
}

/// The name handlers use for their context.
pub(crate) type App = Placement;

impl Placement {
    /// Placement over `core`.
    pub fn new(core: Arc<berth_core::App>, options: CandidateOptions) -> Self {
        Placement { core, options, candidates_capped: AtomicU64::new(0) }
    }

    /// The write path with placement's error type (see
    /// [`berth_core::App::write`]).
    pub fn write<T: Send>(
        &self,
        plan: impl FnOnce(&berth_model::State) -> berth_http::ApiResult<(berth_model::ChangeSet, T)> + Send,
    ) -> berth_http::ApiResult<T> {
        self.core.write(|world| plan(&world.placement).map(|(set, value)| (set.into(), value)))
    }

    /// Placement's counters for `/metrics`.
    pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        vec![(
            "berth_allocation_candidates_capped_total",
            "Allocation-candidate requests whose candidates were cut by --max-allocation-candidates.",
            self.candidates_capped.load(std::sync::atomic::Ordering::Relaxed),
        )]
    }
}

/// Placement's microversion negotiation.
pub const VERSIONS: VersionSpec = VersionSpec {
    service: "placement",
    min: microversion::MIN_VERSION,
    max: microversion::MAX_VERSION,
    legacy_header: None,
    parse: placement_parse,
    invalid: placement_invalid,
    unacceptable: placement_unacceptable,
};

/// The placement API with the policy file's `overrides`.
pub fn api(overrides: &std::collections::BTreeMap<String, String>) -> anyhow::Result<Api<Placement>> {
    Ok(Api {
        name: "placement",
        versions: VERSIONS,
        routes: routes::table(),
        policy: Arc::new(berth_http::Policy::new(RULES, overrides)?),
        render_error,
        adjust_auth: berth_http::keep_auth,
        request_id_alias: None,
    })
}

/// Render an error in placement's format (JSON, or HTML when the client
/// asked for that, as webob does).
pub fn render_error(err: &ApiError, version: Option<Version>, request_id: &str, headers: &HeaderMap) -> Response<Body> {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let wants_html = !accept.is_empty() && !accepts_json(headers) && accept.contains("text/html");
    if wants_html {
        let title = err.title();
        let status = err.status.as_u16();
        let body = format!(
            "<html>\n <head>\n  <title>{status} {title}</title>\n </head>\n <body>\n  <h1>{status} {title}</h1>\n  {}<br /><br />\n\n\n\n </body>\n</html>",
            html_escape(&err.detail)
        );
        return error_response(err, "text/html; charset=UTF-8", body);
    }
    let mut error = json!({
        "status": err.status.as_u16(),
        "title": err.title(),
        "detail": wire_detail(err),
    });
    if version.is_some_and(|v| v >= Version(1, 23)) {
        error["code"] = json!(err.code);
    }
    error["request_id"] = json!(request_id);
    if err.status == StatusCode::NOT_ACCEPTABLE && version.is_none() {
        error["max_version"] = json!(microversion::MAX_VERSION.to_string());
        error["min_version"] = json!(microversion::MIN_VERSION.to_string());
    }
    error_response(err, "application/json", serde_json::to_string(&json!({ "errors": [error] })).unwrap_or_default())
}

/// The `detail` as placement (webob) renders it: the status's standard
/// explanation, a blank line, then the message on one line.
pub fn wire_detail(err: &ApiError) -> String {
    let explanation = match err.status.as_u16() {
        400 => "The server could not comply with the request since it is either malformed or otherwise incorrect.",
        401 => "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required.",
        403 => "Access was denied to this resource.",
        404 => "The resource could not be found.",
        405 => return err.detail.clone(),
        406 => "The resource could not be generated that was acceptable to your browser.",
        409 => "There was a conflict when trying to complete your request.",
        413 => "The request is larger than the server is willing or able to process.",
        414 => "The request URI was too long for this server.",
        415 => "The request media type is not supported by this server.",
        431 => "The request header fields were too large",
        503 => "The server is currently unavailable. Please try again at a later time.",
        _ => "The server has either erred or is incapable of performing the requested operation.",
    };
    format!("{explanation}\n\n {}  ", err.detail.replace('\n', " "))
}
