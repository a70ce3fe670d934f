//! Response bodies: domain values in, `serde_json::Value` out, per
//! microversion. Shared pieces live here: [`Links`] (how Nova builds `self`,
//! `bookmark` and `next` hrefs), the two timestamp formats Nova emits, and
//! the obfuscated `hostId`.
//!
//! Conventions of every view module:
//!
//! - functions named after the body they produce (`show`, `detail_list`,
//!   `create`, ...) return the whole response body (`{"flavor": {...}}`);
//!   `*_item` functions return one element, for callers that compose;
//! - policy is decided by the caller and passed in as booleans (or small
//!   enums): views never look at roles;
//! - keys are inserted in the order Nova's view code inserts them, which is
//!   the order Nova's clients receive (`serde_json` keeps insertion order
//!   here); the api-samples files are not a guide to order, as they are
//!   hand-edited and disagree with each other.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha224};

use berth_compute_model::Timestamp;

pub mod aggregates;
pub mod availability_zones;
pub mod diagnostics;
pub mod extensions;
pub mod flavors;
pub mod hosts;
pub mod hypervisors;
pub mod images;
pub mod instance_actions;
pub mod keypairs;
pub mod limits;
pub mod quotas;
pub mod server_groups;
pub mod servers;
pub mod services;
pub mod usage;
pub mod versions;

/// The path segment of the versioned compute API.
pub const API_VERSION_SEGMENT: &str = "v2.1";

/// Where links point: the compute API's unversioned base URL and the project
/// id segment of the request URL, if the request had one.
///
/// Nova builds two links per resource: `self`, under the versioned
/// application URL (`{base}/v2.1/{project_id}/servers/{id}`), and
/// `bookmark`, under the unversioned one (`{base}/{project_id}/servers/{id}`).
/// The project id segment appears only when the request URL carried it
/// (it has been optional since 2.18), so it is an `Option` here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    base: String,
    project_id: Option<String>,
}

impl Links {
    /// `base` is the compute API's unversioned root as the client reached
    /// it, e.g. `http://host:8080/compute` (devstack layout) or
    /// `http://host:8774` (a dedicated listener); a trailing `/` is ignored.
    /// `project_id` is the `{project_id}` segment of the request URL, if any.
    pub fn new(base: &str, project_id: Option<&str>) -> Links {
        Links {
            base: base.trim_end_matches('/').to_owned(),
            project_id: project_id.filter(|p| !p.is_empty()).map(str::to_owned),
        }
    }

    /// The unversioned base URL (no trailing `/`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `{base}/v2.1`, Nova's `application_url`.
    pub fn versioned_base(&self) -> String {
        format!("{}/{API_VERSION_SEGMENT}", self.base)
    }

    fn join(&self, root: &str, path: &str) -> String {
        match &self.project_id {
            Some(project) => format!("{root}/{project}/{path}"),
            None => format!("{root}/{path}"),
        }
    }

    /// `{base}/v2.1[/{project}]/{collection}/{id}`.
    pub fn self_href(&self, collection: &str, id: &str) -> String {
        self.join(&self.versioned_base(), &format!("{collection}/{id}"))
    }

    /// `{base}[/{project}]/{collection}/{id}`.
    pub fn bookmark_href(&self, collection: &str, id: &str) -> String {
        self.join(&self.base, &format!("{collection}/{id}"))
    }

    /// The `links` array of a resource: `self`, then `bookmark`.
    pub fn resource(&self, collection: &str, id: &str) -> Value {
        json!([
            {"href": self.self_href(collection, id), "rel": "self"},
            {"href": self.bookmark_href(collection, id), "rel": "bookmark"},
        ])
    }

    /// A `links` array with only the `bookmark` link (a server's `image` and,
    /// before 2.47, its `flavor`).
    pub fn bookmark(&self, collection: &str, id: &str) -> Value {
        json!([{"href": self.bookmark_href(collection, id), "rel": "bookmark"}])
    }

    /// The `next` link of a paged listing, as Nova's `_get_next_link`:
    /// `{base}/v2.1[/{project}]/{collection}?{query}` where the query is the
    /// request's parameters sorted by name (one value per name, the last
    /// given) with `marker` set to `marker`, form-encoded.
    pub fn next(&self, collection: &str, query: &[(&str, &str)], marker: &str) -> Value {
        let mut pairs: Vec<(&str, &str)> = query.to_vec();
        pairs.sort();
        let mut params: Vec<(&str, &str)> = Vec::new();
        for (name, value) in pairs {
            match params.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => params.push((name, value)),
            }
        }
        match params.iter_mut().find(|(n, _)| *n == "marker") {
            Some(slot) => slot.1 = marker,
            None => params.push(("marker", marker)),
        }
        let encoded: Vec<String> =
            params.iter().map(|(n, v)| format!("{}={}", form_encode(n), form_encode(v))).collect();
        let url = self.join(&self.versioned_base(), collection);
        json!([{"href": format!("{url}?{}", encoded.join("&")), "rel": "next"}])
    }
}

