//! The placement HTTP API.
//!
//! This is the only crate that knows HTTP, JSON and microversions. A single
//! axum fallback service hands every request to [`dispatch`], which
//! assigns a request id, applies CORS, negotiates the microversion,
//! authenticates, matches the [`routes::table`], enforces the
//! version/accept/content rules shared by all handlers, calls the handler
//! and renders errors in placement's format. Handlers are plain functions
//! `fn(&App, &Req) -> ApiResult<Resp>`: extract, call the model, convert.

pub mod app;
pub mod auth;
pub mod error;
pub mod handlers;
pub mod metrics;
pub mod microversion;
pub mod policy;
pub mod qparams;
pub mod request;
pub mod routes;
pub mod schema;
pub mod wire;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;

pub use app::{ApiConfig, App, CandidateOptions, CorsConfig};
pub use auth::AuthMode;
pub use error::{ApiError, ApiResult};
pub use policy::Policy;

use microversion::Version;
use request::{Req, Resp};
use routes::{Match, Route};

/// Build the axum router serving placement at the root.
pub fn router(app: Arc<App>) -> axum::Router {
    let table: Arc<Vec<Route>> = Arc::new(routes::table());
    axum::Router::new().fallback(move |request: axum::extract::Request| {
        let app = app.clone();
        let table = table.clone();
        async move { dispatch(&app, &table, request).await }
    })
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Does the Accept header admit JSON? (absent, `*/*`, `application/*`,
/// `application/json`, with q > 0)
fn accepts_json(headers: &HeaderMap) -> bool {
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

/// Serve one request.
pub async fn dispatch(app: &App, table: &[Route], request: axum::extract::Request) -> Response<Body> {
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let (parts, body) = request.into_parts();
    let started = std::time::Instant::now();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let headers = parts.headers;
    let cors_origin = cors_origin(app, &headers);

    // Operational endpoints live outside the placement API (no auth, no
    // microversion): load balancers and Prometheus call them.
    if method == Method::GET && (path == "/healthcheck" || path == "/metrics") {
        return operational(app, &path);
    }

    // CORS preflight is answered before anything else, as oslo.middleware
    // wraps the whole application.
    if let (Some(_), true) =
        (&app.config.cors, method == Method::OPTIONS && headers.contains_key("access-control-request-method"))
    {
        let mut response = Response::builder().status(StatusCode::OK).body(Body::empty()).unwrap_or_default();
        if let Some(origin) = &cors_origin {
            add_preflight_headers(app, &headers, origin, response.headers_mut());
        }
        return response;
    }

    let version_headers: Vec<&str> =
        headers.get_all("openstack-api-version").iter().filter_map(|v| v.to_str().ok()).collect();
    let negotiated = microversion::negotiate(&version_headers);
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
        let (route, endpoint, params) = match routes::find(table, &method, &path) {
            Match::NotFound => return Err(ApiError::not_found("The resource could not be found.")),
            Match::Found { route, endpoint, params } => (route, endpoint, params),
        };
        route_label = route.pattern;
        let public = route.endpoints.iter().all(|e| e.public);
        let auth = if public && endpoint.is_some() {
            auth::authenticate(app.config.auth_mode, &headers).unwrap_or_default()
        } else {
            auth::authenticate(app.config.auth_mode, &headers)?
        };
        let Some(endpoint) = endpoint else {
            let allow = route.endpoints.iter().map(|e| e.method.as_str()).collect::<Vec<_>>().join(", ");
            let mut err = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("The method {method} is not allowed for this resource."),
            );
            err.headers.push(("allow", allow));
            return Err(err);
        };
        if version < endpoint.min_version {
            return Err(ApiError::not_found("The resource could not be found."));
        }
        if method == Method::GET && !accepts_json(&headers) {
            return Err(ApiError::new(StatusCode::NOT_ACCEPTABLE, "Only application/json is provided"));
        }
        let body = read_body(body, app.config.max_body_bytes).await?;
        let host = header_str(&headers, "host").unwrap_or("localhost");
        let scheme = header_str(&headers, "x-forwarded-proto").unwrap_or("http");
        let req = Req {
            method: method.clone(),
            path: path.clone(),
            params,
            query: parse_query(parts.uri.query().unwrap_or("")),
            headers: headers.clone(),
            body,
            version,
            auth,
            request_id: request_id.clone(),
            base_url: format!("{scheme}://{host}"),
        };
        // A handler bug must never take the connection down: turn a panic
        // into a 500 in the placement error format (locks are taken
        // poison-tolerantly, and planning panics happen before any state
        // change, so the snapshot stays consistent).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (endpoint.handler)(app, &req))) {
            Ok(result) => result,
            Err(_) => {
                tracing::error!(request_id = %req.request_id, method = %req.method, path = %req.path, "handler panicked");
                Err(ApiError::internal())
            }
        }
    }
    .await;

    let mut response = match result {
        Ok(resp) => render(resp),
        Err(err) => {
            error_code = Some(err.code);
            render_error(&err, version, &request_id, &headers)
        }
    };
    let out = response.headers_mut();
    let shown = version.unwrap_or(microversion::MIN_VERSION);
    if let Ok(v) = HeaderValue::from_str(&format!("placement {shown}")) {
        out.insert("openstack-api-version", v);
    }
    out.insert(header::VARY, HeaderValue::from_static("openstack-api-version"));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
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
    app.metrics.observe(route_label, &method, status, elapsed.as_secs_f64(), error_code.filter(|_| status >= 400));
    if status >= 500 {
        tracing::error!(request_id = %request_id, %method, %path, status, elapsed_us, "request");
    } else {
        tracing::debug!(request_id = %request_id, %method, %path, status, elapsed_us, "request");
    }
    response
}

