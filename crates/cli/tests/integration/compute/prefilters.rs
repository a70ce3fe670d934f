//! Scheduler pre-filters that become placement query terms: tenant
//! isolation by aggregate, availability zones, a disabled service's host
//! (excluded at once through COMPUTE_STATUS_DISABLED), and required traits
//! from image properties.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::support::{Cloud, Hosts, Nova};

async fn aggregate(nova: &Nova, name: &str, zone: Option<&str>, hosts: &[&str], metadata: Value) -> i64 {
    let mut body = json!({"aggregate": {"name": name}});
    if let Some(zone) = zone {
        body["aggregate"]["availability_zone"] = json!(zone);
    }
    let created = nova.post("/os-aggregates", &body).await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let id = created.body["aggregate"]["id"].as_i64().expect("id");
    for host in hosts {
        let added = nova.post(&format!("/os-aggregates/{id}/action"), &json!({"add_host": {"host": host}})).await;
        assert_eq!(added.status, 200, "{:?}", added.body);
    }
    if metadata.as_object().is_some_and(|m| !m.is_empty()) {
        let set =
            nova.post(&format!("/os-aggregates/{id}/action"), &json!({"set_metadata": {"metadata": metadata}})).await;
        assert_eq!(set.status, 200, "{:?}", set.body);
    }
    id
}

