//! Portable SQL for the cell databases, shared by the SQLite and PostgreSQL
//! cell stores.
//!
//! This module builds SQL *text* and parameter lists; it never talks to a
//! database. The backends bind the parameters ([`Value`]: 64-bit integers
//! and text, either possibly NULL) and run the statements through the small
//! [`CellConn`] interface, which is all the shared logic ([`write`],
//! [`list_instances`], the reads) needs. Placeholders are written in the
//! backend's style ([`Dialect`]: `?N` for SQLite, `$N` for PostgreSQL);
//! everything else is SQL both databases accept (`ON CONFLICT … DO
//! UPDATE`, `RETURNING`, `EXISTS`, `COALESCE`).
//!
//! Both backends therefore filter, sort and page instances identically:
//! the listing SQL is built by [`list_sql`] in one place. Its sort order is
//! exactly [`compare_instances`]: every sort key compares the value
//! [`Instance::sort_value`] gives, i.e. a missing (NULL) text is `''` and a
//! missing integer is `i64::MIN` — `COALESCE(col, '')` and
//! `COALESCE(col, -9223372036854775808)` in both the `ORDER BY` and the
//! marker condition (NOT NULL columns are compared bare, which is the same
//! and lets the planner use their indexes) — then `uuid` in the direction of
//! the last key. Text compares bytewise (SQLite's BINARY collation; the
//! PostgreSQL schema declares its text columns `COLLATE "C"`), as Rust's
//! `String` does.
//!
//! [`compare_instances`]: berth_compute_model::cell::compare_instances

use std::borrow::Cow;
use std::collections::BTreeMap;

use berth_compute_model::cell::{
    ActionEvent, ComputeNode, Fault, Instance, InstanceAction, InstanceQuery, Marker, Migration, MigrationFilter,
    Service, SortValue, SORT_KEYS,
};
use berth_compute_model::InstanceSpec;
use uuid::Uuid;

use crate::cell::{CellOp, CellOutcome, Expect, InstanceUpdate, MigrationUpdate};
use crate::StoreError;

mod bulk;

type Result<T> = std::result::Result<T, StoreError>;

/// The placeholder style (and the few other differences) of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: `?1`, `?2`, …
    Sqlite,
    /// PostgreSQL: `$1`, `$2`, …
    Postgres,
}

impl Dialect {
    /// The placeholder of parameter `n` (1-based).
    pub fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// Rewrite a statement written with `?N` placeholders into this
    /// dialect (the fixed statements of this module are written that way).
    pub fn sql(self, text: &str) -> Cow<'_, str> {
        match self {
            Dialect::Sqlite => Cow::Borrowed(text),
            Dialect::Postgres => Cow::Owned(text.replace('?', "$")),
        }
    }

    /// Row lock for a read-modify-write inside a write transaction
    /// (SQLite's write transactions are exclusive already).
    fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        }
    }
}

/// A parameter or result value: a 64-bit integer or a text, either of
/// which may be NULL (booleans are stored as 0/1 integers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Integer (timestamps, counters, booleans).
    Int(Option<i64>),
    /// Text (uuids are lowercase hyphenated text).
    Text(Option<String>),
    /// PostgreSQL only: an array of integers (`bigint[]`), for statements
    /// that take a column of many rows at once.
    Ints(Vec<Option<i64>>),
    /// PostgreSQL only: an array of texts (`text[]`).
    Texts(Vec<Option<String>>),
}

/// The type of a result column, so a backend knows how to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Read as a nullable 64-bit integer.
    Int,
    /// Read as a nullable text.
    Text,
}

/// A statement in a backend's placeholder style with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Sql {
    /// SQL text.
    pub text: String,
    /// Parameters, in placeholder order (`?1`/`$1` first).
    pub params: Vec<Value>,
}

/// What the shared cell logic needs from a backend's connection or
/// transaction. Errors are already mapped to [`StoreError`].
pub trait CellConn {
    /// The backend's dialect.
    fn dialect(&self) -> Dialect;

    /// Run a statement; returns the number of rows changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64>;

    /// Run a query whose result columns have the given kinds.
    fn query(&mut self, sql: &str, params: &[Value], kinds: &[Kind]) -> Result<Vec<Vec<Value>>>;
}

fn int(v: i64) -> Value {
    Value::Int(Some(v))
}

fn opt_int(v: Option<i64>) -> Value {
    Value::Int(v)
}

fn text(v: &str) -> Value {
    Value::Text(Some(v.to_owned()))
}

fn opt_text(v: Option<&str>) -> Value {
    Value::Text(v.map(str::to_owned))
}

fn boolean(v: bool) -> Value {
    int(v as i64)
}

fn bad(what: &str) -> StoreError {
    StoreError::Internal(format!("unexpected value in cell database column {what}"))
}

/// Reads the columns of one result row in order.
struct Cols<'a> {
    values: std::slice::Iter<'a, Value>,
    what: &'static str,
}

impl<'a> Cols<'a> {
    fn new(row: &'a [Value], what: &'static str) -> Self {
        Cols { values: row.iter(), what }
    }

