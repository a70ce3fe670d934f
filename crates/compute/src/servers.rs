//! What the compute API asks of servers: accept a boot, show one, list
//! across cells, delete, start/stop/reboot.
//!
//! A server is, in turn, a build request (control database, no cell yet),
//! an instance row in its cell (the mapping says which), or — when its
//! cell does not answer in time — only its mapping (a "down cell" stub).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::cell::{
    compare_instances, task_state, vm_state, Fault, Instance, InstanceAction, InstanceFilter, InstanceQuery, Marker,
    SortKey,
};
use berth_compute_model::plan::{
    hold_boot, plan_admit_boot, plan_delete_build_request, plan_forget_instance, plan_queue_for_delete, BootAdmission,
};
use berth_compute_model::{BuildRequest, CellMapping, ComputeError, InstanceMapping, CELL0_UUID};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate, StoreError};
use uuid::Uuid;

use crate::build::BootJob;
use crate::cells::{Cell, CellError};
use crate::control::{read, write};
// `leases.rs` still names it here.
pub use crate::error::ServiceError;
use crate::hub::Task;
use crate::Compute;

/// Who asks (for instance actions).
#[derive(Debug, Clone)]
pub struct Caller {
    /// API request id.
    pub request_id: String,
    /// User.
    pub user_id: String,
    /// Project.
    pub project_id: String,
}

impl Caller {
    /// The instance action `action` on `uuid` started by this caller at
    /// `now`, with `events`.
    pub(crate) fn action(
        &self,
        uuid: &Uuid,
        action: &str,
        now: i64,
        events: Vec<berth_compute_model::cell::ActionEvent>,
    ) -> InstanceAction {
        InstanceAction {
            instance_uuid: *uuid,
            action: action.to_owned(),
            request_id: self.request_id.clone(),
            user_id: self.user_id.clone(),
            project_id: self.project_id.clone(),
            start_time: now,
            message: None,
            updated_at: Some(now),
            events,
        }
    }
}

/// A server as the API shows it.
#[derive(Debug, Clone)]
#[expect(clippy::large_enum_variant, reason = "built once per request and rendered at once")]
pub enum ServerRecord {
    /// Accepted, not yet in a cell.
    Pending(BuildRequest),
    /// In a cell.
    Placed {
        /// The row.
        instance: Instance,
        /// Its latest fault (ERROR servers).
        fault: Option<Fault>,
        /// The cell.
        cell: CellMapping,
    },
    /// Its cell did not answer: only the mapping is known.
    Unreachable(InstanceMapping),
}

impl ServerRecord {
    /// The server's uuid.
    pub fn uuid(&self) -> Uuid {
        match self {
            ServerRecord::Pending(b) => b.instance_uuid,
            ServerRecord::Placed { instance, .. } => instance.uuid,
            ServerRecord::Unreachable(m) => m.instance_uuid,
        }
    }

    /// The owning project.
    pub fn project_id(&self) -> &str {
        match self {
            ServerRecord::Pending(b) => &b.project_id,
            ServerRecord::Placed { instance, .. } => &instance.project_id,
            ServerRecord::Unreachable(m) => &m.project_id,
        }
    }

    /// The owning user (`None`: its cell did not answer, only the
    /// mapping is known), for the policy rules Nova checks with the
    /// server's user as well as its project.
    pub fn user_id(&self) -> Option<&str> {
        match self {
            ServerRecord::Pending(b) => Some(&b.user_id),
            ServerRecord::Placed { instance, .. } => Some(&instance.user_id),
            ServerRecord::Unreachable(_) => None,
        }
    }
}

/// A build request seen as an instance row (BUILD, scheduling, no host),
/// so listings can filter and sort both alike.
/// A held build request (a reserved server) is `reserved` with no task.
pub fn pending_row(build: &BuildRequest) -> Instance {
    let (vm, task) = build.shown_state();
    Instance::from_spec(
        build.instance_uuid,
        &build.project_id,
        &build.user_id,
        build.spec.clone(),
        build.created_at,
        vm,
        task,
    )
}

fn not_found(uuid: &Uuid) -> ServiceError {
    ServiceError::Refused(ComputeError::NotFound(format!("Instance {uuid} could not be found.")))
}

/// A listing request.
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// Filters (project scoping included).
    pub filter: InstanceFilter,
    /// Sort keys (default `created_at` descending).
    pub sort: Vec<SortKey>,
    /// Page size.
    pub limit: usize,
    /// Start after this server.
    pub marker: Option<Uuid>,
    /// Show servers of unreachable cells as stubs (2.69, no filters/sort).
    pub down_cell_stubs: bool,
    /// For the index view (`GET /servers`): rows carry only the spec
    /// fields it and the sort order need ([`InstanceQuery::brief`]).
    pub brief: bool,
}

/// One listed server.
#[derive(Debug, Clone)]
#[expect(clippy::large_enum_variant, reason = "a page is built and rendered at once")]
pub enum Listed {
    /// A build request.
    Pending(BuildRequest),
    /// An instance row with its latest fault.
    Placed(Instance, Option<Fault>),
    /// A server in a cell that did not answer.
    Stub(InstanceMapping),
}

