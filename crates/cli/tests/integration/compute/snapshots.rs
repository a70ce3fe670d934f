//! Images through the compute API: `createImage` and `createBackup`
//! (the image record with Nova's properties, the agent's upload through
//! the image API, the task state in between, backup rotation, Nova's 409
//! for a server being deleted, also when the delete lands between the
//! image and the task state), the image proxy under `/images` (reads,
//! filters, paging, metadata, delete, gone from 2.36), and the boot's
//! image checks.

use serde_json::{json, Value};

use super::moves::{setup, FOUR};
use super::support::{act, eventually, message, refused, wait_gone, wait_status, Cloud, Hosts, Nova};

/// `createImage`/`createBackup` at 2.45: the new image's id.
async fn snapshot(nova: &Nova, id: &str, body: Value) -> String {
    let answer = nova.at("2.45").post(&format!("/servers/{id}/action"), &body).await;
    assert_eq!(answer.status, 202, "{body}: {:?}", answer.body);
    answer.body["image_id"].as_str().expect("image_id").to_owned()
}

/// The image through the proxy (2.35) once it is ACTIVE.
async fn wait_image_active(nova: &Nova, image: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer = nova.at("2.35").get(&format!("/images/{image}")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        if answer.body["image"]["status"] == "ACTIVE" {
            return answer.body["image"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "image {image} never ACTIVE: {:?}", answer.body);
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// What the fake driver uploads for a snapshot of `server` into `image`.
fn fake_disk(server: &str, image: &str) -> Vec<u8> {
    let line = format!("berth fake disk of server {server} for image {image}\n");
    line.bytes().cycle().take(64 * 1024).collect()
}

/// A raw action request at `version`: status and `Location`.
async fn action_location(nova: &Nova, id: &str, version: &str, body: &Value) -> (u16, Option<String>) {
    let resp = crate::support::http_client()
        .post(format!("{}/compute/v2.1/servers/{id}/action", nova.base_url()))
        .header("x-auth-token", &nova.token)
        .header("openstack-api-version", format!("compute {version}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("action");
    let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (resp.status().as_u16(), location)
}

/// The instance actions of a server with their events' results.
async fn action_events(nova: &Nova, id: &str, name: &str) -> Vec<(String, String)> {
    let list = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    let mut out = Vec::new();
    for action in list["instanceActions"].as_array().cloned().unwrap_or_default() {
        if action["action"] != name {
            continue;
        }
        let request_id = action["request_id"].as_str().unwrap_or_default();
        let shown = nova.get(&format!("/servers/{id}/os-instance-actions/{request_id}")).await.body;
        for e in shown["instanceAction"]["events"].as_array().cloned().unwrap_or_default() {
            out.push((e["event"].as_str().unwrap_or("").to_owned(), e["result"].as_str().unwrap_or("").to_owned()));
        }
    }
    out
}

#[tokio::test]
async fn create_image_uploads_the_snapshot_through_the_agent_with_novas_properties() {
    let mut cloud = Cloud::start("snapshot", &[]).await;
    cloud.add_agent(Hosts::new("s", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    setup(&admin).await;
    let base = admin
        .image(
            "base",
            json!({"min_ram": 256, "hw_disk_bus": "virtio", "img_signature": "sig", "cache_in_nova": "true"}),
        )
        .await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &base).await;
    wait_status(&owner, &id, "ACTIVE").await;

    // Before 2.45: an empty 202 and the image's URL in `Location`.
    let body = json!({"createImage": {"name": "snap-1", "metadata": {"purpose": "test"}}});
    let (status, location) = action_location(&owner, &id, "2.44", &body).await;
    assert_eq!(status, 202);
    let location = location.expect("a Location header");
    assert!(location.contains("/image/images/"), "{location}");
    let image = location.rsplit('/').next().expect("image id").to_owned();

    // The agent uploads the disk: ACTIVE, with Nova's properties.
    let shown = wait_image_active(&owner, &image).await;
    assert_eq!((shown["name"].as_str(), shown["progress"].as_i64()), (Some("snap-1"), Some(100)));
    assert_eq!((shown["minRam"].as_i64(), shown["OS-EXT-IMG-SIZE:size"].as_i64()), (Some(256), Some(65536)));
    let metadata = &shown["metadata"];
    for (key, value) in [
        ("image_type", "snapshot"),
        ("instance_uuid", id.as_str()),
        ("base_image_ref", base.as_str()),
        ("user_id", "alice"),
        ("purpose", "test"),
        ("hw_disk_bus", "virtio"),
    ] {
        assert_eq!(metadata[key], value, "{key}: {shown}");
    }
    assert!(metadata.get("img_signature").is_none() && metadata.get("cache_in_nova").is_none(), "{shown}");
    assert_eq!(shown["server"]["id"], id.as_str());

    // The image API holds the bytes, with Glance's checksums.
    let glance = owner.image_get(&format!("/images/{image}")).await.body;
    assert_eq!((glance["status"].as_str(), glance["visibility"].as_str()), (Some("active"), Some("private")));
    assert_eq!(glance["size"], 65536);
    assert!(glance["checksum"].is_string() && glance["os_hash_value"].is_string(), "{glance}");
    let data = crate::support::http_client()
        .get(format!("{}/image/v2/images/{image}/file", owner.base_url()))
        .header("x-auth-token", &owner.token)
        .send()
        .await
        .expect("download");
    assert_eq!(data.bytes().await.expect("bytes").to_vec(), fake_disk(&id, &image));

    // The server is back without a task; the action's event finished.
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(
        action_events(&admin, &id, "createImage").await,
        vec![("compute_snapshot_instance".to_owned(), "Success".to_owned())]
    );

    // From 2.45 the body names the image; a server boots from it. The
    // request's metadata wins over Nova's own properties (Tempest sets
    // `image_type`).
    let second =
        snapshot(&owner, &id, json!({"createImage": {"name": "snap-2", "metadata": {"image_type": "test"}}})).await;
    assert_eq!(wait_image_active(&owner, &second).await["metadata"]["image_type"], "test");
    // No import tasks (Glance's list for an image never imported).
    assert_eq!(owner.image_get(&format!("/images/{second}/tasks")).await.body, json!({"tasks": []}));
    wait_status(&owner, &id, "ACTIVE").await;
    let child = owner.boot_id("from-snap", &small, &second).await;
    wait_status(&owner, &child, "ACTIVE").await;

    // Paused and stopped servers: snapshots yes, backups only stopped.
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    wait_status(&owner, &id, "PAUSED").await;
    let paused = snapshot(&owner, &id, json!({"createImage": {"name": "snap-paused"}})).await;
    wait_image_active(&owner, &paused).await;
    wait_status(&owner, &id, "PAUSED").await;
    let backup = json!({"createBackup": {"name": "b", "backup_type": "daily", "rotation": 1}});
    assert_eq!(act(&owner, &id, backup).await, refused("createBackup", &id, "vm_state", "paused"));
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;

    // Bad bodies: 400, nothing recorded.
    let images_before = owner.at("2.35").get("/images").await.body["images"].as_array().map(Vec::len);
    for bad in [
        json!({"createImage": {}}),
        json!({"createImage": {"name": "x", "extra": 1}}),
        json!({"createImage": {"name": " padded "}}),
        json!({"createBackup": {"name": "b", "backup_type": "daily", "rotation": -1}}),
        json!({"createBackup": {"name": "b", "rotation": 1}}),
        json!({"createBackup": {"name": "b", "backup_type": "daily", "rotation": "x"}}),
    ] {
        assert_eq!(act(&owner, &id, bad.clone()).await.0, 400, "{bad}");
    }
    assert_eq!(owner.at("2.35").get("/images").await.body["images"].as_array().map(Vec::len), images_before);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn create_backup_rotates_the_oldest_backups_of_its_type() {
    let mut cloud = Cloud::start("backup", &[]).await;
    cloud.add_agent(Hosts::new("b", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let backup = |name: &str, kind: &str| json!({"createBackup": {"name": name, "backup_type": kind, "rotation": 2, "metadata": {"k": "v"}}});
    let mut daily = Vec::new();
    for name in ["daily-1", "daily-2", "daily-3"] {
        // Image times are whole seconds: each backup in a second of its
        // own, so "oldest" is well defined.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let image = snapshot(&owner, &id, backup(name, "daily")).await;
        let shown = wait_image_active(&owner, &image).await;
        assert_eq!(
            (shown["metadata"]["image_type"].as_str(), shown["metadata"]["backup_type"].as_str()),
            (Some("backup"), Some("daily")),
            "{shown}"
        );
        wait_status(&owner, &id, "ACTIVE").await;
        daily.push(image);
    }
    // Another type is rotated on its own.
    let weekly = snapshot(&owner, &id, backup("weekly-1", "weekly")).await;
    wait_image_active(&owner, &weekly).await;
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(owner.at("2.35").get(&format!("/images/{}", daily[0])).await.status, 404, "rotated out");
    let listed = owner.at("2.35").get(&format!("/images/detail?server={id}&type=backup")).await.body;
    let mut names: Vec<&str> =
        listed["images"].as_array().expect("images").iter().filter_map(|i| i["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["daily-2", "daily-3", "weekly-1"], "{listed}");
    assert_eq!(
        action_events(&admin, &id, "createBackup").await.first(),
        Some(&("compute_backup_instance".to_owned(), "Success".to_owned()))
    );
    // Before 2.45: a backup's Location is the compute API's image proxy;
    // with rotation 0 there is none.
    let (status, location) = action_location(&owner, &id, "2.44", &backup("daily-4", "daily")).await;
    assert_eq!(status, 202);
    assert!(location.as_deref().is_some_and(|l| l.contains("/compute/v2.1/images/")), "{location:?}");
    wait_status(&owner, &id, "ACTIVE").await;
    let zero = json!({"createBackup": {"name": "z", "backup_type": "monthly", "rotation": 0}});
    let (status, location) = action_location(&owner, &id, "2.44", &zero).await;
    assert_eq!((status, location), (202, None));
    wait_status(&owner, &id, "ACTIVE").await;
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_image_of_a_server_in_a_task_or_being_deleted_is_refused() {
    let mut cloud = Cloud::start("snapshot-race", &[]).await;
    // The fake driver takes its build time (2 s) over a snapshot.
    let mut args = FOUR.to_vec();
    args.extend(["--build-time-ms", "2000"]);
    cloud.add_agent(Hosts::new("r", 1, &args)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;

    // While the host takes the snapshot the server is ACTIVE in
    // `image_snapshot`, the image SAVING; another snapshot or a backup is
    // refused on the task state.
    let pending = snapshot(&owner, &id, json!({"createImage": {"name": "pending"}})).await;
    let server = owner.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(
        (server["status"].as_str(), server["OS-EXT-STS:task_state"].as_str()),
        (Some("ACTIVE"), Some("image_snapshot"))
    );
    let shown = owner.at("2.35").get(&format!("/images/{pending}")).await.body["image"].clone();
    assert_eq!((shown["status"].as_str(), shown["progress"].as_i64()), (Some("SAVING"), Some(25)), "{shown}");
    assert_eq!(
        act(&owner, &id, json!({"createImage": {"name": "again"}})).await,
        refused("createImage", &id, "task_state", "image_snapshot")
    );
    let backup = json!({"createBackup": {"name": "b", "backup_type": "daily", "rotation": 1}});
    assert_eq!(act(&owner, &id, backup).await, refused("createBackup", &id, "task_state", "image_snapshot"));
    wait_image_active(&owner, &pending).await;
    wait_status(&owner, &id, "ACTIVE").await;

    // The race: the delete lands between the image record and the task
    // state. The snapshot loses with Nova's 409 and its image is gone.
    let victim = owner.boot_id("vm2", &small, &image).await;
    wait_status(&owner, &victim, "ACTIVE").await;
    cloud.test_hook("hold", json!({"point": "before-snapshot-task"})).await;
    let racer = {
        let (owner, victim) = (owner.clone(), victim.clone());
        tokio::spawn(async move { act(&owner, &victim, json!({"createImage": {"name": "racing"}})).await })
    };
    cloud.wait_held("before-snapshot-task", 1).await;
    assert_eq!(owner.delete(&format!("/servers/{victim}")).await.status, 204);
    cloud.test_hook("release", json!({"point": "before-snapshot-task"})).await;
    let (status, text) = racer.await.expect("createImage");
    assert_eq!(status, 409, "{text}");
    let deleting = refused("createImage", &victim, "task_state", "deleting").1;
    let deleted = refused("createImage", &victim, "vm_state", "deleted").1;
    assert!(text == deleting || text == deleted, "{text}");
    wait_gone(&owner, &victim).await;
    let left = admin.at("2.35").get(&format!("/images?server={victim}")).await.body;
    assert_eq!(left["images"], json!([]), "{left}");

    // The other server keeps its snapshot.
    let kept = admin.at("2.35").get(&format!("/images?server={id}")).await.body;
    let names: Vec<&str> =
        kept["images"].as_array().expect("images").iter().filter_map(|i| i["name"].as_str()).collect();
    assert_eq!(names, ["pending"], "{kept}");
    cloud.check_invariants().await;
}

/// A server deleted while its host takes the snapshot: whatever the host
/// reports afterwards (late, for a server already forgotten), the
/// unfinished image does not stay behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_whose_server_is_deleted_meanwhile_leaves_no_image() {
    let mut cloud = Cloud::start("snapshot-late", &[]).await;
    let mut args = FOUR.to_vec();
    args.extend(["--build-time-ms", "1500"]);
    cloud.add_agent(Hosts::new("l", 1, &args)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let pending = snapshot(&owner, &id, json!({"createImage": {"name": "late"}})).await;
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    wait_gone(&owner, &id).await;
    // The fake host finishes its snapshot after 1.5 s and reports then.
    eventually("the unfinished snapshot image is deleted", || {
        let admin = admin.clone();
        let pending = pending.clone();
        async move { admin.at("2.35").get(&format!("/images/{pending}")).await.status == 404 }
    })
    .await;
    let left = admin.at("2.35").get(&format!("/images?server={id}")).await.body;
    assert_eq!(left["images"], json!([]), "{left}");
    cloud.check_invariants().await;
}

#[tokio::test]
async fn the_image_proxy_answers_as_novas_until_2_36() {
    let cloud = Cloud::start("image-proxy", &[]).await;
    let admin = cloud.nova("admin").at("2.35");
    let alice = cloud.nova("alice:proj").at("2.35");
    let bob = cloud.nova("bob:other").at("2.35");
    let public = admin.image("pub", json!({"min_ram": 512, "min_disk": 2, "os_distro": "debian"})).await;
    let mine = alice.image("mine", json!({"visibility": "private", "color": "blue"})).await;
    let theirs = bob.image("theirs", json!({"visibility": "private"})).await;

    let listed = alice.get("/images").await;
    assert_eq!(listed.status, 200);
    let ids: Vec<&str> =
        listed.body["images"].as_array().expect("images").iter().filter_map(|i| i["id"].as_str()).collect();
    assert!(ids.contains(&public.as_str()) && ids.contains(&mine.as_str()) && !ids.contains(&theirs.as_str()));
    let item = &listed.body["images"][0];
    assert_eq!(item.as_object().map(|o| o.len()), Some(3), "id, name, links: {item}");
    assert_eq!(item["links"][2]["rel"], "alternate");

    let shown = alice.get(&format!("/images/{public}")).await.body["image"].clone();
    assert_eq!((shown["minRam"].as_i64(), shown["minDisk"].as_i64()), (Some(512), Some(2)));
    assert_eq!((shown["status"].as_str(), shown["progress"].as_i64()), (Some("ACTIVE"), Some(100)));
    assert_eq!(shown["metadata"], json!({"os_distro": "debian"}));
    assert!(shown.get("server").is_none());
    let hidden = alice.get(&format!("/images/{theirs}")).await;
    assert_eq!((hidden.status, message(&hidden.body)), (404, "Image not found.".to_owned()));
    assert_eq!(alice.get("/images/not-a-uuid").await.status, 404);

    // Filters and paging.
    let only = |answer: &Value| -> Vec<String> {
        answer["images"]
            .as_array()
            .expect("images")
            .iter()
            .filter_map(|i| i["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(only(&alice.get("/images/detail?minRam=256").await.body), vec![public.clone()]);
    assert_eq!(only(&alice.get("/images?name=mine").await.body), vec![mine.clone()]);
    assert_eq!(only(&alice.get("/images?status=ACTIVE&minDisk=1").await.body), vec![public.clone()]);
    assert_eq!(only(&alice.get("/images?status=SAVING").await.body), Vec::<String>::new());
    assert_eq!(only(&alice.get("/images?property-color=blue").await.body), vec![mine.clone()]);
    assert_eq!(
        alice.get("/images?changes-since=2000-01-01T00:00:00Z").await.body["images"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(alice.get("/images?changes-since=yesterday").await.status, 400);
    let first = alice.get("/images?limit=1").await.body;
    assert_eq!(first["images"].as_array().map(Vec::len), Some(1));
    let next = first["images_links"][0]["href"].as_str().expect("next link").to_owned();
    let marker = next.split("marker=").nth(1).expect("marker").to_owned();
    let rest = alice.get(&format!("/images?limit=1&marker={marker}")).await.body;
    assert_eq!(rest["images"].as_array().map(Vec::len), Some(1));
    assert_ne!(rest["images"][0]["id"], first["images"][0]["id"]);
    assert_eq!(alice.get("/images?marker=00000000-0000-4000-8000-000000000000").await.status, 400);

    // Metadata: the image's extra properties.
    let path = format!("/images/{mine}/metadata");
    assert_eq!(alice.get(&path).await.body, json!({"metadata": {"color": "blue"}}));
    let merged = alice.post(&path, &json!({"metadata": {"size": "L"}})).await;
    assert_eq!((merged.status, merged.body.clone()), (200, json!({"metadata": {"color": "blue", "size": "L"}})));
    let one = alice.put(&format!("{path}/color"), &json!({"meta": {"color": "red"}})).await;
    assert_eq!((one.status, one.body.clone()), (200, json!({"meta": {"color": "red"}})));
    assert_eq!(alice.get(&format!("{path}/color")).await.body, json!({"meta": {"color": "red"}}));
    let mismatch = alice.put(&format!("{path}/color"), &json!({"meta": {"other": "x"}})).await;
    assert_eq!((mismatch.status, message(&mismatch.body)), (400, "Request body and URI mismatch".to_owned()));
    assert_eq!(alice.put(&format!("{path}/color"), &json!({"meta": {"a": "1", "b": "2"}})).await.status, 400);
    let all = alice.put(&path, &json!({"metadata": {"only": "this"}})).await;
    assert_eq!((all.status, all.body.clone()), (200, json!({"metadata": {"only": "this"}})));
    assert_eq!(alice.delete(&format!("{path}/only")).await.status, 204);
    assert_eq!(alice.delete(&format!("{path}/only")).await.status, 404);
    assert_eq!(alice.get(&format!("{path}/only")).await.status, 404);
    assert_eq!(alice.get(&path).await.body, json!({"metadata": {}}));
    let too_many: serde_json::Map<String, Value> = (0..129).map(|i| (format!("k{i}"), json!("v"))).collect();
    let over = alice.put(&path, &json!({"metadata": too_many})).await;
    assert_eq!((over.status, message(&over.body)), (403, "Image metadata limit exceeded".to_owned()));
    // Someone else's image: 403 to change it, even when it is public.
    let public_meta = alice.post(&format!("/images/{public}/metadata"), &json!({"metadata": {"x": "y"}})).await;
    assert_eq!(public_meta.status, 403);
    assert_eq!(
        alice.get(&format!("/images/{public}/metadata")).await.body,
        json!({"metadata": {"os_distro": "debian"}})
    );

    // Delete: the owner or an admin.
    let refused = alice.delete(&format!("/images/{public}")).await;
    assert_eq!((refused.status, message(&refused.body)), (403, "You are not allowed to delete the image.".to_owned()));
    assert_eq!(alice.delete(&format!("/images/{mine}")).await.status, 204);
    assert_eq!(alice.get(&format!("/images/{mine}")).await.status, 404);
    assert_eq!(alice.delete(&format!("/images/{mine}")).await.status, 404);
    assert_eq!(admin.delete(&format!("/images/{theirs}")).await.status, 204);

    // Gone from 2.36 on (Nova removed the proxy).
    let later = cloud.nova("alice:proj").at("2.36");
    for path in [
        "/images".to_owned(),
        "/images/detail".to_owned(),
        format!("/images/{public}"),
        format!("/images/{public}/metadata"),
    ] {
        assert_eq!(later.get(&path).await.status, 404, "{path}");
    }
    assert_eq!(later.delete(&format!("/images/{public}")).await.status, 404);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn boot_checks_the_image_against_the_flavor_as_nova() {
    let mut cloud = Cloud::start("boot-image-checks", &[]).await;
    cloud.add_agent(Hosts::new("c", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let big_ram = admin.image("big-ram", json!({"min_ram": 1024})).await;
    let big_disk = admin.image("big-disk", json!({"min_disk": 2})).await;
    let bad_drive = admin.image("bad-drive", json!({"img_config_drive": "always"})).await;
    let cases = [
        (big_ram, "Flavor's memory is too small for requested image.".to_owned()),
        (
            big_disk,
            format!(
                "Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is {} \
                 bytes, minimum size is {} bytes.",
                1u64 << 30,
                2u64 << 30
            ),
        ),
        (bad_drive, "Image's config drive option 'always' is invalid".to_owned()),
    ];
    for (image, text) in cases {
        let answer = admin.boot("vm", &small, &image, json!({})).await;
        assert_eq!((answer.status, message(&answer.body)), (400, text));
    }
    assert_eq!(admin.all_servers().await, Vec::<Value>::new(), "nothing was booted");
    cloud.check_invariants().await;
}

/// A shelve's `<name>-shelved` snapshot goes through the same upload: the
/// image is recorded `queued` before the host's task, the host uploads
/// the disk, and the offloaded server's snapshot holds it; unshelve
/// deletes it with its data; a refused shelve leaves no image.
#[tokio::test]
async fn shelve_uploads_its_snapshot_and_unshelve_deletes_it() {
    let mut cloud = Cloud::start("shelve-snapshot", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = admin.boot_id("vm", &small, &image).await;
    wait_status(&admin, &id, "ACTIVE").await;
    assert_eq!(act(&admin, &id, json!({"shelve": null})).await.0, 202);
    wait_status(&admin, &id, "SHELVED_OFFLOADED").await;
    let listed = admin.at("2.35").get(&format!("/images/detail?server={id}")).await.body;
    let shelved = listed["images"][0].clone();
    assert_eq!(
        (shelved["name"].as_str(), shelved["status"].as_str()),
        (Some("vm-shelved"), Some("ACTIVE")),
        "{listed}"
    );
    assert_eq!(shelved["OS-EXT-IMG-SIZE:size"], 65536);
    let shelved_id = shelved["id"].as_str().expect("id").to_owned();
    let data = crate::support::http_client()
        .get(format!("{}/image/v2/images/{shelved_id}/file", admin.base_url()))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("download");
    assert_eq!(data.bytes().await.expect("bytes").to_vec(), fake_disk(&id, &shelved_id));
    // A second shelve is refused and the snapshot stays.
    assert_eq!(act(&admin, &id, json!({"shelve": null})).await.0, 409);
    assert_eq!(admin.at("2.35").get(&format!("/images/{shelved_id}")).await.status, 200);
    assert_eq!(act(&admin, &id, json!({"unshelve": null})).await.0, 202);
    wait_status(&admin, &id, "ACTIVE").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while admin.at("2.35").get(&format!("/images/{shelved_id}")).await.status != 404 {
        assert!(std::time::Instant::now() < deadline, "the shelve snapshot outlived the unshelve");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    cloud.check_invariants().await;
}
