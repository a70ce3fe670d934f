//! Writes: [`write`] runs a batch of [`CellOp`]s in the caller's
//! transaction, one outcome per op; each op is one arm of `apply`
//! (PostgreSQL batches runs of ops in `bulk`).

use berth_compute_model::cell::ActionEvent;

use super::actions::{action_id, action_params, insert_event, start_action_pg};
use super::instances::{
    apply_update, expect_matches, insert_tags, instance_precondition, instance_values, select_instance, set_tags,
    update_instance_sql, upsert_instance_sql, write_instance,
};
use super::migrations::{insert_migration, select_migration, update_migration};
use super::{boolean, bulk, int, opt_int, opt_text, text, Builder, CellConn, Cols, Dialect, Kind, Result, Value};
use crate::cell::{CellOp, CellOutcome};
use crate::StoreError;

fn returned_id(rows: &[Vec<Value>], what: &'static str) -> Result<i64> {
    let row = rows.first().ok_or_else(|| StoreError::Internal(format!("{what}: no id returned")))?;
    Cols::new(row, what).int()
}

/// After inserting a row with an explicit id, move PostgreSQL's identity
/// sequence past it (SQLite's AUTOINCREMENT follows by itself).
fn bump_sequence(conn: &mut dyn CellConn, table: &str) -> Result<()> {
    if conn.dialect() == Dialect::Postgres {
        conn.query(
            &format!("SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"),
            &[],
            &[Kind::Int],
        )?;
    }
    Ok(())
}

