//! The cell database interface: what a cell stores (instances, services,
//! compute nodes, instance actions, faults) in compute terms.
//!
//! Unlike the control database, a cell is not held in memory: listings are
//! queries with filters, sort keys, a marker and a limit, answered by the
//! database, so a cloud's instances need not fit in one process. Writes
//! are batches of [`CellOp`]s run in one transaction; each op reports its
//! own [`CellOutcome`], and a conditional update that finds the row in an
//! unexpected state is a `Mismatch` for that op only, not a failure of the
//! batch.

use berth_compute_model::cell::{
    ComputeNode, Fault, Instance, InstanceAction, InstanceQuery, Migration, MigrationFilter, Service,
};
use berth_compute_model::{Flavor, Timestamp};
use uuid::Uuid;

use crate::StoreError;

/// A partial update of an instance row: `Some` fields are set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceUpdate {
    /// New vm state.
    pub vm_state: Option<String>,
    /// New task state (`Some(None)` clears it).
    pub task_state: Option<Option<String>>,
    /// New power state.
    pub power_state: Option<i64>,
    /// Host and node (`Some(None)` clears them).
    pub host: Option<Option<String>>,
    /// Node.
    pub node: Option<Option<String>>,
    /// Availability zone.
    pub availability_zone: Option<Option<String>>,
    /// Launch time.
    pub launched_at: Option<Option<Timestamp>>,
    /// Termination time.
    pub terminated_at: Option<Option<Timestamp>>,
    /// Lock state: `(locked, locked_by, locked_reason)`.
    pub lock: Option<(bool, Option<String>, Option<String>)>,
    /// Progress percent.
    pub progress: Option<i64>,
    /// Display name.
    pub display_name: Option<String>,
    /// Description.
    pub display_description: Option<Option<String>>,
    /// User metadata, replaced whole.
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
    /// Tags, replaced whole.
    pub tags: Option<Vec<String>>,
    /// Soft-delete: `deleted = true`, `deleted_at` set.
    pub deleted_at: Option<Timestamp>,
    /// Flavor (a move finished or reverted).
    pub flavor: Option<Flavor>,
    /// `accessIPv4` (`Some(None)` clears it).
    pub access_ip_v4: Option<Option<String>>,
    /// `accessIPv6` (`Some(None)` clears it).
    pub access_ip_v6: Option<Option<String>>,
    /// `OS-DCF:diskConfig` is `AUTO`.
    pub auto_disk_config: Option<bool>,
    /// A rebuild's image: its id and the properties the instance keeps.
    pub image: Option<(Option<Uuid>, std::collections::BTreeMap<String, String>)>,
    /// A rebuild's key pair: `(key_name, key_data)`, both `None` to unset.
    pub key_pair: Option<(Option<String>, Option<String>)>,
    /// A rebuild's `user_data` (`Some(None)` clears it).
    pub user_data: Option<Option<String>>,
    /// A rebuild's `hostname`.
    pub hostname: Option<String>,
    /// The security groups' names, replaced whole.
    pub security_groups: Option<Vec<String>>,
    /// A rescue's image (`Some(None)`: the server's own).
    pub rescue_image: Option<Option<Uuid>>,
    /// Always set: the update time.
    pub updated_at: Timestamp,
}

/// What a conditional update expects to find.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expect {
    /// The vm state must be one of these (empty: any).
    pub vm_states: Vec<String>,
    /// The task state must be one of these (`None` in the list: no task).
    /// Empty: any.
    pub task_states: Vec<Option<String>>,
    /// The row must not be soft-deleted.
    pub not_deleted: bool,
    /// The row's host must be this (`Some(None)`: no host); `None`: any.
    /// An agent's report is only taken from the host the instance is on.
    pub host: Option<Option<String>>,
    /// The row's user metadata must be exactly this (the compare of a
    /// read-modify-write: a merge never loses a concurrent one's keys);
    /// `None`: any.
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
    /// The row's tags must be exactly these (as above); `None`: any.
    pub tags: Option<Vec<String>>,
    /// The row's security groups must be exactly these (as above).
    pub security_groups: Option<Vec<String>>,
}

