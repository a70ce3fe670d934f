//! The database becomes unreachable under load: writes get 503 with the
//! placement error body, reads keep being served from memory, and service
//! recovers without a restart when the database returns. Runs in the
//! PostgreSQL pass; the outage is made by a TCP proxy between berth and
//! PostgreSQL that the test cuts and restores.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::support::{fresh_dir, test_database, TestServer};

/// A loopback TCP proxy that can drop all connections and refuse new ones.
struct Proxy {
    port: u16,
    enabled: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let enabled = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (e, c) = (enabled.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !e.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut list) = c.lock() {
                    list.push(handle);
                }
            }
        });
        Proxy { port, enabled, conns, accept }
    }

    fn cut(&self) {
        self.enabled.store(false, Ordering::SeqCst);
        if let Ok(mut list) = self.conns.lock() {
            for handle in list.drain(..) {
                handle.abort();
            }
        }
    }

    fn restore(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// `postgres://user@host:port/db?schema=…` -> (`host:port`, url with the
/// proxy's port instead).
fn via_proxy(url: &str, proxy_port: u16) -> (String, String) {
    let after_at = url.split_once('@').map(|(_, rest)| rest).expect("url has user@host");
    let host_port = after_at.split(['/', '?']).next().expect("host:port");
    let host = host_port.split(':').next().expect("host");
    (host_port.to_owned(), url.replacen(host_port, &format!("{host}:{proxy_port}"), 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_outage_gives_503_and_recovers() {
    let Some(direct) = test_database("outage") else {
        eprintln!("outage test needs PostgreSQL (TEST_DATABASE_URL); not run on SQLite");
        return;
    };
    let (upstream, _) = via_proxy(&direct, 0);
    let proxy = Proxy::start(upstream).await;
    let (_, proxied) = via_proxy(&direct, proxy.port);
    let server = TestServer::start_with(fresh_dir("outage"), Some(proxied)).await;
    let client = server.client();
    let create = |n: usize| {
        let client = client.clone();
        async move {
            client
                .post(
                    "/resource_providers",
                    &json!({"name": format!("o-{n}"), "uuid": uuid::Uuid::new_v4().to_string()}),
                )
                .await
        }
    };
    let mut acknowledged = Vec::new();
    for n in 0..10 {
        let r = create(n).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned());
    }

    proxy.cut();
    let mut saw_503 = 0;
    for n in 10..30 {
        let r = create(n).await;
        match r.status {
            503 => {
                saw_503 += 1;
                assert_eq!(r.body["errors"][0]["status"], 503, "{:?}", r.body);
            }
            200 => acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned()),
            other => panic!("during the outage a write must answer 503, got {other}: {:?}", r.body),
        }
        // Reads are answered from memory during the outage.
        assert_eq!(client.get("/resource_providers").await.status, 200);
    }
    assert!(saw_503 >= 19, "writes during the outage must fail with 503 (saw {saw_503})");
    let health = client.get("/healthcheck").await;
    assert_eq!(health.status, 503, "healthcheck must report the outage: {:?}", health.body);

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 100;
    loop {
        let r = create(n).await;
        n += 1;
        if r.status == 200 {
            acknowledged.push(r.body["uuid"].as_str().expect("uuid").to_owned());
            break;
        }
        assert_eq!(r.status, 503, "{:?}", r.body);
        assert!(Instant::now() < deadline, "service did not recover after the database returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(client.get("/healthcheck").await.status, 200);
    // Nothing acknowledged was lost and nothing is half-written: a fresh
    // process loading from the database sees every acknowledged provider.
    let fresh = server.start_sibling().await;
    let listed = fresh.client().get("/resource_providers").await;
    let present: Vec<&str> =
        listed.body["resource_providers"].as_array().expect("list").iter().filter_map(|p| p["uuid"].as_str()).collect();
    for uuid in &acknowledged {
        assert!(present.contains(&uuid.as_str()), "acknowledged provider {uuid} lost");
    }
}
