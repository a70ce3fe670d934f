//! Pool lending (`--pool-lend-lead`) end to end on the test clock: a pool
//! host no lease needs soon carries ordinary servers; once a lease comes
//! within the lead it takes no more, its servers live-migrate away, and the
//! lease starts on time on the emptied host, with placement never showing
//! the host over capacity (polled every 10 ms). A held host still busy at
//! the start (a stopped server cannot live-migrate) is swapped for a free
//! pool host; with none free, the start is degraded (`resources_changed`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::leases::{advance, enrol, host_lease, jump_to, rsv, wait_lease, Y2040};
use super::support::{eventually, wait_status, Cloud, Hosts, Nova};
use crate::support::{Client, TestServer};

/// `YYYY-MM-DD HH:MM` of a time after 2040-01-01 00:00 UTC on the same
/// day.
fn at(seconds_after_2040: i64) -> String {
    assert!((0..86_400).contains(&seconds_after_2040));
    format!("2040-01-01 {:02}:{:02}", seconds_after_2040 / 3600, seconds_after_2040 % 3600 / 60)
}

async fn provider(placement: &Client, name: &str) -> String {
    let reply = placement.get(&format!("/resource_providers?name={name}")).await;
    reply.body["resource_providers"][0]["uuid"].as_str().unwrap_or_else(|| panic!("no provider {name}")).to_owned()
}

/// Every class's usage within `(total - reserved) * allocation_ratio`.
async fn within_capacity(placement: &Client, uuid: &str) -> Result<(), String> {
    let inventories = placement.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
    let usages = placement.get(&format!("/resource_providers/{uuid}/usages")).await.body;
    for (class, used) in usages["usages"].as_object().into_iter().flatten() {
        let inv = &inventories["inventories"][class];
        let cap = (inv["total"].as_f64().unwrap_or(0.0) - inv["reserved"].as_f64().unwrap_or(0.0))
            * inv["allocation_ratio"].as_f64().unwrap_or(1.0);
        if used.as_f64().unwrap_or(0.0) > cap + 1e-9 {
            return Err(format!("{class}: used {used} > capacity {cap}"));
        }
    }
    Ok(())
}

/// Poll placement every 10 ms for the providers until stopped; returns the
/// first over-capacity reading, if any.
fn watch_capacity(
    server: &TestServer,
    providers: Vec<String>,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Vec<String>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let placement = server.client();
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut bad = Vec::new();
        let mut polls = 0u64;
        while !flag.load(Ordering::Relaxed) {
            for uuid in &providers {
                if let Err(e) = within_capacity(&placement, uuid).await {
                    bad.push(e);
                }
            }
            polls += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(polls > 10, "the watcher barely ran ({polls} polls)");
        bad
    });
    (stop, task)
}

async fn host_of(nova: &Nova, id: &str) -> Value {
    nova.get(&format!("/servers/{id}")).await.body["server"]["OS-EXT-SRV-ATTR:host"].clone()
}

/// `os-hosts`' `pool_state` of a pool host.
async fn pool_state(admin: &Client, name: &str) -> Value {
    let hosts = admin.get("/reservation/v1/os-hosts").await.body;
    hosts["hosts"].as_array().unwrap().iter().find(|h| h["hypervisor_hostname"] == name).unwrap()["pool_state"].clone()
}

