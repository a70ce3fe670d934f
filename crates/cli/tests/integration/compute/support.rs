//! Compute test support: a `Cloud` (a real `berth serve` plus real
//! `berth agent` processes), a compute API client, and the invariants every
//! compute test ends with.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{fresh_dir, test_database, TestServer};

/// A berth server with agents.
pub(crate) struct Cloud {
    /// The first server process.
    pub(crate) server: TestServer,
    /// More server processes on the same database (PostgreSQL).
    pub(crate) siblings: Vec<TestServer>,
    agents: Vec<Child>,
    /// What the first process and the agents were started with (restarts).
    serve_args: Vec<String>,
    hosts: Vec<Hosts>,
}

/// One agent process's hosts.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    pub(crate) prefix: String,
    pub(crate) count: usize,
    pub(crate) cell: Option<String>,
    pub(crate) args: Vec<String>,
    /// Where the agent's stderr goes (inherited when `None`).
    pub(crate) log: Option<std::path::PathBuf>,
}

impl Hosts {
    /// `count` hosts named `{prefix}{i}` with the agent's default shape
    /// plus `args` (e.g. `--vcpus 2`).
    pub(crate) fn new(prefix: &str, count: usize, args: &[&str]) -> Self {
        Hosts {
            prefix: prefix.to_owned(),
            count,
            cell: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            log: None,
        }
    }

    /// The agent's stderr (its log and, when it stops, its error) to `path`.
    pub(crate) fn logged_to(mut self, path: &std::path::Path) -> Self {
        self.log = Some(path.to_owned());
        self
    }

    /// In this cell.
    pub(crate) fn in_cell(mut self, cell: &str) -> Self {
        self.cell = Some(cell.to_owned());
        self
    }
}

impl Cloud {
    /// A server (with `serve_args`) and no agents yet.
    pub(crate) async fn start(tag: &str, serve_args: &[&str]) -> Self {
        let mut args: Vec<&str> = vec!["--test-hooks"];
        args.extend_from_slice(serve_args);
        let server = TestServer::start_with_args_in(fresh_dir(tag), test_database(tag), &args).await;
        let serve_args = args.iter().map(|a| a.to_string()).collect();
        Cloud { server, siblings: Vec::new(), agents: Vec::new(), serve_args, hosts: Vec::new() }
    }

    /// SIGKILL the first process and every agent, then start them again
    /// on the same data (the server on a new port, the agents on it).
    pub(crate) async fn restart(&mut self) {
        self.stop_agents();
        let args: Vec<&str> = self.serve_args.iter().map(String::as_str).collect();
        self.server.kill9();
        self.server =
            TestServer::start_with_args_in(self.server.dir.clone(), self.server.database.clone(), &args).await;
        for hosts in std::mem::take(&mut self.hosts) {
            self.add_agent(hosts).await;
        }
    }

    /// SIGKILL the agent started `index`-th (its hosts stop heartbeating).
    pub(crate) fn kill_agent(&mut self, index: usize) {
        let _ = self.agents[index].kill();
        let _ = self.agents[index].wait();
    }

    /// Send the stderr of the agent started `index`-th to `path` from its
    /// next (re)start.
    pub(crate) fn set_agent_log(&mut self, index: usize, path: &std::path::Path) {
        self.hosts[index].log = Some(path.to_owned());
    }

    /// More arguments for the agent started `index`-th, from its next
    /// (re)start.
    pub(crate) fn add_agent_args(&mut self, index: usize, args: &[&str]) {
        self.hosts[index].args.extend(args.iter().map(|a| (*a).to_owned()));
    }

    /// The process id of the agent started `index`-th.
    pub(crate) fn agent_pid(&self, index: usize) -> u32 {
        self.agents[index].id()
    }

    /// Send SIGHUP to the agent started `index`-th.
    pub(crate) fn hangup_agent(&self, index: usize) {
        let pid = self.agents[index].id().to_string();
        let status = Command::new("kill").args(["-HUP", &pid]).status().expect("kill -HUP");
        assert!(status.success(), "kill -HUP {pid}");
    }

