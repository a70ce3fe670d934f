//! A server's metadata (`/servers/{id}/metadata`), tags (`/tags`, 2.26)
//! and addresses (`/ips`) with Nova 34's statuses and texts: boot metadata
//! served, merge/replace/delete, the 255-character and `metadata_items`
//! limits, the lock, Nova's state checks; tags' format, the limit of 50,
//! `tags` in server bodies from 2.26 and the list filters; no addresses.

use serde_json::{json, Value};

use super::support::{wait_status, Cloud, Hosts, Nova};

const HOSTS: &[&str] = &["--vcpus", "4", "--memory-mb", "8192", "--disk-gb", "100"];

fn message(body: &Value) -> String {
    body.as_object().and_then(|o| o.values().next()).and_then(|e| e["message"].as_str()).unwrap_or_default().to_owned()
}

async fn metadata(nova: &Nova, id: &str) -> Value {
    let answer = nova.get(&format!("/servers/{id}/metadata")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["metadata"].clone()
}

#[tokio::test]
async fn server_metadata_is_stored_served_and_checked_as_nova_does() {
    let mut cloud = Cloud::start("metadata", &[]).await;
    cloud.add_agent(Hosts::new("m", 1, HOSTS)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = admin.image("img", json!({})).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let booted = owner.boot("vm", &small, &image, json!({"metadata": {"a": "1", "role": "web"}})).await;
    assert_eq!(booted.status, 202, "{:?}", booted.body);
    let id = booted.body["server"]["id"].as_str().unwrap().to_owned();
    wait_status(&owner, &id, "ACTIVE").await;
    let base = format!("/servers/{id}/metadata");

    // Boot metadata is served, item by item too.
    assert_eq!(metadata(&owner, &id).await, json!({"a": "1", "role": "web"}));
    let one = owner.get(&format!("{base}/role")).await;
    assert_eq!((one.status, one.body.clone()), (200, json!({"meta": {"role": "web"}})));
    let missing = owner.get(&format!("{base}/nope")).await;
    assert_eq!((missing.status, message(&missing.body).as_str()), (404, "Metadata item was not found"));
    // Another project sees no such server.
    let other = cloud.nova("bob:other");
    let hidden = other.get(&base).await;
    assert_eq!((hidden.status, message(&hidden.body)), (404, format!("Instance {id} could not be found.")));

    // Merge (200, as Nova), one item, replace all, delete.
    let merged = owner.post(&base, &json!({"metadata": {"b": "2", "a": "one"}})).await;
    assert_eq!((merged.status, merged.body.clone()), (200, json!({"metadata": {"a": "one", "b": "2", "role": "web"}})));
    let item = owner.put(&format!("{base}/b"), &json!({"meta": {"b": "3"}})).await;
    assert_eq!((item.status, item.body.clone()), (200, json!({"meta": {"b": "3"}})));
    assert_eq!(metadata(&owner, &id).await, json!({"a": "one", "b": "3", "role": "web"}));
    let replaced = owner.put(&base, &json!({"metadata": {"c": "4"}})).await;
    assert_eq!((replaced.status, replaced.body.clone()), (200, json!({"metadata": {"c": "4"}})));
    assert_eq!(owner.delete(&format!("{base}/c")).await.status, 204);
    let gone = owner.delete(&format!("{base}/c")).await;
    assert_eq!((gone.status, message(&gone.body).as_str()), (404, "Metadata item was not found"));
    assert_eq!(metadata(&owner, &id).await, json!({}));
    let shown = owner.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(shown["metadata"], json!({}));

    // Concurrent merges of different keys all land: each write expects
    // the metadata it read and reads again when another merge won.
    let merges: Vec<_> = (0..6)
        .map(|n| {
            let (owner, base) = (owner.clone(), base.clone());
            tokio::spawn(async move { owner.post(&base, &json!({"metadata": {format!("c{n}"): "x"}})).await.status })
        })
        .collect();
    for merge in merges {
        assert_eq!(merge.await.unwrap(), 200);
    }
    let all = metadata(&owner, &id).await;
    assert_eq!(all.as_object().map(|m| m.len()), Some(6), "no merge lost: {all}");
    assert_eq!(owner.put(&base, &json!({"metadata": {}})).await.status, 200);

    // Bad bodies: 400, nothing changes.
    let mismatch = owner.put(&format!("{base}/x"), &json!({"meta": {"y": "1"}})).await;
    assert_eq!((mismatch.status, message(&mismatch.body).as_str()), (400, "Request body and URI mismatch"));
    for (path, bad) in [
        (format!("{base}/x"), json!({"meta": {"x": "1", "z": "2"}})),
        (format!("{base}/x"), json!({"meta": {}})),
        (base.clone(), json!({"metadata": {"k": "v".repeat(256)}})),
        (base.clone(), json!({"metadata": {"k".repeat(256): "v"}})),
        (base.clone(), json!({"metadata": {"bad/key": "v"}})),
        (base.clone(), json!({"metadata": {"k": 1}})),
        (base.clone(), json!({"metadata": {"k": "v"}, "extra": 1})),
        (base.clone(), json!({"meta": {"k": "v"}})),
        (base.clone(), json!(["k"])),
    ] {
        let answer = owner.post(&path, &bad).await;
        let answer = if path.ends_with("/x") { owner.put(&path, &bad).await } else { answer };
        assert_eq!(answer.status, 400, "{path} {bad}: {:?}", answer.body);
    }
    assert_eq!(metadata(&owner, &id).await, json!({}));

    // The `metadata_items` quota: 403 with Nova's text; the limit itself fits.
    let limit = json!({"quota_set": {"metadata_items": 2}});
    assert_eq!(admin.put("/os-quota-sets/proj", &limit).await.status, 200);
    let over = owner.post(&base, &json!({"metadata": {"a": "1", "b": "2", "c": "3"}})).await;
    assert_eq!((over.status, message(&over.body).as_str()), (403, "Maximum number of metadata items exceeds 2"));
    assert_eq!(owner.post(&base, &json!({"metadata": {"a": "1", "b": "2"}})).await.status, 200);
    let third = owner.put(&format!("{base}/c"), &json!({"meta": {"c": "3"}})).await;
    assert_eq!(third.status, 403, "{:?}", third.body);
    assert_eq!(metadata(&owner, &id).await, json!({"a": "1", "b": "2"}));

    // Locked by an admin: the owner's changes are 409, reads still work.
    let act = format!("/servers/{id}/action");
    assert_eq!(admin.post(&act, &json!({"lock": null})).await.status, 202);
    let locked = owner.post(&base, &json!({"metadata": {"d": "4"}})).await;
    assert_eq!((locked.status, message(&locked.body)), (409, format!("Instance {id} is locked")));
    assert_eq!(owner.delete(&format!("{base}/a")).await.status, 409);
    // A missing key is looked up before the lock (Nova's order).
    assert_eq!(owner.delete(&format!("{base}/zz")).await.status, 404);
    assert_eq!(admin.post(&act, &json!({"unlock": null})).await.status, 202);

    // A stopped server's metadata changes; a shelved one's does not.
    assert_eq!(owner.post(&act, &json!({"os-stop": null})).await.status, 202);
    wait_status(&owner, &id, "SHUTOFF").await;
    assert_eq!(owner.post(&base, &json!({"metadata": {"a": "x"}})).await.status, 200);
    assert_eq!(owner.post(&act, &json!({"shelve": null})).await.status, 202);
    wait_status(&owner, &id, "SHELVED_OFFLOADED").await;
    let refused = owner.post(&base, &json!({"metadata": {"a": "y"}})).await;
    assert_eq!(
        (refused.status, message(&refused.body)),
        (409, format!("Cannot 'update metadata' instance {id} while it is in vm_state shelved_offloaded"))
    );
    let refused = owner.delete(&format!("{base}/a")).await;
    assert_eq!(
        (refused.status, message(&refused.body)),
        (409, format!("Cannot 'delete metadata' instance {id} while it is in vm_state shelved_offloaded"))
    );
    assert_eq!(metadata(&owner, &id).await, json!({"a": "x", "b": "2"}));
    cloud.check_invariants().await;
}

#[tokio::test]
async fn server_tags_follow_nova_from_2_26() {
    let mut cloud = Cloud::start("tags", &[]).await;
    cloud.add_agent(Hosts::new("t", 1, HOSTS)).await;
    let admin = cloud.nova("admin");
    let booter = cloud.nova("alice:proj");
    let owner = booter.at("2.26");
    let image = admin.image("img", json!({})).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = booter.boot_id("vm", &small, &image).await;
    let other = booter.boot_id("vm2", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    wait_status(&owner, &other, "ACTIVE").await;
    let base = format!("/servers/{id}/tags");

    // Not before 2.26.
    assert_eq!(owner.at("2.25").get(&base).await.status, 404);
    assert_eq!(owner.get(&base).await.body, json!({"tags": []}));

    // One tag: 201 with its Location, then 204; shown with 204/404.
    let added = owner.call("PUT", &format!("{base}/blue"), None).await;
    assert_eq!(added.status, 201, "{:?}", added.body);
    assert_eq!(owner.call("PUT", &format!("{base}/blue"), None).await.status, 204);
    assert_eq!(owner.get(&format!("{base}/blue")).await.status, 204);
    let missing = owner.get(&format!("{base}/red")).await;
    assert_eq!((missing.status, message(&missing.body)), (404, format!("Server {id} has no tag 'red'")));
    let bad = owner.call("PUT", &format!("{base}/a,b"), None).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(
        message(&bad.body),
        "Tag 'a,b' is invalid. It must be a non empty string without characters '/' and ','. \
         Validation error message: 'a,b' does not match '^[^,/]*$'"
    );
    assert_eq!(owner.call("PUT", &format!("{base}/{}", "x".repeat(61)), None).await.status, 400);
    assert_eq!(owner.put(&format!("{base}/green"), &json!({"x": 1})).await.status, 400);

    // Replace all (sorted, duplicates once), 50 at most.
    let replaced = owner.put(&base, &json!({"tags": ["red", "green", "red"]})).await;
    assert_eq!((replaced.status, replaced.body.clone()), (200, json!({"tags": ["green", "red"]})));
    for bad in [json!({"tags": ["a/b"]}), json!({"tags": [""]}), json!({"tags": "a"}), json!({"tag": []})] {
        assert_eq!(owner.put(&base, &bad).await.status, 400, "{bad}");
    }
    let too_many: Vec<String> = (0..51).map(|n| format!("t{n:02}")).collect();
    assert_eq!(owner.put(&base, &json!({"tags": too_many})).await.status, 400);
    let fifty: Vec<String> = (0..50).map(|n| format!("t{n:02}")).collect();
    assert_eq!(owner.put(&base, &json!({"tags": fifty})).await.status, 200);
    let over = owner.call("PUT", &format!("{base}/more"), None).await;
    assert_eq!(
        (over.status, message(&over.body).as_str()),
        (400, "The number of tags exceeded the per-server limit 50")
    );
    assert_eq!(owner.put(&base, &json!({"tags": ["red", "green"]})).await.status, 200);

    // Tags in server bodies from 2.26, and the list filters.
    let shown = owner.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(shown["tags"], json!(["green", "red"]));
    let old = owner.at("2.25").get(&format!("/servers/{id}")).await.body["server"].clone();
    assert!(old.get("tags").is_none(), "{old}");
    assert_eq!(owner.call("PUT", &format!("/servers/{other}/tags/red"), None).await.status, 201);
    let names = |answer: Value| -> Vec<String> {
        let mut ids: Vec<String> =
            answer["servers"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect();
        ids.sort();
        ids
    };
    let mut both = vec![id.clone(), other.clone()];
    both.sort();
    assert_eq!(names(owner.get("/servers?tags=red").await.body), both);
    assert_eq!(names(owner.get("/servers?tags=red,green").await.body), vec![id.clone()]);
    assert_eq!(names(owner.get("/servers?tags-any=green,blue").await.body), vec![id.clone()]);
    assert_eq!(names(owner.get("/servers?not-tags=green").await.body), vec![other.clone()]);
    assert_eq!(names(owner.get("/servers?not-tags-any=red").await.body), Vec::<String>::new());

    // Delete one, then all.
    assert_eq!(owner.delete(&format!("{base}/red")).await.status, 204);
    let gone = owner.delete(&format!("{base}/red")).await;
    assert_eq!((gone.status, message(&gone.body)), (404, format!("Instance {id} has no tag 'red'")));
    assert_eq!(owner.get(&base).await.body, json!({"tags": ["green"]}));
    assert_eq!(owner.delete(&base).await.status, 204);
    assert_eq!(owner.get(&base).await.body, json!({"tags": []}));

    // Shelved: Nova's 409 for every change (not for reads).
    let act = format!("/servers/{id}/action");
    assert_eq!(owner.post(&act, &json!({"shelve": null})).await.status, 202);
    wait_status(&owner, &id, "SHELVED_OFFLOADED").await;
    let refused = owner.call("PUT", &format!("{base}/x"), None).await;
    assert_eq!(
        (refused.status, message(&refused.body)),
        (409, format!("Cannot 'update tag' instance {id} while it is in vm_state shelved_offloaded"))
    );
    let refused = owner.put(&base, &json!({"tags": ["x"]})).await;
    assert_eq!(
        (refused.status, message(&refused.body)),
        (409, format!("Cannot 'update tags' instance {id} while it is in vm_state shelved_offloaded"))
    );
    assert_eq!(owner.delete(&base).await.status, 409);
    assert_eq!(owner.get(&base).await.body, json!({"tags": []}));

    // Boot tags (2.52) are the server's tags.
    let booted = booter.at("2.52").boot("vm3", &small, &image, json!({"tags": ["boot"]})).await;
    assert_eq!(booted.status, 202, "{:?}", booted.body);
    let third = booted.body["server"]["id"].as_str().unwrap().to_owned();
    wait_status(&owner, &third, "ACTIVE").await;
    assert_eq!(owner.get(&format!("/servers/{third}/tags")).await.body, json!({"tags": ["boot"]}));
    cloud.check_invariants().await;
}

#[tokio::test]
async fn a_server_without_ports_has_no_addresses() {
    let mut cloud = Cloud::start("ips", &[]).await;
    cloud.add_agent(Hosts::new("i", 1, HOSTS)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = admin.image("img", json!({})).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let ips = owner.get(&format!("/servers/{id}/ips")).await;
    assert_eq!((ips.status, ips.body.clone()), (200, json!({"addresses": {}})));
    let net = owner.get(&format!("/servers/{id}/ips/private")).await;
    assert_eq!((net.status, message(&net.body).as_str()), (404, "Instance is not a member of specified network"));
    let hidden = cloud.nova("bob:other").get(&format!("/servers/{id}/ips")).await;
    assert_eq!(hidden.status, 404);
    // 2.102 takes no query parameters.
    assert_eq!(owner.at("2.102").get(&format!("/servers/{id}/ips?x=1")).await.status, 400);
    assert_eq!(owner.at("2.101").get(&format!("/servers/{id}/ips?x=1")).await.status, 200);
    assert_eq!(owner.at("2.102").get(&format!("/servers/{id}/metadata?x=1")).await.status, 400);
    cloud.check_invariants().await;
}