async fn hosts_of_boots(nova: &Nova, n: usize, flavor: &str, image: &str, extra: Value) -> HashSet<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let answer = nova.boot(&format!("p{i}"), flavor, image, extra.clone()).await;
        assert_eq!(answer.status, 202, "{:?}", answer.body);
        ids.push(answer.body["server"]["id"].as_str().expect("id").to_owned());
    }
    let admin = Nova::new(&nova_base(nova), "admin");
    let mut hosts = HashSet::new();
    for id in ids {
        let server = admin.wait_settled(&id).await;
        hosts.insert(server["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("ERROR").to_owned());
    }
    hosts
}

fn nova_base(nova: &Nova) -> String {
    nova.base_url()
}

#[tokio::test]
async fn tenant_isolation_and_availability_zones() {
    let mut cloud = Cloud::start("prefilter-tenant", &["--scheduler-limit-tenants-to-placement-aggregate"]).await;
    cloud.add_agent(Hosts::new("t", 3, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    aggregate(&admin, "tenant-a", None, &["t0"], json!({"filter_tenant_id": "proj-a"})).await;
    let hosts = hosts_of_boots(&cloud.nova("u:proj-a"), 4, &flavor, &image, json!({})).await;
    assert_eq!(hosts, HashSet::from(["t0".to_owned()]), "the tenant's servers land in its aggregate");

    aggregate(&admin, "zone-1", Some("az1"), &["t1"], json!({})).await;
    let hosts = hosts_of_boots(&admin, 3, &flavor, &image, json!({"availability_zone": "az1"})).await;
    assert_eq!(hosts, HashSet::from(["t1".to_owned()]));
    let hosts = hosts_of_boots(&admin, 3, &flavor, &image, json!({"availability_zone": "nova"})).await;
    assert!(!hosts.contains("t1"), "the default zone excludes hosts of other zones: {hosts:?}");
    let zones = admin.get("/os-availability-zone").await;
    let names: HashSet<&str> = zones.body["availabilityZoneInfo"]
        .as_array()
        .expect("zones")
        .iter()
        .filter_map(|z| z["zoneName"].as_str())
        .collect();
    assert!(names.contains("az1") && names.contains("nova"), "{names:?}");
    let unknown = admin.boot("z", &flavor, &image, json!({"availability_zone": "nowhere"})).await;
    assert_eq!(unknown.status, 400, "{:?}", unknown.body);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn disabled_service_and_image_traits() {
    let mut cloud = Cloud::start("prefilter-traits", &[]).await;
    cloud.add_agent(Hosts::new("plain", 2, &[])).await;
    cloud.add_agent(Hosts::new("gold", 1, &["--traits", "CUSTOM_GOLD"])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let plain_image = admin.image("plain", json!({})).await;
    let gold_image = admin.image("gold", json!({"trait:CUSTOM_GOLD": "required"})).await;
    let hosts = hosts_of_boots(&admin, 3, &flavor, &gold_image, json!({})).await;
    assert_eq!(hosts, HashSet::from(["gold0".to_owned()]));

    // Disable plain1: no later boot lands there, from the next request on.
    let services = admin.get("/os-services?binary=nova-compute&host=plain1").await;
    let id = services.body["services"][0]["id"].as_str().expect("service uuid (2.53+)").to_owned();
    let disabled = admin
        .put(&format!("/os-services/{id}"), &json!({"status": "disabled", "disabled_reason": "maintenance"}))
        .await;
    assert_eq!(disabled.status, 200, "{:?}", disabled.body);
    assert_eq!(disabled.body["service"]["status"], "disabled");
    let hosts = hosts_of_boots(&admin, 6, &flavor, &plain_image, json!({})).await;
    assert!(!hosts.contains("plain1"), "{hosts:?}");
    let listed = admin.get("/os-services?host=plain1").await;
    assert_eq!(listed.body["services"][0]["disabled_reason"], "maintenance");
    cloud.check_invariants().await;
}

async fn traits_of(cloud: &Cloud, uuid: &str) -> (i64, Vec<String>) {
    let reply = cloud.server.client().get(&format!("/resource_providers/{uuid}/traits")).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let generation = reply.body["resource_provider_generation"].as_i64().expect("generation");
    let traits = reply.body["traits"].as_array().expect("traits").iter().map(|t| t.as_str().expect("name").to_owned());
    (generation, traits.collect())
}

/// Put `traits` on the provider; the agent's own `COMPUTE_NODE` is left
/// out on purpose, so its return shows that a registration has reported
/// since.
async fn operator_sets_traits(cloud: &Cloud, uuid: &str, traits: &[&str]) {
    let placement = cloud.server.client();
    assert_eq!(placement.put("/traits/CUSTOM_GOLD", &json!({})).await.status / 100, 2);
    let (generation, _) = traits_of(cloud, uuid).await;
    let body = json!({"resource_provider_generation": generation, "traits": traits});
    let reply = placement.put(&format!("/resource_providers/{uuid}/traits"), &body).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

async fn wait_reported(cloud: &Cloud, uuid: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, traits) = traits_of(cloud, uuid).await;
        if traits.iter().any(|t| t == "COMPUTE_NODE") {
            return traits;
        }
        assert!(std::time::Instant::now() < deadline, "the agent never reported COMPUTE_NODE again: {traits:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Issue 36: an operator's traits on a compute node survive the agent's
/// registration (after a restart of the agent, and of the control plane
/// with its agents), as nova-compute keeps every trait it does not own;
/// a flavor requiring one still finds the host.
#[tokio::test]
async fn operator_traits_survive_agent_and_server_restarts() {
    let mut cloud = Cloud::start("prefilter-op-trait", &[]).await;
    cloud.add_agent(Hosts::new("gold", 2, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f-gold", 1, 64, 1).await;
    let specs = json!({"extra_specs": {"trait:CUSTOM_GOLD": "required"}});
    let set = admin.post(&format!("/flavors/{flavor}/os-extra_specs"), &specs).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    let image = admin.image("img", json!({})).await;
    let uuid = super::moves::provider_uuid(&cloud, "gold1").await;

    operator_sets_traits(&cloud, &uuid, &["CUSTOM_GOLD", "STORAGE_DISK_SSD"]).await;
    cloud.kill_agent(0);
    cloud.restart_agent(0).await;
    let traits = wait_reported(&cloud, &uuid).await;
    for kept in ["CUSTOM_GOLD", "STORAGE_DISK_SSD"] {
        assert!(traits.iter().any(|t| t == kept), "{kept} dropped by the agent's registration: {traits:?}");
    }
    let hosts = hosts_of_boots(&admin, 2, &flavor, &image, json!({})).await;
    assert_eq!(hosts, HashSet::from(["gold1".to_owned()]));

    operator_sets_traits(&cloud, &uuid, &["CUSTOM_GOLD"]).await;
    cloud.restart().await;
    let traits = wait_reported(&cloud, &uuid).await;
    assert!(traits.iter().any(|t| t == "CUSTOM_GOLD"), "CUSTOM_GOLD dropped after a restart: {traits:?}");
    let hosts = hosts_of_boots(&cloud.nova("admin"), 1, &flavor, &image, json!({})).await;
    assert_eq!(hosts, HashSet::from(["gold1".to_owned()]));
    cloud.check_invariants().await;
}

/// `PUT /servers/{id}` with `pinned_availability_zone` (2.104): unpin,
/// re-pin to the zone the server is in (not another: 409), no change from
/// one pin to another (409, unpin first), the same value again is 200; the
/// answer and `GET` show the pin; before 2.104 the key is a 400.
#[tokio::test]
async fn pinned_availability_zone_is_unpinned_and_repinned_at_2_104() {
    let mut cloud = Cloud::start("prefilter-pin", &[]).await;
    cloud.add_agent(Hosts::new("z", 2, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    aggregate(&admin, "zone-1", Some("az1"), &["z1"], json!({})).await;
    let answer = admin.boot("pinned", &flavor, &image, json!({"availability_zone": "az1"})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let id = answer.body["server"]["id"].as_str().expect("id").to_owned();
    admin.wait_settled(&id).await;
    let nova = admin.at("2.104");
    let path = format!("/servers/{id}");
    let pin = |zone: Value| json!({"server": {"pinned_availability_zone": zone}});
    let shown = nova.get(&path).await.body["server"].clone();
    assert_eq!(
        (shown["pinned_availability_zone"].clone(), shown["OS-EXT-AZ:availability_zone"].clone()),
        (json!("az1"), json!("az1"))
    );

    let refused = nova.put(&path, &pin(json!("nova"))).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(
        refused.body["conflictingRequest"]["message"],
        "Cannot change pinned availability zone directly. Unpin first by setting pinned_availability_zone to null."
    );
    let same = nova.put(&path, &pin(json!("az1"))).await;
    assert_eq!((same.status, same.body["server"]["pinned_availability_zone"].clone()), (200, json!("az1")));
    let unpinned = nova.put(&path, &pin(Value::Null)).await;
    assert_eq!((unpinned.status, unpinned.body["server"]["pinned_availability_zone"].clone()), (200, Value::Null));
    assert_eq!(nova.get(&path).await.body["server"]["pinned_availability_zone"], Value::Null);
    let again = nova.put(&path, &pin(Value::Null)).await;
    assert_eq!((again.status, again.body["server"]["pinned_availability_zone"].clone()), (200, Value::Null));
    let elsewhere = nova.put(&path, &pin(json!("nova"))).await;
    assert_eq!(elsewhere.status, 409, "{:?}", elsewhere.body);
    assert_eq!(
        elsewhere.body["conflictingRequest"]["message"],
        "Server can only be pinned to its current availability zone 'az1', but 'nova' was requested."
    );
    assert_eq!(nova.get(&path).await.body["server"]["pinned_availability_zone"], Value::Null, "a 409 changes nothing");
    let repinned = nova.put(&path, &json!({"server": {"pinned_availability_zone": "az1", "name": "renamed"}})).await;
    assert_eq!(repinned.status, 200, "{:?}", repinned.body);
    assert_eq!(
        (repinned.body["server"]["pinned_availability_zone"].clone(), repinned.body["server"]["name"].clone()),
        (json!("az1"), json!("renamed"))
    );
    assert_eq!(nova.get(&path).await.body["server"]["pinned_availability_zone"], "az1");
    assert_eq!(admin.at("2.103").put(&path, &pin(Value::Null)).await.status, 400);
    cloud.check_invariants().await;
}