    /// Wait up to `timeout` for the agent started `index`-th to exit.
    pub(crate) async fn wait_agent_exit(
        &mut self,
        index: usize,
        timeout: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.agents[index].try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Start the agent started `index`-th again (after `kill_agent`), with
    /// the same hosts and arguments, and wait until it has registered.
    pub(crate) async fn restart_agent(&mut self, index: usize) {
        let hosts = self.hosts[index].clone();
        let child = self.spawn_agent(&hosts);
        self.agents[index] = child;
        let names: Vec<String> = (0..hosts.count).map(|i| format!("{}{i}", hosts.prefix)).collect();
        self.wait_hosts(&names).await;
    }

    fn spawn_agent(&self, hosts: &Hosts) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
        command
            .args(["agent", "--url", &self.server.base, "--hosts", &hosts.count.to_string(), "--prefix", &hosts.prefix])
            .args(["--report-interval-secs", "1", "--log", "warn"])
            .args(&hosts.args);
        if let Some(cell) = &hosts.cell {
            command.args(["--cell", cell]);
        }
        let stderr = match &hosts.log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("agent log file")),
            None => Stdio::inherit(),
        };
        command.stdout(Stdio::null()).stderr(stderr).spawn().expect("spawn agent")
    }

    fn stop_agents(&mut self) {
        for child in &mut self.agents {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.agents.clear();
    }

    /// Start another server process on the same database.
    pub(crate) async fn add_process(&mut self, serve_args: &[&str]) {
        let mut args: Vec<&str> = vec!["--test-hooks"];
        args.extend_from_slice(serve_args);
        let sibling =
            TestServer::start_with_args_in(self.server.dir.clone(), self.server.database.clone(), &args).await;
        self.siblings.push(sibling);
    }

    /// Start an agent process for `hosts` and wait until all of them are
    /// hypervisors with inventory in placement.
    pub(crate) async fn add_agent(&mut self, hosts: Hosts) {
        let child = self.spawn_agent(&hosts);
        self.agents.push(child);
        self.hosts.push(hosts.clone());
        let names: Vec<String> = (0..hosts.count).map(|i| format!("{}{i}", hosts.prefix)).collect();
        self.wait_hosts(&names).await;
    }

    /// Wait until every named host is a compute node with inventory.
    pub(crate) async fn wait_hosts(&self, names: &[String]) {
        let placement = self.server.client();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let reply = placement.get("/resource_providers?resources=VCPU:1").await;
            let have: HashSet<String> = reply.body["resource_providers"]
                .as_array()
                .map(|a| a.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            let roots: HashSet<String> = have.iter().map(|n| n.split("_NUMA").next().unwrap_or(n).to_owned()).collect();
            if names.iter().all(|n| roots.contains(n)) {
                return;
            }
            assert!(Instant::now() < deadline, "hosts {names:?} never reported inventory (have {have:?})");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A compute client on the first process, as `token` (`admin` or
    /// `user:project`).
    pub(crate) fn nova(&self, token: &str) -> Nova {
        Nova::new(&self.server.base, token)
    }

    /// `POST /admin/v1/test/{hook}` (`hold`, `release`: 204; `clock`: 200
    /// with the new time) on the first process; asserts it was taken.
    pub(crate) async fn test_hook(&self, hook: &str, body: Value) {
        let reply = self.server.client().post(&format!("/admin/v1/test/{hook}"), &body).await;
        let want = if hook == "clock" { 200 } else { 204 };
        assert_eq!(reply.status, want, "test hook {hook} {body}: {:?}", reply.body);
    }

    /// Wait until `n` callers are held at the test hook `point` (a boot
    /// at a conductor point, a listing between its reads).
    pub(crate) async fn wait_held(&self, point: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.server.client().post("/admin/v1/test/waiting", &json!({"point": point})).await;
            assert_eq!(reply.status, 200, "{:?}", reply.body);
            if reply.body["waiting"].as_u64() == Some(n) {
                return;
            }
            assert!(Instant::now() < deadline, "never {n} held at {point}: {:?}", reply.body);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Run the invariant checks every compute test ends with.
    pub(crate) async fn check_invariants(&self) {
        check_invariants(&self.server).await;
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        self.stop_agents();
        // The cloud owns its data directory (kept across restarts, and
        // kept for a look when the test failed).
        if !std::thread::panicking() {
            self.server.kill9();
            for sibling in &mut self.siblings {
                sibling.kill9();
            }
            let _ = std::fs::remove_dir_all(&self.server.dir);
        }
    }
}

/// A compute (Nova) API client.
#[derive(Clone)]
pub(crate) struct Nova {
    http: reqwest::Client,
    base: String,
    /// `X-Auth-Token`.
    pub(crate) token: String,
    /// Microversion sent (`OpenStack-API-Version: compute X`).
    pub(crate) version: String,
}

/// Status and JSON body.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

impl Nova {
    pub(crate) fn new(base: &str, token: &str) -> Self {
        Nova {
            http: crate::support::http_client(),
            base: base.to_owned(),
            token: token.to_owned(),
            version: "2.96".to_owned(),
        }
    }

    /// The server's base URL.
    pub(crate) fn base_url(&self) -> String {
        self.base.clone()
    }

    /// The same client at another microversion.
    pub(crate) fn at(&self, version: &str) -> Self {
        let mut other = self.clone();
        other.version = version.to_owned();
        other
    }

    /// A request to `/compute/v2.1{path}`.
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let mut req = self
            .http
            .request(method.parse().expect("method"), format!("{}/compute/v2.1{path}", self.base))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", format!("compute {}", self.version));
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap_or_default();
        Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
    }

    pub(crate) async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, None).await
    }
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Answer {
        self.call("POST", path, Some(body)).await
    }
    pub(crate) async fn put(&self, path: &str, body: &Value) -> Answer {
        self.call("PUT", path, Some(body)).await
    }
    pub(crate) async fn delete(&self, path: &str) -> Answer {
        self.call("DELETE", path, None).await
    }

    /// Create a public flavor; returns its id.
    pub(crate) async fn flavor(&self, name: &str, vcpus: i64, ram: i64, disk: i64) -> String {
        let answer =
            self.post("/flavors", &json!({"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}})).await;
        assert_eq!(answer.status, 200, "create flavor: {:?}", answer.body);
        answer.body["flavor"]["id"].as_str().expect("flavor id").to_owned()
    }

    /// A GET of the image API, `/image/v2{path}`.
    pub(crate) async fn image_get(&self, path: &str) -> Answer {
        let resp = self
            .http
            .get(format!("{}/image/v2{path}", self.base))
            .header("x-auth-token", &self.token)
            .send()
            .await
            .expect("image request");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap_or_default();
        Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
    }

    /// Create an image through the image API; returns its id.
    pub(crate) async fn image(&self, name: &str, properties: Value) -> String {
        let mut body =
            json!({"name": name, "disk_format": "qcow2", "container_format": "bare", "visibility": "public"});
        if let (Some(body), Some(props)) = (body.as_object_mut(), properties.as_object()) {
            for (k, v) in props {
                body.insert(k.clone(), v.clone());
            }
        }
        let resp = self
            .http
            .post(format!("{}/image/v2/images", self.base))
            .header("x-auth-token", &self.token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("image create");
        assert_eq!(resp.status().as_u16(), 201, "create image");
        let value: Value = resp.json().await.expect("image json");
        let id = value["id"].as_str().expect("image id").to_owned();
        // A new image is `queued` and a boot refuses it until it has data.
        self.upload_image(&id, b"berth test image".to_vec()).await;
        id
    }

    /// Upload `data` to an image (asserting 204: it is `active` then).
    pub(crate) async fn upload_image(&self, id: &str, data: Vec<u8>) {
        let resp = self
            .http
            .put(format!("{}/image/v2/images/{id}/file", self.base))
            .header("x-auth-token", &self.token)
            .header("content-type", "application/octet-stream")
            .body(data)
            .send()
            .await
            .expect("image upload");
        assert_eq!(resp.status().as_u16(), 204, "upload image data");
    }

    /// Boot; returns the answer (202 with the server, or the error).
    pub(crate) async fn boot(&self, name: &str, flavor: &str, image: &str, extra: Value) -> Answer {
        let mut server = json!({"name": name, "flavorRef": flavor, "imageRef": image, "networks": "none"});
        let mut hints = None;
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                if k == "os:scheduler_hints" {
                    hints = Some(v.clone());
                } else {
                    server[k] = v.clone();
                }
            }
        }
        let mut body = json!({"server": server});
        if let Some(hints) = hints {
            body["os:scheduler_hints"] = hints;
        }
        self.post("/servers", &body).await
    }

    /// Boot one server and return its id (asserting 202).
    pub(crate) async fn boot_id(&self, name: &str, flavor: &str, image: &str) -> String {
        let answer = self.boot(name, flavor, image, json!({})).await;
        assert_eq!(answer.status, 202, "boot: {:?}", answer.body);
        answer.body["server"]["id"].as_str().expect("server id").to_owned()
    }

    /// Wait until the server leaves BUILD; returns its body.
    pub(crate) async fn wait_settled(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = self.get(&format!("/servers/{id}")).await;
            assert_eq!(answer.status, 200, "show {id}: {:?}", answer.body);
            let status = answer.body["server"]["status"].as_str().unwrap_or("").to_owned();
            if status != "BUILD" {
                return answer.body["server"].clone();
            }
            assert!(Instant::now() < deadline, "server {id} stuck in BUILD");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Every server (admin, all tenants), paging through. A marker
    /// deleted between two pages is a 400 (as in Nova): start over.
    pub(crate) async fn all_servers(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        let mut restarts = 0;
        loop {
            let mut path = "/servers/detail?all_tenants=1&limit=500".to_owned();
            if let Some(m) = &marker {
                path.push_str(&format!("&marker={m}"));
            }
            let answer = self.get(&path).await;
            if answer.status == 400 && marker.is_some() && restarts < 20 {
                restarts += 1;
                out.clear();
                marker = None;
                continue;
            }
            assert_eq!(answer.status, 200, "list: {:?}", answer.body);
            let page = answer.body["servers"].as_array().cloned().unwrap_or_default();
            if page.is_empty() {
                return out;
            }
            marker = page.last().and_then(|s| s["id"].as_str()).map(str::to_owned);
            out.extend(page);
        }
    }

    /// Wait until no server is in BUILD; returns all servers.
    pub(crate) async fn wait_all_settled(&self) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let servers = self.all_servers().await;
            if servers.iter().all(|s| s["status"] != "BUILD") {
                return servers;
            }
            assert!(Instant::now() < deadline, "servers stuck in BUILD");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Count servers by status.
pub(crate) fn by_status(servers: &[Value]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for server in servers {
        *out.entry(server["status"].as_str().unwrap_or("").to_owned()).or_insert(0) += 1;
    }
    out
}

/// The invariants: no provider over capacity; every allocation belongs to
/// a live server on that provider's host; every server listed once; quota
/// usage equals a recount.
pub(crate) async fn check_invariants(server: &TestServer) {
    let placement = server.client();
    let nova = Nova::new(&server.base, "admin");
    let servers = nova.all_servers().await;
    let mut seen = HashSet::new();
    for s in &servers {
        assert!(seen.insert(s["id"].as_str().unwrap_or("").to_owned()), "server listed twice: {}", s["id"]);
    }
    let live: HashMap<String, &Value> =
        servers.iter().map(|s| (s["id"].as_str().unwrap_or("").to_owned(), s)).collect();
    let providers =
        placement.get("/resource_providers").await.body["resource_providers"].as_array().cloned().unwrap_or_default();
    let migrations = nova.at("2.80").get("/os-migrations").await;
    assert_eq!(migrations.status, 200, "{:?}", migrations.body);
    let moving: HashMap<String, Value> = migrations.body["migrations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m["uuid"].as_str().unwrap_or("").to_owned(), m))
        .collect();
    let names: HashMap<String, String> = providers
        .iter()
        .map(|p| (p["uuid"].as_str().unwrap_or("").to_owned(), p["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    let roots: HashMap<String, String> = providers
        .iter()
        .map(|p| {
            (p["uuid"].as_str().unwrap_or("").to_owned(), p["root_provider_uuid"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    for provider in &providers {
        let uuid = provider["uuid"].as_str().unwrap_or("");
        let inventories = placement.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
        let usages = placement.get(&format!("/resource_providers/{uuid}/usages")).await.body;
        if let Some(invs) = inventories["inventories"].as_object() {
            for (class, inv) in invs {
                let total = inv["total"].as_i64().unwrap_or(0);
                let reserved = inv["reserved"].as_i64().unwrap_or(0);
                let ratio = inv["allocation_ratio"].as_f64().unwrap_or(1.0);
                let capacity = ((total - reserved) as f64 * ratio) as i64;
                let used = usages["usages"][class].as_i64().unwrap_or(0);
                assert!(used <= capacity, "provider {uuid} over capacity on {class}: {used} > {capacity}");
            }
        }
        // A sharing provider (a shared disk pool) is nobody's host: its
        // consumers must live, wherever they run.
        let traits = placement.get(&format!("/resource_providers/{uuid}/traits")).await.body;
        let sharing = traits["traits"].as_array().is_some_and(|t| t.iter().any(|t| t == "MISC_SHARES_VIA_AGGREGATE"));
        let allocations = placement.get(&format!("/resource_providers/{uuid}/allocations")).await.body;
        if let Some(consumers) = allocations["allocations"].as_object() {
            for consumer in consumers.keys() {
                if sharing {
                    assert!(
                        live.contains_key(consumer) || moving.contains_key(consumer),
                        "allocation of {consumer} on sharing provider {uuid} has no live server or open move"
                    );
                    continue;
                }
                // A move under way: its migration consumer holds the
                // source (and only the source) until confirm or revert.
                if let Some(migration) = moving.get(consumer) {
                    let root = roots.get(uuid).and_then(|r| names.get(r)).cloned().unwrap_or_default();
                    // Or a move that failed after the hand-over: its
                    // server is in ERROR until deleted.
                    let failed = migration["status"] == "error"
                        && live
                            .get(migration["instance_uuid"].as_str().unwrap_or(""))
                            .is_some_and(|s| s["status"] == "ERROR");
                    assert!(
                        failed || OPEN_MOVES.contains(&migration["status"].as_str().unwrap_or("")),
                        "migration consumer {consumer} of a move in status {}",
                        migration["status"]
                    );
                    assert_eq!(migration["source_node"].as_str().unwrap_or(""), root, "migration holds its source");
                    assert!(
                        live.contains_key(migration["instance_uuid"].as_str().unwrap_or("")),
                        "moving server lives"
                    );
                    continue;
                }
                let server = live
                    .get(consumer)
                    .unwrap_or_else(|| panic!("allocation of {consumer} on {uuid} has no live server"));
                let root = roots.get(uuid).and_then(|r| names.get(r)).cloned().unwrap_or_default();
                // A live migration under way: the instance holds the
                // destination while the row still names the source.
                let live_destination = moving.values().any(|m| {
                    m["migration_type"] == "live-migration"
                        && OPEN_MOVES.contains(&m["status"].as_str().unwrap_or(""))
                        && m["instance_uuid"].as_str() == Some(consumer.as_str())
                        && m["dest_node"].as_str() == Some(root.as_str())
                });
                if live_destination && server["OS-EXT-STS:task_state"] == "migrating" {
                    continue;
                }
                assert_eq!(
                    server["OS-EXT-SRV-ATTR:hypervisor_hostname"].as_str().unwrap_or(""),
                    root,
                    "server {consumer} allocated on a host it is not on"
                );
            }
        }
    }
    // Quota usage equals a recount, per project.
    let mut projects: HashMap<String, (i64, i64)> = HashMap::new();
    for s in &servers {
        // A server in ERROR counts while it holds allocations (a move that
        // failed on its host), not after a build that failed.
        let errored = s["status"] == "ERROR" && {
            let id = s["id"].as_str().unwrap_or("");
            let held = placement.get(&format!("/allocations/{id}")).await.body;
            held["allocations"].as_object().is_none_or(|a| a.is_empty())
        };
        let entry = projects.entry(s["tenant_id"].as_str().unwrap_or("").to_owned()).or_default();
        entry.0 += 1;
        // A reserved server (no host yet) counts like a build request.
        if (s["OS-EXT-SRV-ATTR:host"].as_str().is_some() && !errored) || s["status"] == "RESERVED" {
            entry.1 += s["flavor"]["vcpus"].as_i64().unwrap_or(0);
        }
    }
    for (project, (instances, cores)) in projects {
        let detail = nova.get(&format!("/os-quota-sets/{project}/detail")).await.body;
        assert_eq!(
            detail["quota_set"]["instances"]["in_use"].as_i64(),
            Some(instances),
            "instances in use of {project}"
        );
        assert_eq!(detail["quota_set"]["cores"]["in_use"].as_i64(), Some(cores), "cores in use of {project}");
    }
}

/// Migration statuses whose migration consumer may hold the source.
const OPEN_MOVES: &[&str] =
    &["migrating", "post-migrating", "finished", "confirming", "reverting", "accepted", "preparing", "running"];

/// VCPU used by a project's consumers (placement `GET /usages`, whatever
/// the microversion's shape).
pub(crate) async fn project_vcpus(server: &TestServer, project: &str) -> i64 {
    let usages = server.client().get(&format!("/usages?project_id={project}")).await.body;
    let by_type = usages["usages"].as_object().cloned().unwrap_or_default();
    if let Some(v) = by_type.get("VCPU").and_then(Value::as_i64) {
        return v;
    }
    by_type.values().filter_map(|t| t["VCPU"].as_i64()).sum()
}

/// Wait until the server has `status` and no task; returns its body.
pub(crate) async fn wait_status(nova: &Nova, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let server = nova.get(&format!("/servers/{id}")).await.body["server"].clone();
        if server["status"] == status && server["OS-EXT-STS:task_state"].is_null() {
            return server;
        }
        assert!(Instant::now() < deadline, "server {id} never reached {status}: {server}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until the server is gone from the API (a delete through its
/// agent answers 204 before the row is deleted).
pub(crate) async fn wait_gone(nova: &Nova, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = nova.get(&format!("/servers/{id}")).await.status;
        if status == 404 {
            return;
        }
        assert!(Instant::now() < deadline, "server {id} still answers {status}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until `check` holds (30 s).
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `message` of a Nova error body (`{"badRequest": {"message": ...}}`).
pub(crate) fn message(body: &Value) -> String {
    body.as_object().and_then(|o| o.values().next()).and_then(|e| e["message"].as_str()).unwrap_or_default().to_owned()
}

/// `POST /servers/{id}/action`: the status and the error message, if any.
pub(crate) async fn act(nova: &Nova, id: &str, body: Value) -> (u16, String) {
    let answer = nova.post(&format!("/servers/{id}/action"), &body).await;
    (answer.status, message(&answer.body))
}

/// Nova's 409 for an action refused in a state.
pub(crate) fn refused(action: &str, id: &str, attr: &str, state: &str) -> (u16, String) {
    (409, format!("Cannot '{action}' instance {id} while it is in {attr} {state}"))
}

/// The server's instance actions as the API lists them (newest first),
/// each with its events as `(event, result)`.
pub(crate) async fn instance_actions(nova: &Nova, id: &str) -> Vec<(String, Vec<(String, String)>)> {
    let list = nova.get(&format!("/servers/{id}/os-instance-actions")).await.body;
    let mut out = Vec::new();
    for action in list["instanceActions"].as_array().cloned().unwrap_or_default() {
        let request_id = action["request_id"].as_str().unwrap_or_default();
        let shown = nova.get(&format!("/servers/{id}/os-instance-actions/{request_id}")).await.body;
        let events = shown["instanceAction"]["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| (e["event"].as_str().unwrap_or("").to_owned(), e["result"].as_str().unwrap_or("").to_owned()))
            .collect();
        out.push((action["action"].as_str().unwrap_or("").to_owned(), events));
    }
    out
}
