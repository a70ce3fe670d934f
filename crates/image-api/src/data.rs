//! Image data: `PUT /v2/images/{id}/file` streams the body into the image
//! store (hashing it as it goes) and `GET` streams it back;
//! [`ImageStore::sweep`] removes what a crash or a deletion left behind.
//!
//! Two stores: a directory (the default) or an object store
//! ([`crate::objects`], S3: Swift's `s3api` or any S3-compatible one).
//! In a directory an image's data is the file named by its id; an upload
//! writes `<id>.<random>.part` first, fsyncs it and renames it into place
//! only when the body is complete and within the size cap, so no partial
//! data is ever visible under an image's name (in an object store the
//! multipart upload plays the temporary's part). The status
//! moves `queued → saving` (a compare-and-set in one planned write: of
//! two concurrent uploads the second finds `saving` and gets 409), then
//! `saving → active` with size and hashes in one planned write after the
//! rename; a failed upload goes back to `queued` and leaves no file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use berth_compute_model::plan::{plan_abort_image_upload, plan_begin_image_upload, plan_finish_image_upload};
use berth_compute_model::{Image, ImageHashes};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use uuid::Uuid;

use berth_compute_api::api::{self, is_admin};

use crate::handlers::find;
use crate::objects::{ObjectStoreConfig, Objects};
pub(crate) use crate::streamed::{too_large, Hasher, Slot};
use crate::ImageCtx;

/// Glance's `image_size_cap` default: 1 TiB.
pub const DEFAULT_IMAGE_SIZE_CAP: u64 = 1 << 40;

/// How much of an upload is buffered before it is written to the file.
const WRITE_BUFFER: usize = 256 * 1024;
/// How much of the file one download chunk reads.
const READ_CHUNK: usize = 64 * 1024;

/// Where image data lives, how large an image may be, and the per-project
/// quotas.
#[derive(Debug)]
pub struct ImageStore {
    dir: PathBuf,
    /// `Some`: the data is in an object store (`dir` is unused).
    objects: Option<Objects>,
    size_cap: u64,
    quotas: ImageQuotas,
}

/// What the store holds of one image, wherever it is.
enum Location {
    File(PathBuf),
    Object(object_store::path::Path),
}

/// Per-project image quotas (Glance's unified limits `image_count_total`
/// and `image_size_total`; `None`: unlimited, Glance's default without
/// limits). Each is checked in the planned write that would pass it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageQuotas {
    /// Most images a project may have.
    pub count_total: Option<u64>,
    /// Most image data a project may store, in MiB.
    pub size_total_mib: Option<u64>,
}

/// oslo.limit's refusal, which Glance answers with 413.
fn over_limit(project: &str, resource: &str, limit: u64, usage: u64, delta: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "Project {project} is over a limit for [Resource {resource} is over limit of {limit} due to current \
             usage {usage} and delta {delta}]"
        ),
    )
}

impl ImageQuotas {
    /// Refuse one more image for `project` past `image_count_total`.
    pub fn check_count(&self, world: &berth_compute_model::World, project: Option<&str>) -> ApiResult<()> {
        let (Some(limit), Some(project)) = (self.count_total, project) else { return Ok(()) };
        let usage = world.compute.images.values().filter(|i| i.owner.as_deref() == Some(project)).count() as u64;
        if usage + 1 > limit {
            return Err(over_limit(project, "image_count_total", limit, usage, 1));
        }
        Ok(())
    }

    /// Refuse `size` more bytes of data for image `id` past
    /// `image_size_total` (usage: the data of the owner's other images,
    /// in MiB rounded up, as Glance counts it).
    pub fn check_size(&self, world: &berth_compute_model::World, id: &Uuid, size: u64) -> ApiResult<()> {
        let Some(limit) = self.size_total_mib else { return Ok(()) };
        let Some(project) = world.compute.images.get(id).and_then(|i| i.owner.clone()) else { return Ok(()) };
        let used: u64 = world
            .compute
            .images
            .values()
            .filter(|i| i.owner.as_deref() == Some(project.as_str()) && i.id != *id)
            .filter_map(|i| i.size)
            .map(|s| u64::try_from(s).unwrap_or(0))
            .sum();
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        if mib(used + size) > limit {
            return Err(over_limit(&project, "image_size_total", limit, mib(used), mib(size)));
        }
        Ok(())
    }
}

