//! The image proxy's bodies (Nova's `views/images.py`): `{"image": ...}`
//! with `status` in Nova's words (ACTIVE, SAVING, ...), `progress`,
//! `minRam`/`minDisk`, `OS-EXT-IMG-SIZE:size`, the image's extra
//! properties as `metadata`, and `server` for a snapshot.

use berth_compute_model::Image;
use serde_json::{json, Map, Value};

use super::{isotime, Links};

/// Nova's `_get_status`: Glance's status as the compute API names it.
pub fn status(glance: &str) -> &'static str {
    match glance {
        "active" => "ACTIVE",
        "queued" | "saving" | "importing" | "uploading" => "SAVING",
        "deleted" | "pending_delete" => "DELETED",
        "killed" => "ERROR",
        _ => "UNKNOWN",
    }
}

/// Nova's `_get_progress`.
fn progress(glance: &str) -> i64 {
    match glance {
        "queued" => 25,
        "saving" => 50,
        "active" => 100,
        _ => 0,
    }
}

/// The image's `metadata`: its extra (non-schema) properties, as Nova's
/// `_extract_attributes_v2` files them under `properties`.
pub fn metadata(image: &Image) -> Map<String, Value> {
    image
        .properties
        .iter()
        .filter(|(k, _)| k.as_str() != "os_hidden")
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// `self`, `bookmark` and the `alternate` link to the image service.
fn links(links: &Links, image_base: &str, image: &Image) -> Value {
    let id = image.id.to_string();
    json!([
        {"rel": "self", "href": links.self_href("images", &id)},
        {"rel": "bookmark", "href": links.bookmark_href("images", &id)},
        {"rel": "alternate", "type": "application/vnd.openstack.image", "href": format!("{image_base}/images/{id}")},
    ])
}

/// One image of `GET /images` (Nova's `basic`).
pub fn basic(l: &Links, image_base: &str, image: &Image) -> Value {
    json!({"id": image.id.to_string(), "name": image.name, "links": links(l, image_base, image)})
}

/// One image of `GET /images/detail` and `GET /images/{id}` (Nova's
/// `show`, without the envelope).
pub fn detail(l: &Links, image_base: &str, image: &Image) -> Value {
    let metadata = metadata(image);
    let mut body = json!({
        "id": image.id.to_string(),
        "name": image.name,
        "minRam": image.min_ram,
        "minDisk": image.min_disk,
        "metadata": Value::Object(metadata.clone()),
        "created": isotime(image.created_at),
        "updated": isotime(image.updated_at),
        "status": status(&image.status),
        "progress": progress(&image.status),
        // Glance's null size is 0 to Nova (`_extract_attributes_v2`).
        "OS-EXT-IMG-SIZE:size": image.size.unwrap_or(0),
        "links": links(l, image_base, image),
    });
    if let Some(server) = image.properties.get("instance_uuid") {
        body["server"] = json!({"id": server, "links": [
            {"rel": "self", "href": l.self_href("servers", server)},
            {"rel": "bookmark", "href": l.bookmark_href("servers", server)},
        ]});
    }
    if let Some(auto) = image.properties.get("auto_disk_config") {
        let on = matches!(auto.to_ascii_lowercase().as_str(), "1" | "t" | "true" | "on" | "y" | "yes");
        body["OS-DCF:diskConfig"] = json!(if on { "AUTO" } else { "MANUAL" });
    }
    body
}
