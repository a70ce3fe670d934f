//! The compute API's HTTP side: the context handlers receive, Nova's error
//! body, microversion negotiation, the roles noauth2 implies for Nova's
//! policies, and helpers shared by the handlers.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use berth_compute::control::WriteError;
use berth_compute::error::ServiceError;
use berth_compute::Compute;
use berth_compute_model::ComputeError;
use berth_http::policy::Target;
use berth_http::{error_response, ApiError, ApiResult, AuthContext, AuthMode, Req, Version, VersionSpec};
use serde_json::{json, Value};

use crate::views::Links;
use crate::ComputeVersion;

/// What compute handlers reach.
pub struct ComputeCtx {
    /// The compute runtime.
    pub compute: Arc<Compute>,
    /// The control state (also reachable through `compute.control`).
    pub core: Arc<berth_core::App>,
    /// Where the compute API is mounted on this listener (`/compute`, or
    /// `` on a dedicated listener); links are built under it.
    pub prefix: &'static str,
    /// Nova's `[api] max_limit`.
    pub max_limit: usize,
    /// Test hooks (`/admin/v1/test/...`) are served.
    pub test_hooks: bool,
}

impl std::fmt::Debug for ComputeCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeCtx").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl ComputeCtx {
    /// Links for this request.
    pub fn links(&self, req: &Req) -> Links {
        Links::new(&format!("{}{}", req.base_url, self.prefix), None)
    }
}

/// The requested compute microversion.
pub fn version(req: &Req) -> ComputeVersion {
    ComputeVersion(req.version.1)
}

fn invalid_version(_: &VersionSpec, text: &str) -> ApiError {
    ApiError::bad_request(format!(
        "API Version String {text} is of invalid format. Must be of format MajorNum.MinorNum."
    ))
}

fn unacceptable_version(spec: &VersionSpec, text: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_ACCEPTABLE,
        format!("Version {text} is not supported by the API. Minimum is {} and maximum is {}.", spec.min, spec.max),
    )
}

/// Nova's microversions: 2.1–2.104, `compute` in `OpenStack-API-Version`
/// or the legacy `X-OpenStack-Nova-API-Version`.
pub const VERSIONS: VersionSpec = VersionSpec {
    service: "compute",
    min: Version(2, 1),
    max: Version(2, ComputeVersion::MAX.0),
    legacy_header: Some("x-openstack-nova-api-version"),
    parse: berth_http::microversion::nova_parse,
    invalid: invalid_version,
    unacceptable: unacceptable_version,
};

/// Nova's fault names by status (`nova.api.openstack.wsgi.Fault`).
pub fn fault_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        405 => "badMethod",
        409 => "conflictingRequest",
        413 | 429 => "overLimit",
        415 => "badMediaType",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

/// Nova's error body: `{"itemNotFound": {"code": 404, "message": "..."}}`.
pub fn render_error(err: &ApiError, _: Option<Version>, _: &str, _: &HeaderMap) -> Response<Body> {
    let body = json!({ fault_name(err.status): {"code": err.status.as_u16(), "message": err.detail} });
    error_response(err, "application/json", body.to_string())
}

/// berth's own APIs' error body: `{"error": {"code": ..., "message": ...}}`.
pub fn render_plain_error(err: &ApiError, _: Option<Version>, request_id: &str, _: &HeaderMap) -> Response<Body> {
    let body = json!({"error": {"code": err.status.as_u16(), "message": err.detail, "request_id": request_id}});
    error_response(err, "application/json", body.to_string())
}

/// noauth2 for the compute API gives what the nova-reference shim gives:
/// `admin` the roles admin, member and reader; everyone else member and
/// reader (Nova's policies need member/reader roles). Explicit `X-Roles`
/// win.
pub fn adjust_auth(mode: AuthMode, auth: &mut AuthContext) {
    if mode != AuthMode::NoAuth2 {
        return;
    }
    if auth.roles.is_empty() || auth.roles == ["admin"] {
        let admin = auth.roles.iter().any(|r| r == "admin");
        auth.roles = if admin {
            vec!["admin".into(), "member".into(), "reader".into()]
        } else {
            vec!["member".into(), "reader".into()]
        };
    }
}