async fn metric(server: &TestServer, name: &str) -> u64 {
    server.metric(name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lent_host_is_drained_before_its_lease_starts_on_time() {
    let mut cloud = Cloud::start("rsv-lend", &["--pool-lend-lead", "600"]).await;
    // The pool hosts have more free RAM than g0: the RAM weigher alone
    // would send ordinary boots there.
    cloud.add_agent(Hosts::new("p", 2, &["--vcpus", "4", "--cpu-ratio", "1", "--memory-mb", "32768"])).await;
    cloud.add_agent(Hosts::new("g", 1, &["--vcpus", "8", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let nova = cloud.nova("admin");
    enrol(&admin, "p0", json!({})).await;
    enrol(&admin, "p1", json!({})).await;
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    jump_to(&cloud, &admin, Y2040).await;

    // A lease of p0 from 01:00 to 02:00; at 00:00 nothing needs the pool
    // within the 10-minute lead, so both pool hosts are lent.
    let props = json!({"hypervisor_properties": "[\"=\", \"$hypervisor_hostname\", \"p0\"]"});
    let reply = admin.post("/reservation/v1/leases", &host_lease("lend", &at(3600), &at(7200), props)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let lease_id = reply.body["lease"]["id"].as_str().unwrap().to_owned();
    let rid = reply.body["lease"]["reservations"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(metric(&cloud.server, "berth_pool_hosts_lent").await, 2);
    assert_eq!(pool_state(&admin, "p0").await, json!("lent"));

    // Lent hosts come last: an ordinary boot goes to the general host
    // while it has room.
    let general = nova.boot_id("general", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&general).await["OS-EXT-SRV-ATTR:host"], json!("g0"));

    // The lent host carries ordinary servers (forced there by the admin).
    let mut lent = Vec::new();
    for i in 0..3 {
        let reply = nova.boot(&format!("lent{i}"), &flavor, &image, json!({"availability_zone": "nova:p0"})).await;
        assert_eq!(reply.status, 202, "{:?}", reply.body);
        let id = reply.body["server"]["id"].as_str().unwrap().to_owned();
        let server = nova.wait_settled(&id).await;
        assert_eq!(server["status"], json!("ACTIVE"), "{server}");
        assert_eq!(server["OS-EXT-SRV-ATTR:host"], json!("p0"));
        lent.push(id);
    }

    let placement = cloud.server.client();
    let p0 = provider(&placement, "p0").await;
    let watched = vec![p0.clone(), provider(&placement, "p1").await, provider(&placement, "g0").await];
    let (stop, watcher) = watch_capacity(&cloud.server, watched);

    // 00:50:01: the lease is within the lead. p0 takes no more ordinary
    // servers, and the ones it carries move away.
    advance(&cloud.server, 3000 + 1).await;
    eventually("p0 no longer lent", || async { metric(&cloud.server, "berth_pool_hosts_lent").await == 1 }).await;
    assert_eq!(pool_state(&admin, "p0").await, json!("reclaimed"));
    assert_eq!(pool_state(&admin, "p1").await, json!("lent"));
    let refused = nova.boot("late", &flavor, &image, json!({"availability_zone": "nova:p0"})).await;
    assert_eq!(refused.status, 202, "{:?}", refused.body);
    let refused = nova.wait_settled(refused.body["server"]["id"].as_str().unwrap()).await;
    assert_eq!(refused["status"], json!("ERROR"), "a reclaimed host takes no ordinary boot: {refused}");
    for id in &lent {
        eventually("a lent server leaves p0", || async {
            let host = host_of(&nova, id).await;
            let status = nova.get(&format!("/servers/{id}")).await.body["server"]["status"].clone();
            host != json!("p0") && status == json!("ACTIVE")
        })
        .await;
    }
    let p0_allocations = placement.get(&format!("/resource_providers/{p0}/allocations")).await.body;
    assert_eq!(p0_allocations["allocations"], json!({}), "p0 is empty before the start");
    assert_eq!(metric(&cloud.server, "berth_pool_drains_started_total").await, 1);
    assert_eq!(metric(&cloud.server, "berth_pool_drain_migrations_total").await, 3);
    eventually("p0 counted reclaimed", || async {
        metric(&cloud.server, "berth_pool_hosts_reclaimed_total").await == 1
    })
    .await;

    // 01:00: the lease starts on time, on the empty p0.
    advance(&cloud.server, 600).await;
    let lease = wait_lease(&admin, &lease_id, "ACTIVE").await;
    assert_eq!(lease["degraded"], json!(false), "{lease}");
    assert_eq!(lease["reservations"][0]["resources_changed"], json!(false), "{lease}");
    let allocations = admin.get("/reservation/v1/os-hosts/allocations").await.body;
    let p0_id = admin.get("/reservation/v1/os-hosts").await.body["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hypervisor_hostname"] == "p0")
        .unwrap()["id"]
        .clone();
    let held = allocations["allocations"].as_array().unwrap().iter().find(|a| a["resource_id"] == p0_id).unwrap();
    assert_eq!(held["reservations"][0]["id"], json!(rid), "{allocations}");
    assert_eq!(metric(&cloud.server, "berth_lease_starts_on_time_total").await, 1);
    assert_eq!(metric(&cloud.server, "berth_pool_drains_late_total").await, 0);
    assert_eq!(pool_state(&admin, "p0").await, json!("reserved"));
    let mine = nova.boot("mine", &flavor, &image, json!({"os:scheduler_hints": {"reservation": rid}})).await;
    let mine = nova.wait_settled(mine.body["server"]["id"].as_str().unwrap()).await;
    assert_eq!(mine["OS-EXT-SRV-ATTR:host"], json!("p0"), "{mine}");

    stop.store(true, Ordering::Relaxed);
    let over = watcher.await.unwrap();
    assert!(over.is_empty(), "placement showed a host over capacity: {over:?}");
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_host_at_the_start_is_swapped_or_the_start_degraded() {
    let mut cloud = Cloud::start("rsv-swap", &["--pool-lend-lead", "600"]).await;
    cloud.add_agent(Hosts::new("q", 2, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    cloud.add_agent(Hosts::new("h", 1, &["--vcpus", "8", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let nova = cloud.nova("admin");
    enrol(&admin, "q0", json!({})).await;
    enrol(&admin, "q1", json!({})).await;
    let flavor = nova.flavor("one", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    jump_to(&cloud, &admin, Y2040).await;

    // A stopped server on q0: it cannot live-migrate, so no drain empties
    // q0 in time.
    let reply = nova.boot("stuck", &flavor, &image, json!({"availability_zone": "nova:q0"})).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let stuck = reply.body["server"]["id"].as_str().unwrap().to_owned();
    assert_eq!(nova.wait_settled(&stuck).await["OS-EXT-SRV-ATTR:host"], json!("q0"));
    let stop = nova.post(&format!("/servers/{stuck}/action"), &json!({"os-stop": null})).await;
    assert_eq!(stop.status, 202, "{:?}", stop.body);
    wait_status(&nova, &stuck, "SHUTOFF").await;

    // One host from 00:05: admission takes q0 (the first free one).
    let first = admin.post("/reservation/v1/leases", &host_lease("first", &at(300), &at(7200), json!({}))).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let first_id = first.body["lease"]["id"].as_str().unwrap().to_owned();
    let hosts = admin.get("/reservation/v1/os-hosts").await.body;
    let id_of = |name: &str| {
        hosts["hosts"].as_array().unwrap().iter().find(|h| h["hypervisor_hostname"] == name).unwrap()["id"].clone()
    };
    let (q0, q1) = (id_of("q0"), id_of("q1"));
    let held_by = |lease_id: String| {
        let admin = &admin;
        async move {
            let allocations = admin.get("/reservation/v1/os-hosts/allocations").await.body;
            allocations["allocations"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["reservations"].as_array().unwrap().iter().any(|r| r["lease_id"] == json!(lease_id)))
                .map(|a| a["resource_id"].clone())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(held_by(first_id.clone()).await, vec![q0.clone()]);

    // At the start q0 still carries the stopped server: the lease gets q1.
    advance(&cloud.server, 301).await;
    let lease = wait_lease(&admin, &first_id, "ACTIVE").await;
    assert_eq!(held_by(first_id.clone()).await, vec![q1.clone()], "{lease}");
    assert_eq!(lease["reservations"][0]["resources_changed"], json!(true), "{lease}");
    assert_eq!(metric(&cloud.server, "berth_lease_hosts_swapped_total").await, 1);
    assert_eq!(host_of(&nova, &stuck).await, json!("q0"), "the stopped server was left alone");

    // A second lease can only get q0, still busy: it starts degraded, with
    // q0 kept and counted late, never sharing q0 silently.
    let second = admin.post("/reservation/v1/leases", &host_lease("second", &at(600), &at(7200), json!({}))).await;
    assert_eq!(second.status, 201, "{:?}", second.body);
    let second_id = second.body["lease"]["id"].as_str().unwrap().to_owned();
    advance(&cloud.server, 300).await;
    let lease = wait_lease(&admin, &second_id, "ACTIVE").await;
    assert_eq!(lease["degraded"], json!(true), "{lease}");
    assert_eq!(lease["reservations"][0]["resources_changed"], json!(true), "{lease}");
    assert_eq!(held_by(second_id.clone()).await, vec![q0.clone()]);
    assert_eq!(metric(&cloud.server, "berth_pool_drains_late_total").await, 1);
    cloud.check_invariants().await;
}
