//! Live migration (`os-migrateLive`) with Nova's allocation discipline:
//! while it runs the migration consumer (`MIGRATION`) holds the source and
//! the instance consumer the destination; completion drops the migration
//! consumer, abort and failure give its allocation back to the instance
//! exactly; `GET /servers/{id}/migrations` lists it while in progress.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::moves::{action, allocations, migrations_of, provider_uuid, resources, setup, vcpus_on, FOUR};
use super::support::{wait_status, Cloud, Hosts, Nova};

/// The agents' simulated transfer time: long enough to watch `running`.
const TRANSFER_MS: &str = "2500";

async fn live_migrate(nova: &Nova, version: &str, id: &str, args: Value) -> u16 {
    let answer = nova.at(version).post(&format!("/servers/{id}/action"), &json!({"os-migrateLive": args})).await;
    answer.status
}

/// Wait until the server's in-progress list (2.80) shows a migration in
/// `status`, and return it.
async fn wait_in_progress(nova: &Nova, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = nova.at("2.80").get(&format!("/servers/{id}/migrations")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        if let Some(found) = answer.body["migrations"].as_array().and_then(|l| l.iter().find(|m| m["status"] == status))
        {
            return found.clone();
        }
        assert!(Instant::now() < deadline, "no live migration of {id} became {status}: {:?}", answer.body);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until the newest migration of the server has `status`.
async fn wait_migration(nova: &Nova, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let newest = migrations_of(nova, id).await.first().cloned().unwrap_or(Value::Null);
        if newest["status"] == status {
            return newest;
        }
        assert!(Instant::now() < deadline, "the migration of {id} never became {status}: {newest}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn gone(allocations: &Value) -> bool {
    allocations["allocations"].as_object().is_none_or(|a| a.is_empty())
}

/// Live-migrate to a named host (watched `running`: MIGRATION consumer on
/// the source, instance on the destination, listed in progress), then to
/// any host and abort it while running (the source allocation exactly
/// back), then again with `force_complete`. Bad requests change nothing.
#[tokio::test]
async fn live_migrate_complete_abort_and_force_complete() {
    let mut cloud = Cloud::start("live-migrate", &[]).await;
    let mut args = FOUR.to_vec();
    args.extend(["--live-migration-ms", TRANSFER_MS]);
    cloud.add_agent(Hosts::new("l", 3, &args)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let source = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let before = allocations(&cloud, &id).await;
    let target = ["l0", "l1", "l2"].into_iter().find(|h| *h != source).expect("another host").to_owned();

    // Bad input first: nothing changes.
    let user = cloud.nova("bob:admin");
    assert_eq!(live_migrate(&user, "2.30", &id, json!({"block_migration": "auto", "host": null})).await, 403);
    assert_eq!(live_migrate(&nova, "2.30", &id, json!({"block_migration": "auto", "host": "nohost"})).await, 400);
    assert_eq!(live_migrate(&nova, "2.30", &id, json!({"host": null})).await, 400, "block_migration is required");
    assert_eq!(
        live_migrate(&nova, "2.30", &id, json!({"block_migration": false, "host": null, "disk_over_commit": false}))
            .await,
        400,
        "disk_over_commit is gone at 2.25"
    );
    assert_eq!(live_migrate(&nova, "2.24", &id, json!({"block_migration": "auto", "host": null})).await, 400);
    assert_eq!(
        live_migrate(&nova, "2.30", &id, json!({"block_migration": "auto", "host": null, "force": true})).await,
        400
    );
    // Before 2.34 the conductor's refusal is the API's answer.
    let own = json!({"block_migration": false, "disk_over_commit": false, "host": source});
    assert_eq!(live_migrate(&nova, "2.1", &id, own).await, 400);
    assert_eq!(
        nova.at("2.22")
            .post(&format!("/servers/{id}/migrations/1/action"), &json!({"force_complete": null}))
            .await
            .status,
        409
    );
    assert_eq!(nova.at("2.24").delete(&format!("/servers/{id}/migrations/1")).await.status, 409);
    assert_eq!(nova.at("2.23").get(&format!("/servers/{id}/migrations/x")).await.status, 404);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], source.as_str());
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before));
    assert_eq!(nova.at("2.23").get(&format!("/servers/{id}/migrations")).await.body, json!({"migrations": []}));

    // 1. To a named host, watched while running.
    assert_eq!(live_migrate(&nova, "2.30", &id, json!({"block_migration": "auto", "host": target})).await, 202);
    let running = wait_in_progress(&nova, &id, "running").await;
    assert_eq!(
        (running["source_compute"].as_str(), running["dest_compute"].as_str()),
        (Some(source.as_str()), Some(target.as_str()))
    );
    assert_eq!(running["server_uuid"], id.as_str());
    let migration_uuid = running["uuid"].as_str().expect("uuid").to_owned();
    let mid = running["id"].as_i64().expect("id");
    let shown = nova.at("2.59").get(&format!("/servers/{id}/migrations/{mid}")).await;
    assert_eq!((shown.status, shown.body["migration"]["uuid"].as_str()), (200, Some(migration_uuid.as_str())));
    let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(
        (server["status"].as_str(), server["OS-EXT-STS:task_state"].as_str()),
        (Some("MIGRATING"), Some("migrating"))
    );
    let held = allocations(&cloud, &migration_uuid).await;
    assert_eq!(held["consumer_type"], "MIGRATION", "{held}");
    assert_eq!(resources(&held), resources(&before), "the migration consumer holds exactly the source's allocation");
    let (source_rp, target_rp) = (provider_uuid(&cloud, &source).await, provider_uuid(&cloud, &target).await);
    let instance = allocations(&cloud, &id).await;
    assert_eq!(instance["consumer_type"], "INSTANCE");
    assert_eq!((vcpus_on(&instance, &target_rp), vcpus_on(&instance, &source_rp)), (1, 0));
    let listed = migrations_of(&nova, &id).await[0].clone();
    assert_eq!(listed["migration_type"], "live-migration");
    let link = listed["links"][0]["href"].as_str().unwrap_or_default();
    assert!(link.ends_with(&format!("/servers/{id}/migrations/{mid}")), "in progress: linked ({listed})");
    cloud.check_invariants().await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], target.as_str());
    assert_eq!(wait_migration(&nova, &id, "completed").await["uuid"], migration_uuid.as_str());
    assert!(gone(&allocations(&cloud, &migration_uuid).await), "the migration consumer is gone");
    assert!(migrations_of(&nova, &id).await[0].get("links").is_none(), "completed: no link");
    let after = allocations(&cloud, &id).await;
    assert_eq!((vcpus_on(&after, &target_rp), vcpus_on(&after, &source_rp)), (1, 0));
    assert_eq!(nova.at("2.23").get(&format!("/servers/{id}/migrations")).await.body, json!({"migrations": []}));
    assert_eq!(nova.at("2.23").get(&format!("/servers/{id}/migrations/{mid}")).await.status, 404, "not in progress");
    cloud.check_invariants().await;

    // 2. Anywhere (2.34: asynchronous), aborted while running.
    let before = allocations(&cloud, &id).await;
    assert_eq!(live_migrate(&nova, "2.34", &id, json!({"block_migration": "auto", "host": null})).await, 202);
    let running = wait_in_progress(&nova, &id, "running").await;
    let mid = running["id"].as_i64().expect("id");
    let migration_uuid = running["uuid"].as_str().expect("uuid").to_owned();
    assert_eq!(allocations(&cloud, &migration_uuid).await["consumer_type"], "MIGRATION");
    assert_eq!(nova.at("2.24").delete(&format!("/servers/{id}/migrations/{mid}")).await.status, 202);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], target.as_str(), "an aborted live migration stays on the source");
    assert_eq!(wait_migration(&nova, &id, "cancelled").await["uuid"], migration_uuid.as_str());
    assert!(gone(&allocations(&cloud, &migration_uuid).await));
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before), "the source allocation exactly back");
    assert_eq!(
        nova.at("2.24").delete(&format!("/servers/{id}/migrations/{mid}")).await.status,
        409,
        "nothing to abort"
    );
    // The transfer the abort interrupted reports later: ignored.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], target.as_str());
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "cancelled");
    cloud.check_invariants().await;

    // 3. force_complete while running.
    assert_eq!(live_migrate(&nova, "2.68", &id, json!({"block_migration": "auto", "host": null})).await, 202);
    let running = wait_in_progress(&nova, &id, "running").await;
    let mid = running["id"].as_i64().expect("id");
    let dest = running["dest_compute"].as_str().expect("dest").to_owned();
    let forced = Instant::now();
    let path = format!("/servers/{id}/migrations/{mid}/action");
    assert_eq!(nova.at("2.22").post(&path, &json!({"force_complete": {}})).await.status, 400, "schema");
    assert_eq!(nova.at("2.22").post(&path, &json!({"force_complete": null})).await.status, 202);
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert!(forced.elapsed() < Duration::from_millis(2000), "completed at once, not after the transfer");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], dest.as_str());
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "completed");
    assert_eq!(nova.at("2.22").post(&path, &json!({"force_complete": null})).await.status, 409, "no longer migrating");
    cloud.check_invariants().await;

    // 4. Deleted while running: both allocations go with it, the
    // migration is closed (`error`) by the sweep, nothing is left over.
    assert_eq!(live_migrate(&nova, "2.68", &id, json!({"block_migration": "auto", "host": null})).await, 202);
    let running = wait_in_progress(&nova, &id, "running").await;
    let migration_uuid = running["uuid"].as_str().expect("uuid").to_owned();
    assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    while nova.get(&format!("/servers/{id}")).await.status != 404 {
        assert!(Instant::now() < deadline, "server {id} never went away");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(gone(&allocations(&cloud, &migration_uuid).await));
    assert!(gone(&allocations(&cloud, &id).await));
    wait_migration(&nova, &id, "error").await;
    cloud.check_invariants().await;
}

