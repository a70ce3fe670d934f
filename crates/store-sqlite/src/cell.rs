//! SQLite backend of the [`CellStore`] trait: one cell database per file.
//!
//! The file runs in WAL mode with `synchronous=FULL` (a committed batch is
//! fsync'd before `write` returns) and a busy timeout. There are two
//! connections: writes go through one (`BEGIN IMMEDIATE`, so batches are
//! serialised), reads and listings through the other, which in WAL mode
//! reads the last committed state without waiting behind a write batch.
//! The SQL itself is shared with the PostgreSQL backend
//! ([`berth_store::cell_sql`]); this module only binds and runs it.
//! Migrations live in `migrations/cell/` and are tracked by the file's
//! `user_version`.

use std::path::Path;
use std::sync::Mutex;

use berth_compute_model::cell::{
    ComputeNode, Fault, Instance, InstanceAction, InstanceQuery, Migration, MigrationFilter, Service,
};
use berth_store::cell_sql::{self, CellConn, Dialect, Kind, Value};
use berth_store::{CellOp, CellOutcome, CellStore, StoreError};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, TransactionBehavior};
use uuid::Uuid;

/// Embedded cell migrations, applied in order.
const CELL_MIGRATIONS: &[(&str, &str)] = &[
    ("0001_cell", include_str!("../migrations/cell/0001_cell.sql")),
    ("0002_migrations", include_str!("../migrations/cell/0002_migrations.sql")),
];

/// Statements kept prepared per connection (listings vary with their
/// filters, so a few dozen shapes are common).
const STATEMENT_CACHE: usize = 128;

/// A cell database in one SQLite file.
pub struct SqliteCellStore {
    write: Mutex<Connection>,
    read: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteCellStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCellStore").finish_non_exhaustive()
    }
}

fn classify(err: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(e, _) = &err {
        if matches!(
            e.code,
            rusqlite::ErrorCode::DatabaseBusy
                | rusqlite::ErrorCode::DatabaseLocked
                | rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::DiskFull
                | rusqlite::ErrorCode::SystemIoFailure
        ) {
            return StoreError::Unavailable(err.to_string());
        }
    }
    StoreError::Internal(err.to_string())
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Internal("cell store connection mutex poisoned".into())
}

/// Binds a shared [`Value`].
struct Param<'a>(&'a Value);

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Value::Int(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Int(None) | Value::Text(None) => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Ints(_) | Value::Texts(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure("SQLite has no array parameters".into()))
            }
        })
    }
}

/// A connection (or a transaction, through deref) running the shared SQL.
struct Sqlite<'a>(&'a Connection);

impl CellConn for Sqlite<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        let mut statement = self.0.prepare_cached(sql).map_err(classify)?;
        let changed = statement.execute(rusqlite::params_from_iter(params.iter().map(Param))).map_err(classify)?;
        Ok(changed as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value], kinds: &[Kind]) -> Result<Vec<Vec<Value>>, StoreError> {
        let mut statement = self.0.prepare_cached(sql).map_err(classify)?;
        let mut rows = statement.query(rusqlite::params_from_iter(params.iter().map(Param))).map_err(classify)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(classify)? {
            let mut values = Vec::with_capacity(kinds.len());
            for (idx, kind) in kinds.iter().enumerate() {
                values.push(match kind {
                    Kind::Int => Value::Int(row.get(idx).map_err(classify)?),
                    Kind::Text => Value::Text(row.get(idx).map_err(classify)?),
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(classify)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(classify)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

impl SqliteCellStore {
    /// Open (creating if needed) the cell database file at `path` and run
    /// its pending migrations.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
        }
        let open = |path: &Path| {
            Connection::open(path).map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))
        };
        let mut write = open(path)?;
        write.busy_timeout(std::time::Duration::from_secs(10)).map_err(classify)?;
        write.pragma_update(None, "journal_mode", "WAL").map_err(classify)?;
        configure(&write)?;
        migrate(&mut write)?;
        let read = open(path)?;
        configure(&read)?;
        read.pragma_update(None, "query_only", "ON").map_err(classify)?;
        Ok(Self { write: Mutex::new(write), read: Mutex::new(read) })
    }

    fn read<R>(&self, f: impl FnOnce(&mut Sqlite<'_>) -> Result<R, StoreError>) -> Result<R, StoreError> {
        let conn = self.read.lock().map_err(poisoned)?;
        f(&mut Sqlite(&conn))
    }
}

/// Apply pending cell migrations; returns how many ran.
fn migrate(conn: &mut Connection) -> Result<usize, StoreError> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(classify)?;
    let mut ran = 0;
    for (idx, (_name, sql)) in CELL_MIGRATIONS.iter().enumerate() {
        let version = idx as i64 + 1;
        if version <= current {
            continue;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(classify)?;
        tx.execute_batch(sql).map_err(classify)?;
        tx.pragma_update(None, "user_version", version).map_err(classify)?;
        tx.commit().map_err(classify)?;
        ran += 1;
    }
    Ok(ran)
}

impl CellStore for SqliteCellStore {
    fn write(&self, ops: &[CellOp]) -> Result<Vec<CellOutcome>, StoreError> {
        let mut conn = self.write.lock().map_err(poisoned)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(classify)?;
        let outcomes = cell_sql::write(&mut Sqlite(&tx), ops)?;
        tx.commit().map_err(classify)?;
        Ok(outcomes)
    }

    fn instance(&self, uuid: &Uuid) -> Result<Option<Instance>, StoreError> {
        self.read(|c| cell_sql::instance(c, uuid))
    }

    fn instances(&self, uuids: &[Uuid]) -> Result<Vec<Instance>, StoreError> {
        self.read(|c| cell_sql::instances(c, uuids))
    }

    fn list_instances(&self, query: &InstanceQuery) -> Result<Vec<Instance>, StoreError> {
        let mut conn = self.read.lock().map_err(poisoned)?;
        // One read transaction: a chunked (name regex) listing sees one
        // snapshot.
        let tx = conn.transaction().map_err(classify)?;
        let rows = cell_sql::list_instances(&mut Sqlite(&tx), query)?;
        tx.commit().map_err(classify)?;
        Ok(rows)
    }

    fn instances_with_tasks(&self, task_states: &[&str]) -> Result<Vec<Instance>, StoreError> {
        self.read(|c| cell_sql::instances_with_tasks(c, task_states))
    }

    fn faults(&self, uuids: &[Uuid]) -> Result<Vec<Fault>, StoreError> {
        self.read(|c| cell_sql::faults(c, uuids))
    }

    fn services(&self) -> Result<Vec<Service>, StoreError> {
        self.read(|c| cell_sql::services(c))
    }

    fn compute_nodes(&self) -> Result<Vec<ComputeNode>, StoreError> {
        self.read(|c| cell_sql::compute_nodes(c))
    }

    fn instance_actions(&self, instance: &Uuid) -> Result<Vec<InstanceAction>, StoreError> {
        self.read(|c| cell_sql::instance_actions(c, instance))
    }

    fn instance_counts_by_host(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.read(|c| cell_sql::instance_counts_by_host(c))
    }

    fn migrations(&self, filter: &MigrationFilter) -> Result<Vec<Migration>, StoreError> {
        self.read(|c| cell_sql::migrations(c, filter))
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.read(|c| c.query("SELECT 1", &[], &[Kind::Int]).map(|_| ()))
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }
}
