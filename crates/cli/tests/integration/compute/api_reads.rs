//! Issue 37, the read-mostly resources Tempest found missing, each as
//! Nova 34 answers it: `extensions`, `os-quota-class-sets`,
//! `os-server-external-events`, `os-server-password`, `diagnostics`,
//! `os-simple-tenant-usage`, `os-instance_usage_audit_log`, `os-hosts`
//! and the hypervisor routes of older microversions (`statistics`,
//! `uptime`, `search`, `servers`), `os-networks`' default network, with
//! their microversion limits.

use serde_json::{json, Value};

use super::moves::{setup, FOUR};
use super::support::{wait_status, Cloud, Hosts, Nova};

fn message(answer: &Value) -> String {
    answer.as_object().and_then(|o| o.values().next()).and_then(|f| f["message"].as_str()).unwrap_or("").to_owned()
}

/// `extensions`, quota classes, external events, the server password and
/// diagnostics.
#[tokio::test]
async fn extensions_quota_classes_events_password_and_diagnostics() {
    let mut cloud = Cloud::start("reads-misc", &[]).await;
    cloud.add_agent(Hosts::new("x", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");

    // Extensions: Nova's fixed list, to anyone.
    let list = alice.get("/extensions").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["extensions"].as_array().map(Vec::len), Some(99));
    let one = alice.get("/extensions/os-consoles").await;
    assert_eq!(one.status, 200);
    assert_eq!(one.body["extension"]["name"], "Consoles");
    assert_eq!(alice.get("/extensions/nope").await.status, 404);
    assert_eq!(alice.at("2.102").get("/extensions?x=1").await.status, 400);
    assert_eq!(alice.at("2.101").get("/extensions?x=1").await.status, 200);

    // Quota classes: `default` shows and changes every project's defaults.
    assert_eq!(alice.get("/os-quota-class-sets/default").await.status, 403);
    let shown = admin.at("2.57").get("/os-quota-class-sets/default").await;
    assert_eq!(shown.status, 200);
    assert_eq!(shown.body["quota_class_set"]["id"], "default");
    assert_eq!(shown.body["quota_class_set"]["cores"], 20);
    assert!(shown.body["quota_class_set"].get("injected_files").is_none(), "{}", shown.body);
    assert!(shown.body["quota_class_set"].get("server_groups").is_some());
    let old = admin.at("2.1").get("/os-quota-class-sets/default").await.body["quota_class_set"].clone();
    assert!(old.get("server_groups").is_none() && old.get("floating_ips").is_some(), "{old}");
    for bad in [json!({"quota_class_set": {"cores": -2}}), json!({"quota_class_set": {"nope": 1}}), json!({"cores": 1})]
    {
        assert_eq!(admin.put("/os-quota-class-sets/default", &bad).await.status, 400, "{bad}");
    }
    let update = json!({"quota_class_set": {"cores": 30, "ram": "40960"}});
    let updated = admin.put("/os-quota-class-sets/default", &update).await;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
    assert_eq!(updated.body["quota_class_set"]["cores"], 30);
    assert!(updated.body["quota_class_set"].get("id").is_none());
    let defaults = alice.get("/os-quota-sets/proj/defaults").await.body["quota_set"].clone();
    assert_eq!((defaults["cores"].clone(), defaults["ram"].clone()), (json!(30), json!(40960)));

    // A server to talk about.
    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 2, 512, 1).await;
    let id = alice.boot_id("vm", &flavor, &image).await;
    wait_status(&alice, &id, "ACTIVE").await;

    // External events: accepted for a placed server, 404 inside a 207 for
    // an unknown one; admins (or services) only.
    let unknown = "8b7a6f2e-0000-4000-8000-000000000001";
    let events = json!({"events": [
        {"name": "network-changed", "server_uuid": id},
        {"name": "network-vif-plugged", "server_uuid": unknown, "tag": "port"},
    ]});
    assert_eq!(alice.post("/os-server-external-events", &events).await.status, 403);
    let answer = admin.post("/os-server-external-events", &events).await;
    assert_eq!(answer.status, 207, "{:?}", answer.body);
    assert_eq!(answer.body["events"][0]["code"], 200);
    assert_eq!(answer.body["events"][0]["status"], "completed");
    assert_eq!(
        answer.body["events"][1],
        json!({"name": "network-vif-plugged", "server_uuid": unknown, "tag": "port", "status": "failed", "code": 404})
    );
    let one = json!({"events": [{"name": "network-changed", "server_uuid": id}]});
    assert_eq!(admin.post("/os-server-external-events", &one).await.status, 200);
    let power = json!({"events": [{"name": "power-update", "server_uuid": id}]});
    assert_eq!(admin.at("2.75").post("/os-server-external-events", &power).await.status, 400);
    let answer = admin.at("2.76").post("/os-server-external-events", &power).await;
    assert_eq!((answer.status, answer.body["events"][0]["code"].clone()), (207, json!(400)), "tag required");
    for bad in [
        json!({"events": []}),
        json!({"events": [{"name": "network-changed"}]}),
        json!({"events": [{"name": "network-changed", "server_uuid": "x"}]}),
    ] {
        assert_eq!(admin.post("/os-server-external-events", &bad).await.status, 400, "{bad}");
    }
    assert_eq!(wait_status(&alice, &id, "ACTIVE").await["status"], "ACTIVE", "events change nothing");

    // The server password: always empty here; clearing it is a 204.
    let password = alice.get(&format!("/servers/{id}/os-server-password")).await;
    assert_eq!((password.status, password.body.clone()), (200, json!({"password": ""})));
    assert_eq!(alice.delete(&format!("/servers/{id}/os-server-password")).await.status, 204);
    assert_eq!(cloud.nova("bob:other").get(&format!("/servers/{id}/os-server-password")).await.status, 404);
    assert_eq!(alice.get(&format!("/servers/{unknown}/os-server-password")).await.status, 404);

    // Diagnostics: admin only; the 2.48 shape, a flat object before.
    assert_eq!(alice.get(&format!("/servers/{id}/diagnostics")).await.status, 403);
    let diagnostics = admin.at("2.48").get(&format!("/servers/{id}/diagnostics")).await;
    assert_eq!(diagnostics.status, 200, "{:?}", diagnostics.body);
    let d = &diagnostics.body;
    assert_eq!(
        (d["state"].clone(), d["driver"].clone(), d["num_cpus"].clone()),
        (json!("running"), json!("libvirt"), json!(2))
    );
    assert_eq!(d["memory_details"], json!({"maximum": 512, "used": 0}));
    assert_eq!(d["cpu_details"].as_array().map(Vec::len), Some(2));
    assert_eq!(d["nic_details"], json!([]));
    let flat = admin.at("2.47").get(&format!("/servers/{id}/diagnostics")).await.body;
    assert_eq!(flat["memory"], 512 * 1024, "{flat}");
    assert_eq!(admin.get(&format!("/servers/{unknown}/diagnostics")).await.status, 404);
    cloud.check_invariants().await;
}

