//! `pause`/`unpause`, `suspend`/`resume` through the host's agent (the
//! task state in between, the agent's report in one write, the instance
//! actions and their compute events), Nova's 409 texts in the wrong state
//! (VERIFY_RESIZE and a live migration included), `os-getConsoleOutput`
//! from the agent's fake driver, and the admin's `os-resetState`.

use serde_json::{json, Value};

use super::moves::{setup, FOUR};
use super::support::{act, instance_actions, message, refused, wait_status, Cloud, Hosts, Nova};

/// The server's instance actions (admin), oldest first.
async fn actions(nova: &Nova, id: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = instance_actions(nova, id).await;
    out.reverse();
    out
}

#[tokio::test]
async fn pause_and_suspend_go_through_the_agent_with_novas_state_machine() {
    let mut cloud = Cloud::start("pause", &[]).await;
    cloud.add_agent(Hosts::new("p", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("vm", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;

    // Wrong states first: Nova's texts, nothing changes.
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await, refused("unpause", &id, "vm_state", "active"));
    assert_eq!(act(&owner, &id, json!({"resume": null})).await, refused("resume", &id, "vm_state", "active"));
    assert_eq!(act(&owner, &id, json!({"pause": null, "x": 1})).await.0, 400);

    // Pause: PAUSED, power state 3; listed by status.
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    let paused = wait_status(&owner, &id, "PAUSED").await;
    assert_eq!(
        (paused["OS-EXT-STS:vm_state"].as_str(), paused["OS-EXT-STS:power_state"].as_i64()),
        (Some("paused"), Some(3))
    );
    let listed = owner.get("/servers/detail?status=PAUSED").await.body["servers"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(owner.get("/servers?status=ACTIVE").await.body["servers"], json!([]));
    for (action, body) in [("pause", json!({"pause": {}})), ("suspend", json!({"suspend": null}))] {
        assert_eq!(act(&owner, &id, body).await, refused(action, &id, "vm_state", "paused"));
    }
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await.0, 202);
    let active = wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(active["OS-EXT-STS:power_state"], 1);

    // Suspend: SUSPENDED, power state 7; resume.
    assert_eq!(act(&owner, &id, json!({"suspend": null})).await.0, 202);
    let suspended = wait_status(&owner, &id, "SUSPENDED").await;
    assert_eq!(
        (suspended["OS-EXT-STS:vm_state"].as_str(), suspended["OS-EXT-STS:power_state"].as_i64()),
        (Some("suspended"), Some(7))
    );
    let listed = owner.get("/servers?status=SUSPENDED").await.body["servers"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(act(&owner, &id, json!({"pause": null})).await, refused("pause", &id, "vm_state", "suspended"));
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await, refused("unpause", &id, "vm_state", "suspended"));
    assert_eq!(act(&owner, &id, json!({"resume": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;

    // Each action recorded with its compute event, finished by the report.
    // (Sorted: actions started within one second may list in any order.)
    let recorded = actions(&admin, &id).await;
    let mut ours: Vec<(String, Vec<(String, String)>)> = recorded
        .iter()
        .filter(|(a, _)| ["pause", "unpause", "suspend", "resume"].contains(&a.as_str()))
        .cloned()
        .collect();
    ours.sort();
    let want = |action: &str| (action.to_owned(), vec![(format!("compute_{action}_instance"), "Success".to_owned())]);
    assert_eq!(ours, vec![want("pause"), want("resume"), want("suspend"), want("unpause")], "{recorded:?}");

    // The task state in between: with the agent gone, `pausing` waits
    // (ACTIVE, and a second pause is refused on the task state) until an
    // admin resets the state; the agent back, the task it may still get
    // reports into a row that no longer expects it (nothing changes), and
    // a new pause works.
    cloud.kill_agent(0);
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    let pausing = owner.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(
        (pausing["status"].as_str(), pausing["OS-EXT-STS:task_state"].as_str()),
        (Some("ACTIVE"), Some("pausing"))
    );
    assert_eq!(act(&owner, &id, json!({"pause": null})).await, refused("pause", &id, "task_state", "pausing"));
    let meta = owner.post(&format!("/servers/{id}/metadata"), &json!({"metadata": {"k": "v"}})).await;
    assert_eq!((meta.status, message(&meta.body)), refused("update metadata", &id, "task_state", "pausing"));
    assert_eq!(act(&admin, &id, json!({"os-resetState": {"state": "active"}})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    cloud.restart_agent(0).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let after = wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(after["OS-EXT-STS:power_state"], 1, "the stale pause changed nothing: {after}");
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    wait_status(&owner, &id, "PAUSED").await;

    // A stopped server: not pausable; a locked one: 409 locked.
    assert_eq!(act(&owner, &id, json!({"unpause": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    assert_eq!(act(&admin, &id, json!({"lock": null})).await.0, 202);
    assert_eq!(act(&owner, &id, json!({"pause": null})).await, (409, format!("Instance {id} is locked")));
    assert_eq!(act(&admin, &id, json!({"unlock": null})).await.0, 202);
    assert_eq!(act(&owner, &id, json!({"os-stop": null})).await.0, 202);
    wait_status(&owner, &id, "SHUTOFF").await;
    assert_eq!(act(&owner, &id, json!({"pause": null})).await, refused("pause", &id, "vm_state", "stopped"));
    assert_eq!(act(&owner, &id, json!({"suspend": null})).await, refused("suspend", &id, "vm_state", "stopped"));
    cloud.check_invariants().await;
}

#[tokio::test]
async fn pause_and_suspend_are_refused_during_a_migration() {
    let mut cloud = Cloud::start("pause-moving", &[]).await;
    let mut args = FOUR.to_vec();
    args.extend(["--live-migration-ms", "3000"]);
    cloud.add_agent(Hosts::new("q", 2, &args)).await;
    let admin = cloud.nova("admin");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let big = admin.flavor("big", 2, 1024, 1).await;
    let id = admin.boot_id("vm", &small, &image).await;
    wait_status(&admin, &id, "ACTIVE").await;

    // VERIFY_RESIZE: vm state `resized`.
    assert_eq!(act(&admin, &id, json!({"resize": {"flavorRef": big}})).await.0, 202);
    wait_status(&admin, &id, "VERIFY_RESIZE").await;
    for action in ["pause", "suspend"] {
        assert_eq!(act(&admin, &id, json!({action: null})).await, refused(action, &id, "vm_state", "resized"));
    }
    assert_eq!(act(&admin, &id, json!({"confirmResize": null})).await.0, 204);
    wait_status(&admin, &id, "ACTIVE").await;

    // Live migrating: vm state `active`, task state `migrating`.
    let live = admin
        .at("2.30")
        .post(&format!("/servers/{id}/action"), &json!({"os-migrateLive": {"block_migration": "auto", "host": null}}))
        .await;
    assert_eq!(live.status, 202, "{:?}", live.body);
    let moving = admin.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(moving["status"], "MIGRATING", "{moving}");
    for action in ["pause", "suspend"] {
        assert_eq!(act(&admin, &id, json!({action: null})).await, refused(action, &id, "task_state", "migrating"));
    }
    let server = wait_status(&admin, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-STS:vm_state"], "active");
    let recorded: Vec<String> = actions(&admin, &id).await.into_iter().map(|(a, _)| a).collect();
    assert!(!recorded.iter().any(|a| a == "pause" || a == "suspend"), "refusals record nothing: {recorded:?}");

    // A paused server live-migrates and stays PAUSED (Nova's MIGRATING
    // status for a paused server on the way).
    assert_eq!(act(&admin, &id, json!({"pause": null})).await.0, 202);
    wait_status(&admin, &id, "PAUSED").await;
    let live = admin
        .at("2.30")
        .post(&format!("/servers/{id}/action"), &json!({"os-migrateLive": {"block_migration": "auto", "host": null}}))
        .await;
    assert_eq!(live.status, 202, "{:?}", live.body);
    assert_eq!(admin.get(&format!("/servers/{id}")).await.body["server"]["status"], "MIGRATING");
    assert_eq!(act(&admin, &id, json!({"unpause": null})).await, refused("unpause", &id, "task_state", "migrating"));
    wait_status(&admin, &id, "PAUSED").await;
    cloud.check_invariants().await;
}

#[tokio::test]
async fn console_output_comes_from_the_agent_and_reset_state_is_the_admins() {
    let mut cloud = Cloud::start("console", &[]).await;
    cloud.add_agent(Hosts::new("c", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let owner = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let small = admin.flavor("small", 1, 512, 1).await;
    let id = owner.boot_id("web-1", &small, &image).await;
    wait_status(&owner, &id, "ACTIVE").await;
    let console = |length: Value| {
        let body = if length.is_null() {
            json!({"os-getConsoleOutput": {}})
        } else {
            json!({"os-getConsoleOutput": {"length": length}})
        };
        let owner = owner.clone();
        let path = format!("/servers/{id}/action");
        async move { owner.post(&path, &body).await }
    };

    // The whole log names the server; tails as Nova cuts them.
    let all = console(Value::Null).await;
    assert_eq!(all.status, 200, "{:?}", all.body);
    let text = all.body["output"].as_str().unwrap().to_owned();
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(lines.len() >= 3, "{text}");
    assert!(text.contains(&id) && text.contains("web-1"), "{text}");
    assert_eq!(console(json!(null)).await.body["output"], text.as_str());
    assert_eq!(console(json!(2)).await.body["output"], lines[lines.len() - 2..].join("\n"));
    assert_eq!(console(json!("1")).await.body["output"], lines[lines.len() - 1]);
    assert_eq!(console(json!(0)).await.body["output"], "");
    assert_eq!(console(json!(-1)).await.body["output"], lines[1..].join("\n"), "Python's lines[1:]");
    assert_eq!(console(json!(1000)).await.body["output"], text.as_str());
    for bad in [json!(-2), json!("x"), json!(1.5), json!(true)] {
        assert_eq!(console(bad.clone()).await.status, 400, "{bad}");
    }
    let extra = owner.post(&format!("/servers/{id}/action"), &json!({"os-getConsoleOutput": {"lines": 1}})).await;
    assert_eq!(extra.status, 400);
    assert_eq!(
        cloud
            .nova("bob:other")
            .post(&format!("/servers/{id}/action"), &json!({"os-getConsoleOutput": {}}))
            .await
            .status,
        404
    );

    // Offloaded: no host, Nova's InstanceNotReady.
    assert_eq!(act(&owner, &id, json!({"shelve": null})).await.0, 202);
    wait_status(&owner, &id, "SHELVED_OFFLOADED").await;
    assert_eq!(console(Value::Null).await.status, 409);
    assert_eq!(message(&console(Value::Null).await.body), format!("Instance {id} is not ready"));
    assert_eq!(act(&owner, &id, json!({"unshelve": null})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;

    // os-resetState: admin only, `active` or `error`, recorded.
    let (status, text) = act(&owner, &id, json!({"os-resetState": {"state": "error"}})).await;
    assert_eq!(
        (status, text.as_str()),
        (403, "Policy doesn't allow os_compute_api:os-admin-actions:reset_state to be performed.")
    );
    for bad in [
        json!({"os-resetState": {"state": "paused"}}),
        json!({"os-resetState": {}}),
        json!({"os-resetState": {"state": "error", "x": 1}}),
    ] {
        assert_eq!(act(&admin, &id, bad.clone()).await.0, 400, "{bad}");
    }
    assert_eq!(act(&admin, &id, json!({"os-resetState": {"state": "error"}})).await.0, 202);
    let errored = owner.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!((errored["status"].as_str(), errored["OS-EXT-STS:task_state"].as_str()), (Some("ERROR"), None));
    assert_eq!(act(&owner, &id, json!({"pause": null})).await, refused("pause", &id, "vm_state", "error"));
    assert_eq!(act(&admin, &id, json!({"os-resetState": {"state": "active"}})).await.0, 202);
    wait_status(&owner, &id, "ACTIVE").await;
    let recorded: Vec<String> = actions(&admin, &id).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(recorded.iter().filter(|a| *a == "resetState").count(), 2, "{recorded:?}");
    assert_eq!(act(&owner, &id, json!({"pause": null})).await.0, 202);
    wait_status(&owner, &id, "PAUSED").await;
    cloud.check_invariants().await;
}
