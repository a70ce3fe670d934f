//! PostgreSQL backend of the [`CellStore`] trait: one cell per database (or
//! per schema, with `?schema=NAME`).
//!
//! Two connections: write batches run in one transaction on the write
//! connection (conditional updates lock their row with `FOR UPDATE`, so
//! several processes may write one cell), reads and listings on the read
//! connection, so a listing never waits behind a write batch. Each
//! connection keeps its statements prepared (bounded: listings vary with
//! their filters). A broken connection makes the call fail with
//! [`StoreError::Unavailable`] and is replaced on the next call. The SQL is
//! shared with the SQLite backend ([`berth_store::cell_sql`]); this module
//! binds and runs it. Migrations (`migrations/cell/`) run under a session
//! advisory lock of their own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use berth_compute_model::cell::{
    ComputeNode, Fault, Instance, InstanceAction, InstanceQuery, Migration, MigrationFilter, Service,
};
use berth_store::cell_sql::{self, CellConn, Dialect, Kind, Value};
use berth_store::{CellOp, CellOutcome, CellStore, StoreError};
use postgres::types::ToSql;
use postgres::{Client, GenericClient, IsolationLevel, NoTls, Statement};
use uuid::Uuid;

use crate::{classify, split_schema};

/// Advisory lock key serialising cell migrations ("bertc" in ASCII; the
/// control store uses other keys).
const CELL_MIGRATE_LOCK_KEY: i64 = 0x62_6572_7463;

/// Embedded cell migrations, applied in order.
const CELL_MIGRATIONS: &[(&str, &str)] = &[
    ("0001_cell", include_str!("../migrations/cell/0001_cell.sql")),
    ("0002_migrations", include_str!("../migrations/cell/0002_migrations.sql")),
];

/// Prepared statements kept per connection before the cache is reset.
const STATEMENT_CACHE: usize = 256;

/// Default connect timeout when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A cell database on PostgreSQL.
pub struct PostgresCellStore {
    config: postgres::Config,
    schema: Option<String>,
    write_conn: Mutex<Option<Conn>>,
    read_conn: Mutex<Option<Conn>>,
}

impl std::fmt::Debug for PostgresCellStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the URL: it may hold a password.
        f.debug_struct("PostgresCellStore").field("schema", &self.schema).finish_non_exhaustive()
    }
}

struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
}

/// A client or transaction running the shared SQL with a statement cache.
struct Pg<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<String, Statement>,
}

impl<C: GenericClient> Pg<'_, C> {
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(classify)?;
        if self.statements.len() >= STATEMENT_CACHE {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

fn bind(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|v| match v {
            Value::Int(v) => v as &(dyn ToSql + Sync),
            Value::Text(v) => v as &(dyn ToSql + Sync),
            Value::Ints(v) => v as &(dyn ToSql + Sync),
            Value::Texts(v) => v as &(dyn ToSql + Sync),
        })
        .collect()
}

impl<C: GenericClient> CellConn for Pg<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, &bind(params)).map_err(classify)
    }

    fn query(&mut self, sql: &str, params: &[Value], kinds: &[Kind]) -> Result<Vec<Vec<Value>>, StoreError> {
        let statement = self.statement(sql)?;
        let rows = self.client.query(&statement, &bind(params)).map_err(classify)?;
        rows.iter()
            .map(|row| {
                kinds
                    .iter()
                    .enumerate()
                    .map(|(idx, kind)| match kind {
                        Kind::Int => row.try_get(idx).map(Value::Int),
                        Kind::Text => row.try_get(idx).map(Value::Text),
                    })
                    .collect::<Result<Vec<Value>, _>>()
                    .map_err(|e| StoreError::Internal(format!("reading cell row: {e}")))
            })
            .collect()
    }
}