/// Usage reports and the usage audit log.
#[tokio::test]
async fn tenant_usage_and_audit_log() {
    let mut cloud = Cloud::start("reads-usage", &[]).await;
    cloud.add_agent(Hosts::new("u", 2, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 2, 512, 1).await;
    let first = alice.boot_id("vm1", &flavor, &image).await;
    let second = alice.boot_id("vm2", &flavor, &image).await;
    let mine = admin.boot_id("admin-vm", &flavor, &image).await;
    for id in [&first, &second, &mine] {
        wait_status(&admin, id, "ACTIVE").await;
    }
    assert_eq!(alice.delete(&format!("/servers/{second}")).await.status, 204);
    super::support::wait_gone(&alice, &second).await;

    let period = "start=2000-01-01T00:00:00&end=2100-01-01T00:00:00.5";
    assert_eq!(alice.get(&format!("/os-simple-tenant-usage?{period}")).await.status, 403);
    // The server answers 404 once its mapping is forgotten; its cell row
    // is soft-deleted just after (the cross-database order), and only
    // then does the report list it as deleted: wait for that, bounded.
    let mut all = admin.get(&format!("/os-simple-tenant-usage?{period}&detailed=1")).await;
    for _ in 0..100 {
        let listed =
            all.body["tenant_usages"].as_array().into_iter().flatten().any(|u| {
                u["server_usages"].as_array().into_iter().flatten().any(|s| s["instance_id"] == second.as_str())
            });
        if listed {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        all = admin.get(&format!("/os-simple-tenant-usage?{period}&detailed=1")).await;
    }
    assert_eq!(all.status, 200, "{:?}", all.body);
    let usages = all.body["tenant_usages"].as_array().cloned().unwrap_or_default();
    assert_eq!(usages.len(), 2, "{usages:?}");
    let proj = usages.iter().find(|u| u["tenant_id"] == "proj").expect("proj");
    let servers = proj["server_usages"].as_array().cloned().unwrap_or_default();
    assert_eq!(servers.len(), 2, "the deleted server counts: {servers:?}");
    let gone = servers.iter().find(|s| s["instance_id"] == second.as_str()).expect("deleted one");
    assert_eq!(gone["state"], "terminated");
    assert!(gone["ended_at"].is_string());
    assert_eq!(proj["start"], "2000-01-01T00:00:00.000000");
    assert_eq!(proj["server_usages"][0]["vcpus"], 2);
    let brief = admin.get(&format!("/os-simple-tenant-usage?{period}")).await.body;
    assert!(brief["tenant_usages"][0].get("server_usages").is_none(), "{brief}");

    let own = alice.get(&format!("/os-simple-tenant-usage/proj?{period}")).await;
    assert_eq!(own.status, 200, "{:?}", own.body);
    assert_eq!(own.body["tenant_usage"]["tenant_id"], "proj");
    assert_eq!(own.body["tenant_usage"]["server_usages"].as_array().map(Vec::len), Some(2));
    assert_eq!(alice.get(&format!("/os-simple-tenant-usage/admin?{period}")).await.status, 403);
    let none = admin.get(&format!("/os-simple-tenant-usage/nobody?{period}")).await;
    assert_eq!((none.status, none.body.clone()), (200, json!({"tenant_usage": {}})));
    // The empty tenant id Tempest asks for is no resource.
    assert_eq!(admin.get(&format!("/os-simple-tenant-usage/?{period}")).await.status, 404);
    let backwards = admin.get("/os-simple-tenant-usage/proj?start=2100-01-01T00:00:00&end=2000-01-01T00:00:00").await;
    assert_eq!(backwards.status, 400);
    assert_eq!(message(&backwards.body), "Invalid start time. The start time cannot occur after the end time.");
    let bad = admin.get("/os-simple-tenant-usage?start=yesterday").await;
    assert_eq!(
        (bad.status, message(&bad.body)),
        (400, "Invalid datetime string: Datetime is in invalid format".to_owned())
    );
    assert_eq!(admin.at("2.75").get(&format!("/os-simple-tenant-usage?{period}&x=1")).await.status, 400);
    assert_eq!(admin.at("2.74").get(&format!("/os-simple-tenant-usage?{period}&x=1")).await.status, 200);

    // 2.40 pages over servers: one at a time, with a `next` link.
    let page = admin.at("2.40").get(&format!("/os-simple-tenant-usage/proj?{period}&limit=1")).await.body;
    assert_eq!(page["tenant_usage"]["server_usages"].as_array().map(Vec::len), Some(1), "{page}");
    let next = page["tenant_usage_links"][0]["href"].as_str().expect("next link").to_owned();
    let marker = page["tenant_usage"]["server_usages"][0]["instance_id"].as_str().expect("id").to_owned();
    assert!(next.contains(&format!("marker={marker}")), "{next}");
    let rest = admin.at("2.40").get(&format!("/os-simple-tenant-usage/proj?{period}&limit=1&marker={marker}")).await;
    assert_ne!(rest.body["tenant_usage"]["server_usages"][0]["instance_id"], json!(marker));
    let missing = admin.at("2.40").get(&format!("/os-simple-tenant-usage?{period}&marker=nope")).await;
    assert_eq!(missing.status, 400);

    // The audit log: nothing ran; both compute hosts are listed as not run.
    assert_eq!(alice.get("/os-instance_usage_audit_log").await.status, 403);
    let log = admin.get("/os-instance_usage_audit_log").await;
    assert_eq!(log.status, 200, "{:?}", log.body);
    let body = &log.body["instance_usage_audit_logs"];
    assert_eq!(body["num_hosts"], 2);
    assert_eq!(body["hosts_not_run"], json!(["u0", "u1"]));
    assert_eq!(body["overall_status"], "0 of 2 hosts done. 0 errors.");
    let before = admin.get("/os-instance_usage_audit_log/2026-11-28%2022%3A03%3A37").await;
    assert_eq!(before.status, 200, "{:?}", before.body);
    assert_eq!(before.body["instance_usage_audit_log"]["period_beginning"], "2026-10-01 00:00:00");
    assert_eq!(before.body["instance_usage_audit_log"]["period_ending"], "2026-11-01 00:00:00");
    let invalid = admin.get("/os-instance_usage_audit_log/invalid_time").await;
    assert_eq!((invalid.status, message(&invalid.body)), (400, "Invalid timestamp for date invalid_time".to_owned()));
    cloud.check_invariants().await;
}

async fn hypervisors(nova: &Nova) -> Vec<Value> {
    nova.at("2.1").get("/os-hypervisors").await.body["hypervisors"].as_array().cloned().unwrap_or_default()
}

/// `os-hosts` (until 2.42) and the hypervisor routes Nova removed at 2.53
/// (`search`, `servers`) and 2.88 (`statistics`, `uptime`).
#[tokio::test]
async fn hosts_and_old_hypervisor_routes() {
    let mut cloud = Cloud::start("reads-hosts", &[]).await;
    cloud.add_agent(Hosts::new("h", 2, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 1, 512, 1).await;
    let id = alice.boot_id("vm", &flavor, &image).await;
    let server = wait_status(&alice, &id, "ACTIVE").await;
    let host = admin.get(&format!("/servers/{id}")).await.body["server"]["OS-EXT-SRV-ATTR:host"]
        .as_str()
        .expect("host")
        .to_owned();
    assert_eq!(server["status"], "ACTIVE");

    // Statistics, until 2.87.
    let old = admin.at("2.87");
    assert_eq!(alice.at("2.87").get("/os-hypervisors/statistics").await.status, 403);
    let stats = old.get("/os-hypervisors/statistics").await;
    assert_eq!(stats.status, 200, "{:?}", stats.body);
    let s = &stats.body["hypervisor_statistics"];
    assert_eq!((s["count"].clone(), s["vcpus"].clone(), s["vcpus_used"].clone()), (json!(2), json!(8), json!(1)));
    assert_eq!(s["running_vms"], 1);
    assert_eq!(s["free_ram_mb"], s["memory_mb"].as_i64().unwrap_or(0) - 512);
    assert_eq!(admin.at("2.88").get("/os-hypervisors/statistics").await.status, 404);

    // Uptime, until 2.87, by integer id before 2.53 and uuid after.
    let listed = hypervisors(&admin).await;
    let int_id = listed[0]["id"].as_i64().expect("integer id");
    let uptime = admin.at("2.1").get(&format!("/os-hypervisors/{int_id}/uptime")).await;
    assert_eq!(uptime.status, 200, "{:?}", uptime.body);
    assert!(uptime.body["hypervisor"]["uptime"].as_str().is_some_and(|u| u.contains(" up ")), "{}", uptime.body);
    let uuids = admin.at("2.53").get("/os-hypervisors").await.body["hypervisors"].clone();
    let uuid = uuids[0]["id"].as_str().expect("uuid").to_owned();
    assert_eq!(old.get(&format!("/os-hypervisors/{uuid}/uptime")).await.status, 200);
    assert_eq!(old.get("/os-hypervisors/nope/uptime").await.status, 400);
    let missing = admin.at("2.1").get("/os-hypervisors/999/uptime").await;
    assert_eq!(
        (missing.status, message(&missing.body)),
        (404, "Hypervisor with ID '999' could not be found.".to_owned())
    );
    assert_eq!(admin.at("2.88").get(&format!("/os-hypervisors/{uuid}/uptime")).await.status, 404);
    assert_eq!(alice.at("2.87").get(&format!("/os-hypervisors/{uuid}/uptime")).await.status, 403);

    // Search and servers by hostname pattern, until 2.52.
    let v252 = admin.at("2.52");
    let found = v252.get("/os-hypervisors/h/search").await;
    assert_eq!(found.status, 200, "{:?}", found.body);
    assert_eq!(found.body["hypervisors"].as_array().map(Vec::len), Some(2));
    assert!(found.body["hypervisors"][0].get("servers").is_none());
    let with = v252.get(&format!("/os-hypervisors/{host}/servers")).await;
    assert_eq!(with.status, 200, "{:?}", with.body);
    assert_eq!(with.body["hypervisors"][0]["servers"], json!([{"name": "vm", "uuid": id}]));
    let nothing = v252.get("/os-hypervisors/zzz/search").await;
    assert_eq!(
        (nothing.status, message(&nothing.body)),
        (404, "No hypervisor matching 'zzz' could be found.".to_owned())
    );
    assert_eq!(admin.at("2.53").get("/os-hypervisors/h/search").await.status, 404);
    assert_eq!(admin.at("2.53").get("/os-hypervisors/h/servers").await.status, 404);
    assert_eq!(alice.at("2.52").get("/os-hypervisors/h/servers").await.status, 403);
    // `with_servers` (2.53) lists them too.
    let listed =
        admin.at("2.53").get(&format!("/os-hypervisors?with_servers=true&hypervisor_hostname_pattern={host}")).await;
    assert_eq!(listed.body["hypervisors"][0]["servers"], json!([{"name": "vm", "uuid": id}]), "{}", listed.body);

    // os-hosts, until 2.42.
    let v242 = admin.at("2.42");
    assert_eq!(alice.at("2.42").get("/os-hosts").await.status, 403);
    let hosts = v242.get("/os-hosts").await;
    assert_eq!(hosts.status, 200, "{:?}", hosts.body);
    let names: Vec<&str> =
        hosts.body["hosts"].as_array().expect("hosts").iter().filter_map(|h| h["host_name"].as_str()).collect();
    assert!(names.contains(&"h0") && names.contains(&"h1"), "{names:?}");
    assert_eq!(hosts.body["hosts"][0]["service"], "compute");
    let zone = hosts.body["hosts"][0]["zone"].as_str().expect("zone").to_owned();
    assert_eq!(v242.get(&format!("/os-hosts?zone={zone}")).await.body["hosts"].as_array().map(Vec::len), Some(2));
    assert_eq!(v242.get("/os-hosts?zone=nowhere").await.body, json!({"hosts": []}));
    assert_eq!(v242.get("/os-hosts?zone=").await.body["hosts"].as_array().map(Vec::len), Some(2));
    assert_eq!(admin.at("2.43").get("/os-hosts").await.status, 404);

    let shown = v242.get(&format!("/os-hosts/{host}")).await;
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let resources = shown.body["host"].as_array().cloned().unwrap_or_default();
    let projects: Vec<&str> = resources.iter().filter_map(|r| r["resource"]["project"].as_str()).collect();
    assert_eq!(projects, ["(total)", "(used_now)", "(used_max)", "proj"]);
    assert_eq!(resources[0]["resource"]["cpu"], 4);
    assert_eq!(resources[3]["resource"]["memory_mb"], 512);
    let nowhere = v242.get("/os-hosts/nowhere").await;
    assert_eq!((nowhere.status, message(&nowhere.body)), (404, "Host 'nowhere' is not mapped to any cell".to_owned()));

    for bad in
        [json!({}), json!({"status": "off"}), json!({"status": "enable", "x": 1}), json!({"maintenance_mode": 1})]
    {
        assert_eq!(v242.put("/os-hosts/h0", &bad).await.status, 400, "{bad}");
    }
    assert_eq!(v242.put("/os-hosts/nowhere", &json!({"status": "disable"})).await.status, 404);
    assert_eq!(v242.put("/os-hosts/h0", &json!({"maintenance_mode": "enable"})).await.status, 501);
    assert_eq!(alice.at("2.42").put("/os-hosts/h0", &json!({"status": "disable"})).await.status, 403);
    let disabled = v242.put("/os-hosts/h0", &json!({"status": "Disable"})).await;
    assert_eq!((disabled.status, disabled.body.clone()), (200, json!({"host": "h0", "status": "disabled"})));
    let services = admin.get("/os-services?host=h0").await.body["services"].clone();
    assert_eq!(services[0]["status"], "disabled", "{services}");
    let listed: Vec<String> = v242.get("/os-hosts").await.body["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["host_name"].as_str().map(str::to_owned))
        .collect();
    assert!(!listed.contains(&"h0".to_owned()), "a disabled host is not listed: {listed:?}");
    assert_eq!(v242.put("/os-hosts/h0", &json!({"status": "enable"})).await.body["status"], "enabled");
    assert_eq!(admin.get("/os-services?host=h0").await.body["services"][0]["status"], "enabled");

    for action in ["reboot", "shutdown", "startup"] {
        assert_eq!(v242.get(&format!("/os-hosts/nowhere/{action}")).await.status, 404, "{action}");
        assert_eq!(v242.get(&format!("/os-hosts/h0/{action}")).await.status, 501, "{action}");
        assert_eq!(alice.at("2.42").get(&format!("/os-hosts/h0/{action}")).await.status, 403, "{action}");
    }
    cloud.check_invariants().await;
}

/// `os-networks` (2.1–2.35): the one default network, Nova's view of it
/// (admins see nova-network's other fields, all null), 404 for any other
/// id and from 2.36; a boot may name it (no port, no fixed address) and
/// the server has no addresses, as with `networks: auto`.
#[tokio::test]
async fn os_networks_lists_the_default_network_a_boot_may_name() {
    let mut cloud = Cloud::start("reads-networks", &[]).await;
    cloud.add_agent(Hosts::new("n", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");

    let listed = alice.at("2.35").get("/os-networks").await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let networks = listed.body["networks"].as_array().cloned().unwrap_or_default();
    assert_eq!(networks.len(), 1, "{:?}", listed.body);
    let network = networks[0].clone();
    assert_eq!(network["label"], "default", "{network}");
    assert!(network["cidr"].is_null() && network.get("bridge").is_none(), "{network}");
    let net = network["id"].as_str().expect("id").to_owned();
    let shown = alice.at("2.35").get(&format!("/os-networks/{net}")).await;
    assert_eq!((shown.status, shown.body["network"].clone()), (200, network.clone()));
    let as_admin = admin.at("2.35").get(&format!("/os-networks/{net}")).await.body["network"].clone();
    assert!(as_admin.get("bridge").is_some_and(Value::is_null) && as_admin["label"] == "default", "{as_admin}");
    let missing = alice.at("2.35").get("/os-networks/8b7a6f2e-0000-4000-8000-000000000002").await;
    assert_eq!((missing.status, message(&missing.body)), (404, "Network not found".to_owned()));
    assert_eq!(alice.at("2.36").get("/os-networks").await.status, 404);
    assert_eq!(alice.at("2.36").get(&format!("/os-networks/{net}")).await.status, 404);

    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 1, 512, 1).await;
    let on_default = json!({"networks": [{"uuid": net}]});
    let answer = alice.boot("vm", &flavor, &image, on_default).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let id = answer.body["server"]["id"].as_str().expect("id").to_owned();
    let server = wait_status(&alice, &id, "ACTIVE").await;
    assert_eq!(server["addresses"], json!({}));
    for refused in [
        json!({"networks": [{"uuid": net, "fixed_ip": "10.0.0.5"}]}),
        json!({"networks": [{"uuid": net}, {"uuid": "8b7a6f2e-0000-4000-8000-000000000002"}]}),
        json!({"networks": [{"port": "8b7a6f2e-0000-4000-8000-000000000003"}]}),
    ] {
        let answer = alice.boot("vm2", &flavor, &image, refused.clone()).await;
        assert_eq!(answer.status, 400, "{refused}: {:?}", answer.body);
    }
    cloud.check_invariants().await;
}

/// Personality files (before 2.57) are checked against the caller's
/// `injected_files`, `injected_file_path_bytes` and
/// `injected_file_content_bytes` limits on create and rebuild (403 with
/// Nova's texts, nothing booted or rebuilt); at 2.57 the key is a 400.
#[tokio::test]
async fn personality_files_are_checked_against_the_injected_file_limits() {
    let mut cloud = Cloud::start("reads-personality", &[]).await;
    cloud.add_agent(Hosts::new("p", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj").at("2.56");
    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 1, 512, 1).await;
    let files = |n: usize, path_len: usize, content_len: usize| {
        let files: Vec<Value> = (0..n)
            .map(|i| json!({"path": format!("/{i}{}", "p".repeat(path_len.saturating_sub(2))), "contents": "A".repeat(content_len)}))
            .collect();
        json!({"personality": files})
    };
    let limits = alice.get("/limits").await.body["limits"]["absolute"].clone();
    assert_eq!(limits["maxPersonality"], 5, "{limits}");
    for (extra, text) in [
        (files(6, 10, 8), "Personality file limit exceeded"),
        (files(1, 256, 8), "Personality file path exceeds maximum 255"),
        (files(1, 10, 10244), "Personality file content exceeds maximum 10240"),
    ] {
        let answer = alice.boot("vm", &flavor, &image, extra).await;
        assert_eq!((answer.status, message(&answer.body)), (403, text.to_owned()));
    }
    let plain =
        alice.boot("vm", &flavor, &image, json!({"personality": [{"path": "/p", "contents": "not base64!"}]})).await;
    assert_eq!(plain.status, 400, "{:?}", plain.body);
    assert_eq!(alice.get("/servers").await.body["servers"], json!([]), "nothing booted");
    let answer = alice.boot("vm", &flavor, &image, files(5, 255, 10240)).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let id = answer.body["server"]["id"].as_str().expect("id").to_owned();
    wait_status(&alice, &id, "ACTIVE").await;
    assert_eq!(alice.at("2.57").boot("vm2", &flavor, &image, files(1, 10, 8)).await.status, 400);

    // The project's own limit, on rebuild too.
    let set = admin.at("2.56").put("/os-quota-sets/proj", &json!({"quota_set": {"injected_files": 1}})).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    let mut rebuild = files(2, 10, 8);
    rebuild["imageRef"] = json!(image);
    let answer = alice.post(&format!("/servers/{id}/action"), &json!({"rebuild": rebuild})).await;
    assert_eq!((answer.status, message(&answer.body)), (403, "Personality file limit exceeded".to_owned()));
    assert_eq!(alice.get(&format!("/servers/{id}")).await.body["server"]["status"], "ACTIVE", "not rebuilt");
    let mut rebuild = files(1, 10, 8);
    rebuild["imageRef"] = json!(image);
    let answer = alice.post(&format!("/servers/{id}/action"), &json!({"rebuild": rebuild})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    wait_status(&alice, &id, "ACTIVE").await;
    cloud.check_invariants().await;
}

/// `os-instance-actions` of a deleted server: from 2.21 its `create` and
/// `delete` actions, and one action with its events, to its project and to
/// admins (another project: 404); before 2.21 the server is not found.
#[tokio::test]
async fn instance_actions_of_a_deleted_server_from_2_21() {
    let mut cloud = Cloud::start("reads-deleted-actions", &[]).await;
    cloud.add_agent(Hosts::new("d", 1, FOUR)).await;
    let admin = cloud.nova("admin");
    let alice = cloud.nova("alice:proj");
    let image = setup(&admin).await;
    let flavor = admin.flavor("small", 1, 512, 1).await;
    let id = alice.boot_id("vm", &flavor, &image).await;
    wait_status(&alice, &id, "ACTIVE").await;
    assert_eq!(alice.delete(&format!("/servers/{id}")).await.status, 204);
    super::support::wait_gone(&alice, &id).await;

    let path = format!("/servers/{id}/os-instance-actions");
    for nova in [&alice, &admin] {
        let listed = nova.at("2.21").get(&path).await;
        assert_eq!(listed.status, 200, "{:?}", listed.body);
        let mut names: Vec<String> = listed.body["instanceActions"]
            .as_array()
            .expect("actions")
            .iter()
            .map(|a| a["action"].as_str().unwrap_or("").to_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["create", "delete"], "{:?}", listed.body);
    }
    let listed = alice.at("2.21").get(&path).await.body;
    let delete =
        listed["instanceActions"].as_array().expect("actions").iter().find(|a| a["action"] == "delete").cloned();
    let request_id = delete.expect("a delete action")["request_id"].as_str().expect("request_id").to_owned();
    let shown = alice.at("2.21").get(&format!("{path}/{request_id}")).await;
    assert_eq!(
        (shown.status, shown.body["instanceAction"]["action"].clone()),
        (200, json!("delete")),
        "{:?}",
        shown.body
    );
    assert_eq!(alice.at("2.20").get(&path).await.status, 404);
    assert_eq!(cloud.nova("bob:other").at("2.21").get(&path).await.status, 404);
    cloud.check_invariants().await;
}
