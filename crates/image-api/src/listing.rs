//! `GET /image/v2/images`: Glance's listing rules, filters and sorting.
//!
//! Which images a caller lists (`_select_images_query`): an admin every
//! image; anyone else public and community images, its own, and `shared`
//! images it is a member of with the requested `member_status`
//! (`accepted` by default). Without a `visibility` filter, community
//! images are listed only to their owner; `visibility=all` lifts that.
//! Hidden images (`os_hidden`) are listed only with `os_hidden=true`.
//!
//! Filters: `visibility`, `member_status`, `tag` (repeatable: all of
//! them), `os_hidden`, `protected`, `name`/`id`/`status`/
//! `container_format`/`disk_format` (`in:a,b` or equality), `size_min`/
//! `size_max` (and `min_ram_*`, `min_disk_*`), `owner`, `checksum`,
//! `os_hash_value`, `min_ram`, `min_disk`, `created_at`/`updated_at`
//! (`gt:`, `gte:`, `lt:`, `lte:`, `neq:`, `eq:` an ISO time), and any other key as an
//! extra-property equality. Sorting: `sort_key`/`sort_dir` (repeatable)
//! or `sort=k:dir,...` on Glance's keys, then `created_at` and `id`.

use std::cmp::Ordering;

use berth_compute_model::Image;
use berth_http::{ApiError, ApiResult, Req, Resp};

use berth_compute_api::api::{is_admin, parse_time};

use crate::views as view;
use crate::ImageCtx;

const SORT_KEYS: &[&str] =
    &["name", "status", "container_format", "disk_format", "size", "id", "created_at", "updated_at"];
/// Glance's `limit_param_default` and `api_limit_max`.
const LIMIT_DEFAULT: usize = 25;
const LIMIT_MAX: usize = 1000;
/// Parameters that are not filters.
const NOT_FILTERS: &[&str] = &["limit", "marker", "sort", "sort_key", "sort_dir", "member_status", "tag"];

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// One filter on the images.
enum Filter {
    Visibility(String),
    Hidden(bool),
    Protected(bool),
    /// An attribute (or property) in a set of values.
    OneOf(String, Vec<String>),
    /// A numeric attribute within a bound.
    Min(String, i64),
    Max(String, i64),
    /// `created_at` or `updated_at` compared (`gt`, `gte`, ...) to a time.
    Time(String, String, i64),
}

struct Query {
    filters: Vec<Filter>,
    member_status: String,
    tags: Vec<String>,
    sort: Vec<(String, bool)>,
    limit: usize,
    marker: Option<String>,
}

fn boolean(name: &str, text: &str) -> ApiResult<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(bad(format!("Invalid value '{other}' for '{name}' filter. Valid values are 'true' or 'false'."))),
    }
}

fn sort_key(key: &str) -> ApiResult<String> {
    if SORT_KEYS.contains(&key) {
        return Ok(key.to_owned());
    }
    Err(bad(format!("Invalid sort key: {key}. It must be one of the following: {}.", SORT_KEYS.join(", "))))
}

fn sort_dir(dir: &str) -> ApiResult<bool> {
    match dir {
        "asc" => Ok(true),
        "desc" => Ok(false),
        other => Err(bad(format!("Invalid sort direction: {other}"))),
    }
}

/// Every value of a repeatable parameter.
fn all<'a>(req: &'a Req, name: &'a str) -> impl Iterator<Item = String> + 'a {
    req.query.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.trim().to_owned())
}

/// A `created_at`/`updated_at` filter: `[op:]time` (Glance's
/// `split_filter_op`; a bare ISO time is equality).
fn time_filter(key: &str, value: &str) -> ApiResult<Filter> {
    let (op, text) = match value.split_once(':') {
        Some((op, rest)) if ["gt", "gte", "lt", "lte", "neq", "eq"].contains(&op) => (op, rest),
        _ => ("eq", value),
    };
    let at = parse_time(text)
        .ok_or_else(|| bad(format!("Bad \"{key}\" query filter format. Use ISO 8601 DateTime notation.")))?;
    Ok(Filter::Time(key.to_owned(), op.to_owned(), at))
}

