//! The object-store backend of the image store: image data in an S3
//! bucket (OpenStack Swift's `s3api`, or any S3-compatible store), through
//! the `object_store` crate (Apache Arrow's).
//!
//! Keys, under an optional prefix: `images/<id>` (an image's data),
//! `staged/<id>` (`glance-direct` staged data) and `uploads/<id>.<random>`
//! (a marker while an upload runs: which key it writes and its multipart
//! upload id). An upload is a multipart upload of bounded parts, hashed as
//! it goes; it becomes visible under its key only when completed, so no
//! partial data is ever seen there; a failed one is aborted. A crash leaves
//! the marker, whose upload the sweep aborts once it has been idle for the
//! grace period (an upload rewrites its marker while data arrives).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use berth_compute_model::ImageHashes;
use berth_http::{ApiError, ApiResult};
use futures_util::{Stream, StreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::MultipartStore;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, MultipartId, ObjectStore, ObjectStoreExt, PutPayload};
use uuid::Uuid;

use crate::streamed::{too_large, Hasher, Slot};

/// The smallest part of a multipart upload (S3's minimum is 5 MiB); the
/// part size grows with the declared length and every 250 parts, so that
/// an image fits in [`MAX_PARTS`] parts.
const PART: u64 = 16 << 20;
/// Swift's `s3api` allows 1000 parts (`max_upload_part_num`), S3 10000.
const MAX_PARTS: u64 = 1000;
/// S3's largest part.
const MAX_PART: u64 = 5 << 30;
/// How often a running upload rewrites its marker at most (more often
/// when uploads are taken for dead sooner: a quarter of that time).
const MARKER_REFRESH: Duration = Duration::from_secs(60);

/// Where the object store is and how to reach it.
#[derive(Clone, Default)]
pub struct ObjectStoreConfig {
    /// `s3://BUCKET` or `s3://BUCKET/PREFIX`.
    pub url: String,
    /// The S3 endpoint (`http://swift-proxy:8080`); AWS's from the region
    /// when absent.
    pub endpoint: Option<String>,
    /// The region SigV4 signs for (Swift's `s3api` `location`, `us-east-1`
    /// by default).
    pub region: Option<String>,
    /// The access key (Swift tempauth: `account:user`; Keystone: an EC2
    /// credential's access).
    pub access_key: Option<String>,
    /// The secret key.
    pub secret_key: Option<String>,
}

impl std::fmt::Debug for ObjectStoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret key.
        f.debug_struct("ObjectStoreConfig")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// The bucket, the prefix, and the runtime the client lives on.
pub(crate) struct Objects {
    s3: Arc<AmazonS3>,
    bucket: String,
    prefix: String,
    handle: tokio::runtime::Handle,
    /// How often a running upload rewrites its marker.
    refresh: Duration,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// An object-store failure: the detail goes to the log, the client gets
/// a 500 (an unreachable store is the operator's problem).
pub(crate) fn object_error(err: object_store::Error) -> ApiError {
    tracing::error!(error = %err, "image object store");
    ApiError::internal()
}

fn part_size(declared: Option<u64>, parts: u64) -> u64 {
    let by_length = declared.map_or(0, |n| n.div_ceil(MAX_PARTS - 10));
    (PART << (parts / 250).min(8)).max(by_length).min(MAX_PART)
}

impl Objects {
    /// Open the bucket named by `config` (on the current tokio runtime);
    /// uploads idle for `idle` are taken for dead by the sweep.
    pub(crate) fn open(config: &ObjectStoreConfig, idle: Duration) -> anyhow::Result<Self> {
        let rest = config
            .url
            .strip_prefix("s3://")
            .ok_or_else(|| anyhow::anyhow!("--image-store {}: expected s3://BUCKET[/PREFIX]", config.url))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        anyhow::ensure!(!bucket.is_empty(), "--image-store {}: no bucket", config.url);
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(config.region.as_deref().unwrap_or("us-east-1"));
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(key) = &config.access_key {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_key {
            builder = builder.with_secret_access_key(secret);
        }
        let s3 = builder.build().map_err(|e| anyhow::anyhow!("--image-store {}: {e}", config.url))?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the object image store needs a tokio runtime"))?;
        let refresh = (idle / 4).clamp(Duration::from_millis(100), MARKER_REFRESH);
        Ok(Objects { s3: Arc::new(s3), bucket: bucket.to_owned(), prefix, handle, refresh })
    }

    /// `s3://bucket/prefix`, for the log.
    pub(crate) fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    pub(crate) fn key(&self, slot: Slot, id: &Uuid) -> Key {
        let dir = match slot {
            Slot::Data => "images",
            Slot::Staged => "staged",
        };
        Key::from(format!("{}{dir}/{id}", self.prefix))
    }

    fn marker(&self, id: &Uuid) -> Key {
        Key::from(format!("{}uploads/{id}.{}", self.prefix, Uuid::new_v4().simple()))
    }

    /// Run `future` to its end from synchronous code (the sweep, at
    /// start-up inside the runtime or on its own thread).
    pub(crate) fn block<F: std::future::Future>(&self, future: F) -> F::Output {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.handle.block_on(future))
        } else {
            self.handle.block_on(future)
        }
    }

