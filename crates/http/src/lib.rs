//! The HTTP foundation every berth API shares.
//!
//! An API (placement, compute, image, reservation, agent) is an [`Api`]:
//! its microversion header, its route table, its policy and its error body.
//! [`dispatch`] serves one request for one API: it assigns the request id,
//! handles CORS, negotiates the microversion, checks content headers,
//! matches the route (404/405 + `Allow`), authenticates, checks Accept
//! (406) and the body limit (413) — a streaming handler takes the body
//! unread and bounds it itself — calls the handler (a panic becomes a
//! 500), and renders errors in the API's own format. Handlers are plain
//! functions `fn(&C, &Req) -> ApiResult<Resp>` (or async ones), where `C`
//! is the API's context: extract, call the core, convert.
//!
//! It owns request handling common to every API; it must not know any API's
//! resources, plans or stores beyond mapping their errors.

pub mod auth;
pub mod error;
pub mod metrics;
pub mod microversion;
pub mod policy;
pub mod request;
pub mod routes;
pub mod schema;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;

pub use auth::{AuthContext, AuthMode, TokenError, TokenValidator, ValidateFuture};
pub use error::{ApiError, ApiResult};
pub use metrics::HttpMetrics;
pub use microversion::{Version, VersionSpec};
pub use policy::Policy;
pub use request::{Req, Resp};
pub use routes::{Endpoint, Handler, Match, Route};

/// CORS settings (oslo.middleware semantics), off when `None`.
#[derive(Debug, Clone)]
pub struct CorsConfig {
    /// Allowed origins.
    pub allowed_origins: Vec<String>,
    /// Extra headers a preflight may ask for.
    pub allow_headers: Vec<String>,
}

/// Settings shared by every API of a listener.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// How callers are identified.
    pub auth_mode: AuthMode,
    /// Validates tokens in [`AuthMode::Keystone`] (without one, keystone
    /// mode lets nobody in).
    pub validator: Option<Arc<dyn TokenValidator>>,
    /// Validates the per-host agent credentials berth issued
    /// (`X-Auth-Token: berth-agent:HOST:SECRET`), in every auth mode.
    pub agent_credentials: Option<Arc<dyn TokenValidator>>,
    /// CORS, when enabled.
    pub cors: Option<CorsConfig>,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
}

/// The future an async handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ApiResult<Resp>> + Send>>;

/// Renders an error in an API's own format.
pub type ErrorRenderer = fn(&ApiError, Option<Version>, &str, &HeaderMap) -> Response<Body>;

/// One API served by [`dispatch`].
pub struct Api<C> {
    /// Name, for logs and metrics (`placement`, `compute`, ...).
    pub name: &'static str,
    /// Microversion negotiation.
    pub versions: VersionSpec,
    /// The route table (paths relative to the API's root).
    pub routes: Vec<Route<C>>,
    /// The policy in force.
    pub policy: Arc<Policy>,
    /// Error body.
    pub render_error: ErrorRenderer,
    /// Adjusts a caller's identity before policy sees it (e.g. the roles
    /// noauth2 implies for this API).
    pub adjust_auth: fn(AuthMode, &mut AuthContext),
    /// A header that repeats the request id beside `openstack-request-id`
    /// and `x-openstack-request-id` (Nova's `x-compute-request-id`).
    pub request_id_alias: Option<&'static str>,
}

impl<C> std::fmt::Debug for Api<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("name", &self.name).finish_non_exhaustive()
    }
}

/// No identity adjustment.
pub fn keep_auth(_: AuthMode, _: &mut AuthContext) {}

/// The shared part of a listener: settings and request metrics.
#[derive(Debug)]
pub struct Server {
    /// Settings.
    pub config: HttpConfig,
    /// Request metrics of every API.
    pub metrics: HttpMetrics,
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Does the Accept header admit JSON? (absent, `*/*`, `application/*`,
/// `application/json`, with q > 0)
pub fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = header_str(headers, "accept") else { return true };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|item| {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let zero_q = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()).is_some_and(|q| q <= 0.0)
        });
        !zero_q && matches!(media.as_str(), "*/*" | "application/*" | "application/json")
    })
}

