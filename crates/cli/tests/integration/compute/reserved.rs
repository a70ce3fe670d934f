//! Reserved servers (issue 21, part 1): `POST /servers` with the hints
//! `reserved=True` and `lease_params` admits a lease of one instance slot
//! per server in the boot's own write. The server is `RESERVED` (no host,
//! no allocations) until the lease starts, is built on the held slot at the
//! start and deleted at the end; a boot whose lease cannot be admitted is
//! refused with nothing written (in one process or, on PostgreSQL, two);
//! deleting a `RESERVED` server deletes (or shrinks) its lease. On the test
//! clock.

use std::time::Duration;

use serde_json::{json, Value};

use super::leases::{advance, assert_blazar_error, offset_for, rsv, wait_lease, Y2040};
use super::support::{wait_gone, wait_status, Cloud, Hosts, Nova};
use crate::support::Client;

/// The window every test books: 2040 to 2090 on the test clock.
const WINDOW: (&str, &str) = ("2040-01-01 00:00", "2090-01-01 00:00");

async fn enrol(client: &Client, name: &str) {
    let reply = client.post("/reservation/v1/os-hosts", &json!({"name": name})).await;
    assert_eq!(reply.status, 201, "enrol {name}: {:?}", reply.body);
}

fn lease_params(name: &str) -> String {
    json!({"name": name, "start": WINDOW.0, "end": WINDOW.1}).to_string()
}

/// The boot's extra body: the hints as the openstack CLI sends them
/// (strings), or as one-element lists when `lists`.
fn reserved_hints(params: &str, lists: bool) -> Value {
    if lists {
        json!({"os:scheduler_hints": {"reserved": ["True"], "lease_params": [params]}})
    } else {
        json!({"os:scheduler_hints": {"reserved": "True", "lease_params": params}})
    }
}

async fn leases(client: &Client) -> Vec<Value> {
    let reply = client.get("/reservation/v1/leases").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body["leases"].as_array().cloned().unwrap_or_default()
}

/// `(instances, cores)` in use for `project`.
async fn quota_in_use(nova: &Nova, project: &str) -> (i64, i64) {
    let detail = nova.get(&format!("/os-quota-sets/{project}/detail")).await.body;
    let in_use = |k: &str| detail["quota_set"][k]["in_use"].as_i64().unwrap_or(-1);
    (in_use("instances"), in_use("cores"))
}

/// Every server's `(id, status)` in `GET /servers` (index) and
/// `GET /servers/detail`, asserting both agree.
async fn listed(nova: &Nova) -> Vec<(String, String)> {
    let pairs = |body: &Value| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = body["servers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| (s["id"].as_str().unwrap_or("").to_owned(), s["status"].as_str().unwrap_or("").to_owned()))
            .collect();
        out.sort();
        out
    };
    let detail = nova.get("/servers/detail").await;
    assert_eq!(detail.status, 200, "{:?}", detail.body);
    // The index view has no status before 2.69's stubs: compare ids only.
    let index = nova.get("/servers").await;
    assert_eq!(index.status, 200, "{:?}", index.body);
    let detail = pairs(&detail.body);
    let index_ids: Vec<String> = pairs(&index.body).into_iter().map(|(id, _)| id).collect();
    assert_eq!(index_ids, detail.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>());
    detail
}

