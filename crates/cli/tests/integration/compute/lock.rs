//! `lock` / `unlock`: a locked server refuses its owner's state-changing
//! actions (409, Nova's text) and changes nothing; admins act through the
//! lock; an owner cannot undo an admin's lock (403 without
//! `unlock_override`); the reason shows from 2.73.

use serde_json::{json, Value};

use super::support::{wait_gone, wait_status, Cloud, Hosts, Nova};

async fn act(nova: &Nova, id: &str, body: Value) -> (u16, Value) {
    let answer = nova.post(&format!("/servers/{id}/action"), &body).await;
    (answer.status, answer.body)
}

#[tokio::test]
async fn a_locked_server_refuses_its_owner_and_admits_admins() {
    let mut cloud = Cloud::start("lock", &[]).await;
    cloud.add_agent(Hosts::new("k", 2, &["--vcpus", "4", "--memory-mb", "8192", "--disk-gb", "100"])).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = admin.image("img", json!({})).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let big = admin.flavor("big", 2, 1024, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let path = format!("/servers/{id}/action");

    // Bad bodies change nothing.
    let v273 = owner.at("2.73");
    for bad in [
        json!({"lock": {"locked_reason": ""}}),
        json!({"lock": {"locked_reason": "x".repeat(256)}}),
        json!({"lock": {"reason": "x"}}),
        json!({"lock": "now"}),
        json!({"lock": null, "extra": 1}),
    ] {
        assert_eq!(v273.post(&path, &bad).await.status, 400, "{bad}");
    }
    assert_eq!(v273.get(&format!("/servers/{id}")).await.body["server"]["locked"], false);

    // The owner locks it with a reason (2.73).
    assert_eq!(v273.post(&path, &json!({"lock": {"locked_reason": "maintenance"}})).await.status, 202);
    let shown = v273.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(shown["locked"], true, "{shown}");
    assert_eq!(shown["locked_reason"], "maintenance");
    let old = owner.at("2.72").get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(old["locked"], true);
    assert!(old.get("locked_reason").is_none(), "no reason before 2.73: {old}");
    let listed = v273.get("/servers?locked=true").await.body["servers"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    // Everything that changes the server is refused, and nothing changes.
    let message = format!("Instance {id} is locked");
    for body in [
        json!({"os-stop": null}),
        json!({"reboot": {"type": "SOFT"}}),
        json!({"resize": {"flavorRef": big}}),
        json!({"shelve": null}),
    ] {
        let (status, answer) = act(&owner, &id, body.clone()).await;
        assert_eq!(status, 409, "{body}: {answer}");
        assert_eq!(answer["conflictingRequest"]["message"], message.as_str(), "{body}");
    }
    let deleted = owner.delete(&format!("/servers/{id}")).await;
    assert_eq!(deleted.status, 409, "{:?}", deleted.body);
    assert_eq!(deleted.body["conflictingRequest"]["message"], message.as_str());
    let server = wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(server["flavor"]["vcpus"], 1);
    cloud.check_invariants().await;

    // Locking again as the owner changes nothing; unlocking frees it.
    assert_eq!(act(&owner, &id, json!({"lock": null})).await.0, 202);
    assert_eq!(act(&owner, &id, json!({"unlock": null})).await.0, 202);
    let shown = v273.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(shown["locked"], false);
    assert!(shown["locked_reason"].is_null(), "{shown}");
    assert_eq!(act(&owner, &id, json!({"os-stop": null})).await.0, 202);
    wait_status(&owner, &id, "SHUTOFF").await;

    // An admin's lock: the owner cannot undo it (403), the admin acts
    // through it and undoes it.
    assert_eq!(act(&admin, &id, json!({"lock": null})).await.0, 202);
    assert_eq!(act(&owner, &id, json!({"lock": null})).await.0, 202, "a no-op for the owner");
    let (status, answer) = act(&owner, &id, json!({"unlock": null})).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer["forbidden"]["message"],
        "Policy doesn't allow os_compute_api:os-lock-server:unlock:unlock_override to be performed."
    );
    assert_eq!(act(&owner, &id, json!({"os-start": null})).await.0, 409);
    assert_eq!(act(&admin, &id, json!({"os-start": null})).await.0, 202, "admins act through the lock");
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(act(&admin, &id, json!({"unlock": null})).await.0, 202);

    let actions = owner.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    let names: Vec<&str> =
        actions["instanceActions"].as_array().expect("actions").iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(names, ["unlock", "start", "lock", "stop", "unlock", "lock", "create"]);

    // Another project's user gets 404, as for any server it cannot see.
    let stranger = cloud.nova("eve:other");
    assert_eq!(act(&stranger, &id, json!({"lock": null})).await.0, 404);
    assert_eq!(owner.delete(&format!("/servers/{id}")).await.status, 204);
    wait_gone(&owner, &id).await;
    cloud.check_invariants().await;
}
