//! The image views and schemas checked against what Glance clients rely
//! on (moved with the image API from `berth-compute-api`'s tests).

use berth_compute_model::Image;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{schemas as images_schemas, views as images};

const T0: i64 = 1_700_000_000;

fn glance_image() -> Image {
    Image {
        id: Uuid::parse_str("70a599e0-31e7-49b7-b260-868f441e862b").expect("uuid"),
        name: Some("cirros".into()),
        status: "active".into(),
        visibility: "public".into(),
        protected: false,
        owner: Some("admin".into()),
        disk_format: Some("qcow2".into()),
        container_format: Some("bare".into()),
        min_disk: 0,
        min_ram: 0,
        size: Some(21_430_272),
        hashes: None,
        tags: vec!["boot".into()],
        properties: [("hw_disk_bus", "scsi"), ("os_hidden", "false"), ("status", "spoofed")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        members: Default::default(),
        created_at: T0,
        updated_at: T0 + 1,
    }
}

fn valid(schema: &Value, body: &Value) -> bool {
    berth_http::schema::validate(schema, body).is_ok()
}

/// berth's validator skips a pattern it cannot compile, so every pattern
/// must compile with the same `regex` features the validator has.
#[test]
fn every_pattern_compiles() {
    let mut found = Vec::new();
    berth_http::schema::collect_patterns(&images_schemas::create(), &mut found);
    berth_http::schema::collect_patterns(&images::image_schema(), &mut found);
    found.sort();
    found.dedup();
    for pattern in found {
        assert!(regex::Regex::new(&pattern).is_ok(), "{pattern} does not compile");
    }
}

#[test]
fn the_create_schema_is_glance_s() {
    let image = images_schemas::create();
    assert!(valid(
        &image,
        &json!({"name": "cirros", "id": "70a599e0-31e7-49b7-b260-868f441e862b", "visibility": "public",
                "disk_format": "qcow2", "container_format": "bare", "min_disk": 1, "min_ram": 0,
                "protected": false, "tags": ["a"], "hw_disk_bus": "scsi", "os_distro": "cirros"})
    ));
    assert!(valid(&image, &json!({})));
    assert!(valid(&image, &json!({"name": null, "disk_format": null})));
    assert!(!valid(&image, &json!({"visibility": "everyone"})));
    assert!(!valid(&image, &json!({"disk_format": "tar"})));
    assert!(!valid(&image, &json!({"min_ram": -1})));
    assert!(!valid(&image, &json!({"id": "not-a-uuid"})));
    assert!(!valid(&image, &json!({"hw_disk_bus": 1})), "extra properties are strings");
    assert!(!valid(&image, &json!({"tags": "a"})));
    assert!(valid(&image, &json!({"status": "active"})), "read-only attributes are the handler's 403");
    assert!(images_schemas::READ_ONLY_ATTRIBUTES.contains(&"status"));
}

#[test]
fn glance_images() {
    let image = glance_image();
    let body = images::image(&image);
    let id = image.id.to_string();
    assert_eq!(body["self"], json!(format!("/v2/images/{id}")));
    assert_eq!(body["file"], json!(format!("/v2/images/{id}/file")));
    assert_eq!(body["schema"], json!("/v2/schemas/image"));
    assert_eq!(body["created_at"], json!("2023-11-14T22:13:20Z"));
    assert_eq!(body["hw_disk_bus"], json!("scsi"), "extra properties are top-level");
    assert_eq!(body["status"], json!("active"), "a property never shadows a base attribute");
    assert_eq!(body["os_hidden"], json!(false));
    assert_eq!(body["checksum"], Value::Null);
    // Every key clients rely on is there.
    for key in [
        "id",
        "name",
        "status",
        "visibility",
        "protected",
        "owner",
        "disk_format",
        "container_format",
        "min_disk",
        "min_ram",
        "size",
        "tags",
        "created_at",
        "updated_at",
        "self",
        "file",
        "schema",
        "os_hidden",
        "checksum",
    ] {
        assert!(body.get(key).is_some(), "{key} missing");
    }
    // The image validates against the schema document clients fetch.
    let schema = images::image_schema();
    assert!(berth_http::schema::validate(&schema, &body).is_ok(), "{:?}", berth_http::schema::validate(&schema, &body));
    let listing = images::list(std::slice::from_ref(&image), &[("limit", "1"), ("marker", "old")], Some(&id));
    assert_eq!(listing["first"], json!("/v2/images"));
    assert_eq!(listing["schema"], json!("/v2/schemas/images"));
    assert_eq!(listing["next"], json!(format!("/v2/images?limit=1&marker={id}")));
    assert!(images::list(&[], &[], None).get("next").is_none());
    // Uploaded data shows its hashes (and still validates).
    let hashed = Image {
        size: Some(3),
        hashes: Some(berth_compute_model::ImageHashes {
            checksum: "900150983cd24fb0d6963f7d28e17f72".into(),
            os_hash_algo: "sha512".into(),
            os_hash_value: "ddaf35a1".into(),
        }),
        ..image.clone()
    };
    let body = images::image(&hashed);
    assert_eq!(body["checksum"], json!("900150983cd24fb0d6963f7d28e17f72"));
    assert_eq!(body["os_hash_algo"], json!("sha512"));
    assert_eq!(body["os_hash_value"], json!("ddaf35a1"));
    assert_eq!(body["size"], json!(3));
    assert!(berth_http::schema::validate(&schema, &body).is_ok());
    let schemas = images::images_schema();
    assert_eq!(schemas["properties"]["images"]["items"], schema);
    assert!(berth_http::schema::validate(&schemas, &listing).is_ok());
}
