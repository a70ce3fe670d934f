//! PostgreSQL: a write batch's ops of one kind in one statement.
//!
//! Every statement is a round trip to the server, and a conductor pass
//! writes dozens of boots at once: their rows and `create` actions, then
//! the hand-out (host and `spawning`, the `scheduling` event finished and
//! the `build` event started). Run one at a time that is three or four
//! round trips per boot. Here consecutive ops of the kinds [`Bulk`] names
//! form a *run*; each kind of a run is one statement with array parameters
//! (`unnest`), so the SQL text is fixed and prepared once per connection.
//!
//! Running a run kind by kind reorders its ops, which changes nothing as
//! long as ops on different instances commute (they touch different rows)
//! and the ops on one instance keep their order. So a run never holds two
//! ops of one kind for the same row (instance, or instance and request
//! id), and an instance's ops in it come in [`Bulk`] order (an op that
//! would break either starts a new run). An op of any other kind ends the
//! run and runs alone, as on SQLite, except faults and heartbeats, which
//! touch no row a run touches and run in place. Each op keeps the outcome
//! it has when run alone.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::actions::action_params;
use super::instances::{
    apply_update, expect_matches, instance_from_row, instance_kinds, instance_select_list, instance_values,
    INSTANCE_COLUMNS,
};
use super::writes::apply;
use super::{CellConn, Kind, Result, Value};
use crate::cell::{CellOp, CellOutcome};
use crate::StoreError;

/// The kinds of op a run batches, in the order a run executes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Bulk {
    Insert,
    Action,
    Update,
    Finish,
    Start,
}

/// An op's kind and the row it touches, if a run may batch it.
fn bulk_kind(op: &CellOp) -> Option<(Bulk, Uuid, Option<&str>)> {
    match op {
        CellOp::InsertInstance(row) if row.spec.tags.is_empty() => Some((Bulk::Insert, row.uuid, None)),
        CellOp::StartAction(a) => Some((Bulk::Action, a.instance_uuid, Some(a.request_id.as_str()))),
        CellOp::UpdateInstance { uuid, update, .. } if update.tags.is_none() => Some((Bulk::Update, *uuid, None)),
        CellOp::FinishEvent { instance, request_id, .. } => Some((Bulk::Finish, *instance, Some(request_id.as_str()))),
        CellOp::StartEvent { instance, request_id, .. } => Some((Bulk::Start, *instance, Some(request_id.as_str()))),
        _ => None,
    }
}

/// Ops that touch no row a run touches (faults, service heartbeats): they
/// run where they stand without ending the run.
fn beside_runs(op: &CellOp) -> bool {
    matches!(op, CellOp::AddFault(_) | CellOp::Heartbeat { .. })
}

/// Run a batch's ops (PostgreSQL): one outcome per op, as [`super::write`].
pub(super) fn write(conn: &mut dyn CellConn, ops: &[CellOp]) -> Result<Vec<CellOutcome>> {
    let mut out: Vec<Option<CellOutcome>> = vec![None; ops.len()];
    let mut run = Run::default();
    for (idx, op) in ops.iter().enumerate() {
        if let Some((kind, instance, request)) = bulk_kind(op) {
            if !run.admits(kind, instance, request) {
                run.flush(conn, ops, &mut out)?;
            }
            run.add(idx, kind, instance, request);
        } else if beside_runs(op) {
            out[idx] = Some(apply(conn, op)?);
        } else {
            run.flush(conn, ops, &mut out)?;
            out[idx] = Some(apply(conn, op)?);
        }
    }
    run.flush(conn, ops, &mut out)?;
    out.into_iter()
        .map(|outcome| outcome.ok_or_else(|| StoreError::Internal("cell batch: an op was not run".into())))
        .collect()
}

/// The ops gathered so far: their indexes, the rows they touch and, per
/// instance, the latest kind.
#[derive(Default)]
struct Run<'a> {
    ops: Vec<(usize, Bulk)>,
    rows: HashSet<(Bulk, Uuid, Option<&'a str>)>,
    latest: HashMap<Uuid, Bulk>,
}

impl<'a> Run<'a> {
    fn admits(&self, kind: Bulk, instance: Uuid, request: Option<&'a str>) -> bool {
        !self.rows.contains(&(kind, instance, request))
            && self.latest.get(&instance).is_none_or(|latest| *latest <= kind)
    }

    fn add(&mut self, idx: usize, kind: Bulk, instance: Uuid, request: Option<&'a str>) {
        self.ops.push((idx, kind));
        self.rows.insert((kind, instance, request));
        self.latest.insert(instance, kind);
    }