/// Scheme and authority for the links an answer carries, from `Host` and
/// `X-Forwarded-Proto`, taken only when they are what such headers can
/// be (a host name or address with an optional port; `http` or `https`):
/// anything else would be written into every link of the answer.
fn link_base(headers: &HeaderMap) -> (&'static str, &str) {
    let host = header_str(headers, "host")
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 261
                && h.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']' | b'_'))
        })
        .unwrap_or("localhost");
    let scheme = match header_str(headers, "x-forwarded-proto").map(str::trim) {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    (scheme, host)
}

/// Who is calling: an agent credential in any mode, else in the listener's
/// auth mode (Keystone through its validator; headers alone otherwise).
pub async fn identify(config: &HttpConfig, headers: &HeaderMap) -> Result<AuthContext, ApiError> {
    if let Some(credentials) = &config.agent_credentials {
        if let Some(token) = auth::agent_credential_token(credentials.as_ref(), headers) {
            return auth::authenticate_agent_credential(credentials.as_ref(), token).await;
        }
    }
    match (config.auth_mode, &config.validator) {
        (AuthMode::Keystone, Some(validator)) => auth::authenticate_keystone(validator.as_ref(), headers).await,
        (mode, _) => auth::authenticate(mode, headers),
    }
}

/// Serve one request for `api`. `path` is relative to the API's root.
pub async fn dispatch<C: Send + Sync + 'static>(
    ctx: &Arc<C>,
    api: &Api<C>,
    server: &Server,
    path: &str,
    request: axum::extract::Request,
) -> Response<Body> {
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let (parts, body) = request.into_parts();
    let started = std::time::Instant::now();
    let method = parts.method.clone();
    let path = path.to_owned();
    let headers = parts.headers;
    let cors_origin = cors_origin(&server.config, &headers);

    // CORS preflight is answered before anything else, as oslo.middleware
    // wraps the whole application.
    if let (Some(_), true) =
        (&server.config.cors, method == Method::OPTIONS && headers.contains_key("access-control-request-method"))
    {
        let mut response = Response::builder().status(StatusCode::OK).body(Body::empty()).unwrap_or_default();
        if let Some(origin) = &cors_origin {
            add_preflight_headers(&server.config, &headers, origin, response.headers_mut());
        }
        return response;
    }

    let negotiated = microversion::negotiate(&api.versions, &headers);
    let version = negotiated.as_ref().ok().copied();

    let mut route_label: &'static str = "unmatched";
    let mut error_code: Option<&'static str> = None;
    let result = async {
        let version = negotiated?;
        if let Some(clen) = header_str(&headers, "content-length") {
            let n: u64 = clen.trim().parse().map_err(|_| ApiError::bad_request("content-length header must be an integer"))?;
            if n > 0 && header_str(&headers, "content-type").is_none_or(|t| t.trim().is_empty()) {
                return Err(ApiError::bad_request("content-type header required when content-length > 0"));
            }
        }
        let (route, endpoint, params) = match routes::find(&api.routes, &method, &path) {
            Match::NotFound => return Err(ApiError::not_found("The resource could not be found.")),
            Match::Found { route, endpoint, params } => (route, endpoint, params),
        };
        route_label = route.pattern;
        let public = route.endpoints.iter().all(|e| e.public);
        let identified = identify(&server.config, &headers).await;
        let mut auth = if public && endpoint.is_some() { identified.unwrap_or_default() } else { identified? };
        (api.adjust_auth)(server.config.auth_mode, &mut auth);
        let Some(endpoint) = endpoint else {
            let allow = route.endpoints.iter().map(|e| e.method.as_str()).collect::<Vec<_>>().join(", ");
            let mut err = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("The method {method} is not allowed for this resource."),
            );
            err.headers.push(("allow", allow));
            return Err(err);
        };
        if version < endpoint.min_version || endpoint.max_version.is_some_and(|max| version > max) {
            return Err(ApiError::not_found("The resource could not be found."));
        }
        let streams = matches!(endpoint.handler, Handler::Stream(_));
        if method == Method::GET && !streams && !accepts_json(&headers) {
            return Err(ApiError::new(StatusCode::NOT_ACCEPTABLE, "Only application/json is provided"));
        }
        // A streaming handler takes the body unread (and bounds it itself).
        let (body, unread) = if streams {
            (bytes::Bytes::new(), Some(body))
        } else {
            (read_body(body, server.config.max_body_bytes).await?, None)
        };
        let (scheme, host) = link_base(&headers);
        let req = Req {
            method: method.clone(),
            path: path.clone(),
            params,
            query: parse_query(parts.uri.query().unwrap_or("")),
            raw_query: parts.uri.query().unwrap_or("").to_owned(),
            headers: headers.clone(),
            body,
            version,
            auth,
            request_id: request_id.clone(),
            base_url: format!("{scheme}://{host}"),
            policy: api.policy.clone(),
        };
        // A handler bug must never take the connection down: a panic
        // becomes a 500 in the API's error format (locks are taken
        // poison-tolerantly, and planning panics happen before any state
        // change, so the snapshot stays consistent).
        match &endpoint.handler {
            Handler::Sync(handler) => {
                let handler = *handler;
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(ctx.as_ref(), &req))) {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::error!(request_id = %req.request_id, method = %req.method, path = %req.path, "handler panicked");
                        Err(ApiError::internal())
                    }
                }
            }
            Handler::Async(_) | Handler::Stream(_) => {
                let (rid, m, p) = (req.request_id.clone(), req.method.clone(), req.path.clone());
                // Spawned: a client that goes away does not cancel the
                // handler halfway through (a streaming one sees the body
                // fail instead, and cleans up).
                let future = match (&endpoint.handler, unread) {
                    (Handler::Stream(handler), Some(unread)) => handler(ctx.clone(), req, unread),
                    (Handler::Async(handler), _) => handler(ctx.clone(), req),
                    _ => return Err(ApiError::internal()),
                };
                match tokio::spawn(future).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::error!(request_id = %rid, method = %m, path = %p, "handler panicked");
                        Err(ApiError::internal())
                    }
                }
            }
        }
    }
    .await;

    let mut response = match result {
        Ok(resp) => render(resp),
        Err(err) => {
            error_code = Some(err.code);
            (api.render_error)(&err, version, &request_id, &headers)
        }
    };
    let out = response.headers_mut();
    let shown = version.unwrap_or(api.versions.min);
    if let Ok(v) = HeaderValue::from_str(&format!("{} {shown}", api.versions.service)) {
        out.insert("openstack-api-version", v);
    }
    let mut vary = "openstack-api-version".to_owned();
    if let Some(legacy) = api.versions.legacy_header {
        if let Ok(v) = HeaderValue::from_str(&shown.to_string()) {
            out.insert(legacy, v);
        }
        vary = format!("{vary}, {legacy}");
    }
    if let Ok(v) = HeaderValue::from_str(&vary) {
        out.insert(header::VARY, v);
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        if let Some(alias) = api.request_id_alias {
            out.insert(alias, v.clone());
        }
        out.insert("openstack-request-id", v.clone());
        out.insert("x-openstack-request-id", v);
    }
    if let Some(origin) = cors_origin {
        if let Ok(v) = HeaderValue::from_str(&origin) {
            out.insert("access-control-allow-origin", v);
        }
    }
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    let elapsed_us = elapsed.as_micros() as u64;
    server.metrics.observe(
        api.name,
        route_label,
        &method,
        status,
        elapsed.as_secs_f64(),
        error_code.filter(|_| status >= 400),
    );
    if status >= 500 {
        tracing::error!(request_id = %request_id, api = api.name, %method, %path, status, elapsed_us, "request");
    } else {
        tracing::debug!(request_id = %request_id, api = api.name, %method, %path, status, elapsed_us, "request");
    }
    response
}

