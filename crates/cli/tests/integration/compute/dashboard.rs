//! The operator dashboard's data endpoints (`/dashboard/api/...`, issue
//! 25) against the real binary: numbers equal placement's and the
//! reservation API's, a project member sees only its project, admins'
//! views are refused to others, bad input is a 4xx. The page itself is
//! driven in a real browser by scripts/dashboard-browser-test.py.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::support::{Cloud, Hosts};
use crate::support::{Client, TestServer};

fn as_token(server: &TestServer, token: &str) -> Client {
    let mut client = server.client();
    client.token = token.to_owned();
    client
}

/// (capacity, used) of `class` on the provider named `name`, from the
/// placement API.
async fn placement_room(admin: &Client, name: &str, class: &str) -> (i64, i64) {
    let rps = admin.get(&format!("/resource_providers?name={name}")).await;
    let uuid = rps.body["resource_providers"][0]["uuid"].as_str().expect("provider").to_owned();
    let inv = admin.get(&format!("/resource_providers/{uuid}/inventories")).await.body["inventories"][class].clone();
    let used =
        admin.get(&format!("/resource_providers/{uuid}/usages")).await.body["usages"][class].as_i64().unwrap_or(0);
    let cap = ((inv["total"].as_i64().unwrap() - inv["reserved"].as_i64().unwrap()) as f64
        * inv["allocation_ratio"].as_f64().unwrap()) as i64;
    (cap, used)
}