/// `/healthcheck` (200 when the database answers, else 503) and `/metrics`.
fn operational(app: &App, path: &str) -> Response<Body> {
    if path == "/healthcheck" {
        let (status, db) = match app.ping() {
            Ok(()) => (StatusCode::OK, "ok"),
            Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        let body = json!({"status": if status == StatusCode::OK { "ok" } else { "degraded" },
                          "database": db, "backend": app.store().backend_name()});
        return Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap_or_default();
    }
    let (n_providers, n_consumers) = {
        let state = app.read();
        (state.providers.len() as f64, state.consumers.len() as f64)
    };
    let last_poll_ms = app.metrics.feed_last_poll_ms.load(std::sync::atomic::Ordering::Relaxed);
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let staleness = if last_poll_ms == 0 { 0.0 } else { (now_ms - last_poll_ms).max(0) as f64 / 1000.0 };
    let text = app.metrics.render(&[
        ("berth_providers", "Resource providers in this process's snapshot.", n_providers),
        ("berth_consumers", "Consumers with allocations in this process's snapshot.", n_consumers),
        (
            "berth_change_feed_staleness_seconds",
            "Seconds since this process last caught up with the shared database's change feed (0 on SQLite).",
            staleness,
        ),
    ]);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
        .body(Body::from(text))
        .unwrap_or_default()
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

fn cors_origin(app: &App, headers: &HeaderMap) -> Option<String> {
    let cors = app.config.cors.as_ref()?;
    let origin = header_str(headers, "origin")?;
    cors.allowed_origins.iter().any(|o| o == origin || o == "*").then(|| origin.to_owned())
}

fn add_preflight_headers(app: &App, headers: &HeaderMap, origin: &str, out: &mut HeaderMap) {
    let Some(cors) = &app.config.cors else { return };
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
    let body = match (resp.raw_json, resp.body) {
        (Some(bytes), _) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(bytes)
        }
        (None, Some(value)) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&value).unwrap_or_default())
        }
        (None, None) => Body::empty(),
    };
    let mut response = builder.body(body).unwrap_or_default();
    for (name, value) in resp.headers {
        response.headers_mut().append(name, value);
    }
    response
}

/// Render an error in placement's format (JSON, or HTML/plain text when the
/// client asked for that, as webob does).
pub fn render_error(err: &ApiError, version: Option<Version>, request_id: &str, headers: &HeaderMap) -> Response<Body> {
    let accept = header_str(headers, "accept").unwrap_or("").to_ascii_lowercase();
    let wants_html = !accept.is_empty() && !accepts_json(headers) && accept.contains("text/html");
    let (content_type, body) = if wants_html {
        let title = err.title();
        (
            "text/html; charset=UTF-8",
            format!(
                "<html>\n <head>\n  <title>{} {title}</title>\n </head>\n <body>\n  <h1>{} {title}</h1>\n  {}<br /><br />\n\n\n\n </body>\n</html>",
                err.status.as_u16(),
                err.status.as_u16(),
                html_escape(&err.detail)
            ),
        )
    } else {
        let mut error = json!({
            "status": err.status.as_u16(),
            "title": err.title(),
            "detail": err.wire_detail(),
        });
        if version.is_some_and(|v| v >= Version(1, 23)) {
            error["code"] = json!(err.code);
        }
        error["request_id"] = json!(request_id);
        if err.status == StatusCode::NOT_ACCEPTABLE && version.is_none() {
            error["max_version"] = json!(microversion::MAX_VERSION.to_string());
            error["min_version"] = json!(microversion::MIN_VERSION.to_string());
        }
        ("application/json", serde_json::to_string(&json!({ "errors": [error] })).unwrap_or_default())
    };
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

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl ApiError {
    /// The `detail` as placement (webob) renders it: the status's standard
    /// explanation, a blank line, then the message on one line.
    pub fn wire_detail(&self) -> String {
        let explanation = match self.status.as_u16() {
            400 => "The server could not comply with the request since it is either malformed or otherwise incorrect.",
            401 => "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required.",
            403 => "Access was denied to this resource.",
            404 => "The resource could not be found.",
            405 => return self.detail.clone(),
            406 => "The resource could not be generated that was acceptable to your browser.",
            409 => "There was a conflict when trying to complete your request.",
            413 => "The request is larger than the server is willing or able to process.",
            415 => "The request media type is not supported by this server.",
            503 => "The server is currently unavailable. Please try again at a later time.",
            _ => "The server has either erred or is incapable of performing the requested operation.",
        };
        format!("{explanation}\n\n {}  ", self.detail.replace('\n', " "))
    }
}