/// A destination that refuses (a bad host) leaves the server ACTIVE on
/// the source with its original allocation and the migration `error`; a
/// server not ACTIVE is refused (409) with nothing changed.
#[tokio::test]
async fn live_migration_to_a_bad_host_fails_back_to_the_source() {
    let mut cloud = Cloud::start("live-migrate-bad", &[]).await;
    cloud.add_agent(Hosts::new("g", 1, FOUR)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    wait_status(&nova, &id, "ACTIVE").await;
    let mut bad = FOUR.to_vec();
    bad.extend(["--bad-hosts", "b0"]);
    cloud.add_agent(Hosts::new("b", 1, &bad)).await;
    let before = allocations(&cloud, &id).await;

    assert_eq!(live_migrate(&nova, "2.30", &id, json!({"block_migration": "auto", "host": "b0"})).await, 202);
    let failed = wait_migration(&nova, &id, "error").await;
    assert_eq!(failed["dest_compute"], "b0");
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "g0");
    let migration_uuid = failed["uuid"].as_str().expect("uuid");
    assert!(gone(&allocations(&cloud, migration_uuid).await));
    let after = allocations(&cloud, &id).await;
    assert_eq!(after["consumer_type"], "INSTANCE");
    assert_eq!(resources(&after), resources(&before), "the original allocation exactly back");
    cloud.check_invariants().await;

    // The source's service forced down: before 2.34 a 400 with Nova's
    // text; from 2.34 a 202 and the migration `error`. Nothing moves.
    let services = nova.get("/os-services?host=g0").await.body;
    let service = services["services"][0]["id"].as_str().expect("service uuid").to_owned();
    let down = nova.at("2.53").put(&format!("/os-services/{service}"), &json!({"forced_down": true})).await;
    assert_eq!(down.status, 200, "{:?}", down.body);
    let refused = nova
        .at("2.1")
        .post(
            &format!("/servers/{id}/action"),
            &json!({"os-migrateLive": {"block_migration": false, "disk_over_commit": false, "host": null}}),
        )
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.body["badRequest"]["message"], "Compute service of g0 is unavailable at this time.");
    assert_eq!(live_migrate(&nova, "2.34", &id, json!({"block_migration": "auto", "host": null})).await, 202);
    assert_eq!(migrations_of(&nova, &id).await[0]["status"], "error");
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "g0");
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before));
    let up = nova.at("2.53").put(&format!("/os-services/{service}"), &json!({"forced_down": false})).await;
    assert_eq!(up.status, 200, "{:?}", up.body);

    // Not ACTIVE: 409, nothing changes.
    assert_eq!(action(&nova, &id, json!({"os-stop": null})).await, 202);
    wait_status(&nova, &id, "SHUTOFF").await;
    let n_migrations = migrations_of(&nova, &id).await.len();
    assert_eq!(live_migrate(&nova, "2.30", &id, json!({"block_migration": "auto", "host": null})).await, 409);
    assert_eq!(migrations_of(&nova, &id).await.len(), n_migrations);
    assert_eq!(resources(&allocations(&cloud, &id).await), resources(&before));
    cloud.check_invariants().await;
}

