//! `rebuild` in place (the response at several microversions, a stopped
//! server staying SHUTOFF, Nova's refusals), a rebuild that a delete
//! overtakes, `rescue`/`unrescue`, and soft delete with
//! `--reclaim-instance-interval`: `restore`, `forceDelete`, and the
//! periodic reclaim (a restore after it is 404).

use serde_json::{json, Value};

use super::moves::{setup, FOUR};
use super::support::{act, eventually, instance_actions, refused, wait_gone, wait_status, Cloud, Hosts, Nova};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBieUUS8Ig4rsQkCiNR62QXjgraDjV4cTPo1044yaD0A test@berth";

/// The server's actions (admin): `(action, [(event, result)])`, sorted.
async fn actions(nova: &Nova, id: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = instance_actions(nova, id).await;
    out.sort();
    out
}

#[tokio::test]
async fn rebuild_in_place_answers_and_moves_as_nova() {
    let mut cloud = Cloud::start("rebuild", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let other = admin.image("img2", json!({})).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let key = owner.post("/os-keypairs", &json!({"keypair": {"name": "k", "public_key": KEY}})).await;
    assert_eq!(key.status, 201, "{:?}", key.body);

    // Bad requests first: nothing changes.
    let rebuild = |image: &str| json!({"rebuild": {"imageRef": image}});
    assert_eq!(act(&owner, &id, json!({"rebuild": {}})).await.0, 400);
    let missing = uuid::Uuid::new_v4().to_string();
    assert_eq!(act(&owner, &id, rebuild(&missing)).await, (400, "Cannot find image for rebuild".to_owned()));
    let bad_key = json!({"rebuild": {"imageRef": other, "key_name": "nope"}});
    assert_eq!(act(&owner.at("2.54"), &id, bad_key.clone()).await, (400, "Invalid key_name provided.".to_owned()));
    assert_eq!(act(&owner.at("2.53"), &id, bad_key).await.0, 400, "key_name is 2.54's");
    let bad_data = json!({"rebuild": {"imageRef": other, "user_data": "not base64!"}});
    assert_eq!(act(&owner.at("2.57"), &id, bad_data).await.0, 400);

    // 2.57: name, metadata, key pair, user data and password; the answer
    // is the reduced view with `key_name`, `user_data` and `adminPass`.
    let body = json!({"rebuild": {
        "imageRef": other, "name": "rebuilt", "metadata": {"role": "web"}, "adminPass": "rebuildPassw0rd",
        "key_name": "k", "user_data": "aGVsbG8=",
    }});
    let answer = owner.at("2.57").post(&format!("/servers/{id}/action"), &body).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = &answer.body["server"];
    assert_eq!(server["id"], id.as_str());
    assert_eq!(server["image"]["id"], other.as_str());
    assert_eq!(server["name"], "rebuilt");
    assert_eq!(server["metadata"], json!({"role": "web"}));
    assert_eq!(server["adminPass"], "rebuildPassw0rd");
    assert_eq!(server["key_name"], "k");
    assert_eq!(server["user_data"], "aGVsbG8=");
    assert_eq!(server["status"], "REBUILD");
    assert!(server.get("OS-EXT-STS:vm_state").is_none(), "before 2.75 the reduced view: {server}");
    let done = wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!((done["image"]["id"].as_str(), done["name"].as_str()), (Some(other.as_str()), Some("rebuilt")));
    assert_eq!(done["key_name"], "k");
    assert_eq!(done["OS-EXT-STS:power_state"], 1);

    // 2.75: the full view (no `OS-EXT-SRV-ATTR:user_data`, `user_data`
    // instead); key_name null removes the key pair; a generated password.
    let body = json!({"rebuild": {"imageRef": image, "key_name": null}});
    let answer = admin.at("2.75").post(&format!("/servers/{id}/action"), &body).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let server = &answer.body["server"];
    assert_eq!(server["OS-EXT-STS:task_state"], "rebuild_spawning");
    assert_eq!(server["key_name"], Value::Null);
    assert_eq!(server["user_data"], "aGVsbG8=", "kept when not given");
    assert!(server.get("OS-EXT-SRV-ATTR:user_data").is_none(), "{server}");
    assert_eq!(server["adminPass"].as_str().map(str::len), Some(12));
    wait_status(&owner, &id, "ACTIVE").await;

    // A stopped server is rebuilt and stays SHUTOFF.
    assert_eq!(act(&owner, &id, json!({"os-stop": null})).await.0, 202);
    wait_status(&owner, &id, "SHUTOFF").await;
    assert_eq!(act(&owner, &id, rebuild(&other)).await.0, 202);
    let stopped = wait_status(&owner, &id, "SHUTOFF").await;
    assert_eq!(
        (stopped["image"]["id"].as_str(), stopped["OS-EXT-STS:power_state"].as_i64()),
        (Some(other.as_str()), Some(4))
    );

    // Wrong states: Nova's texts.
    assert_eq!(act(&owner, &id, json!({"os-start": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    wait_status(&owner, &id, "PAUSED").await;
    assert_eq!(act(&owner, &id, rebuild(&image)).await, refused("rebuild", &id, "vm_state", "paused"));
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;

    let recorded = actions(&admin, &id).await;
    let rebuilds: Vec<_> = recorded.iter().filter(|(a, _)| a == "rebuild").collect();
    assert_eq!(rebuilds.len(), 3, "{recorded:?}");
    for (_, events) in rebuilds {
        assert_eq!(events, &vec![("compute_rebuild_instance".to_owned(), "Success".to_owned())]);
    }
    cloud.check_invariants().await;
}

#[tokio::test]
async fn a_delete_overtakes_a_rebuild() {
    let mut cloud = Cloud::start("rebuild-delete", &[]).await;
    cloud.add_agent(Hosts::new("d", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;

    // The agent away: the rebuild waits in REBUILD; the delete wins the
    // row; the agent back, the late rebuild changes nothing and the
    // server goes.
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    cloud.kill_agent(0);
    assert_eq!(act(&owner, &id, json!({"rebuild": {"imageRef": image}})).await.0, 202);
    assert_eq!(owner.get(&format!("/servers/{id}")).await.body["server"]["status"], "REBUILD");
    assert_eq!(
        act(&owner, &id, json!({"rebuild": {"imageRef": image}})).await,
        refused("rebuild", &id, "task_state", "rebuild_spawning")
    );
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    cloud.restart_agent(0).await;
    wait_gone(&owner, &id).await;

    // Both at once, many times: the rebuild is 202 or refused, the delete
    // always 204, and every server goes.
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(owner.boot_id(&format!("vm{n}"), &small, &image).await);
    }
    for id in &ids {
        wait_status(&owner, id, "ACTIVE").await;
    }
    for id in &ids {
        let path = format!("/servers/{id}/action");
        let body = json!({"rebuild": {"imageRef": image}});
        let gone = format!("/servers/{id}");
        let (rebuilt, deleted) = tokio::join!(owner.post(&path, &body), owner.delete(&gone));
        assert!(matches!(rebuilt.status, 202 | 409), "{:?}", rebuilt.body);
        assert_eq!(deleted.status, 204);
    }
    for id in &ids {
        wait_gone(&owner, id).await;
    }
    cloud.check_invariants().await;
}

#[tokio::test]
async fn rescue_and_unrescue_go_through_the_agent() {
    let mut cloud = Cloud::start("rescue", &[]).await;
    cloud.add_agent(Hosts::new("s", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;

    assert_eq!(act(&owner, &id, json!({"unrescue": null})).await, refused("unrescue", &id, "vm_state", "active"));
    assert_eq!(act(&owner, &id, json!({"rescue": {"bogus": 1}})).await.0, 400);
    let answer = owner.post(&format!("/servers/{id}/action"), &json!({"rescue": {"adminPass": "pw"}})).await;
    assert_eq!((answer.status, answer.body.clone()), (200, json!({"adminPass": "pw"})));
    let rescued = wait_status(&owner, &id, "RESCUE").await;
    assert_eq!(rescued["OS-EXT-STS:vm_state"], "rescued");
    assert_eq!(act(&owner, &id, json!({"rescue": null})).await, refused("rescue", &id, "vm_state", "rescued"));
    assert_eq!(act(&owner, &id, json!({"unrescue": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    // Rescue with an image: a generated password.
    let body = json!({"rescue": {"rescue_image_ref": image}});
    let answer = owner.post(&format!("/servers/{id}/action"), &body).await;
    assert_eq!((answer.status, answer.body["adminPass"].as_str().map(str::len)), (200, Some(12)));
    wait_status(&owner, &id, "RESCUE").await;
    assert_eq!(act(&owner, &id, json!({"unrescue": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    // injectNetworkInfo: admin only, changes nothing.
    assert_eq!(act(&owner, &id, json!({"injectNetworkInfo": null})).await.0, 403);
    assert_eq!(act(&admin, &id, json!({"injectNetworkInfo": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    let recorded = actions(&admin, &id).await;
    let ours: Vec<_> = recorded.iter().filter(|(a, _)| a.contains("rescue")).map(|(a, _)| a.as_str()).collect();
    assert_eq!(ours, vec!["rescue", "rescue", "unrescue", "unrescue"], "{recorded:?}");
    cloud.check_invariants().await;
}

#[tokio::test]
async fn soft_delete_restore_force_delete_and_reclaim() {
    let mut cloud = Cloud::start("soft-delete", &["--reclaim-instance-interval", "2"]).await;
    cloud.add_agent(Hosts::new("sd", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;

    assert_eq!(act(&owner, &id, json!({"restore": null})).await, refused("restore", &id, "vm_state", "active"));
    // DELETE soft-deletes: SOFT_DELETED, powered off, listed.
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    let soft = wait_status(&owner, &id, "SOFT_DELETED").await;
    assert_eq!(soft["OS-EXT-STS:power_state"], 4);
    assert_eq!(act(&owner, &id, json!({"os-start": null})).await.0, 409);
    // Restore: ACTIVE again.
    assert_eq!(act(&owner, &id, json!({"restore": null})).await.0, 202);
    let back = wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(back["OS-EXT-STS:power_state"], 1);
    // forceDelete: gone now.
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    wait_status(&owner, &id, "SOFT_DELETED").await;
    assert_eq!(act(&owner, &id, json!({"forceDelete": null})).await.0, 202);
    wait_gone(&owner, &id).await;

    // The reclaim: gone after the interval; a restore then is 404.
    let id = owner.boot_id("vm2", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    wait_status(&owner, &id, "SOFT_DELETED").await;
    wait_gone(&owner, &id).await;
    assert_eq!(act(&owner, &id, json!({"restore": null})).await.0, 404);
    eventually("the reclaimed server's allocations are gone", || async {
        cloud.server.client().get(&format!("/allocations/{id}")).await.body["allocations"] == json!({})
    })
    .await;
    cloud.check_invariants().await;
}
