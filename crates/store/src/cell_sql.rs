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
//! The files go by table and by kind of work: `instances` (the row, its
//! encoding, the statements that write one), `listing`, `writes` (the ops
//! of a batch; PostgreSQL's runs of them in `bulk`), `actions`,
//! `migrations` and `reads`. What the backends call is re-exported here.
//!
//! [`compare_instances`]: berth_compute_model::cell::compare_instances
//! [`Instance::sort_value`]: berth_compute_model::cell::Instance::sort_value

use std::borrow::Cow;

use uuid::Uuid;

use crate::StoreError;

mod actions;
mod bulk;
mod instances;
mod listing;
mod migrations;
mod reads;
mod writes;

pub use actions::instance_actions;
pub use instances::{apply_update, expect_matches, instance_from_row, instance_values, INSTANCE_COLUMNS};
pub use listing::{list_instances, list_sql};
pub use migrations::migrations;
pub use reads::{compute_nodes, faults, instance, instance_counts_by_host, instances, instances_with_tasks, services};
pub use writes::write;

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
