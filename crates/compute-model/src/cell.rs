//! Cell-database entities: instances, services, compute nodes, instance
//! actions and faults. They live in each cell's own database; the cell
//! store (`berth_store::CellStore`) reads and writes them with queries.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::{Flavor, InstanceSpec, Timestamp};

/// Nova's `vm_states`.
pub mod vm_state {
    /// Running.
    pub const ACTIVE: &str = "active";
    /// Being built.
    pub const BUILDING: &str = "building";
    /// Powered off.
    pub const STOPPED: &str = "stopped";
    /// Resized, awaiting confirm/revert.
    pub const RESIZED: &str = "resized";
    /// Paused.
    pub const PAUSED: &str = "paused";
    /// Suspended.
    pub const SUSPENDED: &str = "suspended";
    /// In rescue mode.
    pub const RESCUED: &str = "rescued";
    /// Failed.
    pub const ERROR: &str = "error";
    /// Deleted.
    pub const DELETED: &str = "deleted";
    /// Soft-deleted.
    pub const SOFT_DELETED: &str = "soft-delete";
    /// Shelved on its host.
    pub const SHELVED: &str = "shelved";
    /// Shelved and offloaded.
    pub const SHELVED_OFFLOADED: &str = "shelved_offloaded";
    /// A reserved server waiting for its lease (berth's, after Climate's
    /// `RESERVED`): only ever a held build request, never a cell row.
    pub const RESERVED: &str = "reserved";
}

/// Nova's `task_states` that berth uses.
pub mod task_state {
    /// Waiting for the scheduler.
    pub const SCHEDULING: &str = "scheduling";
    /// The agent is building it.
    pub const SPAWNING: &str = "spawning";
    /// Live migrating (the row stays on the source until it completes).
    pub const MIGRATING: &str = "migrating";
    /// Being deleted.
    pub const DELETING: &str = "deleting";
    /// Being started.
    pub const POWERING_ON: &str = "powering-on";
    /// Being stopped.
    pub const POWERING_OFF: &str = "powering-off";
    /// Soft reboot.
    pub const REBOOTING: &str = "rebooting";
    /// Hard reboot.
    pub const REBOOTING_HARD: &str = "rebooting_hard";
    /// A resize or cold migration is being scheduled and claimed.
    pub const RESIZE_PREP: &str = "resize_prep";
    /// The source host is handing the instance over.
    pub const RESIZE_MIGRATING: &str = "resize_migrating";
    /// The destination host is finishing the move.
    pub const RESIZE_FINISH: &str = "resize_finish";
    /// A finished move is being reverted.
    pub const RESIZE_REVERTING: &str = "resize_reverting";
    /// A finished move is being confirmed (berth records it on the row so
    /// the source's cleanup is agent work the sweep can find; the status
    /// stays `VERIFY_RESIZE`, as in Nova where confirming sets no task
    /// state).
    pub const RESIZE_CONFIRMING: &str = "resize_confirming";
    /// An evacuation is being scheduled and claimed.
    pub const REBUILDING: &str = "rebuilding";
    /// The evacuation's destination is rebuilding the instance.
    pub const REBUILD_SPAWNING: &str = "rebuild_spawning";
    /// The host is shelving the instance (powering it off).
    pub const SHELVING: &str = "shelving";
    /// The host is removing a shelved instance.
    pub const SHELVING_OFFLOADING: &str = "shelving_offloading";
    /// Being unshelved (scheduled and claimed when offloaded, then spawned
    /// by the host once the row names one).
    pub const UNSHELVING: &str = "unshelving";
    /// The host is pausing it.
    pub const PAUSING: &str = "pausing";
    /// The host is unpausing it.
    pub const UNPAUSING: &str = "unpausing";
    /// The host is suspending it.
    pub const SUSPENDING: &str = "suspending";
    /// The host is resuming it.
    pub const RESUMING: &str = "resuming";
    /// The host is booting it from its rescue image.
    pub const RESCUING: &str = "rescuing";
    /// The host is booting it from its own disk again.
    pub const UNRESCUING: &str = "unrescuing";
    /// The host is powering it off for a soft delete.
    pub const SOFT_DELETING: &str = "soft-deleting";
    /// The host is powering a soft-deleted instance on again.
    pub const RESTORING: &str = "restoring";
    /// The host is taking a `createImage` snapshot and uploading it.
    pub const IMAGE_SNAPSHOT: &str = "image_snapshot";
    /// The host is taking a `createBackup` image and uploading it.
    pub const IMAGE_BACKUP: &str = "image_backup";
}

