//! Image data in an object store (`--image-store s3://BUCKET/PREFIX`),
//! against a real one: OpenStack Swift with its `s3api` middleware, which
//! `scripts/swift-throwaway.sh` installs and starts (`scripts/test.sh`
//! does, and sets `BERTH_TEST_S3_*`). Without `BERTH_TEST_S3_URL` these
//! tests print why and pass without checking anything.
//!
//! Each server gets a prefix of its own in the bucket (a test server on
//! its own SQLite sweeps everything under its prefix at start-up). The
//! tests look into the bucket with the same S3 client berth uses, and
//! into Swift's `<bucket>+segments` container (where `s3api` keeps the
//! parts of multipart uploads) with Swift's own API, when
//! `BERTH_TEST_SWIFT_AUTH_URL` is set.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use md5::Md5;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha512};

use crate::images::{data, hex, Glance, RawUpload};
use crate::support::{fresh_dir, test_database, TestServer};

/// The bucket the tests use, from the environment.
struct Bucket {
    endpoint: String,
    bucket: String,
    access: String,
    secret: String,
    s3: AmazonS3,
}

impl Bucket {
    /// None (after saying why) without `BERTH_TEST_S3_URL`.
    fn from_env(test: &str) -> Option<Bucket> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let Some(endpoint) = var("BERTH_TEST_S3_URL") else {
            eprintln!(
                "{test}: skipped: BERTH_TEST_S3_URL is not set (scripts/test.sh starts Swift with \
                 scripts/swift-throwaway.sh and sets it)"
            );
            return None;
        };
        let bucket = var("BERTH_TEST_S3_BUCKET").unwrap_or_else(|| "berth-images".to_owned());
        let access = var("BERTH_TEST_S3_ACCESS_KEY").expect("BERTH_TEST_S3_ACCESS_KEY");
        let secret = var("BERTH_TEST_S3_SECRET_KEY").expect("BERTH_TEST_S3_SECRET_KEY");
        let s3 = AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_bucket_name(&bucket)
            .with_region("us-east-1")
            .with_access_key_id(&access)
            .with_secret_access_key(&secret)
            .build()
            .expect("s3 client");
        Some(Bucket { endpoint, bucket, access, secret, s3 })
    }

    /// A prefix of one's own in the bucket.
    fn prefix(tag: &str) -> String {
        format!("it-{tag}-{}", uuid::Uuid::new_v4().simple())
    }

    /// `serve` arguments for the store under `prefix`.
    fn args(&self, prefix: &str) -> Vec<String> {
        vec![
            "--image-store".into(),
            format!("s3://{}/{prefix}", self.bucket),
            "--image-store-endpoint".into(),
            self.endpoint.clone(),
            "--image-store-access-key".into(),
            self.access.clone(),
            "--image-store-secret-key".into(),
            self.secret.clone(),
        ]
    }

    /// The keys under `prefix`, relative to it.
    async fn keys(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut listing = self.s3.list(Some(&Key::from(prefix)));
        while let Some(meta) = listing.next().await {
            let meta = meta.expect("list");
            out.push(meta.location.as_ref().trim_start_matches(prefix).trim_start_matches('/').to_owned());
        }
        out.sort();
        out
    }

    /// Wait until the keys under `prefix` are `want`.
    async fn wait_keys(&self, prefix: &str, want: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let keys = self.keys(prefix).await;
            if keys == want {
                return;
            }
            assert!(Instant::now() < deadline, "the bucket holds {keys:?} under {prefix}, expected {want:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Parts of unfinished multipart uploads under `prefix`, as Swift
    /// keeps them (None when Swift's own API is not at hand).
    async fn segments(&self, prefix: &str) -> Option<Vec<String>> {
        let auth = std::env::var("BERTH_TEST_SWIFT_AUTH_URL").ok().filter(|v| !v.is_empty())?;
        let http = crate::support::http_client();
        let got = http
            .get(&auth)
            .header("x-auth-user", &self.access)
            .header("x-auth-key", &self.secret)
            .send()
            .await
            .expect("swift auth");
        let header = |name: &str| got.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (storage, token) = (header("x-storage-url").expect("storage url"), header("x-auth-token").expect("token"));
        let url = format!("{storage}/{}+segments?format=json&prefix={prefix}/", self.bucket);
        let got = http.get(url).header("x-auth-token", token).send().await.expect("segments");
        if got.status().as_u16() == 404 {
            return Some(Vec::new());
        }
        let listing: Value = got.json().await.unwrap_or(Value::Null);
        Some(listing.as_array().into_iter().flatten().filter_map(|o| o["name"].as_str().map(str::to_owned)).collect())
    }

    /// Wait until no multipart upload under `prefix` is left unfinished.
    async fn wait_no_segments(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = self.segments(prefix).await {
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "parts of a multipart upload left: {left:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn start(bucket: &Bucket, tag: &str, prefix: &str, extra: &[&str]) -> TestServer {
    let mut args = bucket.args(prefix);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestServer::start_with_args(tag, &args).await
}

/// 40 MiB: three parts of a multipart upload.
const BIG: usize = 40 << 20;

#[tokio::test]
async fn object_store_round_trip_with_checksums_ranges_and_delete() {
    let Some(bucket) = Bucket::from_env("object_store_round_trip") else { return };
    let prefix = Bucket::prefix("roundtrip");
    let server = start(&bucket, "objects-roundtrip", &prefix, &[]).await;
    let glance = Glance::new(&server, "admin");

    // A multipart upload (three parts) and a single PUT.
    let big = glance.create("big").await;
    let bytes = data(BIG + 12_345);
    let got = glance.upload(&big, bytes.clone()).await;
    assert_eq!(got.status, 204, "upload: {:?}", got.json());
    let image = glance.show(&big).await;
    assert_eq!(image["status"], "active");
    assert_eq!(image["size"], json!(bytes.len()));
    assert_eq!(image["checksum"], json!(hex(&Md5::digest(&bytes))));
    assert_eq!(image["os_hash_value"], json!(hex(&Sha512::digest(&bytes))));
    let small = glance.create("small").await;
    assert_eq!(glance.upload(&small, data(10)).await.status, 204);
    let empty = glance.create("empty").await;
    assert_eq!(glance.upload(&empty, Vec::new()).await.status, 204);
    let mut want = vec![format!("images/{big}"), format!("images/{small}"), format!("images/{empty}")];
    want.sort();
    bucket.wait_keys(&prefix, &want).await;
    let stored = bucket.s3.head(&Key::from(format!("{prefix}/images/{big}"))).await.expect("head");
    assert_eq!(stored.size, bytes.len() as u64, "the object is the image");

    // Downloads, whole and in ranges.
    let got = glance.download(&big, None).await;
    assert_eq!(got.status, 200);
    assert!(got.bytes == bytes, "the download is the upload");
    assert_eq!(got.header("content-md5"), image["checksum"].as_str());
    let got = glance.download(&big, Some("bytes=16777200-16777299")).await;
    assert_eq!(got.status, 206);
    assert_eq!(got.bytes, bytes[16_777_200..16_777_300].to_vec(), "a range across a part boundary");
    assert_eq!(got.header("content-range"), Some(format!("bytes 16777200-16777299/{}", bytes.len()).as_str()));
    let got = glance.download(&big, Some("bytes=-7")).await;
    assert_eq!((got.status, got.bytes.clone()), (206, bytes[bytes.len() - 7..].to_vec()));
    let got = glance.download(&big, Some(&format!("bytes={}-", bytes.len()))).await;
    assert_eq!(got.status, 416);
    assert_eq!(glance.download(&small, None).await.bytes, data(10));
    let got = glance.download(&empty, None).await;
    assert_eq!((got.status, got.bytes.len()), (200, 0));

    // Deleting an image removes its object.
    assert_eq!(glance.send("DELETE", &format!("/images/{big}"), &[], None).await.status, 204);
    want.retain(|k| !k.ends_with(&big));
    bucket.wait_keys(&prefix, &want).await;
    assert_eq!(glance.download(&big, None).await.status, 404);
    bucket.wait_no_segments(&prefix).await;
}

#[tokio::test]
async fn object_store_interrupted_upload_leaves_the_image_queued_and_no_object() {
    let Some(bucket) = Bucket::from_env("object_store_interrupted") else { return };
    let prefix = Bucket::prefix("interrupted");
    let server = start(&bucket, "objects-interrupted", &prefix, &[]).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("interrupted").await;
    let mut upload = RawUpload::open(&server, &id, BIG).await;
    // More than a part: a multipart upload is under way.
    upload.send(&data(20 << 20)).await;
    glance.wait_status(&id, "saving").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while bucket.segments(&prefix).await.is_some_and(|s| s.is_empty()) {
        assert!(Instant::now() < deadline, "no part reached Swift");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(glance.download(&id, None).await.status, 204, "no partial data is served");
    drop(upload);
    let image = glance.wait_status(&id, "queued").await;
    assert_eq!((image["size"].clone(), image["checksum"].clone()), (Value::Null, Value::Null));
    // The multipart upload is aborted and the marker removed, without a
    // sweep.
    bucket.wait_keys(&prefix, &[]).await;
    bucket.wait_no_segments(&prefix).await;
    assert_eq!(glance.upload(&id, data(10)).await.status, 204);
    assert_eq!(glance.download(&id, None).await.bytes, data(10));
}

#[tokio::test]
async fn object_store_of_two_concurrent_uploads_one_wins_and_the_other_gets_409() {
    let Some(bucket) = Bucket::from_env("object_store_concurrent") else { return };
    let prefix = Bucket::prefix("concurrent");
    let server = start(&bucket, "objects-concurrent", &prefix, &[]).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("contended").await;
    let first_bytes = data(64 * 1024);
    let mut first = RawUpload::open(&server, &id, first_bytes.len()).await;
    first.send(&first_bytes[..1024]).await;
    glance.wait_status(&id, "saving").await;
    let second = glance.upload(&id, b"second".to_vec()).await;
    assert_eq!(second.status, 409, "{:?}", second.json());
    first.send(&first_bytes[1024..]).await;
    assert_eq!(first.status().await, 204);
    assert_eq!(glance.download(&id, None).await.bytes, first_bytes, "the winner's data, whole");

    let raced = glance.create("raced").await;
    let (a, b) = tokio::join!(glance.upload(&raced, data(200_000)), glance.upload(&raced, data(100_000)));
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [204, 409]);
    let size = glance.show(&raced).await["size"].as_u64().expect("size") as usize;
    assert_eq!(glance.download(&raced, None).await.bytes, data(size));
    let mut want = vec![format!("images/{id}"), format!("images/{raced}")];
    want.sort();
    bucket.wait_keys(&prefix, &want).await;
}

#[tokio::test]
async fn object_store_a_crash_mid_upload_is_swept_at_restart() {
    let Some(bucket) = Bucket::from_env("object_store_crash") else { return };
    let prefix = Bucket::prefix("crash");
    let tag = "objects-crash";
    let (dir, database) = (fresh_dir(tag), test_database(tag));
    let mut args = bucket.args(&prefix);
    // Swift's Last-Modified is in whole seconds: an idle time of a few.
    args.extend(["--image-upload-idle-secs".to_owned(), "4".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = TestServer::start_with_args_in(dir.clone(), database.clone(), &args).await;
    let glance = Glance::new(&server, "admin");
    let id = glance.create("crashed").await;
    let mut upload = RawUpload::open(&server, &id, BIG).await;
    upload.send(&data(20 << 20)).await;
    glance.wait_status(&id, "saving").await;
    // The marker names the multipart upload once a part is on its way.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys = bucket.keys(&prefix).await;
        let marker = keys.iter().find(|k| k.starts_with(&format!("uploads/{id}.")));
        if let Some(marker) = marker {
            let got = bucket.s3.get(&Key::from(format!("{prefix}/{marker}"))).await.expect("marker");
            let text: Value = serde_json::from_slice(&got.bytes().await.expect("marker body")).expect("json");
            if text["upload_id"].is_string() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no marker with a multipart upload: {keys:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An orphan: data of an image no database row knows.
    let orphan = uuid::Uuid::new_v4();
    bucket.s3.put(&Key::from(format!("{prefix}/images/{orphan}")), b"orphan".to_vec().into()).await.expect("orphan");
    server.kill9();
    drop(upload);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let server = TestServer::start_with_args_in(dir.clone(), database, &args).await;
    let glance = Glance::new(&server, "admin");
    // On PostgreSQL the start-up sweep takes only what is idle for the
    // idle time: it may take the next periodic sweep.
    let image = glance.wait_status(&id, "queued").await;
    assert_eq!(image["size"], Value::Null);
    bucket.wait_keys(&prefix, &[]).await;
    bucket.wait_no_segments(&prefix).await;
    assert_eq!(glance.upload(&id, data(5)).await.status, 204);
    assert_eq!(glance.download(&id, None).await.bytes, data(5));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn object_store_two_processes_on_one_postgresql_share_the_store() {
    let Some(bucket) = Bucket::from_env("object_store_two_processes") else { return };
    let tag = "objects-shared";
    let Some(database) = test_database(tag) else {
        eprintln!("object_store_two_processes: skipped: several processes need PostgreSQL (TEST_DATABASE_URL)");
        return;
    };
    let prefix = Bucket::prefix("shared");
    let args = bucket.args(&prefix);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Each process with a data directory of its own: the data is shared
    // only through the object store.
    let one = TestServer::start_with_args_in(fresh_dir(tag), Some(database.clone()), &args).await;
    let two = TestServer::start_with_args_in(fresh_dir(tag), Some(database), &args).await;
    let (a, b) = (Glance::new(&one, "admin"), Glance::new(&two, "admin"));
    let id = a.create("shared").await;
    let bytes = data(BIG / 2);
    assert_eq!(a.upload(&id, bytes.clone()).await.status, 204);
    let image = b.wait_status(&id, "active").await;
    assert_eq!(image["checksum"], json!(hex(&Md5::digest(&bytes))));
    let got = b.download(&id, None).await;
    assert_eq!(got.status, 200);
    assert!(got.bytes == bytes, "uploaded through one process, downloaded through the other");
    assert_eq!(b.download(&id, Some("bytes=5-9")).await.bytes, bytes[5..10].to_vec());
    // A glance-direct import staged through one and imported through the
    // other: the staged data is in the object store too.
    let staged = b.create("staged").await;
    let got = b
        .send(
            "PUT",
            &format!("/images/{staged}/stage"),
            &[("content-type", "application/octet-stream")],
            Some(data(3000)),
        )
        .await;
    assert_eq!(got.status, 204, "stage: {:?}", got.json());
    a.wait_status(&staged, "uploading").await;
    let body = json!({"method": {"name": "glance-direct"}}).to_string().into_bytes();
    let got =
        a.send("POST", &format!("/images/{staged}/import"), &[("content-type", "application/json")], Some(body)).await;
    assert_eq!(got.status, 202, "import: {:?}", got.json());
    assert_eq!(a.show(&staged).await["checksum"], json!(hex(&Md5::digest(data(3000)))));
    assert_eq!(b.download(&staged, None).await.bytes, data(3000));
    let mut want = vec![format!("images/{id}"), format!("images/{staged}")];
    want.sort();
    bucket.wait_keys(&prefix, &want).await;
    // Deleted through the second: the object goes.
    assert_eq!(b.send("DELETE", &format!("/images/{id}"), &[], None).await.status, 204);
    bucket.wait_keys(&prefix, &[format!("images/{staged}")]).await;
    assert_eq!(a.download(&id, None).await.status, 404);
}
