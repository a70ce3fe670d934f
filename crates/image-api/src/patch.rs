//! `PATCH /image/v2/images/{id}`: Glance's JSON-patch update
//! (`application/openstack-images-v2.1-json-patch`, and the older
//! `v2.0` draft-4 form that Tempest sends) with `add`, `replace` and
//! `remove` on the base attributes and extra properties.
//!
//! The request is parsed and checked first (media type, operation shape,
//! JSON pointer, read-only and reserved attributes, the image schema for
//! each value); the operations are then applied inside the one planned
//! write, to the image as it is at that moment, so two concurrent updates
//! never lose one another's change.

use axum::http::StatusCode;
use berth_compute_model::plan::plan_put_image;
use berth_compute_model::Image;
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};

use berth_compute_api::api::{self, is_admin};

use crate::handlers::{check_property_quota, find, RESERVED_NAMESPACE};
use crate::views as view;
use crate::{schemas, ImageCtx};

/// The patch media types Glance takes, with their JSON-schema draft.
const PATCH_TYPES: &[(&str, Draft)] = &[
    ("application/openstack-images-v2.0-json-patch", Draft::Four),
    ("application/openstack-images-v2.1-json-patch", Draft::Ten),
];

const OPERATIONS: &[&str] = &["add", "remove", "replace"];

/// Which JSON-patch form a request uses: draft 4 names the operation by
/// its key (`{"replace": "/name", "value": ..}`), draft 10 by `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Draft {
    Four,
    Ten,
}

/// One checked operation.
#[derive(Debug, Clone)]
pub struct Change {
    op: &'static str,
    path: String,
    value: Value,
    draft: Draft,
}

/// Base attributes a patch may set (but never remove).
const WRITABLE_BASE: &[&str] = &[
    "name",
    "visibility",
    "protected",
    "os_hidden",
    "owner",
    "disk_format",
    "container_format",
    "min_disk",
    "min_ram",
    "tags",
];

/// Attributes Glance refuses in a patch as read-only (`id` among them).
const READ_ONLY: &[&str] = &[
    "created_at",
    "updated_at",
    "status",
    "checksum",
    "size",
    "virtual_size",
    "direct_url",
    "self",
    "file",
    "schema",
    "id",
    "os_hash_algo",
    "os_hash_value",
    "stores",
];

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// Parse and check a patch body (Glance's `RequestDeserializer.update`).
pub fn parse(req: &Req) -> ApiResult<Vec<Change>> {
    let content_type = req
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default();
    let Some(&(_, draft)) = PATCH_TYPES.iter().find(|(name, _)| *name == content_type) else {
        let allowed = PATCH_TYPES.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
        let mut err = ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Image PATCH expects Content-Type one of: {allowed}"),
        );
        err.headers.push(("accept-patch", allowed));
        return Err(err);
    };
    if req.body.is_empty() {
        return Err(bad("Body expected in request."));
    }
    let body: Value = serde_json::from_slice(&req.body).map_err(|_| bad("Malformed JSON in request body."))?;
    if berth_http::request::find_nul(&body).is_some() {
        return Err(bad(berth_http::request::NUL_REFUSED));
    }
    let Value::Array(raw_changes) = body else {
        return Err(bad("Request body must be a JSON array of operation objects."));
    };
    raw_changes.iter().map(|raw| parse_change(raw, draft)).collect()
}

