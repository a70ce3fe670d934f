//! `TestServer`: a real `berth serve` child process on 127.0.0.1, and a
//! small JSON client for it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory under the system temp dir.
pub(crate) fn fresh_dir(tag: &str) -> PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(sweep_stale_dirs);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("berth-it-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// Remove the directories earlier test processes left
/// (`berth-it-{tag}-{pid}-{n}`, kept for restarts and siblings, or after a
/// failure for a look), once their process is gone.
fn sweep_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("berth-it-") else { continue };
        let mut parts = rest.rsplit('-');
        let (_n, pid) = (parts.next(), parts.next().and_then(|p| p.parse::<u32>().ok()));
        let Some(pid) = pid else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The database a test server should use: a fresh PostgreSQL schema when
/// `TEST_DATABASE_URL` is set (scripts/test.sh sets it for the PostgreSQL
/// pass), else the embedded SQLite in the data directory.
pub(crate) fn test_database(tag: &str) -> Option<String> {
    let url = std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty())?;
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| sweep_stale_schemas(&url));
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let sep = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{sep}schema=it_{}_{}_{n}_{nanos}", tag.replace('-', "_"), std::process::id()))
}

/// Drop the schemas earlier test runs left (servers keep their data for
/// restarts and siblings, so a run cannot drop its own when a test ends):
/// `it_{tag}_{pid}_{n}_{nanos}` and its cells' `…_{cell}`, of test
/// processes that are gone. A live process's (another run in parallel)
/// are kept, so at most the latest run's schemas remain.
fn sweep_stale_schemas(url: &str) {
    let base = url.split('?').next().unwrap_or(url).to_owned();
    let sweep = move || -> Result<usize, postgres::Error> {
        let mut client = postgres::Client::connect(&base, postgres::NoTls)?;
        let names: Vec<String> = client
            .query("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'it\\_%'", &[])?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut dropped = 0;
        for name in names {
            let parts: Vec<&str> = name.split('_').collect();
            // The nanosecond stamp is the only long number; the pid is two
            // parts before it.
            let Some(at) = parts.iter().rposition(|p| p.len() >= 16 && p.bytes().all(|b| b.is_ascii_digit())) else {
                continue;
            };
            let Some(pid) = at.checked_sub(2).and_then(|i| parts[i].parse::<u32>().ok()) else { continue };
            if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))?;
            dropped += 1;
        }
        Ok(dropped)
    };
    // The synchronous client must not run on a runtime's thread.
    match std::thread::spawn(sweep).join() {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => eprintln!("stale test schemas not swept: {e}"),
        Err(_) => eprintln!("stale test schemas not swept: the sweep panicked"),
    }
}

/// An HTTP client for talking to berth: its pooled connections are not
/// reused after 2 s idle, well inside the server's keep-alive timeout (5 s
/// by default), so a request never goes out on a connection the server is
/// closing at that moment (the race every keep-alive client has with
/// every server that bounds idle connections).
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(2)).build().expect("http client")
}

/// A running berth server.
pub(crate) struct TestServer {
    child: Option<Child>,
    /// `--database` URL (None: SQLite in `dir`).
    pub(crate) database: Option<String>,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// Its data directory (kept across restarts).
    pub(crate) dir: PathBuf,
    keep_dir: bool,
}

impl TestServer {
    /// Start on a fresh data directory.
    pub(crate) async fn start(tag: &str) -> Self {
        Self::start_with(fresh_dir(tag), test_database(tag)).await
    }

    /// Start with extra `serve` arguments on a given directory/database.
    pub(crate) async fn start_with_args_in(dir: PathBuf, database: Option<String>, extra: &[&str]) -> Self {
        let mut server = Self::launch(dir, database, extra).await;
        server.keep_dir = true;
        server
    }

    /// Start with extra `serve` arguments.
    pub(crate) async fn start_with_args(tag: &str, extra: &[&str]) -> Self {
        Self::launch(fresh_dir(tag), test_database(tag), extra).await
    }

    /// Start another server process on the same data directory / database
    /// (for multi-process tests on PostgreSQL, or restarts).
    pub(crate) async fn start_sibling(&self) -> Self {
        let mut sibling = Self::start_with(self.dir.clone(), self.database.clone()).await;
        sibling.keep_dir = true;
        sibling
    }

    /// Start on an existing data directory and database.
    pub(crate) async fn start_with(dir: PathBuf, database: Option<String>) -> Self {
        Self::launch(dir, database, &[]).await
    }

