//! The Glance v2 subset berth serves at `/image/v2`: image bodies, the
//! listing envelope, and the `GET /v2/schemas/image(s)` documents that
//! glanceclient/openstackclient fetch before they create or show images.
//!
//! Glance's hrefs (`self`, `file`, `schema`, `first`, `next`) are relative
//! to the image endpoint (`/v2/images/...`); clients join them with the
//! endpoint from the catalog, so they are the same under any prefix.

use serde_json::{json, Map, Value};

use berth_compute_model::Image;

use berth_compute_api::views::{form_encode, isotime};

/// Base attributes of an image: a property with one of these names is not
/// shown as an extra property (the base attribute wins), and Glance refuses
/// to create or update the read-only ones (see
/// [`crate::schemas::READ_ONLY_ATTRIBUTES`]).
pub const BASE_ATTRIBUTES: &[&str] = &[
    "id",
    "name",
    "status",
    "visibility",
    "protected",
    "os_hidden",
    "owner",
    "disk_format",
    "container_format",
    "min_disk",
    "min_ram",
    "size",
    "virtual_size",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "tags",
    "created_at",
    "updated_at",
    "self",
    "file",
    "schema",
    "locations",
    "direct_url",
    "stores",
];

/// One image as Glance v2 shows it: the base attributes, then every other
/// property as a top-level string. `checksum` and `os_hash_*` are `null`
/// until data is uploaded; `virtual_size` is always `null` (berth does
/// not inspect disk formats). `os_hidden` is
/// kept as the `os_hidden` property (`"true"` hides the image).
pub fn image(image: &Image) -> Value {
    let id = image.id.to_string();
    let mut body = Map::new();
    body.insert("id".into(), json!(id));
    body.insert("name".into(), json!(image.name));
    body.insert("status".into(), json!(image.status));
    body.insert("visibility".into(), json!(image.visibility));
    body.insert("protected".into(), json!(image.protected));
    body.insert("os_hidden".into(), json!(image.properties.get("os_hidden").is_some_and(|v| v == "true")));
    body.insert("owner".into(), json!(image.owner));
    body.insert("disk_format".into(), json!(image.disk_format));
    body.insert("container_format".into(), json!(image.container_format));
    body.insert("min_disk".into(), json!(image.min_disk));
    body.insert("min_ram".into(), json!(image.min_ram));
    body.insert("size".into(), json!(image.size));
    body.insert("virtual_size".into(), Value::Null);
    let hashes = image.hashes.as_ref();
    body.insert("checksum".into(), json!(hashes.map(|h| &h.checksum)));
    body.insert("os_hash_algo".into(), json!(hashes.map(|h| &h.os_hash_algo)));
    body.insert("os_hash_value".into(), json!(hashes.map(|h| &h.os_hash_value)));
    body.insert("tags".into(), json!(image.tags));
    body.insert("created_at".into(), json!(isotime(image.created_at)));
    body.insert("updated_at".into(), json!(isotime(image.updated_at)));
    body.insert("self".into(), json!(format!("/v2/images/{id}")));
    body.insert("file".into(), json!(format!("/v2/images/{id}/file")));
    body.insert("schema".into(), json!("/v2/schemas/image"));
    for (key, value) in &image.properties {
        if !BASE_ATTRIBUTES.contains(&key.as_str()) {
            body.insert(key.clone(), json!(value));
        }
    }
    Value::Object(body)
}

/// The `GET /v2/images` body: `images`, `first`, `schema`, and `next` when
/// there are more: the request's query (`limit`, filters) with `marker`
/// set to `next_marker` (the last image's id), as Glance builds it.
pub fn list(images: &[Image], query: &[(&str, &str)], next_marker: Option<&str>) -> Value {
    let mut body = Map::new();
    body.insert("images".into(), Value::Array(images.iter().map(image).collect()));
    body.insert("first".into(), json!("/v2/images"));
    body.insert("schema".into(), json!("/v2/schemas/images"));
    if let Some(marker) = next_marker {
        let mut params: Vec<String> = query
            .iter()
            .filter(|(name, _)| *name != "marker")
            .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
            .collect();
        params.push(format!("marker={}", form_encode(marker)));
        body.insert("next".into(), json!(format!("/v2/images?{}", params.join("&"))));
    }
    Value::Object(body)
}

/// Disk formats Glance accepts by default.
pub const DISK_FORMATS: &[&str] = &["ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop"];
/// Container formats Glance accepts by default.
pub const CONTAINER_FORMATS: &[&str] = &["ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed"];
/// Image visibilities.
pub const VISIBILITIES: &[&str] = &["community", "public", "private", "shared"];
/// Image statuses.
pub const STATUSES: &[&str] =
    &["queued", "saving", "active", "killed", "deleted", "pending_delete", "deactivated", "uploading", "importing"];

const UUID_PATTERN: &str = "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$";

fn nullable_enum(values: &[&str]) -> Value {
    let mut options = vec![Value::Null];
    options.extend(values.iter().map(|v| json!(v)));
    Value::Array(options)
}