/// Read the body up to `limit` bytes. A larger body gets a 413; the rest of
/// it is drained (up to a cap) first, so that the client, still sending,
/// receives the answer instead of a connection reset.
async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    let mut seen: usize = 0;
    let drain_cap = limit.saturating_mul(8).max(64 * 1024 * 1024);
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(ApiError::bad_request("The request body could not be read."));
        };
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen <= limit {
                buf.extend_from_slice(&data);
            } else if seen > drain_cap {
                break;
            }
        }
    }
    if seen > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body is larger than the limit of {limit} bytes."),
        ));
    }
    Ok(buf.freeze())
}

fn cors_origin(config: &HttpConfig, headers: &HeaderMap) -> Option<String> {
    let cors = config.cors.as_ref()?;
    let origin = header_str(headers, "origin")?;
    cors.allowed_origins.iter().any(|o| o == origin || o == "*").then(|| origin.to_owned())
}

fn add_preflight_headers(config: &HttpConfig, headers: &HeaderMap, origin: &str, out: &mut HeaderMap) {
    let Some(cors) = &config.cors else { return };
    if let Ok(v) = HeaderValue::from_str(origin) {
        out.insert("access-control-allow-origin", v);
    }
    if let Some(requested) = header_str(headers, "access-control-request-method") {
        if let Ok(v) = HeaderValue::from_str(requested) {
            out.insert("access-control-allow-methods", v);
        }
    }
    let allowed: Vec<String> = header_str(headers, "access-control-request-headers")
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty() && cors.allow_headers.iter().any(|a| a.eq_ignore_ascii_case(h)))
        .collect();
    if !allowed.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&allowed.join(",")) {
            out.insert("access-control-allow-headers", v);
        }
    }
}

