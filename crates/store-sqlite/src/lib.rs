//! Embedded SQLite backend for the [`Store`] trait.
//!
//! One connection behind a mutex: SQLite has a single writer anyway, and
//! berth serialises its writes before they reach the store. The database
//! runs in WAL mode with `synchronous=FULL`, so every committed transaction
//! is fsync'd before `commit` returns — a 2xx survives `kill -9` and power
//! loss. An exclusive lock file in the data directory keeps a second berth
//! process from opening the same database (the in-memory snapshot of each
//! process would otherwise go stale; use PostgreSQL for several processes).
//!
//! It must not decide anything: plans come from the pure crates; it only
//! reads, writes and serialises them.
#![deny(missing_docs)]

mod cell;
pub use cell::SqliteCellStore;

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use berth_compute_model::{ComputeChange, World, WorldChange, WorldChangeSet};
use berth_model::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ProviderRow, Uuid};
use berth_store::{CatchUp, Loaded, PlanFn, Rows, Seq, Store, StoreError};
use rusqlite::{params, Connection, TransactionBehavior};

/// Embedded migrations, applied in order.
const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_initial", include_str!("../migrations/0001_initial.sql")),
    ("0002_compute_rows", include_str!("../migrations/0002_compute_rows.sql")),
    ("0003_allocation_order", include_str!("../migrations/0003_allocation_order.sql")),
];

/// SQLite-backed store.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    _lock: Option<File>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

fn internal(err: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(e, _) = &err {
        match e.code {
            // The value or the row itself is refused: that change alone.
            rusqlite::ErrorCode::ConstraintViolation
            | rusqlite::ErrorCode::TooBig
            | rusqlite::ErrorCode::TypeMismatch
            | rusqlite::ErrorCode::ParameterOutOfRange => return StoreError::Rejected(err.to_string()),
            rusqlite::ErrorCode::DatabaseBusy
            | rusqlite::ErrorCode::DatabaseLocked
            | rusqlite::ErrorCode::DiskFull
            | rusqlite::ErrorCode::SystemIoFailure
            | rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::ReadOnly => return StoreError::Unavailable(err.to_string()),
            _ => {}
        }
    }
    StoreError::Internal(err.to_string())
}

fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| StoreError::Internal(format!("bad uuid {text:?} in database: {e}")))
}

impl SqliteStore {
    /// Open (creating if needed) `berth.sqlite` in `data_dir`, take the
    /// directory lock and run pending migrations.
    pub fn open_dir(data_dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", data_dir.display())))?;
        let lock_path = data_dir.join("berth.lock");
        let lock = File::create(&lock_path)
            .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", lock_path.display())))?;
        lock.try_lock().map_err(|_| {
            StoreError::Unavailable(format!(
                "{} is locked by another berth process; SQLite serves one process (use PostgreSQL for several)",
                data_dir.display()
            ))
        })?;
        let mut store = Self::open_path(&data_dir.join("berth.sqlite"))?;
        store._lock = Some(lock);
        Ok(store)
    }

    /// Open a database file without taking a directory lock (tests, tools).
    pub fn open_path(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(internal)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(internal)?;
        conn.pragma_update(None, "foreign_keys", "OFF").map_err(internal)?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(internal)?;
        // Every statement a write runs stays prepared (rusqlite keeps 16).
        conn.set_prepared_statement_cache_capacity(128);
        let mut store = Self { conn: Mutex::new(conn), _lock: None };
        store.migrate()?;
        Ok(store)
    }

    /// Apply pending migrations; returns how many ran.
    pub fn migrate(&mut self) -> Result<usize, StoreError> {
        let conn = self.conn.get_mut().map_err(|_| StoreError::Internal("poisoned".into()))?;
        let current: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(internal)?;
        let mut ran = 0;
        for (idx, (_name, sql)) in MIGRATIONS.iter().enumerate() {
            let version = idx as i64 + 1;
            if version <= current {
                continue;
            }
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(internal)?;
            tx.execute_batch(sql).map_err(internal)?;
            tx.pragma_update(None, "user_version", version).map_err(internal)?;
            tx.commit().map_err(internal)?;
            ran += 1;
        }
        Ok(ran)
    }
}

fn check_one(changed: usize, what: &str) -> Result<(), StoreError> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict(what.to_owned()))
    }
}

fn is_unique_violation(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _)
        if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
            || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
}

