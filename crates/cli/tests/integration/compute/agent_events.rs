//! Agent reports (`POST /agent/v1/events`) that do not apply change
//! nothing: not the server, its allocations, mapping or quota usage. A
//! report is taken only for a transition under way, and only from the
//! host the instance is on.
//!
//! The host here is registered by hand and no agent takes its work, so
//! the test alone decides which reports arrive, and from where.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{wait_gone, wait_status, Cloud, Nova};
use crate::support::Client;

const HOST: &str = "ghost0";

/// Register `HOST` with an agent that never takes work, and report its
/// compute node provider with inventory, as an agent would.
async fn ghost_host(cloud: &Cloud) {
    let reply = cloud
        .server
        .client()
        .post(
            "/agent/v1/register",
            &json!({"agent": "ghost", "hosts": [{"host": HOST, "vcpus": 8, "memory_mb": 8192, "local_gb": 100}]}),
        )
        .await;
    assert_eq!(reply.status, 200, "register: {:?}", reply.body);
    let node = reply.body["hosts"][0]["node_uuid"].as_str().expect("node uuid").to_owned();
    let placement = cloud.server.client();
    let created = placement.post("/resource_providers", &json!({"name": HOST, "uuid": node})).await;
    assert!(matches!(created.status, 200 | 201), "provider: {:?}", created.body);
    let inventories = json!({"resource_provider_generation": 0, "inventories": {
        "VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}, "DISK_GB": {"total": 100}}});
    let put = placement.put(&format!("/resource_providers/{node}/inventories"), &inventories).await;
    assert_eq!(put.status, 200, "inventories: {:?}", put.body);
}

/// Post one event; returns whether it applied.
async fn report(placement: &Client, instance: &str, host: &str, kind: &str) -> bool {
    let body = json!({"events": [{"instance": instance, "host": host, "kind": kind}]});
    let reply = placement.post("/agent/v1/events", &body).await;
    assert_eq!(reply.status, 200, "events: {:?}", reply.body);
    let result = &reply.body["results"][0];
    assert!(result.get("error").is_none(), "{kind} from {host}: {result}");
    result["applied"].as_bool().expect("applied")
}

/// Wait until the server shows `task_state` (the API's write is done).
async fn wait_task(nova: &Nova, id: &str, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["OS-EXT-STS:task_state"] == task {
            return server;
        }
        assert!(Instant::now() < deadline, "server {id} never got task {task}: {server}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The server as the owner sees it, its allocations and its project's
/// instance and core usage: what a report that does not apply must leave.
async fn footprint(cloud: &Cloud, nova: &Nova, id: &str) -> (u16, Value, Value, Value) {
    let shown = nova.get(&format!("/servers/{id}")).await;
    let allocations = cloud.server.client().get(&format!("/allocations/{id}")).await.body["allocations"].clone();
    let quota = nova.get("/os-quota-sets/admin/detail").await.body["quota_set"].clone();
    (shown.status, shown.body["server"]["status"].clone(), allocations, json!([quota["instances"], quota["cores"]]))
}

#[tokio::test]
async fn agent_events_that_do_not_apply_change_nothing() {
    let cloud = Cloud::start("agent-events", &[]).await;
    ghost_host(&cloud).await;
    let nova = cloud.nova("admin");
    let placement = cloud.server.client();
    let flavor = nova.flavor("small", 1, 128, 1).await;
    let image = nova.image("img", json!({})).await;
    let answer = nova.boot("vm", &flavor, &image, json!({"availability_zone": format!("nova:{HOST}")})).await;
    assert_eq!(answer.status, 202, "boot: {:?}", answer.body);
    let id = answer.body["server"]["id"].as_str().expect("id").to_owned();
    wait_task(&nova, &id, "spawning").await;

    // A build's outcome only from the host building it.
    assert!(!report(&placement, &id, "elsewhere", "spawned").await, "spawned from another host");
    assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], "BUILD");
    assert!(report(&placement, &id, HOST, "spawned").await);
    wait_status(&nova, &id, "ACTIVE").await;

    // Reports of transitions nobody started: nothing changes, not even
    // from the server's own host.
    let active = footprint(&cloud, &nova, &id).await;
    assert_eq!(active.0, 200);
    assert!(active.2.as_object().is_some_and(|a| !a.is_empty()), "allocated: {:?}", active.2);
    for (host, kind) in [("elsewhere", "deleted"), (HOST, "deleted"), (HOST, "offloaded"), (HOST, "stopped")] {
        assert!(!report(&placement, &id, host, kind).await, "{kind} from {host} applied to an ACTIVE server");
        assert_eq!(footprint(&cloud, &nova, &id).await, active, "{kind} from {host} changed the server");
    }

    // A stop under way is finished only by the server's host; the power
    // sync's word that the guest shut itself down does not overtake it.
    let stop = nova.post(&format!("/servers/{id}/action"), &json!({"os-stop": null})).await;
    assert_eq!(stop.status, 202, "{:?}", stop.body);
    wait_task(&nova, &id, "powering-off").await;
    assert!(!report(&placement, &id, "elsewhere", "stopped").await, "stopped from another host");
    assert!(!report(&placement, &id, HOST, "powered_off").await, "powered_off during a stop");
    wait_task(&nova, &id, "powering-off").await;
    assert!(report(&placement, &id, HOST, "stopped").await);
    wait_status(&nova, &id, "SHUTOFF").await;
    assert!(!report(&placement, &id, HOST, "powered_off").await, "powered_off of a stopped server");

    // A guest that powered itself off (the power sync): an ACTIVE server
    // with no task becomes SHUTOFF, only on the report of its own host.
    let start = nova.post(&format!("/servers/{id}/action"), &json!({"os-start": null})).await;
    assert_eq!(start.status, 202, "{:?}", start.body);
    wait_task(&nova, &id, "powering-on").await;
    assert!(report(&placement, &id, HOST, "started").await);
    wait_status(&nova, &id, "ACTIVE").await;
    assert!(!report(&placement, &id, "elsewhere", "powered_off").await, "powered_off from another host");
    assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], "ACTIVE");
    assert!(report(&placement, &id, HOST, "powered_off").await);
    let off = wait_status(&nova, &id, "SHUTOFF").await;
    assert_eq!(off["OS-EXT-STS:power_state"], 4, "{off}");

    // Started behind berth's back (the power sync finds it running): a
    // STOPPED server is stopped again through its host, only on the
    // report of that host.
    assert!(!report(&placement, &id, "elsewhere", "powered_on").await, "powered_on from another host");
    assert!(report(&placement, &id, HOST, "powered_on").await);
    wait_task(&nova, &id, "powering-off").await;
    assert!(!report(&placement, &id, HOST, "powered_on").await, "powered_on during the stop");
    assert!(report(&placement, &id, HOST, "stopped").await);
    wait_status(&nova, &id, "SHUTOFF").await;

    // A delete under way is finished only by the server's host; until then
    // the server, its allocations and its usage stay.
    let stopped = footprint(&cloud, &nova, &id).await;
    let delete = nova.delete(&format!("/servers/{id}")).await;
    assert_eq!(delete.status, 204, "{:?}", delete.body);
    wait_task(&nova, &id, "deleting").await;
    let deleting = footprint(&cloud, &nova, &id).await;
    assert_eq!(deleting.2, stopped.2, "allocations kept while deleting");
    assert!(!report(&placement, &id, "elsewhere", "deleted").await, "deleted from another host");
    assert_eq!(footprint(&cloud, &nova, &id).await, deleting, "a report from another host changed the server");
    assert!(report(&placement, &id, HOST, "deleted").await);
    wait_gone(&nova, &id).await;
    let allocations = placement.get(&format!("/allocations/{id}")).await.body["allocations"].clone();
    assert_eq!(allocations, json!({}), "allocations gone with the server");
    // A repeated report finds nothing to do.
    assert!(!report(&placement, &id, HOST, "deleted").await);
    cloud.check_invariants().await;
}