    fn opt_int(&mut self) -> Result<Option<i64>> {
        match self.values.next() {
            Some(Value::Int(v)) => Ok(*v),
            _ => Err(bad(self.what)),
        }
    }

    fn int(&mut self) -> Result<i64> {
        self.opt_int()?.ok_or_else(|| bad(self.what))
    }

    fn boolean(&mut self) -> Result<bool> {
        Ok(self.int()? != 0)
    }

    fn opt_text(&mut self) -> Result<Option<String>> {
        match self.values.next() {
            Some(Value::Text(v)) => Ok(v.clone()),
            _ => Err(bad(self.what)),
        }
    }

    fn text(&mut self) -> Result<String> {
        self.opt_text()?.ok_or_else(|| bad(self.what))
    }

    fn uuid(&mut self) -> Result<Uuid> {
        let t = self.text()?;
        Uuid::parse_str(&t).map_err(|e| StoreError::Internal(format!("bad uuid {t:?} in cell database: {e}")))
    }
}

// ---------------------------------------------------------------------------
// Instance rows.

/// The columns of `instances`, in the order [`instance_values`] encodes
/// and every instance query selects them.
pub const INSTANCE_COLUMNS: &[(&str, Kind)] = &[
    ("uuid", Kind::Text),
    ("project_id", Kind::Text),
    ("user_id", Kind::Text),
    ("host", Kind::Text),
    ("node", Kind::Text),
    ("availability_zone", Kind::Text),
    ("vm_state", Kind::Text),
    ("task_state", Kind::Text),
    ("power_state", Kind::Int),
    ("locked", Kind::Int),
    ("locked_by", Kind::Text),
    ("locked_reason", Kind::Text),
    ("progress", Kind::Int),
    ("display_name", Kind::Text),
    ("display_description", Kind::Text),
    ("hostname", Kind::Text),
    ("image_ref", Kind::Text),
    ("key_name", Kind::Text),
    ("reservation_id", Kind::Text),
    ("launch_index", Kind::Int),
    ("config_drive", Kind::Text),
    ("access_ip_v4", Kind::Text),
    ("access_ip_v6", Kind::Text),
    ("instance_type_id", Kind::Int),
    ("created_at", Kind::Int),
    ("updated_at", Kind::Int),
    ("launched_at", Kind::Int),
    ("terminated_at", Kind::Int),
    ("deleted", Kind::Int),
    ("deleted_at", Kind::Int),
    ("spec", Kind::Text),
];

fn instance_kinds() -> Vec<Kind> {
    INSTANCE_COLUMNS.iter().map(|(_, k)| *k).collect()
}

fn instance_select_list() -> String {
    INSTANCE_COLUMNS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
}

/// [`instance_select_list`] with an empty `spec`, for brief listings.
fn brief_select_list() -> String {
    INSTANCE_COLUMNS.iter().map(|(c, _)| if *c == "spec" { "'' AS spec" } else { c }).collect::<Vec<_>>().join(", ")
}

/// An instance as the values of [`INSTANCE_COLUMNS`]. The columns that
/// duplicate spec fields are taken from the spec, so they always agree.
pub fn instance_values(i: &Instance) -> Vec<Value> {
    let s = &i.spec;
    vec![
        text(&i.uuid.to_string()),
        text(&i.project_id),
        text(&i.user_id),
        opt_text(i.host.as_deref()),
        opt_text(i.node.as_deref()),
        opt_text(i.availability_zone.as_deref()),
        text(&i.vm_state),
        opt_text(i.task_state.as_deref()),
        int(i.power_state),
        boolean(i.locked),
        opt_text(i.locked_by.as_deref()),
        opt_text(i.locked_reason.as_deref()),
        int(i.progress),
        text(&s.display_name),
        opt_text(s.display_description.as_deref()),
        text(&s.hostname),
        Value::Text(s.image_ref.map(|u| u.to_string())),
        opt_text(s.key_name.as_deref()),
        text(&s.reservation_id),
        int(s.launch_index),
        text(&s.config_drive),
        opt_text(s.access_ip_v4.as_deref()),
        opt_text(s.access_ip_v6.as_deref()),
        int(s.flavor.id),
        int(i.created_at),
        opt_int(i.updated_at),
        opt_int(i.launched_at),
        opt_int(i.terminated_at),
        boolean(i.deleted),
        opt_int(i.deleted_at),
        text(&crate::json::instance_spec(s).to_string()),
    ]
}

/// Decode a row of [`INSTANCE_COLUMNS`]. Spec fields come from the spec
/// JSON (the columns duplicating them are for filtering and sorting).
pub fn instance_from_row(row: &[Value]) -> Result<Instance> {
    decode_instance(row, false)
}