#[tokio::test]
async fn dashboard_data_equals_the_apis_and_is_scoped_to_the_caller() {
    let mut cloud = Cloud::start("dashboard", &[]).await;
    cloud.add_agent(Hosts::new("dash", 3, &[])).await;
    let server = &cloud.server;
    let admin = as_token(server, "admin");
    let carol = as_token(server, "carol:pc");

    // The page and its assets are served by the binary, without a token.
    let page = server.client().raw("GET", "/dashboard", &[], Vec::new()).await;
    assert_eq!(page.status, 200);
    let script = server.client().raw("GET", "/dashboard/app.js", &[], Vec::new()).await;
    assert_eq!(script.status, 200);
    assert_eq!(server.client().get("/dashboard/api/config").await.body, json!({"auth_mode": "noauth2"}));

    // One host goes to the reservation pool before any server lands.
    let capacity = admin.get("/dashboard/api/capacity").await;
    assert_eq!(capacity.status, 200, "{:?}", capacity.body);
    let hosts = capacity.body["hosts"].as_array().unwrap().clone();
    assert_eq!(hosts.len(), 3);
    let pool_host = hosts[2]["host"].as_str().unwrap().to_owned();
    let enrolled = admin.post("/reservation/v1/os-hosts", &json!({"name": pool_host})).await;
    assert_eq!(enrolled.status, 201, "{:?}", enrolled.body);

    let nova = cloud.nova("admin");
    let flavor = nova.flavor("dash-f", 2, 512, 1).await;
    let image = nova.image("img", json!({})).await;
    nova.boot_id("a1", &flavor, &image).await;
    nova.boot_id("a2", &flavor, &image).await;
    cloud.nova("carol:pc").boot_id("c1", &flavor, &image).await;
    nova.wait_all_settled().await;

    // Capacity: every host's used/total VCPU is placement's; the pool host
    // is marked reserved.
    let capacity = admin.get("/dashboard/api/capacity").await.body;
    let mut used_total = 0;
    for host in capacity["hosts"].as_array().unwrap() {
        let name = host["node"].as_str().unwrap();
        let (cap, used) = placement_room(&admin, name, "VCPU").await;
        assert_eq!(host["resources"]["VCPU"], json!({"total": cap, "used": used}), "{name}");
        assert_eq!(host["reserved"], json!(host["host"] == json!(pool_host)), "{host}");
        let (state, power) =
            if host["host"] == json!(pool_host) { (json!("free"), json!("on")) } else { (Value::Null, Value::Null) };
        assert_eq!((&host["pool_state"], &host["power"]), (&state, &power), "{host}");
        assert_eq!(host["up"], json!(true));
        used_total += used;
    }
    assert_eq!(used_total, 6, "three 2-vCPU servers");
    assert_eq!(capacity["totals"]["VCPU"]["used"], json!(6));

    // A host's detail lists the servers allocated there.
    let busy =
        capacity["hosts"].as_array().unwrap().iter().find(|h| h["resources"]["VCPU"]["used"] != json!(0)).unwrap();
    let detail = admin.get(&format!("/dashboard/api/hosts/{}", busy["uuid"].as_str().unwrap())).await;
    assert_eq!(detail.status, 200);
    let allocated: i64 =
        detail.body["allocations"].as_array().unwrap().iter().map(|a| a["resources"]["VCPU"].as_i64().unwrap()).sum();
    assert_eq!(json!(allocated), busy["resources"]["VCPU"]["used"]);
    assert!(detail.body["allocations"].as_array().unwrap().iter().all(|a| a["server"] == json!(true)));

    // The pool host's detail shows its pool state and power.
    let pool_uuid = capacity["hosts"].as_array().unwrap().iter().find(|h| h["host"] == json!(pool_host)).unwrap()
        ["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let detail = admin.get(&format!("/dashboard/api/hosts/{pool_uuid}")).await.body;
    assert_eq!((&detail["pool"]["pool_state"], &detail["pool"]["power"]), (&json!("free"), &json!("on")), "{detail}");
    assert_eq!(detail["pool"]["next_needed"], Value::Null, "no lease yet");

    // Free capacity by flavor: the hosts outside the pool, from placement;
    // per aggregate; extra specs that no host can meet give 0.
    let mut fits = BTreeMap::new();
    for host in capacity["hosts"].as_array().unwrap() {
        let name = host["node"].as_str().unwrap().to_owned();
        let mut fit = i64::MAX;
        for (class, need) in [("VCPU", 2), ("MEMORY_MB", 512), ("DISK_GB", 1)] {
            let (cap, used) = placement_room(&admin, &name, class).await;
            fit = fit.min((cap - used) / need);
        }
        fits.insert(name, (fit, host["host"] == json!(pool_host), host["host"].as_str().unwrap().to_owned()));
    }
    let want: i64 = fits.values().filter(|(_, pool, _)| !pool).map(|(n, _, _)| n).sum();
    let pool_want: i64 = fits.values().filter(|(_, pool, _)| *pool).map(|(n, _, _)| n).sum();
    let (first_fit, _, first) = fits.values().next().unwrap().clone();
    let agg = nova.post("/os-aggregates", &json!({"aggregate": {"name": "dash-agg"}})).await;
    let agg_id = agg.body["aggregate"]["id"].clone();
    nova.post(&format!("/os-aggregates/{agg_id}/action"), &json!({"add_host": {"host": first}})).await;
    let gpu = nova.flavor("dash-gpu", 1, 256, 1).await;
    let specs = nova
        .post(&format!("/flavors/{gpu}/os-extra_specs"), &json!({"extra_specs": {"resources:CUSTOM_GPU": "1"}}))
        .await;
    assert_eq!(specs.status, 200, "{:?}", specs.body);
    let flavors = admin.get("/dashboard/api/flavors").await.body;
    let row_of = |body: &Value, name: &str| {
        body["flavors"].as_array().unwrap().iter().find(|f| f["flavor"] == json!(name)).unwrap().clone()
    };
    let row = row_of(&flavors, "dash-f");
    assert_eq!((&row["free"], &row["pool_free"]), (&json!(want), &json!(pool_want)), "{row}");
    assert_eq!(flavors["at"], flavors["now"]);
    assert_eq!(row["by_aggregate"], json!({"dash-agg": first_fit}), "{row}");
    let gpu_row = row_of(&flavors, "dash-gpu");
    assert_eq!((&gpu_row["free"], &gpu_row["needs"]["resources"]["CUSTOM_GPU"]), (&json!(0), &json!(1)), "{gpu_row}");
    let metrics = reqwest::get(format!("{}/metrics", server.base)).await.unwrap().text().await.unwrap();
    for gauge in [
        format!("berth_free_capacity_by_flavor_total{{flavor=\"dash-f\"}} {want}"),
        format!(
            "berth_free_capacity_by_flavor_and_aggregate_total{{flavor=\"dash-f\",aggregate=\"dash-agg\"}} {first_fit}"
        ),
        format!("berth_free_pool_capacity_by_flavor_total{{flavor=\"dash-f\"}} {pool_want}"),
        "berth_free_capacity_by_flavor_total{flavor=\"dash-gpu\"} 0".to_owned(),
    ] {
        assert!(metrics.lines().any(|l| l == gauge), "no {gauge:?} in /metrics");
    }

    // Leases: admin's and carol's; carol sees hers only.
    let lease = |name: &str| {
        json!({"name": name, "start_date": "2040-01-01 00:00", "end_date": "2040-01-02 00:00", "events": [],
               "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1,
                                 "hypervisor_properties": "", "resource_properties": ""}]})
    };
    let mine = admin.post("/reservation/v1/leases", &lease("admin-l")).await;
    assert_eq!(mine.status, 201, "{:?}", mine.body);
    let hers = carol
        .post(
            "/reservation/v1/leases",
            &json!({"name": "carol-l", "start_date": "2040-01-03 00:00",
        "end_date": "2040-01-04 00:00", "events": [], "reservations": [{"resource_type": "virtual:instance",
        "amount": 1, "vcpus": 1, "memory_mb": 256, "disk_gb": 1, "affinity": null, "resource_properties": ""}]}),
        )
        .await;
    assert_eq!(hers.status, 201, "{:?}", hers.body);
    let (y2040, y2040_end) = (2_208_988_800_i64, 2_208_988_800_i64 + 10 * 86_400);
    let window = format!("/dashboard/api/leases?start={y2040}&end={y2040_end}");
    let all = admin.get(&window).await.body;
    let bar = all["bars"].as_array().unwrap().iter().find(|b| b["lease"] == mine.body["lease"]["id"]).unwrap().clone();
    assert_eq!((bar["start"].as_i64(), bar["end"].as_i64()), (Some(y2040), Some(y2040 + 86_400)));
    let held = admin.get("/reservation/v1/os-hosts/allocations").await.body;
    let holder = held["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["reservations"].as_array().unwrap().iter().any(|r| r["lease_id"] == mine.body["lease"]["id"]));
    assert_eq!(holder.map(|a| a["resource_id"].clone()), Some(bar["host"].clone()));
    assert_eq!(all["leases"].as_array().unwrap().len(), 2);
    let theirs = carol.get(&window).await.body;
    let projects: Vec<&Value> = theirs["bars"].as_array().unwrap().iter().map(|b| &b["project"]).collect();
    assert!(!projects.is_empty() && projects.iter().all(|p| **p == json!("pc")), "{theirs}");
    assert_eq!(theirs["leases"].as_array().unwrap().len(), 1);
    assert_eq!(theirs["hosts"].as_array().unwrap().len(), 1, "only the host her bar is on");
    assert_eq!(theirs["hosts"][0]["pool_state"], Value::Null, "pool state is for admins");
    assert_eq!(all["hosts"][0]["pool_state"], json!("free"), "{all}");

    // Free capacity at a future time: the lease holds the only pool host
    // for 2040-01-01; before and after, the pool is free again. On-demand
    // capacity (lending off) does not change.
    let at = |t: i64| format!("/dashboard/api/flavors?at={t}");
    for (t, pool) in [(y2040 - 3600, pool_want), (y2040 + 3600, 0), (y2040 + 86_400 + 3600, pool_want)] {
        let later = admin.get(&at(t)).await.body;
        let row = row_of(&later, "dash-f");
        assert_eq!(
            (&later["at"], &row["free"], &row["pool_free"]),
            (&json!(t), &json!(want), &json!(pool)),
            "{t}: {row}"
        );
    }

    // Projects: usage against quota; carol sees her project only.
    let projects = admin.get("/dashboard/api/projects").await.body;
    let by_name: BTreeMap<String, Value> = projects["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["project"].as_str().unwrap().to_owned(), p.clone()))
        .collect();
    assert_eq!(by_name["admin"]["resources"]["instances"], json!({"used": 2, "limit": 10}));
    assert_eq!(by_name["pc"]["resources"]["cores"]["used"], json!(2));
    let hers = carol.get("/dashboard/api/projects").await.body;
    assert_eq!(hers["projects"].as_array().unwrap().len(), 1);
    assert_eq!(hers["projects"][0]["project"], json!("pc"));
    assert_eq!(hers["projects"][0]["leases"], json!(1));

    // Activity: the server's own counters.
    let activity = admin.get("/dashboard/api/activity").await.body;
    assert!(activity["counters"]["berth_compute_boots_accepted_total"].as_u64() >= Some(3), "{activity}");
    assert!(activity["latency"].as_array().is_some_and(|l| !l.is_empty()));
    for (name, at_least) in [("time_to_active", 3), ("scheduler", 1), ("claim", 1)] {
        let t = &activity["timings"][name];
        assert!(t["count"].as_u64() >= Some(at_least) && t["p99"].as_f64() >= t["p50"].as_f64(), "{name}: {t}");
        assert!(t["p50"].as_f64() > Some(0.0), "{name}: {t}");
    }
    assert_eq!(activity["boots"]["active"], activity["counters"]["berth_compute_instances_active_total"]);
    let metrics = reqwest::get(format!("{}/metrics", server.base)).await.unwrap().text().await.unwrap();
    let timed =
        format!("berth_compute_time_to_active_seconds_count {}", activity["timings"]["time_to_active"]["count"]);
    assert!(metrics.lines().any(|l| l == timed), "no {timed:?} in /metrics");

    // Who may read what, and bad input.
    let anonymous = as_token(server, "").get("/dashboard/api/session").await;
    assert_eq!(anonymous.status, 401);
    for path in ["capacity", "flavors", "activity", &format!("hosts/{}", busy["uuid"].as_str().unwrap())] {
        assert_eq!(carol.get(&format!("/dashboard/api/{path}")).await.status, 403, "{path}");
    }
    assert_eq!(carol.get("/dashboard/api/session").await.body["admin"], json!(false));
    for (path, status) in [
        ("/dashboard/api/leases?start=yesterday", 400),
        ("/dashboard/api/leases?start=100&end=50", 400),
        ("/dashboard/api/flavors?at=tomorrow", 400),
        ("/dashboard/api/flavors?at=100", 400),
        ("/dashboard/api/hosts/not-a-uuid", 400),
        ("/dashboard/api/hosts/00000000-0000-0000-0000-000000000000", 404),
        ("/dashboard/api/nothing", 404),
        ("/dashboard/nothing", 404),
    ] {
        let reply = admin.get(path).await;
        assert_eq!(reply.status, status, "{path}: {:?}", reply.body);
        assert!(reply.body["error"]["message"].is_string(), "{path}: {:?}", reply.body);
    }
    assert_eq!(admin.post("/dashboard/api/capacity", &json!({})).await.status, 405);
    assert_eq!(admin.get("/dashboard/api/login").await.status, 405);
    let login = admin.post("/dashboard/api/login", &json!({"user": "u", "password": "p", "project": "x"})).await;
    assert_eq!(login.status, 400, "no password login without Keystone: {:?}", login.body);
    cloud.check_invariants().await;
}