    async fn launch(dir: PathBuf, database: Option<String>, extra: &[&str]) -> Self {
        // Port 0: the kernel gives this process a port of its own. (A port
        // picked free here and bound by the server later could be taken
        // by another test's server meanwhile, and that server's answers
        // mistaken for this one's: a "fresh" database with another test's
        // flavors, or connection refused once the other test ended.)
        for _attempt in 0..3 {
            if let Some(server) = Self::spawn_on("127.0.0.1:0", &dir, &database, extra).await {
                return server;
            }
        }
        panic!("berth did not start");
    }

    /// Spawn `berth serve --listen listen` and wait until *this* process
    /// serves: its address is the one it logs when it has bound it (`berth
    /// serving listen=…`), never a guess, and it must answer there. None if
    /// it exited or did not serve in time.
    pub(crate) async fn spawn_on(
        listen: &str,
        dir: &std::path::Path,
        database: &Option<String>,
        extra: &[&str],
    ) -> Option<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
        command.args(["serve", "--listen", listen, "--data-dir"]).arg(dir).args(extra);
        if !extra.contains(&"--log") {
            command.args(["--log", "warn,berth::serve=info"]);
        }
        if let Some(url) = database {
            command.args(["--database", url]);
            if !extra.contains(&"--change-poll-ms") {
                command.args(["--change-poll-ms", "10"]);
            }
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn berth");
        let stderr = child.stderr.take().expect("stderr");
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<String>();
        // Forward the log (as an inherited stderr would) and pick out the
        // address; the sender is dropped when the process exits.
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let mut addr_tx = Some(addr_tx);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split(" berth serving listen=").nth(1) {
                    if let Some(tx) = addr_tx.take() {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                    }
                    continue;
                }
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        });
        let mut server = TestServer {
            child: Some(child),
            database: database.clone(),
            base: String::new(),
            dir: dir.to_path_buf(),
            keep_dir: false,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        match tokio::time::timeout_at(deadline.into(), addr_rx).await {
            Ok(Ok(addr)) => server.base = format!("http://{addr}"),
            _ => {
                server.kill9();
                return None;
            }
        }
        if server.wait_ready(deadline).await {
            Some(server)
        } else {
            server.kill9();
            None
        }
    }

    async fn wait_ready(&mut self, deadline: Instant) -> bool {
        let client = crate::support::http_client();
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if let Ok(resp) = client.get(format!("{}/", self.base)).send().await {
                if resp.status().is_success() {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// SIGKILL the process (no graceful shutdown) and reap it.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL this server and start a new one on the same data.
    pub(crate) async fn restart_after_kill9(mut self) -> Self {
        self.keep_dir = true;
        self.kill9();
        let mut next = Self::start_with(self.dir.clone(), self.database.clone()).await;
        next.keep_dir = false;
        next
    }

    /// The value of an unlabelled counter or gauge at `/metrics`.
    pub(crate) async fn metric(&self, name: &str) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.base)).await.expect("metrics").text().await.expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }

    /// The server process's id (for `/proc/<pid>/status`).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A client for this server.
    pub(crate) fn client(&self) -> Client {
        Client {
            http: crate::support::http_client(),
            base: self.base.clone(),
            version: "latest".into(),
            token: "admin".into(),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
        if !self.keep_dir && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A response: status and parsed JSON body (Null when empty/not JSON).
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

/// Placement JSON client.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    /// Microversion sent.
    pub(crate) version: String,
    /// X-Auth-Token sent.
    pub(crate) token: String,
}

impl Client {
    /// Send a request with an optional JSON body.
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let mut req = self
            .http
            .request(method.parse().expect("method"), format!("{}{}", self.base, path))
            .header("x-auth-token", &self.token)
            .header("accept", "application/json")
            .header("openstack-api-version", format!("placement {}", self.version));
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        Self::finish(req).await
    }

    /// Send raw bytes with explicit headers.
    pub(crate) async fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
        let mut req = self
            .http
            .request(method.parse().expect("method"), format!("{}{}", self.base, path))
            .header("x-auth-token", &self.token)
            .header("accept", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::finish(req.body(body)).await
    }

    async fn finish(req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.expect("request failed");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply { status, body }
    }

    /// PUT `allocations` (dict form) for a new consumer of project `p`,
    /// user `u`, type INSTANCE; returns the consumer uuid and the reply.
    pub(crate) async fn claim_new(&self, allocations: serde_json::Value) -> (uuid::Uuid, Reply) {
        let consumer = uuid::Uuid::new_v4();
        let body = serde_json::json!({"allocations": allocations, "project_id": "p", "user_id": "u",
                                      "consumer_generation": null, "consumer_type": "INSTANCE"});
        (consumer, self.put(&format!("/allocations/{consumer}"), &body).await)
    }

    /// The server's base URL.
    pub(crate) fn base_url(&self) -> String {
        self.base.clone()
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None).await
    }
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Reply {
        self.call("POST", path, Some(body)).await
    }
    pub(crate) async fn put(&self, path: &str, body: &Value) -> Reply {
        self.call("PUT", path, Some(body)).await
    }
}