/// Does a listing page need a `next` link? Nova adds one when the page is
/// full: it holds `min(limit, max_limit)` items (`limit` defaulting to
/// `max_limit`, Nova's `[api] max_limit`, 1000 by default).
pub fn page_is_full(n_items: usize, limit: Option<usize>, max_limit: usize) -> bool {
    let max_items = limit.unwrap_or(max_limit).min(max_limit);
    max_items != 0 && max_items == n_items
}

/// `application/x-www-form-urlencoded` encoding of one name or value, as
/// Python's `urlencode` (`quote_plus`) does it.
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => out.push(byte as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A listing body: `{key: items}`, plus `{links_key: next}` when there is a
/// next page (see [`Links::next`] and [`page_is_full`]).
pub fn list_body(key: &str, items: Vec<Value>, links_key: &str, next: Option<Value>) -> Value {
    let mut body = Map::new();
    body.insert(key.to_owned(), Value::Array(items));
    if let Some(next) = next {
        body.insert(links_key.to_owned(), next);
    }
    Value::Object(body)
}

/// `{key: value}`: the envelope of most single-resource bodies.
pub fn wrap(key: &str, value: Value) -> Value {
    let mut body = Map::new();
    body.insert(key.to_owned(), value);
    Value::Object(body)
}

/// Civil date and time of a Unix timestamp (UTC), as (year, month, day,
/// hour, minute, second).
fn civil(ts: Timestamp) -> (i64, u32, u32, u32, u32, u32) {
    let days = ts.div_euclid(86_400);
    let secs = ts.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, (secs / 3600) as u32, (secs % 3600 / 60) as u32, (secs % 60) as u32)
}

/// Nova's `utils.isotime`: `%Y-%m-%dT%H:%M:%SZ` (a server's `created`,
/// `updated`, a fault's `created`).
pub fn isotime(ts: Timestamp) -> String {
    let (y, mo, d, h, mi, s) = civil(ts);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// How Nova serialises a naive `datetime` (oslo `jsonutils`, Python's
/// `isoformat`): `%Y-%m-%dT%H:%M:%S.%f` with no zone (`launched_at`, service
/// and aggregate times, instance actions). berth keeps whole seconds, so
/// the fraction is always `.000000`.
pub fn strtime(ts: Timestamp) -> String {
    let (y, mo, d, h, mi, s) = civil(ts);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.000000")
}

/// [`strtime`] of an optional time, `null` when absent.
pub fn strtime_or_null(ts: Option<Timestamp>) -> Value {
    ts.map_or(Value::Null, |t| Value::String(strtime(t)))
}

/// Nova's `hostId`: hex SHA-224 of `project_id + host`, or `""` when the
/// server has no host. It lets a project tell whether two of its servers
/// share a host without learning the host's name.
pub fn host_id(project_id: &str, host: Option<&str>) -> String {
    let Some(host) = host.filter(|h| !h.is_empty()) else { return String::new() };
    let digest = Sha224::digest(format!("{project_id}{host}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON string, or `null`.
fn opt_str(value: Option<&str>) -> Value {
    value.map_or(Value::Null, |s| Value::String(s.to_owned()))
}

/// A string map as a JSON object (keys in map order).
fn string_map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(isotime(0), "1970-01-01T00:00:00Z");
        assert_eq!(isotime(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(isotime(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(strtime(1_700_000_000), "2023-11-14T22:13:20.000000");
        assert_eq!(isotime(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn host_ids() {
        // hashlib.sha224(b"6f70656e737461636b20342065766572compute").hexdigest()
        assert_eq!(
            host_id("6f70656e737461636b20342065766572", Some("compute")),
            "2091634baaccdc4c5a1d57069c833e402921df696b7f970791b12ec6"
        );
        assert_eq!(host_id("p", None), "");
        assert_eq!(host_id("p", Some("")), "");
    }

    #[test]
    fn links() {
        let links = Links::new("http://h/compute/", Some("proj"));
        assert_eq!(links.self_href("servers", "x"), "http://h/compute/v2.1/proj/servers/x");
        assert_eq!(links.bookmark_href("servers", "x"), "http://h/compute/proj/servers/x");
        let bare = Links::new("http://h:8774", None);
        assert_eq!(bare.self_href("flavors", "1"), "http://h:8774/v2.1/flavors/1");
        let next = bare.next("servers/detail", &[("name", "a b"), ("limit", "2"), ("marker", "old")], "m/1");
        assert_eq!(
            next,
            json!([{"href": "http://h:8774/v2.1/servers/detail?limit=2&marker=m%2F1&name=a+b", "rel": "next"}])
        );
        assert!(page_is_full(2, Some(2), 1000));
        assert!(!page_is_full(1, Some(2), 1000));
        assert!(page_is_full(1000, None, 1000));
        assert!(page_is_full(1000, Some(5000), 1000));
        assert!(!page_is_full(0, Some(0), 1000));
    }
}