/// Decode a row of [`INSTANCE_COLUMNS`]; with `brief` the spec is built
/// from the columns that duplicate it and its JSON is not parsed
/// ([`InstanceQuery::brief`]).
fn decode_instance(row: &[Value], brief: bool) -> Result<Instance> {
    let mut c = Cols::new(row, "instances");
    let uuid = c.uuid()?;
    let project_id = c.text()?;
    let user_id = c.text()?;
    let host = c.opt_text()?;
    let node = c.opt_text()?;
    let availability_zone = c.opt_text()?;
    let vm_state = c.text()?;
    let task_state = c.opt_text()?;
    let power_state = c.int()?;
    let locked = c.boolean()?;
    let locked_by = c.opt_text()?;
    let locked_reason = c.opt_text()?;
    let progress = c.int()?;
    // display_name … instance_type_id duplicate the spec.
    let columns = if brief {
        Some(InstanceSpec {
            display_name: c.text()?,
            display_description: c.opt_text()?,
            hostname: c.text()?,
            image_ref: c.opt_text()?.and_then(|i| Uuid::parse_str(&i).ok()),
            key_name: c.opt_text()?,
            reservation_id: c.text()?,
            launch_index: c.int()?,
            config_drive: c.text()?,
            access_ip_v4: c.opt_text()?,
            access_ip_v6: c.opt_text()?,
            flavor: berth_compute_model::Flavor { id: c.int()?, ..Default::default() },
            ..InstanceSpec::default()
        })
    } else {
        for _ in 0..11 {
            c.values.next();
        }
        None
    };
    let created_at = c.int()?;
    let updated_at = c.opt_int()?;
    let launched_at = c.opt_int()?;
    let terminated_at = c.opt_int()?;
    let deleted = c.boolean()?;
    let deleted_at = c.opt_int()?;
    let spec = match columns {
        Some(spec) => spec,
        None => {
            let spec_text = c.text()?;
            let spec_json: serde_json::Value = serde_json::from_str(&spec_text)
                .map_err(|e| StoreError::Internal(format!("bad instance spec JSON of {uuid}: {e}")))?;
            crate::json::to_instance_spec(&spec_json)?
        }
    };
    Ok(Instance {
        uuid,
        project_id,
        user_id,
        host,
        node,
        availability_zone,
        vm_state,
        task_state,
        power_state,
        locked,
        locked_by,
        locked_reason,
        progress,
        spec,
        created_at,
        updated_at,
        launched_at,
        terminated_at,
        deleted,
        deleted_at,
    })
}

/// Apply an [`InstanceUpdate`] to a row (spec fields included, so the
/// duplicated columns stay consistent when the row is written back).
pub fn apply_update(row: &mut Instance, update: &InstanceUpdate) {
    let u = update.clone();
    if let Some(v) = u.vm_state {
        row.vm_state = v;
    }
    if let Some(v) = u.task_state {
        row.task_state = v;
    }
    if let Some(v) = u.power_state {
        row.power_state = v;
    }
    if let Some(v) = u.host {
        row.host = v;
    }
    if let Some(v) = u.node {
        row.node = v;
    }
    if let Some(v) = u.availability_zone {
        row.availability_zone = v;
    }
    if let Some(v) = u.launched_at {
        row.launched_at = v;
    }
    if let Some(v) = u.terminated_at {
        row.terminated_at = v;
    }
    if let Some((locked, by, reason)) = u.lock {
        row.locked = locked;
        row.locked_by = by;
        row.locked_reason = reason;
    }
    if let Some(v) = u.progress {
        row.progress = v;
    }
    if let Some(v) = u.display_name {
        row.spec.display_name = v;
    }
    if let Some(v) = u.display_description {
        row.spec.display_description = v;
    }
    if let Some(v) = u.metadata {
        row.spec.metadata = v;
    }
    if let Some(v) = u.tags {
        row.spec.tags = v;
    }
    if let Some(at) = u.deleted_at {
        row.deleted = true;
        row.deleted_at = Some(at);
    }
    if let Some(flavor) = u.flavor {
        row.spec.flavor = flavor;
    }
    row.updated_at = Some(u.updated_at);
}

/// Does a row satisfy an [`Expect`]?
pub fn expect_matches(row: &Instance, expect: &Expect) -> bool {
    (expect.vm_states.is_empty() || expect.vm_states.contains(&row.vm_state))
        && (expect.task_states.is_empty() || expect.task_states.contains(&row.task_state))
        && !(expect.not_deleted && row.deleted)
        && expect.host.as_ref().is_none_or(|host| *host == row.host)
}

// ---------------------------------------------------------------------------
// Listing.

/// How one sort key is stored: its column kind and whether it may be NULL.
struct SortColumn {
    key: &'static str,
    kind: Kind,
    nullable: bool,
}

const fn sc(key: &'static str, kind: Kind, nullable: bool) -> SortColumn {
    SortColumn { key, kind, nullable }
}