/// The `properties` of Glance's image schema (shared by the document and
/// [`crate::schemas::create`]).
pub(crate) fn image_schema_properties() -> Map<String, Value> {
    let properties = json!({
        "id": {"type": "string", "pattern": UUID_PATTERN, "description": "An identifier for the image"},
        "name": {"type": ["null", "string"], "maxLength": 255, "description": "Descriptive name for the image"},
        "status": {"type": "string", "readOnly": true, "enum": STATUSES, "description": "Status of the image"},
        "visibility": {"type": "string", "enum": VISIBILITIES, "description": "Scope of image accessibility"},
        "protected": {"type": "boolean", "description": "If true, image will not be deletable."},
        "os_hidden": {"type": "boolean", "description": "If true, image will not appear in default image list response."},
        "checksum": {"type": ["null", "string"], "readOnly": true, "maxLength": 32, "description": "md5 hash of image contents."},
        "os_hash_algo": {"type": ["null", "string"], "readOnly": true, "maxLength": 64, "description": "Algorithm to calculate the os_hash_value"},
        "os_hash_value": {"type": ["null", "string"], "readOnly": true, "maxLength": 128, "description": "Hexdigest of the image contents using the algorithm specified by the os_hash_algo"},
        "owner": {"type": ["null", "string"], "maxLength": 255, "description": "Owner of the image"},
        "size": {"type": ["null", "integer"], "readOnly": true, "description": "Size of image file in bytes"},
        "virtual_size": {"type": ["null", "integer"], "readOnly": true, "description": "Virtual size of image in bytes"},
        "container_format": {"type": ["null", "string"], "enum": nullable_enum(CONTAINER_FORMATS), "description": "Format of the container"},
        "disk_format": {"type": ["null", "string"], "enum": nullable_enum(DISK_FORMATS), "description": "Format of the disk"},
        "created_at": {"type": "string", "readOnly": true, "description": "Date and time of image registration"},
        "updated_at": {"type": "string", "readOnly": true, "description": "Date and time of the last image modification"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 255}, "description": "List of strings related to the image"},
        "direct_url": {"type": "string", "readOnly": true, "description": "URL to access the image file kept in external store"},
        "min_ram": {"type": "integer", "minimum": 0, "description": "Amount of ram (in MB) required to boot image."},
        "min_disk": {"type": "integer", "minimum": 0, "description": "Amount of disk space (in GB) required to boot image."},
        "self": {"type": "string", "readOnly": true, "description": "An image self url"},
        "file": {"type": "string", "readOnly": true, "description": "An image file url"},
        "stores": {"type": "string", "readOnly": true, "description": "Store in which image data resides.  Only present when the operator has enabled multiple stores.  May be a comma-separated list of store identifiers."},
        "schema": {"type": "string", "readOnly": true, "description": "An image schema url"},
        "locations": {"type": "array", "items": {"type": "object", "properties": {"url": {"type": "string", "maxLength": 255}, "metadata": {"type": "object"}}, "required": ["url", "metadata"]}, "description": "A set of URLs to access the image file kept in external store"},
        "kernel_id": {"type": ["null", "string"], "pattern": UUID_PATTERN, "is_base": false, "description": "ID of image stored in Glance that should be used as the kernel when booting an AMI-style image."},
        "ramdisk_id": {"type": ["null", "string"], "pattern": UUID_PATTERN, "is_base": false, "description": "ID of image stored in Glance that should be used as the ramdisk when booting an AMI-style image."},
        "instance_uuid": {"type": "string", "is_base": false, "description": "Metadata which can be used to record which instance this image is associated with. (Informational only, does not create an instance snapshot.)"},
        "architecture": {"type": "string", "is_base": false, "description": "Operating system architecture as specified in https://docs.openstack.org/python-glanceclient/latest/cli/property-keys.html"},
        "os_distro": {"type": "string", "is_base": false, "description": "Common name of operating system distribution as specified in https://docs.openstack.org/python-glanceclient/latest/cli/property-keys.html"},
        "os_version": {"type": "string", "is_base": false, "description": "Operating system version as specified by the distributor."},
    });
    match properties {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The `GET /v2/schemas/image` document: the image's attributes with their
/// types (read-only ones marked), any other property a string, and the
/// link templates. glanceclient builds its image model from it.
pub fn image_schema() -> Value {
    json!({
        "name": "image",
        "properties": image_schema_properties(),
        "additionalProperties": {"type": "string"},
        "links": [
            {"rel": "self", "href": "{self}"},
            {"rel": "enclosure", "href": "{file}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    })
}

/// The `GET /v2/schemas/images` document: the listing envelope around
/// [`image_schema`].
pub fn images_schema() -> Value {
    json!({
        "name": "images",
        "properties": {
            "images": {"type": "array", "items": image_schema()},
            "schema": {"type": "string"},
            "first": {"type": "string"},
            "next": {"type": "string"},
        },
        "links": [
            {"rel": "first", "href": "{first}"},
            {"rel": "next", "href": "{next}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    })
}