/// Assert a reply is a placement error with the given status.
pub(crate) fn assert_error(reply: &Reply, status: u16, what: &str) {
    assert_eq!(reply.status, status, "{what}: {:?}", reply.body);
    let error = &reply.body["errors"][0];
    assert_eq!(error["status"], status, "{what}: error body {:?}", reply.body);
    assert!(error["detail"].as_str().is_some_and(|d| !d.is_empty()), "{what}: detail missing {:?}", reply.body);
    assert!(error["request_id"].as_str().is_some_and(|r| r.starts_with("req-")), "{what}: {:?}", reply.body);
}

/// Create a provider with one inventory class, returning its uuid.
pub(crate) async fn provider_with_inventory(client: &Client, name: &str, class: &str, total: i64) -> String {
    let uuid = uuid::Uuid::new_v4().to_string();
    let created = client.post("/resource_providers", &serde_json::json!({"name": name, "uuid": uuid})).await;
    assert_eq!(created.status, 200, "create provider: {:?}", created.body);
    let inv = client
        .put(
            &format!("/resource_providers/{uuid}/inventories"),
            &serde_json::json!({"resource_provider_generation": 0, "inventories": {class: {"total": total}}}),
        )
        .await;
    assert_eq!(inv.status, 200, "set inventory: {:?}", inv.body);
    uuid
}

/// A loopback TCP proxy in front of PostgreSQL that can drop every
/// connection and refuse new ones (`cut`), or keep connections open but
/// stop forwarding (`blackhole`: the database looks hung, as behind a
/// network partition).
pub(crate) struct Proxy {
    pub(crate) port: u16,
    enabled: Arc<AtomicBool>,
    forwarding: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    forwarding: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while !forwarding.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    pub(crate) async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let enabled = Arc::new(AtomicBool::new(true));
        let forwarding = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (e, f, c) = (enabled.clone(), forwarding.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !e.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let (upstream, f) = (upstream.clone(), f.clone());
                let handle = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&upstream).await {
                        let (in_read, in_write) = inbound.into_split();
                        let (out_read, out_write) = outbound.into_split();
                        let up = tokio::spawn(pump(in_read, out_write, f.clone()));
                        pump(out_read, in_write, f).await;
                        up.abort();
                    }
                });
                if let Ok(mut list) = c.lock() {
                    list.push(handle);
                }
            }
        });
        Proxy { port, enabled, forwarding, conns, accept }
    }

    /// Drop every connection and refuse new ones.
    pub(crate) fn cut(&self) {
        self.enabled.store(false, Ordering::SeqCst);
        if let Ok(mut list) = self.conns.lock() {
            for handle in list.drain(..) {
                handle.abort();
            }
        }
    }

    /// Keep connections open but forward nothing (a hung database).
    pub(crate) fn blackhole(&self) {
        self.forwarding.store(false, Ordering::SeqCst);
    }

    /// Accept and forward again.
    pub(crate) fn restore(&self) {
        self.enabled.store(true, Ordering::SeqCst);
        self.forwarding.store(true, Ordering::SeqCst);
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
pub(crate) fn via_proxy(url: &str, proxy_port: u16) -> (String, String) {
    let after_at = url.split_once('@').map(|(_, rest)| rest).expect("url has user@host");
    let host_port = after_at.split(['/', '?']).next().expect("host:port");
    let host = host_port.split(':').next().expect("host");
    (host_port.to_owned(), url.replacen(host_port, &format!("{host}:{proxy_port}"), 1))
}

/// The `host:port` of a PostgreSQL URL.
pub(crate) fn pg_host_port(url: &str) -> String {
    via_proxy(url, 0).0
}

/// The URL with its port replaced by `port`.
pub(crate) fn via_port(url: &str, port: u16) -> String {
    via_proxy(url, port).1
}