/// What one [`ImageStore::sweep`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Temporary files removed (uploads that never completed).
    pub temporaries: usize,
    /// Data files removed (of images gone, or not `active`).
    pub orphans: usize,
    /// Images given back to `queued` (their upload died with a process).
    pub requeued: usize,
}

/// A file of the store, by its name.
enum Entry {
    Data(Uuid),
    Temporary(Uuid),
    Staged(Uuid),
}

fn entry(name: &str) -> Option<Entry> {
    // In an object store: `images/<id>`, `staged/<id>`, `uploads/<id>.<random>`.
    if let Some(id) = name.strip_prefix("images/") {
        return Uuid::parse_str(id).ok().map(Entry::Data);
    }
    if let Some(id) = name.strip_prefix("staged/") {
        return Uuid::parse_str(id).ok().map(Entry::Staged);
    }
    if let Some(marker) = name.strip_prefix("uploads/") {
        let (id, _) = marker.split_once('.')?;
        return Uuid::parse_str(id).ok().map(Entry::Temporary);
    }
    if let Ok(id) = Uuid::parse_str(name) {
        return Some(Entry::Data(id));
    }
    let (id, rest) = name.split_once('.')?;
    if rest == "staged" {
        return Uuid::parse_str(id).ok().map(Entry::Staged);
    }
    rest.ends_with(".part").then_some(())?;
    Uuid::parse_str(id).ok().map(Entry::Temporary)
}

impl ImageStore {
    /// The store in `dir` (created if missing), refusing images larger
    /// than `size_cap` bytes.
    pub fn open(dir: PathBuf, size_cap: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create the image store {}: {e}", dir.display()))?;
        Ok(ImageStore { dir, objects: None, size_cap, quotas: ImageQuotas::default() })
    }

    /// The store in the object store `config` names (the bucket must
    /// exist), refusing images larger than `size_cap` bytes; uploads idle
    /// for `idle` are taken for dead. Needs the tokio runtime its client
    /// is to run on.
    pub fn open_objects(config: &ObjectStoreConfig, size_cap: u64, idle: Duration) -> anyhow::Result<Self> {
        let objects = Objects::open(config, idle)?;
        Ok(ImageStore { dir: PathBuf::new(), objects: Some(objects), size_cap, quotas: ImageQuotas::default() })
    }

    /// Where the data is, for the log.
    pub fn describe(&self) -> String {
        match &self.objects {
            Some(objects) => objects.describe(),
            None => self.dir.display().to_string(),
        }
    }

    /// The same store with per-project `quotas`.
    pub fn with_quotas(self, quotas: ImageQuotas) -> Self {
        ImageStore { quotas, ..self }
    }