/// Does a build request (as a pending row) pass the filter? The cell
/// stores apply the same filter in SQL to their rows.
pub fn pending_matches(filter: &InstanceFilter, row: &Instance) -> bool {
    let eq = |want: &Option<String>, have: Option<&str>| want.as_deref().is_none_or(|w| have == Some(w));
    if !eq(&filter.project_id, Some(&row.project_id)) || !eq(&filter.user_id, Some(&row.user_id)) {
        return false;
    }
    if filter.host.is_some() || filter.node.is_some() || filter.deleted == Some(true) {
        return false;
    }
    if let Some(states) = &filter.vm_states {
        if !states.iter().any(|s| s == &row.vm_state) {
            return false;
        }
    }
    if let Some(tasks) = &filter.task_states {
        let ok = if tasks.is_empty() {
            row.task_state.is_none()
        } else {
            tasks.iter().any(|t| Some(t) == row.task_state.as_ref())
        };
        if !ok {
            return false;
        }
    }
    if let Some(pattern) = &filter.name_regex {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(&row.spec.display_name) => {}
            _ => return false,
        }
    }
    if !eq(&filter.availability_zone, row.availability_zone.as_deref())
        || !eq(&filter.reservation_id, Some(&row.spec.reservation_id))
        || !eq(&filter.image_ref, row.spec.image_ref.map(|i| i.to_string()).as_deref())
    {
        return false;
    }
    if filter.flavor_id.is_some_and(|f| f != row.spec.flavor.id) {
        return false;
    }
    if filter.changes_since.is_some_and(|t| row.created_at < t)
        || filter.changes_before.is_some_and(|t| row.created_at > t)
    {
        return false;
    }
    if filter.uuids.as_ref().is_some_and(|u| !u.contains(&row.uuid)) {
        return false;
    }
    if filter.locked == Some(true) {
        return false;
    }
    let tags = &row.spec.tags;
    let has = |t: &String| tags.contains(t);
    if !filter.tags.iter().all(has)
        || (!filter.tags_any.is_empty() && !filter.tags_any.iter().any(has))
        || (!filter.not_tags.is_empty() && filter.not_tags.iter().all(has))
        || filter.not_tags_any.iter().any(has)
    {
        return false;
    }
    for (column, value) in &filter.exact {
        let have = match column.as_str() {
            "key_name" => row.spec.key_name.clone(),
            "hostname" => Some(row.spec.hostname.clone()),
            "config_drive" => Some(row.spec.config_drive.clone()),
            "access_ip_v4" => row.spec.access_ip_v4.clone(),
            "access_ip_v6" => row.spec.access_ip_v6.clone(),
            _ => None,
        };
        if have.as_deref() != Some(value.as_str()) {
            return false;
        }
    }
    true
}

/// One cell's rows in a merge, refilled a page at a time.
struct Stream {
    cell: Arc<Cell>,
    buffer: VecDeque<Instance>,
    next_marker: Option<Marker>,
    exhausted: bool,
}

/// What `PUT /servers/{id}` changes (`None`: left as it is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerEdit {
    /// New display name.
    pub name: Option<String>,
    /// New description (`Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// New `accessIPv4`, already normalised.
    pub access_ip_v4: Option<String>,
    /// New `accessIPv6`, already normalised.
    pub access_ip_v6: Option<String>,
    /// New `auto_disk_config` (`OS-DCF:diskConfig`).
    pub auto_disk_config: Option<bool>,
}

impl Compute {
    /// Accept a boot: quota admission and build requests in one write,
    /// then queue it for the conductor. Returns the admitted instances.
    ///
    /// A boot the [`BootExtension`](crate::extension::BootExtension) takes
    /// over (a reserved server) is admitted in the same write together with
    /// what the extension adds (its lease); its build requests are held and
    /// not queued.
    pub fn accept_boot(&self, boot: BootAdmission, request_id: &str) -> Result<Vec<Uuid>, ServiceError> {
        let extension = self.boot_extension().cloned();
        let now = self.now();
        let (admitted, held) = write(&*self.control, |w| {
            let (mut set, admitted) = plan_admit_boot(w, &boot)?;
            let held = match &extension {
                Some(extension) => extension.plan_admit(w, &boot, &admitted, now)?,
                None => None,
            };
            let is_held = held.is_some();
            if let Some(held) = held {
                hold_boot(&mut set, &held.hints);
                set.extend(held.changes);
            }
            Ok((set, (admitted, is_held)))
        })?;
        self.metrics.boots_accepted.fetch_add(admitted.len() as u64, Ordering::Relaxed);
        self.metrics.timings.accepted(&admitted);
        match (held, &extension) {
            (true, Some(extension)) => extension.admitted(),
            _ => self.submit(BootJob { instances: admitted.clone(), request_id: request_id.to_owned() }),
        }
        Ok(admitted)
    }

