//! Authentication modes over HTTP: keystonemiddleware's trusted headers.

use crate::support::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_headers_mode() {
    let server = TestServer::start_with_args("trusted", &["--auth", "trusted-headers"]).await;
    let base = server.base.clone();
    let http = reqwest::Client::new();
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
    let http = reqwest::Client::new();
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
    let http = reqwest::Client::new();
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
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&ca).expect("ca")).expect("ca pem");
    let https = reqwest::Client::builder().add_root_certificate(ca).build().expect("client");
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
    let plain = reqwest::Client::new().get(format!("http://{addr}/")).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    // Without the CA the certificate is not trusted.
    assert!(reqwest::Client::new().get(format!("{base}/")).send().await.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