/// Nova's migration statuses for cold moves, in order.
pub mod migration_status {
    /// Created, the destination not chosen yet.
    pub const PRE_MIGRATING: &str = "pre-migrating";
    /// Claimed; the source hands the instance over.
    pub const MIGRATING: &str = "migrating";
    /// The destination finishes the move.
    pub const POST_MIGRATING: &str = "post-migrating";
    /// Done; awaiting confirm or revert (`VERIFY_RESIZE`).
    pub const FINISHED: &str = "finished";
    /// Confirm under way.
    pub const CONFIRMING: &str = "confirming";
    /// Confirmed: the source's resources are released.
    pub const CONFIRMED: &str = "confirmed";
    /// Revert under way.
    pub const REVERTING: &str = "reverting";
    /// Reverted: the instance is back on the source with its old flavor.
    pub const REVERTED: &str = "reverted";
    /// Failed (no valid host, ...).
    pub const ERROR: &str = "error";
    /// An evacuation was accepted; its destination is not claimed yet.
    pub const ACCEPTED: &str = "accepted";
    /// An evacuation's destination rebuilt the instance; the source has
    /// not cleaned up yet.
    pub const DONE: &str = "done";
    /// An evacuation's source destroyed its copy and lost its allocations.
    pub const COMPLETED: &str = "completed";
    /// An evacuation's rebuild failed on the destination.
    pub const FAILED: &str = "failed";
    /// A live migration waits for its turn (listed; berth goes from
    /// `accepted` straight to `preparing`).
    pub const QUEUED: &str = "queued";
    /// A live migration's destination prepares (Nova's
    /// `pre_live_migration`).
    pub const PREPARING: &str = "preparing";
    /// A live migration's memory is being copied (the source's work).
    pub const RUNNING: &str = "running";
    /// A live migration was aborted: the instance stays on the source.
    pub const CANCELLED: &str = "cancelled";
}

/// A move of an instance (Nova's `migrations` table, one per cell).
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// Cell-local id (Nova's `id`).
    pub id: i64,
    /// Migration uuid: also the placement consumer holding the source's
    /// resources while the move is under way.
    pub uuid: Uuid,
    /// Instance moved.
    pub instance_uuid: Uuid,
    /// `resize` or `migration`.
    pub migration_type: String,
    /// See [`migration_status`].
    pub status: String,
    /// Source host.
    pub source_compute: Option<String>,
    /// Source node.
    pub source_node: Option<String>,
    /// Destination host (once chosen).
    pub dest_compute: Option<String>,
    /// Destination node.
    pub dest_node: Option<String>,
    /// Destination host IP.
    pub dest_host: Option<String>,
    /// Flavor before the move.
    pub old_flavor: Flavor,
    /// Flavor after the move (the same for a migration).
    pub new_flavor: Flavor,
    /// Owner user.
    pub user_id: String,
    /// Owner project.
    pub project_id: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Option<Timestamp>,
}

/// What `GET /os-migrations` asks for (every field optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigrationFilter {
    /// Source or destination host.
    pub host: Option<String>,
    /// Status.
    pub status: Option<String>,
    /// Instance.
    pub instance_uuid: Option<Uuid>,
    /// `resize`, `migration`, ...
    pub migration_type: Option<String>,
    /// Source host.
    pub source_compute: Option<String>,
    /// Updated at or after.
    pub changes_since: Option<Timestamp>,
    /// Updated at or before.
    pub changes_before: Option<Timestamp>,
    /// Owner user.
    pub user_id: Option<String>,
    /// Owner project.
    pub project_id: Option<String>,
}