    /// Remove an image's data and staged data, in the background.
    pub(crate) fn remove_later(&self, id: &Uuid) {
        let (s3, keys) = (self.s3.clone(), [self.key(Slot::Data, id), self.key(Slot::Staged, id)]);
        self.handle.spawn(async move {
            for key in keys {
                delete(&s3, &key).await;
            }
        });
    }

    /// Remove one slot's object now.
    pub(crate) async fn remove(&self, slot: Slot, id: &Uuid) {
        delete(&self.s3, &self.key(slot, id)).await;
    }

    async fn put_marker(&self, marker: &Key, key: &Key, upload: Option<&MultipartId>) -> ApiResult<()> {
        let body = serde_json::json!({"key": key.as_ref(), "upload_id": upload}).to_string();
        self.s3.put(marker, PutPayload::from(body.into_bytes())).await.map_err(object_error)?;
        Ok(())
    }

    /// Write `body` (at most `cap` bytes; `declared` long if known) to
    /// `slot`, hashing it: visible there only once complete. Returns the
    /// size and hashes.
    pub(crate) async fn receive<S>(
        &self,
        id: &Uuid,
        slot: Slot,
        body: S,
        cap: u64,
        declared: Option<u64>,
    ) -> ApiResult<(u64, ImageHashes)>
    where
        S: Stream<Item = ApiResult<Bytes>> + Unpin,
    {
        let key = self.key(slot, id);
        let marker = self.marker(id);
        self.put_marker(&marker, &key, None).await?;
        let mut upload = Upload { key, marker, id: None, parts: Vec::new(), inflight: None, marked: Instant::now() };
        let outcome = self.write(&mut upload, body, cap, declared).await;
        if outcome.is_err() {
            upload.abort(self).await;
        }
        delete(&self.s3, &upload.marker).await;
        outcome
    }