/// Every key of [`SORT_KEYS`], nullable exactly where
/// [`Instance::sort_value`] substitutes a missing value.
const SORT_COLUMNS: &[SortColumn] = &[
    sc("created_at", Kind::Int, false),
    sc("updated_at", Kind::Int, true),
    sc("display_name", Kind::Text, false),
    sc("display_description", Kind::Text, true),
    sc("uuid", Kind::Text, false),
    sc("host", Kind::Text, true),
    sc("node", Kind::Text, true),
    sc("hostname", Kind::Text, false),
    sc("vm_state", Kind::Text, false),
    sc("task_state", Kind::Text, true),
    sc("power_state", Kind::Int, false),
    sc("launched_at", Kind::Int, true),
    sc("terminated_at", Kind::Int, true),
    sc("availability_zone", Kind::Text, true),
    sc("key_name", Kind::Text, true),
    sc("project_id", Kind::Text, false),
    sc("user_id", Kind::Text, false),
    sc("image_ref", Kind::Text, true),
    sc("instance_type_id", Kind::Int, false),
    sc("launch_index", Kind::Int, false),
    sc("locked", Kind::Int, false),
    sc("progress", Kind::Int, false),
    sc("config_drive", Kind::Text, false),
    sc("access_ip_v4", Kind::Text, true),
    sc("access_ip_v6", Kind::Text, true),
    sc("reservation_id", Kind::Text, false),
];

/// The smallest 64-bit integer as an SQL literal (both databases type it
/// as a 64-bit integer).
const MIN_INT: &str = "-9223372036854775808";

fn sort_column(key: &str) -> Result<&'static SortColumn> {
    debug_assert_eq!(SORT_COLUMNS.len(), SORT_KEYS.len());
    SORT_COLUMNS
        .iter()
        .find(|c| c.key == key)
        .ok_or_else(|| StoreError::Internal(format!("unknown instance sort key {key:?}")))
}

/// The expression a sort key compares: the column, or the column with a
/// missing value replaced by the smallest value of its type.
fn sort_expr(column: &SortColumn) -> String {
    match (column.nullable, column.kind) {
        (false, _) => column.key.to_owned(),
        (true, Kind::Text) => format!("COALESCE({}, '')", column.key),
        (true, Kind::Int) => format!("COALESCE({}, {MIN_INT})", column.key),
    }
}

/// Columns an `exact` filter may compare, with their kinds.
const EXACT_COLUMNS: &[(&str, Kind)] = &[
    ("key_name", Kind::Text),
    ("hostname", Kind::Text),
    ("config_drive", Kind::Text),
    ("access_ip_v4", Kind::Text),
    ("access_ip_v6", Kind::Text),
    ("user_id", Kind::Text),
    ("project_id", Kind::Text),
    ("display_name", Kind::Text),
    ("display_description", Kind::Text),
    ("locked_by", Kind::Text),
    ("host", Kind::Text),
    ("node", Kind::Text),
    ("availability_zone", Kind::Text),
    ("vm_state", Kind::Text),
    ("task_state", Kind::Text),
    ("image_ref", Kind::Text),
    ("reservation_id", Kind::Text),
    ("uuid", Kind::Text),
    ("power_state", Kind::Int),
    ("progress", Kind::Int),
    ("launch_index", Kind::Int),
    ("instance_type_id", Kind::Int),
];

/// Collects parameters and hands out their placeholders.
struct Builder {
    dialect: Dialect,
    params: Vec<Value>,
}

impl Builder {
    fn bind(&mut self, value: Value) -> String {
        self.params.push(value);
        self.dialect.placeholder(self.params.len())
    }

    fn bind_list(&mut self, values: impl IntoIterator<Item = Value>) -> String {
        values.into_iter().map(|v| self.bind(v)).collect::<Vec<_>>().join(", ")
    }
}

fn tag_exists(b: &mut Builder, tags: &[String]) -> String {
    let list = b.bind_list(tags.iter().map(|t| text(t)));
    format!("EXISTS (SELECT 1 FROM instance_tags t WHERE t.uuid = instances.uuid AND t.tag IN ({list}))")
}

fn all_tags(b: &mut Builder, tags: &[String]) -> String {
    let each: Vec<String> = tags.iter().map(|t| tag_exists(b, std::slice::from_ref(t))).collect();
    format!("({})", each.join(" AND "))
}

