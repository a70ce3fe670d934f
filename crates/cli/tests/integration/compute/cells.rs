//! Cells: listing across cells (build requests and the cells merge-sorted
//! with `uuid` as the last tie-breaker, markers anywhere; a server claimed
//! during a listing or between pages listed once), a
//! cell whose database stops answering (deadline, stubs at 2.69), disabled
//! cells and unmapped hosts never chosen.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{Cloud, Hosts, Nova};

pub(crate) async fn admin(cloud: &Cloud, method: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = crate::support::http_client()
        .request(method.parse().expect("method"), format!("{}/admin/v1{path}", cloud.server.base))
        .header("x-auth-token", "admin")
        .json(&body)
        .send()
        .await
        .expect("admin api");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn create_cell(cloud: &Cloud, name: &str, database: Option<&str>) -> String {
    let mut body = json!({"name": name});
    if let Some(url) = database {
        body["database_connection"] = json!(url);
    }
    let (status, answer) = admin(cloud, "POST", "/cells", body).await;
    assert_eq!(status, 201, "create cell {name}: {answer}");
    answer["cell"]["uuid"].as_str().expect("cell uuid").to_owned()
}

async fn boot_on(nova: &Nova, name: &str, flavor: &str, image: &str, host: &str) -> String {
    let answer = nova.boot(name, flavor, image, json!({"availability_zone": format!("nova:{host}")})).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    answer.body["server"]["id"].as_str().expect("id").to_owned()
}

fn ids(page: &Value) -> Vec<String> {
    page["servers"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn listing_pages_across_cells_and_build_requests() {
    let mut cloud = Cloud::start("cells-list", &[]).await;
    create_cell(&cloud, "cellA", None).await;
    create_cell(&cloud, "cellB", None).await;
    cloud.add_agent(Hosts::new("one", 1, &[])).await;
    cloud.add_agent(Hosts::new("a", 1, &[]).in_cell("cellA")).await;
    cloud.add_agent(Hosts::new("b", 1, &[]).in_cell("cellB")).await;
    let nova = cloud.nova("admin");
    assert_eq!(
        nova.put("/os-quota-sets/admin", &json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})).await.status,
        200
    );
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    // Boots in quick succession share created_at seconds.
    let mut expected: HashSet<String> = HashSet::new();
    for i in 0..8 {
        for host in ["one0", "a0", "b0"] {
            expected.insert(boot_on(&nova, &format!("{host}-{i}"), &flavor, &image, host).await);
        }
    }
    // The newest dozen all in one cell (a later second): a page of 10
    // then comes from that cell alone, more than its first read.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut newest = HashSet::new();
    for i in 0..12 {
        let id = boot_on(&nova, &format!("late-{i}"), &flavor, &image, "one0").await;
        newest.insert(id.clone());
        expected.insert(id);
    }
    nova.wait_all_settled().await;
    let top = ids(&nova.get("/servers?limit=10").await.body);
    assert_eq!(top.len(), 10);
    assert!(top.iter().all(|id| newest.contains(id)), "the newest page comes from the one cell: {top:?}");
    // Some build requests: the conductor is held.
    let (status, _) = admin(&cloud, "POST", "/test/hold", json!({"point": "before-schedule"})).await;
    assert_eq!(status, 204);
    for i in 0..5 {
        expected.insert(nova.boot_id(&format!("pending-{i}"), &flavor, &image).await);
    }
    let full = nova.get("/servers?limit=1000").await;
    let order = ids(&full.body);
    assert_eq!(order.len(), expected.len());
    assert_eq!(order.iter().cloned().collect::<HashSet<_>>(), expected);
    // Build requests and the cells in one (created_at desc, uuid desc)
    // order.
    let detail = nova.get("/servers/detail?limit=1000").await.body;
    let servers = detail["servers"].as_array().expect("servers").clone();
    assert_eq!(servers.iter().filter(|s| s["status"] == "BUILD").count(), 5, "the 5 build requests");
    for pair in servers.windows(2) {
        let key =
            |s: &Value| (s["created"].as_str().unwrap_or("").to_owned(), s["id"].as_str().unwrap_or("").to_owned());
        assert!(key(&pair[0]) > key(&pair[1]), "merge order: {:?} then {:?}", key(&pair[0]), key(&pair[1]));
    }
    // Pages of 7 and of 10 concatenate to the same order, no duplicate,
    // no gap.
    for size in [7, 10] {
        let mut paged: Vec<String> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let path = match &marker {
                Some(m) => format!("/servers?limit={size}&marker={m}"),
                None => format!("/servers?limit={size}"),
            };
            let page = ids(&nova.get(&path).await.body);
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= size);
            marker = page.last().cloned();
            paged.extend(page);
        }
        assert_eq!(paged, order, "pages of {size}");
    }
    // A marker in each cell and in the build requests.
    for (idx, id) in order.iter().enumerate() {
        let page = ids(&nova.get(&format!("/servers?limit=3&marker={id}")).await.body);
        let want: Vec<String> = order.iter().skip(idx + 1).take(3).cloned().collect();
        assert_eq!(page, want, "page after marker {id} (position {idx})");
    }
    let bad = nova.get(&format!("/servers?marker={}", uuid::Uuid::new_v4())).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body["badRequest"]["message"].as_str().unwrap_or("").starts_with("marker ["), "{:?}", bad.body);
    let (status, _) = admin(&cloud, "POST", "/test/release", json!({"point": "before-schedule"})).await;
    assert_eq!(status, 204);
    nova.wait_all_settled().await;
    cloud.check_invariants().await;
}