/// Is the caller an admin (Nova's `context.is_admin`)?
pub fn is_admin(req: &Req) -> bool {
    req.auth.roles.iter().any(|r| r == "admin")
}

/// The caller's project.
pub fn project(req: &Req) -> String {
    req.auth.project_id.clone().unwrap_or_default()
}

/// The caller's user.
pub fn user(req: &Req) -> String {
    req.auth.user_id.clone().unwrap_or_default()
}

/// A policy target for a resource of `project_id` (and `user_id`).
pub fn target(project_id: &str, user_id: Option<&str>) -> Target {
    let mut target = Target::default();
    target.values.insert("project_id".into(), project_id.to_owned());
    if let Some(user) = user_id {
        target.values.insert("user_id".into(), user.to_owned());
    }
    target
}

/// Enforce a Nova rule against the caller's own project. Nova answers 403
/// `Policy doesn't allow X to be performed.`
pub fn authorize(req: &Req, rule: &str) -> ApiResult<()> {
    authorize_on(req, rule, &project(req), None)
}

/// Enforce a Nova rule against a resource of `project_id`.
pub fn authorize_on(req: &Req, rule: &str, project_id: &str, user_id: Option<&str>) -> ApiResult<()> {
    if req.allowed(rule, &target(project_id, user_id)) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!("Policy doesn't allow {rule} to be performed.")))
    }
}

/// Does a Nova rule pass for the caller on their own project?
pub fn allowed(req: &Req, rule: &str) -> bool {
    req.allowed(rule, &target(&project(req), None))
}

/// Does a Nova rule pass for the caller on a resource of `project_id`?
pub fn allowed_on(req: &Req, rule: &str, project_id: &str) -> bool {
    req.allowed(rule, &target(project_id, None))
}

/// The body as JSON validated against `schema`, with Nova's messages
/// (400 `Invalid input for field/attribute ...`, 415 for other media
/// types).
pub fn body(req: &Req, schema: &Value) -> ApiResult<Value> {
    let content_type = req
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default();
    if !content_type.is_empty() && content_type != "application/json" {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Unsupported Content-Type: {content_type}"),
        ));
    }
    let value = parse_body(req)?;
    berth_http::schema::validate(schema, &value)
        .map_err(|e| ApiError::bad_request(format!("Invalid input for field/attribute. {}", e.message)))?;
    Ok(value)
}

/// The body as JSON, not yet validated: 400 when malformed or when a
/// string holds NUL (no backend can store it).
pub fn parse_body(req: &Req) -> ApiResult<Value> {
    let value: Value =
        serde_json::from_slice(&req.body).map_err(|_| ApiError::bad_request("Malformed request body"))?;
    if let Some(at) = berth_http::request::find_nul(&value) {
        return Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute {at}. {}",
            berth_http::request::NUL_REFUSED
        )));
    }
    Ok(value)
}

/// Map the model's refusals to Nova's statuses.
pub fn refused(err: ComputeError) -> ApiError {
    match err {
        ComputeError::NotFound(m) => ApiError::not_found(m),
        ComputeError::Invalid(m) => ApiError::bad_request(m),
        ComputeError::Conflict(m) => ApiError::conflict(m),
        ComputeError::OverQuota(m) | ComputeError::Forbidden(m) => ApiError::forbidden(m),
    }
}

/// Map a runtime error to Nova's statuses (database problems: 503 / 500,
/// details only in the log).
pub fn service(err: ServiceError) -> ApiError {
    match err {
        ServiceError::Refused(e) => refused(e),
        ServiceError::Unavailable(m) => {
            tracing::warn!(error = %m, "compute request hit an unavailable database");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "A database needed for this request is unavailable; retry later.",
            )
        }
        ServiceError::Internal(m) => {
            tracing::error!(error = %m, "compute request failed");
            ApiError::internal()
        }
    }
}