    /// The per-project quotas.
    pub fn quotas(&self) -> &ImageQuotas {
        &self.quotas
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data_path(&self, id: &Uuid) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// Where an image's staged data waits for its import (`uploading`).
    fn staged_path(&self, id: &Uuid) -> PathBuf {
        self.dir.join(format!("{id}.staged"))
    }

    fn temporary_path(&self, id: &Uuid) -> PathBuf {
        self.dir.join(format!("{id}.{}.part", Uuid::new_v4().simple()))
    }

    /// Remove an image's data and staged data, if it has any (from an
    /// object store in the background).
    pub fn remove(&self, id: &Uuid) {
        if let Some(objects) = &self.objects {
            objects.remove_later(id);
            return;
        }
        remove_file(&self.data_path(id));
        remove_file(&self.staged_path(id));
    }

    /// Remove one of an image's data now.
    pub(crate) async fn remove_slot(&self, slot: Slot, id: &Uuid) {
        match (&self.objects, slot) {
            (Some(objects), _) => objects.remove(slot, id).await,
            (None, Slot::Data) => remove_file(&self.data_path(id)),
            (None, Slot::Staged) => remove_file(&self.staged_path(id)),
        }
    }

    /// Write `body` to `slot` of image `id`, hashing it, within the size
    /// cap (`declared`: the length announced, if any): visible there only
    /// once whole. Returns the size and hashes.
    pub(crate) async fn receive<S>(
        &self,
        id: &Uuid,
        slot: Slot,
        body: S,
        declared: Option<u64>,
    ) -> ApiResult<(u64, ImageHashes)>
    where
        S: Stream<Item = ApiResult<Bytes>> + Unpin,
    {
        if let Some(objects) = &self.objects {
            return objects.receive(id, slot, body, self.size_cap, declared).await;
        }
        let temporary = self.temporary_path(id);
        let received = receive_file(&temporary, body, self.size_cap).await;
        let placed = received.and_then(|done| {
            let path = match slot {
                Slot::Data => self.data_path(id),
                Slot::Staged => self.staged_path(id),
            };
            match std::fs::rename(&temporary, &path).and_then(|()| sync_dir(&self.dir)) {
                Ok(()) => Ok(done),
                // The sweep took the temporary of an upload idle for longer
                // than `--image-upload-idle-secs` (and gave the image back).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiError::conflict(format!(
                    "The upload to image {id} was idle for too long and was abandoned."
                ))),
                Err(e) => Err(storage_error(e)),
            }
        });
        if placed.is_err() {
            remove_file(&temporary);
        }
        placed
    }

    /// The size of `slot`'s data (None: there is none).
    async fn size(&self, slot: Slot, id: &Uuid) -> ApiResult<Option<u64>> {
        if let Some(objects) = &self.objects {
            return objects.size(slot, id).await;
        }
        let path = match slot {
            Slot::Data => self.data_path(id),
            Slot::Staged => self.staged_path(id),
        };
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage_error(e)),
        }
    }

    /// `length` bytes of an image's data from `start`, as a stream.
    async fn read(
        &self,
        id: &Uuid,
        start: u64,
        length: u64,
    ) -> ApiResult<futures_util::stream::BoxStream<'static, std::io::Result<Bytes>>> {
        if let Some(objects) = &self.objects {
            return objects.read(Slot::Data, id, start, length).await;
        }
        let mut file = tokio::fs::File::open(self.data_path(id)).await.map_err(storage_error)?;
        if start > 0 {
            file.seek(std::io::SeekFrom::Start(start)).await.map_err(storage_error)?;
        }
        let chunks = futures_util::stream::unfold((file, length), |(mut file, left)| async move {
            if left == 0 {
                return None;
            }
            let want = usize::try_from(left).unwrap_or(usize::MAX).min(READ_CHUNK);
            let mut buf = vec![0u8; want];
            match file.read(&mut buf).await {
                Ok(0) => Some((Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)), (file, 0))),
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), (file, left - n as u64)))
                }
                Err(e) => Some((Err(e), (file, 0))),
            }
        });
        Ok(chunks.boxed())
    }

    /// Move an image's staged data into place as its data, hashing it.
    /// Returns the size and hashes.
    pub(crate) async fn import_staged(&self, id: &Uuid) -> ApiResult<(u64, ImageHashes)> {
        if let Some(objects) = &self.objects {
            return objects.import(id, self.size_cap).await;
        }
        let staged = self.staged_path(id);
        let mut file = tokio::fs::File::open(&staged).await.map_err(storage_error)?;
        let mut hasher = Hasher::default();
        let mut size: u64 = 0;
        let mut buf = vec![0u8; WRITE_BUFFER];
        loop {
            let n = file.read(&mut buf).await.map_err(storage_error)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        drop(file);
        std::fs::rename(&staged, self.data_path(id)).and_then(|()| sync_dir(&self.dir)).map_err(storage_error)?;
        Ok((size, hasher.finish()))
    }

    /// What the store holds: (what, where, how long untouched).
    /// None when the store cannot be listed (then nothing is swept: an
    /// upload whose temporary is not seen must not be taken for dead).
    fn entries(&self) -> Option<Vec<(Entry, Location, Duration)>> {
        let mut files = Vec::new();
        if let Some(objects) = &self.objects {
            let Ok(listing) = objects.block(objects.listing()) else {
                tracing::warn!("the image object store could not be listed: not swept");
                return None;
            };
            for (name, key, age) in listing {
                if let Some(kind) = entry(&name) {
                    files.push((kind, Location::Object(key), age));
                }
            }
            return Some(files);
        }
        let Ok(listing) = std::fs::read_dir(&self.dir) else { return None };
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let Some(kind) = entry(&name) else { continue };
            let age = item.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            files.push((kind, Location::File(item.path()), age.unwrap_or(Duration::MAX)));
        }
        Some(files)
    }

    /// Remove what the sweep found dead (a dead upload's multipart upload
    /// is aborted).
    fn discard(&self, kind: &Entry, location: &Location) {
        match (location, &self.objects) {
            (Location::File(path), _) => remove_file(path),
            (Location::Object(key), Some(objects)) => {
                objects.block(objects.discard(key, matches!(kind, Entry::Temporary(_))));
            }
            (Location::Object(_), None) => {}
        }
    }

    /// Remove what interrupted uploads and deletions left: temporaries,
    /// data files of images that are gone or not `active`, and give back
    /// to `queued` the images left `saving` by a process that died. Only
    /// files untouched for `idle` count (an upload in progress writes its
    /// temporary continuously); `Duration::ZERO` at the start-up of the
    /// only process using the store takes everything.
    pub fn sweep(&self, core: &berth_core::App, idle: Duration) -> SweepReport {
        let mut report = SweepReport::default();
        let Some(files) = self.entries() else { return report };
        // An upload is alive while its temporary (or marker) is fresh.
        let mut uploading = std::collections::BTreeSet::new();
        for (kind, path, age) in &files {
            if let Entry::Temporary(id) = kind {
                if *age >= idle {
                    self.discard(kind, path);
                    report.temporaries += 1;
                } else {
                    uploading.insert(*id);
                }
            }
        }
        let now = berth_core::now();
        let stuck: Vec<Uuid> = core
            .read()
            .compute
            .images
            .values()
            .filter(|i| matches!(i.status.as_str(), "saving" | "importing") && !uploading.contains(&i.id))
            .filter(|i| now.saturating_sub(i.updated_at) >= idle.as_secs() as i64)
            .map(|i| i.id)
            .collect();
        // A stage that died before its file was in place leaves an
        // `uploading` image without staged data.
        let staged: std::collections::BTreeSet<Uuid> = files
            .iter()
            .filter_map(|(kind, _, _)| if let Entry::Staged(id) = kind { Some(*id) } else { None })
            .collect();
        let stuck_stages: Vec<Uuid> = core
            .read()
            .compute
            .images
            .values()
            .filter(|i| i.status == "uploading" && !uploading.contains(&i.id) && !staged.contains(&i.id))
            .filter(|i| now.saturating_sub(i.updated_at) >= idle.as_secs() as i64)
            .map(|i| i.id)
            .collect();
        for id in stuck.into_iter().chain(stuck_stages) {
            let requeued = core.write(|w| {
                let set = plan_abort_image_upload(w, &id, now).map_err(api::refused)?;
                let changed = !set.is_empty();
                Ok::<_, ApiError>((set, changed))
            });
            match requeued {
                Ok(true) => {
                    tracing::warn!(image = %id, "an upload died with its process: the image is queued again");
                    report.requeued += 1;
                }
                Ok(false) => {}
                Err(err) => tracing::warn!(image = %id, error = %err.detail, "image not requeued"),
            }
        }
        for (kind, path, age) in &files {
            let (id, wanted): (&Uuid, &[&str]) = match kind {
                Entry::Data(id) => (id, &["active", "deactivated"]),
                // Staged data is kept while its image waits for an import.
                Entry::Staged(id) => (id, &["uploading", "importing"]),
                Entry::Temporary(_) => continue,
            };
            let kept = core.read().compute.images.get(id).is_some_and(|i| wanted.contains(&i.status.as_str()));
            if !kept && *age >= idle {
                self.discard(kind, path);
                report.orphans += 1;
            }
        }
        report
    }
}

