//! The compute API microversion (`OpenStack-API-Version: compute 2.N`).

use std::fmt;

/// A compute API microversion 2.N, held as its minor number N.
///
/// Every compute microversion is 2.x, so the minor is all there is to
/// compare: `ComputeVersion(47)` is 2.47. Views and schemas take one and ask
/// [`ComputeVersion::at_least`] where Nova asks `is_supported(req, '2.N')`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeVersion(pub u16);

impl ComputeVersion {
    /// The oldest microversion served (2.1; the legacy v2.0 API is not).
    pub const MIN: ComputeVersion = ComputeVersion(1);
    /// The newest microversion served (Nova 34's 2.104).
    pub const MAX: ComputeVersion = ComputeVersion(104);

    /// True when this version is 2.`minor` or newer.
    pub fn at_least(self, minor: u16) -> bool {
        self.0 >= minor
    }

    /// Parse `"2.N"` (no range check; see [`ComputeVersion::is_served`]).
    /// `"latest"` is the caller's business: it means [`ComputeVersion::MAX`].
    pub fn parse(text: &str) -> Option<ComputeVersion> {
        let minor = text.trim().strip_prefix("2.")?;
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) || (minor.len() > 1 && minor.starts_with('0'))
        {
            return None;
        }
        minor.parse().ok().map(ComputeVersion)
    }

    /// True when berth serves this version (2.1 to 2.104).
    pub fn is_served(self) -> bool {
        (Self::MIN..=Self::MAX).contains(&self)
    }
}

impl fmt::Display for ComputeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "2.{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_compare() {
        assert_eq!(ComputeVersion::parse("2.47"), Some(ComputeVersion(47)));
        assert_eq!(ComputeVersion::parse(" 2.1 "), Some(ComputeVersion(1)));
        assert_eq!(ComputeVersion::parse("2.01"), None);
        assert_eq!(ComputeVersion::parse("3.1"), None);
        assert_eq!(ComputeVersion::parse("2."), None);
        assert!(ComputeVersion(47).at_least(47));
        assert!(!ComputeVersion(46).at_least(47));
        assert!(!ComputeVersion(105).is_served());
        assert!(!ComputeVersion(0).is_served());
        assert_eq!(ComputeVersion::MAX.to_string(), "2.104");
    }
}