fn parse(req: &Req) -> ApiResult<Query> {
    let limit = match req.query_one("limit") {
        None => LIMIT_DEFAULT,
        Some(text) => {
            let n: i64 = text.trim().parse().map_err(|_| bad("limit param must be an integer"))?;
            if n < 0 {
                return Err(bad("limit param must be positive"));
            }
            usize::try_from(n).unwrap_or(LIMIT_MAX).min(LIMIT_MAX)
        }
    };
    let member_status = req.query_one("member_status").unwrap_or("accepted").to_owned();
    if !["pending", "accepted", "rejected", "all"].contains(&member_status.as_str()) {
        return Err(bad(format!("Invalid status: {member_status}")));
    }
    let mut sort = Vec::new();
    if let Some(spec) = req.query_one("sort") {
        if req.query_one("sort_key").is_some() || req.query_one("sort_dir").is_some() {
            return Err(bad("Old and new sorting syntax cannot be combined"));
        }
        for part in spec.trim().split(',') {
            let (key, dir) = part.split_once(':').unwrap_or((part, "desc"));
            let dir = if dir.trim().is_empty() { "desc" } else { dir.trim() };
            sort.push((sort_key(key.trim())?, sort_dir(dir)?));
        }
    } else {
        let keys: Vec<String> = all(req, "sort_key").map(|k| sort_key(&k)).collect::<ApiResult<_>>()?;
        let dirs: Vec<bool> = all(req, "sort_dir").map(|d| sort_dir(&d)).collect::<ApiResult<_>>()?;
        if dirs.len() > 1 && dirs.len() != keys.len() {
            return Err(bad("Number of sort dirs does not match the number of sort keys"));
        }
        let keys = if keys.is_empty() { vec!["created_at".to_owned()] } else { keys };
        let first = dirs.first().copied().unwrap_or(false);
        for (n, key) in keys.into_iter().enumerate() {
            sort.push((key, dirs.get(n).copied().unwrap_or(first)));
        }
    }
    // Glance orders ties by `created_at` and `id`, in the first direction.
    let default_dir = sort.first().is_some_and(|(_, asc)| *asc);
    for key in ["created_at", "id"] {
        if !sort.iter().any(|(k, _)| k == key) {
            sort.push((key.to_owned(), default_dir));
        }
    }
    let mut filters = Vec::new();
    if req.query_one("os_hidden").is_none() {
        filters.push(Filter::Hidden(false));
    }
    for (key, value) in &req.query {
        let (key, value) = (key.as_str(), value.as_str());
        if NOT_FILTERS.contains(&key) {
            continue;
        }
        filters.push(match key {
            "visibility" => {
                if !["community", "public", "private", "shared", "all"].contains(&value) {
                    return Err(bad(format!("Invalid visibility value: {value}")));
                }
                Filter::Visibility(value.to_owned())
            }
            "changes-since" => return Err(bad("The \"changes-since\" filter is no longer available on v2.")),
            "os_hidden" => Filter::Hidden(boolean("os_hidden", value)?),
            "created_at" | "updated_at" => time_filter(key, value)?,
            "protected" => Filter::Protected(boolean("protected", value)?),
            "name" | "id" | "status" | "container_format" | "disk_format" => {
                let (op, rest) = match value.split_once(':') {
                    Some((op, rest)) => (op, rest),
                    None => ("eq", value),
                };
                match op {
                    "eq" => Filter::OneOf(key.to_owned(), vec![rest.to_owned()]),
                    "in" => Filter::OneOf(
                        key.to_owned(),
                        rest.split(',').map(|v| v.trim().trim_matches('"').to_owned()).collect(),
                    ),
                    other => return Err(bad(format!("Unable to filter by unknown operator '{other}'."))),
                }
            }
            _ if key.ends_with("_min") || key.ends_with("_max") => {
                let n: i64 =
                    value.trim().parse().map_err(|_| bad("Unable to filter on a range with a non-numeric value."))?;
                let attribute = key[..key.len() - 4].to_owned();
                if key.ends_with("_min") {
                    Filter::Min(attribute, n)
                } else {
                    Filter::Max(attribute, n)
                }
            }
            _ => Filter::OneOf(key.to_owned(), vec![value.to_owned()]),
        });
    }
    let tags = all(req, "tag").collect();
    Ok(Query { filters, member_status, tags, sort, limit, marker: req.query_one("marker").map(str::to_owned) })
}

