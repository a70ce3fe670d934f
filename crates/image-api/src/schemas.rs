//! The `POST /image/v2/images` body (Glance validates it against its image
//! schema: the writable base attributes, and any other property a string).

use serde_json::{json, Map, Value};

use crate::views::image_schema_properties;

/// Attributes Glance refuses in a create or update request (`403 Attribute
/// 'x' is read-only`); [`create`] lets them through as extra string
/// properties so the handler can answer 403 rather than 400, as Glance
/// does. `id` is writable at create only.
pub const READ_ONLY_ATTRIBUTES: &[&str] = &[
    "status",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "size",
    "virtual_size",
    "created_at",
    "updated_at",
    "direct_url",
    "self",
    "file",
    "schema",
    "stores",
];

/// Attributes Glance reserves: never allowed as properties (`403 Attribute
/// 'x' is reserved`).
pub const RESERVED_ATTRIBUTES: &[&str] = &["location", "deleted", "deleted_at"];

/// The `POST /image/v2/images` body: an object with any of `id` (a uuid),
/// `name`, `visibility`, `protected`, `os_hidden`, `disk_format`,
/// `container_format`, `min_disk`, `min_ram`, `tags`, `kernel_id`,
/// `ramdisk_id` and the other documented properties, typed as in Glance's
/// schema; any other key is an extra property and must be a string.
/// `owner` is writable in Glance only by admins, and `locations` not at all
/// here (image data lives only in berth's own store); the handler decides.
pub fn create() -> Value {
    let writable: Map<String, Value> = image_schema_properties()
        .into_iter()
        .filter(|(name, schema)| schema.get("readOnly") != Some(&Value::Bool(true)) && name != "locations")
        .map(|(name, mut schema)| {
            // Descriptions and `is_base` are documentation for clients.
            if let Value::Object(map) = &mut schema {
                map.remove("description");
                map.remove("is_base");
            }
            (name, schema)
        })
        .collect();
    json!({
        "type": "object",
        "properties": writable,
        "additionalProperties": {"type": "string"},
    })
}