/// One write to a cell.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "ops are short-lived batches; a move's op carries its migration with both flavors"
)]
pub enum CellOp {
    /// Insert an instance, or replace the row with the same uuid.
    PutInstance(Instance),
    /// Insert an instance unless a row with its uuid exists (then
    /// `Mismatch`, nothing changed).
    InsertInstance(Instance),
    /// Update an instance if it matches `expect` (else `Mismatch`; a
    /// missing row is `Missing`).
    UpdateInstance {
        /// Instance.
        uuid: Uuid,
        /// Preconditions.
        expect: Expect,
        /// Changes.
        update: InstanceUpdate,
    },
    /// Remove an instance row and its tags, actions and faults (orphans
    /// and rolled-back scheduling; normal deletes soft-delete).
    PurgeInstance(Uuid),
    /// Insert or update the service of `(host, binary)`; the outcome
    /// carries its id. `id` and `uuid` of the given row are used only when
    /// inserting.
    EnsureService(Service),
    /// Update a service's operator flags (`disabled`, `disabled_reason`,
    /// `forced_down`) by id.
    UpdateService {
        /// Service id.
        id: i64,
        /// Disabled?
        disabled: Option<bool>,
        /// Reason (`Some(None)` clears it).
        disabled_reason: Option<Option<String>>,
        /// Forced down?
        forced_down: Option<bool>,
        /// Update time.
        updated_at: Timestamp,
    },
    /// Delete a service (and its compute nodes) by id.
    DeleteService(i64),
    /// Record heartbeats: `last_seen_up = at` for the services of these
    /// hosts (binary `nova-compute`).
    Heartbeat {
        /// Hosts.
        hosts: Vec<String>,
        /// Time.
        at: Timestamp,
    },
    /// Insert or update the compute node with this uuid; the outcome
    /// carries its id. `id` of the given row is used only when inserting.
    EnsureComputeNode(ComputeNode),
    /// Start an instance action (with its first event, if given). Actions
    /// are keyed by `(instance, request_id)`; starting one twice is a no-op.
    StartAction(InstanceAction),
    /// Start an event of the action `(instance, request_id)`.
    StartEvent {
        /// Instance.
        instance: Uuid,
        /// Request id of the action.
        request_id: String,
        /// Event name.
        event: String,
        /// Host.
        host: Option<String>,
        /// Start.
        at: Timestamp,
    },
    /// Finish an event (and mark the action `Error` when it failed).
    FinishEvent {
        /// Instance.
        instance: Uuid,
        /// Request id of the action.
        request_id: String,
        /// Event name.
        event: String,
        /// `Success` or `Error`.
        result: String,
        /// Failure detail.
        traceback: Option<String>,
        /// Finish.
        at: Timestamp,
    },
    /// Record a fault.
    AddFault(Fault),
    /// Start a move: update the instance if it matches `expect` and insert
    /// the migration, or neither (`Mismatch`/`Missing` for the instance).
    InsertMigration {
        /// The migration (its `id` is assigned).
        migration: Migration,
        /// Preconditions on the instance.
        expect: Expect,
        /// Changes to the instance.
        update: InstanceUpdate,
    },
    /// Advance a move: when the migration's status is one of
    /// `from_statuses` and (if given) the instance matches its `Expect`,
    /// both are updated; otherwise neither (`Mismatch`, or `Missing`).
    UpdateMigration {
        /// Migration uuid.
        uuid: Uuid,
        /// Allowed current statuses (empty: any).
        from_statuses: Vec<String>,
        /// Changes to the migration.
        update: MigrationUpdate,
        /// The instance's precondition and changes, updated together.
        instance: Option<(Expect, InstanceUpdate)>,
    },
}

/// A partial update of a migration row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigrationUpdate {
    /// New status.
    pub status: Option<String>,
    /// Destination host.
    pub dest_compute: Option<Option<String>>,
    /// Destination node.
    pub dest_node: Option<Option<String>>,
    /// Destination host IP.
    pub dest_host: Option<Option<String>>,
    /// Remove the row (a move refused before it began, e.g. over quota).
    pub delete: bool,
    /// Update time.
    pub updated_at: Timestamp,
}

/// What one [`CellOp`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellOutcome {
    /// Applied.
    Done,
    /// Applied; the id of the service or compute node.
    Id(i64),
    /// A conditional update found the row in another state: not applied.
    Mismatch,
    /// The row does not exist: not applied.
    Missing,
}

/// A cell database backend.
pub trait CellStore: Send + Sync {
    /// Run `ops` in one transaction, in order; one outcome per op.
    fn write(&self, ops: &[CellOp]) -> Result<Vec<CellOutcome>, StoreError>;

    /// One instance (soft-deleted rows included).
    fn instance(&self, uuid: &Uuid) -> Result<Option<Instance>, StoreError>;

    /// Several instances by uuid (any order; missing ones left out).
    fn instances(&self, uuids: &[Uuid]) -> Result<Vec<Instance>, StoreError>;

    /// A page of instances: filtered, in sort order (the sort keys, then
    /// `uuid` in the direction of the last key), strictly after the marker,
    /// at most `limit` rows. Soft-deleted rows are left out unless the
    /// filter asks for them (`deleted`, `changes_since`).
    fn list_instances(&self, query: &InstanceQuery) -> Result<Vec<Instance>, StoreError>;

    /// Instances with work for an agent: not deleted and `task_state` one
    /// of `task_states`.
    fn instances_with_tasks(&self, task_states: &[&str]) -> Result<Vec<Instance>, StoreError>;

    /// The latest fault of each of these instances.
    fn faults(&self, uuids: &[Uuid]) -> Result<Vec<Fault>, StoreError>;

    /// Every service.
    fn services(&self) -> Result<Vec<Service>, StoreError>;

    /// Every compute node.
    fn compute_nodes(&self) -> Result<Vec<ComputeNode>, StoreError>;

    /// The actions of an instance with their events, oldest first.
    fn instance_actions(&self, instance: &Uuid) -> Result<Vec<InstanceAction>, StoreError>;

    /// Migrations matching `filter`, newest first (`created_at`, then `id`,
    /// descending: Nova's `os-migrations` order).
    fn migrations(&self, filter: &MigrationFilter) -> Result<Vec<Migration>, StoreError>;

    /// Number of instances per host (not deleted), for hypervisor views.
    fn instance_counts_by_host(&self) -> Result<Vec<(String, i64)>, StoreError>;

    /// Is the database reachable?
    fn ping(&self) -> Result<(), StoreError>;

    /// `sqlite` or `postgres`.
    fn backend_name(&self) -> &'static str;
}