/// An attribute's value as text, for equality filters (`None`: unset).
fn attribute(image: &Image, key: &str) -> Option<String> {
    let hashes = image.hashes.as_ref();
    match key {
        "name" => image.name.clone(),
        "id" => Some(image.id.to_string()),
        "status" => Some(image.status.clone()),
        "container_format" => image.container_format.clone(),
        "disk_format" => image.disk_format.clone(),
        "owner" => image.owner.clone(),
        "checksum" => hashes.map(|h| h.checksum.clone()),
        "os_hash_value" => hashes.map(|h| h.os_hash_value.clone()),
        "os_hash_algo" => hashes.map(|h| h.os_hash_algo.clone()),
        "min_ram" => Some(image.min_ram.to_string()),
        "min_disk" => Some(image.min_disk.to_string()),
        "size" => image.size.map(|s| s.to_string()),
        _ => image.properties.get(key).cloned(),
    }
}

fn number(image: &Image, key: &str) -> Option<i64> {
    match key {
        "size" => image.size,
        "min_ram" => Some(image.min_ram),
        "min_disk" => Some(image.min_disk),
        _ => image.properties.get(key).and_then(|v| v.parse().ok()),
    }
}

fn matches(image: &Image, filter: &Filter) -> bool {
    match filter {
        Filter::Visibility(v) => v == "all" || image.visibility == *v,
        Filter::Hidden(h) => image.properties.get("os_hidden").is_some_and(|v| v == "true") == *h,
        Filter::Protected(p) => image.protected == *p,
        Filter::OneOf(key, values) => attribute(image, key).is_some_and(|v| values.contains(&v)),
        Filter::Min(key, n) => number(image, key).is_some_and(|v| v >= *n),
        Filter::Max(key, n) => number(image, key).is_some_and(|v| v <= *n),
        Filter::Time(key, op, at) => {
            let t = if key == "created_at" { image.created_at } else { image.updated_at };
            match op.as_str() {
                "gt" => t > *at,
                "gte" => t >= *at,
                "lt" => t < *at,
                "lte" => t <= *at,
                "neq" => t != *at,
                _ => t == *at,
            }
        }
    }
}

/// Whether a caller lists an image (Glance's `_select_images_query` and
/// its community rule).
fn listed(image: &Image, project: Option<&str>, admin: bool, query: &Query) -> bool {
    let own = project.is_some() && image.owner.as_deref() == project;
    let visible = admin
        || own
        || matches!(image.visibility.as_str(), "public" | "community")
        || (image.visibility == "shared"
            && image.member_status(project).is_some_and(|s| query.member_status == "all" || s == query.member_status));
    let has_visibility_filter = query.filters.iter().any(|f| matches!(f, Filter::Visibility(_)));
    visible && (has_visibility_filter || own || image.visibility != "community")
}

fn compare(a: &Image, b: &Image, key: &str) -> Ordering {
    match key {
        "name" => a.name.cmp(&b.name),
        "status" => a.status.cmp(&b.status),
        "container_format" => a.container_format.cmp(&b.container_format),
        "disk_format" => a.disk_format.cmp(&b.disk_format),
        "size" => a.size.cmp(&b.size),
        "id" => a.id.to_string().cmp(&b.id.to_string()),
        "created_at" => a.created_at.cmp(&b.created_at),
        _ => a.updated_at.cmp(&b.updated_at),
    }
}

/// `GET /image/v2/images`.
pub fn index(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let query = parse(req)?;
    let (project, admin) = (req.auth.project_id.as_deref(), is_admin(req));
    let world = ctx.core.read();
    let mut images: Vec<&Image> = world
        .compute
        .images
        .values()
        .filter(|i| listed(i, project, admin, &query))
        .filter(|i| query.filters.iter().all(|f| matches(i, f)))
        .filter(|i| query.tags.iter().all(|t| i.tags.contains(t)))
        .collect();
    let order = |a: &&Image, b: &&Image| {
        for (key, asc) in &query.sort {
            let o = compare(a, b, key);
            let o = if *asc { o } else { o.reverse() };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    };
    images.sort_by(order);
    if let Some(marker) = &query.marker {
        let pos = images
            .iter()
            .position(|i| i.id.to_string() == *marker)
            .ok_or_else(|| bad(format!("Invalid marker. Image {marker} could not be found.")))?;
        images.drain(..=pos);
    }
    let more = images.len() > query.limit;
    images.truncate(query.limit);
    let page: Vec<Image> = images.into_iter().cloned().collect();
    drop(world);
    let pairs: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let next = if more { page.last().map(|i| i.id.to_string()) } else { None };
    Ok(Resp::ok(view::list(&page, &pairs, next.as_deref())))
}