/// Map a control write error.
pub fn write_error(err: WriteError) -> ApiError {
    service(err.into())
}

/// Extension: map errors of the compute runtime and model with `?`.
pub trait NovaResult<T> {
    /// Map to an [`ApiError`] in Nova's terms.
    fn nova(self) -> ApiResult<T>;
}

impl<T> NovaResult<T> for Result<T, ServiceError> {
    fn nova(self) -> ApiResult<T> {
        self.map_err(service)
    }
}

impl<T> NovaResult<T> for Result<T, ComputeError> {
    fn nova(self) -> ApiResult<T> {
        self.map_err(refused)
    }
}

impl<T> NovaResult<T> for Result<T, WriteError> {
    fn nova(self) -> ApiResult<T> {
        self.map_err(write_error)
    }
}

/// `limit` and `marker` query parameters (Nova caps `limit` at
/// `max_limit`; a bad limit is a 400).
pub fn paging(req: &Req, max_limit: usize) -> ApiResult<(Option<usize>, Option<String>)> {
    let limit = match req.query_one("limit") {
        None => None,
        Some(text) => {
            let n: i64 = text.trim().parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "Invalid input for query parameters limit. Value: {text}. '{text}' does not match '^[0-9]*$'"
                ))
            })?;
            if n < 0 {
                return Err(ApiError::bad_request(format!(
                    "Invalid input for query parameters limit. Value: {text}. '{text}' does not match '^[0-9]*$'"
                )));
            }
            Some((n as usize).min(max_limit))
        }
    };
    Ok((limit, req.query_one("marker").map(str::to_owned)))
}

/// Refuse query parameters outside `known`, as Nova's query schemas with
/// `additionalProperties: false` do (400).
pub fn only_query(req: &Req, known: &[&str]) -> ApiResult<()> {
    match req.query.iter().find(|(name, _)| !known.contains(&name.as_str())) {
        Some((name, _)) => Err(ApiError::bad_request(format!(
            "Invalid input for query parameters {name}. Value: {name}. Additional properties are not allowed ('{name}' was unexpected)"
        ))),
        None => Ok(()),
    }
}

/// Parse a boolean query or body value the way oslo's `bool_from_string`
/// does (strict).
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// Parse an ISO 8601 timestamp (`changes-since`, ...) into Unix seconds.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', ' '])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    let time = time.trim_end_matches('Z');
    let (time, offset) = match time.rfind(['+', '-']) {
        Some(pos) if pos >= 5 => {
            let (t, o) = time.split_at(pos);
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let o = &o[1..];
            let (oh, om) = o.split_once(':').unwrap_or((o, "0"));
            (t, sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60))
        }
        _ => (time, 0),
    };
    let time = time.split('.').next()?;
    let mut t = time.split(':');
    let (hh, mm): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let ss: i64 = t.next().map(|s| s.parse().ok()).unwrap_or(Some(0))?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = if y2 >= 0 { y2 } else { y2 - 399 } / 400;
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_like_iso8601() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2026-11-23T06:15:05Z"), Some(1_795_414_505));
        assert_eq!(parse_time("2026-11-23T06:15:05.123456"), Some(1_795_414_505));
        assert_eq!(parse_time("2026-11-23T07:15:05+01:00"), Some(1_795_414_505));
        assert_eq!(parse_time("2026-11-23"), None);
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn nova_fault_names() {
        assert_eq!(fault_name(StatusCode::NOT_FOUND), "itemNotFound");
        assert_eq!(fault_name(StatusCode::CONFLICT), "conflictingRequest");
        assert_eq!(fault_name(StatusCode::INTERNAL_SERVER_ERROR), "computeFault");
    }
}
