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