/// The control plane and the agents killed (`kill -9`) while a live
/// migration runs: after the restart the sweep offers the source its
/// transfer again and the migration completes with only the destination
/// allocation left.
#[tokio::test]
async fn live_migration_survives_a_restart_while_running() {
    let mut cloud = Cloud::start("live-migrate-restart", &[]).await;
    let mut args = FOUR.to_vec();
    args.extend(["--live-migration-ms", TRANSFER_MS]);
    cloud.add_agent(Hosts::new("r", 2, &args)).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let id = nova.boot_id("vm", &small, &image).await;
    let server = wait_status(&nova, &id, "ACTIVE").await;
    let source = server["OS-EXT-SRV-ATTR:host"].as_str().expect("host").to_owned();
    let before = allocations(&cloud, &id).await;
    assert_eq!(live_migrate(&nova, "2.34", &id, json!({"block_migration": "auto", "host": null})).await, 202);
    let running = wait_in_progress(&nova, &id, "running").await;
    let migration_uuid = running["uuid"].as_str().expect("uuid").to_owned();
    let dest = running["dest_compute"].as_str().expect("dest").to_owned();
    assert_ne!(dest, source);

    cloud.restart().await;
    let nova = cloud.nova("admin");
    let server = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], dest.as_str());
    assert_eq!(wait_migration(&nova, &id, "completed").await["uuid"], migration_uuid.as_str());
    assert!(gone(&allocations(&cloud, &migration_uuid).await));
    let dest_rp = provider_uuid(&cloud, &dest).await;
    let after = allocations(&cloud, &id).await;
    assert_eq!(vcpus_on(&after, &dest_rp), 1);
    assert_eq!(resources(&after).as_object().map(|m| m.len()), resources(&before).as_object().map(|m| m.len()));
    cloud.check_invariants().await;
}
