//! The request as handlers see it, and the response they build.

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use berth_model::Timestamp;
use bytes::Bytes;
use serde_json::Value;

use crate::auth::AuthContext;
use crate::error::{ApiError, ApiResult};
use crate::microversion::Version;
use crate::policy::{Policy, Target};
use crate::schema;

/// A parsed request.
#[derive(Debug)]
pub struct Req {
    /// HTTP method.
    pub method: Method,
    /// Path (percent-encoded as received).
    pub path: String,
    /// Decoded path parameters in pattern order.
    pub params: Vec<String>,
    /// Decoded query pairs in order (repeats kept; bytes that are not
    /// UTF-8 replaced by U+FFFD, see [`Req::query_decode_error`]).
    pub query: Vec<(String, String)>,
    /// The query string as received (percent-encoded).
    pub raw_query: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
    /// Negotiated microversion.
    pub version: Version,
    /// Caller identity.
    pub auth: AuthContext,
    /// `req-<uuid>`.
    pub request_id: String,
    /// `scheme://host` for absolute `Location` headers.
    pub base_url: String,
    /// The API's policy.
    pub policy: std::sync::Arc<Policy>,
}

impl Req {
    /// Path parameter `idx`.
    pub fn param(&self, idx: usize) -> &str {
        self.params.get(idx).map(String::as_str).unwrap_or("")
    }

    /// True when the negotiated version is at least `major.minor` (of the
    /// API's major version).
    pub fn at_least(&self, minor: u16) -> bool {
        self.version.at_least(minor)
    }

    /// Enforce a policy rule against the caller's own project.
    pub fn authorize(&self, rule: &str) -> ApiResult<()> {
        self.authorize_target(rule, &Target::for_caller(&self.auth))
    }

    /// Does a policy rule allow the caller on `target` (no error)?
    pub fn allowed(&self, rule: &str, target: &Target) -> bool {
        self.policy.allows(rule, &self.auth, target)
    }

    /// Enforce a policy rule against an explicit target.
    pub fn authorize_target(&self, rule: &str, target: &Target) -> ApiResult<()> {
        if self.policy.allows(rule, &self.auth, target) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("Policy does not allow {rule} to be performed.")))
        }
    }

    /// All values of query parameter `name`.
    pub fn query_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Why the query string does not decode as UTF-8, in Python's words
    /// (`'utf-8' codec can't decode byte 0xc3 in position 0: invalid
    /// continuation byte`), as webob fails when a handler reads `req.GET`.
    pub fn query_decode_error(&self) -> Option<String> {
        self.raw_query.split('&').filter(|pair| !pair.is_empty()).find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            [key, value].into_iter().find_map(|part| {
                let bytes: Vec<u8> = percent_encoding::percent_decode_str(&part.replace('+', " ")).collect();
                python_utf8_error(&bytes)
            })
        })
    }

    /// The last value of query parameter `name` (webob `GET[name]`).
    pub fn query_one(&self, name: &str) -> Option<&str> {
        self.query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Upstream's `require_content('application/json')`: 415 unless the
    /// body is declared JSON. Write handlers whose upstream decorator runs
    /// before the policy check call this first; `json_body` calls it too.
    pub fn require_json(&self) -> ApiResult<()> {
        let content_type = self
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
            .unwrap_or_default();
        if content_type == "application/json" {
            return Ok(());
        }
        let shown = if content_type.is_empty() { "None".to_owned() } else { content_type };
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("The media type {shown} is not supported, use application/json"),
        ))
    }

    /// The body as JSON validated against `schema`, with placement's 415 and
    /// 400 answers.
    pub fn json_body(&self, schema: &Value) -> ApiResult<Value> {
        self.require_json()?;
        let value: Value =
            serde_json::from_slice(&self.body).map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
        if let Some(at) = find_nul(&value) {
            return Err(ApiError::bad_request(format!("JSON does not validate: {NUL_REFUSED} (at {at})")));
        }
        schema::validate(schema, &value).map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))?;
        Ok(value)
    }

    /// An absolute URL for `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }
}

/// Python's `UnicodeDecodeError` text for `bytes.decode('utf-8')`, if the
/// bytes are not UTF-8.
pub fn python_utf8_error(bytes: &[u8]) -> Option<String> {
    let err = std::str::from_utf8(bytes).err()?;
    let at = err.valid_up_to();
    let len = err.error_len().unwrap_or(bytes.len() - at);
    let lead = bytes[at];
    let reason = match err.error_len() {
        None => "unexpected end of data",
        Some(_) if (0xc2..=0xf4).contains(&lead) => "invalid continuation byte",
        Some(_) => "invalid start byte",
    };
    let place = if len <= 1 {
        format!("byte 0x{lead:02x} in position {at}")
    } else {
        format!("bytes in position {at}-{}", at + len - 1)
    };
    Some(format!("'utf-8' codec can't decode {place}: {reason}"))
}

