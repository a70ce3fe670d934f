//! Snapshot and backup images of servers (`createImage`, `createBackup`):
//! the image record Nova's `compute_utils.create_image` makes (its
//! properties inherited from the server's image as Nova inherits them),
//! the rotation of backups, and which image a server's snapshot under way
//! uploads to.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{ComputeError, Image, Timestamp, World, WorldChangeSet};

/// Properties a snapshot never inherits: Nova's
/// `NON_INHERITABLE_IMAGE_PROPERTIES` (the shelve snapshot's list) and
/// the default `[DEFAULT] non_inheritable_image_properties`.
const NOT_INHERITED_BY_DEFAULT: &[&str] = &["cache_in_nova", "bittorrent"];

/// What kind of image a server's snapshot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotKind {
    /// `createImage`: `image_type=snapshot`.
    Snapshot,
    /// `createBackup`: `image_type=backup` with its `backup_type`.
    Backup {
        /// `daily`, `weekly`, ... (any string).
        backup_type: String,
    },
}

/// A snapshot to record.
#[derive(Debug, Clone)]
pub struct SnapshotImage<'a> {
    /// The new image's id.
    pub id: Uuid,
    /// Its name.
    pub name: &'a str,
    /// Snapshot or backup.
    pub kind: SnapshotKind,
    /// The server.
    pub instance: Uuid,
    /// The server's project.
    pub instance_project: &'a str,
    /// The caller's project (the image's owner, as Glance records it).
    pub caller_project: &'a str,
    /// The caller (`user_id`).
    pub caller_user: &'a str,
    /// The image the server was booted from (`base_image_ref`).
    pub image_ref: Option<Uuid>,
    /// That image's properties as recorded at boot.
    pub image_properties: &'a BTreeMap<String, String>,
    /// The `metadata` of the request (these win over inherited ones).
    pub metadata: &'a BTreeMap<String, String>,
}

/// Record the image a `createImage` or `createBackup` uploads to
/// (`queued`, no data): Nova's properties (`image_type`, `instance_uuid`,
/// `user_id`, `base_image_ref`, `backup_type`), the base image's
/// inheritable properties, `min_disk`/`min_ram` of the base image,
/// private to the server's project (`shared`, with `instance_owner`, when
/// someone else takes it).
pub fn plan_snapshot_image(world: &World, snapshot: &SnapshotImage<'_>, now: Timestamp) -> Result<WorldChangeSet> {
    if world.compute.images.contains_key(&snapshot.id) {
        return Err(ComputeError::Conflict(format!("Image with identifier {} already exists!", snapshot.id)));
    }
    let base = snapshot.image_ref.and_then(|id| world.compute.images.get(&id));
    let mut properties: BTreeMap<String, String> = snapshot
        .image_properties
        .iter()
        .filter(|(k, _)| {
            !crate::rehome::NOT_INHERITED.contains(&k.as_str())
                && !NOT_INHERITED_BY_DEFAULT.contains(&k.as_str())
                && !k.starts_with("os_glance")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(base) = snapshot.image_ref {
        properties.insert("base_image_ref".to_owned(), base.to_string());
    }
    properties.insert("instance_uuid".to_owned(), snapshot.instance.to_string());
    properties.insert("user_id".to_owned(), snapshot.caller_user.to_owned());
    let image_type = match &snapshot.kind {
        SnapshotKind::Snapshot => "snapshot",
        SnapshotKind::Backup { backup_type } => {
            properties.insert("backup_type".to_owned(), backup_type.clone());
            "backup"
        }
    };
    properties.insert("image_type".to_owned(), image_type.to_owned());
    let visibility = if snapshot.caller_project == snapshot.instance_project {
        "private"
    } else {
        properties.insert("instance_owner".to_owned(), snapshot.instance_project.to_owned());
        "shared"
    };
    properties.extend(snapshot.metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut set = WorldChangeSet::new();
    // A snapshot starts only from no task state, so one of this server
    // still waiting for data was abandoned (its task reset by an admin):
    // it goes, and the agent's task names the new one unambiguously.
    for stale in pending_snapshots(world, &snapshot.instance) {
        set.compute(C::DeleteImage(stale.id));
    }
    set.compute(C::PutImage(Image {
        id: snapshot.id,
        name: Some(snapshot.name.to_owned()),
        status: "queued".to_owned(),
        visibility: visibility.to_owned(),
        protected: false,
        owner: Some(snapshot.caller_project.to_owned()),
        // Nova leaves a snapshot's formats to the driver's upload; the
        // fake and libvirt drivers upload the server's disk as its image
        // had it.
        disk_format: Some(base.and_then(|i| i.disk_format.clone()).unwrap_or_else(|| "qcow2".to_owned())),
        container_format: Some(base.and_then(|i| i.container_format.clone()).unwrap_or_else(|| "bare".to_owned())),
        min_disk: base.map_or(0, |i| i.min_disk),
        min_ram: base.map_or(0, |i| i.min_ram),
        size: None,
        hashes: None,
        tags: Vec::new(),
        properties,
        members: BTreeMap::new(),
        created_at: now,
        updated_at: now,
    }));
    Ok(set)
}

/// Nova's `_rotate_backups`: of `instance`'s backups of `backup_type`,
/// keep `newest` (the one just started) and the newest others up to
/// `rotation` in all, and delete the rest. Returns the ids deleted (their
/// data goes too).
pub fn plan_rotate_backups(
    world: &World,
    instance: &Uuid,
    backup_type: &str,
    rotation: usize,
    newest: &Uuid,
) -> (WorldChangeSet, Vec<Uuid>) {
    let instance = instance.to_string();
    let mut backups: Vec<&Image> = world
        .compute
        .images
        .values()
        .filter(|i| {
            i.properties.get("image_type").map(String::as_str) == Some("backup")
                && i.properties.get("backup_type").map(String::as_str) == Some(backup_type)
                && i.properties.get("instance_uuid") == Some(&instance)
                && i.id != *newest
        })
        .collect();
    backups.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    let mut set = WorldChangeSet::new();
    let mut gone = Vec::new();
    for image in backups.into_iter().skip(rotation.saturating_sub(1)).filter(|i| !i.protected) {
        set.compute(C::DeleteImage(image.id));
        gone.push(image.id);
    }
    (set, gone)
}

/// The image a snapshot or backup of `instance` under way uploads to:
/// its newest image (`instance_uuid`) still `queued` or `saving`. The task state
/// allows one at a time, so the instance names it (and a task re-driven
/// after a restart finds it again).
pub fn snapshot_image_of(world: &World, instance: &Uuid) -> Option<Uuid> {
    pending_snapshots(world, instance)
        .max_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)))
        .map(|i| i.id)
}

/// The snapshot images of `instance` still waiting for data: a server
/// that is gone leaves none of them behind.
pub fn pending_snapshot_ids(world: &World, instance: &Uuid) -> Vec<Uuid> {
    pending_snapshots(world, instance).map(|i| i.id).collect()
}

/// The images of `instance` (`instance_uuid`) waiting for data.
fn pending_snapshots<'w>(world: &'w World, instance: &Uuid) -> impl Iterator<Item = &'w Image> + 'w {
    let instance = instance.to_string();
    world
        .compute
        .images
        .values()
        .filter(|i| matches!(i.status.as_str(), "queued" | "saving"))
        // Not by `image_type`: the request's metadata may replace it.
        .filter(move |i| i.properties.get("instance_uuid") == Some(&instance))
}