    async fn write<S>(
        &self,
        up: &mut Upload,
        mut body: S,
        cap: u64,
        declared: Option<u64>,
    ) -> ApiResult<(u64, ImageHashes)>
    where
        S: Stream<Item = ApiResult<Bytes>> + Unpin,
    {
        let mut hasher = Hasher::default();
        let mut size: u64 = 0;
        let (mut buffer, mut buffered): (Vec<Bytes>, u64) = (Vec::new(), 0);
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            size = size.saturating_add(chunk.len() as u64);
            if size > cap {
                return Err(too_large());
            }
            hasher.update(&chunk);
            // Alive: a marker untouched for the idle time is a dead upload's.
            if up.marked.elapsed() >= self.refresh {
                self.put_marker(&up.marker, &up.key, up.id.as_ref()).await?;
                up.marked = Instant::now();
            }
            buffered += chunk.len() as u64;
            buffer.push(chunk);
            if buffered >= part_size(declared, up.parts.len() as u64) {
                self.send_part(up, std::mem::take(&mut buffer)).await?;
                buffered = 0;
            }
        }
        if up.id.is_none() {
            // Small enough for one part: one PUT, atomic as well.
            self.s3.put(&up.key, buffer.into_iter().collect::<PutPayload>()).await.map_err(object_error)?;
        } else {
            if buffered > 0 {
                self.send_part(up, buffer).await?;
            }
            up.settle().await?;
            let (key, id) = (up.key.clone(), up.id.clone().unwrap_or_default());
            self.s3.complete_multipart(&key, &id, std::mem::take(&mut up.parts)).await.map_err(object_error)?;
            up.id = None;
        }
        Ok((size, hasher.finish()))
    }

    /// Send one part; the previous one is awaited first, so at most one
    /// part is in flight while the next is buffered.
    async fn send_part(&self, up: &mut Upload, chunks: Vec<Bytes>) -> ApiResult<()> {
        if up.id.is_none() {
            let id = self.s3.create_multipart(&up.key).await.map_err(object_error)?;
            up.id = Some(id);
            // Recorded before any part is sent: a crash from here on
            // leaves a marker the sweep aborts the upload by.
            self.put_marker(&up.marker, &up.key, up.id.as_ref()).await?;
            up.marked = Instant::now();
        }
        up.settle().await?;
        let (s3, key, id, index) = (self.s3.clone(), up.key.clone(), up.id.clone().unwrap_or_default(), up.parts.len());
        let payload: PutPayload = chunks.into_iter().collect();
        up.inflight = Some(tokio::spawn(async move { s3.put_part(&key, &id, index, payload).await }));
        Ok(())
    }

    /// The object at `slot`, its size (None: there is none).
    pub(crate) async fn size(&self, slot: Slot, id: &Uuid) -> ApiResult<Option<u64>> {
        match self.s3.head(&self.key(slot, id)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(object_error(e)),
        }
    }

    /// `length` bytes of `slot` from `start`, as a stream.
    pub(crate) async fn read(
        &self,
        slot: Slot,
        id: &Uuid,
        start: u64,
        length: u64,
    ) -> ApiResult<futures_util::stream::BoxStream<'static, std::io::Result<Bytes>>> {
        if length == 0 {
            return Ok(futures_util::stream::empty().boxed());
        }
        let options = GetOptions { range: Some(GetRange::Bounded(start..start + length)), ..GetOptions::default() };
        let got = self.s3.get_opts(&self.key(slot, id), options).await.map_err(object_error)?;
        Ok(got.into_stream().map(|r| r.map_err(std::io::Error::other)).boxed())
    }

    /// Everything the store holds under the prefix: (name relative to the
    /// prefix, key, age).
    pub(crate) async fn listing(&self) -> ApiResult<Vec<(String, Key, Duration)>> {
        let mut out = Vec::new();
        for dir in ["images", "staged", "uploads"] {
            let prefix = Key::from(format!("{}{dir}", self.prefix));
            let mut objects = self.s3.list(Some(&prefix));
            while let Some(meta) = objects.next().await {
                let meta = meta.map_err(object_error)?;
                let name = meta.location.filename().unwrap_or_default().to_owned();
                let age = SystemTime::from(meta.last_modified).elapsed().unwrap_or_default();
                out.push((format!("{dir}/{name}"), meta.location, age));
            }
        }
        Ok(out)
    }

    /// Discard what `key` is: a marker's multipart upload is aborted and
    /// the marker removed; anything else deleted.
    pub(crate) async fn discard(&self, key: &Key, marker: bool) {
        if marker {
            if let Ok(got) = self.s3.get(key).await {
                if let Ok(bytes) = got.bytes().await {
                    let text: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                    if let (Some(target), Some(upload)) = (text["key"].as_str(), text["upload_id"].as_str()) {
                        let aborted = self.s3.abort_multipart(&Key::from(target), &upload.to_owned()).await;
                        if let Err(e) = aborted {
                            tracing::warn!(key = target, error = %e, "dead multipart upload not aborted");
                        }
                    }
                }
            }
        }
        delete(&self.s3, key).await;
    }

    /// Stream staged data into the image's data object, hashing it; the
    /// staged object is removed once the data is in place.
    pub(crate) async fn import(&self, id: &Uuid, cap: u64) -> ApiResult<(u64, ImageHashes)> {
        let got = self.s3.get(&self.key(Slot::Staged, id)).await.map_err(object_error)?;
        let declared = Some(got.meta.size);
        let stream = got.into_stream().map(|r| r.map_err(object_error));
        let done = self.receive(id, Slot::Data, stream, cap, declared).await?;
        self.remove(Slot::Staged, id).await;
        Ok(done)
    }
}

async fn delete(s3: &AmazonS3, key: &Key) {
    match s3.delete(key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => tracing::warn!(key = %key, error = %e, "image object not removed"),
    }
}

/// A multipart upload in progress.
struct Upload {
    key: Key,
    marker: Key,
    /// Set once the multipart upload is created (until completed).
    id: Option<MultipartId>,
    parts: Vec<object_store::multipart::PartId>,
    inflight: Option<tokio::task::JoinHandle<object_store::Result<object_store::multipart::PartId>>>,
    marked: Instant,
}

impl Upload {
    /// Wait for the part in flight.
    async fn settle(&mut self) -> ApiResult<()> {
        if let Some(sent) = self.inflight.take() {
            let part = sent.await.map_err(|_| ApiError::internal())?.map_err(object_error)?;
            self.parts.push(part);
        }
        Ok(())
    }

    /// Abort the multipart upload, if one was started.
    async fn abort(&mut self, objects: &Objects) {
        if let Some(sent) = self.inflight.take() {
            sent.abort();
            let _ = sent.await;
        }
        if let Some(id) = self.id.take() {
            if let Err(e) = objects.s3.abort_multipart(&self.key, &id).await {
                tracing::warn!(key = %self.key, error = %e, "multipart upload not aborted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_stay_within_the_part_count() {
        assert_eq!(part_size(None, 0), PART);
        assert_eq!(part_size(Some(1 << 30), 0), PART, "a 1 GiB image: 16 MiB parts");
        assert_eq!(part_size(None, 250), 2 * PART, "unknown length: parts grow every 250");
        let tib = 1u64 << 40;
        assert!(part_size(Some(tib), 0) * (MAX_PARTS - 10) >= tib, "1 TiB fits in the part count");
        let unknown: u64 = (0..MAX_PARTS).map(|n| part_size(None, n)).sum();
        assert!(unknown >= 50 << 30, "a chunked upload of 50 GiB fits: {unknown}");
    }
}