    /// Show one server.
    pub async fn get_server(&self, uuid: &Uuid) -> Result<ServerRecord, ServiceError> {
        let (mapping, build) = read(&*self.control, |w| {
            (w.compute.instance_mappings.get(uuid).cloned(), w.compute.build_requests.get(uuid).cloned())
        });
        let mapping = mapping.ok_or_else(|| not_found(uuid))?;
        if let Some(build) = build {
            return Ok(ServerRecord::Pending(build));
        }
        let Some(cell) = mapping.cell.and_then(|c| self.cell(&c)) else { return Err(not_found(uuid)) };
        let handle = match self.cells.get(&cell) {
            Ok(handle) => handle,
            Err(_) => return Ok(ServerRecord::Unreachable(mapping)),
        };
        let id = *uuid;
        let found = self
            .cells
            .read(&handle, move |s| {
                let instance = s.instance(&id)?;
                // Only ERROR and DELETED servers show their fault: the
                // others (a client polling a BUILD server) skip the query.
                let shows_fault = instance.as_ref().is_some_and(|i| matches!(i.status(), "ERROR" | "DELETED"));
                let faults = if shows_fault { s.faults(&[id])? } else { Vec::new() };
                Ok((instance, faults))
            })
            .await;
        match found {
            Ok((Some(instance), faults)) if !instance.deleted => {
                Ok(ServerRecord::Placed { fault: faults.into_iter().next(), instance, cell })
            }
            Ok(_) => Err(not_found(uuid)),
            Err(CellError::Timeout(_)) | Err(CellError::Store(StoreError::Unavailable(_))) => {
                Ok(ServerRecord::Unreachable(mapping))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// A deleted server's project and instance actions (newest first):
    /// the control database forgets a deleted server's mapping, so every
    /// cell is asked for the row it keeps (deleted). Nova's
    /// `read_deleted='yes'` lookup of `os-instance-actions` from 2.21.
    /// `None`: no cell has the server.
    pub async fn deleted_server_actions(
        &self,
        uuid: &Uuid,
    ) -> Result<Option<(String, Vec<InstanceAction>)>, ServiceError> {
        let cells: Vec<CellMapping> = read(&*self.control, |w| w.compute.cells.values().cloned().collect());
        for cell in cells {
            let Ok(handle) = self.cells.get(&cell) else { continue };
            let id = *uuid;
            let found = self
                .cells
                .read(&handle, move |s| {
                    let Some(instance) = s.instance(&id)? else { return Ok(None) };
                    if !instance.deleted {
                        return Ok(None);
                    }
                    Ok(Some((instance.project_id.clone(), s.instance_actions(&id)?)))
                })
                .await?;
            if let Some((project, mut actions)) = found {
                actions.reverse();
                return Ok(Some((project, actions)));
            }
        }
        Ok(None)
    }

    /// The instance actions of a server (newest first, as Nova lists them).
    pub async fn instance_actions(&self, uuid: &Uuid) -> Result<Vec<InstanceAction>, ServiceError> {
        let cell = read(&*self.control, |w| w.compute.instance_mappings.get(uuid).cloned())
            .ok_or_else(|| not_found(uuid))?
            .cell
            .and_then(|c| self.cell(&c));
        let Some(cell) = cell else { return Ok(Vec::new()) };
        let handle = self.cells.get(&cell)?;
        let id = *uuid;
        let mut actions = self.cells.read(&handle, move |s| s.instance_actions(&id)).await?;
        actions.reverse();
        Ok(actions)
    }

    /// List servers: build requests and the cells' instances merge-sorted
    /// by the sort keys with `uuid` as the last tie-breaker (Nova puts
    /// build requests first; one order keeps a server that is claimed
    /// between two pages from being listed on both or on neither). The
    /// marker may be a build request or an instance in any cell; an
    /// unknown or deleted marker is a 400.
    pub async fn list_servers(&self, request: &ListRequest) -> Result<Vec<Listed>, ServiceError> {
        let mut sort = request.sort.clone();
        if sort.is_empty() {
            sort.push(SortKey { key: "created_at".to_owned(), ascending: false });
        }
        let limit = request.limit;
        // One control snapshot decides which servers are build requests:
        // those are listed from it, and a cell row of any of them is
        // dropped even if a claim moved its mapping to the cell before the
        // cell was read (Nova drops such duplicates too). Build requests
        // and cell rows are merged in one order, so a server keeps its
        // place between pages whichever it is listed as, and a page after
        // a marker never repeats one listed before it.
        let (mut pending, building, marker_mapping, marker_build, cells) = read(&*self.control, |w| {
            let pending: Vec<BuildRequest> = w
                .compute
                .build_requests
                .values()
                .filter(|b| pending_matches(&request.filter, &pending_row(b)))
                .cloned()
                .collect();
            let building: HashSet<Uuid> = w.compute.build_requests.keys().copied().collect();
            let marker = request.marker.and_then(|m| w.compute.instance_mappings.get(&m).cloned());
            let marker_build = request.marker.and_then(|m| w.compute.build_requests.get(&m).cloned());
            (pending, building, marker, marker_build, w.compute.cells.values().cloned().collect::<Vec<_>>())
        });
        self.hooks.pass("listing-between-reads").await;
        pending.sort_by(|a, b| compare_instances(&pending_row(a), &pending_row(b), &sort));
        let bad_marker = |m: &Uuid| ServiceError::Refused(ComputeError::Invalid(format!("marker [{m}] not found")));

        // Where does the page start? At the marker's place in the one
        // order, whether it is a build request or a cell row.
        let mut cell_marker: Option<Marker> = None;
        if let Some(marker) = request.marker {
            let row = match marker_build {
                Some(build) => pending_row(&build),
                None => {
                    let mapping = marker_mapping.ok_or_else(|| bad_marker(&marker))?;
                    let cell = mapping
                        .cell
                        .and_then(|c| cells.iter().find(|m| m.uuid == c))
                        .ok_or_else(|| bad_marker(&marker))?;
                    let handle = self.cells.get(cell)?;
                    let row = self.cells.read(&handle, move |s| s.instance(&marker)).await?;
                    let row = row.filter(|r| {
                        !r.deleted || request.filter.deleted == Some(true) || request.filter.changes_since.is_some()
                    });
                    row.ok_or_else(|| bad_marker(&marker))?
                }
            };
            pending.retain(|b| compare_instances(&pending_row(b), &row, &sort) == std::cmp::Ordering::Greater);
            cell_marker =
                Some(Marker { values: sort.iter().map(|k| row.sort_value(&k.key)).collect(), uuid: row.uuid });
        }
        pending.truncate(limit);
        let mut pending: VecDeque<(Instance, BuildRequest)> =
            pending.into_iter().map(|b| (pending_row(&b), b)).collect();
        let remaining = limit;

        // One stream per cell; unreachable cells become stubs or are skipped.
        // Each cell is first read for twice its fair share of the page
        // (all of it when there is one cell): with servers spread over the
        // cells one read each fills the page, and a cell holding more of it
        // is read on from its marker (`refill`). Reading the whole page
        // from every cell decoded cells × page rows to list one page.
        let first_read =
            if cells.len() <= 1 { remaining + 8 } else { (remaining / cells.len() * 2 + 4).min(remaining + 8) };
        let mut streams: Vec<Stream> = Vec::new();
        let mut stubs: Vec<InstanceMapping> = Vec::new();
        let mut fetches = Vec::new();
        for cell in &cells {
            let handle = match self.cells.get(cell) {
                Ok(handle) => handle,
                Err(err) => {
                    tracing::warn!(cell = %cell.name, error = %err, "cell cannot be opened; skipped in listing");
                    if request.down_cell_stubs {
                        stubs.extend(self.stubs_of(cell.uuid, &request.filter));
                    }
                    continue;
                }
            };
            let query = InstanceQuery {
                filter: request.filter.clone(),
                sort: sort.clone(),
                marker: cell_marker.clone(),
                limit: first_read,
                brief: request.brief,
            };
            fetches.push(async move {
                let result = self.cells.read(&handle, move |s| s.list_instances(&query)).await;
                (handle, result)
            });
        }
        for (handle, result) in join_all(fetches).await {
            match result {
                Ok(rows) => {
                    let exhausted = rows.len() < first_read;
                    let next_marker = rows
                        .last()
                        .map(|r| Marker { values: sort.iter().map(|k| r.sort_value(&k.key)).collect(), uuid: r.uuid });
                    streams.push(Stream { cell: handle, buffer: rows.into(), next_marker, exhausted });
                }
                Err(err) => {
                    tracing::warn!(cell = %handle.mapping.name, error = %err, "cell did not answer; skipped in listing");
                    if request.down_cell_stubs {
                        stubs.extend(self.stubs_of(handle.mapping.uuid, &request.filter));
                    }
                }
            }
        }
        // Merge the build requests and the cells, dropping rows whose
        // mapping points elsewhere (orphans are not listed) and rows of
        // servers the snapshot holds as build requests (listed as those).
        let mut placed: Vec<(Listed, Option<Uuid>)> = Vec::new();
        while placed.len() < remaining {
            for stream in streams.iter_mut() {
                if stream.buffer.is_empty() && !stream.exhausted {
                    self.refill(stream, &request.filter, &sort, remaining - placed.len() + 8, request.brief).await;
                }
            }
            let best = streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.buffer.front().map(|row| (i, row)))
                .min_by(|(_, a), (_, b)| compare_instances(a, b, &sort))
                .map(|(i, _)| i);
            let pending_first = match (pending.front(), best) {
                (Some(_), None) => true,
                (Some((row, _)), Some(idx)) => streams[idx]
                    .buffer
                    .front()
                    .is_none_or(|cell_row| compare_instances(row, cell_row, &sort) == std::cmp::Ordering::Less),
                (None, _) => false,
            };
            if pending_first {
                if let Some((_, build)) = pending.pop_front() {
                    placed.push((Listed::Pending(build), None));
                }
                continue;
            }
            let Some(idx) = best else { break };
            let Some(row) = streams[idx].buffer.pop_front() else { break };
            if building.contains(&row.uuid) {
                continue;
            }
            let cell_id = streams[idx].cell.mapping.uuid;
            let mapped = read(&*self.control, |w| {
                w.compute.instance_mappings.get(&row.uuid).is_some_and(|m| m.cell == Some(cell_id))
            });
            if mapped || row.deleted {
                placed.push((Listed::Placed(row, None), Some(cell_id)));
            }
        }
        if !stubs.is_empty() {
            stubs.retain(|m| {
                !building.contains(&m.instance_uuid) && cell_marker.as_ref().is_none_or(|mk| stub_after(m, mk))
            });
        }
        // Faults of ERROR rows.
        let mut faults: HashMap<Uuid, Fault> = HashMap::new();
        let mut errored: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        for (listed, cell) in &placed {
            if let (Listed::Placed(row, _), Some(cell)) = (listed, cell) {
                if row.vm_state == vm_state::ERROR {
                    errored.entry(*cell).or_default().push(row.uuid);
                }
            }
        }
        for stream in &streams {
            if let Some(uuids) = errored.remove(&stream.cell.mapping.uuid) {
                if let Ok(found) = self.cells.read(&stream.cell, move |s| s.faults(&uuids)).await {
                    faults.extend(found.into_iter().map(|f| (f.instance_uuid, f)));
                }
            }
        }
        let mut merged: Vec<Listed> = placed
            .into_iter()
            .map(|(listed, _)| match listed {
                Listed::Placed(row, _) => {
                    let fault = faults.remove(&row.uuid);
                    Listed::Placed(row, fault)
                }
                other => other,
            })
            .collect();
        if !stubs.is_empty() {
            merged.extend(stubs.into_iter().map(Listed::Stub));
            merged.sort_by(|a, b| listed_order(a, b, &sort));
            merged.truncate(remaining);
        }
        Ok(merged)
    }

    async fn refill(&self, stream: &mut Stream, filter: &InstanceFilter, sort: &[SortKey], limit: usize, brief: bool) {
        let query = InstanceQuery {
            filter: filter.clone(),
            sort: sort.to_vec(),
            marker: stream.next_marker.clone(),
            limit,
            brief,
        };
        match self.cells.read(&stream.cell, move |s| s.list_instances(&query)).await {
            Ok(rows) => {
                stream.exhausted = rows.len() < limit;
                stream.next_marker = rows
                    .last()
                    .map(|r| Marker { values: sort.iter().map(|k| r.sort_value(&k.key)).collect(), uuid: r.uuid })
                    .or(stream.next_marker.take());
                stream.buffer.extend(rows);
            }
            Err(err) => {
                tracing::warn!(cell = %stream.cell.mapping.name, error = %err, "cell stopped answering mid-listing");
                stream.exhausted = true;
            }
        }
    }

    fn stubs_of(&self, cell: Uuid, filter: &InstanceFilter) -> Vec<InstanceMapping> {
        read(&*self.control, |w| {
            w.compute
                .instance_mappings
                .values()
                .filter(|m| m.cell == Some(cell) && !m.queued_for_delete)
                .filter(|m| filter.project_id.as_ref().is_none_or(|p| *p == m.project_id))
                .cloned()
                .collect()
        })
    }

    /// Delete a server, wherever it is in its life. With
    /// `reclaim_instance_interval` set, a launched server on a live host
    /// with no task is soft-deleted instead (Nova's `soft_delete`, which
    /// falls back to a delete otherwise).
    pub async fn delete_server(&self, uuid: &Uuid, caller: &Caller) -> Result<(), ServiceError> {
        self.delete_as(uuid, caller, DeleteMode::Api).await
    }

    /// `forceDelete`: delete now, soft-deleted or not, when the server has
    /// no task (Nova's `force_delete`: `check_instance_state(task_state=None)`).
    pub async fn force_delete_server(&self, uuid: &Uuid, caller: &Caller) -> Result<(), ServiceError> {
        self.delete_as(uuid, caller, DeleteMode::Force).await
    }

    pub(crate) async fn delete_as(&self, uuid: &Uuid, caller: &Caller, mode: DeleteMode) -> Result<(), ServiceError> {
        for _ in 0..5 {
            let (mapping, pending) = read(&*self.control, |w| {
                (w.compute.instance_mappings.get(uuid).cloned(), w.compute.build_requests.contains_key(uuid))
            });
            let mapping = mapping.ok_or_else(|| not_found(uuid))?;
            if pending && mode != DeleteMode::Api {
                return Err(invalid_state(mode.action(), uuid, "vm_state", vm_state::BUILDING));
            }
            if pending {
                // A held build request (a reserved server) takes what the
                // boot extension adds with it (its lease), in one write.
                let extension = self.boot_extension().cloned();
                let now = self.now();
                let deleted = write(&*self.control, |w| {
                    let (mut set, deleted) = plan_delete_build_request(w, uuid);
                    let held = w.compute.build_requests.get(uuid).is_some_and(|b| b.held);
                    if let (true, Some(extension)) = (deleted && held, &extension) {
                        set.extend(extension.plan_delete_held(w, uuid, now)?);
                    }
                    Ok((set, deleted))
                })?;
                if deleted {
                    return Ok(());
                }
                continue;
            }
            let Some(cell) = mapping.cell.and_then(|c| self.cell(&c)) else { return Err(not_found(uuid)) };
            let handle = self.cells.get(&cell)?;
            let id = *uuid;
            let row = self.cells.read(&handle, move |s| s.instance(&id)).await?;
            let Some(row) = row.filter(|r| !r.deleted) else {
                // Row gone: forget whatever is left of the server.
                write(&*self.control, |w| Ok((plan_forget_instance(w, uuid), ())))?;
                return Err(not_found(uuid));
            };
            match mode {
                DeleteMode::Api => {}
                DeleteMode::Force => {
                    if let Some(task) = &row.task_state {
                        return Err(invalid_state("forceDelete", uuid, "task_state", task));
                    }
                }
                DeleteMode::Reclaim => {
                    if row.vm_state != vm_state::SOFT_DELETED || row.task_state.is_some() {
                        return Ok(());
                    }
                }
            }
            if row.task_state.as_deref() == Some(task_state::DELETING) {
                // A crash may have lost the queue-for-delete write that
                // follows `deleting` (below), which the agent's `deleted`
                // report needs: a repeated delete makes it (no change
                // once made).
                write(&*self.control, |w| Ok((plan_queue_for_delete(w, uuid), ())))?;
                return Ok(());
            }
            let now = self.now();
            let action = caller.action(uuid, "delete", now, Vec::new());
            let local = cell.uuid == CELL0_UUID || row.host.as_deref().is_none_or(|h| !self.health.is_up_at(h, now));
            let expect = Expect {
                task_states: vec![row.task_state.clone()],
                // The reclaim deletes only what is still soft-deleted: a
                // restore that came first wins (one write decides).
                vm_states: if mode == DeleteMode::Reclaim {
                    vec![vm_state::SOFT_DELETED.to_owned()]
                } else {
                    Vec::new()
                },
                not_deleted: true,
                ..Expect::default()
            };
            let soft = mode == DeleteMode::Api
                && self.config.reclaim_instance_interval > 0
                && !local
                && row.task_state.is_none()
                && row.launched_at.is_some()
                && row.vm_state != vm_state::SOFT_DELETED;
            if soft {
                let host = row.host.clone().unwrap_or_default();
                let event = berth_compute_model::cell::ActionEvent {
                    event: EVENT_SOFT_DELETE.to_owned(),
                    start_time: now,
                    finish_time: None,
                    result: None,
                    traceback: None,
                    host: Some(host.clone()),
                    details: None,
                };
                let action = caller.action(uuid, "delete", now, vec![event]);
                let update = InstanceUpdate {
                    task_state: Some(Some(task_state::SOFT_DELETING.to_owned())),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                let expect = Expect { task_states: vec![None], ..expect };
                let outcomes = handle
                    .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(action)])
                    .await?;
                if outcomes.first() != Some(&CellOutcome::Done) {
                    continue;
                }
                if let Some(task) = Task::new(*uuid, &host, task_state::SOFT_DELETING) {
                    self.hub.push(task);
                }
                return Ok(());
            }
            if local {
                // No host to ask (cell0, never placed, or its service is
                // down): delete here, as Nova's local delete does.
                self.forget_migrations(&handle, uuid).await?;
                write(&*self.control, |w| Ok((plan_forget_instance(w, uuid), ())))?;
                let update = InstanceUpdate {
                    vm_state: Some(vm_state::DELETED.to_owned()),
                    task_state: Some(None),
                    terminated_at: Some(Some(now)),
                    deleted_at: Some(now),
                    updated_at: now,
                    ..InstanceUpdate::default()
                };
                let outcomes = handle
                    .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(action)])
                    .await?;
                if outcomes.first() == Some(&CellOutcome::Done) {
                    return Ok(());
                }
                continue;
            }
            let update = InstanceUpdate {
                task_state: Some(Some(task_state::DELETING.to_owned())),
                updated_at: now,
                ..InstanceUpdate::default()
            };
            let outcomes = handle
                .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(action)])
                .await?;
            if outcomes.first() != Some(&CellOutcome::Done) {
                continue;
            }
            write(&*self.control, |w| Ok((plan_queue_for_delete(w, uuid), ())))?;
            if let Some(task) = row.host.as_deref().and_then(|h| Task::new(*uuid, h, task_state::DELETING)) {
                self.hub.push(task);
            }
            return Ok(());
        }
        if mode == DeleteMode::Reclaim {
            return Ok(());
        }
        Err(ServiceError::Refused(ComputeError::Conflict(format!(
            "Instance {uuid} changed state repeatedly while being deleted; retry."
        ))))
    }

    /// `PUT /servers/{id}`: change the display name, description, access
    /// addresses and disk config. A server still being scheduled gets
    /// them on its build request.
    pub async fn update_server(&self, uuid: &Uuid, edit: ServerEdit) -> Result<(), ServiceError> {
        let ServerEdit { name, description, access_ip_v4, access_ip_v6, auto_disk_config } = edit;
        if name.is_none()
            && description.is_none()
            && access_ip_v4.is_none()
            && access_ip_v6.is_none()
            && auto_disk_config.is_none()
        {
            return Ok(());
        }
        let pending = write(&*self.control, |w| {
            let mut set = berth_compute_model::WorldChangeSet::new();
            let Some(build) = w.compute.build_requests.get(uuid) else { return Ok((set, false)) };
            let mut build = build.clone();
            if let Some(name) = &name {
                build.spec.display_name = name.clone();
            }
            if let Some(description) = &description {
                build.spec.display_description = description.clone();
            }
            if let Some(ip) = &access_ip_v4 {
                build.spec.access_ip_v4 = Some(ip.clone());
            }
            if let Some(ip) = &access_ip_v6 {
                build.spec.access_ip_v6 = Some(ip.clone());
            }
            if let Some(auto) = auto_disk_config {
                build.spec.auto_disk_config = auto;
            }
            set.compute(berth_compute_model::ComputeChange::PutBuildRequest(build));
            Ok((set, true))
        })?;
        if pending {
            return Ok(());
        }
        let record = self.get_server(uuid).await?;
        let ServerRecord::Placed { cell, .. } = record else {
            return Err(ServiceError::Unavailable("the server's cell is not answering".into()));
        };
        let update = InstanceUpdate {
            display_name: name,
            display_description: description,
            access_ip_v4: access_ip_v4.map(Some),
            access_ip_v6: access_ip_v6.map(Some),
            auto_disk_config,
            updated_at: self.now(),
            ..InstanceUpdate::default()
        };
        let expect = Expect { not_deleted: true, ..Expect::default() };
        let outcomes =
            self.cells.get(&cell)?.write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }]).await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            return Err(not_found(uuid));
        }
        Ok(())
    }

    /// `PUT /servers/{id}` with `pinned_availability_zone` (2.104): unpin
    /// (`None`) or re-pin the server to the zone it is in (`zone`, read
    /// by the caller from the server), in one write of the request spec
    /// that checks the pin it replaces. Nova's 409s: re-pinning to another
    /// zone than the server's, and changing one pin into another (unpin
    /// first). Setting the current value again writes nothing.
    pub fn pin_availability_zone(
        &self,
        uuid: &Uuid,
        requested: Option<&str>,
        zone: Option<&str>,
    ) -> Result<(), ServiceError> {
        write(&*self.control, |w| {
            let mut set = berth_compute_model::WorldChangeSet::new();
            let Some(spec) = w.compute.request_specs.get(uuid) else {
                return Err(ComputeError::NotFound(format!("Instance {uuid} could not be found.")));
            };
            let pinned = spec.availability_zone.as_deref();
            match (requested, pinned) {
                (None, None) => return Ok((set, ())),
                (Some(want), Some(now)) if want == now => return Ok((set, ())),
                (Some(_), Some(_)) => {
                    return Err(ComputeError::Conflict(
                        "Cannot change pinned availability zone directly. Unpin first by setting \
                         pinned_availability_zone to null."
                            .into(),
                    ))
                }
                (Some(want), None) if Some(want) != zone => {
                    return Err(ComputeError::Conflict(format!(
                        "Server can only be pinned to its current availability zone '{}', but '{want}' was \
                         requested.",
                        zone.unwrap_or("None")
                    )))
                }
                _ => {}
            }
            let mut spec = spec.clone();
            spec.availability_zone = requested.map(str::to_owned);
            set.compute(berth_compute_model::ComputeChange::PutRequestSpec(spec));
            Ok((set, ()))
        })?;
        Ok(())
    }

    /// `os-start`, `os-stop`, `reboot`, `pause`, `unpause`, `suspend`,
    /// `resume`: check the state, set the task state and start the
    /// instance action in one cell write, and hand the task to the host's
    /// agent, whose report ends it.
    pub async fn server_action(&self, uuid: &Uuid, action: ServerAction, caller: &Caller) -> Result<(), ServiceError> {
        let record = self.get_server(uuid).await?;
        let (instance, cell) = match record {
            ServerRecord::Placed { instance, cell, .. } => (instance, cell),
            ServerRecord::Pending(build) => {
                return Err(invalid_state(action.name(), uuid, "vm_state", build.shown_state().0))
            }
            ServerRecord::Unreachable(_) => {
                return Err(ServiceError::Unavailable("the server's cell is not answering".into()))
            }
        };
        let (vm_states, task): (&[&str], &str) = match action {
            ServerAction::Start => (&[vm_state::STOPPED], task_state::POWERING_ON),
            ServerAction::Stop => (&[vm_state::ACTIVE, vm_state::ERROR, vm_state::RESCUED], task_state::POWERING_OFF),
            ServerAction::Reboot { hard: false } => (&[vm_state::ACTIVE], task_state::REBOOTING),
            ServerAction::Reboot { hard: true } => (
                &[vm_state::ACTIVE, vm_state::STOPPED, vm_state::PAUSED, vm_state::SUSPENDED, vm_state::ERROR],
                task_state::REBOOTING_HARD,
            ),
            ServerAction::Pause | ServerAction::Suspend => (&[vm_state::ACTIVE], action.task_state()),
            ServerAction::Unpause => (&[vm_state::PAUSED], action.task_state()),
            ServerAction::Resume => (&[vm_state::SUSPENDED], action.task_state()),
            ServerAction::Rescue { .. } => {
                (&[vm_state::ACTIVE, vm_state::STOPPED, vm_state::ERROR], action.task_state())
            }
            ServerAction::Unrescue => (&[vm_state::RESCUED], action.task_state()),
            ServerAction::Restore => (&[vm_state::SOFT_DELETED], action.task_state()),
        };
        let task_text = instance.task_state.as_deref().unwrap_or("None");
        if action.checks_vm_state_first() {
            // Nova's `check_instance_state`: the vm state first, then the
            // task state (`None` when there is none).
            if !vm_states.contains(&instance.vm_state.as_str()) {
                return Err(invalid_state(action.name(), uuid, "vm_state", &instance.vm_state));
            }
            if instance.task_state.is_some() {
                return Err(invalid_state(action.name(), uuid, "task_state", task_text));
            }
        } else {
            if instance.task_state.is_some() {
                return Err(invalid_state(action.name(), uuid, "task_state", task_text));
            }
            if !vm_states.contains(&instance.vm_state.as_str()) {
                return Err(invalid_state(action.name(), uuid, "vm_state", &instance.vm_state));
            }
        }
        let Some(host) = instance.host.clone() else {
            return Err(invalid_state(action.name(), uuid, "vm_state", &instance.vm_state));
        };
        let now = self.now();
        let expect = Expect {
            vm_states: vm_states.iter().map(|s| (*s).to_owned()).collect(),
            task_states: vec![None],
            not_deleted: true,
            ..Expect::default()
        };
        let rescue_image = match action {
            ServerAction::Rescue { image } => Some(image),
            _ => None,
        };
        let update = InstanceUpdate {
            task_state: Some(Some(task.to_owned())),
            rescue_image,
            updated_at: now,
            ..InstanceUpdate::default()
        };
        let events = match action.compute_event() {
            Some(event) => vec![berth_compute_model::cell::ActionEvent {
                event: event.to_owned(),
                start_time: now,
                finish_time: None,
                result: None,
                traceback: None,
                host: Some(host.clone()),
                details: None,
            }],
            None => Vec::new(),
        };
        let record = caller.action(uuid, action.name(), now, events);
        let handle = self.cells.get(&cell)?;
        let outcomes = handle
            .write(vec![CellOp::UpdateInstance { uuid: *uuid, expect, update }, CellOp::StartAction(record)])
            .await?;
        if outcomes.first() != Some(&CellOutcome::Done) {
            // Something else won the row (a delete, the reclaim, another
            // action): answer as the state it left.
            return Err(match self.get_server(uuid).await {
                Ok(ServerRecord::Placed { instance, .. }) => match &instance.task_state {
                    Some(task) => invalid_state(action.name(), uuid, "task_state", task),
                    None => invalid_state(action.name(), uuid, "vm_state", &instance.vm_state),
                },
                Ok(_) => invalid_state(action.name(), uuid, "task_state", "changing"),
                Err(err) => err,
            });
        }
        if let Some(task) = Task::new(*uuid, &host, task) {
            self.hub.push(task);
        }
        Ok(())
    }
}