/// A handler's response.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: StatusCode,
    /// Extra headers.
    pub headers: Vec<(&'static str, HeaderValue)>,
    /// JSON body, if any.
    pub body: Option<Value>,
    /// Pre-serialised JSON body (wins over `body`), for large responses
    /// written straight to bytes.
    pub raw_json: Option<Vec<u8>>,
    /// A streamed body of the handler's own media type (wins over both;
    /// the handler sets `Content-Type` and `Content-Length`).
    pub stream: Option<axum::body::Body>,
}

impl Resp {
    /// A JSON response.
    pub fn json(status: StatusCode, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: Some(body), raw_json: None, stream: None }
    }

    /// A response whose JSON body is already serialised.
    pub fn raw_json(status: StatusCode, bytes: Vec<u8>) -> Self {
        Self { status, headers: Vec::new(), body: None, raw_json: Some(bytes), stream: None }
    }

    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Self::json(StatusCode::OK, body)
    }

    /// A response without body.
    pub fn empty(status: StatusCode) -> Self {
        Self { status, headers: Vec::new(), body: None, raw_json: None, stream: None }
    }

    /// A streamed response (image data).
    pub fn stream(status: StatusCode, body: axum::body::Body) -> Self {
        Self { status, headers: Vec::new(), body: None, raw_json: None, stream: Some(body) }
    }

    /// 204 No Content.
    pub fn no_content() -> Self {
        Self::empty(StatusCode::NO_CONTENT)
    }

    /// Add a header (values that are not valid header text are dropped).
    pub fn header(mut self, name: &'static str, value: impl AsRef<str>) -> Self {
        if let Ok(value) = HeaderValue::from_str(value.as_ref()) {
            self.headers.push((name, value));
        }
        self
    }

    /// Add `Location`.
    pub fn location(self, url: String) -> Self {
        self.header("location", url)
    }

    /// From 1.15, add `Last-Modified` (the given time) and
    /// `Cache-Control: no-cache`.
    pub fn last_modified(self, req: &Req, at: Timestamp) -> Self {
        if !req.at_least(15) {
            return self;
        }
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.max(0) as u64);
        self.header("last-modified", httpdate::fmt_http_date(when)).header("cache-control", "no-cache")
    }
}

/// Why a body with a NUL character is refused.
pub const NUL_REFUSED: &str = "strings may not contain the NUL character (\\u0000)";

/// Where the first string or object key containing U+0000 sits in `value`
/// (a dotted path, `<body>` for the top level), if anywhere. No backend can
/// store NUL in text (PostgreSQL refuses it outright), so every API refuses
/// such bodies before they reach the write path.
pub fn find_nul(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut Vec<String>) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                path.push(i.to_string());
                let found = walk(item, path);
                if !found {
                    path.pop();
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(key, item)| {
                path.push(key.replace('\0', "\\u0000"));
                let found = key.contains('\0') || walk(item, path);
                if !found {
                    path.pop();
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = Vec::new();
    walk(value, &mut path).then(|| if path.is_empty() { "<body>".to_owned() } else { path.join(".") })
}

#[cfg(test)]
mod nul_tests {
    use super::{find_nul, python_utf8_error};

    #[test]
    fn utf8_errors_read_as_python() {
        let cases: [(&[u8], &str); 5] = [
            (b"\xc3(", "byte 0xc3 in position 0: invalid continuation byte"),
            (b"ab\xff", "byte 0xff in position 2: invalid start byte"),
            (b"\xc3", "byte 0xc3 in position 0: unexpected end of data"),
            (b"\xe2\x82", "bytes in position 0-1: unexpected end of data"),
            (b"\xe2\x82(", "bytes in position 0-1: invalid continuation byte"),
        ];
        for (bytes, want) in cases {
            assert_eq!(python_utf8_error(bytes), Some(format!("'utf-8' codec can't decode {want}")));
        }
        assert_eq!(python_utf8_error("é".as_bytes()), None);
    }
    use serde_json::json;

    #[test]
    fn finds_nul_in_strings_and_keys_only() {
        assert_eq!(find_nul(&json!({"name": "a\u{0}b"})).as_deref(), Some("name"));
        assert_eq!(find_nul(&json!({"a": [1, {"k\u{0}": 2}]})).as_deref(), Some("a.1.k\\u0000"));
        assert_eq!(find_nul(&json!("\u{0}")).as_deref(), Some("<body>"));
        assert_eq!(find_nul(&json!({"name": "back\\u0000slash", "n": 0, "x": null})), None);
    }
}