pub(crate) fn remove_file(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "image data not removed"),
    }
}

/// Make a rename durable: fsync the directory holding it.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The store failed: a full disk (or quota) is Glance's 413, anything else
/// a 500 with the detail only in the log.
pub(crate) fn storage_error(err: std::io::Error) -> ApiError {
    if matches!(err.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) {
        tracing::warn!(error = %err, "image store full");
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Image storage media is full: There is not enough disk space on the image storage media.",
        );
    }
    tracing::error!(error = %err, "image store");
    ApiError::internal()
}

/// `PUT /image/v2/images/{id}/file`.
pub fn upload(ctx: Arc<ImageCtx>, req: Req, body: Body) -> HandlerFuture {
    Box::pin(async move { upload_data(&ctx, &req, body).await })
}

/// Glance takes image data (upload and stage) only as
/// `application/octet-stream` (415 otherwise).
pub(crate) fn require_octet_stream(req: &Req) -> ApiResult<()> {
    let content_type = req
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    if content_type.as_deref() != Some("application/octet-stream") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Invalid content type {}", content_type.as_deref().unwrap_or("None")),
        ));
    }
    Ok(())
}

async fn upload_data(ctx: &ImageCtx, req: &Req, body: Body) -> ApiResult<Resp> {
    require_octet_stream(req)?;
    // The agent of the server's host sees the snapshot it uploads.
    let image = match find(ctx, req) {
        Ok(image) => image,
        Err(err) => {
            let id = Uuid::parse_str(req.param(0)).map_err(|_| err.clone())?;
            let image = ctx.core.read().compute.images.get(&id).cloned();
            image.filter(|i| crate::handlers::agent_snapshot(ctx, req, i)).ok_or(err)?
        }
    };
    if !is_admin(req)
        && image.owner.as_deref() != req.auth.project_id.as_deref()
        && !crate::handlers::agent_snapshot(ctx, req, &image)
    {
        return Err(ApiError::forbidden("You are not permitted to upload data to this image."));
    }
    let declared = req.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > ctx.store.size_cap) {
        return Err(too_large());
    }
    let id = image.id;
    ctx.core
        .write(|w| plan_begin_image_upload(w, &id, berth_core::now()).map(|set| (set, ())).map_err(api::refused))?;
    // In place before the image says `active`: a crash between the two
    // leaves a `saving` image whose data the sweep removes.
    let finished = match ctx.store.receive(&id, Slot::Data, body_stream(body), declared).await {
        Ok((size, hashes)) => {
            let now = berth_core::now();
            let size = i64::try_from(size).unwrap_or(i64::MAX);
            let written = ctx.core.write(|w| {
                ctx.store.quotas.check_size(w, &id, u64::try_from(size).unwrap_or(0))?;
                plan_finish_image_upload(w, &id, size, hashes, now).map(|set| (set, ())).map_err(api::refused)
            });
            match written {
                Ok(()) => Ok(()),
                Err(err) => {
                    ctx.store.remove_slot(Slot::Data, &id).await;
                    Err(if err.status == StatusCode::NOT_FOUND {
                        ApiError::new(
                            StatusCode::GONE,
                            format!(
                                "Image {id} could not be found after upload. The image may have been deleted \
                                 during the upload."
                            ),
                        )
                    } else {
                        err
                    })
                }
            }
        }
        Err(err) => Err(err),
    };
    match finished {
        Ok(()) => Ok(Resp::no_content()),
        Err(err) => {
            let _ = ctx.core.write(|w| {
                plan_abort_image_upload(w, &id, berth_core::now()).map(|set| (set, ())).map_err(api::refused)
            });
            Err(err)
        }
    }
}