/// The SQL of one listing page: `query`'s filters and sort, rows strictly
/// after `marker` (instead of the query's own), at most `limit` rows. The
/// name regex is not part of the SQL (see [`list_instances`]).
pub fn list_sql(dialect: Dialect, query: &InstanceQuery, marker: Option<&Marker>, limit: i64) -> Result<Sql> {
    let mut b = Builder { dialect, params: Vec::new() };
    let mut conds: Vec<String> = Vec::new();
    let f = &query.filter;
    match f.deleted {
        Some(true) => conds.push("deleted = 1".into()),
        _ if f.changes_since.is_none() => conds.push("deleted = 0".into()),
        _ => {}
    }
    for (column, value) in [
        ("project_id", &f.project_id),
        ("user_id", &f.user_id),
        ("host", &f.host),
        ("node", &f.node),
        ("availability_zone", &f.availability_zone),
        ("image_ref", &f.image_ref),
        ("reservation_id", &f.reservation_id),
    ] {
        if let Some(v) = value {
            let p = b.bind(text(v));
            conds.push(format!("{column} = {p}"));
        }
    }
    if let Some(id) = f.flavor_id {
        let p = b.bind(int(id));
        conds.push(format!("instance_type_id = {p}"));
    }
    if let Some(states) = &f.vm_states {
        if states.is_empty() {
            conds.push("1 = 0".into());
        } else {
            let list = b.bind_list(states.iter().map(|s| text(s)));
            conds.push(format!("vm_state IN ({list})"));
        }
    }
    if let Some(states) = &f.task_states {
        if states.is_empty() {
            conds.push("task_state IS NULL".into());
        } else {
            let list = b.bind_list(states.iter().map(|s| text(s)));
            conds.push(format!("task_state IN ({list})"));
        }
    }
    if let Some(t) = f.changes_since {
        let p = b.bind(int(t));
        conds.push(format!("updated_at >= {p}"));
    }
    if let Some(t) = f.changes_before {
        let p = b.bind(int(t));
        conds.push(format!("updated_at <= {p}"));
    }
    if let Some(uuids) = &f.uuids {
        if uuids.is_empty() {
            conds.push("1 = 0".into());
        } else {
            let list = b.bind_list(uuids.iter().map(|u| text(&u.to_string())));
            conds.push(format!("uuid IN ({list})"));
        }
    }
    if let Some(locked) = f.locked {
        let p = b.bind(boolean(locked));
        conds.push(format!("locked = {p}"));
    }
    if !f.tags.is_empty() {
        let all = all_tags(&mut b, &f.tags);
        conds.push(all);
    }
    if !f.tags_any.is_empty() {
        let any = tag_exists(&mut b, &f.tags_any);
        conds.push(any);
    }
    if !f.not_tags.is_empty() {
        let all = all_tags(&mut b, &f.not_tags);
        conds.push(format!("NOT {all}"));
    }
    if !f.not_tags_any.is_empty() {
        let any = tag_exists(&mut b, &f.not_tags_any);
        conds.push(format!("NOT {any}"));
    }
    for (column, value) in &f.exact {
        let Some((column, kind)) = EXACT_COLUMNS.iter().find(|(c, _)| c == column) else {
            return Err(StoreError::Internal(format!("instance filter on unknown column {column:?}")));
        };
        match kind {
            Kind::Text => {
                let p = b.bind(text(value));
                conds.push(format!("{column} = {p}"));
            }
            Kind::Int => match value.parse::<i64>() {
                Ok(v) => {
                    let p = b.bind(int(v));
                    conds.push(format!("{column} = {p}"));
                }
                Err(_) => conds.push("1 = 0".into()),
            },
        }
    }

    let columns: Vec<&SortColumn> = query.sort.iter().map(|k| sort_column(&k.key)).collect::<Result<_>>()?;
    let uuid_ascending = query.sort.last().is_none_or(|k| k.ascending);
    if let Some(marker) = marker {
        if marker.values.len() != query.sort.len() {
            return Err(StoreError::Internal(format!(
                "listing marker has {} values for {} sort keys",
                marker.values.len(),
                query.sort.len()
            )));
        }
        // (k1 > v1) OR (k1 = v1 AND k2 > v2) OR … OR (k1 = v1 AND … AND uuid > u),
        // with `<` for descending keys; each value bound once.
        let mut terms: Vec<(String, bool, String)> = Vec::new();
        for ((key, column), value) in query.sort.iter().zip(&columns).zip(&marker.values) {
            let value = match (column.kind, value) {
                (Kind::Int, SortValue::Int(v)) => int(*v),
                (Kind::Text, SortValue::Text(v)) => text(v),
                _ => {
                    return Err(StoreError::Internal(format!(
                        "listing marker value {value:?} does not fit sort key {:?}",
                        key.key
                    )))
                }
            };
            terms.push((sort_expr(column), key.ascending, b.bind(value)));
        }
        terms.push(("uuid".to_owned(), uuid_ascending, b.bind(text(&marker.uuid.to_string()))));
        let mut ors = Vec::new();
        for (i, (expr, ascending, p)) in terms.iter().enumerate() {
            let mut ands: Vec<String> = terms[..i].iter().map(|(e, _, q)| format!("{e} = {q}")).collect();
            ands.push(format!("{expr} {} {p}", if *ascending { ">" } else { "<" }));
            ors.push(format!("({})", ands.join(" AND ")));
        }
        // The first term bounds every row after the marker; stated on its
        // own it is a range the planner can seek an index to.
        let (expr, ascending, p) = &terms[0];
        if terms.len() > 1 {
            conds.push(format!("{expr} {} {p}", if *ascending { ">=" } else { "<=" }));
        }
        conds.push(format!("({})", ors.join(" OR ")));
    }

    let mut order: Vec<String> = query
        .sort
        .iter()
        .zip(&columns)
        .map(|(k, c)| format!("{} {}", sort_expr(c), if k.ascending { "ASC" } else { "DESC" }))
        .collect();
    order.push(format!("uuid {}", if uuid_ascending { "ASC" } else { "DESC" }));

    // A brief listing builds each spec from the columns that duplicate it
    // (`decode_instance`): the spec JSON, the row's largest value, is
    // neither read nor copied.
    let select = if query.brief { brief_select_list() } else { instance_select_list() };
    let mut text_sql = format!("SELECT {select} FROM instances");
    if !conds.is_empty() {
        text_sql.push_str(" WHERE ");
        text_sql.push_str(&conds.join(" AND "));
    }
    text_sql.push_str(" ORDER BY ");
    text_sql.push_str(&order.join(", "));
    let p = b.bind(int(limit));
    text_sql.push_str(&format!(" LIMIT {p}"));
    Ok(Sql { text: text_sql, params: b.params })
}