fn parse_change(raw: &Value, draft: Draft) -> ApiResult<Change> {
    let Some(obj) = raw.as_object() else { return Err(bad("Operations must be JSON objects.")) };
    let available = OPERATIONS.join(", ");
    let (op, pointer) = match draft {
        Draft::Ten => {
            let op = match obj.get("op") {
                None => {
                    return Err(bad(format!(
                        "Unable to find `op` in JSON Schema change. It must be one of the following: {available}."
                    )))
                }
                Some(op) => OPERATIONS.iter().copied().find(|o| op.as_str() == Some(o)).ok_or_else(|| {
                    let shown = op.as_str().map_or_else(|| op.to_string(), str::to_owned);
                    bad(format!("Invalid operation: `{shown}`. It must be one of the following: {available}."))
                })?,
            };
            let path = obj.get("path").ok_or_else(|| bad("Unable to find 'path' in JSON Schema change"))?;
            (op, path)
        }
        Draft::Four => {
            let mut found = OPERATIONS.iter().copied().filter(|o| obj.contains_key(*o));
            let op = found.next().ok_or_else(|| {
                bad("Operation objects must contain exactly one member named \"add\", \"remove\", or \"replace\".")
            })?;
            if found.next().is_some() {
                return Err(bad(
                    "Operation objects must contain only one member named \"add\", \"remove\", or \"replace\".",
                ));
            }
            (op, &obj[op])
        }
    };
    let pointer = pointer.as_str().ok_or_else(|| bad(format!("Pointer `{pointer}` does not start with \"/\".")))?;
    let parts = decode_pointer(pointer)?;
    if parts.len() != 1 {
        return Err(bad(format!("Invalid JSON pointer for this resource: '/{}'", parts.join("/"))));
    }
    let path = parts.into_iter().next().unwrap_or_default();
    let value = if op == "remove" {
        Value::Null
    } else {
        obj.get("value")
            .cloned()
            .ok_or_else(|| bad(format!("Operation \"{op}\" requires a member named \"value\".")))?
    };
    if READ_ONLY.contains(&path.as_str()) {
        return Err(ApiError::forbidden(format!("Attribute '{path}' is read-only.")));
    }
    if schemas::RESERVED_ATTRIBUTES.contains(&path.as_str()) || path.starts_with(RESERVED_NAMESPACE) {
        return Err(ApiError::forbidden(format!("Attribute '{path}' is reserved.")));
    }
    if op != "remove" && path != "locations" {
        // Glance validates each value against the image schema.
        let partial = json!({ path.clone(): value });
        berth_http::schema::validate(&schemas::create(), &partial)
            .map_err(|e| bad(format!("Provided object does not match schema 'image': {}", e.message)))?;
    }
    Ok(Change { op, path, value, draft })
}

