//! `--auth keystone` against a real Keystone (PyPI `keystone`, fernet
//! tokens, SQLite, served by uwsgi). scripts/test.sh starts one and passes
//! `BERTH_TEST_KEYSTONE_URL` and `BERTH_TEST_KEYSTONE_ADMIN_PASSWORD`;
//! without them the first test starts a throwaway with
//! scripts/keystone-throwaway.sh (installing it on first use), stopped
//! when this test process exits.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::compute::support::{wait_status, Nova};
use crate::support::{Proxy, TestServer};

/// A Keystone the tests may use.
#[derive(Debug, Clone)]
pub(crate) struct Keystone {
    /// `http://127.0.0.1:PORT/v3`.
    pub(crate) url: String,
    admin_password: String,
}

static SHARED: OnceLock<Keystone> = OnceLock::new();

fn throwaway(expiration_secs: Option<u64>) -> Keystone {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/keystone-throwaway.sh");
    let mut command = Command::new("bash");
    command.args([script, "start"]).env("KEYSTONE_WATCH_PID", std::process::id().to_string());
    if let Some(secs) = expiration_secs {
        command.env("KEYSTONE_TOKEN_EXPIRATION", secs.to_string());
    }
    let out = command.output().expect("run keystone-throwaway.sh");
    assert!(out.status.success(), "keystone did not start: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} missing in {text}"))
            .to_owned()
    };
    Keystone { url: get("KEYSTONE_URL"), admin_password: get("KEYSTONE_ADMIN_PASSWORD") }
}

/// The Keystone shared by the tests.
pub(crate) fn keystone() -> Keystone {
    SHARED
        .get_or_init(|| {
            let url = std::env::var("BERTH_TEST_KEYSTONE_URL").ok().filter(|u| !u.is_empty());
            match url {
                Some(url) => Keystone {
                    url,
                    admin_password: std::env::var("BERTH_TEST_KEYSTONE_ADMIN_PASSWORD")
                        .expect("BERTH_TEST_KEYSTONE_ADMIN_PASSWORD goes with BERTH_TEST_KEYSTONE_URL"),
                },
                None => tokio::task::block_in_place(|| throwaway(None)),
            }
        })
        .clone()
}

fn unique(tag: &str) -> String {
    format!("{tag}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

impl Keystone {
    /// A token for `user` in `project` (Default domain) and its status.
    pub(crate) async fn try_token(&self, user: &str, password: &str, project: &str) -> Result<String, u16> {
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}});
        let resp = crate::support::http_client()
            .post(format!("{}/auth/tokens", self.url))
            .json(&body)
            .send()
            .await
            .expect("keystone reachable");
        if resp.status().as_u16() != 201 {
            return Err(resp.status().as_u16());
        }
        Ok(resp.headers()["x-subject-token"].to_str().expect("token").to_owned())
    }

    /// A token, which must be issued.
    pub(crate) async fn token(&self, user: &str, password: &str, project: &str) -> String {
        self.try_token(user, password, project).await.unwrap_or_else(|s| panic!("token for {user}: HTTP {s}"))
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let token = self.token("admin", &self.admin_password, "admin").await;
        let mut req =
            crate::support::http_client().request(method, format!("{}{path}", self.url)).header("x-auth-token", token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("keystone admin call");
        let status = resp.status();
        let value = resp.json::<Value>().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "keystone {path}: {status} {value}");
        value
    }

    /// A new project; returns its id.
    pub(crate) async fn project(&self, name: &str) -> String {
        let v = self
            .admin(reqwest::Method::POST, "/projects", Some(json!({"project": {"name": name, "domain_id": "default"}})))
            .await;
        v["project"]["id"].as_str().expect("project id").to_owned()
    }

    /// A new user with `role` on `project_id`; returns (user id, password).
    pub(crate) async fn user(&self, name: &str, project_id: &str, roles: &[&str]) -> (String, String) {
        let password = format!("pw-{name}");
        let v = self
            .admin(
                reqwest::Method::POST,
                "/users",
                Some(json!({"user": {"name": name, "password": password, "domain_id": "default"}})),
            )
            .await;
        let user_id = v["user"]["id"].as_str().expect("user id").to_owned();
        let all = self.admin(reqwest::Method::GET, "/roles", None).await;
        for role in roles {
            let role_id = all["roles"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["name"] == *role))
                .and_then(|r| r["id"].as_str())
                .unwrap_or_else(|| panic!("role {role} missing"))
                .to_owned();
            self.admin(reqwest::Method::PUT, &format!("/projects/{project_id}/users/{user_id}/roles/{role_id}"), None)
                .await;
        }
        (user_id, password)
    }

    /// Revoke `token`.
    pub(crate) async fn revoke(&self, token: &str) {
        let admin = self.token("admin", &self.admin_password, "admin").await;
        let resp = crate::support::http_client()
            .delete(format!("{}/auth/tokens", self.url))
            .header("x-auth-token", admin)
            .header("x-subject-token", token)
            .send()
            .await
            .expect("revoke");
        assert_eq!(resp.status().as_u16(), 204, "revoke");
    }

    /// Does Keystone still accept `token`?
    pub(crate) async fn accepts(&self, token: &str) -> bool {
        let admin = self.token("admin", &self.admin_password, "admin").await;
        let resp = crate::support::http_client()
            .get(format!("{}/auth/tokens", self.url))
            .header("x-auth-token", admin)
            .header("x-subject-token", token)
            .send()
            .await
            .expect("validate");
        resp.status().as_u16() == 200
    }
}