fn write_change(tx: &rusqlite::Connection, change: &Change) -> Result<(), StoreError> {
    let unique = |e: rusqlite::Error| {
        if is_unique_violation(&e) {
            StoreError::Conflict(e.to_string())
        } else {
            internal(e)
        }
    };
    match change {
        Change::PutProvider { row, expected_generation } => {
            let ProviderRow { id, uuid, name, generation, parent, root, created_at, updated_at } = row;
            let parent = parent.map(|p| p.to_string());
            match expected_generation {
                None => {
                    exec(tx,
                        "INSERT INTO resource_providers (id, uuid, name, generation, parent_uuid, root_uuid, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        params![id, uuid.to_string(), name, generation, parent, root.to_string(), created_at, updated_at],
                    )
                    .map_err(unique)?;
                }
                Some(expected) => {
                    let changed = exec(
                        tx,
                        "UPDATE resource_providers SET name = ?2, generation = ?3, parent_uuid = ?4, root_uuid = ?5,
                                    updated_at = ?6
                             WHERE uuid = ?1 AND generation = ?7",
                        params![uuid.to_string(), name, generation, parent, root.to_string(), updated_at, expected],
                    )
                    .map_err(unique)?;
                    check_one(changed, "resource provider generation changed")?;
                }
            }
        }
        Change::DeleteProvider { uuid, expected_generation } => {
            let uuid = uuid.to_string();
            let changed = exec(
                tx,
                "DELETE FROM resource_providers WHERE uuid = ?1 AND generation = ?2",
                params![uuid, expected_generation],
            )
            .map_err(internal)?;
            check_one(changed, "resource provider generation changed")?;
            for table in ["inventories", "provider_traits", "provider_aggregates"] {
                exec(tx, &format!("DELETE FROM {table} WHERE provider_uuid = ?1"), params![uuid]).map_err(internal)?;
            }
        }
        Change::SetInventories { provider, inventories } => {
            let provider = provider.to_string();
            exec(tx, "DELETE FROM inventories WHERE provider_uuid = ?1", params![provider]).map_err(internal)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO inventories (provider_uuid, resource_class, total, reserved, min_unit, max_unit,
                                              step_size, allocation_ratio)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(internal)?;
            for (class, inv) in inventories {
                insert
                    .execute(params![
                        provider,
                        class,
                        inv.total,
                        inv.reserved,
                        inv.min_unit,
                        inv.max_unit,
                        inv.step_size,
                        inv.allocation_ratio
                    ])
                    .map_err(internal)?;
            }
        }
        Change::SetProviderTraits { provider, traits } => {
            let provider = provider.to_string();
            exec(tx, "DELETE FROM provider_traits WHERE provider_uuid = ?1", params![provider]).map_err(internal)?;
            let mut insert = tx
                .prepare_cached("INSERT INTO provider_traits (provider_uuid, trait) VALUES (?1, ?2)")
                .map_err(internal)?;
            for name in traits {
                insert.execute(params![provider, name]).map_err(internal)?;
            }
        }
        Change::SetProviderAggregates { provider, aggregates } => {
            let provider = provider.to_string();
            exec(tx, "DELETE FROM provider_aggregates WHERE provider_uuid = ?1", params![provider])
                .map_err(internal)?;
            let mut insert = tx
                .prepare_cached("INSERT INTO provider_aggregates (provider_uuid, aggregate_uuid) VALUES (?1, ?2)")
                .map_err(internal)?;
            for agg in aggregates {
                insert.execute(params![provider, agg.to_string()]).map_err(internal)?;
            }
        }
        Change::PutConsumer { row, expected_generation, allocations } => {
            let ConsumerRow { uuid, project_id, user_id, generation, consumer_type, created_at, updated_at } = row;
            let uuid = uuid.to_string();
            match expected_generation {
                None => {
                    exec(tx,
                        "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        params![uuid, project_id, user_id, generation, consumer_type, created_at, updated_at],
                    )
                    .map_err(unique)?;
                }
                Some(expected) => {
                    let changed = exec(
                        tx,
                        "UPDATE consumers SET project_id = ?2, user_id = ?3, generation = ?4, consumer_type = ?5,
                                    updated_at = ?6
                             WHERE uuid = ?1 AND generation = ?7",
                        params![uuid, project_id, user_id, generation, consumer_type, updated_at, expected],
                    )
                    .map_err(internal)?;
                    check_one(changed, "consumer generation changed")?;
                }
            }
            write_allocations(tx, &uuid, allocations)?;
        }
        Change::DeleteConsumer { uuid, expected_generation } => {
            let uuid = uuid.to_string();
            let changed = exec(
                tx,
                "DELETE FROM consumers WHERE uuid = ?1 AND generation = ?2",
                params![uuid, expected_generation],
            )
            .map_err(internal)?;
            check_one(changed, "consumer generation changed")?;
            exec(tx, "DELETE FROM allocations WHERE consumer_uuid = ?1", params![uuid]).map_err(internal)?;
        }
        Change::PutResourceClass { id, name, created_at, updated_at } => {
            exec(
                tx,
                "INSERT INTO resource_classes (id, name, created_at, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at",
                params![id, name, created_at, updated_at],
            )
            .map_err(unique)?;
        }
        Change::DeleteResourceClass { name } => {
            exec(tx, "DELETE FROM resource_classes WHERE name = ?1", params![name]).map_err(internal)?;
        }
        Change::PutTrait { id, name, created_at } => {
            exec(tx, "INSERT INTO traits (id, name, created_at) VALUES (?1, ?2, ?3)", params![id, name, created_at])
                .map_err(unique)?;
        }
        Change::DeleteTrait { name } => {
            exec(tx, "DELETE FROM traits WHERE name = ?1", params![name]).map_err(internal)?;
        }
    }
    Ok(())
}