/// Who deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteMode {
    /// `DELETE /servers/{id}`: soft when `reclaim_instance_interval` is set.
    Api,
    /// `forceDelete`: now, and only without a task.
    Force,
    /// The periodic reclaim: only a soft-deleted server with no task.
    Reclaim,
}

impl DeleteMode {
    fn action(self) -> &'static str {
        match self {
            DeleteMode::Api => "delete",
            DeleteMode::Force => "forceDelete",
            DeleteMode::Reclaim => "reclaim",
        }
    }
}

fn invalid_state(action: &str, uuid: &Uuid, attr: &str, state: &str) -> ServiceError {
    ServiceError::Refused(ComputeError::Conflict(format!(
        "Cannot '{action}' instance {uuid} while it is in {attr} {state}"
    )))
}

/// Power actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAction {
    /// `os-start`.
    Start,
    /// `os-stop`.
    Stop,
    /// `reboot` (`hard`: `HARD`).
    Reboot {
        /// Hard reboot.
        hard: bool,
    },
    /// `pause`.
    Pause,
    /// `unpause`.
    Unpause,
    /// `suspend`.
    Suspend,
    /// `resume`.
    Resume,
    /// `rescue`, from `image` (`rescue_image_ref`) when given, else the
    /// server's own image; kept on the instance for the rescue's task
    /// (the password means nothing to a guest without an agent).
    Rescue {
        /// The rescue image.
        image: Option<Uuid>,
    },
    /// `unrescue`.
    Unrescue,
    /// `restore` a soft-deleted server.
    Restore,
}

