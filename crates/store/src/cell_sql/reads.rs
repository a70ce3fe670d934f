//! Reads by key: instances by uuid or task state, their faults, the
//! cell's services and compute nodes, instance counts per host.

use std::collections::BTreeMap;

use berth_compute_model::cell::{ComputeNode, Fault, Instance, Service};
use uuid::Uuid;

use super::instances::{instance_from_row, instance_kinds, instance_select_list, select_instance};
use super::{text, Builder, CellConn, Cols, Kind, Result};

/// How many values an `IN (…)` list carries per statement.
const IN_CHUNK: usize = 500;

/// One instance (soft-deleted included).
pub fn instance(conn: &mut dyn CellConn, uuid: &Uuid) -> Result<Option<Instance>> {
    select_instance(conn, uuid, false)
}

/// Instances by uuid (missing ones left out).
pub fn instances(conn: &mut dyn CellConn, uuids: &[Uuid]) -> Result<Vec<Instance>> {
    let d = conn.dialect();
    let mut out = Vec::new();
    for chunk in uuids.chunks(IN_CHUNK) {
        let mut b = Builder { dialect: d, params: Vec::new() };
        let list = b.bind_list(chunk.iter().map(|u| text(&u.to_string())));
        let sql = format!("SELECT {} FROM instances WHERE uuid IN ({list})", instance_select_list());
        for row in conn.query(&sql, &b.params, &instance_kinds())? {
            out.push(instance_from_row(&row)?);
        }
    }
    Ok(out)
}

/// Not-deleted instances whose task state is one of `task_states`.
pub fn instances_with_tasks(conn: &mut dyn CellConn, task_states: &[&str]) -> Result<Vec<Instance>> {
    if task_states.is_empty() {
        return Ok(Vec::new());
    }
    let mut b = Builder { dialect: conn.dialect(), params: Vec::new() };
    let list = b.bind_list(task_states.iter().map(|s| text(s)));
    // `+deleted`: the condition must not drive the scan. On `deleted` it
    // would walk every live instance through `instances_deleted_created`
    // (what SQLite's planner picks, and PostgreSQL's generic plan made
    // while the table was small), where the partial `instances_task_state`
    // index holds only the few rows with a task: the sweep runs this
    // every 200 ms.
    let sql = format!(
        "SELECT {} FROM instances WHERE +deleted = 0 AND task_state IN ({list}) ORDER BY created_at, uuid",
        instance_select_list()
    );
    conn.query(&sql, &b.params, &instance_kinds())?.iter().map(|r| instance_from_row(r)).collect()
}

/// The latest fault of each of these instances, by instance uuid.
pub fn faults(conn: &mut dyn CellConn, uuids: &[Uuid]) -> Result<Vec<Fault>> {
    let d = conn.dialect();
    let mut latest: BTreeMap<Uuid, Fault> = BTreeMap::new();
    for chunk in uuids.chunks(IN_CHUNK) {
        let mut b = Builder { dialect: d, params: Vec::new() };
        let list = b.bind_list(chunk.iter().map(|u| text(&u.to_string())));
        let sql = format!(
            "SELECT instance_uuid, code, message, details, host, created_at FROM instance_faults
             WHERE instance_uuid IN ({list}) ORDER BY instance_uuid, created_at, id"
        );
        let kinds = [Kind::Text, Kind::Int, Kind::Text, Kind::Text, Kind::Text, Kind::Int];
        for row in conn.query(&sql, &b.params, &kinds)? {
            let mut c = Cols::new(&row, "instance_faults");
            let fault = Fault {
                instance_uuid: c.uuid()?,
                code: c.int()?,
                message: c.text()?,
                details: c.text()?,
                host: c.opt_text()?,
                created_at: c.int()?,
            };
            latest.insert(fault.instance_uuid, fault);
        }
    }
    Ok(latest.into_values().collect())
}

/// Every service, by id.
pub fn services(conn: &mut dyn CellConn) -> Result<Vec<Service>> {
    let rows = conn.query(
        "SELECT id, uuid, host, \"binary\", disabled, disabled_reason, forced_down, last_seen_up, created_at,
                updated_at
         FROM services ORDER BY id",
        &[],
        &[
            Kind::Int,
            Kind::Text,
            Kind::Text,
            Kind::Text,
            Kind::Int,
            Kind::Text,
            Kind::Int,
            Kind::Int,
            Kind::Int,
            Kind::Int,
        ],
    )?;
    rows.iter()
        .map(|row| {
            let mut c = Cols::new(row, "services");
            Ok(Service {
                id: c.int()?,
                uuid: c.uuid()?,
                host: c.text()?,
                binary: c.text()?,
                disabled: c.boolean()?,
                disabled_reason: c.opt_text()?,
                forced_down: c.boolean()?,
                last_seen_up: c.opt_int()?,
                created_at: c.int()?,
                updated_at: c.opt_int()?,
            })
        })
        .collect()
}

/// Every compute node, by id.
pub fn compute_nodes(conn: &mut dyn CellConn) -> Result<Vec<ComputeNode>> {
    let rows = conn.query(
        "SELECT id, uuid, host, hypervisor_hostname, hypervisor_type, hypervisor_version, host_ip, vcpus, memory_mb,
                local_gb, cpu_info, created_at, updated_at
         FROM compute_nodes ORDER BY id",
        &[],
        &[
            Kind::Int,
            Kind::Text,
            Kind::Text,
            Kind::Text,
            Kind::Text,
            Kind::Int,
            Kind::Text,
            Kind::Int,
            Kind::Int,
            Kind::Int,
            Kind::Text,
            Kind::Int,
            Kind::Int,
        ],
    )?;
    rows.iter()
        .map(|row| {
            let mut c = Cols::new(row, "compute_nodes");
            Ok(ComputeNode {
                id: c.int()?,
                uuid: c.uuid()?,
                host: c.text()?,
                hypervisor_hostname: c.text()?,
                hypervisor_type: c.text()?,
                hypervisor_version: c.int()?,
                host_ip: c.text()?,
                vcpus: c.int()?,
                memory_mb: c.int()?,
                local_gb: c.int()?,
                cpu_info: c.text()?,
                created_at: c.int()?,
                updated_at: c.opt_int()?,
            })
        })
        .collect()
}

/// Number of not-deleted instances per host (hosts without instances are
/// left out), by host.
pub fn instance_counts_by_host(conn: &mut dyn CellConn) -> Result<Vec<(String, i64)>> {
    let rows = conn.query(
        "SELECT host, COUNT(*) FROM instances WHERE deleted = 0 AND host IS NOT NULL GROUP BY host ORDER BY host",
        &[],
        &[Kind::Text, Kind::Int],
    )?;
    rows.iter()
        .map(|row| {
            let mut c = Cols::new(row, "instances");
            Ok((c.text()?, c.int()?))
        })
        .collect()
}
