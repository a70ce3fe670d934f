//! The Glance v2 API beyond image data (issue 38): the version document
//! and discovery, `PATCH`, tags, members across three projects,
//! deactivation (data and boot refused), listing filters and sorting,
//! and the `glance-direct` import. Runs on SQLite, and on PostgreSQL when
//! `TEST_DATABASE_URL` is set.

use md5::{Digest, Md5};
use serde_json::{json, Value};

use crate::compute::support::Cloud;
use crate::support::{fresh_dir, test_database, TestServer};

const PATCH: &str = "application/openstack-images-v2.1-json-patch";
const PATCH_OLD: &str = "application/openstack-images-v2.0-json-patch";

/// A Glance client as one caller (`admin`, or `user:project`).
struct Glance {
    http: reqwest::Client,
    base: String,
    token: String,
}

#[derive(Debug)]
struct Got {
    status: u16,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
    fn message(&self) -> String {
        self.json()["message"].as_str().unwrap_or_default().to_owned()
    }
}

impl Glance {
    fn new(server: &TestServer, token: &str) -> Self {
        Glance { http: crate::support::http_client(), base: server.base.clone(), token: token.to_owned() }
    }

    async fn send(&self, method: &str, path: &str, content_type: Option<&str>, body: Option<Vec<u8>>) -> Got {
        let url = if path.starts_with('/') { format!("{}/image{path}", self.base) } else { path.to_owned() };
        // As openstackclient asks: JSON (errors included).
        let mut req = self
            .http
            .request(method.parse().expect("method"), url)
            .header("x-auth-token", &self.token)
            .header("accept", "application/json");
        if let Some(content_type) = content_type {
            req = req.header("content-type", content_type);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = req.send().await.expect("image request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body").to_vec();
        Got { status, headers, bytes }
    }

    async fn get(&self, path: &str) -> Got {
        self.send("GET", &format!("/v2{path}"), None, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Got {
        self.send("POST", &format!("/v2{path}"), Some("application/json"), Some(body.to_string().into_bytes())).await
    }

    async fn put(&self, path: &str, body: Value) -> Got {
        self.send("PUT", &format!("/v2{path}"), Some("application/json"), Some(body.to_string().into_bytes())).await
    }

    async fn delete(&self, path: &str) -> Got {
        self.send("DELETE", &format!("/v2{path}"), None, None).await
    }

    async fn patch(&self, id: &str, ops: Value) -> Got {
        self.send("PATCH", &format!("/v2/images/{id}"), Some(PATCH), Some(ops.to_string().into_bytes())).await
    }

    async fn create(&self, body: Value) -> String {
        let got = self.post("/images", body).await;
        assert_eq!(got.status, 201, "create: {:?}", got.json());
        got.json()["id"].as_str().expect("id").to_owned()
    }

    async fn upload(&self, id: &str, data: &[u8]) {
        let got = self
            .send("PUT", &format!("/v2/images/{id}/file"), Some("application/octet-stream"), Some(data.to_vec()))
            .await;
        assert_eq!(got.status, 204, "upload: {:?}", got.json());
    }

    /// The ids of `GET /v2/images{query}`, in order.
    async fn ids(&self, query: &str) -> Vec<String> {
        let got = self.get(&format!("/images{query}")).await;
        assert_eq!(got.status, 200, "list {query}: {:?}", got.json());
        got.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| i["id"].as_str().expect("id").to_owned())
            .collect()
    }
}

#[tokio::test]
async fn the_version_document_and_discovery_are_glances() {
    let server = TestServer::start("image-versions").await;
    let glance = Glance::new(&server, "demo:p1");
    let root = glance.send("GET", "/", None, None).await;
    assert_eq!(root.status, 300, "GET /image/ is Multiple Choices");
    let versions = root.json()["versions"].as_array().cloned().expect("versions");
    assert!(versions.iter().any(|v| v["id"] == "v2.0" && v["status"] == "SUPPORTED"));
    assert!(versions.iter().any(|v| v["status"] == "CURRENT"));
    for v in &versions {
        assert!(v["links"][0]["href"].as_str().expect("href").ends_with("/image/v2/"), "{v}");
    }
    let explicit = glance.send("GET", "/versions", None, None).await;
    assert_eq!(explicit.status, 200, "an explicit /versions is 200, as Glance");
    assert_eq!(explicit.json()["versions"], Value::Array(versions));
    let import = glance.get("/info/import").await;
    assert_eq!(import.status, 200);
    assert_eq!(import.json()["import-methods"]["value"], json!(["glance-direct"]));
    let stores = glance.get("/info/stores").await;
    assert_eq!(stores.status, 404);
    assert_eq!(stores.message(), "Multi backend is not supported at this site.");
    // The API itself still answers under /image/v2.
    assert_eq!(glance.get("/images").await.status, 200);

    // Errors in the type the client accepts, as webob picks it: HTML for
    // `*/*` (glanceclient, which reads an HTML error's text: Nova's 400
    // for an unknown image), JSON when asked for.
    let http = crate::support::http_client();
    let missing = format!("{}/image/v2/images/{}", server.base, uuid::Uuid::new_v4());
    for (accept, content_type, needle) in [
        ("*/*", "text/html; charset=UTF-8", "<h1>404 Not Found</h1>"),
        ("application/json", "application/json", "\"code\":404"),
    ] {
        let resp =
            http.get(&missing).header("x-auth-token", "demo:p1").header("accept", accept).send().await.expect("get");
        assert_eq!(resp.status().as_u16(), 404);
        let got = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let body = resp.text().await.expect("body");
        assert_eq!(got, content_type, "{accept}: {body}");
        assert!(body.contains(needle) && body.contains("No image found with ID"), "{accept}: {body}");
    }
}

#[tokio::test]
async fn images_are_patched_as_glance_does() {
    let server = TestServer::start("image-patch").await;
    let owner = Glance::new(&server, "demo:p1");
    let other = Glance::new(&server, "demo:p2");
    let admin = Glance::new(&server, "admin");
    let id = owner.create(json!({"name": "a", "disk_format": "raw", "container_format": "bare"})).await;

    let wrong = owner.send("PATCH", &format!("/v2/images/{id}"), Some("application/json"), Some(b"[]".to_vec())).await;
    assert_eq!(wrong.status, 415);
    assert!(wrong.headers.get("accept-patch").is_some(), "415 names the patch types");

    let got = owner
        .patch(
            &id,
            json!([
                {"op": "replace", "path": "/name", "value": "b"},
                {"op": "add", "path": "/hw_disk_bus", "value": "scsi"},
                {"op": "replace", "path": "/min_ram", "value": 512},
                {"op": "add", "path": "/os_hidden", "value": true},
            ]),
        )
        .await;
    assert_eq!(got.status, 200, "{:?}", got.json());
    let image = got.json();
    assert_eq!((image["name"].as_str(), image["hw_disk_bus"].as_str()), (Some("b"), Some("scsi")));
    assert_eq!((image["min_ram"].as_i64(), image["os_hidden"].as_bool()), (Some(512), Some(true)));
    assert_eq!(owner.get(&format!("/images/{id}")).await.json()["name"], "b", "the change is stored");

    // Draft-4 form (what Tempest sends).
    let old = owner
        .send(
            "PATCH",
            &format!("/v2/images/{id}"),
            Some(PATCH_OLD),
            Some(json!([{"remove": "/hw_disk_bus"}]).to_string().into_bytes()),
        )
        .await;
    assert_eq!(old.status, 200, "{:?}", old.json());
    assert!(old.json().get("hw_disk_bus").is_none());
    let present = owner
        .send(
            "PATCH",
            &format!("/v2/images/{id}"),
            Some(PATCH_OLD),
            Some(json!([{"add": "/name", "value": "c"}]).to_string().into_bytes()),
        )
        .await;
    assert_eq!((present.status, present.message()), (409, "Property name already present.".into()));
    let replaced = owner.patch(&id, json!([{"op": "add", "path": "/name", "value": "b"}])).await;
    assert_eq!(replaced.status, 200, "v2.1's add replaces");

    let refusals = [
        (json!([{"op": "replace", "path": "/hw_gone", "value": "x"}]), 409, "Property hw_gone does not exist."),
        (json!([{"op": "remove", "path": "/hw_gone"}]), 409, "Property hw_gone does not exist."),
        (json!([{"op": "remove", "path": "/name"}]), 403, "Property name may not be removed."),
        (json!([{"op": "replace", "path": "/status", "value": "active"}]), 403, "Attribute 'status' is read-only."),
        (json!([{"op": "replace", "path": "/id", "value": "x"}]), 403, "Attribute 'id' is read-only."),
        (json!([{"op": "add", "path": "/os_glance_foo", "value": "x"}]), 403, "Attribute 'os_glance_foo' is reserved."),
        (json!([{"op": "add", "path": "/deleted", "value": "x"}]), 403, "Attribute 'deleted' is reserved."),
        (json!([{"op": "replace", "path": "/owner", "value": "p2"}]), 403, "Owner can't be updated by non admin."),
        (
            json!([{"op": "replace", "path": "/visibility", "value": "public"}]),
            403,
            "You are not authorized to complete publicize_image action.",
        ),
        (json!({"op": "replace"}), 400, "Request body must be a JSON array of operation objects."),
        (
            json!([{"op": "move", "path": "/name"}]),
            400,
            "Invalid operation: `move`. It must be one of the following: add, remove, replace.",
        ),
        (json!([{"op": "add", "path": "/a/b", "value": "x"}]), 400, "Invalid JSON pointer for this resource: '/a/b'"),
        (json!([{"op": "add", "path": "/name"}]), 400, "Operation \"add\" requires a member named \"value\"."),
        (json!([{"op": "replace", "path": "/min_ram", "value": "lots"}]), 400, ""),
        (json!([{"op": "add", "path": "/hw_x", "value": 3}]), 400, ""),
    ];
    let before = owner.get(&format!("/images/{id}")).await.json();
    for (ops, status, message) in refusals {
        let got = owner.patch(&id, ops.clone()).await;
        assert_eq!(got.status, status, "{ops}: {:?}", got.json());
        if !message.is_empty() {
            assert_eq!(got.message(), message, "{ops}");
        }
    }
    assert_eq!(owner.get(&format!("/images/{id}")).await.json(), before, "refused patches change nothing");
    let malformed = owner.send("PATCH", &format!("/v2/images/{id}"), Some(PATCH), Some(b"[{".to_vec())).await;
    assert_eq!(malformed.status, 400);
    // Another project cannot see a private image, let alone change it.
    assert_eq!(other.patch(&id, json!([{"op": "replace", "path": "/name", "value": "x"}])).await.status, 404);

    // Create refuses the reserved namespace too.
    let reserved = owner.post("/images", json!({"name": "r", "os_glance_foo": "bar"})).await;
    assert_eq!((reserved.status, reserved.message()), (403, "Attribute 'os_glance_foo' is reserved.".to_owned()));

    // `protected` blocks deletion until it is cleared.
    let got = owner.patch(&id, json!([{"op": "replace", "path": "/protected", "value": true}])).await;
    assert_eq!(got.status, 200);
    let delete = owner.delete(&format!("/images/{id}")).await;
    assert_eq!((delete.status, delete.message()), (403, format!("Image {id} is protected and cannot be deleted.")));
    // Visibility: an admin publishes, the owner makes it community.
    let got = admin.patch(&id, json!([{"op": "replace", "path": "/visibility", "value": "public"}])).await;
    assert_eq!(got.json()["visibility"], "public");
    assert_eq!(other.get(&format!("/images/{id}")).await.status, 200, "a public image is visible to all");
    let got = owner.patch(&id, json!([{"op": "replace", "path": "/visibility", "value": "community"}])).await;
    assert_eq!(got.json()["visibility"], "community");
    // disk_format changes only while queued; the data makes it active.
    owner.upload(&id, b"data").await;
    let got = owner.patch(&id, json!([{"op": "replace", "path": "/disk_format", "value": "qcow2"}])).await;
    assert_eq!(
        (got.status, got.message()),
        (403, "Attribute disk_format can be only replaced for a queued image.".into())
    );
    assert_eq!(owner.patch(&id, json!([{"op": "replace", "path": "/protected", "value": false}])).await.status, 200);
    assert_eq!(owner.delete(&format!("/images/{id}")).await.status, 204);
}

#[tokio::test]
async fn tags_are_added_removed_and_filtered() {
    let server = TestServer::start("image-tags").await;
    let glance = Glance::new(&server, "demo:p1");
    let a = glance.create(json!({"name": "a", "tags": ["x", "x", "y"]})).await;
    let b = glance.create(json!({"name": "b"})).await;
    assert_eq!(glance.get(&format!("/images/{a}")).await.json()["tags"], json!(["x", "y"]), "tags kept once");
    assert_eq!(glance.send("PUT", &format!("/v2/images/{b}/tags/y"), None, None).await.status, 204);
    assert_eq!(glance.send("PUT", &format!("/v2/images/{b}/tags/y"), None, None).await.status, 204, "idempotent");
    assert_eq!(glance.send("PUT", &format!("/v2/images/{b}/tags/z"), None, None).await.status, 204);
    assert_eq!(glance.get(&format!("/images/{b}")).await.json()["tags"], json!(["y", "z"]));
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    let mut tagged = glance.ids("?tag=y").await;
    tagged.sort();
    assert_eq!(tagged, both);
    assert_eq!(glance.ids("?tag=y&tag=z").await, vec![b.clone()], "every tag must match");
    assert_eq!(glance.delete(&format!("/images/{b}/tags/z")).await.status, 204);
    assert_eq!(glance.delete(&format!("/images/{b}/tags/z")).await.status, 404, "no such tag");
    assert!(glance.ids("?tag=z").await.is_empty());
    let other = Glance::new(&server, "demo:p2");
    assert_eq!(other.send("PUT", &format!("/v2/images/{a}/tags/q"), None, None).await.status, 404);
}

#[tokio::test]
async fn members_share_an_image_across_three_projects() {
    let cloud = Cloud::start("image-members", &[]).await;
    let server = &cloud.server;
    let (owner, member, stranger) =
        (Glance::new(server, "demo:pa"), Glance::new(server, "demo:pb"), Glance::new(server, "demo:pc"));
    let flavor = cloud.nova("admin").flavor("m1", 1, 64, 1).await;
    let id = owner
        .create(json!({"name": "shared", "visibility": "shared", "disk_format": "raw", "container_format": "bare"}))
        .await;
    owner.upload(&id, b"shared bytes").await;
    let members = format!("/images/{id}/members");

    // Before sharing only the owner sees it.
    assert_eq!(member.get(&format!("/images/{id}")).await.status, 404);
    let added = owner.post(&members, json!({"member": "pb"})).await;
    assert_eq!(added.status, 200, "{:?}", added.json());
    assert_eq!(added.json()["status"], "pending");
    assert_eq!(added.json()["schema"], "/v2/schemas/member");
    assert_eq!(owner.post(&members, json!({"member": "pb"})).await.status, 409, "a member once");
    assert_eq!(owner.post(&members, json!({})).await.status, 400);
    assert_eq!(member.post(&members, json!({"member": "pc"})).await.status, 403, "only the owner shares");

    // A pending member sees the image but does not list it by default.
    assert_eq!(member.get(&format!("/images/{id}")).await.status, 200);
    assert!(!member.ids("").await.contains(&id));
    assert!(member.ids("?member_status=pending").await.contains(&id));
    assert!(member.ids("?member_status=all").await.contains(&id));
    assert_eq!(member.ids("?visibility=shared&member_status=pending").await, vec![id.clone()]);
    assert_eq!(member.get("/images?member_status=maybe").await.status, 400);
    // The stranger sees nothing of it, and cannot boot it.
    assert_eq!(stranger.get(&format!("/images/{id}")).await.status, 404);
    assert!(!stranger.ids("?member_status=all").await.contains(&id));
    assert_eq!(stranger.get(&members).await.status, 404);
    let boot = cloud.nova("demo:pc").boot("s", &flavor, &id, json!({})).await;
    assert_eq!(boot.status, 400, "{:?}", boot.body);

    // The owner cannot answer for the member; the member answers.
    let accept = json!({"status": "accepted"});
    assert_eq!(owner.put(&format!("{members}/pb"), accept.clone()).await.status, 403);
    assert_eq!(member.put(&format!("{members}/pb"), json!({"status": "maybe"})).await.status, 400);
    assert_eq!(member.put(&format!("{members}/pb"), json!({})).await.status, 400);
    let accepted = member.put(&format!("{members}/pb"), accept).await;
    assert_eq!((accepted.status, accepted.json()["status"].as_str()), (200, Some("accepted")));
    assert!(member.ids("").await.contains(&id), "an accepted image is listed");
    assert!(!member.ids("?member_status=pending").await.contains(&id));
    let boot = cloud.nova("demo:pb").boot("s", &flavor, &id, json!({})).await;
    assert_eq!(boot.status, 202, "a member boots a shared image: {:?}", boot.body);

    // Listings and shows of members.
    let listed = owner.get(&members).await;
    assert_eq!(listed.json()["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed.json()["schema"], "/v2/schemas/members");
    assert_eq!(member.get(&format!("{members}/pb")).await.json()["member_id"], "pb");
    assert_eq!(owner.get(&format!("{members}/pc")).await.status, 404);

    // Rejected: still visible by id, no longer listed.
    member.put(&format!("{members}/pb"), json!({"status": "rejected"})).await;
    assert!(!member.ids("").await.contains(&id));
    assert!(member.ids("?member_status=rejected").await.contains(&id));
    assert_eq!(member.delete(&format!("{members}/pb")).await.status, 403, "only the owner removes");
    assert_eq!(owner.delete(&format!("{members}/pb")).await.status, 204);
    assert_eq!(member.get(&format!("/images/{id}")).await.status, 404, "gone with the membership");
    assert_eq!(owner.delete(&format!("{members}/pb")).await.status, 404);

    // Only shared images have members.
    let private = owner.create(json!({"name": "p", "visibility": "private"})).await;
    let refused = owner.post(&format!("/images/{private}/members"), json!({"member": "pb"})).await;
    assert_eq!(refused.status, 403);

    // The member schemas.
    let schema = owner.get("/schemas/member").await.json();
    assert_eq!(schema["name"], "member");
    assert_eq!(schema["properties"]["status"]["enum"], json!(["pending", "accepted", "rejected"]));
    assert_eq!(owner.get("/schemas/members").await.json()["properties"]["members"]["items"], schema);
}

#[tokio::test]
async fn a_deactivated_image_is_served_only_to_admins_and_not_booted() {
    let cloud = Cloud::start("image-deactivate", &[]).await;
    let server = &cloud.server;
    let (owner, admin) = (Glance::new(server, "demo:pa"), Glance::new(server, "admin"));
    let stranger = Glance::new(server, "demo:pb");
    let flavor = cloud.nova("admin").flavor("m1", 1, 64, 1).await;
    let id = owner.create(json!({"name": "d", "disk_format": "raw", "container_format": "bare"})).await;
    let deactivate = format!("/v2/images/{id}/actions/deactivate");
    let reactivate = format!("/v2/images/{id}/actions/reactivate");
    let queued = admin.send("POST", &deactivate, None, None).await;
    assert_eq!((queued.status, queued.message()), (403, "Not allowed to deactivate image in status 'queued'".into()));
    owner.upload(&id, b"bytes of d").await;
    let patch = json!([{"op": "replace", "path": "/visibility", "value": "public"}]);
    assert_eq!(admin.patch(&id, patch).await.status, 200);
    let refused = stranger.send("POST", &deactivate, None, None).await;
    assert_eq!(
        (refused.status, refused.message()),
        (403, "You are not authorized to complete deactivate action.".into()),
        "the owner's or an admin's"
    );
    assert_eq!(owner.send("POST", &deactivate, None, None).await.status, 204);
    assert_eq!(admin.send("POST", &deactivate, None, None).await.status, 204, "again: no change");
    assert_eq!(owner.get(&format!("/images/{id}")).await.json()["status"], "deactivated");
    let file = format!("/images/{id}/file");
    let refused = owner.get(&file).await;
    assert_eq!(
        (refused.status, refused.message()),
        (403, "The requested image has been deactivated. Image data download is forbidden.".into())
    );
    let served = admin.get(&file).await;
    assert_eq!((served.status, served.bytes.as_slice()), (200, b"bytes of d".as_slice()));
    assert_eq!(stranger.get(&file).await.status, 403, "a public deactivated image: no data for non-admins");
    for project in ["demo:pa", "demo:pb"] {
        let boot = cloud.nova(project).boot("s", &flavor, &id, json!({})).await;
        assert_eq!(boot.status, 400);
        assert_eq!(boot.body["badRequest"]["message"], format!("Image {id} is not active."));
    }
    assert_eq!(stranger.send("POST", &reactivate, None, None).await.status, 403);
    assert_eq!(owner.send("POST", &reactivate, None, None).await.status, 204);
    assert_eq!(owner.get(&file).await.bytes, b"bytes of d");
    let boot = cloud.nova("demo:pa").boot("s", &flavor, &id, json!({})).await;
    assert_eq!(boot.status, 202, "{:?}", boot.body);
}

#[tokio::test]
async fn images_are_listed_filtered_and_sorted_as_glance_does() {
    let server = TestServer::start("image-listing").await;
    let glance = Glance::new(&server, "demo:p1");
    let mut ids = Vec::new();
    for (name, size, fmt) in [("c", 30, "raw"), ("a", 10, "qcow2"), ("b", 20, "raw")] {
        let id = glance
            .create(json!({"name": name, "disk_format": fmt, "container_format": "bare", "os_distro": name}))
            .await;
        glance.upload(&id, &vec![7u8; size]).await;
        ids.push(id);
    }
    let queued = glance.create(json!({"name": "q"})).await;
    let hidden = glance.create(json!({"name": "h", "os_hidden": true})).await;
    let (c, a, b) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
    assert_eq!(glance.ids("?sort_key=name&sort_dir=asc&status=active").await, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(glance.ids("?sort=name:desc&status=active").await, vec![c.clone(), b.clone(), a.clone()]);
    assert_eq!(glance.ids("?sort=size:asc,name&size_min=15").await, vec![b.clone(), c.clone()]);
    assert_eq!(glance.ids("?size_max=15").await, vec![a.clone()]);
    assert_eq!(glance.ids("?status=queued").await, vec![queued.clone()], "hidden images are not listed");
    assert_eq!(glance.ids("?os_hidden=true").await, vec![hidden.clone()]);
    assert_eq!(glance.ids("?os_distro=b").await, vec![b.clone()], "property filter");
    assert_eq!(glance.ids("?disk_format=qcow2").await, vec![a.clone()]);
    let mut two = glance.ids("?name=in:a,c").await;
    two.sort();
    let mut want = vec![a.clone(), c.clone()];
    want.sort();
    assert_eq!(two, want);
    // Pages: `limit`, `marker`, and the `next` link Glance builds.
    let page = glance.get("/images?sort_key=name&sort_dir=asc&limit=2").await.json();
    let first: Vec<&str> = page["images"].as_array().expect("images").iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(first, vec![a.as_str(), b.as_str()]);
    let next = page["next"].as_str().expect("next link").to_owned();
    assert!(next.starts_with("/v2/images?") && next.contains(&format!("marker={b}")), "{next}");
    let rest = glance.send("GET", &next, None, None).await.json();
    let rest: Vec<&str> = rest["images"].as_array().expect("images").iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(rest, vec![c.as_str(), queued.as_str()]);
    let refusals = [
        ("?sort_key=owner", "Invalid sort key: owner. It must be one of the following: name, status, container_format, disk_format, size, id, created_at, updated_at."),
        ("?sort_dir=up", "Invalid sort direction: up"),
        ("?sort=name&sort_key=size", "Old and new sorting syntax cannot be combined"),
        ("?sort_key=name&sort_key=size&sort_dir=asc&sort_dir=asc&sort_dir=desc", "Number of sort dirs does not match the number of sort keys"),
        ("?size_min=big", "Unable to filter on a range with a non-numeric value."),
        ("?visibility=everyone", "Invalid visibility value: everyone"),
        ("?os_hidden=maybe", "Invalid value 'maybe' for 'os_hidden' filter. Valid values are 'true' or 'false'."),
        ("?limit=-1", "limit param must be positive"),
        ("?limit=x", "limit param must be an integer"),
        ("?name=like:a", "Unable to filter by unknown operator 'like'."),
        ("?changes-since=2020-01-01", "The \"changes-since\" filter is no longer available on v2."),
    ];
    for (query, message) in refusals {
        let got = glance.get(&format!("/images{query}")).await;
        assert_eq!((got.status, got.message()), (400, message.to_owned()), "{query}");
    }
}

#[tokio::test]
async fn glance_direct_import_stages_then_imports_with_checksums() {
    let server = TestServer::start("image-import").await;
    let glance = Glance::new(&server, "demo:p1");
    let id = glance.create(json!({"name": "i", "disk_format": "raw", "container_format": "bare"})).await;
    let import = |method: &str| json!({"method": {"name": method}});
    let early = glance.post(&format!("/images/{id}/import"), import("glance-direct")).await;
    assert_eq!(
        (early.status, early.message()),
        (409, "Image needs to be staged before 'glance-direct' method can be used".into())
    );
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let stage = format!("/v2/images/{id}/stage");
    let staged = glance.send("PUT", &stage, Some("application/octet-stream"), Some(data.clone())).await;
    assert_eq!(staged.status, 204, "{:?}", staged.json());
    let image = glance.get(&format!("/images/{id}")).await.json();
    assert_eq!((image["status"].as_str(), image["size"].as_i64()), (Some("uploading"), Some(100_000)));
    assert_eq!(image["checksum"], Value::Null, "no checksum before the import");
    let again = glance.send("PUT", &stage, Some("application/octet-stream"), Some(data.clone())).await;
    assert_eq!(again.status, 409, "staged once");
    let web = glance.post(&format!("/images/{id}/import"), import("web-download")).await;
    assert_eq!((web.status, web.message()), (400, "Unknown import method name 'web-download'.".into()));
    assert_eq!(glance.post(&format!("/images/{id}/import"), json!({})).await.status, 400);
    let done = glance.post(&format!("/images/{id}/import"), import("glance-direct")).await;
    assert_eq!(done.status, 202, "{:?}", done.json());
    let image = glance.get(&format!("/images/{id}")).await.json();
    assert_eq!(image["status"], "active");
    let md5: String = Md5::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(image["checksum"].as_str(), Some(md5.as_str()));
    assert_eq!(image["os_hash_algo"], "sha512");
    let file = glance.get(&format!("/images/{id}/file")).await;
    assert_eq!(file.bytes, data);
    let active = glance.post(&format!("/images/{id}/import"), import("glance-direct")).await;
    assert_eq!((active.status, active.message()), (409, "Image with status active cannot be target for import".into()));

    // The legacy task API: admin only, and no URI passes (no outbound network).
    let task = json!({"type": "import", "input": {"import_from": "http://example.com/x.qcow2"}});
    assert_eq!(glance.post("/tasks", task.clone()).await.status, 403);
    let admin = Glance::new(&server, "admin");
    let refused = admin.post("/tasks", task).await;
    assert_eq!(
        (refused.status, refused.message()),
        (400, "URI for legacy import task does not pass filtering: http://example.com/x.qcow2".into())
    );
    assert_eq!(admin.post("/tasks", json!({"type": "import"})).await.message(), "Task 'input' is required");
}

#[tokio::test]
async fn image_quotas_bound_each_project_s_count_and_data() {
    let server =
        TestServer::start_with_args("image-quotas", &["--image-count-quota", "2", "--image-size-quota-mib", "1"]).await;
    let (p1, p2) = (Glance::new(&server, "demo:p1"), Glance::new(&server, "demo:p2"));
    let body = json!({"name": "q", "disk_format": "raw", "container_format": "bare"});
    let first = p1.create(body.clone()).await;
    let second = p1.create(body.clone()).await;
    let third = p1.post("/images", body.clone()).await;
    assert_eq!(third.status, 413, "{:?}", third.json());
    assert_eq!(
        third.message(),
        "Project p1 is over a limit for [Resource image_count_total is over limit of 2 due to current usage 2 and \
         delta 1]"
    );
    p2.create(body.clone()).await;
    let data = vec![1u8; 600 * 1024];
    p1.upload(&first, &data).await;
    let over = p1
        .send("PUT", &format!("/v2/images/{second}/file"), Some("application/octet-stream"), Some(data.clone()))
        .await;
    assert_eq!(over.status, 413, "{:?}", over.json());
    assert!(over.message().contains("image_size_total is over limit of 1"), "{}", over.message());
    let image = p1.get(&format!("/images/{second}")).await.json();
    assert_eq!((image["status"].as_str(), image["size"].as_i64()), (Some("queued"), None), "no data kept");
    assert_eq!(p1.delete(&format!("/images/{first}")).await.status, 204);
    p1.upload(&second, &data).await;
    assert_eq!(p1.ids("").await, vec![second.clone()]);
}

#[tokio::test]
async fn staged_data_survives_a_crash_and_goes_with_its_image() {
    let tag = "image-stage-crash";
    let (dir, database) = (fresh_dir(tag), test_database(tag));
    let args = ["--image-upload-idle-secs", "1"];
    let mut server = TestServer::start_with_args_in(dir.clone(), database.clone(), &args).await;
    let glance = Glance::new(&server, "demo:p1");
    let body = json!({"name": "s", "disk_format": "raw", "container_format": "bare"});
    let (kept, dropped) = (glance.create(body.clone()).await, glance.create(body).await);
    for id in [&kept, &dropped] {
        let got = glance
            .send("PUT", &format!("/v2/images/{id}/stage"), Some("application/octet-stream"), Some(b"staged".to_vec()))
            .await;
        assert_eq!(got.status, 204);
    }
    let store = dir.join("images");
    let files = |id: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&store)
            .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.retain(|n| n.starts_with(id));
        names
    };
    assert_eq!(files(&kept), vec![format!("{kept}.staged")]);
    // Deleting a staged image removes its staged data.
    assert_eq!(glance.delete(&format!("/images/{dropped}")).await.status, 204);
    assert!(files(&dropped).is_empty());
    // An orphan stage (its image deleted by a process that died first).
    let orphan = uuid::Uuid::new_v4().to_string();
    std::fs::write(store.join(format!("{orphan}.staged")), b"x").expect("orphan");
    server.kill9();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let server = TestServer::start_with_args_in(dir.clone(), database, &args).await;
    let glance = Glance::new(&server, "demo:p1");
    assert!(files(&orphan).is_empty(), "the sweep removed the orphan stage");
    assert_eq!(glance.get(&format!("/images/{kept}")).await.json()["status"], "uploading", "a stage survives");
    let done = glance.post(&format!("/images/{kept}/import"), json!({"method": {"name": "glance-direct"}})).await;
    assert_eq!(done.status, 202, "{:?}", done.json());
    assert_eq!(glance.get(&format!("/images/{kept}/file")).await.bytes, b"staged");
    assert_eq!(files(&kept), vec![kept.clone()]);
}

#[tokio::test]
async fn metadef_schemas_are_glances() {
    let server = TestServer::start("image-metadef-schemas").await;
    let glance = Glance::new(&server, "demo:p1");
    for (kind, name) in [
        ("namespace", "namespace"),
        ("namespaces", "namespaces"),
        ("object", "object"),
        ("objects", "objects"),
        ("property", "property"),
        ("properties", "properties"),
        ("tag", "tag"),
        ("tags", "tags"),
        ("resource_type", "resource_type_association"),
        ("resource_types", "resource_type_associations"),
    ] {
        let got = glance.get(&format!("/schemas/metadefs/{kind}")).await;
        assert_eq!(got.status, 200, "{kind}");
        assert_eq!(got.json()["name"], name, "{kind}");
    }
    let namespace = glance.get("/schemas/metadefs/namespace").await.json();
    assert_eq!(namespace["required"], json!(["namespace"]));
    assert_eq!(namespace["properties"]["visibility"]["enum"], json!(["public", "private"]));
    assert_eq!(glance.get("/schemas/metadefs/property").await.json()["required"], json!(["type", "title", "name"]));
    assert_eq!(glance.get("/schemas/metadefs/nothing").await.status, 404);
}

#[tokio::test]
async fn the_metadef_catalog_is_kept_and_guarded_as_glance_does() {
    let tag = "image-metadefs";
    let (dir, database) = (fresh_dir(tag), test_database(tag));
    let mut server = TestServer::start_with_args_in(dir.clone(), database.clone(), &[]).await;
    let (admin, member, stranger) =
        (Glance::new(&server, "admin:pa"), Glance::new(&server, "demo:pa"), Glance::new(&server, "demo:pb"));
    let types = admin.get("/metadefs/resource_types").await.json();
    let first = types["resource_types"][0]["name"].as_str().expect("a seeded resource type").to_owned();

    // Only an admin creates; the owner is the caller's project.
    let body = json!({"namespace": "ns1", "visibility": "private", "display_name": "NS 1", "protected": true,
        "resource_type_associations": [{"name": first}]});
    let refused = member.post("/metadefs/namespaces", body.clone()).await;
    assert_eq!(refused.status, 403, "{:?}", refused.json());
    let created = admin.post("/metadefs/namespaces", body.clone()).await;
    assert_eq!(created.status, 201, "{:?}", created.json());
    assert_eq!(created.json()["owner"], "pa");
    assert_eq!(created.json()["protected"], true);
    assert_eq!(admin.post("/metadefs/namespaces", body).await.status, 409, "names are unique");
    assert_eq!(admin.post("/metadefs/namespaces", json!({"visibility": "public"})).await.status, 400);
    assert_eq!(admin.post("/metadefs/namespaces", json!({"namespace": "x", "visibility": "no"})).await.status, 400);

    // A private namespace is its project's (and admins'); others get 404.
    assert_eq!(member.get("/metadefs/namespaces/ns1").await.status, 200);
    assert_eq!(stranger.get("/metadefs/namespaces/ns1").await.status, 404);
    let names = |v: Value| -> Vec<String> {
        v["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .map(|n| n["namespace"].as_str().expect("ns").to_owned())
            .collect()
    };
    assert_eq!(names(member.get("/metadefs/namespaces").await.json()), vec!["ns1"]);
    assert!(names(stranger.get("/metadefs/namespaces").await.json()).is_empty());
    assert_eq!(member.delete("/metadefs/namespaces/ns1").await.status, 403, "a member is not an admin");
    let protected = admin.delete("/metadefs/namespaces/ns1").await;
    assert_eq!(protected.status, 403);
    assert_eq!(protected.message(), "Metadata definition namespace ns1 is protected and cannot be deleted.");

    // Objects, properties, tags and associations, each a change of the namespace.
    let ns = "/metadefs/namespaces/ns1";
    assert_eq!(admin.post(&format!("{ns}/objects"), json!({"name": "o1"})).await.status, 201);
    assert_eq!(admin.post(&format!("{ns}/objects"), json!({"name": "o1"})).await.status, 409);
    let renamed = admin.put(&format!("{ns}/objects/o1"), json!({"name": "o2", "description": "d"})).await;
    assert_eq!(renamed.json()["name"], "o2");
    assert_eq!(admin.get(&format!("{ns}/objects/o1")).await.status, 404);
    let property = json!({"name": "hv", "title": "HV", "type": "string", "enum": ["kvm", "qemu"]});
    assert_eq!(admin.post(&format!("{ns}/properties"), property).await.status, 201);
    assert_eq!(admin.post(&format!("{ns}/properties"), json!({"name": "p", "type": "string"})).await.status, 400);
    assert_eq!(member.get(&format!("{ns}/properties/hv")).await.json()["enum"], json!(["kvm", "qemu"]));
    let tags = json!({"tags": [{"name": "t1"}, {"name": "t2"}]});
    assert_eq!(admin.post(&format!("{ns}/tags"), tags).await.status, 201);
    assert_eq!(
        admin.send("POST", &format!("/v2{ns}/tags/T1"), None, None).await.status,
        409,
        "tags are case-insensitive"
    );
    assert_eq!(admin.send("POST", &format!("/v2{ns}/tags/t3"), None, None).await.status, 201);
    assert_eq!(admin.put(&format!("{ns}/tags/t3"), json!({"name": "t4"})).await.json()["name"], "t4");
    assert_eq!(admin.delete(&format!("{ns}/tags/t1")).await.status, 204);
    let assoc = admin.post(&format!("{ns}/resource_types"), json!({"name": "OS::Nova::Flavor", "prefix": "hw:"})).await;
    assert_eq!(assoc.status, 201, "{:?}", assoc.json());
    assert_eq!(admin.post(&format!("{ns}/resource_types"), json!({"name": "OS::Nova::Flavor"})).await.status, 409);
    assert_eq!(admin.delete(&format!("{ns}/resource_types/{first}")).await.status, 204);
    assert_eq!(stranger.post(&format!("{ns}/objects"), json!({"name": "x"})).await.status, 404);

    // All of it survives a crash.
    server.kill9();
    server = TestServer::start_with_args_in(dir, database, &[]).await;
    let admin = Glance::new(&server, "admin:pa");
    let shown = admin.get(ns).await.json();
    assert_eq!(shown["objects"][0]["name"], "o2");
    assert_eq!(shown["properties"]["hv"]["title"], "HV");
    let tag_names: Vec<Value> = shown["tags"].as_array().expect("tags").iter().map(|t| t["name"].clone()).collect();
    assert_eq!(tag_names, vec![json!("t2"), json!("t4")]);
    assert_eq!(shown["resource_type_associations"][0]["name"], "OS::Nova::Flavor");

    // Unprotect, make public and rename in one update; then delete.
    let update = json!({"namespace": "ns2", "visibility": "public", "protected": false});
    let updated = admin.put(ns, update).await;
    assert_eq!(updated.status, 200, "{:?}", updated.json());
    assert_eq!(updated.json()["visibility"], "public");
    assert_eq!(Glance::new(&server, "demo:pb").get("/metadefs/namespaces/ns2").await.status, 200);
    assert_eq!(admin.get(ns).await.status, 404, "renamed");
    assert_eq!(admin.delete("/metadefs/namespaces/ns2").await.status, 204);
    assert_eq!(admin.get("/metadefs/namespaces/ns2/tags").await.status, 404);
}

#[tokio::test]
async fn concurrent_metadef_changes_to_one_namespace_are_all_kept() {
    let server = TestServer::start("image-metadef-race").await;
    let admin = Glance::new(&server, "admin:pa");
    let created = admin.post("/metadefs/namespaces", json!({"namespace": "race"})).await;
    assert_eq!(created.status, 201, "{:?}", created.json());
    // Tags and objects added at once: each is a planned write on the
    // namespace as it is then, so none is lost.
    let mut adds = tokio::task::JoinSet::new();
    for i in 0..12 {
        let admin = Glance::new(&server, "admin:pa");
        adds.spawn(async move {
            let tag = admin.send("POST", &format!("/v2/metadefs/namespaces/race/tags/t{i}"), None, None).await;
            let object = admin.post("/metadefs/namespaces/race/objects", json!({"name": format!("o{i}")})).await;
            (tag.status, object.status)
        });
    }
    while let Some(got) = adds.join_next().await {
        assert_eq!(got.expect("task"), (201, 201));
    }
    let shown = admin.get("/metadefs/namespaces/race").await.json();
    assert_eq!(shown["tags"].as_array().map(Vec::len), Some(12));
    assert_eq!(shown["objects"].as_array().map(Vec::len), Some(12));
}