    /// Run the gathered ops, kind by kind, and start afresh.
    fn flush(&mut self, conn: &mut dyn CellConn, ops: &[CellOp], out: &mut [Option<CellOutcome>]) -> Result<()> {
        let mut gathered = std::mem::take(&mut self.ops);
        self.rows.clear();
        self.latest.clear();
        // Stable: within a kind the ops keep their order.
        gathered.sort_by_key(|(_, kind)| *kind);
        for group in gathered.chunk_by(|a, b| a.1 == b.1) {
            let idxs: Vec<usize> = group.iter().map(|(idx, _)| *idx).collect();
            if let [idx] = idxs[..] {
                out[idx] = Some(apply(conn, &ops[idx])?);
                continue;
            }
            let outcomes = match group[0].1 {
                Bulk::Insert => insert_instances(conn, ops, &idxs)?,
                Bulk::Action => start_actions(conn, ops, &idxs)?,
                Bulk::Update => update_instances(conn, ops, &idxs)?,
                Bulk::Finish => finish_events(conn, ops, &idxs)?,
                Bulk::Start => start_events(conn, ops, &idxs)?,
            };
            for (idx, outcome) in idxs.into_iter().zip(outcomes) {
                out[idx] = Some(outcome);
            }
        }
        Ok(())
    }
}

/// Columns as PostgreSQL arrays: one text or bigint array per column.
struct Columns {
    kinds: Vec<Kind>,
    columns: Vec<Value>,
}

impl Columns {
    fn new(kinds: &[Kind]) -> Self {
        let columns = kinds
            .iter()
            .map(|kind| match kind {
                Kind::Int => Value::Ints(Vec::new()),
                Kind::Text => Value::Texts(Vec::new()),
            })
            .collect();
        Columns { kinds: kinds.to_vec(), columns }
    }

    fn push(&mut self, row: Vec<Value>) -> Result<()> {
        for (column, value) in self.columns.iter_mut().zip(row) {
            match (column, value) {
                (Value::Ints(values), Value::Int(v)) => values.push(v),
                (Value::Texts(values), Value::Text(v)) => values.push(v),
                _ => return Err(StoreError::Internal("cell batch: a value of the wrong kind".into())),
            }
        }
        Ok(())
    }

    /// `unnest($first::text[], $first+1::bigint[], …)`, one array per column.
    fn unnest(&self, first: usize) -> String {
        let arrays: Vec<String> = self
            .kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| match kind {
                Kind::Int => format!("${}::bigint[]", first + i),
                Kind::Text => format!("${}::text[]", first + i),
            })
            .collect();
        format!("unnest({})", arrays.join(", "))
    }
}

/// The columns an event start and an event finish share: op number,
/// instance, request id, event name and time.
fn event_row(n: usize, instance: &Uuid, request_id: &str, event: &str, at: i64) -> Vec<Value> {
    vec![
        Value::Int(Some(n as i64)),
        Value::Text(Some(instance.to_string())),
        Value::Text(Some(request_id.to_owned())),
        Value::Text(Some(event.to_owned())),
        Value::Int(Some(at)),
    ]
}

/// The op index of each returned row (its first column).
fn returned(rows: &[Vec<Value>]) -> Result<HashSet<i64>> {
    rows.iter()
        .map(|row| match row.first() {
            Some(Value::Int(Some(n))) => Ok(*n),
            _ => Err(StoreError::Internal("cell batch: no op number returned".into())),
        })
        .collect()
}

fn insert_instances(conn: &mut dyn CellConn, ops: &[CellOp], idxs: &[usize]) -> Result<Vec<CellOutcome>> {
    let mut columns = Columns::new(&instance_kinds());
    for &idx in idxs {
        let CellOp::InsertInstance(row) = &ops[idx] else { unreachable!("grouped by kind") };
        columns.push(instance_values(row))?;
    }
    let names: Vec<&str> = INSTANCE_COLUMNS.iter().map(|(c, _)| *c).collect();
    let sql = format!(
        "INSERT INTO instances ({}) SELECT * FROM {} ON CONFLICT (uuid) DO NOTHING RETURNING uuid",
        names.join(", "),
        columns.unnest(1)
    );
    let rows = conn.query(&sql, &columns.columns, &[Kind::Text])?;
    let inserted: HashSet<String> = rows
        .into_iter()
        .filter_map(|row| match row.into_iter().next() {
            Some(Value::Text(Some(uuid))) => Some(uuid),
            _ => None,
        })
        .collect();
    Ok(idxs
        .iter()
        .map(|&idx| {
            let CellOp::InsertInstance(row) = &ops[idx] else { unreachable!("grouped by kind") };
            if inserted.contains(&row.uuid.to_string()) {
                CellOutcome::Done
            } else {
                CellOutcome::Mismatch
            }
        })
        .collect())
}