fn write_allocations(tx: &rusqlite::Connection, consumer: &str, allocations: &AllocationMap) -> Result<(), StoreError> {
    exec(tx, "DELETE FROM allocations WHERE consumer_uuid = ?1", params![consumer]).map_err(internal)?;
    if allocations.is_empty() {
        return Ok(());
    }
    // Rows are numbered after every existing one, in written order.
    let mut seq: i64 = tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM allocations")
        .and_then(|mut max| max.query_row([], |row| row.get(0)))
        .map_err(internal)?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO allocations (consumer_uuid, provider_uuid, resource_class, used, seq)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(internal)?;
    for (provider, amounts) in allocations {
        let provider = provider.to_string();
        for (class, used) in amounts {
            seq += 1;
            insert.execute(params![consumer, provider, class, used, seq]).map_err(internal)?;
        }
    }
    Ok(())
}

impl Store for SqliteStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        let conn = self.conn.lock().map_err(|_| StoreError::Internal("poisoned".into()))?;
        let state = load_state(&conn).map_err(|e| match e {
            LoadError::Sql(e) => internal(e),
            LoadError::Store(e) => e,
        })?;
        Ok(Loaded { state, seq: 0 })
    }

    /// SQLite serves one process (the directory lock guarantees it), so
    /// there is never anything to catch up on and the sequence stays 0.
    fn write(&self, _seen: Seq, plan: &mut PlanFn<'_>) -> Result<Option<Seq>, StoreError> {
        let mut conn = self.conn.lock().map_err(|_| StoreError::Internal("poisoned".into()))?;
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(internal)?;
        if berth_store::run_plan(plan, Vec::new(), |changes| write_isolated(&mut tx, changes))?.is_none() {
            return Ok(None);
        }
        tx.commit().map_err(internal)?;
        Ok(Some(0))
    }

    fn changes_since(&self, _seen: Seq) -> Result<CatchUp, StoreError> {
        Ok(Vec::new())
    }

    fn ping(&self) -> Result<(), StoreError> {
        let conn = self.conn.lock().map_err(|_| StoreError::Internal("poisoned".into()))?;
        conn.query_row("SELECT 1", [], |_| Ok(())).map_err(|e| StoreError::Unavailable(e.to_string()))
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }
}

/// Write one writer's change set under a savepoint: on error it is rolled
/// back alone (the transaction goes on if the error is the change's own).
fn write_isolated(tx: &mut rusqlite::Transaction<'_>, changes: &WorldChangeSet) -> Result<(), StoreError> {
    // Cached statements: a savepoint per writer costs two statement runs,
    // no SQL parsing.
    let run = |sql: &str| tx.prepare_cached(sql).and_then(|mut stmt| stmt.execute([])).map(|_| ()).map_err(internal);
    run("SAVEPOINT berth_member")?;
    let written = changes.changes.iter().try_for_each(|change| match change {
        WorldChange::Placement(change) => write_change(tx, change),
        WorldChange::Compute(change) => write_compute_change(tx, change),
    });
    match written {
        Ok(()) => run("RELEASE berth_member"),
        Err(err) => {
            run("ROLLBACK TO berth_member")?;
            run("RELEASE berth_member")?;
            Err(err)
        }
    }
}

impl SqliteStore {
    /// Commit a change set outside the planning protocol (start-up data).
    pub fn commit(&self, changes: &ChangeSet) -> Result<(), StoreError> {
        berth_store::write_one(self, 0, changes.clone().into()).map(|_| ())
    }
}

enum LoadError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for LoadError {
    fn from(e: rusqlite::Error) -> Self {
        LoadError::Sql(e)
    }
}

impl From<StoreError> for LoadError {
    fn from(e: StoreError) -> Self {
        LoadError::Store(e)
    }
}

