//! Route tables: every path of an API, its methods, their handlers and the
//! microversions they appear at, in one list per API.

use std::sync::Arc;

use axum::http::Method;

use crate::error::ApiResult;
use crate::microversion::Version;
use crate::request::{Req, Resp};
use crate::HandlerFuture;

/// A handler: synchronous (answers from memory, or plans a write), or
/// asynchronous (waits: long-polls, cell databases with deadlines).
pub enum Handler<C> {
    /// `fn(&context, &request)`.
    Sync(fn(&C, &Req) -> ApiResult<Resp>),
    /// `fn(context, request) -> future`.
    Async(fn(Arc<C>, Req) -> HandlerFuture),
    /// `fn(context, request, body) -> future`: the body arrives unread,
    /// as a stream, unbounded by the listener's body limit (the handler
    /// bounds it), and the answer may be of any media type (no 406 for
    /// an `Accept` without JSON). For image data.
    Stream(fn(Arc<C>, Req, axum::body::Body) -> HandlerFuture),
}

impl<C> Clone for Handler<C> {
    fn clone(&self) -> Self {
        match self {
            Handler::Sync(f) => Handler::Sync(*f),
            Handler::Async(f) => Handler::Async(*f),
            Handler::Stream(f) => Handler::Stream(*f),
        }
    }
}

impl<C> std::fmt::Debug for Handler<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handler::Sync(_) => "Handler::Sync",
            Handler::Async(_) => "Handler::Async",
            Handler::Stream(_) => "Handler::Stream",
        })
    }
}

/// One method on a route.
#[derive(Debug, Clone)]
pub struct Endpoint<C> {
    /// HTTP method.
    pub method: Method,
    /// Lowest microversion serving it (404 below).
    pub min_version: Version,
    /// Highest microversion serving it (404 above), if it was removed.
    pub max_version: Option<Version>,
    /// The handler.
    pub handler: Handler<C>,
    /// Does not need authentication (version documents).
    pub public: bool,
}

impl<C> Endpoint<C> {
    /// A synchronous endpoint from `min_version` on.
    pub fn sync(method: Method, min_version: Version, handler: fn(&C, &Req) -> ApiResult<Resp>) -> Self {
        Endpoint { method, min_version, max_version: None, handler: Handler::Sync(handler), public: false }
    }

    /// An asynchronous endpoint from `min_version` on.
    pub fn async_(method: Method, min_version: Version, handler: fn(Arc<C>, Req) -> HandlerFuture) -> Self {
        Endpoint { method, min_version, max_version: None, handler: Handler::Async(handler), public: false }
    }

    /// A streaming endpoint from `min_version` on (see [`Handler::Stream`]).
    pub fn stream(
        method: Method,
        min_version: Version,
        handler: fn(Arc<C>, Req, axum::body::Body) -> HandlerFuture,
    ) -> Self {
        Endpoint { method, min_version, max_version: None, handler: Handler::Stream(handler), public: false }
    }

    /// Served only up to `max` (removed after).
    pub fn until(mut self, max: Version) -> Self {
        self.max_version = Some(max);
        self
    }

    /// No authentication needed.
    pub fn public(mut self) -> Self {
        self.public = true;
        self
    }
}

/// A path pattern with its methods.
#[derive(Debug)]
pub struct Route<C> {
    /// Pattern; `{name}` segments capture.
    pub pattern: &'static str,
    /// Methods in `Allow` order.
    pub endpoints: Vec<Endpoint<C>>,
}

impl<C> Route<C> {
    /// The route of `pattern` with its `endpoints`.
    pub fn new(pattern: &'static str, endpoints: Vec<Endpoint<C>>) -> Self {
        Route { pattern, endpoints }
    }
}

/// Result of matching a path.
#[derive(Debug)]
pub enum Match<'a, C> {
    /// No route has this path.
    NotFound,
    /// The path matched; `endpoint` is None when the method is not allowed.
    Found {
        /// The matched route.
        route: &'a Route<C>,
        /// The endpoint for the method, if any.
        endpoint: Option<&'a Endpoint<C>>,
        /// Decoded captures.
        params: Vec<String>,
    },
}

/// Match `path` and `method` against the table.
pub fn find<'a, C>(table: &'a [Route<C>], method: &Method, path: &str) -> Match<'a, C> {
    let path = if path.is_empty() { "/" } else { path };
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for route in table {
        let pattern: Vec<&str> = route.pattern.split('/').skip(1).collect();
        if pattern.len() != segments.len() {
            continue;
        }
        let mut params = Vec::new();
        let mut ok = true;
        for (want, got) in pattern.iter().zip(&segments) {
            if want.starts_with('{') {
                if got.is_empty() {
                    ok = false;
                    break;
                }
                let param = percent_encoding::percent_decode_str(got).decode_utf8_lossy().into_owned();
                if param.contains('\0') {
                    // Nothing can be named with NUL (no backend stores it).
                    ok = false;
                    break;
                }
                params.push(param);
            } else if want != got {
                ok = false;
                break;
            }
        }
        if ok {
            let endpoint = route.endpoints.iter().find(|e| e.method == *method);
            return Match::Found { route, endpoint, params };
        }
    }
    Match::NotFound
}