impl PostgresCellStore {
    /// Connect to `url` (`postgres://…`; `schema=NAME` puts the cell's
    /// tables in that schema, created if missing; without `connect_timeout`
    /// the connect timeout is 3 s) and run pending cell migrations.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        let (url, schema) = split_schema(url);
        let mut config: postgres::Config =
            url.parse().map_err(|e: postgres::Error| StoreError::Unavailable(format!("invalid database URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let store = Self { config, schema, write_conn: Mutex::new(None), read_conn: Mutex::new(None) };
        store.migrate()?;
        Ok(store)
    }

    fn quoted_schema(&self) -> Option<String> {
        self.schema.as_ref().map(|s| format!("\"{}\"", s.replace('"', "\"\"")))
    }

    /// A new connection; `write`: the write connection (custom plans, see
    /// [`crate::WRITE_SESSION_SETUP`]).
    fn open(&self, write: bool) -> Result<Client, StoreError> {
        let mut client = self.config.connect(NoTls).map_err(classify)?;
        let mut setup: Vec<String> = Vec::new();
        if write {
            setup.push(crate::WRITE_SESSION_SETUP.to_owned());
        }
        if let Some(quoted) = self.quoted_schema() {
            setup.push(format!("SET search_path TO {quoted}"));
        }
        if !setup.is_empty() {
            client.batch_execute(&setup.join("; ")).map_err(classify)?;
        }
        Ok(client)
    }

    /// Run `f` with a healthy connection from `slot`, reconnecting when the
    /// previous one broke.
    fn with_conn<R>(
        &self,
        slot: &Mutex<Option<Conn>>,
        f: impl FnOnce(&mut Conn) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut guard = slot.lock().map_err(|_| StoreError::Internal("poisoned".into()))?;
        if guard.as_ref().is_none_or(|conn| conn.client.is_closed()) {
            *guard =
                Some(Conn { client: self.open(std::ptr::eq(slot, &self.write_conn))?, statements: HashMap::new() });
        }
        let conn = guard.as_mut().ok_or_else(|| StoreError::Internal("no connection".into()))?;
        let result = f(conn);
        if matches!(result, Err(StoreError::Unavailable(_))) {
            *guard = None;
        }
        result
    }

    fn read<R>(&self, f: impl FnOnce(&mut Pg<'_, Client>) -> Result<R, StoreError>) -> Result<R, StoreError> {
        self.with_conn(&self.read_conn, |conn| {
            f(&mut Pg { client: &mut conn.client, statements: &mut conn.statements })
        })
    }

    /// Apply pending cell migrations under an advisory lock; returns how
    /// many ran.
    pub fn migrate(&self) -> Result<usize, StoreError> {
        self.with_conn(&self.write_conn, |conn| {
            let client = &mut conn.client;
            client.execute("SELECT pg_advisory_lock($1)", &[&CELL_MIGRATE_LOCK_KEY]).map_err(classify)?;
            let result = (|| {
                if let Some(quoted) = self.quoted_schema() {
                    client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {quoted}")).map_err(classify)?;
                }
                client
                    .batch_execute(
                        "CREATE TABLE IF NOT EXISTS berth_cell_migrations (
                             version BIGINT PRIMARY KEY, name TEXT NOT NULL,
                             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    )
                    .map_err(classify)?;
                let mut ran = 0;
                for (idx, (name, sql)) in CELL_MIGRATIONS.iter().enumerate() {
                    let version = idx as i64 + 1;
                    let done = client
                        .query_opt("SELECT 1 FROM berth_cell_migrations WHERE version = $1", &[&version])
                        .map_err(classify)?
                        .is_some();
                    if done {
                        continue;
                    }
                    let mut tx = client.transaction().map_err(classify)?;
                    tx.batch_execute(sql).map_err(classify)?;
                    tx.execute("INSERT INTO berth_cell_migrations (version, name) VALUES ($1, $2)", &[&version, name])
                        .map_err(classify)?;
                    tx.commit().map_err(classify)?;
                    ran += 1;
                }
                Ok(ran)
            })();
            let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&CELL_MIGRATE_LOCK_KEY]);
            result
        })
    }
}

impl CellStore for PostgresCellStore {
    fn write(&self, ops: &[CellOp]) -> Result<Vec<CellOutcome>, StoreError> {
        self.with_conn(&self.write_conn, |conn| {
            let mut tx = conn.client.transaction().map_err(classify)?;
            let outcomes = cell_sql::write(&mut Pg { client: &mut tx, statements: &mut conn.statements }, ops)?;
            tx.commit().map_err(classify)?;
            Ok(outcomes)
        })
    }

    fn instance(&self, uuid: &Uuid) -> Result<Option<Instance>, StoreError> {
        self.read(|c| cell_sql::instance(c, uuid))
    }

    fn instances(&self, uuids: &[Uuid]) -> Result<Vec<Instance>, StoreError> {
        self.read(|c| cell_sql::instances(c, uuids))
    }

    fn list_instances(&self, query: &InstanceQuery) -> Result<Vec<Instance>, StoreError> {
        self.with_conn(&self.read_conn, |conn| {
            if query.filter.name_regex.is_none() {
                // One statement: its own snapshot.
                let mut pg = Pg { client: &mut conn.client, statements: &mut conn.statements };
                return cell_sql::list_instances(&mut pg, query);
            }
            // A chunked (name regex) listing reads one snapshot.
            let mut tx = conn
                .client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .map_err(classify)?;
            let rows = cell_sql::list_instances(&mut Pg { client: &mut tx, statements: &mut conn.statements }, query)?;
            tx.commit().map_err(classify)?;
            Ok(rows)
        })
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
        self.with_conn(&self.read_conn, |conn| conn.client.simple_query("SELECT 1").map(|_| ()).map_err(classify))
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }
}