fn load_state(conn: &Connection) -> Result<World, LoadError> {
    /// Run `sql` and hand each row to `each`.
    fn each_row(
        conn: &Connection,
        sql: &str,
        mut each: impl FnMut(&rusqlite::Row<'_>) -> Result<(), LoadError>,
    ) -> Result<(), LoadError> {
        let mut stmt = conn.prepare(sql)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            each(row)?;
        }
        Ok(())
    }
    let uuid_at = |row: &rusqlite::Row<'_>, idx: usize| -> Result<Uuid, LoadError> {
        Ok(parse_uuid(&row.get::<_, String>(idx)?)?)
    };
    let mut rows = Rows::default();
    each_row(conn, "SELECT id, name, created_at, updated_at FROM resource_classes", |row| {
        rows.resource_classes.push((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?));
        Ok(())
    })?;
    each_row(conn, "SELECT id, name, created_at FROM traits", |row| {
        rows.traits.push((row.get(0)?, row.get(1)?, row.get(2)?));
        Ok(())
    })?;
    each_row(
        conn,
        "SELECT id, uuid, name, generation, parent_uuid, root_uuid, created_at, updated_at FROM resource_providers",
        |row| {
            let parent: Option<String> = row.get(4)?;
            rows.providers.push(ProviderRow {
                id: row.get(0)?,
                uuid: uuid_at(row, 1)?,
                name: row.get(2)?,
                generation: row.get(3)?,
                parent: parent.as_deref().map(parse_uuid).transpose()?,
                root: uuid_at(row, 5)?,
                created_at: row.get(6)?,
                updated_at: row.get(7)?,
            });
            Ok(())
        },
    )?;
    each_row(
        conn,
        "SELECT provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio
         FROM inventories",
        |row| {
            let inventory = Inventory {
                total: row.get(2)?,
                reserved: row.get(3)?,
                min_unit: row.get(4)?,
                max_unit: row.get(5)?,
                step_size: row.get(6)?,
                allocation_ratio: row.get(7)?,
            };
            rows.inventories.push((uuid_at(row, 0)?, row.get(1)?, inventory));
            Ok(())
        },
    )?;
    each_row(conn, "SELECT provider_uuid, trait FROM provider_traits", |row| {
        rows.provider_traits.push((uuid_at(row, 0)?, row.get(1)?));
        Ok(())
    })?;
    each_row(conn, "SELECT provider_uuid, aggregate_uuid FROM provider_aggregates", |row| {
        rows.provider_aggregates.push((uuid_at(row, 0)?, uuid_at(row, 1)?));
        Ok(())
    })?;
    each_row(
        conn,
        "SELECT consumer_uuid, provider_uuid, resource_class, used FROM allocations ORDER BY seq, consumer_uuid",
        |row| {
            rows.allocations.push((uuid_at(row, 0)?, uuid_at(row, 1)?, row.get(2)?, row.get(3)?));
            Ok(())
        },
    )?;
    each_row(
        conn,
        "SELECT uuid, project_id, user_id, generation, consumer_type, created_at, updated_at FROM consumers",
        |row| {
            rows.consumers.push(ConsumerRow {
                uuid: uuid_at(row, 0)?,
                project_id: row.get(1)?,
                user_id: row.get(2)?,
                generation: row.get(3)?,
                consumer_type: row.get(4)?,
                created_at: row.get(5)?,
                updated_at: row.get(6)?,
            });
            Ok(())
        },
    )?;
    each_row(conn, "SELECT kind, key, body FROM compute_rows", |row| {
        let (kind, key, body): (String, String, String) = (row.get(0)?, row.get(1)?, row.get(2)?);
        let body: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| StoreError::Internal(format!("compute row {kind}/{key}: {e}")))?;
        rows.compute.push(berth_store::json::row_change(&kind, &key, Some(&body))?);
        Ok(())
    })?;
    Ok(rows.into_state())
}

/// A compute control row: an upsert for a put, a delete for a delete.
fn write_compute_change(tx: &rusqlite::Connection, change: &ComputeChange) -> Result<(), StoreError> {
    let (kind, key, body) = berth_store::json::change_row(change);
    match body {
        Some(body) => {
            tx.prepare_cached(
                "INSERT INTO compute_rows (kind, key, body) VALUES (?1, ?2, ?3)
                 ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body",
            )
            .and_then(|mut stmt| stmt.execute(params![kind, key, body.to_string()]))
            .map_err(internal)?;
        }
        None => {
            tx.prepare_cached("DELETE FROM compute_rows WHERE kind = ?1 AND key = ?2")
                .and_then(|mut stmt| stmt.execute(params![kind, key]))
                .map_err(internal)?;
        }
    }
    Ok(())
}

/// Run one statement through the connection's statement cache: a write
/// runs the same few statements over and over, and preparing each anew
/// was a measurable part of a boot's control write.
fn exec(tx: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}