#[tokio::test]
async fn disabled_cells_and_unmapped_hosts_are_never_chosen() {
    let mut cloud = Cloud::start("cells-disabled", &[]).await;
    create_cell(&cloud, "cellX", None).await;
    cloud.add_agent(Hosts::new("one", 1, &["--vcpus", "1", "--cpu-ratio", "1.0"])).await;
    cloud.add_agent(Hosts::new("x", 2, &["--vcpus", "64"]).in_cell("cellX")).await;
    let (status, _) = admin(&cloud, "POST", "/cells/cellX/disable", json!({})).await;
    assert_eq!(status, 204);
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    for i in 0..3 {
        nova.boot_id(&format!("d{i}"), &flavor, &image).await;
    }
    let servers = nova.wait_all_settled().await;
    assert!(
        servers.iter().all(|s| !s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("").starts_with('x')),
        "disabled cell chosen"
    );
    assert_eq!(servers.iter().filter(|s| s["status"] == "ACTIVE").count(), 1);
    cloud.check_invariants().await;

    // A provider that looks like a compute node but has no host mapping
    // (reported straight to placement) is never chosen.
    let placement = cloud.server.client();
    let rogue = crate::support::provider_with_inventory(&placement, "rogue", "VCPU", 64).await;
    let inv = placement
        .put(
            &format!("/resource_providers/{rogue}/inventories"),
            &json!({"resource_provider_generation": 1, "inventories": {
                "VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}, "DISK_GB": {"total": 1000}}}),
        )
        .await;
    assert_eq!(inv.status, 200, "{:?}", inv.body);
    let id = nova.boot_id("r", &flavor, &image).await;
    assert_eq!(nova.wait_settled(&id).await["status"], "ERROR");
    let usages = placement.get(&format!("/resource_providers/{rogue}/usages")).await;
    assert_eq!(usages.body["usages"]["VCPU"], 0);
}

/// A cell whose database stops answering (PostgreSQL behind a proxy that
/// blackholes traffic): listings answer within the deadline, with stubs at
/// 2.69 and without that cell's servers before, and the other cells keep
/// serving.
#[tokio::test]
async fn unreachable_cell_is_skipped_within_the_deadline() {
    let Some(url) = std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()) else { return };
    let mut cloud = Cloud::start("cells-down", &["--cell-timeout-ms", "1000"]).await;
    let proxy = crate::support::Proxy::start(crate::support::pg_host_port(&url)).await;
    let schema = format!("downcell_{}_{}", std::process::id(), uuid::Uuid::new_v4().simple());
    let sep = if url.contains('?') { '&' } else { '?' };
    let cell_url = format!("{}{sep}schema={schema}", crate::support::via_port(&url, proxy.port));
    create_cell(&cloud, "far", Some(&cell_url)).await;
    cloud.add_agent(Hosts::new("near", 1, &[])).await;
    cloud.add_agent(Hosts::new("far", 1, &[]).in_cell("far")).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let near = boot_on(&nova, "near", &flavor, &image, "near0").await;
    let far = boot_on(&nova, "far", &flavor, &image, "far0").await;
    nova.wait_all_settled().await;
    proxy.blackhole();
    let started = Instant::now();
    let old = nova.at("2.68").get("/servers/detail").await;
    assert!(started.elapsed() < Duration::from_secs(3), "listing took {:?}", started.elapsed());
    assert_eq!(old.status, 200);
    assert_eq!(ids(&old.body), vec![near.clone()], "before 2.69 the down cell is left out");
    let stubs = nova.at("2.69").get("/servers/detail").await;
    assert_eq!(stubs.status, 200);
    let listed = stubs.body["servers"].as_array().expect("servers").clone();
    assert_eq!(listed.len(), 2);
    let stub = listed.iter().find(|s| s["id"] == far.as_str()).expect("stub of the far server");
    assert_eq!(stub["status"], "UNKNOWN");
    let shown = nova.at("2.69").get(&format!("/servers/{far}")).await;
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    assert_eq!(shown.body["server"]["status"], "UNKNOWN");
    // The near cell keeps serving at full speed meanwhile.
    let started = Instant::now();
    assert_eq!(nova.get(&format!("/servers/{near}")).await.status, 200);
    assert!(started.elapsed() < Duration::from_millis(500));
    proxy.restore();
}

/// Wait until the server's claim has moved it out of its build request
/// (`GET /servers/{id}` shows the cell row: a host).
async fn wait_claimed(nova: &Nova, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["OS-EXT-SRV-ATTR:host"].as_str().is_some_and(|h| !h.is_empty()) {
            return;
        }
        assert!(Instant::now() < deadline, "server {id} never claimed: {server}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A listing that read the build requests, then the cells, while a claim
/// moved a server from one to the other in between, listed it twice (once
/// per source). The hook holds the listing exactly in that window.
#[tokio::test]
async fn a_server_claimed_during_a_listing_is_listed_once() {
    let mut cloud = Cloud::start("cells-list-claim", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let settled = nova.boot_id("settled", &flavor, &image).await;
    nova.wait_all_settled().await;
    // The boot's row is in the cell, its claim not made yet.
    admin(&cloud, "POST", "/test/hold", json!({"point": "before-claim"})).await;
    let mut id = nova.boot_id("building", &flavor, &image).await;
    cloud.wait_held("before-claim", 1).await;
    for path in ["/servers", "/servers/detail", "/servers?limit=1", "/servers/detail?limit=2"] {
        admin(&cloud, "POST", "/test/hold", json!({"point": "listing-between-reads"})).await;
        let listing = tokio::spawn({
            let nova = nova.clone();
            let path = path.to_owned();
            async move { nova.get(&path).await }
        });
        cloud.wait_held("listing-between-reads", 1).await;
        // The claim commits while the listing is between its reads.
        admin(&cloud, "POST", "/test/release", json!({"point": "before-claim"})).await;
        wait_claimed(&nova, &id).await;
        admin(&cloud, "POST", "/test/release", json!({"point": "listing-between-reads"})).await;
        let answer = listing.await.expect("listing");
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        let listed = ids(&answer.body);
        let unique: HashSet<String> = listed.iter().cloned().collect();
        assert_eq!(unique.len(), listed.len(), "{path}: a server listed twice: {listed:?}");
        if path.contains("limit=1") {
            assert_eq!(listed.len(), 1, "{path}: {listed:?}");
        } else {
            assert_eq!(unique, HashSet::from([id.clone(), settled.clone()]), "{path}");
        }
        // A new build held before its claim for the next path.
        nova.wait_all_settled().await;
        assert_eq!(nova.delete(&format!("/servers/{id}")).await.status, 204);
        super::support::wait_gone(&nova, &id).await;
        admin(&cloud, "POST", "/test/hold", json!({"point": "before-claim"})).await;
        id = nova.boot_id("building", &flavor, &image).await;
        cloud.wait_held("before-claim", 1).await;
    }
    admin(&cloud, "POST", "/test/release", json!({"point": "before-claim"})).await;
    nova.wait_all_settled().await;
    cloud.check_invariants().await;
}

/// Pages stay consistent while a server listed as a build request is
/// claimed between two pages: not listed again on the next page, and the
/// build requests after the marker not skipped.
#[tokio::test]
async fn pages_neither_repeat_nor_skip_a_server_claimed_between_them() {
    let mut cloud = Cloud::start("cells-list-pages", &[]).await;
    cloud.add_agent(Hosts::new("h", 1, &[])).await;
    let nova = cloud.nova("admin");
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    // "a" waits before its claim (its row already in the cell), "b"
    // before scheduling: both are build requests.
    admin(&cloud, "POST", "/test/hold", json!({"point": "before-claim"})).await;
    let a = nova.boot_id("a", &flavor, &image).await;
    cloud.wait_held("before-claim", 1).await;
    admin(&cloud, "POST", "/test/hold", json!({"point": "before-schedule"})).await;
    let b = nova.boot_id("b", &flavor, &image).await;
    cloud.wait_held("before-schedule", 1).await;
    let by_name = "/servers?sort_key=display_name&sort_dir=asc";
    assert_eq!(ids(&nova.get(&format!("{by_name}&limit=2")).await.body), vec![a.clone(), b.clone()]);
    assert_eq!(ids(&nova.get(&format!("{by_name}&limit=1")).await.body), vec![a.clone()]);
    // "a" is claimed: it is a cell row now, "b" still a build request.
    admin(&cloud, "POST", "/test/release", json!({"point": "before-claim"})).await;
    wait_claimed(&nova, &a).await;
    let after_b = ids(&nova.get(&format!("{by_name}&limit=2&marker={b}")).await.body);
    assert_eq!(after_b, Vec::<String>::new(), "the page after b repeats a");
    let after_a = ids(&nova.get(&format!("{by_name}&limit=1&marker={a}")).await.body);
    assert_eq!(after_a, vec![b.clone()], "the page after a skips b");
    admin(&cloud, "POST", "/test/release", json!({"point": "before-schedule"})).await;
    nova.wait_all_settled().await;
    cloud.check_invariants().await;
}

/// Listings polled while boots are admitted and claimed concurrently
/// never show a server twice, within a page or across the pages of one
/// walk (the deterministic windows are the two tests above; this one
/// checks the whole flow).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listings_polled_during_concurrent_boots_never_repeat_a_server() {
    let mut cloud = Cloud::start("cells-list-poll", &[]).await;
    cloud.add_agent(Hosts::new("p", 4, &[])).await;
    let nova = cloud.nova("admin");
    let limits = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
    assert_eq!(nova.put("/os-quota-sets/admin", &limits).await.status, 200);
    let flavor = nova.flavor("f", 1, 64, 1).await;
    let image = nova.image("img", json!({})).await;
    let booters: Vec<_> = (0..4)
        .map(|b| {
            let (nova, flavor, image) = (nova.clone(), flavor.clone(), image.clone());
            tokio::spawn(async move {
                for i in 0..10 {
                    nova.boot_id(&format!("poll-{b}-{i}"), &flavor, &image).await;
                }
            })
        })
        .collect();
    let mut polls = 0;
    while polls < 20 || !booters.iter().all(|b| b.is_finished()) {
        polls += 1;
        let listed = ids(&nova.get("/servers/detail?limit=1000").await.body);
        let unique: HashSet<&String> = listed.iter().collect();
        assert_eq!(unique.len(), listed.len(), "a server listed twice: {listed:?}");
        let mut walked: Vec<String> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let path = match &marker {
                Some(m) => format!("/servers?limit=4&marker={m}"),
                None => "/servers?limit=4".to_owned(),
            };
            let answer = nova.get(&path).await;
            assert_eq!(answer.status, 200, "{path}: {:?}", answer.body);
            let page = ids(&answer.body);
            let Some(last) = page.last().cloned() else { break };
            walked.extend(page);
            marker = Some(last);
        }
        let unique: HashSet<&String> = walked.iter().collect();
        assert_eq!(unique.len(), walked.len(), "a server on two pages: {walked:?}");
    }
    for booter in booters {
        booter.await.expect("booter");
    }
    assert_eq!(nova.wait_all_settled().await.len(), 40);
    cloud.check_invariants().await;
}

/// The host a server is on (after `wait_status`).
fn host_of(server: &Value) -> String {
    server["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or_else(|| panic!("no host: {server}")).to_owned()
}

/// Every kind of move stays in the server's cell (Nova's
/// `requested_destination.cell`): the server's cell has room while a much
/// bigger host in another cell would win the weighing. Cold migration,
/// live migration, resize, unshelve and evacuation each land on the other
/// host of the server's cell; before, each chose the other cell's host
/// and then found no valid host.
#[tokio::test]
async fn moves_stay_in_the_servers_cell() {
    use super::evacuate::{advance, wait_migration, wait_states};
    use super::moves::{action, setup, FOUR};
    use super::support::wait_status;

    let mut cloud = Cloud::start("cells-moves", &[]).await;
    create_cell(&cloud, "cellB", None).await;
    cloud.add_agent(Hosts::new("x", 1, FOUR)).await;
    cloud.add_agent(Hosts::new("y", 1, FOUR)).await;
    let big = ["--vcpus", "64", "--cpu-ratio", "1.0", "--memory-mb", "262144", "--disk-gb", "1000"];
    cloud.add_agent(Hosts::new("big", 1, &big).in_cell("cellB")).await;
    let nova = cloud.nova("admin");
    let image = setup(&nova).await;
    let small = nova.flavor("small", 1, 512, 1).await;
    let bigger = nova.flavor("bigger", 2, 1024, 1).await;
    let id = boot_on(&nova, "vm", &small, &image, "x0").await;
    assert_eq!(host_of(&wait_status(&nova, &id, "ACTIVE").await), "x0");
    let other = |host: &str| if host == "x0" { "y0" } else { "x0" }.to_owned();
    let path = format!("/servers/{id}/action");

    // Cold migration.
    assert_eq!(action(&nova, &id, json!({"migrate": null})).await, 202);
    assert_eq!(host_of(&wait_status(&nova, &id, "VERIFY_RESIZE").await), "y0", "migrated within its cell");
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    wait_status(&nova, &id, "ACTIVE").await;

    // Live migration.
    let live = json!({"os-migrateLive": {"block_migration": "auto", "host": null}});
    let answer = nova.at("2.30").post(&path, &live).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = wait_status(&nova, &id, "ACTIVE").await;
        if host_of(&server) == "x0" {
            break;
        }
        let moves = nova.at("2.80").get(&format!("/os-migrations?instance_uuid={id}")).await.body;
        assert_ne!(moves["migrations"][0]["status"], "error", "live migration failed: {moves}");
        assert!(Instant::now() < deadline, "never live-migrated to x0: {server}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Resize.
    assert_eq!(action(&nova, &id, json!({"resize": {"flavorRef": bigger}})).await, 202);
    assert_eq!(host_of(&wait_status(&nova, &id, "VERIFY_RESIZE").await), "y0", "resized within its cell");
    assert_eq!(action(&nova, &id, json!({"confirmResize": null})).await, 204);
    wait_status(&nova, &id, "ACTIVE").await;

    // Unshelve (shelve offloads at once).
    assert_eq!(action(&nova, &id, json!({"shelve": null})).await, 202);
    wait_status(&nova, &id, "SHELVED_OFFLOADED").await;
    assert_eq!(action(&nova, &id, json!({"unshelve": null})).await, 202);
    let host = host_of(&wait_status(&nova, &id, "ACTIVE").await);
    assert!(host == "x0" || host == "y0", "unshelved within its cell: {host}");

    // Evacuation: the source's agent is killed and its service goes down.
    let source_agent = if host == "x0" { 0 } else { 1 };
    let dest = other(&host);
    cloud.kill_agent(source_agent);
    let (status, _) = advance(&cloud, 120).await;
    assert_eq!(status, 200);
    wait_states(&nova, &[host.as_str()], &[dest.as_str(), "big0"]).await;
    let answer = nova.at("2.29").post(&path, &json!({"evacuate": {}})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    wait_migration(&nova, &id, "done").await;
    assert_eq!(host_of(&wait_status(&nova, &id, "ACTIVE").await), dest, "evacuated within its cell");
    cloud.restart_agent(source_agent).await;
    wait_migration(&nova, &id, "completed").await;
    cloud.check_invariants().await;
}

/// A registered host becomes a hypervisor once its inventory is reported,
/// as in Nova, where the compute node record and its resource provider
/// come from the same `update_available_resource`: in between (berth's
/// agents register first and report their trees after) the service is
/// listed and up, but `os-hypervisors` does not list the node (nor shows
/// it: 404), also when its provider exists without inventory. Once the
/// inventory is there it is listed, up.
#[tokio::test]
async fn a_host_is_a_hypervisor_once_its_inventory_is_reported() {
    let cloud = Cloud::start("cells-reported", &[]).await;
    let host = json!({"host": "late0", "node": "late0", "vcpus": 4, "memory_mb": 4096, "local_gb": 10,
                      "hypervisor_type": "fake"});
    let resp = crate::support::http_client()
        .post(format!("{}/agent/v1/register", cloud.server.base))
        .header("x-auth-token", "admin")
        .json(&json!({"agent": "manual", "hosts": [host]}))
        .send()
        .await
        .expect("register");
    assert_eq!(resp.status().as_u16(), 200);
    let answer: Value = resp.json().await.expect("register answer");
    let node = answer["hosts"][0]["node_uuid"].as_str().expect("node uuid").to_owned();
    let nova = cloud.nova("admin").at("2.53");
    let listed = |nova: Nova| async move {
        let mut out = Vec::new();
        for path in ["/os-hypervisors", "/os-hypervisors/detail"] {
            let answer = nova.get(path).await;
            assert_eq!(answer.status, 200, "{:?}", answer.body);
            out.push(answer.body["hypervisors"].as_array().cloned().unwrap_or_default());
        }
        out
    };
    let services = nova.get("/os-services?binary=nova-compute").await.body;
    assert_eq!(services["services"][0]["host"], "late0", "{services}");
    assert_eq!(services["services"][0]["state"], "up", "the service is up from its start: {services}");
    let show = format!("/os-hypervisors/{node}");
    for stage in ["registered", "provider without inventory"] {
        for list in listed(nova.clone()).await {
            assert!(list.is_empty(), "{stage}: not a hypervisor yet: {list:?}");
        }
        let answer = nova.get(&show).await;
        assert_eq!(answer.status, 404, "{stage}: {:?}", answer.body);
        assert_eq!(answer.body["itemNotFound"]["message"], format!("Hypervisor with ID {node} could not be found."));
        if stage == "registered" {
            let created =
                cloud.server.client().post("/resource_providers", &json!({"name": "late0", "uuid": node})).await;
            assert_eq!(created.status, 200, "{:?}", created.body);
        }
    }
    let inventories = json!({"resource_provider_generation": 0,
                             "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}}});
    let put = cloud.server.client().put(&format!("/resource_providers/{node}/inventories"), &inventories).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    for list in listed(nova.clone()).await {
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0]["id"], node.as_str());
        assert_eq!(list[0]["hypervisor_hostname"], "late0");
        assert_eq!(list[0]["state"], "up");
    }
    let answer = nova.get(&show).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(answer.body["hypervisor"]["state"], "up");
    cloud.check_invariants().await;
}