impl MigrationFilter {
    /// Does `m` match?
    pub fn matches(&self, m: &Migration) -> bool {
        let updated = m.updated_at.unwrap_or(m.created_at);
        self.host.as_ref().is_none_or(|h| m.source_compute.as_ref() == Some(h) || m.dest_compute.as_ref() == Some(h))
            && self.status.as_ref().is_none_or(|s| &m.status == s)
            && self.instance_uuid.is_none_or(|u| m.instance_uuid == u)
            && self.migration_type.as_ref().is_none_or(|t| &m.migration_type == t)
            && self.source_compute.as_ref().is_none_or(|h| m.source_compute.as_ref() == Some(h))
            && self.changes_since.is_none_or(|t| updated >= t)
            && self.changes_before.is_none_or(|t| updated <= t)
            && self.user_id.as_ref().is_none_or(|u| &m.user_id == u)
            && self.project_id.as_ref().is_none_or(|p| &m.project_id == p)
    }
}

/// Nova's `power_state` values.
pub mod power_state {
    /// No state (not yet built).
    pub const NOSTATE: i64 = 0;
    /// Running.
    pub const RUNNING: i64 = 1;
    /// Paused.
    pub const PAUSED: i64 = 3;
    /// Shut down.
    pub const SHUTDOWN: i64 = 4;
    /// Crashed.
    pub const CRASHED: i64 = 6;
    /// Suspended.
    pub const SUSPENDED: i64 = 7;
}

/// The API `status` of a vm/task state pair (Nova's `_STATE_MAP`).
pub fn status_from_state(vm_state: &str, task_state: Option<&str>) -> &'static str {
    let task = task_state.unwrap_or("");
    match vm_state {
        "active" => match task {
            "rebooting" | "reboot_pending" | "reboot_started" => "REBOOT",
            "rebooting_hard" | "reboot_pending_hard" | "reboot_started_hard" => "HARD_REBOOT",
            "updating_password" => "PASSWORD",
            "rebuilding" | "rebuild_block_device_mapping" | "rebuild_spawning" => "REBUILD",
            "migrating" => "MIGRATING",
            "resize_prep" | "resize_migrating" | "resize_migrated" | "resize_finish" => "RESIZE",
            _ => "ACTIVE",
        },
        "building" => "BUILD",
        "stopped" => match task {
            "resize_prep" | "resize_migrating" | "resize_migrated" | "resize_finish" => "RESIZE",
            "rebuilding" | "rebuild_block_device_mapping" | "rebuild_spawning" => "REBUILD",
            _ => "SHUTOFF",
        },
        "resized" => match task {
            "resize_reverting" => "REVERT_RESIZE",
            _ => "VERIFY_RESIZE",
        },
        "paused" => match task {
            "migrating" => "MIGRATING",
            _ => "PAUSED",
        },
        "suspended" => "SUSPENDED",
        "rescued" => "RESCUE",
        "error" => match task {
            "rebuilding" | "rebuild_block_device_mapping" | "rebuild_spawning" => "REBUILD",
            _ => "ERROR",
        },
        "deleted" => "DELETED",
        "soft-delete" => "SOFT_DELETED",
        "shelved" => "SHELVED",
        "shelved_offloaded" => "SHELVED_OFFLOADED",
        "reserved" => "RESERVED",
        _ => "UNKNOWN",
    }
}

/// The vm states whose default status is `status` (case-insensitive), for
/// the `status` list filter. Task-specific statuses (REBOOT, RESIZE, ...)
/// map to their vm state and task states.
pub fn states_for_status(status: &str) -> Option<(Vec<&'static str>, Option<Vec<&'static str>>)> {
    let status = status.to_ascii_uppercase();
    let default = |vm: &'static str| Some((vec![vm], None));
    match status.as_str() {
        "ACTIVE" => Some((vec!["active"], Some(vec![]))),
        "BUILD" => default("building"),
        "SHUTOFF" => Some((vec!["stopped"], Some(vec![]))),
        "VERIFY_RESIZE" => Some((vec!["resized"], Some(vec![]))),
        "REVERT_RESIZE" => Some((vec!["resized"], Some(vec!["resize_reverting"]))),
        "PAUSED" => Some((vec!["paused"], Some(vec![]))),
        "SUSPENDED" => default("suspended"),
        "RESCUE" => default("rescued"),
        "ERROR" => Some((vec!["error"], Some(vec![]))),
        "DELETED" => default("deleted"),
        "SOFT_DELETED" => default("soft-delete"),
        "SHELVED" => default("shelved"),
        "SHELVED_OFFLOADED" => default("shelved_offloaded"),
        "RESERVED" => default("reserved"),
        "REBOOT" => Some((vec!["active"], Some(vec!["rebooting", "reboot_pending", "reboot_started"]))),
        "HARD_REBOOT" => {
            Some((vec!["active"], Some(vec!["rebooting_hard", "reboot_pending_hard", "reboot_started_hard"])))
        }
        "MIGRATING" => Some((vec!["active", "paused"], Some(vec!["migrating"]))),
        "RESIZE" => Some((
            vec!["active", "stopped"],
            Some(vec!["resize_prep", "resize_migrating", "resize_migrated", "resize_finish"]),
        )),
        "REBUILD" => Some((
            vec!["active", "stopped", "error"],
            Some(vec!["rebuilding", "rebuild_block_device_mapping", "rebuild_spawning"]),
        )),
        _ => None,
    }
}