/// A request body as a stream of its data (a broken body, or a client
/// that went away, is an error: the upload must not count).
pub(crate) fn body_stream(body: Body) -> impl Stream<Item = ApiResult<Bytes>> + Unpin {
    body.into_data_stream().map(|r| r.map_err(|_| ApiError::bad_request("The request body could not be read.")))
}

/// Write `body` into `temporary`, hashing it, within `cap`; fsync it.
/// Returns the size and hashes.
async fn receive_file<S>(temporary: &Path, mut body: S, cap: u64) -> ApiResult<(u64, ImageHashes)>
where
    S: Stream<Item = ApiResult<Bytes>> + Unpin,
{
    let file =
        tokio::fs::OpenOptions::new().write(true).create_new(true).open(temporary).await.map_err(storage_error)?;
    let mut file = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut hasher = Hasher::default();
    let mut size: u64 = 0;
    while let Some(data) = body.next().await {
        let data = data?;
        size = size.saturating_add(data.len() as u64);
        if size > cap {
            return Err(too_large());
        }
        hasher.update(&data);
        file.write_all(&data).await.map_err(storage_error)?;
    }
    file.flush().await.map_err(storage_error)?;
    file.get_ref().sync_all().await.map_err(storage_error)?;
    Ok((size, hasher.finish()))
}

