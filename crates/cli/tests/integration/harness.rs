//! The test harness itself: a started server is the process the test
//! spawned, never another test's server that holds the same port (a
//! "fresh" server that already had another test's flavors, or that
//! refused connections once the other test ended, under a loaded suite).

use crate::support::{fresh_dir, TestServer};

#[tokio::test]
async fn a_server_is_never_mistaken_for_another_on_its_port() {
    let first = TestServer::start("harness-first").await;
    let taken = first.base.trim_start_matches("http://").to_owned();
    // A second process asked to listen where the first one already does
    // cannot bind; the first one's answers there must not make it "ready".
    let dir = fresh_dir("harness-second");
    let second = TestServer::spawn_on(&taken, &dir, &crate::support::test_database("harness-second"), &[]).await;
    assert!(second.is_none(), "a process that could not bind {taken} was taken for a running server");
    let _ = std::fs::remove_dir_all(&dir);
    // Two servers started at once get ports of their own.
    let (a, b) = tokio::join!(TestServer::start("harness-a"), TestServer::start("harness-b"));
    assert_ne!(a.base, b.base);
    assert_eq!(a.client().get("/").await.status, 200);
    assert_eq!(b.client().get("/").await.status, 200);
}