pub(super) fn apply(conn: &mut dyn CellConn, op: &CellOp) -> Result<CellOutcome> {
    let d = conn.dialect();
    match op {
        CellOp::PutInstance(instance) => {
            conn.execute(&upsert_instance_sql(d, true), &instance_values(instance))?;
            set_tags(conn, &instance.uuid, &instance.spec.tags)?;
            Ok(CellOutcome::Done)
        }
        CellOp::InsertInstance(instance) => {
            if conn.execute(&upsert_instance_sql(d, false), &instance_values(instance))? == 0 {
                return Ok(CellOutcome::Mismatch);
            }
            // A new row: no tags to delete (purging an instance deletes its
            // tags with it).
            insert_tags(conn, &instance.uuid, &instance.spec.tags)?;
            Ok(CellOutcome::Done)
        }
        CellOp::UpdateInstance { uuid, expect, update } => {
            let Some(mut row) = select_instance(conn, uuid, true)? else { return Ok(CellOutcome::Missing) };
            if !expect_matches(&row, expect) {
                return Ok(CellOutcome::Mismatch);
            }
            apply_update(&mut row, update);
            conn.execute(&update_instance_sql(d), &instance_values(&row))?;
            if update.tags.is_some() {
                set_tags(conn, uuid, &row.spec.tags)?;
            }
            Ok(CellOutcome::Done)
        }
        CellOp::PurgeInstance(uuid) => {
            let key = [text(&uuid.to_string())];
            conn.execute(
                &d.sql(
                    "DELETE FROM instance_action_events
                     WHERE action_id IN (SELECT id FROM instance_actions WHERE instance_uuid = ?1)",
                ),
                &key,
            )?;
            conn.execute(&d.sql("DELETE FROM instance_actions WHERE instance_uuid = ?1"), &key)?;
            conn.execute(&d.sql("DELETE FROM instance_faults WHERE instance_uuid = ?1"), &key)?;
            conn.execute(&d.sql("DELETE FROM instance_tags WHERE uuid = ?1"), &key)?;
            let gone = conn.execute(&d.sql("DELETE FROM instances WHERE uuid = ?1"), &key)?;
            Ok(if gone == 0 { CellOutcome::Missing } else { CellOutcome::Done })
        }
        CellOp::EnsureService(s) => {
            let mut values = vec![
                text(&s.uuid.to_string()),
                text(&s.host),
                text(&s.binary),
                boolean(s.disabled),
                opt_text(s.disabled_reason.as_deref()),
                boolean(s.forced_down),
                opt_int(s.last_seen_up),
                int(s.created_at),
                opt_int(s.updated_at),
            ];
            let explicit = s.id > 0;
            let (id_column, id_value) = if explicit {
                values.push(int(s.id));
                (", id", ", ?10")
            } else {
                ("", "")
            };
            let sql = format!(
                "INSERT INTO services (uuid, host, \"binary\", disabled, disabled_reason, forced_down, last_seen_up,
                                       created_at, updated_at{id_column})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9{id_value})
                 ON CONFLICT (host, \"binary\") DO UPDATE
                 SET last_seen_up = COALESCE(excluded.last_seen_up, services.last_seen_up),
                     updated_at = COALESCE(excluded.updated_at, services.updated_at)
                 RETURNING id"
            );
            let rows = conn.query(&d.sql(&sql), &values, &[Kind::Int])?;
            let id = returned_id(&rows, "services")?;
            if explicit && id == s.id {
                bump_sequence(conn, "services")?;
            }
            Ok(CellOutcome::Id(id))
        }
        CellOp::UpdateService { id, disabled, disabled_reason, forced_down, updated_at } => {
            let mut b = Builder { dialect: d, params: vec![int(*id)] };
            let mut sets = vec![format!("updated_at = {}", b.bind(int(*updated_at)))];
            if let Some(v) = disabled {
                sets.push(format!("disabled = {}", b.bind(boolean(*v))));
            }
            if let Some(v) = disabled_reason {
                sets.push(format!("disabled_reason = {}", b.bind(opt_text(v.as_deref()))));
            }
            if let Some(v) = forced_down {
                sets.push(format!("forced_down = {}", b.bind(boolean(*v))));
            }
            let sql = format!("UPDATE services SET {} WHERE id = {}", sets.join(", "), d.placeholder(1));
            let changed = conn.execute(&sql, &b.params)?;
            Ok(if changed == 0 { CellOutcome::Missing } else { CellOutcome::Done })
        }
        CellOp::DeleteService(id) => {
            let rows =
                conn.query(&d.sql("DELETE FROM services WHERE id = ?1 RETURNING host"), &[int(*id)], &[Kind::Text])?;
            let Some(row) = rows.first() else { return Ok(CellOutcome::Missing) };
            let host = Cols::new(row, "services").text()?;
            conn.execute(&d.sql("DELETE FROM compute_nodes WHERE host = ?1"), &[text(&host)])?;
            Ok(CellOutcome::Done)
        }
        CellOp::Heartbeat { hosts, at } => {
            if !hosts.is_empty() {
                let mut b = Builder { dialect: d, params: vec![int(*at)] };
                let list = b.bind_list(hosts.iter().map(|h| text(h)));
                let sql = format!(
                    "UPDATE services SET last_seen_up = {} WHERE \"binary\" = 'nova-compute' AND host IN ({list})",
                    d.placeholder(1)
                );
                conn.execute(&sql, &b.params)?;
            }
            Ok(CellOutcome::Done)
        }
        CellOp::EnsureComputeNode(n) => {
            let mut values = vec![
                text(&n.uuid.to_string()),
                text(&n.host),
                text(&n.hypervisor_hostname),
                text(&n.hypervisor_type),
                int(n.hypervisor_version),
                text(&n.host_ip),
                int(n.vcpus),
                int(n.memory_mb),
                int(n.local_gb),
                text(&n.cpu_info),
                int(n.created_at),
                opt_int(n.updated_at),
            ];
            let explicit = n.id > 0;
            let (id_column, id_value) = if explicit {
                values.push(int(n.id));
                (", id", ", ?13")
            } else {
                ("", "")
            };
            let sql = format!(
                "INSERT INTO compute_nodes (uuid, host, hypervisor_hostname, hypervisor_type, hypervisor_version,
                                            host_ip, vcpus, memory_mb, local_gb, cpu_info, created_at,
                                            updated_at{id_column})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12{id_value})
                 ON CONFLICT (uuid) DO UPDATE
                 SET host = excluded.host, hypervisor_hostname = excluded.hypervisor_hostname,
                     hypervisor_type = excluded.hypervisor_type, hypervisor_version = excluded.hypervisor_version,
                     host_ip = excluded.host_ip, vcpus = excluded.vcpus, memory_mb = excluded.memory_mb,
                     local_gb = excluded.local_gb, cpu_info = excluded.cpu_info, updated_at = excluded.updated_at
                 RETURNING id"
            );
            let rows = conn.query(&d.sql(&sql), &values, &[Kind::Int])?;
            let id = returned_id(&rows, "compute_nodes")?;
            if explicit && id == n.id {
                bump_sequence(conn, "compute_nodes")?;
            }
            Ok(CellOutcome::Id(id))
        }
        CellOp::StartAction(a) if d == Dialect::Postgres => {
            start_action_pg(conn, a)?;
            Ok(CellOutcome::Done)
        }
        CellOp::StartEvent { instance, request_id, event, host, at } if d == Dialect::Postgres => {
            // One round trip: find the action, add the event, touch the action.
            let rows = conn.query(
                "WITH a AS (SELECT id FROM instance_actions WHERE instance_uuid = $1::text AND request_id = $2::text),
                      e AS (INSERT INTO instance_action_events (action_id, event, start_time, host)
                            SELECT id, $3::text, $4::bigint, $5::text FROM a),
                      u AS (UPDATE instance_actions SET updated_at = $4::bigint WHERE id IN (SELECT id FROM a))
                 SELECT id FROM a",
                &[text(&instance.to_string()), text(request_id), text(event), int(*at), opt_text(host.as_deref())],
                &[Kind::Int],
            )?;
            Ok(if rows.is_empty() { CellOutcome::Missing } else { CellOutcome::Done })
        }
        CellOp::FinishEvent { instance, request_id, event, result, traceback, at } if d == Dialect::Postgres => {
            // One round trip: the latest event of that name (an unfinished
            // one first) of the action, finished, and the action touched.
            let rows = conn.query(
                "WITH a AS (SELECT id FROM instance_actions WHERE instance_uuid = $1::text AND request_id = $2::text),
                      e AS (SELECT ev.id FROM instance_action_events ev JOIN a ON ev.action_id = a.id
                            WHERE ev.event = $3::text
                            ORDER BY CASE WHEN ev.finish_time IS NULL THEN 0 ELSE 1 END, ev.id DESC LIMIT 1),
                      ue AS (UPDATE instance_action_events
                             SET finish_time = $4::bigint, result = $5::text, traceback = $6::text
                             WHERE id IN (SELECT id FROM e) RETURNING action_id),
                      ua AS (UPDATE instance_actions
                             SET message = CASE WHEN $5::text = 'Error' THEN 'Error' ELSE message END,
                                 updated_at = $4::bigint
                             WHERE id IN (SELECT action_id FROM ue) RETURNING id)
                 SELECT COUNT(*) FROM ua",
                &[
                    text(&instance.to_string()),
                    text(request_id),
                    text(event),
                    int(*at),
                    text(result),
                    opt_text(traceback.as_deref()),
                ],
                &[Kind::Int],
            )?;
            let finished = rows.first().map(|row| Cols::new(row, "instance_actions").int()).transpose()?;
            Ok(if finished.unwrap_or(0) == 0 { CellOutcome::Missing } else { CellOutcome::Done })
        }
        CellOp::StartAction(a) => {
            let rows = conn.query(
                &d.sql(
                    "INSERT INTO instance_actions
                         (instance_uuid, action, request_id, user_id, project_id, start_time, message, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (instance_uuid, request_id) DO NOTHING
                     RETURNING id",
                ),
                &action_params(a),
                &[Kind::Int],
            )?;
            if let Some(row) = rows.first() {
                let id = Cols::new(row, "instance_actions").int()?;
                for event in &a.events {
                    insert_event(conn, id, event)?;
                }
            }
            Ok(CellOutcome::Done)
        }
        CellOp::StartEvent { instance, request_id, event, host, at } => {
            let Some(id) = action_id(conn, instance, request_id)? else { return Ok(CellOutcome::Missing) };
            let e = ActionEvent {
                event: event.clone(),
                start_time: *at,
                finish_time: None,
                result: None,
                traceback: None,
                host: host.clone(),
                details: None,
            };
            insert_event(conn, id, &e)?;
            conn.execute(&d.sql("UPDATE instance_actions SET updated_at = ?2 WHERE id = ?1"), &[int(id), int(*at)])?;
            Ok(CellOutcome::Done)
        }
        CellOp::FinishEvent { instance, request_id, event, result, traceback, at } => {
            let Some(id) = action_id(conn, instance, request_id)? else { return Ok(CellOutcome::Missing) };
            // The latest event of that name (an unfinished one first).
            let rows = conn.query(
                &d.sql(
                    "SELECT id FROM instance_action_events WHERE action_id = ?1 AND event = ?2
                     ORDER BY CASE WHEN finish_time IS NULL THEN 0 ELSE 1 END, id DESC LIMIT 1",
                ),
                &[int(id), text(event)],
                &[Kind::Int],
            )?;
            let Some(row) = rows.first() else { return Ok(CellOutcome::Missing) };
            let event_id = Cols::new(row, "instance_action_events").int()?;
            conn.execute(
                &d.sql("UPDATE instance_action_events SET finish_time = ?2, result = ?3, traceback = ?4 WHERE id = ?1"),
                &[int(event_id), int(*at), text(result), opt_text(traceback.as_deref())],
            )?;
            if result == "Error" {
                conn.execute(
                    &d.sql("UPDATE instance_actions SET message = 'Error', updated_at = ?2 WHERE id = ?1"),
                    &[int(id), int(*at)],
                )?;
            } else {
                conn.execute(
                    &d.sql("UPDATE instance_actions SET updated_at = ?2 WHERE id = ?1"),
                    &[int(id), int(*at)],
                )?;
            }
            Ok(CellOutcome::Done)
        }
        CellOp::AddFault(f) => {
            conn.execute(
                &d.sql(
                    "INSERT INTO instance_faults (instance_uuid, code, message, details, host, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                ),
                &[
                    text(&f.instance_uuid.to_string()),
                    int(f.code),
                    text(&f.message),
                    text(&f.details),
                    opt_text(f.host.as_deref()),
                    int(f.created_at),
                ],
            )?;
            Ok(CellOutcome::Done)
        }
        CellOp::InsertMigration { migration, expect, update } => {
            let row = match instance_precondition(conn, &migration.instance_uuid, expect)? {
                Ok(row) => row,
                Err(outcome) => return Ok(outcome),
            };
            write_instance(conn, row, update)?;
            insert_migration(conn, migration)?;
            Ok(CellOutcome::Done)
        }
        CellOp::UpdateMigration { uuid, from_statuses, update, instance } => {
            let Some(mut migration) = select_migration(conn, uuid, true)? else { return Ok(CellOutcome::Missing) };
            if !from_statuses.is_empty() && !from_statuses.contains(&migration.status) {
                return Ok(CellOutcome::Mismatch);
            }
            let row = match instance {
                Some((expect, _)) => match instance_precondition(conn, &migration.instance_uuid, expect)? {
                    Ok(row) => Some(row),
                    Err(outcome) => return Ok(outcome),
                },
                None => None,
            };
            if let (Some(row), Some((_, instance_update))) = (row, instance) {
                write_instance(conn, row, instance_update)?;
            }
            update_migration(conn, uuid, &mut migration, update)?;
            Ok(CellOutcome::Done)
        }
    }
}

/// Run a batch of ops, in order, inside the caller's transaction: one
/// outcome per op. A database error fails the whole batch (the caller
/// rolls back); a `Mismatch` or `Missing` changes nothing for its op only.
/// PostgreSQL runs the ops of one kind in one statement where it can
/// ([`bulk`]); SQLite's statements cost no round trip, so it runs them one
/// by one.
pub fn write(conn: &mut dyn CellConn, ops: &[CellOp]) -> Result<Vec<CellOutcome>> {
    if conn.dialect() == Dialect::Postgres && ops.len() > 1 {
        return bulk::write(conn, ops);
    }
    ops.iter().map(|op| apply(conn, op)).collect()
}