/// Glance's restricted JSON pointer (`_decode_json_pointer`).
fn decode_pointer(pointer: &str) -> ApiResult<Vec<String>> {
    if !pointer.starts_with('/') {
        return Err(bad(format!("Pointer `{pointer}` does not start with \"/\".")));
    }
    let rest = &pointer[1..];
    // Glance's `/\s*?/` after the leading slash.
    let adjacent = rest.match_indices('/').any(|(i, _)| rest[i + 1..].trim_start().starts_with('/'));
    if adjacent {
        return Err(bad(format!("Pointer `{pointer}` contains adjacent \"/\".")));
    }
    if pointer.len() > 1 && pointer.ends_with('/') {
        return Err(bad(format!("Pointer `{pointer}` end with \"/\".")));
    }
    let bad_escape = pointer.ends_with('~')
        || pointer.match_indices('~').any(|(i, _)| !matches!(pointer.as_bytes().get(i + 1), Some(b'0' | b'1')));
    if bad_escape {
        return Err(bad(format!("Pointer `{pointer}` contains \"~\" not part of a recognized escape sequence.")));
    }
    Ok(rest.split('/').map(|p| p.replace("~1", "/").replace("~0", "~").trim().to_owned()).collect())
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn opt_text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Apply checked changes to `image` (Glance's `_do_add` / `_do_replace` /
/// `_do_remove`), as `admin` or not.
pub fn apply(image: &Image, changes: &[Change], admin: bool) -> ApiResult<Image> {
    let mut next = image.clone();
    for change in changes {
        let path = change.path.as_str();
        if path == "locations" {
            return Err(ApiError::forbidden("It's not allowed to update locations if locations are invisible."));
        }
        let base = WRITABLE_BASE.contains(&path);
        match change.op {
            "remove" if base => return Err(ApiError::forbidden(format!("Property {path} may not be removed."))),
            "remove" => {
                if next.properties.remove(path).is_none() {
                    return Err(ApiError::conflict(format!("Property {path} does not exist.")));
                }
            }
            op => {
                // Draft 4's `add` does not replace (Glance's
                // `json_schema_version == 4` check); draft 10's does.
                let present = base || next.properties.contains_key(path);
                if op == "add" && change.draft == Draft::Four && present {
                    return Err(ApiError::conflict(format!("Property {path} already present.")));
                }
                if op == "replace" && !base && !next.properties.contains_key(path) {
                    return Err(ApiError::conflict(format!("Property {path} does not exist.")));
                }
                set(&mut next, path, &change.value, admin)?;
            }
        }
    }
    Ok(next)
}

fn set(image: &mut Image, path: &str, value: &Value, admin: bool) -> ApiResult<()> {
    let queued_only = |attribute: &str| {
        ApiError::forbidden(format!("Attribute {attribute} can be only replaced for a queued image."))
    };
    match path {
        "name" => image.name = opt_text(value),
        "visibility" => {
            let visibility = text(value);
            if visibility == "public" && image.visibility != "public" && !admin {
                return Err(ApiError::forbidden("You are not authorized to complete publicize_image action."));
            }
            image.visibility = visibility;
        }
        "protected" => image.protected = value.as_bool().unwrap_or(false),
        "os_hidden" => {
            image.properties.insert("os_hidden".to_owned(), value.as_bool().unwrap_or(false).to_string());
        }
        "owner" => {
            if !admin {
                return Err(ApiError::forbidden("Owner can't be updated by non admin."));
            }
            image.owner = opt_text(value);
        }
        "disk_format" | "container_format" => {
            let current = if path == "disk_format" { &mut image.disk_format } else { &mut image.container_format };
            let wanted = opt_text(value);
            if *current != wanted && image.status != "queued" {
                return Err(queued_only(path));
            }
            *current = wanted;
        }
        "min_disk" | "min_ram" => {
            let n = value.as_i64().unwrap_or(0);
            if n > i64::from(i32::MAX) {
                return Err(bad(format!("'{path}' value out of range, must not exceed {}.", i32::MAX)));
            }
            if path == "min_disk" {
                image.min_disk = n;
            } else {
                image.min_ram = n;
            }
        }
        "tags" => {
            let mut tags: Vec<String> = Vec::new();
            for tag in value.as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !tags.iter().any(|t| t == tag) {
                    tags.push(tag.to_owned());
                }
            }
            image.tags = tags;
        }
        _ => {
            image.properties.insert(path.to_owned(), text(value));
        }
    }
    Ok(())
}

/// `PATCH /image/v2/images/{id}`.
pub fn update(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let changes = parse(req)?;
    let image = find(ctx, req)?;
    let admin = is_admin(req);
    if !admin && image.owner.as_deref() != req.auth.project_id.as_deref() {
        return Err(ApiError::forbidden("You are not authorized to complete modify_image action."));
    }
    let id = image.id;
    let updated = ctx.core.write(|w| {
        let current =
            w.compute.images.get(&id).ok_or_else(|| ApiError::not_found(format!("No image found with ID {id}")))?;
        let mut next = apply(current, &changes, admin)?;
        if changes.is_empty() {
            return Ok::<_, ApiError>((berth_compute_model::WorldChangeSet::new(), next));
        }
        check_property_quota(&next)?;
        next.updated_at = berth_core::now();
        let set = plan_put_image(w, next.clone()).map_err(api::refused)?;
        Ok((set, next))
    })?;
    Ok(Resp::ok(view::image(&updated)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_as_glance_reads_them() {
        assert_eq!(decode_pointer("/name").unwrap(), vec!["name"]);
        assert_eq!(decode_pointer("/a~1b").unwrap(), vec!["a/b"]);
        assert_eq!(decode_pointer("/a~0b").unwrap(), vec!["a~b"]);
        for bad in ["name", "/a//b", "/a/", "/a~2", "/a~"] {
            assert!(decode_pointer(bad).is_err(), "{bad}");
        }
        assert_eq!(decode_pointer("/locations/1").unwrap().len(), 2);
    }

    #[test]
    fn changes_in_both_drafts() {
        let four = parse_change(&json!({"replace": "/name", "value": "x"}), Draft::Four).unwrap();
        assert_eq!((four.op, four.path.as_str()), ("replace", "name"));
        let ten = parse_change(&json!({"op": "remove", "path": "/hw_x"}), Draft::Ten).unwrap();
        assert_eq!((ten.op, ten.path.as_str()), ("remove", "hw_x"));
        assert!(parse_change(&json!({"add": "/a", "remove": "/b"}), Draft::Four).is_err());
        assert!(parse_change(&json!({"op": "move", "path": "/a"}), Draft::Ten).is_err());
        assert!(parse_change(&json!({"op": "add", "path": "/a"}), Draft::Ten).is_err(), "add needs a value");
        let read_only = parse_change(&json!({"op": "replace", "path": "/status", "value": "active"}), Draft::Ten);
        assert_eq!(read_only.unwrap_err().status, StatusCode::FORBIDDEN);
        let reserved = parse_change(&json!({"op": "add", "path": "/os_glance_x", "value": "y"}), Draft::Ten);
        assert_eq!(reserved.unwrap_err().status, StatusCode::FORBIDDEN);
        let typed = parse_change(&json!({"op": "replace", "path": "/min_ram", "value": "x"}), Draft::Ten);
        assert_eq!(typed.unwrap_err().status, StatusCode::BAD_REQUEST);
        let extra = parse_change(&json!({"op": "add", "path": "/hw_x", "value": 3}), Draft::Ten);
        assert_eq!(extra.unwrap_err().status, StatusCode::BAD_REQUEST, "extra properties are strings");
    }
}
