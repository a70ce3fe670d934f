//! Authentication modes over HTTP: keystonemiddleware's trusted headers.

use crate::support::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_headers_mode() {
    let server = TestServer::start_with_args("trusted", &["--auth", "trusted-headers"]).await;
    let base = server.base.clone();
    let http = crate::support::http_client();
    let get = |headers: Vec<(&'static str, &'static str)>| {
        let mut req = http.get(format!("{base}/resource_providers")).header("accept", "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    // No identity: 401.
    assert_eq!(get(vec![]).await.expect("send").status().as_u16(), 401);
    // A noauth2 token means nothing in this mode.
    assert_eq!(get(vec![("x-auth-token", "admin")]).await.expect("send").status().as_u16(), 401);
    // Identity without a role placement's policy accepts: 403.
    let member =
        vec![("x-user-id", "u1"), ("x-project-id", "p1"), ("x-roles", "member"), ("x-identity-status", "Confirmed")];
    assert_eq!(get(member).await.expect("send").status().as_u16(), 403);
    // An admin (or service) caller is allowed.
    let admin = vec![
        ("x-user-id", "u1"),
        ("x-project-id", "p1"),
        ("x-roles", "reader,admin"),
        ("x-identity-status", "Confirmed"),
    ];
    assert_eq!(get(admin).await.expect("send").status().as_u16(), 200);
    // keystonemiddleware marks failed tokens Invalid: 401.
    let invalid =
        vec![("x-user-id", "u1"), ("x-project-id", "p1"), ("x-roles", "admin"), ("x-identity-status", "Invalid")];
    assert_eq!(get(invalid).await.expect("send").status().as_u16(), 401);
}

/// noauth2 makes anyone who reaches the listener an admin: berth refuses to
/// serve it on a non-loopback address unless told the operator means it.
#[test]
fn noauth2_refuses_a_non_loopback_listener_unless_told() {
    let dir = crate::support::fresh_dir("noauth-net");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["serve", "--data-dir"])
            .arg(&dir)
            .args(extra)
            .output()
            .expect("run berth")
    };
    // 192.0.2.1 (TEST-NET-1) is never bound: the refusal comes first.
    let refused = run(&["--listen", "192.0.2.1:0"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("refusing to serve noauth2 on 192.0.2.1:0"), "{err}");
    let refused = run(&["--listen", "127.0.0.1:0", "--compute-listen", "192.0.2.1:0"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("refusing to serve noauth2 on 192.0.2.1:0"));
    // With the flag the guard lets it through (and binding that address fails).
    let allowed = run(&["--listen", "192.0.2.1:0", "--allow-noauth2-on-network"]);
    assert!(!allowed.status.success());
    let err = String::from_utf8_lossy(&allowed.stderr);
    assert!(!err.contains("refusing to serve noauth2") && err.contains("binding 192.0.2.1:0"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `/metrics` and `/healthcheck` answer loopback callers by default, and
/// only admins with `--operational-access admin`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_endpoints_follow_operational_access() {
    let open = TestServer::start("ops-default").await;
    for path in ["/metrics", "/healthcheck"] {
        let resp = reqwest::get(format!("{}{path}", open.base)).await.expect("get");
        assert_eq!(resp.status().as_u16(), 200, "{path} from loopback");
    }
    let guarded = TestServer::start_with_args("ops-admin", &["--operational-access", "admin"]).await;
    let http = crate::support::http_client();
    for path in ["/metrics", "/healthcheck"] {
        let url = format!("{}{path}", guarded.base);
        assert_eq!(http.get(&url).send().await.expect("get").status().as_u16(), 401, "{path} without a token");
        let member = http.get(&url).header("x-auth-token", "alice:p1").send().await.expect("get");
        assert_eq!(member.status().as_u16(), 403, "{path} as a member");
        let admin = http.get(&url).header("x-auth-token", "admin").send().await.expect("get");
        assert_eq!(admin.status().as_u16(), 200, "{path} as admin");
    }
}

/// In trusted-headers mode the in-process hosts speak as the proxy would
/// (they used to send a noauth2 token, get 401 and register nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_headers_mode_runs_its_fake_hosts() {
    let server = TestServer::start_with_args("trusted-fake", &["--auth", "trusted-headers", "--fake-hosts", "3"]).await;
    let http = crate::support::http_client();
    let list = || {
        http.get(format!("{}/compute/v2.1/os-hypervisors", server.base))
            .header("x-user-id", "op")
            .header("x-project-id", "ops")
            .header("x-roles", "admin")
            .header("x-identity-status", "Confirmed")
    };
    wait_hypervisors(list, 3, "fake hosts never registered").await;
}

/// Wait until the hypervisor list `request` gets has `n` entries.
async fn wait_hypervisors(request: impl Fn() -> reqwest::RequestBuilder, n: usize, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let list: serde_json::Value = request().send().await.expect("get").json().await.expect("json");
        if list["hypervisors"].as_array().map(Vec::len) == Some(n) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {list}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A CA and a certificate for 127.0.0.1 it signed, made with openssl:
/// (chain file with leaf then CA, key file, CA file).
fn tls_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=berth test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let chain =
        [std::fs::read(dir.join("server.pem")).expect("leaf"), std::fs::read(dir.join("ca.pem")).expect("ca")].concat();
    std::fs::write(dir.join("chain.pem"), chain).expect("chain");
    (dir.join("chain.pem"), dir.join("server.key"), dir.join("ca.pem"))
}

/// `--tls-cert`/`--tls-key`: every API over TLS, the in-process hosts too,
/// and errors hyper answers itself still carry the API's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_serves_every_api_and_its_own_hosts() {
    use std::io::BufRead;
    let dir = crate::support::fresh_dir("tls");
    let (chain, key, ca) = tls_files(&dir);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log", "info", "--fake-hosts", "2", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--tls-cert")
        .arg(&chain)
        .arg("--tls-key")
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn berth");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split(" berth serving listen=").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("berth started");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    let ca_path = ca.clone();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&ca).expect("ca")).expect("ca pem");
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .expect("client");
    let base = format!("https://{addr}");
    let root = https.get(format!("{base}/")).send().await.expect("TLS request");
    assert_eq!(root.status().as_u16(), 200);
    // The in-process hosts reach the control plane over TLS as well.
    let list = || https.get(format!("{base}/compute/v2.1/os-hypervisors")).header("x-auth-token", "admin");
    wait_hypervisors(list, 2, "in-process hosts never registered over TLS").await;
    // A head too large for hyper: the placement error body, through TLS.
    let resp = https
        .get(format!("{base}/resource_providers"))
        .header("x-auth-token", "admin")
        .header("x-big", "x".repeat(1 << 20))
        .send()
        .await
        .map_err(|e| e.without_url())
        .expect("large head");
    assert_eq!(resp.status().as_u16(), 431);
    let body: serde_json::Value = resp.json().await.expect("error body");
    assert_eq!(body["errors"][0]["status"], 431, "{body}");
    // Plain HTTP to a TLS listener gets no answer.
    let plain = crate::support::http_client().get(format!("http://{addr}/")).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    // Without the CA the certificate is not trusted.
    assert!(crate::support::http_client().get(format!("{base}/")).send().await.is_err());

    // `--keystone-ca-file`: a berth whose "Keystone" is this TLS listener
    // gets through TLS only with the CA (then the listener, no Keystone,
    // answers 404 and the start fails on that instead).
    let keystone_start = |ca_file: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--auth", "keystone", "--data-dir"])
            .arg(dir.join("ks-client"))
            .args(["--keystone-url", &format!("{base}/identity/v3"), "--keystone-user", "u"])
            .args(["--keystone-password", "p"]);
        if let Some(path) = ca_file {
            cmd.arg("--keystone-ca-file").arg(path);
        }
        let out = cmd.output().expect("run berth");
        assert!(!out.status.success());
        // The error line alone (log lines carry timestamps and ports).
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr
            .lines()
            .find(|l| l.starts_with("berth: error:"))
            .unwrap_or_else(|| panic!("no error: {stderr}"))
            .to_owned()
    };
    let untrusted = keystone_start(None);
    let trusted = keystone_start(Some(&ca_path));
    assert!(
        untrusted.contains("error sending request") && !untrusted.contains(" 404"),
        "without the CA TLS fails first: {untrusted}"
    );
    assert!(trusted.contains(" 404"), "with the CA the request reached the listener: {trusted}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `POST`/`GET` on the agent API with `token`: status and body.
async fn agent_call(base: &str, token: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let resp = crate::support::http_client()
        .post(format!("{base}/agent/v1{path}"))
        .header("x-auth-token", token)
        .json(&body)
        .send()
        .await
        .expect("agent call");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

/// `berth agent credential …` with `args`; its stdout.
fn credential_cmd(base: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "credential"])
        .args(args)
        .args(["--url", base])
        .output()
        .expect("run berth agent credential");
    assert!(out.status.success(), "berth agent credential {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Without Keystone, berth issues each host a credential: the agent that
/// holds it is the host's only voice (even before it registers), the
/// credential speaks for no other host, and once revoked it opens nothing.
/// On PostgreSQL a second process accepts a credential the first issued
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_credential_gives_a_host_its_own_identity() {
    use serde_json::json;
    let server = TestServer::start("agent-cred").await;
    let base = server.base.clone();
    let host = "credhost-0";
    let file = server.dir.join("credhost.cred");
    let printed = credential_cmd(&base, &["create", host, "--output", file.to_str().expect("path")]);
    assert!(printed.contains("written to"), "{printed}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("credential file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the credential file is its owner's alone");
    }
    let token = std::fs::read_to_string(&file).expect("read credential").trim().to_owned();
    assert!(token.starts_with(&format!("berth-agent:{host}:")), "{token}");

    // Bound before it ever registered: the noauth2 admin cannot take it.
    let registration =
        |h: &str| json!({"agent": "thief", "hosts": [{"host": h, "vcpus": 8, "memory_mb": 1, "local_gb": 1}]});
    let (code, body) = agent_call(&base, "admin", "/register", registration(host)).await;
    assert_eq!(code, 403, "{body}");

    // A real agent with the credential registers and reports inventory
    // (placement accepts its service identity).
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["agent", "--url", &base, "--hosts", "1", "--prefix", "credhost-", "--log", "warn"])
        .args(["--agent-id", "credagent"])
        .arg("--credential-file")
        .arg(&file)
        .spawn()
        .expect("spawn berth agent");
    let http = crate::support::http_client();
    let list = || http.get(format!("{base}/compute/v2.1/os-hypervisors")).header("x-auth-token", "admin");
    wait_hypervisors(list, 1, "the agent with a credential never registered").await;
    assert!(agent.try_wait().expect("agent").is_none(), "the agent exited");

    // Nobody else registers, heartbeats or reports for the host.
    let (code, body) = agent_call(&base, "admin", "/register", registration(host)).await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = agent_call(&base, "admin", "/heartbeat", json!({"agent": "thief", "hosts": [host]})).await;
    assert_eq!(code, 403);
    let event = json!({"events": [{"instance": uuid::Uuid::new_v4().to_string(), "host": host, "kind": "deleted"}]});
    assert_eq!(agent_call(&base, "admin", "/events", event).await.0, 403);
    let work = http.get(format!("{base}/agent/v1/work?agent=credagent&wait=0")).header("x-auth-token", "admin").send();
    assert_eq!(work.await.expect("work").status().as_u16(), 403, "nobody else takes the agent's work");
    // The credential speaks for its host alone.
    let (code, body) = agent_call(&base, &token, "/register", registration("elsewhere-0")).await;
    assert_eq!(code, 403, "{body}");
    // A wrong secret is a 401 with WWW-Authenticate, never a noauth2 user.
    let forged = format!("berth-agent:{host}:{}", "0".repeat(64));
    let resp = http
        .post(format!("{base}/agent/v1/heartbeat"))
        .header("x-auth-token", &forged)
        .json(&json!({"agent": "x", "hosts": [host]}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    // It is an agent's identity, not a tenant's or an admin's.
    let servers = http.get(format!("{base}/compute/v2.1/servers")).header("x-auth-token", &token).send().await;
    assert_eq!(servers.expect("send").status().as_u16(), 403);
    let admin_route =
        http.get(format!("{base}/admin/v1/agent-credentials")).header("x-auth-token", &token).send().await;
    assert_eq!(admin_route.expect("send").status().as_u16(), 403);
    let listed = credential_cmd(&base, &["list"]);
    assert!(listed.contains(host) && listed.contains("registered=true") && !listed.contains(&token[20..]), "{listed}");

    // Another process on the same database accepts a fresh credential
    // at once (PostgreSQL; SQLite has one process).
    if server.database.is_some() {
        let sibling = server.start_sibling().await;
        let issued: serde_json::Value = http
            .post(format!("{base}/admin/v1/agent-credentials"))
            .header("x-auth-token", "admin")
            .json(&json!({"host": "credhost-9"}))
            .send()
            .await
            .expect("issue")
            .json()
            .await
            .expect("json");
        let fresh = issued["credential"]["token"].as_str().expect("token").to_owned();
        let (code, body) = agent_call(&sibling.base, &fresh, "/register", registration("credhost-9")).await;
        assert_eq!(code, 200, "the sibling knows the credential: {body}");
    }

    // Revoked: the credential opens nothing and the host is unbound.
    credential_cmd(&base, &["delete", host]);
    let (code, _) = agent_call(&base, &token, "/heartbeat", json!({"agent": "x", "hosts": [host]})).await;
    assert_eq!(code, 401);
    let _ = agent.kill();
    let _ = agent.wait();
    let (code, body) = agent_call(&base, "admin", "/register", registration(host)).await;
    assert_eq!(code, 200, "{body}");
}