/// How many rows a name-regex listing fetches per query.
const REGEX_CHUNK: usize = 500;

/// Run a listing: the SQL of [`list_sql`]; with a name regex (Python
/// `re.search` semantics, unanchored, applied here with the `regex` crate)
/// rows are fetched in chunks in sort order, advancing an internal marker,
/// until `limit` rows match or the rows run out. An invalid regex matches
/// nothing.
pub fn list_instances(conn: &mut dyn CellConn, query: &InstanceQuery) -> Result<Vec<Instance>> {
    if query.limit == 0 {
        return Ok(Vec::new());
    }
    let dialect = conn.dialect();
    let kinds = instance_kinds();
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let Some(pattern) = &query.filter.name_regex else {
        let sql = list_sql(dialect, query, query.marker.as_ref(), limit)?;
        let rows = conn.query(&sql.text, &sql.params, &kinds)?;
        return rows.iter().map(|r| decode_instance(r, query.brief)).collect();
    };
    let Ok(regex) = regex::Regex::new(pattern) else { return Ok(Vec::new()) };
    let chunk = query.limit.clamp(50, REGEX_CHUNK);
    let mut marker = query.marker.clone();
    let mut out = Vec::new();
    loop {
        let sql = list_sql(dialect, query, marker.as_ref(), chunk as i64)?;
        let rows = conn.query(&sql.text, &sql.params, &kinds)?;
        let fetched = rows.len();
        let mut last = None;
        for row in &rows {
            let instance = decode_instance(row, query.brief)?;
            if regex.is_match(&instance.spec.display_name) {
                out.push(instance.clone());
                if out.len() == query.limit {
                    return Ok(out);
                }
            }
            last = Some(instance);
        }
        match last {
            Some(last) if fetched == chunk => {
                marker = Some(Marker {
                    values: query.sort.iter().map(|k| last.sort_value(&k.key)).collect(),
                    uuid: last.uuid,
                });
            }
            _ => return Ok(out),
        }
    }
}

// ---------------------------------------------------------------------------
// Writes.

fn upsert_instance_sql(dialect: Dialect, on_conflict_update: bool) -> String {
    let names: Vec<&str> = INSTANCE_COLUMNS.iter().map(|(c, _)| *c).collect();
    let placeholders: Vec<String> = (1..=names.len()).map(|n| dialect.placeholder(n)).collect();
    let action = if on_conflict_update {
        let sets: Vec<String> = names[1..].iter().map(|c| format!("{c} = excluded.{c}")).collect();
        format!("DO UPDATE SET {}", sets.join(", "))
    } else {
        "DO NOTHING".to_owned()
    };
    format!(
        "INSERT INTO instances ({}) VALUES ({}) ON CONFLICT (uuid) {action}",
        names.join(", "),
        placeholders.join(", ")
    )
}

fn update_instance_sql(dialect: Dialect) -> String {
    let sets: Vec<String> = INSTANCE_COLUMNS
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, (c, _))| format!("{c} = {}", dialect.placeholder(i + 1)))
        .collect();
    format!("UPDATE instances SET {} WHERE uuid = {}", sets.join(", "), dialect.placeholder(1))
}

fn set_tags(conn: &mut dyn CellConn, uuid: &Uuid, tags: &[String]) -> Result<()> {
    let d = conn.dialect();
    let key = text(&uuid.to_string());
    conn.execute(&d.sql("DELETE FROM instance_tags WHERE uuid = ?1"), std::slice::from_ref(&key))?;
    insert_tags(conn, uuid, tags)
}

/// Add `tags` to an instance (duplicates ignored).
fn insert_tags(conn: &mut dyn CellConn, uuid: &Uuid, tags: &[String]) -> Result<()> {
    let d = conn.dialect();
    let key = text(&uuid.to_string());
    let insert = d.sql("INSERT INTO instance_tags (uuid, tag) VALUES (?1, ?2) ON CONFLICT (uuid, tag) DO NOTHING");
    for tag in tags {
        conn.execute(&insert, &[key.clone(), text(tag)])?;
    }
    Ok(())
}

/// One instance by uuid, optionally locked for update.
fn select_instance(conn: &mut dyn CellConn, uuid: &Uuid, lock: bool) -> Result<Option<Instance>> {
    let d = conn.dialect();
    let sql = format!(
        "SELECT {} FROM instances WHERE uuid = {}{}",
        instance_select_list(),
        d.placeholder(1),
        if lock { d.for_update() } else { "" }
    );
    let rows = conn.query(&sql, &[text(&uuid.to_string())], &instance_kinds())?;
    rows.first().map(|r| instance_from_row(r)).transpose()
}