/// Actions and their events; an action that exists already is left as it
/// is, events and all (as one at a time).
fn start_actions(conn: &mut dyn CellConn, ops: &[CellOp], idxs: &[usize]) -> Result<Vec<CellOutcome>> {
    use Kind::{Int, Text};
    let mut actions = Columns::new(&[Int, Text, Text, Text, Text, Text, Int, Text, Int]);
    let mut events = Columns::new(&[Int, Int, Text, Int, Int, Text, Text, Text, Text]);
    for (n, &idx) in idxs.iter().enumerate() {
        let CellOp::StartAction(a) = &ops[idx] else { unreachable!("grouped by kind") };
        let n = n as i64;
        let mut row = vec![Value::Int(Some(n))];
        row.extend(action_params(a));
        actions.push(row)?;
        for (k, e) in a.events.iter().enumerate() {
            events.push(vec![
                Value::Int(Some(n)),
                Value::Int(Some(k as i64)),
                Value::Text(Some(e.event.clone())),
                Value::Int(Some(e.start_time)),
                Value::Int(e.finish_time),
                Value::Text(e.result.clone()),
                Value::Text(e.traceback.clone()),
                Value::Text(e.host.clone()),
                Value::Text(e.details.clone()),
            ])?;
        }
    }
    let sql = format!(
        "WITH v AS (SELECT * FROM {} AS v(n, iu, action, rq, usr, proj, st, msg, upd)),
              a AS (INSERT INTO instance_actions
                        (instance_uuid, action, request_id, user_id, project_id, start_time, message, updated_at)
                    SELECT iu, action, rq, usr, proj, st, msg, upd FROM v ORDER BY n
                    ON CONFLICT (instance_uuid, request_id) DO NOTHING
                    RETURNING id, instance_uuid, request_id),
              e AS (SELECT * FROM {} AS e(n, k, event, st, ft, res, tb, host, details))
         INSERT INTO instance_action_events
             (action_id, event, start_time, finish_time, result, traceback, host, details)
         SELECT a.id, e.event, e.st, e.ft, e.res, e.tb, e.host, e.details
         FROM e JOIN v ON v.n = e.n JOIN a ON a.instance_uuid = v.iu AND a.request_id = v.rq
         ORDER BY e.n, e.k",
        actions.unnest(1),
        events.unnest(10)
    );
    let mut params = actions.columns;
    params.extend(events.columns);
    conn.execute(&sql, &params)?;
    Ok(vec![CellOutcome::Done; idxs.len()])
}

/// Conditional updates: the rows are read and locked in one statement
/// (in uuid order), checked here, and written back in one statement.
fn update_instances(conn: &mut dyn CellConn, ops: &[CellOp], idxs: &[usize]) -> Result<Vec<CellOutcome>> {
    let mut uuids: Vec<Option<String>> = idxs
        .iter()
        .map(|&idx| {
            let CellOp::UpdateInstance { uuid, .. } = &ops[idx] else { unreachable!("grouped by kind") };
            Some(uuid.to_string())
        })
        .collect();
    uuids.sort_unstable();
    let sql = format!(
        "SELECT {} FROM instances WHERE uuid = ANY($1::text[]) ORDER BY uuid FOR UPDATE",
        instance_select_list()
    );
    let mut rows = HashMap::new();
    for row in conn.query(&sql, &[Value::Texts(uuids)], &instance_kinds())? {
        let row = instance_from_row(&row)?;
        rows.insert(row.uuid, row);
    }
    let mut columns = Columns::new(&instance_kinds());
    let mut outcomes = Vec::with_capacity(idxs.len());
    for &idx in idxs {
        let CellOp::UpdateInstance { uuid, expect, update } = &ops[idx] else { unreachable!("grouped by kind") };
        let Some(mut row) = rows.remove(uuid) else {
            outcomes.push(CellOutcome::Missing);
            continue;
        };
        if !expect_matches(&row, expect) {
            outcomes.push(CellOutcome::Mismatch);
            continue;
        }
        apply_update(&mut row, update);
        columns.push(instance_values(&row))?;
        outcomes.push(CellOutcome::Done);
    }
    if outcomes.contains(&CellOutcome::Done) {
        let names: Vec<&str> = INSTANCE_COLUMNS.iter().map(|(c, _)| *c).collect();
        let sets: Vec<String> = names[1..].iter().map(|c| format!("{c} = v.{c}")).collect();
        let sql = format!(
            "UPDATE instances AS t SET {} FROM {} AS v({}) WHERE t.uuid = v.uuid",
            sets.join(", "),
            columns.unnest(1),
            names.join(", ")
        );
        conn.execute(&sql, &columns.columns)?;
    }
    Ok(outcomes)
}