/// An instance row in a cell database.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Instance id.
    pub uuid: Uuid,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// Compute host, once scheduled.
    pub host: Option<String>,
    /// Hypervisor node, once scheduled.
    pub node: Option<String>,
    /// The availability zone the instance is in.
    pub availability_zone: Option<String>,
    /// `vm_state`.
    pub vm_state: String,
    /// `task_state`.
    pub task_state: Option<String>,
    /// `power_state`.
    pub power_state: i64,
    /// Locked (2.9).
    pub locked: bool,
    /// Who locked it (`admin` or `owner`).
    pub locked_by: Option<String>,
    /// Lock reason (2.73).
    pub locked_reason: Option<String>,
    /// Progress percent.
    pub progress: i64,
    /// What was asked at boot (name, flavor, image, metadata, ...).
    pub spec: InstanceSpec,
    /// Creation time (the build request's).
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Option<Timestamp>,
    /// When it first went ACTIVE.
    pub launched_at: Option<Timestamp>,
    /// When it was deleted.
    pub terminated_at: Option<Timestamp>,
    /// Soft-deleted (kept for `changes-since` and `deleted=true`).
    pub deleted: bool,
    /// Deletion time.
    pub deleted_at: Option<Timestamp>,
}

impl Instance {
    /// A new instance row from its spec, in `vm_state`/`task_state`.
    pub fn from_spec(
        uuid: Uuid,
        project_id: &str,
        user_id: &str,
        spec: InstanceSpec,
        created_at: Timestamp,
        vm_state: &str,
        task_state: Option<&str>,
    ) -> Self {
        Instance {
            uuid,
            project_id: project_id.to_owned(),
            user_id: user_id.to_owned(),
            host: None,
            node: None,
            availability_zone: spec.availability_zone.clone(),
            vm_state: vm_state.to_owned(),
            task_state: task_state.map(str::to_owned),
            power_state: power_state::NOSTATE,
            locked: false,
            locked_by: None,
            locked_reason: None,
            progress: 0,
            spec,
            created_at,
            updated_at: Some(created_at),
            launched_at: None,
            terminated_at: None,
            deleted: false,
            deleted_at: None,
        }
    }

    /// The flavor the instance was built with.
    pub fn flavor(&self) -> &Flavor {
        &self.spec.flavor
    }

    /// The API status.
    pub fn status(&self) -> &'static str {
        status_from_state(&self.vm_state, self.task_state.as_deref())
    }
}

/// A compute service row (`services`).
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// Integer id within the cell (the API shows it before 2.53).
    pub id: i64,
    /// Uuid (the API shows it from 2.53).
    pub uuid: Uuid,
    /// Host.
    pub host: String,
    /// Binary, `nova-compute`.
    pub binary: String,
    /// Disabled by an operator.
    pub disabled: bool,
    /// Why.
    pub disabled_reason: Option<String>,
    /// Forced down by an operator (2.11).
    pub forced_down: bool,
    /// Last heartbeat.
    pub last_seen_up: Option<Timestamp>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Option<Timestamp>,
}

/// A compute node row (`compute_nodes`).
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeNode {
    /// Integer id within the cell.
    pub id: i64,
    /// Uuid (= placement root provider uuid).
    pub uuid: Uuid,
    /// Service host.
    pub host: String,
    /// Hypervisor hostname.
    pub hypervisor_hostname: String,
    /// `fake` for berth's agent.
    pub hypervisor_type: String,
    /// Version number.
    pub hypervisor_version: i64,
    /// Host IP.
    pub host_ip: String,
    /// Physical vCPUs.
    pub vcpus: i64,
    /// Physical RAM (MiB).
    pub memory_mb: i64,
    /// Local disk (GiB).
    pub local_gb: i64,
    /// JSON text of the CPU description.
    pub cpu_info: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Option<Timestamp>,
}

