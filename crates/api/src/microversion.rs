//! Microversion parsing and the supported range.

use crate::error::ApiError;
use axum::http::StatusCode;

/// The lowest microversion served.
pub const MIN_VERSION: Version = Version(1, 0);
/// The highest microversion served.
pub const MAX_VERSION: Version = Version(1, 39);

/// A placement microversion `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u16, pub u16);

impl Version {
    /// True when this version is at least `major.minor`.
    pub fn at_least(self, minor: u16) -> bool {
        self >= Version(1, minor)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Parse the value of the `OpenStack-API-Version` header(s). Entries for
/// other services are ignored; no placement entry means the minimum.
pub fn negotiate(header_values: &[&str]) -> Result<Version, ApiError> {
    let mut requested: Option<&str> = None;
    for value in header_values {
        for item in value.split(',') {
            let item = item.trim();
            let mut parts = item.splitn(2, char::is_whitespace);
            let service = parts.next().unwrap_or("");
            if service.eq_ignore_ascii_case("placement") {
                requested = Some(parts.next().unwrap_or("").trim());
            }
        }
    }
    let Some(text) = requested else { return Ok(MIN_VERSION) };
    if text.eq_ignore_ascii_case("latest") {
        return Ok(MAX_VERSION);
    }
    let version = parse(text).ok_or_else(|| ApiError::bad_request(format!("invalid version string: {text}")))?;
    if version < MIN_VERSION || version > MAX_VERSION {
        return Err(ApiError::new(StatusCode::NOT_ACCEPTABLE, format!("Unacceptable version header: {text}")));
    }
    Ok(version)
}

fn parse(text: &str) -> Option<Version> {
    let (major, minor) = text.split_once('.')?;
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !ok(major) || !ok(minor) {
        return None;
    }
    Some(Version(major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(&[]).unwrap(), MIN_VERSION);
        assert_eq!(negotiate(&["placement latest"]).unwrap(), MAX_VERSION);
        assert_eq!(negotiate(&["compute 2.1, placement 1.14"]).unwrap(), Version(1, 14));
        assert_eq!(negotiate(&["placement 0.5"]).unwrap_err().status, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(negotiate(&["placement 1.40"]).unwrap_err().status, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(negotiate(&["placement pony.horse"]).unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(negotiate(&["placement 1.2.3"]).unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}
