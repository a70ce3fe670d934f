//! Version documents: `GET /compute/` (all versions) and
//! `GET /compute/v2.1/` (Nova's `views/versions.py` and `versionsV21.py`).
//!
//! berth serves only v2.1 with its microversions. The index still lists
//! the legacy v2.0 API first, `DEPRECATED`, exactly as Nova's does
//! (clients and Tempest read the list in that order); its `/v2/` link
//! answers v2.0's version document, and nothing else is served under
//! `/v2` (docs/COMPUTE.md).

use serde_json::{json, Value};

use super::{Links, API_VERSION_SEGMENT};
use crate::ComputeVersion;

/// When v2.1 was last changed, as Nova reports it.
const V21_UPDATED: &str = "2013-07-23T11:33:21Z";

/// When v2.0 was last changed, as Nova 34 reports it.
const V20_UPDATED: &str = "2025-07-04T12:00:00Z";

fn self_href(links: &Links) -> String {
    format!("{}/{API_VERSION_SEGMENT}/", links.base())
}

/// The `GET /compute/` body: `{"versions": [v2.0, v2.1]}`, each with its
/// `self` link (Nova's `build_versions`, sorted by id).
pub fn index(links: &Links) -> Value {
    json!({"versions": [{
        "id": "v2.0",
        "status": "DEPRECATED",
        "version": "",
        "min_version": "",
        "updated": V20_UPDATED,
        "links": [{"rel": "self", "href": format!("{}/v2/", links.base())}],
    }, {
        "id": "v2.1",
        "status": "CURRENT",
        "version": ComputeVersion::MAX.to_string(),
        "min_version": ComputeVersion::MIN.to_string(),
        "updated": V21_UPDATED,
        "links": [{"rel": "self", "href": self_href(links)}],
    }]})
}

/// The `GET /compute/v2.1/` body: the v2.1 version document with its
/// `self` and `describedby` links and media types.
pub fn show(links: &Links) -> Value {
    json!({"version": {
        "id": "v2.1",
        "status": "CURRENT",
        "version": ComputeVersion::MAX.to_string(),
        "min_version": ComputeVersion::MIN.to_string(),
        "updated": V21_UPDATED,
        "links": [
            {"rel": "self", "href": self_href(links)},
            {"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"},
        ],
        "media-types": [
            {"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"},
        ],
    }})
}

/// The `GET /compute/v2/` body: the v2.0 version document (Nova's
/// `VERSIONS['v2.0']` with its `self` link first).
pub fn show_v20(links: &Links) -> Value {
    json!({"version": {
        "id": "v2.0",
        "status": "DEPRECATED",
        "version": "",
        "min_version": "",
        "updated": V20_UPDATED,
        "links": [
            {"rel": "self", "href": format!("{}/v2/", links.base())},
            {"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"},
        ],
        "media-types": [
            {"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2"},
        ],
    }})
}