/// A project with a member, a reader and the service user berth runs as.
struct Tenancy {
    ks: Keystone,
    project: String,
    service_user: String,
    service_project: String,
    member: (String, String),
    reader: (String, String),
}

impl Tenancy {
    async fn new(ks: &Keystone) -> Self {
        let project = unique("proj");
        let project_id = ks.project(&project).await;
        let service_project = unique("svc");
        let service_project_id = ks.project(&service_project).await;
        let service_user = unique("berth");
        ks.user(&service_user, &service_project_id, &["service"]).await;
        let member = unique("alice");
        ks.user(&member, &project_id, &["member", "reader"]).await;
        let reader = unique("rita");
        ks.user(&reader, &project_id, &["reader"]).await;
        Tenancy {
            ks: ks.clone(),
            project,
            service_user,
            service_project,
            member: (member.clone(), format!("pw-{member}")),
            reader: (reader.clone(), format!("pw-{reader}")),
        }
    }

    /// `serve` arguments for keystone auth as the service user.
    fn serve_args(&self, keystone_url: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--auth",
            "keystone",
            "--keystone-url",
            keystone_url,
            "--keystone-user",
            &self.service_user,
            "--keystone-password",
            &format!("pw-{}", self.service_user),
            "--keystone-project",
            &self.service_project,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    async fn member_token(&self) -> String {
        self.ks.token(&self.member.0, &self.member.1, &self.project).await
    }

    async fn admin_token(&self) -> String {
        self.ks.token("admin", &self.ks.admin_password, "admin").await
    }
}

async fn start(tag: &str, args: &[String]) -> TestServer {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestServer::start_with_args(tag, &args).await
}

async fn status(base: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>) {
    let mut req = crate::support::http_client().get(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    let www = resp.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (resp.status().as_u16(), www)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_boots_and_sees_only_its_project_a_reader_cannot_write_an_admin_reaches_admin_routes() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let server = start("ks-roles", &t.serve_args(&ks.url, &["--fake-hosts", "2"])).await;
    let admin = Nova::new(&server.base, &t.admin_token().await);
    let flavor = admin.flavor("ks.small", 1, 512, 1).await;
    let image = admin.image("cirros", json!({})).await;

    let member = Nova::new(&server.base, &t.member_token().await);
    let id = member.boot_id("vm1", &flavor, &image).await;
    wait_status(&member, &id, "ACTIVE").await;
    let listed = member.get("/servers").await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["servers"].as_array().map(Vec::len), Some(1), "{:?}", listed.body);
    let shown = member.get(&format!("/servers/{id}")).await;
    assert_eq!(shown.body["server"]["tenant_id"].as_str().map(str::len), Some(32), "a Keystone project id");

    // Another project's member sees nothing of it.
    let other_project = unique("other");
    let other_id = ks.project(&other_project).await;
    let bob = unique("bob");
    ks.user(&bob, &other_id, &["member", "reader"]).await;
    let bob = Nova::new(&server.base, &ks.token(&bob, &format!("pw-{bob}"), &other_project).await);
    assert_eq!(bob.get("/servers").await.body["servers"].as_array().map(Vec::len), Some(0));
    assert_eq!(bob.get(&format!("/servers/{id}")).await.status, 404);

    // A reader reads but cannot write.
    let reader = Nova::new(&server.base, &t.ks.token(&t.reader.0, &t.reader.1, &t.project).await);
    assert_eq!(reader.get("/servers").await.status, 200);
    let refused = reader.boot("vm2", &flavor, &image, json!({})).await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);