fn assert_nova_error(answer: &super::support::Answer, status: u16, text: &str) {
    assert_eq!(answer.status, status, "{:?}", answer.body);
    let key = if status == 400 { "badRequest" } else { "conflictingRequest" };
    let message = answer.body[key]["message"].as_str().unwrap_or("");
    assert!(message.contains(text), "want {text:?} in {:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reserved_server_is_reserved_then_built_on_its_slot_then_deleted() {
    let mut cloud = Cloud::start("rsv-server", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    cloud.add_agent(Hosts::new("n", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let owner = rsv(&cloud.server, "alice:proj");
    let nova_admin = cloud.nova("admin");
    let nova = cloud.nova("alice:proj");
    let placement = cloud.server.client();
    enrol(&admin, "r0").await;
    let flavor = nova_admin.flavor("small", 2, 512, 1).await;
    let image = nova_admin.image("img", json!({})).await;

    // Hints as one-element lists (what some clients send).
    let reply = nova.boot("vm1", &flavor, &image, reserved_hints(&lease_params("vm1-lease"), true)).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let id = reply.body["server"]["id"].as_str().unwrap().to_owned();

    // RESERVED: no host, no task, nothing running, nothing in placement.
    let shown = nova_admin.get(&format!("/servers/{id}")).await;
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let server = &shown.body["server"];
    assert_eq!(server["status"], json!("RESERVED"), "{server}");
    assert_eq!(server["OS-EXT-STS:task_state"], Value::Null, "{server}");
    assert_eq!(server["OS-EXT-STS:power_state"], json!(0), "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], Value::Null, "{server}");
    assert_eq!(listed(&nova).await, vec![(id.clone(), "RESERVED".to_owned())]);
    let filtered = nova.get("/servers/detail?status=RESERVED").await.body;
    assert_eq!(filtered["servers"].as_array().map(Vec::len), Some(1), "{filtered}");
    let allocations = placement.get(&format!("/allocations/{id}")).await.body;
    assert_eq!(allocations["allocations"], json!({}), "nothing claimed before the start: {allocations}");
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (1, 2), "a reserved server counts for quota");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], json!("RESERVED"), "not scheduled");

    // Its lease: one virtual:instance slot shaped like the flavor.
    let mine = leases(&owner).await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    let lease = &mine[0];
    assert_eq!(lease["name"], json!("vm1-lease"));
    assert_eq!(lease["status"], json!("PENDING"));
    let reservation = &lease["reservations"][0];
    assert_eq!(reservation["resource_type"], json!("virtual:instance"), "{reservation}");
    assert_eq!(reservation["amount"], json!(1), "{reservation}");
    assert_eq!(reservation["vcpus"], json!(2), "{reservation}");
    assert_eq!(reservation["memory_mb"], json!(512), "{reservation}");
    let lease_id = lease["id"].as_str().unwrap().to_owned();
    let rid = reservation["id"].as_str().unwrap().to_owned();

    // The start: built on r0 through the claim of the held slot. The
    // clock stops short of it until the hosts' heartbeats carry the new
    // time (right after a jump of years every host looks down, and the
    // start builds at once).
    advance(&cloud.server, offset_for(Y2040 - 5)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    advance(&cloud.server, 10).await;
    wait_lease(&owner, &lease_id, "ACTIVE").await;
    let built = wait_status(&nova_admin, &id, "ACTIVE").await;
    assert_eq!(built["OS-EXT-SRV-ATTR:host"], json!("r0"), "{built}");
    assert_eq!(built["flavor"]["original_name"], json!("small"), "the server keeps the flavor it was booted with");
    let allocations = placement.get(&format!("/allocations/{id}")).await.body;
    let class = format!("CUSTOM_RESERVATION_{}", rid.to_uppercase().replace('-', "_"));
    let used: Vec<Value> = allocations["allocations"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|a| a["resources"].get(&class).cloned())
        .collect();
    assert_eq!(used, vec![json!(1)], "the claim consumed the held slot: {allocations}");
    assert_eq!(listed(&nova).await, vec![(id.clone(), "ACTIVE".to_owned())]);

    // The end (2090): the server is deleted, then the lease ends.
    advance(&cloud.server, 51 * 365 * 86_400).await;
    wait_lease(&owner, &lease_id, "TERMINATED").await;
    wait_gone(&nova_admin, &id).await;
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (0, 0));
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserved_boots_racing_for_the_last_slot_admit_exactly_one() {
    let mut cloud = Cloud::start("rsv-race", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let nova_admin = cloud.nova("admin");
    enrol(&admin, "r0").await;
    let flavor = nova_admin.flavor("half", 2, 512, 1).await;
    let image = nova_admin.image("img", json!({})).await;

    // One of the host's two slots is taken first.
    let first = cloud.nova("p0:proj0").boot("first", &flavor, &image, reserved_hints(&lease_params("l0"), false)).await;
    assert_eq!(first.status, 202, "{:?}", first.body);

    // Eight boots from eight projects race for the last one (on
    // PostgreSQL, half of them through a second process).
    let pg = std::env::var("TEST_DATABASE_URL").is_ok();
    if pg {
        cloud.add_process(&[]).await;
    }
    let tasks: Vec<_> = (1..=8)
        .map(|i| {
            let base = if pg && i % 2 == 1 { &cloud.siblings[0].base } else { &cloud.server.base };
            let nova = Nova::new(base, &format!("p{i}:proj{i}"));
            let (flavor, image) = (flavor.clone(), image.clone());
            tokio::spawn(async move {
                nova.boot(&format!("vm{i}"), &flavor, &image, reserved_hints(&lease_params(&format!("l{i}")), false))
                    .await
            })
        })
        .collect();
    let mut admitted = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let answer = task.await.unwrap();
        if answer.status == 202 {
            admitted.push(i + 1);
        } else {
            assert_nova_error(&answer, 409, "Not enough hosts available");
        }
    }
    assert_eq!(admitted.len(), 1, "exactly one boot gets the last slot: {admitted:?}");

    // The refused ones wrote nothing: no server, no lease, no quota.
    let servers = nova_admin.get("/servers/detail?all_tenants=1").await.body;
    let statuses: Vec<&Value> = servers["servers"].as_array().unwrap().iter().map(|s| &s["status"]).collect();
    assert_eq!(statuses, vec![&json!("RESERVED"); 2], "{servers}");
    assert_eq!(leases(&admin).await.len(), 2);
    for i in 1..=8 {
        let want = if admitted.contains(&i) { (1, 2) } else { (0, 0) };
        assert_eq!(quota_in_use(&nova_admin, &format!("proj{i}")).await, want, "proj{i}");
    }
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_reserved_hints_are_refused_and_deleting_a_reserved_server_frees_its_lease() {
    let mut cloud = Cloud::start("rsv-bad", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let nova_admin = cloud.nova("admin");
    let nova = cloud.nova("bob:proj");
    enrol(&admin, "r0").await;
    let flavor = nova_admin.flavor("half", 2, 512, 1).await;
    let image = nova_admin.image("img", json!({})).await;

    let bad: Vec<(Value, &str)> = vec![
        (json!({"os:scheduler_hints": {"reserved": "True"}}), "lease_params"),
        (json!({"os:scheduler_hints": {"reserved": "perhaps", "lease_params": lease_params("x")}}), "not a boolean"),
        (json!({"os:scheduler_hints": {"reserved": "True", "lease_params": "{not json"}}), "not JSON"),
        (
            json!({"os:scheduler_hints": {"reserved": "True", "lease_params": json!({"end": WINDOW.1}).to_string()}}),
            "start is missing",
        ),
        (
            json!({"os:scheduler_hints": {"reserved": "True",
                   "lease_params": json!({"start": WINDOW.1, "end": WINDOW.0}).to_string()}}),
            "End date must be later than start date.",
        ),
        (
            json!({"os:scheduler_hints": {"reserved": "True",
                   "lease_params": json!({"start": "2001-01-01 00:00", "end": WINDOW.1}).to_string()}}),
            "Start date must be later than current date",
        ),
        (
            json!({"os:scheduler_hints": {"reserved": "True",
                   "lease_params": json!({"start": "01/02/2040", "end": WINDOW.1}).to_string()}}),
            "is an invalid date",
        ),
    ];
    for (extra, text) in bad {
        let answer = nova.boot("bad", &flavor, &image, extra.clone()).await;
        assert_nova_error(&answer, 400, text);
    }
    assert_eq!(listed(&nova).await, vec![], "nothing written");
    assert!(leases(&admin).await.is_empty(), "no lease written");
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (0, 0));

    // Two servers in one request: one lease of two slots, the host's two.
    let two = nova.boot("pair", &flavor, &image, {
        let mut extra = reserved_hints(&lease_params("pair"), false);
        extra["min_count"] = json!(2);
        extra["max_count"] = json!(2);
        extra
    });
    let two = two.await;
    assert_eq!(two.status, 202, "{:?}", two.body);
    let ids: Vec<String> = listed(&nova)
        .await
        .into_iter()
        .map(|(id, status)| {
            assert_eq!(status, "RESERVED");
            id
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (2, 4));
    let lease = &leases(&admin).await[0];
    assert_eq!(lease["reservations"][0]["amount"], json!(2), "{lease}");
    let full = nova.boot("full", &flavor, &image, reserved_hints(&lease_params("full"), false)).await;
    assert_nova_error(&full, 409, "Not enough hosts available");

    // The lease follows its servers: it cannot shrink below them nor
    // change their slot shape (nothing written).
    let (lease_id, rid) = (lease["id"].as_str().unwrap().to_owned(), lease["reservations"][0]["id"].clone());
    let path = format!("/reservation/v1/leases/{lease_id}");
    let shrink = admin.put(&path, &json!({"reservations": [{"id": rid, "amount": 1}]})).await;
    assert_blazar_error(&shrink, 400, "cannot go below 2");
    let reshape = admin.put(&path, &json!({"reservations": [{"id": rid, "vcpus": 1}]})).await;
    assert_blazar_error(&reshape, 400, "follow their flavor");
    assert_eq!(leases(&admin).await[0]["reservations"][0]["amount"], json!(2));

    // Actions wait for the server to exist.
    let stop = nova.post(&format!("/servers/{}/action", ids[0]), &json!({"os-stop": null})).await;
    assert_nova_error(&stop, 409, "while it is in vm_state reserved");

    // Deleting one gives its slot back; deleting the other deletes the lease.
    let answer = nova.delete(&format!("/servers/{}", ids[0])).await;
    assert_eq!(answer.status, 204, "{:?}", answer.body);
    assert_eq!(nova.get(&format!("/servers/{}", ids[0])).await.status, 404);
    let lease = &leases(&admin).await[0];
    assert_eq!(lease["reservations"][0]["amount"], json!(1), "{lease}");
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (1, 2));
    let answer = nova.delete(&format!("/servers/{}", ids[1])).await;
    assert_eq!(answer.status, 204, "{:?}", answer.body);
    assert!(leases(&admin).await.is_empty(), "the lease went with its last server");
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (0, 0));
    assert_eq!(listed(&nova).await, vec![]);

    // The capacity is free again: both slots can be booked.
    let again = nova.boot("again", &flavor, &image, {
        let mut extra = reserved_hints(&lease_params("again"), true);
        extra["max_count"] = json!(2);
        extra
    });
    assert_eq!(again.await.status, 202);

    // Deleting the lease through Blazar's API takes its reserved servers.
    let lease_id = leases(&admin).await[0]["id"].as_str().unwrap().to_owned();
    let deleted = admin.call("DELETE", &format!("/reservation/v1/leases/{lease_id}"), None).await;
    assert_eq!(deleted.status, 204, "{:?}", deleted.body);
    assert_eq!(listed(&nova).await, vec![]);
    assert_eq!(quota_in_use(&nova_admin, "proj").await, (0, 0));
    cloud.check_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_interrupted_by_kill9_builds_the_reserved_server_once() {
    let mut cloud = Cloud::start("rsv-srv-crash", &[]).await;
    cloud.add_agent(Hosts::new("r", 1, &["--vcpus", "4", "--cpu-ratio", "1"])).await;
    let admin = rsv(&cloud.server, "admin");
    let nova = cloud.nova("admin");
    enrol(&admin, "r0").await;
    let flavor = nova.flavor("small", 1, 256, 1).await;
    let image = nova.image("img", json!({})).await;
    cloud.test_hook("hold", json!({"point": "lease-event"})).await;
    let params = json!({"name": "crash", "start": "now", "end": "2049-01-01 00:00"}).to_string();
    let reply = nova.boot("vm", &flavor, &image, reserved_hints(&params, false)).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let id = reply.body["server"]["id"].as_str().unwrap().to_owned();
    let lease_id = leases(&admin).await[0]["id"].as_str().unwrap().to_owned();
    wait_lease(&admin, &lease_id, "STARTING").await;
    assert_eq!(nova.get(&format!("/servers/{id}")).await.body["server"]["status"], json!("RESERVED"));

    // kill -9 in the middle of the start; the new process redoes it once.
    cloud.restart().await;
    let admin = rsv(&cloud.server, "admin");
    let nova = cloud.nova("admin");
    wait_lease(&admin, &lease_id, "ACTIVE").await;
    let built = wait_status(&nova, &id, "ACTIVE").await;
    assert_eq!(built["OS-EXT-SRV-ATTR:host"], json!("r0"), "{built}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(cloud.server.metric("berth_lease_events_done_total").await, 1, "the start ran once in the new process");
    let servers = nova.all_servers().await;
    assert_eq!(servers.len(), 1, "{servers:?}");
    let actions = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    assert_eq!(actions["instanceActions"].as_array().map(Vec::len), Some(1), "built once: {actions}");
    cloud.check_invariants().await;
}