impl ServerAction {
    /// Nova's action name (instance actions and error texts).
    pub fn name(self) -> &'static str {
        match self {
            ServerAction::Start => "start",
            ServerAction::Stop => "stop",
            ServerAction::Reboot { .. } => "reboot",
            ServerAction::Pause => "pause",
            ServerAction::Unpause => "unpause",
            ServerAction::Suspend => "suspend",
            ServerAction::Resume => "resume",
            ServerAction::Rescue { .. } => "rescue",
            ServerAction::Unrescue => "unrescue",
            ServerAction::Restore => "restore",
        }
    }

    /// The task state the host's agent works in (pause, unpause, suspend,
    /// resume; the power actions' are chosen with their vm states).
    fn task_state(self) -> &'static str {
        match self {
            ServerAction::Pause => task_state::PAUSING,
            ServerAction::Unpause => task_state::UNPAUSING,
            ServerAction::Suspend => task_state::SUSPENDING,
            ServerAction::Resume => task_state::RESUMING,
            ServerAction::Rescue { .. } => task_state::RESCUING,
            ServerAction::Unrescue => task_state::UNRESCUING,
            ServerAction::Restore => task_state::RESTORING,
            ServerAction::Start => task_state::POWERING_ON,
            ServerAction::Stop => task_state::POWERING_OFF,
            ServerAction::Reboot { hard: false } => task_state::REBOOTING,
            ServerAction::Reboot { hard: true } => task_state::REBOOTING_HARD,
        }
    }

    /// Nova's order of the state checks: `check_instance_state` looks at
    /// the vm state before the task state (the power actions, older here,
    /// keep berth's task-first order).
    fn checks_vm_state_first(self) -> bool {
        !matches!(self, ServerAction::Start | ServerAction::Stop | ServerAction::Reboot { .. })
    }

    /// The compute manager's event of the action (`wrap_instance_event`
    /// with prefix `compute`), finished by the agent's report.
    pub fn compute_event(self) -> Option<&'static str> {
        match self {
            ServerAction::Pause => Some(EVENT_PAUSE),
            ServerAction::Unpause => Some(EVENT_UNPAUSE),
            ServerAction::Suspend => Some(EVENT_SUSPEND),
            ServerAction::Resume => Some(EVENT_RESUME),
            ServerAction::Rescue { .. } => Some(EVENT_RESCUE),
            ServerAction::Unrescue => Some(EVENT_UNRESCUE),
            ServerAction::Restore => Some(EVENT_RESTORE),
            _ => None,
        }
    }
}