/// An instance action (`instance_actions`) with its events.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceAction {
    /// Instance id.
    pub instance_uuid: Uuid,
    /// `create`, `delete`, `start`, `stop`, `reboot`, ...
    pub action: String,
    /// The API request id that started it.
    pub request_id: String,
    /// Who.
    pub user_id: String,
    /// Project.
    pub project_id: String,
    /// Start.
    pub start_time: Timestamp,
    /// Message (`Error` when an event failed).
    pub message: Option<String>,
    /// Last change.
    pub updated_at: Option<Timestamp>,
    /// Events in start order.
    pub events: Vec<ActionEvent>,
}

/// One event of an instance action.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionEvent {
    /// Event name, e.g. `compute__do_build_and_run_instance`.
    pub event: String,
    /// Start.
    pub start_time: Timestamp,
    /// Finish, once done.
    pub finish_time: Option<Timestamp>,
    /// `Success` or `Error`, once done.
    pub result: Option<String>,
    /// Failure detail.
    pub traceback: Option<String>,
    /// Host it ran on.
    pub host: Option<String>,
    /// Details (2.84).
    pub details: Option<String>,
}

/// An instance fault (`instance_faults`): why it is in ERROR.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Instance id.
    pub instance_uuid: Uuid,
    /// HTTP-like code (500 for NoValidHost).
    pub code: i64,
    /// Short message.
    pub message: String,
    /// Details (admins only).
    pub details: String,
    /// Host, if any.
    pub host: Option<String>,
    /// When.
    pub created_at: Timestamp,
}

/// One sort key of an instance listing, with its direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// Column (one of [`SORT_KEYS`]).
    pub key: String,
    /// Ascending?
    pub ascending: bool,
}

/// Instance columns a listing may sort by (Nova's valid sort keys that
/// berth stores as columns).
pub const SORT_KEYS: &[&str] = &[
    "created_at",
    "updated_at",
    "display_name",
    "display_description",
    "uuid",
    "host",
    "node",
    "hostname",
    "vm_state",
    "task_state",
    "power_state",
    "launched_at",
    "terminated_at",
    "availability_zone",
    "key_name",
    "project_id",
    "user_id",
    "image_ref",
    "instance_type_id",
    "launch_index",
    "locked",
    "progress",
    "config_drive",
    "access_ip_v4",
    "access_ip_v6",
    "reservation_id",
];

/// A sortable value of one instance column.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub enum SortValue {
    /// An unknown column.
    Null,
    /// Integer (timestamps, counters).
    Int(i64),
    /// Text.
    Text(String),
}

impl Instance {
    /// The value of a sort column.
    pub fn sort_value(&self, key: &str) -> SortValue {
        // Missing values sort as the smallest value of their type (as NULLs
        // do in Nova's MySQL); the cell stores compare the same way.
        let text = |s: &str| SortValue::Text(s.to_owned());
        let opt_text = |s: &Option<String>| SortValue::Text(s.clone().unwrap_or_default());
        let opt_int = |t: &Option<i64>| SortValue::Int(t.unwrap_or(i64::MIN));
        match key {
            "created_at" => SortValue::Int(self.created_at),
            "updated_at" => opt_int(&self.updated_at),
            "display_name" => text(&self.spec.display_name),
            "display_description" => opt_text(&self.spec.display_description),
            "uuid" => SortValue::Text(self.uuid.to_string()),
            "host" => opt_text(&self.host),
            "node" => opt_text(&self.node),
            "hostname" => text(&self.spec.hostname),
            "vm_state" => text(&self.vm_state),
            "task_state" => opt_text(&self.task_state),
            "power_state" => SortValue::Int(self.power_state),
            "launched_at" => opt_int(&self.launched_at),
            "terminated_at" => opt_int(&self.terminated_at),
            "availability_zone" => opt_text(&self.availability_zone),
            "key_name" => opt_text(&self.spec.key_name),
            "project_id" => text(&self.project_id),
            "user_id" => text(&self.user_id),
            "image_ref" => self.spec.image_ref.map_or(SortValue::Text(String::new()), |i| text(&i.to_string())),
            "instance_type_id" => SortValue::Int(self.spec.flavor.id),
            "launch_index" => SortValue::Int(self.spec.launch_index),
            "locked" => SortValue::Int(self.locked as i64),
            "progress" => SortValue::Int(self.progress),
            "config_drive" => text(&self.spec.config_drive),
            "access_ip_v4" => opt_text(&self.spec.access_ip_v4),
            "access_ip_v6" => opt_text(&self.spec.access_ip_v6),
            "reservation_id" => text(&self.spec.reservation_id),
            _ => SortValue::Null,
        }
    }
}

