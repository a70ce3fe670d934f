//! What a task tells an agent about its guest: an agent holds no admin
//! identity (here: each host's agent credential, the service role) and
//! reads no server, so the build task carries the flavor with its extra
//! specs, the image with its properties, the name, hostname, metadata,
//! key and user data; a cold move's tasks carry the migration's hosts,
//! the source's IP and the move's secret, the same on the source's and
//! the destination's tasks; a revert reaches the source, whose report
//! ends it; a rescue names its image; a poll without `guests=1` carries
//! no guest.
//!
//! The two hosts are registered by hand and no agent takes their work:
//! the test polls it and reports as each host's agent would.

use serde_json::{json, Value};

use super::libvirt::agent_credential;
use super::support::{wait_status, Cloud};
use crate::support::Client;

/// A host registered with its own credential (`host_ip` given) and its
/// provider reported; the client speaking as its agent.
async fn ghost(cloud: &Cloud, host: &str, agent: &str, ip: &str) -> Client {
    let path = agent_credential(cloud, host).await;
    let mut client = cloud.server.client();
    client.token = std::fs::read_to_string(path).expect("credential").trim().to_owned();
    let body = json!({"agent": agent, "hosts": [{"host": host, "vcpus": 8, "memory_mb": 8192, "local_gb": 100,
                                                   "host_ip": ip, "hypervisor_type": "QEMU"}]});
    let reply = client.post("/agent/v1/register", &body).await;
    assert_eq!(reply.status, 200, "register: {:?}", reply.body);
    let node = reply.body["hosts"][0]["node_uuid"].as_str().expect("node uuid").to_owned();
    let created = client.post("/resource_providers", &json!({"name": host, "uuid": node})).await;
    assert!(matches!(created.status, 200 | 201), "provider: {:?}", created.body);
    let inventories = json!({"resource_provider_generation": 0, "inventories": {
        "VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}, "DISK_GB": {"total": 100}}});
    let put = client.put(&format!("/resource_providers/{node}/inventories"), &inventories).await;
    assert_eq!(put.status, 200, "inventories: {:?}", put.body);
    client
}

/// The next task of `kind` for `id` from the agent's long poll (bounded),
/// with the guest (`guests=1`, as the libvirt driver polls).
async fn task(agent: &Client, name: &str, id: &str, kind: &str) -> Value {
    poll(agent, name, id, kind, "&guests=1").await
}

/// The same from a long poll without `guests=1` (the fake hosts').
async fn task_without_guest(agent: &Client, name: &str, id: &str, kind: &str) -> Value {
    poll(agent, name, id, kind, "").await
}

async fn poll(agent: &Client, name: &str, id: &str, kind: &str, query: &str) -> Value {
    for _ in 0..30 {
        let polled = agent.get(&format!("/agent/v1/work?agent={name}&wait=1{query}")).await;
        assert_eq!(polled.status, 200, "{:?}", polled.body);
        let found = polled.body["tasks"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["instance"] == id && t["kind"] == kind).cloned());
        if let Some(task) = found {
            return task;
        }
    }
    panic!("no {kind} task for {id} reached {name}");
}

/// Report `kind` for the task as its host's agent; whether it applied.
async fn report(agent: &Client, task: &Value, kind: &str) -> bool {
    let event = json!({"events": [{"instance": task["instance"], "host": task["host"], "kind": kind,
                                   "task": task["id"]}]});
    let reply = agent.post("/agent/v1/events", &event).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body["results"][0]["applied"].as_bool().expect("applied")
}

#[tokio::test]
async fn tasks_carry_the_guest_and_the_moves_secret_to_agents_without_admin() {
    let cloud = Cloud::start("task-payload", &[]).await;
    let a = ghost(&cloud, "pa0", "ghost-a", "192.0.2.10").await;
    let b = ghost(&cloud, "pb0", "ghost-b", "192.0.2.11").await;
    let admin = cloud.nova("admin").at("2.79");
    let flavor = admin.flavor("pf", 1, 64, 1).await;
    let specs = json!({"extra_specs": {"hw:cpu_policy": "shared"}});
    assert_eq!(admin.post(&format!("/flavors/{flavor}/os-extra_specs"), &specs).await.status, 200);
    let image = admin.image("img", json!({"hw_disk_bus": "scsi", "hw_machine_type": "q35"})).await;
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl t@b";
    let pair = admin.post("/os-keypairs", &json!({"keypair": {"name": "k", "public_key": key}})).await;
    assert_eq!(pair.status, 201, "{:?}", pair.body);
    let booted = admin
        .boot(
            "vm-1",
            &flavor,
            &image,
            json!({"key_name": "k", "user_data": "aGVsbG8K", "metadata": {"role": "db"},
                   "availability_zone": "nova:pa0"}),
        )
        .await;
    assert_eq!(booted.status, 202, "{:?}", booted.body);
    let id = booted.body["server"]["id"].as_str().expect("id").to_owned();

    let build = task(&a, "ghost-a", &id, "build").await;
    let server = &build["server"];
    assert_eq!(server["id"], id.as_str(), "{build}");
    assert_eq!(server["name"], "vm-1");
    assert_eq!(server["OS-EXT-SRV-ATTR:hostname"], "vm-1");
    assert_eq!(
        server["flavor"],
        json!({"original_name": "pf", "vcpus": 1, "ram": 64, "disk": 1, "ephemeral": 0,
                                        "swap": 0, "extra_specs": {"hw:cpu_policy": "shared"}})
    );
    assert_eq!(server["image"]["id"], image.as_str());
    assert_eq!(server["image"]["properties"]["hw_disk_bus"], "scsi", "{server}");
    assert_eq!(server["image"]["properties"]["hw_machine_type"], "q35", "{server}");
    assert_eq!(server["key_name"], "k");
    assert_eq!(server["key_data"], key);
    assert_eq!(build["key_data"], key);
    assert_eq!(server["OS-EXT-SRV-ATTR:user_data"], "aGVsbG8K");
    assert_eq!(server["metadata"], json!({"role": "db"}));
    assert_eq!(server["nics"], 0, "networks none: no NIC");
    assert!(build.get("move").is_none(), "{build}");
    assert!(report(&a, &build, "spawned").await);
    wait_status(&admin, &id, "ACTIVE").await;

    // A cold migration: both hosts' tasks carry the same secret; the
    // destination's names the source's IP and has the (same) flavor.
    let migrate = admin.post(&format!("/servers/{id}/action"), &json!({"migrate": null})).await;
    assert_eq!(migrate.status, 202, "{:?}", migrate.body);
    let out = task(&a, "ghost-a", &id, "resize_migrate").await;
    let secret = out["move"]["token"].as_str().expect("the move's secret").to_owned();
    assert!(secret.len() >= 32, "{out}");
    assert_eq!(out["move"]["source_host"], "pa0");
    assert_eq!(out["move"]["dest_host"], "pb0");
    assert_eq!(out["move"]["migration_type"], "migration");
    assert!(report(&a, &out, "resize_migrated").await);
    let into = task(&b, "ghost-b", &id, "resize_finish").await;
    assert_eq!(into["move"]["token"], secret.as_str(), "{into}");
    assert_eq!(into["move"]["source_ip"], "192.0.2.10");
    assert_eq!(into["move"]["dest_ip"], "192.0.2.11");
    assert_eq!(into["server"]["flavor"]["ram"], 64);
    assert_eq!(into["server"]["key_data"], key);
    assert!(report(&b, &into, "resize_finished").await);
    wait_status(&admin, &id, "VERIFY_RESIZE").await;
    // The secret is the agents' alone: no API view shows it.
    let shown = admin.get(&format!("/servers/{id}")).await.body.to_string();
    let migrations = admin.at("2.80").get("/os-migrations").await.body.to_string();
    assert!(!shown.contains(&secret) && !migrations.contains(&secret));

    // Revert: the destination first (the row goes back to the source,
    // still reverting), then the source, whose report ends it.
    let revert = admin.post(&format!("/servers/{id}/action"), &json!({"revertResize": null})).await;
    assert_eq!(revert.status, 202, "{:?}", revert.body);
    let undo = task(&b, "ghost-b", &id, "resize_revert").await;
    assert_eq!((undo["move"]["source_host"].clone(), undo["move"]["dest_host"].clone()), (json!("pa0"), json!("pb0")));
    assert!(report(&b, &undo, "resize_reverted").await);
    let server = admin.get(&format!("/servers/{id}")).await.body["server"].clone();
    assert_eq!(
        (server["status"].as_str(), server["OS-EXT-SRV-ATTR:host"].as_str()),
        (Some("REVERT_RESIZE"), Some("pa0")),
        "{server}"
    );
    assert_eq!(server["flavor"]["ram"], 64);
    let back = task(&a, "ghost-a", &id, "resize_revert").await;
    assert_eq!(back["host"], "pa0");
    assert_eq!(back["move"]["source_host"], "pa0");
    assert_eq!(back["move"]["status"], "reverted");
    assert_eq!(back["server"]["OS-EXT-STS:power_state"], 1, "running before the move: the source boots it");
    // The source's report ends it (only its agent may speak for it).
    assert!(report(&a, &back, "resize_reverted").await);
    let server = wait_status(&admin, &id, "ACTIVE").await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "pa0");
    assert!(!report(&a, &back, "resize_reverted").await, "a second report changes nothing");
    let events = admin.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    let revert_request = events["instanceActions"][0]["request_id"].as_str().expect("request id").to_owned();
    let action = admin.at("2.51").get(&format!("/servers/{id}/os-instance-actions/{revert_request}")).await.body;
    let mut names: Vec<&str> = action["instanceAction"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["compute_finish_revert_resize", "compute_revert_resize"], "{action}");

    // Rescue with an image: its task names it; without, none.
    let other = admin.image("rescue-img", json!({})).await;
    let rescue = admin.post(&format!("/servers/{id}/action"), &json!({"rescue": {"rescue_image_ref": other}})).await;
    assert_eq!(rescue.status, 200, "{:?}", rescue.body);
    let rescuing = task(&a, "ghost-a", &id, "rescue").await;
    assert_eq!(rescuing["rescue_image"], other.as_str(), "{rescuing}");
    assert!(report(&a, &rescuing, "rescued").await);
    wait_status(&admin, &id, "RESCUE").await;
    let unrescue = admin.post(&format!("/servers/{id}/action"), &json!({"unrescue": null})).await;
    assert_eq!(unrescue.status, 202, "{:?}", unrescue.body);
    // A poll without `guests=1` (the fake hosts'): no guest in the task.
    let plain = task_without_guest(&a, "ghost-a", &id, "unrescue").await;
    assert!(plain.get("server").is_none(), "{plain}");
    assert!(report(&a, &plain, "unrescued").await);
    wait_status(&admin, &id, "ACTIVE").await;
    let rescue = admin.post(&format!("/servers/{id}/action"), &json!({"rescue": null})).await;
    assert_eq!(rescue.status, 200, "{:?}", rescue.body);
    let rescuing = task(&a, "ghost-a", &id, "rescue").await;
    assert!(rescuing.get("rescue_image").is_none(), "{rescuing}");
    assert_eq!(rescuing["server"]["image"]["id"], image.as_str());
    cloud.check_invariants().await;
}
