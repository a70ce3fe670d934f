//! Image data (issue 38): uploads streamed to the image store with
//! Glance's checksums, `queued → saving → active`, downloads with Range,
//! interrupted and concurrent uploads, the sweep after a crash, deletion,
//! and that an upload is never held in memory. Runs on SQLite, and on
//! PostgreSQL when `TEST_DATABASE_URL` is set.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use md5::Md5;
use serde_json::{json, Value};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{fresh_dir, test_database, TestServer};

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deterministic bytes that are not all alike.
pub(crate) fn data(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

pub(crate) struct Glance {
    http: reqwest::Client,
    base: String,
    token: String,
}

pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) bytes: Vec<u8>,
}

impl Got {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Glance {
    pub(crate) fn new(server: &TestServer, token: &str) -> Self {
        Glance { http: crate::support::http_client(), base: server.base.clone(), token: token.to_owned() }
    }

    pub(crate) async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<Vec<u8>>) -> Got {
        let mut req = self
            .http
            .request(method.parse().expect("method"), format!("{}/image/v2{path}", self.base))
            .header("x-auth-token", &self.token);
        // JSON unless the caller asks for another type (errors included).
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
            req = req.header("accept", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = req.send().await.expect("image request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body").to_vec();
        Got { status, headers, bytes }
    }

    pub(crate) async fn create(&self, name: &str) -> String {
        let body = json!({"name": name, "disk_format": "raw", "container_format": "bare"}).to_string();
        let got = self.send("POST", "/images", &[("content-type", "application/json")], Some(body.into_bytes())).await;
        assert_eq!(got.status, 201, "create: {:?}", got.json());
        assert_eq!(got.json()["status"], "queued", "a new image is queued");
        got.json()["id"].as_str().expect("id").to_owned()
    }

    pub(crate) async fn upload(&self, id: &str, bytes: Vec<u8>) -> Got {
        self.send("PUT", &format!("/images/{id}/file"), &[("content-type", "application/octet-stream")], Some(bytes))
            .await
    }

    pub(crate) async fn show(&self, id: &str) -> Value {
        let got = self.send("GET", &format!("/images/{id}"), &[], None).await;
        assert_eq!(got.status, 200, "show {id}");
        got.json()
    }

    pub(crate) async fn download(&self, id: &str, range: Option<&str>) -> Got {
        let headers: Vec<(&str, &str)> = range.map(|r| vec![("range", r)]).unwrap_or_default();
        self.send("GET", &format!("/images/{id}/file"), &headers, None).await
    }

    /// Wait until the image has `status`.
    pub(crate) async fn wait_status(&self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let image = self.show(id).await;
            if image["status"] == status {
                return image;
            }
            assert!(Instant::now() < deadline, "image {id} never became {status}: {image}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An upload over a raw connection, so that a test controls when (and
/// whether) the body ends.
pub(crate) struct RawUpload {
    stream: TcpStream,
}

impl RawUpload {
    /// Send the request head of an upload declaring `length` bytes.
    pub(crate) async fn open(server: &TestServer, id: &str, length: usize) -> Self {
        let addr = server.base.trim_start_matches("http://").to_owned();
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        let head = format!(
            "PUT /image/v2/images/{id}/file HTTP/1.1\r\nHost: {addr}\r\nX-Auth-Token: admin\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        RawUpload { stream }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("body");
        self.stream.flush().await.expect("flush");
    }

    /// The status of the answer (the body must be complete).
    pub(crate) async fn status(mut self) -> u16 {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.stream.read_to_end(&mut answer)).await;
        let text = String::from_utf8_lossy(&answer);
        text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }
}

fn store_dir(server: &TestServer) -> PathBuf {
    server.dir.join("images")
}

/// The names of the files in the image store that belong to `id`.
fn files_of(dir: &Path, id: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(id)).collect()
}

#[tokio::test]
async fn images_upload_verify_and_serve_their_data() {
    // A body limit far below the image: uploads are bounded by the image
    // size cap, not by `--max-body-bytes`.
    let server = TestServer::start_with_args("images-data", &["--max-body-bytes", "4096"]).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("data").await;

    // No data yet: 204, and a boot refuses the image as Nova does.
    let got = glance.download(&id, None).await;
    assert_eq!((got.status, got.bytes.len()), (204, 0), "download before upload");

    let bytes = data(300 * 1024 + 7);
    let got = glance.upload(&id, bytes.clone()).await;
    assert_eq!(got.status, 204, "upload: {:?}", got.json());
    let image = glance.show(&id).await;
    assert_eq!(image["status"], "active");
    assert_eq!(image["size"], json!(bytes.len()));
    assert_eq!(image["checksum"], json!(hex(&Md5::digest(&bytes))));
    assert_eq!(image["os_hash_algo"], "sha512");
    assert_eq!(image["os_hash_value"], json!(hex(&Sha512::digest(&bytes))));
    assert_eq!(files_of(&store_dir(&server), &id), vec![id.clone()], "the data is stored under the image's id");

    // Download: the bytes, with Glance's headers.
    let got = glance.download(&id, None).await;
    assert_eq!(got.status, 200);
    assert!(got.bytes == bytes, "the download is the upload");
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert_eq!(got.header("content-md5"), image["checksum"].as_str());
    assert_eq!(got.header("content-length"), Some(bytes.len().to_string().as_str()));

    // Ranges.
    let got = glance.download(&id, Some("bytes=10-19")).await;
    assert_eq!(got.status, 206);
    assert_eq!(got.bytes, bytes[10..20].to_vec());
    assert_eq!(got.header("content-range"), Some(format!("bytes 10-19/{}", bytes.len()).as_str()));
    assert_eq!(got.header("content-md5"), None, "the checksum is of the whole image");
    let got = glance.download(&id, Some("bytes=-5")).await;
    assert_eq!((got.status, got.bytes.clone()), (206, bytes[bytes.len() - 5..].to_vec()));
    let got = glance.download(&id, Some(&format!("bytes={}-", bytes.len() - 3))).await;
    assert_eq!((got.status, got.bytes.clone()), (206, bytes[bytes.len() - 3..].to_vec()));
    for bad in [format!("bytes={}-", bytes.len()), "bytes=5-2".to_owned(), "bytes=0-1,4-5".to_owned()] {
        let got = glance.download(&id, Some(&bad)).await;
        assert_eq!(got.status, 416, "{bad}");
        assert_eq!(got.json()["code"], 416, "{bad}: Glance's error body");
        assert_eq!(got.header("content-range"), Some(format!("bytes */{}", bytes.len()).as_str()));
    }
    // A client that accepts anything gets the data too (no 406 here).
    let got = glance.send("GET", &format!("/images/{id}/file"), &[("accept", "application/octet-stream")], None).await;
    assert_eq!(got.status, 200);

    // An active image takes no more data (Glance's 409).
    let got = glance.upload(&id, b"more".to_vec()).await;
    assert_eq!(got.status, 409);
    assert_eq!(got.json()["message"], "Image status transition from active to saving is not allowed");

    // Another project neither sees nor writes it; its owner may not be
    // impersonated.
    let other = Glance::new(&server, "bob:projB");
    assert_eq!(other.download(&id, None).await.status, 404);
    let theirs = glance.create("not bob's").await;
    let got = other.upload(&theirs, b"x".to_vec()).await;
    assert_eq!(got.status, 404, "an image bob cannot see: {:?}", got.json());
    let got = glance.send("PUT", &format!("/images/{theirs}/file"), &[("content-type", "text/plain")], None).await;
    assert_eq!(got.status, 415);
    let got = glance.upload(&uuid::Uuid::new_v4().to_string(), b"x".to_vec()).await;
    assert_eq!(got.status, 404);

    // An empty upload is data too (Glance: size 0, active).
    let got = glance.upload(&theirs, Vec::new()).await;
    assert_eq!(got.status, 204);
    let image = glance.show(&theirs).await;
    assert_eq!((image["status"].clone(), image["size"].clone()), (json!("active"), json!(0)));
    assert_eq!(image["checksum"], "d41d8cd98f00b204e9800998ecf8427e");
    let got = glance.download(&theirs, None).await;
    assert_eq!((got.status, got.bytes.len()), (200, 0));

    // Deleting the image removes its data.
    assert_eq!(glance.send("DELETE", &format!("/images/{id}"), &[], None).await.status, 204);
    assert!(files_of(&store_dir(&server), &id).is_empty(), "the data went with the image");
    assert_eq!(glance.download(&id, None).await.status, 404);
}

#[tokio::test]
async fn an_upload_past_the_size_cap_is_refused_and_leaves_nothing() {
    let server = TestServer::start_with_args("images-cap", &["--image-size-cap", "1000"]).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("capped").await;
    // Declared too large: refused before a byte is stored.
    let got = glance.upload(&id, data(1001)).await;
    assert_eq!(got.status, 413, "{:?}", got.json());
    assert_eq!(got.json()["code"], 413);
    assert_eq!(glance.show(&id).await["status"], "queued");
    // Not declared (chunked): refused when the data passes the cap.
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    let mut request = format!(
        "PUT /image/v2/images/{id}/file HTTP/1.1\r\nHost: {addr}\r\nX-Auth-Token: admin\r\n\
         Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in [data(600), data(600)] {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&request).await.expect("chunked upload");
    let status = RawUpload { stream }.status().await;
    assert_eq!(status, 413);
    glance.wait_status(&id, "queued").await;
    assert!(files_of(&store_dir(&server), &id).is_empty(), "nothing of a refused upload is left");
    // Exactly the cap is fine.
    assert_eq!(glance.upload(&id, data(1000)).await.status, 204);
    assert_eq!(glance.show(&id).await["size"], 1000);
}

#[tokio::test]
async fn an_interrupted_upload_leaves_the_image_queued_without_data() {
    let server = TestServer::start("images-interrupted").await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("interrupted").await;
    let mut upload = RawUpload::open(&server, &id, 1 << 20).await;
    upload.send(&data(256 * 1024)).await;
    glance.wait_status(&id, "saving").await;
    assert_eq!(glance.download(&id, None).await.status, 204, "no partial data is served");
    // The client goes away halfway.
    drop(upload);
    let image = glance.wait_status(&id, "queued").await;
    assert_eq!((image["size"].clone(), image["checksum"].clone()), (Value::Null, Value::Null));
    // The handler cleans up after itself, without waiting for a sweep.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !files_of(&store_dir(&server), &id).is_empty() {
        assert!(Instant::now() < deadline, "left behind: {:?}", files_of(&store_dir(&server), &id));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(glance.download(&id, None).await.status, 204);
    // The image takes a complete upload afterwards.
    assert_eq!(glance.upload(&id, data(10)).await.status, 204);
    assert_eq!(glance.download(&id, None).await.bytes, data(10));
}

#[tokio::test]
async fn of_two_concurrent_uploads_one_wins_and_the_other_gets_409() {
    let server = TestServer::start("images-concurrent").await;
    let glance = Glance::new(&server, "admin");
    // Overlapping for certain: the second starts while the first is saving.
    let id = glance.create("contended").await;
    let first_bytes = data(64 * 1024);
    let mut first = RawUpload::open(&server, &id, first_bytes.len()).await;
    first.send(&first_bytes[..1024]).await;
    glance.wait_status(&id, "saving").await;
    let second = glance.upload(&id, b"second".to_vec()).await;
    assert_eq!(second.status, 409, "{:?}", second.json());
    assert_eq!(second.json()["message"], "Image status transition from saving to saving is not allowed");
    first.send(&first_bytes[1024..]).await;
    assert_eq!(first.status().await, 204);
    assert_eq!(glance.download(&id, None).await.bytes, first_bytes, "the winner's data, whole");

    // Started together, in whatever order they arrive: one 204, one 409.
    let id = glance.create("raced").await;
    let (a, b) = tokio::join!(glance.upload(&id, data(200_000)), glance.upload(&id, data(100_000)));
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [204, 409]);
    let size = glance.show(&id).await["size"].as_u64().expect("size") as usize;
    assert_eq!(glance.download(&id, None).await.bytes, data(size));
    assert_eq!(files_of(&store_dir(&server), &id), vec![id.clone()], "no temporary left");
}

#[tokio::test]
async fn an_upload_cut_by_a_crash_is_swept_at_restart() {
    let tag = "images-crash";
    let (dir, database) = (fresh_dir(tag), test_database(tag));
    // Processes sharing PostgreSQL take an upload for dead only once idle.
    let args = ["--image-upload-idle-secs", "1"];
    let mut server = TestServer::start_with_args_in(dir.clone(), database.clone(), &args).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("crashed").await;
    let mut upload = RawUpload::open(&server, &id, 1 << 20).await;
    upload.send(&data(128 * 1024)).await;
    glance.wait_status(&id, "saving").await;
    // An orphan (an image deleted by a process that died before removing
    // its data) and a stray temporary.
    let orphan = uuid::Uuid::new_v4().to_string();
    std::fs::write(store_dir(&server).join(&orphan), b"orphan").expect("orphan");
    std::fs::write(store_dir(&server).join(format!("{orphan}.dead.part")), b"x").expect("temporary");
    // Let the partial upload reach the disk, then crash.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !files_of(&store_dir(&server), &id).iter().any(|f| f.ends_with(".part")) {
        assert!(Instant::now() < deadline, "no temporary for the upload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    drop(upload);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let server = TestServer::start_with_args_in(dir.clone(), database, &args).await;
    let glance = Glance::new(&server, "admin");
    let image = glance.show(&id).await;
    assert_eq!(image["status"], "queued", "the dead upload's image is queued again");
    assert_eq!(image["size"], Value::Null);
    assert!(files_of(&store_dir(&server), &id).is_empty(), "the partial data is gone");
    assert!(files_of(&store_dir(&server), &orphan).is_empty(), "the orphan and the stray temporary are gone");
    assert_eq!(glance.upload(&id, data(5)).await.status, 204);
    assert_eq!(glance.download(&id, None).await.bytes, data(5));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

pub(crate) fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing"))
}

#[tokio::test]
async fn a_20_mib_upload_is_streamed_not_held_in_memory() {
    let server = TestServer::start("images-rss").await;
    let pid = server.pid().expect("pid");
    let glance = Glance::new(&server, "admin");
    // Warm up (first request paths, allocator arenas), then measure.
    let warm = glance.create("warm").await;
    assert_eq!(glance.upload(&warm, data(1 << 20)).await.status, 204);
    let id = glance.create("big").await;
    // Reset the peak ("5" to clear_refs), so that VmHWM is this upload's.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let before = rss_kib(pid, "VmRSS:");
    let bytes = data(20 << 20);
    assert_eq!(glance.upload(&id, bytes.clone()).await.status, 204);
    let peak = rss_kib(pid, "VmHWM:");
    let after = rss_kib(pid, "VmRSS:");
    eprintln!("server RSS: {before} KiB before a 20 MiB upload, {after} KiB after, peak {peak} KiB");
    assert!(after < before + 8 * 1024, "RSS grew by {} KiB for a 20 MiB upload", after - before);
    assert!(peak < before + 8 * 1024, "peak RSS {peak} KiB against {before} KiB before");
    // And a download streams too.
    let got = glance.download(&id, None).await;
    assert!(got.bytes == bytes);
    let after_download = rss_kib(pid, "VmHWM:");
    eprintln!("server peak RSS after downloading it: {after_download} KiB");
    assert!(after_download < before + 8 * 1024, "peak RSS {after_download} KiB after the download");
}