/// A `Range: bytes=…` request against `size` bytes: `Ok(None)` without
/// one, the inclusive span otherwise, `Err` for one that cannot be served
/// (416, as Glance: several ranges, or none within the data).
fn byte_range(header: Option<&axum::http::HeaderValue>, size: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(value) = header else { return Ok(None) };
    let text = value.to_str().map_err(|_| ())?.trim();
    let spec = text.strip_prefix("bytes=").ok_or(())?.trim();
    if spec.contains(',') {
        return Err(());
    }
    let (first, last) = spec.split_once('-').ok_or(())?;
    let (first, last) = (first.trim(), last.trim());
    let span = match (first.is_empty(), last.is_empty()) {
        // `bytes=-N`: the last N bytes.
        (true, false) => {
            let n: u64 = last.parse().map_err(|_| ())?;
            if n == 0 || size == 0 {
                return Err(());
            }
            (size.saturating_sub(n), size - 1)
        }
        (false, _) => {
            let a: u64 = first.parse().map_err(|_| ())?;
            let b: u64 = if last.is_empty() { u64::MAX } else { last.parse().map_err(|_| ())? };
            if a > b || a >= size {
                return Err(());
            }
            (a, b.min(size - 1))
        }
        (true, true) => return Err(()),
    };
    Ok(Some(span))
}

/// `GET /image/v2/images/{id}/file`.
pub fn download(ctx: Arc<ImageCtx>, req: Req, _body: Body) -> HandlerFuture {
    Box::pin(async move { download_data(&ctx, &req).await })
}

async fn download_data(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let image: Image = crate::handlers::find_readable(ctx, req)?;
    if image.status == "deactivated" && !is_admin(req) {
        return Err(ApiError::forbidden("The requested image has been deactivated. Image data download is forbidden."));
    }
    // Glance: an image without data answers 204 (so does a snapshot berth
    // recorded without data).
    if image.status != "active" && image.status != "deactivated" {
        return Ok(Resp::no_content());
    }
    let Some(size) = ctx.store.size(Slot::Data, &image.id).await? else { return Ok(Resp::no_content()) };
    let range = byte_range(req.headers.get("range"), size).map_err(|()| {
        let mut err = ApiError::new(StatusCode::RANGE_NOT_SATISFIABLE, "Requested range not satisfiable");
        err.headers.push(("content-range", format!("bytes */{size}")));
        err
    })?;
    let (start, length) = match range {
        Some((a, b)) => (a, b - a + 1),
        None => (0, size),
    };
    let chunks = ctx.store.read(&image.id, start, length).await?;
    let status = if range.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let mut resp = Resp::stream(status, Body::from_stream(chunks))
        .header("content-type", "application/octet-stream")
        .header("content-length", length.to_string());
    match range {
        Some((a, b)) => resp = resp.header("content-range", format!("bytes {a}-{b}/{size}")),
        // Glance sends the checksum of the whole image only.
        None => {
            if let Some(hashes) = &image.hashes {
                resp = resp.header("content-md5", &hashes.checksum);
            }
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_file_names() {
        let id = Uuid::new_v4();
        assert!(matches!(entry(&id.to_string()), Some(Entry::Data(x)) if x == id));
        assert!(matches!(entry(&format!("{id}.abc.part")), Some(Entry::Temporary(x)) if x == id));
        assert!(entry("lost+found").is_none());
        assert!(entry(&format!("{id}.abc")).is_none());
        assert_eq!(crate::streamed::hex(&[0, 15, 255]), "000fff");
    }

    #[test]
    fn byte_ranges_as_glance_serves_them() {
        let range = |text: &str, size| byte_range(Some(&axum::http::HeaderValue::from_str(text).unwrap()), size);
        assert_eq!(byte_range(None, 10), Ok(None));
        assert_eq!(range("bytes=0-3", 10), Ok(Some((0, 3))));
        assert_eq!(range("bytes=4-", 10), Ok(Some((4, 9))));
        assert_eq!(range("bytes=5-100", 10), Ok(Some((5, 9))), "a range past the end is cut to the data");
        assert_eq!(range("bytes=-3", 10), Ok(Some((7, 9))));
        assert_eq!(range("bytes=-30", 10), Ok(Some((0, 9))));
        for bad in ["bytes=10-12", "bytes=4-2", "bytes=0-1,3-4", "items=0-1", "bytes=-", "bytes=a-b", "bytes=-0"] {
            assert_eq!(range(bad, 10), Err(()), "{bad}");
        }
        assert_eq!(range("bytes=0-0", 0), Err(()), "an empty image has no byte 0");
    }
}