/// Compare two instances by sort keys, then by uuid in the direction of
/// the last key (the merge order across cells; Nova breaks ties on `id`,
/// berth on `uuid` so the order is global across cells).
pub fn compare_instances(a: &Instance, b: &Instance, keys: &[SortKey]) -> std::cmp::Ordering {
    for key in keys {
        let ord = a.sort_value(&key.key).partial_cmp(&b.sort_value(&key.key)).unwrap_or(std::cmp::Ordering::Equal);
        let ord = if key.ascending { ord } else { ord.reverse() };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    let ord = a.uuid.cmp(&b.uuid);
    if keys.last().is_none_or(|k| k.ascending) {
        ord
    } else {
        ord.reverse()
    }
}

/// Filters of an instance listing, already resolved to columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceFilter {
    /// Only this project (None: all, for admins with `all_tenants`).
    pub project_id: Option<String>,
    /// Only this user.
    pub user_id: Option<String>,
    /// `display_name` matches this regular expression (Python `re.search`).
    pub name_regex: Option<String>,
    /// vm states (any of).
    pub vm_states: Option<Vec<String>>,
    /// task states (any of; `Some(vec![])` means task_state IS NULL).
    pub task_states: Option<Vec<String>>,
    /// Host.
    pub host: Option<String>,
    /// Node.
    pub node: Option<String>,
    /// Availability zone.
    pub availability_zone: Option<String>,
    /// Image.
    pub image_ref: Option<String>,
    /// Flavor internal id.
    pub flavor_id: Option<i64>,
    /// Reservation id.
    pub reservation_id: Option<String>,
    /// Only rows changed at or after this time (includes deleted rows).
    pub changes_since: Option<Timestamp>,
    /// Only rows changed before this time (2.66).
    pub changes_before: Option<Timestamp>,
    /// Include deleted rows (`deleted=true`, admin).
    pub deleted: Option<bool>,
    /// Only these uuids.
    pub uuids: Option<Vec<uuid::Uuid>>,
    /// Tags: all of these.
    pub tags: Vec<String>,
    /// Tags: any of these.
    pub tags_any: Vec<String>,
    /// Tags: not all of these.
    pub not_tags: Vec<String>,
    /// Tags: none of these.
    pub not_tags_any: Vec<String>,
    /// Locked state (2.73).
    pub locked: Option<bool>,
    /// Free-form exact matches on other string columns (`key_name`,
    /// `hostname`, `user_id`, ...), as `(column, value)`.
    pub exact: BTreeMap<String, String>,
}

/// Where a listing page starts: the sort values of the marker row, and its
/// uuid (the final tie-breaker). Rows strictly after it are returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// The marker's values of the listing's sort keys, in key order.
    pub values: Vec<SortValue>,
    /// The marker instance.
    pub uuid: Uuid,
}

/// One page request to one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceQuery {
    /// Filters.
    pub filter: InstanceFilter,
    /// Sort keys (the listing adds `uuid` as the last tie-breaker).
    pub sort: Vec<SortKey>,
    /// Start after this marker.
    pub marker: Option<Marker>,
    /// At most this many rows.
    pub limit: usize,
    /// Rows for an index listing (`GET /servers`): the spec holds only the
    /// fields its row duplicates in columns (name, description, hostname,
    /// image, key name, reservation id, launch index, config drive, access
    /// IPs, the flavor's id), which is every sort key, the name filter and
    /// the index view, and is not parsed from its JSON.
    pub brief: bool,
}