/// Nova's event of a pause.
pub const EVENT_PAUSE: &str = "compute_pause_instance";
/// Nova's event of an unpause.
pub const EVENT_UNPAUSE: &str = "compute_unpause_instance";
/// Nova's event of a suspend.
pub const EVENT_SUSPEND: &str = "compute_suspend_instance";
/// Nova's event of a resume.
pub const EVENT_RESUME: &str = "compute_resume_instance";
/// Nova's event of a rescue.
pub const EVENT_RESCUE: &str = "compute_rescue_instance";
/// Nova's event of an unrescue.
pub const EVENT_UNRESCUE: &str = "compute_unrescue_instance";
/// Nova's event of a restore.
pub const EVENT_RESTORE: &str = "compute_restore_instance";
/// Nova's event of a soft delete.
pub const EVENT_SOFT_DELETE: &str = "compute_soft_delete_instance";

fn stub_after(mapping: &InstanceMapping, marker: &Marker) -> bool {
    // Stubs only appear without sort keys: default order created_at desc.
    match marker.values.first() {
        Some(berth_compute_model::cell::SortValue::Int(t)) => {
            mapping.created_at < *t || (mapping.created_at == *t && mapping.instance_uuid < marker.uuid)
        }
        _ => true,
    }
}

fn listed_order(a: &Listed, b: &Listed, sort: &[SortKey]) -> std::cmp::Ordering {
    let key = |l: &Listed| match l {
        Listed::Pending(b) => (b.created_at, b.instance_uuid),
        Listed::Placed(i, _) => (i.created_at, i.uuid),
        Listed::Stub(m) => (m.created_at, m.instance_uuid),
    };
    let ord = key(a).cmp(&key(b));
    if sort.first().is_none_or(|k| !k.ascending) {
        ord.reverse()
    } else {
        ord
    }
}

/// Await every future, in order (the cells are queried concurrently).
pub(crate) async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in pinned.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *slot = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}
