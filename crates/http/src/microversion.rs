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
    /// How the API reads `X.Y` (`None`: malformed). The numbers saturate,
    /// so a huge or negative one is well-formed and out of range.
    pub parse: fn(&str) -> Option<(i64, i64)>,
    /// The error for a malformed version.
    pub invalid: fn(&VersionSpec, &str) -> ApiError,
    /// The error for a version outside `min..=max`.
    pub unacceptable: fn(&VersionSpec, &str) -> ApiError,
}

impl VersionSpec {
    /// An API with one version and no microversions; a version header
    /// naming it is parsed and refused as placement does.
    pub fn single(version: Version, service: &'static str) -> Self {
        VersionSpec {
            service,
            min: version,
            max: version,
            legacy_header: None,
            parse: placement_parse,
            invalid: placement_invalid,
            unacceptable: placement_unacceptable,
        }
    }
}

/// Placement's answers (microversion-parse's middleware): 400 `Invalid
/// microversion: invalid version string: X; <why int() refused it>`, 406
/// `Invalid microversion: Unacceptable version header: X`.
pub fn placement_invalid(_: &VersionSpec, text: &str) -> ApiError {
    // int() runs on each side in turn; one side only misses the minor.
    let (major, minor) = text.split_once('.').map_or((text, None), |(a, b)| (a, Some(b)));
    let bad = if python_int(major).is_none() { Some(major) } else { minor };
    let why = match bad {
        Some(bad) => format!("invalid literal for int() with base 10: {}", crate::schema::py_repr(&bad.into())),
        None => "Version.__new__() missing 1 required positional argument: 'minor'".to_owned(),
    };
    ApiError::bad_request(format!("Invalid microversion: invalid version string: {text}; {why}"))
}

/// See [`placement_invalid`].
pub fn placement_unacceptable(_: &VersionSpec, text: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_ACCEPTABLE, format!("Invalid microversion: Unacceptable version header: {text}"))
}

/// Python `int(text)` (base 10), saturated to `i64`: surrounding
/// whitespace, an optional sign, ASCII digits with single underscores
/// between them.
fn python_int(text: &str) -> Option<i64> {
    let t = text.trim_matches(|c: char| c.is_whitespace());
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if t.is_empty() || !t.split('_').all(|run| !run.is_empty() && run.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let mut value: i64 = 0;
    for digit in t.bytes().filter(u8::is_ascii_digit) {
        value = value.saturating_mul(10).saturating_add(i64::from(digit - b'0'));
    }
    Some(if negative { -value } else { value })
}

/// Placement's `X.Y` (microversion-parse `parse_version_string`: `int()` of
/// each side of the first dot), so `1.-2` and `99999999999999999999.1`
/// are versions (out of range: 406), `1.2.3` and `1` are not (400).
pub fn placement_parse(text: &str) -> Option<(i64, i64)> {
    let (major, minor) = text.split_once('.')?;
    Some((python_int(major)?, python_int(minor)?))
}

/// Nova's `X.Y` (`APIVersionRequest`: `^([1-9]\d*)\.([1-9]\d*|0)$`): no
/// sign, no leading zero, no whitespace; huge numbers are versions (406).
pub fn nova_parse(text: &str) -> Option<(i64, i64)> {
    let (major, minor) = text.split_once('.')?;
    let number = |s: &str, zero_ok: bool| {
        let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let leading_zero = s.starts_with('0') && !(zero_ok && s == "0");
        (digits && !leading_zero).then(|| python_int(s)).flatten()
    };
    Some((number(major, false)?, number(minor, true)?))
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
    // Both upstreams compare with `'latest'` exactly.
    if text == "latest" {
        return Ok(spec.max);
    }
    let (major, minor) = (spec.parse)(&text).ok_or_else(|| (spec.invalid)(spec, &text))?;
    let version = u16::try_from(major).ok().zip(u16::try_from(minor).ok()).map(|(a, b)| Version(a, b));
    match version {
        Some(version) if version >= spec.min && version <= spec.max => Ok(version),
        _ => Err((spec.unacceptable)(spec, &text)),
    }
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
        parse: placement_parse,
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
    fn placement_reads_versions_with_python_int() {
        let status = |v: &str| negotiate(&SPEC, &with(&[&format!("placement {v}")])).map_err(|e| e.status);
        // Well-formed but out of range: 406, as upstream.
        for v in ["1.-2", "99999999999999999999.1", "1.99999999999999999999", "-1.2", "0.5"] {
            assert_eq!(status(v), Err(StatusCode::NOT_ACCEPTABLE), "{v}");
        }
        // int() reads signs, underscores and surrounding blanks.
        assert_eq!(status("1.+2"), Ok(Version(1, 2)));
        assert_eq!(status("1.1_0"), Ok(Version(1, 10)));
        for v in ["1", "1.2.3", "1.", ".1", "1.1_", "1.__1", "LATEST", "Latest", "1.0x"] {
            assert_eq!(status(v), Err(StatusCode::BAD_REQUEST), "{v}");
        }
        let e = negotiate(&SPEC, &with(&["placement 1.2.3"])).unwrap_err();
        assert_eq!(
            e.detail,
            "Invalid microversion: invalid version string: 1.2.3; invalid literal for int() with base 10: '2.3'"
        );
        let e = negotiate(&SPEC, &with(&["placement pony"])).unwrap_err();
        assert_eq!(
            e.detail,
            "Invalid microversion: invalid version string: pony; invalid literal for int() with base 10: 'pony'"
        );
        let e = negotiate(&SPEC, &with(&["placement 1"])).unwrap_err();
        assert_eq!(
            e.detail,
            "Invalid microversion: invalid version string: 1; Version.__new__() missing 1 required positional argument: 'minor'"
        );
    }

    #[test]
    fn nova_syntax() {
        assert_eq!(nova_parse("2.1"), Some((2, 1)));
        assert_eq!(nova_parse("2.0"), Some((2, 0)));
        assert_eq!(nova_parse("99999999999999999999.1"), Some((i64::MAX, 1)));
        for v in ["0.5", "02.1", "2.01", "2.-1", "2.+1", " 2.1", "2.1_0", "2", "2.1.1"] {
            assert_eq!(nova_parse(v), None, "{v}");
        }
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
