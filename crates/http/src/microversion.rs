//! Microversion negotiation (`OpenStack-API-Version: SERVICE X.Y`, and a
//! legacy header for APIs that have one, e.g. `X-OpenStack-Nova-API-Version`).

use axum::http::{HeaderMap, StatusCode};

use crate::error::ApiError;

/// A microversion `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u16, pub u16);

impl Version {
    /// True when this version is at least `major.minor` of its own major.
    pub fn at_least(self, minor: u16) -> bool {
        self >= Version(self.0, minor)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// How an API negotiates its microversion.
#[derive(Debug, Clone, Copy)]
pub struct VersionSpec {
    /// Service name in `OpenStack-API-Version` (`placement`, `compute`).
    pub service: &'static str,
    /// Lowest version served (also the default).
    pub min: Version,
    /// Highest version served (`latest`).
    pub max: Version,
    /// A legacy header carrying only the version, read when the standard
    /// header names no version for the service, and echoed in responses.
    pub legacy_header: Option<&'static str>,
    /// The error for a malformed version.
    pub invalid: fn(&VersionSpec, &str) -> ApiError,
    /// The error for a version outside `min..=max`.
    pub unacceptable: fn(&VersionSpec, &str) -> ApiError,
}

/// Placement's answers: 400 `invalid version string: X`, 406
/// `Unacceptable version header: X`.
pub fn placement_invalid(_: &VersionSpec, text: &str) -> ApiError {
    ApiError::bad_request(format!("invalid version string: {text}"))
}

/// See [`placement_invalid`].
pub fn placement_unacceptable(_: &VersionSpec, text: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_ACCEPTABLE, format!("Unacceptable version header: {text}"))
}

/// Parse the request's version headers for `spec`. No entry for the
/// service means the minimum.
pub fn negotiate(spec: &VersionSpec, headers: &HeaderMap) -> Result<Version, ApiError> {
    let mut requested: Option<String> = None;
    for value in headers.get_all("openstack-api-version").iter().filter_map(|v| v.to_str().ok()) {
        for item in value.split(',') {
            let item = item.trim();
            let mut parts = item.splitn(2, char::is_whitespace);
            let service = parts.next().unwrap_or("");
            if service.eq_ignore_ascii_case(spec.service) {
                requested = Some(parts.next().unwrap_or("").trim().to_owned());
            }
        }
    }
    if requested.is_none() {
        if let Some(legacy) = spec.legacy_header {
            requested = headers.get(legacy).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
        }
    }
    let Some(text) = requested else { return Ok(spec.min) };
    if text.eq_ignore_ascii_case("latest") {
        return Ok(spec.max);
    }
    let version = parse(&text).ok_or_else(|| (spec.invalid)(spec, &text))?;
    if version < spec.min || version > spec.max {
        return Err((spec.unacceptable)(spec, &text));
    }
    Ok(version)
}

/// Parse `X.Y`.
pub fn parse(text: &str) -> Option<Version> {
    let (major, minor) = text.split_once('.')?;
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !ok(major) || !ok(minor) {
        return None;
    }
    Some(Version(major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const SPEC: VersionSpec = VersionSpec {
        service: "placement",
        min: Version(1, 0),
        max: Version(1, 39),
        legacy_header: None,
        invalid: placement_invalid,
        unacceptable: placement_unacceptable,
    };

    fn with(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("openstack-api-version", HeaderValue::from_str(v).expect("header"));
        }
        headers
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(&SPEC, &with(&[])).unwrap(), Version(1, 0));
        assert_eq!(negotiate(&SPEC, &with(&["placement latest"])).unwrap(), Version(1, 39));
        assert_eq!(negotiate(&SPEC, &with(&["compute 2.1, placement 1.14"])).unwrap(), Version(1, 14));
        assert_eq!(negotiate(&SPEC, &with(&["placement 0.5"])).unwrap_err().status, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(negotiate(&SPEC, &with(&["placement 1.40"])).unwrap_err().status, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(negotiate(&SPEC, &with(&["placement pony.horse"])).unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(negotiate(&SPEC, &with(&["placement 1.2.3"])).unwrap_err().status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn legacy_header_when_the_standard_one_is_silent() {
        let spec = VersionSpec {
            service: "compute",
            min: Version(2, 1),
            max: Version(2, 104),
            legacy_header: Some("x-openstack-nova-api-version"),
            ..SPEC
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-openstack-nova-api-version", HeaderValue::from_static("2.53"));
        assert_eq!(negotiate(&spec, &headers).unwrap(), Version(2, 53));
        headers.insert("openstack-api-version", HeaderValue::from_static("compute 2.60"));
        assert_eq!(negotiate(&spec, &headers).unwrap(), Version(2, 60));
        assert!(Version(2, 60).at_least(47));
        assert!(!Version(2, 60).at_least(61));
    }
}