fn action_id(conn: &mut dyn CellConn, instance: &Uuid, request_id: &str) -> Result<Option<i64>> {
    let d = conn.dialect();
    let rows = conn.query(
        &d.sql("SELECT id FROM instance_actions WHERE instance_uuid = ?1 AND request_id = ?2"),
        &[text(&instance.to_string()), text(request_id)],
        &[Kind::Int],
    )?;
    rows.first().map(|r| Cols::new(r, "instance_actions").int()).transpose()
}

fn insert_event(conn: &mut dyn CellConn, action: i64, e: &ActionEvent) -> Result<()> {
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
fn action_params(a: &InstanceAction) -> Vec<Value> {
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
fn start_action_pg(conn: &mut dyn CellConn, a: &InstanceAction) -> Result<()> {
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

fn apply(conn: &mut dyn CellConn, op: &CellOp) -> Result<CellOutcome> {
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

// ---------------------------------------------------------------------------
// Migrations.

const MIGRATION_COLUMNS: &str = "id, uuid, instance_uuid, migration_type, status, source_compute, source_node, \
     dest_compute, dest_node, dest_host, old_flavor, new_flavor, user_id, project_id, created_at, updated_at";

const MIGRATION_KINDS: [Kind; 16] = [
    Kind::Int,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Int,
    Kind::Int,
];

fn flavor_json(flavor: &berth_compute_model::Flavor) -> Value {
    text(&crate::json::flavor(flavor).to_string())
}

fn flavor_from(text: &str, uuid: &Uuid) -> Result<berth_compute_model::Flavor> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| StoreError::Internal(format!("bad flavor JSON of migration {uuid}: {e}")))?;
    crate::json::to_flavor(&value)
}

fn migration_from_row(row: &[Value]) -> Result<Migration> {
    let mut c = Cols::new(row, "migrations");
    let id = c.int()?;
    let uuid = c.uuid()?;
    let instance_uuid = c.uuid()?;
    let migration_type = c.text()?;
    let status = c.text()?;
    let source_compute = c.opt_text()?;
    let source_node = c.opt_text()?;
    let dest_compute = c.opt_text()?;
    let dest_node = c.opt_text()?;
    let dest_host = c.opt_text()?;
    let old_flavor = flavor_from(&c.text()?, &uuid)?;
    let new_flavor = flavor_from(&c.text()?, &uuid)?;
    Ok(Migration {
        id,
        uuid,
        instance_uuid,
        migration_type,
        status,
        source_compute,
        source_node,
        dest_compute,
        dest_node,
        dest_host,
        old_flavor,
        new_flavor,
        user_id: c.text()?,
        project_id: c.text()?,
        created_at: c.int()?,
        updated_at: c.opt_int()?,
    })
}

fn select_migration(conn: &mut dyn CellConn, uuid: &Uuid, lock: bool) -> Result<Option<Migration>> {
    let d = conn.dialect();
    let sql = format!(
        "SELECT {MIGRATION_COLUMNS} FROM migrations WHERE uuid = {} AND deleted = 0{}",
        d.placeholder(1),
        if lock { d.for_update() } else { "" }
    );
    let rows = conn.query(&sql, &[text(&uuid.to_string())], &MIGRATION_KINDS)?;
    rows.first().map(|r| migration_from_row(r)).transpose()
}

fn insert_migration(conn: &mut dyn CellConn, m: &Migration) -> Result<()> {
    let d = conn.dialect();
    conn.execute(
        &d.sql(
            "INSERT INTO migrations (uuid, instance_uuid, migration_type, status, source_compute, source_node,
                                     dest_compute, dest_node, dest_host, old_flavor, new_flavor, user_id,
                                     project_id, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        ),
        &[
            text(&m.uuid.to_string()),
            text(&m.instance_uuid.to_string()),
            text(&m.migration_type),
            text(&m.status),
            opt_text(m.source_compute.as_deref()),
            opt_text(m.source_node.as_deref()),
            opt_text(m.dest_compute.as_deref()),
            opt_text(m.dest_node.as_deref()),
            opt_text(m.dest_host.as_deref()),
            flavor_json(&m.old_flavor),
            flavor_json(&m.new_flavor),
            text(&m.user_id),
            text(&m.project_id),
            int(m.created_at),
            opt_int(m.updated_at),
        ],
    )?;
    Ok(())
}

fn update_migration(conn: &mut dyn CellConn, uuid: &Uuid, m: &mut Migration, u: &MigrationUpdate) -> Result<()> {
    let d = conn.dialect();
    if u.delete {
        conn.execute(&d.sql("DELETE FROM migrations WHERE uuid = ?1"), &[text(&uuid.to_string())])?;
        return Ok(());
    }
    if let Some(v) = &u.status {
        m.status = v.clone();
    }
    if let Some(v) = &u.dest_compute {
        m.dest_compute = v.clone();
    }
    if let Some(v) = &u.dest_node {
        m.dest_node = v.clone();
    }
    if let Some(v) = &u.dest_host {
        m.dest_host = v.clone();
    }
    m.updated_at = Some(u.updated_at);
    conn.execute(
        &d.sql(
            "UPDATE migrations SET status = ?2, dest_compute = ?3, dest_node = ?4, dest_host = ?5, updated_at = ?6
             WHERE uuid = ?1",
        ),
        &[
            text(&uuid.to_string()),
            text(&m.status),
            opt_text(m.dest_compute.as_deref()),
            opt_text(m.dest_node.as_deref()),
            opt_text(m.dest_host.as_deref()),
            opt_int(m.updated_at),
        ],
    )?;
    Ok(())
}

/// Conditionally update an instance inside a move op: `None` when it was
/// applied, else the outcome to report.
fn instance_precondition(
    conn: &mut dyn CellConn,
    uuid: &Uuid,
    expect: &Expect,
) -> Result<std::result::Result<Instance, CellOutcome>> {
    let Some(row) = select_instance(conn, uuid, true)? else { return Ok(Err(CellOutcome::Missing)) };
    if !expect_matches(&row, expect) {
        return Ok(Err(CellOutcome::Mismatch));
    }
    Ok(Ok(row))
}

fn write_instance(conn: &mut dyn CellConn, mut row: Instance, update: &InstanceUpdate) -> Result<()> {
    apply_update(&mut row, update);
    let d = conn.dialect();
    conn.execute(&update_instance_sql(d), &instance_values(&row))?;
    if update.tags.is_some() {
        set_tags(conn, &row.uuid, &row.spec.tags)?;
    }
    Ok(())
}

/// Migrations matching `filter`, newest first (`created_at`, `id` desc).
pub fn migrations(conn: &mut dyn CellConn, filter: &MigrationFilter) -> Result<Vec<Migration>> {
    let mut b = Builder { dialect: conn.dialect(), params: Vec::new() };
    let mut conds = vec!["deleted = 0".to_owned()];
    if let Some(instance) = filter.instance_uuid {
        let p = b.bind(text(&instance.to_string()));
        conds.push(format!("instance_uuid = {p}"));
    }
    if let Some(status) = &filter.status {
        let p = b.bind(text(status));
        conds.push(format!("status = {p}"));
    }
    let sql = format!(
        "SELECT {MIGRATION_COLUMNS} FROM migrations WHERE {} ORDER BY created_at DESC, id DESC",
        conds.join(" AND ")
    );
    let mut out = Vec::new();
    for row in conn.query(&sql, &b.params, &MIGRATION_KINDS)? {
        let m = migration_from_row(&row)?;
        if filter.matches(&m) {
            out.push(m);
        }
    }
    Ok(out)
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

// ---------------------------------------------------------------------------
// Reads.

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

#[cfg(test)]
mod tests {
    use super::*;
    use berth_compute_model::cell::{InstanceFilter, SortKey};

    #[test]
    fn every_sort_key_has_a_column() {
        for key in SORT_KEYS {
            assert!(sort_column(key).is_ok(), "{key}");
        }
        assert_eq!(SORT_COLUMNS.len(), SORT_KEYS.len());
    }

    #[test]
    fn marker_condition_and_placeholders() {
        let query = InstanceQuery {
            filter: InstanceFilter { project_id: Some("p".into()), ..Default::default() },
            sort: vec![
                SortKey { key: "created_at".into(), ascending: false },
                SortKey { key: "host".into(), ascending: true },
            ],
            marker: None,
            limit: 7,
            brief: false,
        };
        let marker = Marker { values: vec![SortValue::Int(5), SortValue::Text("h".into())], uuid: Uuid::nil() };
        let sql = list_sql(Dialect::Postgres, &query, Some(&marker), 7).unwrap();
        assert!(sql.text.contains("created_at <= $2"), "{}", sql.text);
        assert!(
            sql.text.contains(
                "((created_at < $2) OR (created_at = $2 AND COALESCE(host, '') > $3) OR \
                 (created_at = $2 AND COALESCE(host, '') = $3 AND uuid > $4))"
            ),
            "{}",
            sql.text
        );
        assert!(sql.text.ends_with("ORDER BY created_at DESC, COALESCE(host, '') ASC, uuid ASC LIMIT $5"));
        assert_eq!(sql.params.len(), 5);
        let sqlite = list_sql(Dialect::Sqlite, &query, Some(&marker), 7).unwrap();
        assert_eq!(sqlite.text, sql.text.replace('$', "?"));
    }

    #[test]
    fn unknown_exact_column_is_an_error() {
        let mut filter = InstanceFilter::default();
        filter.exact.insert("spec".into(), "x".into());
        let query = InstanceQuery { filter, sort: vec![], marker: None, limit: 1, brief: false };
        assert!(matches!(list_sql(Dialect::Sqlite, &query, None, 1), Err(StoreError::Internal(_))));
    }
}
