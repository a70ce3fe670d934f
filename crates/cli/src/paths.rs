//! Which API a path belongs to ([`target`]: devstack's prefixes on the
//! one listener) and the APIs that may have a listener to themselves
//! ([`RootApi`]). It uses no other module of the binary.

/// Which API a path belongs to, and the path within it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `/healthcheck` or `/metrics`.
    Operational,
    /// Placement.
    Placement(&'a str),
    /// The compute API (`/compute...`; `rest` starts after `/compute`).
    Compute(&'a str),
    /// The image API (after `/image`).
    Image(&'a str),
    /// The agent API (after `/agent/v1`).
    Agent(&'a str),
    /// berth's admin API (after `/admin/v1`).
    Admin(&'a str),
    /// The minimal identity endpoints (after `/identity`).
    Identity(&'a str),
    /// The reservation API (after `/reservation`).
    Reservation(&'a str),
    /// The operator dashboard (after `/dashboard`).
    Dashboard(&'a str),
}

fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Route a path to its API.
pub(crate) fn target(path: &str) -> Target<'_> {
    if path == "/healthcheck" || path == "/metrics" {
        return Target::Operational;
    }
    if let Some(rest) = under(path, "/placement") {
        return Target::Placement(if rest.is_empty() { "/" } else { rest });
    }
    if let Some(rest) = under(path, "/compute") {
        return Target::Compute(rest);
    }
    if let Some(rest) = under(path, "/image") {
        return Target::Image(rest);
    }
    if let Some(rest) = under(path, "/agent/v1") {
        return Target::Agent(rest);
    }
    if let Some(rest) = under(path, "/admin/v1") {
        return Target::Admin(rest);
    }
    if let Some(rest) = under(path, "/identity") {
        return Target::Identity(rest);
    }
    if let Some(rest) = under(path, "/reservation") {
        return Target::Reservation(rest);
    }
    if let Some(rest) = under(path, "/dashboard") {
        return Target::Dashboard(rest);
    }
    Target::Placement(path)
}

/// An API served alone at the root of its own listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootApi {
    /// `--compute-listen`: Nova's `/v2.1`.
    Compute,
    /// `--reservation-listen`: Blazar's `/v1`.
    Reservation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_go_to_their_api() {
        assert_eq!(target("/"), Target::Placement("/"));
        assert_eq!(target("/resource_providers"), Target::Placement("/resource_providers"));
        assert_eq!(target("/placement"), Target::Placement("/"));
        assert_eq!(target("/placement/traits"), Target::Placement("/traits"));
        assert_eq!(target("/placementx"), Target::Placement("/placementx"));
        assert_eq!(target("/compute/v2.1/servers"), Target::Compute("/v2.1/servers"));
        assert_eq!(target("/compute"), Target::Compute(""));
        assert_eq!(target("/image/v2/images"), Target::Image("/v2/images"));
        assert_eq!(target("/reservation/v1/leases"), Target::Reservation("/v1/leases"));
        assert_eq!(target("/reservationx"), Target::Placement("/reservationx"));
        assert_eq!(target("/agent/v1/work"), Target::Agent("/work"));
        assert_eq!(target("/admin/v1/cells"), Target::Admin("/cells"));
        assert_eq!(target("/metrics"), Target::Operational);
        assert_eq!(target("/dashboard"), Target::Dashboard(""));
        assert_eq!(target("/dashboard/api/capacity"), Target::Dashboard("/api/capacity"));
        assert_eq!(target("/dashboardx"), Target::Placement("/dashboardx"));
    }
}