/// Decode a query string into ordered pairs (`+` is a space).
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let s = s.replace('+', " ");
        percent_encoding::percent_decode_str(&s).decode_utf8_lossy().into_owned()
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

fn render(resp: Resp) -> Response<Body> {
    let mut builder = Response::builder().status(resp.status);
    let body = match (resp.stream, resp.raw_json, resp.body) {
        (Some(stream), _, _) => stream,
        (None, Some(bytes), _) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(bytes)
        }
        (None, None, Some(value)) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&value).unwrap_or_default())
        }
        (None, None, None) => Body::empty(),
    };
    let mut response = builder.body(body).unwrap_or_default();
    for (name, value) in resp.headers {
        response.headers_mut().append(name, value);
    }
    response
}

/// A JSON error response with `headers` from the error applied.
pub fn error_response(err: &ApiError, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::builder()
        .status(err.status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap_or_default();
    for (name, value) in &err.headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, v);
        }
    }
    response
}

/// Escape text for an HTML error page.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(host: Option<&str>, proto: Option<&str>) -> (String, String) {
        let mut headers = HeaderMap::new();
        if let Some(h) = host {
            headers.insert("host", HeaderValue::from_str(h).expect("header"));
        }
        if let Some(p) = proto {
            headers.insert("x-forwarded-proto", HeaderValue::from_str(p).expect("header"));
        }
        let (scheme, host) = link_base(&headers);
        (scheme.to_owned(), host.to_owned())
    }

    #[test]
    fn links_take_only_well_formed_host_and_scheme() {
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(base(Some("cloud.example:8778"), None), pair("http", "cloud.example:8778"));
        assert_eq!(base(Some("[::1]:8778"), Some("HTTPS")), pair("https", "[::1]:8778"));
        assert_eq!(base(Some("evil.example/\"><script>"), None), pair("http", "localhost"));
        assert_eq!(base(Some("a@b"), Some("javascript")), pair("http", "localhost"));
        assert_eq!(base(None, Some("gopher")), pair("http", "localhost"));
    }
}