    // Identity headers a client sends are not believed.
    let (code, _) = status(
        &server.base,
        "/compute/v2.1/os-hypervisors",
        &[("x-auth-token", &member.token), ("x-roles", "admin"), ("x-project-id", &other_id)],
    )
    .await;
    assert_eq!(code, 403);
    let (code, _) =
        status(&server.base, "/resource_providers", &[("x-auth-token", &member.token), ("x-roles", "admin")]).await;
    assert_eq!(code, 403);
    // An admin token reaches the admin routes.
    assert_eq!(admin.get("/os-hypervisors").await.status, 200);
    let (code, _) = status(&server.base, "/resource_providers", &[("x-auth-token", &admin.token)]).await;
    assert_eq!(code, 200);

    assert_eq!(member.delete(&format!("/servers/{id}")).await.status, 204);
    crate::compute::support::wait_gone(&member, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bogus_and_revoked_tokens_get_401_with_www_authenticate_and_a_revoked_token_ends_within_the_cache_time() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let server = start("ks-401", &t.serve_args(&ks.url, &["--token-cache-secs", "2"])).await;
    let root = ks.url.strip_suffix("/v3").expect("v3 url").to_owned();
    let want_www = format!("Keystone uri=\"{root}\"");

    for token in [None, Some("bogus"), Some("gAAAAABnotAfernetToken")] {
        let headers: Vec<(&str, &str)> = token.map(|t| vec![("x-auth-token", t)]).unwrap_or_default();
        let (code, www) = status(&server.base, "/compute/v2.1/servers", &headers).await;
        assert_eq!((code, www.as_deref()), (401, Some(want_www.as_str())), "token {token:?}");
        let (code, www) = status(&server.base, "/reservation/v1/leases", &headers).await;
        assert_eq!((code, www.as_deref()), (401, Some(want_www.as_str())));
    }
    // Version documents need no token (Glance's and Blazar's answer 300
    // Multiple Choices).
    for (path, want) in [("/", 200), ("/compute/", 200), ("/image/", 300), ("/reservation/", 300)] {
        assert_eq!(status(&server.base, path, &[]).await.0, want, "{path}");
    }

    // Revoked before berth ever saw it: 401.
    let revoked = t.member_token().await;
    ks.revoke(&revoked).await;
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &revoked)]).await.0, 401);

    // Revoked after it was cached: still good until the cache time (2 s
    // here) runs out, then 401.
    let token = t.member_token().await;
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &token)]).await.0, 200);
    ks.revoke(&token).await;
    let revoked_at = Instant::now();
    loop {
        let code = status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &token)]).await.0;
        if code == 401 {
            break;
        }
        assert_eq!(code, 200);
        assert!(revoked_at.elapsed() < Duration::from_secs(30), "a revoked token kept working past the cache time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // X-Service-Token must be valid and carry the service role.
    let member = t.member_token().await;
    let with_service = |svc: String| {
        let (base, member) = (server.base.clone(), member.clone());
        async move {
            status(&base, "/compute/v2.1/servers", &[("x-auth-token", &member), ("x-service-token", &svc)]).await.0
        }
    };
    assert_eq!(with_service(member.clone()).await, 401, "a member token is no service token");
    assert_eq!(with_service("bogus".into()).await, 401);
    let service = ks.token(&t.service_user, &format!("pw-{}", t.service_user), &t.service_project).await;
    assert_eq!(with_service(service).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_down_cached_tokens_keep_working_and_new_ones_get_503() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let upstream = ks.url.trim_start_matches("http://").split('/').next().expect("host:port").to_owned();
    let proxy = Proxy::start(upstream.clone()).await;
    let via_proxy = ks.url.replacen(&upstream, &format!("127.0.0.1:{}", proxy.port), 1);
    let server = start("ks-down", &t.serve_args(&via_proxy, &[])).await;
    let cached = t.member_token().await;
    let fresh = t.member_token().await;
    assert_ne!(cached, fresh);
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &cached)]).await.0, 200);

    proxy.cut();
    for _ in 0..3 {
        assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &cached)]).await.0, 200);
        let (code, _) = status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &fresh)]).await;
        assert_eq!(code, 503, "an unvalidated token is never let in, and never a 500");
        assert_eq!(status(&server.base, "/resource_providers", &[("x-auth-token", &fresh)]).await.0, 503);
    }
    proxy.restore();
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &fresh)]).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_token_costs_one_keystone_call_however_many_requests_bring_it() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let server = start("ks-calls", &t.serve_args(&ks.url, &[])).await;
    let before = server.metric("berth_keystone_token_validations_total").await;
    let token = t.member_token().await;
    let mut requests = Vec::new();
    for _ in 0..40 {
        let (base, token) = (server.base.clone(), token.clone());
        requests.push(tokio::spawn(async move {
            status(&base, "/compute/v2.1/servers", &[("x-auth-token", &token)]).await.0
        }));
    }
    for r in requests {
        assert_eq!(r.await.expect("join"), 200);
    }
    for _ in 0..20 {
        assert_eq!(status(&server.base, "/compute/v2.1/flavors", &[("x-auth-token", &token)]).await.0, 200);
    }
    let after = server.metric("berth_keystone_token_validations_total").await;
    assert_eq!(after - before, 1, "60 requests with one token asked Keystone {} times", after - before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused_even_while_the_cache_would_keep_it() {
    // A Keystone of its own whose tokens live 10 s.
    let ks = tokio::task::block_in_place(|| throwaway(Some(10)));
    let t = Tenancy::new(&ks).await;
    let server = start("ks-expiry", &t.serve_args(&ks.url, &["--token-cache-secs", "3600"])).await;
    let token = t.member_token().await;
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &token)]).await.0, 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    while ks.accepts(&token).await {
        assert!(Instant::now() < deadline, "the token never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status(&server.base, "/compute/v2.1/servers", &[("x-auth-token", &token)]).await.0, 401);
}

/// `POST`/`GET` on the agent API with `token`; status and body.
async fn agent_call(base: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = crate::support::http_client()
        .request(method.parse().expect("method"), format!("{base}/agent/v1{path}"))
        .header("x-auth-token", token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("agent call");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_authenticates_as_its_service_user_and_no_other_identity_takes_its_host_over() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let server = start("ks-agents", &t.serve_args(&ks.url, &[])).await;
    let svc_project_id = ks.project(&unique("agents")).await;
    let svc_project = {
        // The project's name, for tokens.
        let v = ks.admin(reqwest::Method::GET, &format!("/projects/{svc_project_id}"), None).await;
        v["project"]["name"].as_str().expect("name").to_owned()
    };
    let (agent_a, agent_b) = (unique("agent-a"), unique("agent-b"));
    ks.user(&agent_a, &svc_project_id, &["service"]).await;
    ks.user(&agent_b, &svc_project_id, &["service"]).await;

    // A real `berth agent` authenticating as agent A registers its host.
    let host = format!("own-{}", &agent_a[8..]);
    let prefix = host.trim_end_matches(char::is_numeric).to_owned();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--url", &server.base, "--hosts", "1", "--prefix", &format!("{prefix}-")])
        .args(["--keystone-url", &ks.url, "--keystone-user", &agent_a, "--keystone-password", &format!("pw-{agent_a}")])
        .args(["--keystone-project", &svc_project, "--log", "warn"])
        .spawn()
        .expect("spawn berth agent");
    let host = format!("{prefix}-0");
    let admin = t.admin_token().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = Nova::new(&server.base, &admin).get("/os-services?binary=nova-compute").await;
        if listed.body["services"].as_array().is_some_and(|s| s.iter().any(|s| s["host"] == host.as_str())) {
            break;
        }
        assert!(agent.try_wait().expect("agent").is_none(), "the agent exited");
        assert!(Instant::now() < deadline, "the agent never registered {host}: {:?}", listed.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Agent B's identity may not register, heartbeat, take work or report for it.
    let b = ks.token(&agent_b, &format!("pw-{agent_b}"), &svc_project).await;
    let registration = json!({"agent": "thief", "hosts": [{"host": host, "vcpus": 64, "memory_mb": 1, "local_gb": 1}]});
    let (code, body) = agent_call(&server.base, &b, "POST", "/register", Some(registration.clone())).await;
    assert_eq!(code, 403, "{body}");
    let (code, _) =
        agent_call(&server.base, &b, "POST", "/heartbeat", Some(json!({"agent": "thief", "hosts": [host]}))).await;
    assert_eq!(code, 403);
    let event = json!({"events": [{"instance": uuid::Uuid::new_v4().to_string(), "host": host, "kind": "deleted"}]});
    assert_eq!(agent_call(&server.base, &b, "POST", "/events", Some(event)).await.0, 403);
    // Nothing of the refused registration was written.
    let hypervisors = Nova::new(&server.base, &admin).get("/os-hypervisors/detail").await;
    let mine = hypervisors.body["hypervisors"]
        .as_array()
        .and_then(|l| l.iter().find(|h| h["hypervisor_hostname"] == host.as_str()).cloned());
    assert_ne!(mine.as_ref().map(|h| h["vcpus"].clone()), Some(json!(64)), "{mine:?}");

    // Once an admin unbinds the host, another identity may register it.
    let unbind = crate::support::http_client()
        .delete(format!("{}/admin/v1/hosts/{host}/binding", server.base))
        .header("x-auth-token", &b)
        .send()
        .await
        .expect("unbind");
    assert_eq!(unbind.status().as_u16(), 403, "only an admin unbinds");
    let unbind = crate::support::http_client()
        .delete(format!("{}/admin/v1/hosts/{host}/binding", server.base))
        .header("x-auth-token", &admin)
        .send()
        .await
        .expect("unbind");
    assert_eq!(unbind.status().as_u16(), 204);
    let _ = agent.kill();
    let _ = agent.wait();
    let (code, body) = agent_call(&server.base, &b, "POST", "/register", Some(registration)).await;
    assert_eq!(code, 200, "{body}");
    let a = ks.token(&agent_a, &format!("pw-{agent_a}"), &svc_project).await;
    let (code, _) =
        agent_call(&server.base, &a, "POST", "/heartbeat", Some(json!({"agent": "x", "hosts": [host]}))).await;
    assert_eq!(code, 403, "the host now belongs to agent B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_logs_a_keystone_user_in_by_password_and_shows_a_member_its_project_only() {
    let ks = keystone();
    let t = Tenancy::new(&ks).await;
    let server = start("ks-dashboard", &t.serve_args(&ks.url, &[])).await;
    let http = crate::support::http_client();
    let login = |body: Value| {
        let http = http.clone();
        let url = format!("{}/dashboard/api/login", server.base);
        async move {
            let resp = http.post(url).json(&body).send().await.expect("login");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let config: Value =
        http.get(format!("{}/dashboard/api/config", server.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(config, json!({"auth_mode": "keystone"}));
    let (code, answer) = login(json!({"user": t.member.0, "password": t.member.1, "project": t.project})).await;
    assert_eq!(code, 200, "{answer}");
    let token = answer["token"].as_str().expect("token").to_owned();
    let session = |token: String| {
        let http = http.clone();
        let url = format!("{}/dashboard/api/session", server.base);
        async move {
            let resp = http.get(url).header("x-auth-token", token).send().await.expect("session");
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (code, me) = session(token.clone()).await;
    assert_eq!(code, 200, "{me}");
    assert_eq!(me["admin"], json!(false));
    assert_eq!(me["project"].as_str().map(str::len), Some(32), "a Keystone project id: {me}");
    let projects: Value = http
        .get(format!("{}/dashboard/api/projects", server.base))
        .header("x-auth-token", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(projects["projects"].as_array().map(Vec::len), Some(1));
    assert_eq!(projects["projects"][0]["project"], me["project"]);
    let capacity = http.get(format!("{}/dashboard/api/capacity", server.base)).header("x-auth-token", &token);
    assert_eq!(capacity.send().await.unwrap().status().as_u16(), 403);
    // An admin's password login reaches the admin views.
    let (code, answer) = login(json!({"user": "admin", "password": ks.admin_password, "project": "admin"})).await;
    assert_eq!(code, 200, "{answer}");
    let (_, admin) = session(answer["token"].as_str().unwrap().to_owned()).await;
    assert_eq!(admin["admin"], json!(true));
    // Wrong password: 401; a bogus token: 401; missing fields: 400.
    let (code, answer) = login(json!({"user": t.member.0, "password": "wrong", "project": t.project})).await;
    assert_eq!(code, 401, "{answer}");
    assert_eq!(session("bogus".to_owned()).await.0, 401);
    let (code, answer) = login(json!({"user": t.member.0})).await;
    assert_eq!(code, 400, "{answer}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("password")), "{answer}");
}