/// Start events on existing actions (and touch the actions); `Missing`
/// where the action is not there.
fn start_events(conn: &mut dyn CellConn, ops: &[CellOp], idxs: &[usize]) -> Result<Vec<CellOutcome>> {
    use Kind::{Int, Text};
    let mut columns = Columns::new(&[Int, Text, Text, Text, Int, Text]);
    for (n, &idx) in idxs.iter().enumerate() {
        let CellOp::StartEvent { instance, request_id, event, host, at } = &ops[idx] else {
            unreachable!("grouped by kind")
        };
        let mut row = event_row(n, instance, request_id, event, *at);
        row.push(Value::Text(host.clone()));
        columns.push(row)?;
    }
    let sql = format!(
        "WITH v AS (SELECT * FROM {} AS v(n, iu, rq, event, at, host)),
              a AS (SELECT v.n, ia.id, v.event, v.at, v.host
                    FROM v JOIN instance_actions ia ON ia.instance_uuid = v.iu AND ia.request_id = v.rq),
              e AS (INSERT INTO instance_action_events (action_id, event, start_time, host)
                    SELECT id, event, at, host FROM a ORDER BY n),
              u AS (UPDATE instance_actions t SET updated_at = a.at FROM a WHERE t.id = a.id)
         SELECT n FROM a",
        columns.unnest(1)
    );
    let started = returned(&conn.query(&sql, &columns.columns, &[Kind::Int])?)?;
    Ok(outcomes(idxs.len(), &started))
}

/// Finish the latest event of each name (an unfinished one first) and
/// touch its action (`Error` marks the action); `Missing` where there is
/// no such action or event.
fn finish_events(conn: &mut dyn CellConn, ops: &[CellOp], idxs: &[usize]) -> Result<Vec<CellOutcome>> {
    use Kind::{Int, Text};
    let mut columns = Columns::new(&[Int, Text, Text, Text, Int, Text, Text]);
    for (n, &idx) in idxs.iter().enumerate() {
        let CellOp::FinishEvent { instance, request_id, event, result, traceback, at } = &ops[idx] else {
            unreachable!("grouped by kind")
        };
        let mut row = event_row(n, instance, request_id, event, *at);
        row.extend([Value::Text(Some(result.clone())), Value::Text(traceback.clone())]);
        columns.push(row)?;
    }
    let sql = format!(
        "WITH v AS (SELECT * FROM {} AS v(n, iu, rq, event, at, res, tb)),
              e AS (SELECT DISTINCT ON (v.n) v.n, ev.id, ev.action_id, v.at, v.res, v.tb
                    FROM v JOIN instance_actions ia ON ia.instance_uuid = v.iu AND ia.request_id = v.rq
                           JOIN instance_action_events ev ON ev.action_id = ia.id AND ev.event = v.event
                    ORDER BY v.n, CASE WHEN ev.finish_time IS NULL THEN 0 ELSE 1 END, ev.id DESC),
              ue AS (UPDATE instance_action_events t SET finish_time = e.at, result = e.res, traceback = e.tb
                     FROM e WHERE t.id = e.id),
              ua AS (UPDATE instance_actions t
                     SET message = CASE WHEN e.res = 'Error' THEN 'Error' ELSE t.message END, updated_at = e.at
                     FROM e WHERE t.id = e.action_id RETURNING e.n)
         SELECT n FROM ua",
        columns.unnest(1)
    );
    let finished = returned(&conn.query(&sql, &columns.columns, &[Kind::Int])?)?;
    Ok(outcomes(idxs.len(), &finished))
}

/// `Done` for the op numbers in `done`, `Missing` for the others.
fn outcomes(count: usize, done: &HashSet<i64>) -> Vec<CellOutcome> {
    (0..count).map(|n| if done.contains(&(n as i64)) { CellOutcome::Done } else { CellOutcome::Missing }).collect()
}
