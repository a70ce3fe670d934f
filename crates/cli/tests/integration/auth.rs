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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let list: serde_json::Value = http
            .get(format!("{}/compute/v2.1/os-hypervisors", server.base))
            .header("x-user-id", "op")
            .header("x-project-id", "ops")
            .header("x-roles", "admin")
            .header("x-identity-status", "Confirmed")
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if list["hypervisors"].as_array().map(Vec::len) == Some(3) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "fake hosts never registered: {list}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
