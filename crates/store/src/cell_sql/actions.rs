//! Instance actions and their events (`instance_actions`,
//! `instance_action_events`): the statements a write uses, and
//! [`instance_actions`], an instance's actions with their events.

use berth_compute_model::cell::{ActionEvent, InstanceAction};
use uuid::Uuid;

use super::{int, opt_int, opt_text, text, CellConn, Cols, Kind, Result, Value};

pub(super) fn action_id(conn: &mut dyn CellConn, instance: &Uuid, request_id: &str) -> Result<Option<i64>> {
    let d = conn.dialect();
    let rows = conn.query(
        &d.sql("SELECT id FROM instance_actions WHERE instance_uuid = ?1 AND request_id = ?2"),
        &[text(&instance.to_string()), text(request_id)],
        &[Kind::Int],
    )?;
    rows.first().map(|r| Cols::new(r, "instance_actions").int()).transpose()
}

pub(super) fn insert_event(conn: &mut dyn CellConn, action: i64, e: &ActionEvent) -> Result<()> {
    let d = conn.dialect();
    conn.execute(
        &d.sql(
            "INSERT INTO instance_action_events
                 (action_id, event, start_time, finish_time, result, traceback, host, details)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        ),
        &[
            int(action),
            text(&e.event),
            int(e.start_time),
            opt_int(e.finish_time),
            opt_text(e.result.as_deref()),
            opt_text(e.traceback.as_deref()),
            opt_text(e.host.as_deref()),
            opt_text(e.details.as_deref()),
        ],
    )?;
    Ok(())
}

/// The parameters of an `instance_actions` insert, in its column order
/// (instance_uuid, action, request_id, user_id, project_id, start_time,
/// message, updated_at).
pub(super) fn action_params(a: &InstanceAction) -> Vec<Value> {
    vec![
        text(&a.instance_uuid.to_string()),
        text(&a.action),
        text(&a.request_id),
        text(&a.user_id),
        text(&a.project_id),
        int(a.start_time),
        opt_text(a.message.as_deref()),
        opt_int(a.updated_at),
    ]
}

/// PostgreSQL: an action and its events in one statement (no events are
/// added when the action already exists, as with SQLite).
pub(super) fn start_action_pg(conn: &mut dyn CellConn, a: &InstanceAction) -> Result<()> {
    let mut params = action_params(a);
    let insert_action = "INSERT INTO instance_actions
             (instance_uuid, action, request_id, user_id, project_id, start_time, message, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6::bigint, $7, $8::bigint)
         ON CONFLICT (instance_uuid, request_id) DO NOTHING
         RETURNING id";
    if a.events.is_empty() {
        conn.execute(insert_action, &params)?;
        return Ok(());
    }
    let mut rows = Vec::with_capacity(a.events.len());
    for (idx, e) in a.events.iter().enumerate() {
        let n = params.len();
        rows.push(format!(
            "({idx}, ${}::text, ${}::bigint, ${}::bigint, ${}::text, ${}::text, ${}::text, ${}::text)",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5,
            n + 6,
            n + 7
        ));
        params.extend([
            text(&e.event),
            int(e.start_time),
            opt_int(e.finish_time),
            opt_text(e.result.as_deref()),
            opt_text(e.traceback.as_deref()),
            opt_text(e.host.as_deref()),
            opt_text(e.details.as_deref()),
        ]);
    }
    let sql = format!(
        "WITH a AS ({insert_action})
         INSERT INTO instance_action_events (action_id, event, start_time, finish_time, result, traceback, host, details)
         SELECT a.id, e.event, e.start_time, e.finish_time, e.result, e.traceback, e.host, e.details
         FROM a, (VALUES {}) AS e(n, event, start_time, finish_time, result, traceback, host, details)
         ORDER BY e.n",
        rows.join(", ")
    );
    conn.execute(&sql, &params)?;
    Ok(())
}

/// The actions of an instance, oldest first, each with its events in
/// start order.
pub fn instance_actions(conn: &mut dyn CellConn, instance: &Uuid) -> Result<Vec<InstanceAction>> {
    let d = conn.dialect();
    let key = [text(&instance.to_string())];
    let rows = conn.query(
        &d.sql(
            "SELECT id, instance_uuid, action, request_id, user_id, project_id, start_time, message, updated_at
             FROM instance_actions WHERE instance_uuid = ?1 ORDER BY start_time, id",
        ),
        &key,
        &[Kind::Int, Kind::Text, Kind::Text, Kind::Text, Kind::Text, Kind::Text, Kind::Int, Kind::Text, Kind::Int],
    )?;
    let mut ids = Vec::new();
    let mut actions = Vec::new();
    for row in &rows {
        let mut c = Cols::new(row, "instance_actions");
        ids.push(c.int()?);
        actions.push(InstanceAction {
            instance_uuid: c.uuid()?,
            action: c.text()?,
            request_id: c.text()?,
            user_id: c.text()?,
            project_id: c.text()?,
            start_time: c.int()?,
            message: c.opt_text()?,
            updated_at: c.opt_int()?,
            events: Vec::new(),
        });
    }
    if actions.is_empty() {
        return Ok(actions);
    }
    let rows = conn.query(
        &d.sql(
            "SELECT e.action_id, e.event, e.start_time, e.finish_time, e.result, e.traceback, e.host, e.details
             FROM instance_action_events e JOIN instance_actions a ON a.id = e.action_id
             WHERE a.instance_uuid = ?1 ORDER BY e.start_time, e.id",
        ),
        &key,
        &[Kind::Int, Kind::Text, Kind::Int, Kind::Int, Kind::Text, Kind::Text, Kind::Text, Kind::Text],
    )?;
    for row in &rows {
        let mut c = Cols::new(row, "instance_action_events");
        let action = c.int()?;
        let event = ActionEvent {
            event: c.text()?,
            start_time: c.int()?,
            finish_time: c.opt_int()?,
            result: c.opt_text()?,
            traceback: c.opt_text()?,
            host: c.opt_text()?,
            details: c.opt_text()?,
        };
        if let Some(pos) = ids.iter().position(|id| *id == action) {
            actions[pos].events.push(event);
        }
    }
    Ok(actions)
}
