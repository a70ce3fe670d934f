//! PostgreSQL backend for the [`Store`] trait.
//!
//! Several berth processes may share one database. Correctness across them
//! rests on two things, both inside each write transaction:
//!
//! 1. Every write transaction takes one transaction-scoped advisory lock
//!    before reading anything. Writes are therefore serialised across all
//!    processes. There is one lock, so there are no deadlocks. The order in
//!    which the lock is granted is the commit order.
//! 2. Under that lock the transaction reads the change feed
//!    (`berth_changes`) past the caller's last seen sequence number. The
//!    caller applies those changes to its snapshot and *then* plans, so
//!    every plan is made on the current committed state. The change set is
//!    written with generation compare-and-swap (a belt-and-braces check
//!    that cannot fail while the lock protocol holds) and appended to the
//!    feed, and the transaction commits. The feed's sequence order is
//!    commit order, because the sequence value is drawn under the lock.
//!
//! Other processes follow the feed with [`Store::changes_since`] to keep
//! their read snapshots fresh. Connection loss maps to
//! [`StoreError::Unavailable`] (a 503 at the API). The next call
//! reconnects, so service recovers without a restart.
//!
//! It must not decide anything: plans come from the pure crates; it only
//! reads, writes and serialises them.
#![deny(missing_docs)]

mod cell;
mod codec;
mod peers;
pub mod placement_source;

pub use cell::PostgresCellStore;

use std::collections::HashMap;
use std::sync::Mutex;

use berth_compute_model::{ComputeChange, WorldChange, WorldChangeSet};
use berth_model::{AllocationMap, Change, ConsumerRow, Inventory, ProviderRow, Uuid};
use berth_store::{CatchUp, Loaded, PlanFn, Rows, Seq, Store, StoreError};
use postgres::error::SqlState;
use postgres::{Client, NoTls, Transaction};

/// Advisory lock key serialising berth writers ("berth" in ASCII).
const WRITE_LOCK_KEY: i64 = 0x62_6572_7468;
/// Advisory lock key serialising migrations.
const MIGRATE_LOCK_KEY: i64 = 0x62_6572_746D;

const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_initial", include_str!("../migrations/0001_initial.sql")),
    ("0002_feed_retention", include_str!("../migrations/0002_feed_retention.sql")),
    ("0003_compute_rows", include_str!("../migrations/0003_compute_rows.sql")),
    ("0004_allocation_order", include_str!("../migrations/0004_allocation_order.sql")),
];

/// How long change-feed entries are kept by default.
pub const DEFAULT_FEED_RETENTION: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// Pruning runs inside one write out of this many.
const PRUNE_EVERY_WRITES: u64 = 256;

/// PostgreSQL-backed store.
pub struct PostgresStore {
    config: postgres::Config,
    schema: Option<String>,
    write_conn: Mutex<Option<Conn>>,
    read_conn: Mutex<Option<Conn>>,
    feed_retention: std::time::Duration,
    writes: std::sync::atomic::AtomicU64,
    /// The connection [`Store::notify_peers`] sends on.
    notify_conn: Mutex<Option<Conn>>,
    /// This process's token on the peers' channel ([`peers`]).
    peer_token: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the URL: it may hold a password.
        f.debug_struct("PostgresStore").field("schema", &self.schema).finish_non_exhaustive()
    }
}

/// A connection and its prepared statements. The sync client re-prepares
/// a statement given as text on every call (an extra round trip); berth's
/// statements are few and fixed, so each is prepared once per connection.
struct Conn {
    client: Client,
    statements: HashMap<String, postgres::Statement>,
}

/// A client or transaction whose statements come from a connection's cache.
/// Same method names and error type as the postgres client, so call sites
/// read as plain SQL calls.
struct Cached<'a, C: postgres::GenericClient> {
    conn: &'a mut C,
    statements: &'a mut HashMap<String, postgres::Statement>,
}

type Params<'p> = [&'p (dyn postgres::types::ToSql + Sync)];

impl<C: postgres::GenericClient> Cached<'_, C> {
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.conn.prepare(sql)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn execute(&mut self, sql: &str, params: &Params<'_>) -> Result<u64, postgres::Error> {
        let statement = self.statement(sql)?;
        self.conn.execute(&statement, params)
    }

    fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, postgres::Error> {
        let statement = self.statement(sql)?;
        self.conn.query(&statement, params)
    }

    fn query_one(&mut self, sql: &str, params: &Params<'_>) -> Result<postgres::Row, postgres::Error> {
        let statement = self.statement(sql)?;
        self.conn.query_one(&statement, params)
    }
}

fn classify(err: postgres::Error) -> StoreError {
    if let Some(db) = err.as_db_error() {
        if *db.code() == SqlState::UNIQUE_VIOLATION {
            return StoreError::Conflict(db.message().to_owned());
        }
        if *db.code() == SqlState::T_R_SERIALIZATION_FAILURE || *db.code() == SqlState::T_R_DEADLOCK_DETECTED {
            return StoreError::Conflict(db.message().to_owned());
        }
        if db.code().code().starts_with("57") || db.code().code().starts_with("08") {
            return StoreError::Unavailable(db.message().to_owned());
        }
        // Data exceptions (a value the column cannot hold: NUL in text,
        // out of range), integrity constraints and program limits (a value
        // too large to index) belong to the change that carried them.
        if ["22", "23", "54"].iter().any(|class| db.code().code().starts_with(class)) {
            return StoreError::Rejected(format!("{}: {}", db.code().code(), db.message()));
        }
        return StoreError::Internal(format!("{}: {}", db.code().code(), db.message()));
    }
    // No database error: the connection failed or was closed.
    StoreError::Unavailable(err.to_string())
}

fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| StoreError::Internal(format!("bad uuid {text:?} in database: {e}")))
}

fn check_one(changed: u64, what: &str) -> Result<(), StoreError> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict(what.to_owned()))
    }
}

/// Run on every write connection. Its statements are prepared once per
/// connection, and PostgreSQL settles on one generic plan per statement
/// after five runs, planned for the tables as they were then. For the
/// batch statements that join an `unnest` of keys to a table (instance
/// updates, event starts and finishes, provider generations) a generic
/// plan made while the table was small is a hash join over a sequential
/// scan, kept while the table grows: boots/s fell through a run. A
/// custom plan per execution costs its planning and follows the tables.
/// Reads are key lookups and listings whose generic plans use the
/// indexes, so the read connections keep them.
pub(crate) const WRITE_SESSION_SETUP: &str = "SET plan_cache_mode = force_custom_plan";

impl PostgresStore {
    /// Connect to `url` (`postgres://…`). A berth-specific query parameter
    /// `schema=NAME` puts berth's tables in that schema (created if
    /// missing); tests use it for isolation. Runs pending migrations.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        let (url, schema) = split_schema(url);
        let config: postgres::Config =
            url.parse().map_err(|e: postgres::Error| StoreError::Unavailable(format!("invalid database URL: {e}")))?;
        let store = Self {
            config,
            schema,
            write_conn: Mutex::new(None),
            read_conn: Mutex::new(None),
            feed_retention: DEFAULT_FEED_RETENTION,
            writes: std::sync::atomic::AtomicU64::new(0),
            notify_conn: Mutex::new(None),
            peer_token: peers::token(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// A new connection; `write`: the write connection (custom plans, see
    /// [`WRITE_SESSION_SETUP`]).
    fn open(&self, write: bool) -> Result<Client, StoreError> {
        let mut client = self.config.connect(NoTls).map_err(classify)?;
        let mut setup: Vec<String> = Vec::new();
        if write {
            setup.push(WRITE_SESSION_SETUP.to_owned());
        }
        if let Some(schema) = &self.schema {
            let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
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

    /// Keep change-feed entries for `retention` (default 15 minutes). A
    /// process that falls further behind reloads its snapshot.
    pub fn with_feed_retention(mut self, retention: std::time::Duration) -> Self {
        self.feed_retention = retention;
        self
    }

    /// Delete change-feed entries older than the retention now (also done
    /// automatically every few hundred writes). Returns how many went.
    pub fn prune_feed(&self) -> Result<u64, StoreError> {
        let retention = self.feed_retention;
        self.with_conn(&self.write_conn, |conn| {
            let mut tx = conn.client.transaction().map_err(classify)?;
            let mut cached = Cached { conn: &mut tx, statements: &mut conn.statements };
            cached.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK_KEY]).map_err(classify)?;
            let n = prune(&mut cached, retention)?;
            tx.commit().map_err(classify)?;
            Ok(n)
        })
    }

    /// Apply pending migrations under an advisory lock.
    pub fn migrate(&self) -> Result<usize, StoreError> {
        self.with_conn(&self.write_conn, |conn| {
            let client = &mut conn.client;
            client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATE_LOCK_KEY]).map_err(classify)?;
            let result = (|| {
                if let Some(schema) = &self.schema {
                    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
                    client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {quoted}")).map_err(classify)?;
                }
                client
                    .batch_execute(
                        "CREATE TABLE IF NOT EXISTS berth_schema_migrations (
                             version BIGINT PRIMARY KEY, name TEXT NOT NULL,
                             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    )
                    .map_err(classify)?;
                let mut ran = 0;
                for (idx, (name, sql)) in MIGRATIONS.iter().enumerate() {
                    let version = idx as i64 + 1;
                    let done = client
                        .query_opt("SELECT 1 FROM berth_schema_migrations WHERE version = $1", &[&version])
                        .map_err(classify)?
                        .is_some();
                    if done {
                        continue;
                    }
                    let mut tx = client.transaction().map_err(classify)?;
                    tx.batch_execute(sql).map_err(classify)?;
                    tx.execute(
                        "INSERT INTO berth_schema_migrations (version, name) VALUES ($1, $2)",
                        &[&version, name],
                    )
                    .map_err(classify)?;
                    tx.commit().map_err(classify)?;
                    ran += 1;
                }
                Ok(ran)
            })();
            let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK_KEY]);
            result
        })
    }
}

impl PostgresStore {
    /// The body of [`Store::write`] inside the open transaction (writer
    /// lock held, first savepoint open). Commits when it returns
    /// `Ok(Some(_))`; otherwise the caller rolls back.
    fn write_locked(&self, conn: &mut Conn, seen: Seq, plan: &mut PlanFn<'_>) -> Result<Option<Seq>, StoreError> {
        let mut cached = Cached { conn: &mut conn.client, statements: &mut conn.statements };
        let catch_up = read_changes(&mut cached, seen)?;
        let (mut open, mut first) = (false, true);
        let mut feed = codec::FeedText::new();
        let mut deferred = ComputeRows::default();
        let written = berth_store::run_plan(plan, catch_up, |changes| {
            write_isolated(&mut cached, changes, &mut open, &mut first, &mut feed, &mut deferred)
        })?;
        if written.is_none() {
            return Ok(None);
        }
        deferred.flush(&mut cached)?;
        if self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % PRUNE_EVERY_WRITES == PRUNE_EVERY_WRITES - 1
        {
            prune(&mut cached, self.feed_retention)?;
        }
        append_and_commit(&mut conn.client, &feed.finish()).map(Some)
    }
}

/// Split a berth `schema=NAME` parameter off a postgres URL.
fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    (url, schema.filter(|s| !s.is_empty()))
}

/// Delete feed entries older than `retention` and advance the horizon.
/// Runs under the write lock.
fn prune<C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    retention: std::time::Duration,
) -> Result<u64, StoreError> {
    let seconds = retention.as_secs_f64();
    let row = tx
        .query_one(
            "WITH gone AS (
                 DELETE FROM berth_changes
                 WHERE committed_at < now() - make_interval(secs => $1)
                 RETURNING seq)
             UPDATE berth_feed_state
             SET pruned_through = GREATEST(pruned_through, (SELECT COALESCE(MAX(seq), 0) FROM gone))
             WHERE id = 1
             RETURNING (SELECT COUNT(*) FROM gone)",
            &[&seconds],
        )
        .map_err(classify)?;
    Ok(row.get::<_, i64>(0) as u64)
}

fn read_changes<C: postgres::GenericClient>(tx: &mut Cached<'_, C>, seen: Seq) -> Result<CatchUp, StoreError> {
    // One round trip: the prune horizon with the entries past `seen` (none:
    // one row of NULLs).
    let rows = tx
        .query(
            "SELECT f.pruned_through, c.seq, c.payload
             FROM berth_feed_state f LEFT JOIN berth_changes c ON c.seq > $1
             WHERE f.id = 1 ORDER BY c.seq",
            &[&seen],
        )
        .map_err(classify)?;
    let pruned_through: i64 =
        rows.first().map(|row| row.get(0)).ok_or_else(|| StoreError::Internal("berth_feed_state has no row".into()))?;
    if seen < pruned_through {
        return Err(StoreError::FeedGap(seen));
    }
    rows.iter()
        .filter_map(|row| {
            let seq: Option<i64> = row.get(1);
            let payload: Option<String> = row.get(2);
            Some((seq?, payload?))
        })
        .map(|(seq, payload)| {
            codec::decode(&payload).map(|set| (seq, set)).map_err(|e| StoreError::Internal(e.to_string()))
        })
        .collect()
}

fn write_change<C: postgres::GenericClient>(tx: &mut Cached<'_, C>, change: &Change) -> Result<(), StoreError> {
    match change {
        Change::PutProvider { row, expected_generation } => {
            let ProviderRow { id, uuid, name, generation, parent, root, created_at, updated_at } = row;
            let parent = parent.map(|p| p.to_string());
            match expected_generation {
                None => {
                    tx.execute(
                        "INSERT INTO resource_providers (id, uuid, name, generation, parent_uuid, root_uuid, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                        &[id, &uuid.to_string(), name, generation, &parent, &root.to_string(), created_at, updated_at],
                    )
                    .map_err(classify)?;
                }
                Some(expected) => {
                    let changed = tx
                        .execute(
                            "UPDATE resource_providers SET name = $2, generation = $3, parent_uuid = $4, root_uuid = $5,
                                    updated_at = $6
                             WHERE uuid = $1 AND generation = $7",
                            &[&uuid.to_string(), name, generation, &parent, &root.to_string(), updated_at, expected],
                        )
                        .map_err(classify)?;
                    check_one(changed, "resource provider generation changed")?;
                }
            }
        }
        Change::DeleteProvider { uuid, expected_generation } => {
            let uuid = uuid.to_string();
            let changed = tx
                .execute(
                    "DELETE FROM resource_providers WHERE uuid = $1 AND generation = $2",
                    &[&uuid, expected_generation],
                )
                .map_err(classify)?;
            check_one(changed, "resource provider generation changed")?;
            for table in ["inventories", "provider_traits", "provider_aggregates"] {
                tx.execute(&format!("DELETE FROM {table} WHERE provider_uuid = $1"), &[&uuid]).map_err(classify)?;
            }
        }
        Change::SetInventories { provider, inventories } => {
            let provider = provider.to_string();
            tx.execute("DELETE FROM inventories WHERE provider_uuid = $1", &[&provider]).map_err(classify)?;
            for (class, inv) in inventories {
                tx.execute(
                    "INSERT INTO inventories (provider_uuid, resource_class, total, reserved, min_unit, max_unit,
                                              step_size, allocation_ratio)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &provider,
                        class,
                        &inv.total,
                        &inv.reserved,
                        &inv.min_unit,
                        &inv.max_unit,
                        &inv.step_size,
                        &inv.allocation_ratio,
                    ],
                )
                .map_err(classify)?;
            }
        }
        Change::SetProviderTraits { provider, traits } => {
            let provider = provider.to_string();
            tx.execute("DELETE FROM provider_traits WHERE provider_uuid = $1", &[&provider]).map_err(classify)?;
            let names: Vec<&str> = traits.iter().map(String::as_str).collect();
            tx.execute(
                "INSERT INTO provider_traits (provider_uuid, trait) SELECT $1, unnest($2::text[])",
                &[&provider, &names],
            )
            .map_err(classify)?;
        }
        Change::SetProviderAggregates { provider, aggregates } => {
            let provider = provider.to_string();
            tx.execute("DELETE FROM provider_aggregates WHERE provider_uuid = $1", &[&provider]).map_err(classify)?;
            let aggs: Vec<String> = aggregates.iter().map(Uuid::to_string).collect();
            tx.execute(
                "INSERT INTO provider_aggregates (provider_uuid, aggregate_uuid) SELECT $1, unnest($2::text[])",
                &[&provider, &aggs],
            )
            .map_err(classify)?;
        }
        Change::PutConsumer { row, expected_generation, allocations } => {
            let ConsumerRow { uuid, project_id, user_id, generation, consumer_type, created_at, updated_at } = row;
            let uuid = uuid.to_string();
            match expected_generation {
                None => {
                    tx.execute(
                        "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        &[&uuid, project_id, user_id, generation, consumer_type, created_at, updated_at],
                    )
                    .map_err(classify)?;
                }
                Some(expected) => {
                    let changed = tx
                        .execute(
                            "UPDATE consumers SET project_id = $2, user_id = $3, generation = $4, consumer_type = $5,
                                    updated_at = $6
                             WHERE uuid = $1 AND generation = $7",
                            &[&uuid, project_id, user_id, generation, consumer_type, updated_at, expected],
                        )
                        .map_err(classify)?;
                    check_one(changed, "consumer generation changed")?;
                }
            }
            // A new consumer has no allocation rows (deleting a consumer
            // deletes them with it).
            write_allocations(tx, &uuid, allocations, expected_generation.is_some())?;
        }
        Change::DeleteConsumer { uuid, expected_generation } => {
            let uuid = uuid.to_string();
            let changed = tx
                .execute("DELETE FROM consumers WHERE uuid = $1 AND generation = $2", &[&uuid, expected_generation])
                .map_err(classify)?;
            check_one(changed, "consumer generation changed")?;
            tx.execute("DELETE FROM allocations WHERE consumer_uuid = $1", &[&uuid]).map_err(classify)?;
        }
        Change::PutResourceClass { id, name, created_at, updated_at } => {
            tx.execute(
                "INSERT INTO resource_classes (id, name, created_at, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at",
                &[id, name, created_at, updated_at],
            )
            .map_err(classify)?;
        }
        Change::DeleteResourceClass { name } => {
            tx.execute("DELETE FROM resource_classes WHERE name = $1", &[name]).map_err(classify)?;
        }
        Change::PutTrait { id, name, created_at } => {
            tx.execute("INSERT INTO traits (id, name, created_at) VALUES ($1, $2, $3)", &[id, name, created_at])
                .map_err(classify)?;
        }
        Change::DeleteTrait { name } => {
            tx.execute("DELETE FROM traits WHERE name = $1", &[name]).map_err(classify)?;
        }
    }
    Ok(())
}

fn write_allocations<C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    consumer: &str,
    allocations: &AllocationMap,
    replace: bool,
) -> Result<(), StoreError> {
    if replace {
        tx.execute("DELETE FROM allocations WHERE consumer_uuid = $1", &[&consumer]).map_err(classify)?;
    }
    insert_allocations(tx, [(consumer, allocations)])?;
    Ok(())
}

/// Write a change set's placement changes in order, except that new
/// consumers (with their allocations) and provider generation bumps are
/// gathered and written a statement per table for many rows (a claim of
/// a conductor pass writes dozens of each; one at a time that is three
/// round trips per boot). Gathered changes touch different rows of their
/// own tables, so writing them together changes nothing; they are written
/// before any other change, and a second change of a row they hold is
/// written after them.
fn write_placement_changes<'c, C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    changes: impl Iterator<Item = &'c Change>,
) -> Result<(), StoreError> {
    let mut gathered = Gathered::default();
    for change in changes {
        let Some(row) = gathered_row(change) else {
            gathered.flush(tx)?;
            write_change(tx, change)?;
            continue;
        };
        if !gathered.rows.insert(row) {
            // A second change of a row held: the first ones go first.
            gathered.flush(tx)?;
            gathered.rows.insert(row);
        }
        gathered.changes.push(change);
    }
    gathered.flush(tx)
}

/// The row a gatherable change writes (a new consumer, a provider's
/// generation bump), told apart by table.
fn gathered_row(change: &Change) -> Option<(bool, Uuid)> {
    match change {
        Change::PutConsumer { row, expected_generation: None, .. } => Some((true, row.uuid)),
        Change::PutProvider { row, expected_generation: Some(_) } => Some((false, row.uuid)),
        _ => None,
    }
}

/// New consumers and provider generation bumps waiting to be written.
#[derive(Default)]
struct Gathered<'c> {
    changes: Vec<&'c Change>,
    rows: std::collections::HashSet<(bool, Uuid)>,
}

impl<'c> Gathered<'c> {
    fn flush<C: postgres::GenericClient>(&mut self, tx: &mut Cached<'_, C>) -> Result<(), StoreError> {
        let changes = std::mem::take(&mut self.changes);
        self.rows.clear();
        if let [change] = changes[..] {
            return write_change(tx, change);
        }
        let (mut consumers, mut providers) = (Vec::new(), Vec::new());
        for change in changes {
            match change {
                Change::PutConsumer { row, allocations, .. } => consumers.push((row, allocations)),
                Change::PutProvider { row, expected_generation: Some(expected) } => providers.push((row, *expected)),
                _ => return Err(StoreError::Internal("gathered a change that is not gathered".into())),
            }
        }
        insert_consumers(tx, &consumers)?;
        bump_providers(tx, &providers)
    }
}

/// New consumers and their allocations: two statements, whatever their
/// number (a consumer's allocation rows keep their order).
fn insert_consumers<C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    consumers: &[(&ConsumerRow, &AllocationMap)],
) -> Result<(), StoreError> {
    if consumers.is_empty() {
        return Ok(());
    }
    let n = consumers.len();
    let (mut uuids, mut projects, mut users, mut generations) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut types, mut created, mut updated) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for (row, _) in consumers {
        uuids.push(row.uuid.to_string());
        projects.push(row.project_id.as_str());
        users.push(row.user_id.as_str());
        generations.push(row.generation);
        types.push(row.consumer_type.as_deref());
        created.push(row.created_at);
        updated.push(row.updated_at);
    }
    tx.execute(
        "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type, created_at, updated_at)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])",
        &[&uuids, &projects, &users, &generations, &types, &created, &updated],
    )
    .map_err(classify)?;
    insert_allocations(tx, uuids.iter().map(String::as_str).zip(consumers.iter().map(|(_, allocations)| *allocations)))
}

/// Allocation rows of one or more consumers in one statement, each
/// consumer's rows in its map's order (their `seq` keeps it).
fn insert_allocations<'a, C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    consumers: impl IntoIterator<Item = (&'a str, &'a AllocationMap)>,
) -> Result<(), StoreError> {
    let (mut owners, mut providers, mut classes, mut amounts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (consumer, allocations) in consumers {
        for (provider, per_class) in allocations {
            for (class, used) in per_class {
                owners.push(consumer);
                providers.push(provider.to_string());
                classes.push(class.as_str());
                amounts.push(*used);
            }
        }
    }
    if !owners.is_empty() {
        tx.execute(
            "INSERT INTO allocations (consumer_uuid, provider_uuid, resource_class, used)
             SELECT c, p, r, u FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
                 WITH ORDINALITY AS t(c, p, r, u, n)
             ORDER BY n",
            &[&owners, &providers, &classes, &amounts],
        )
        .map_err(classify)?;
    }
    Ok(())
}

/// Provider updates under generation compare-and-swap, in one statement:
/// every provider must still have its expected generation.
fn bump_providers<C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    providers: &[(&ProviderRow, i64)],
) -> Result<(), StoreError> {
    if providers.is_empty() {
        return Ok(());
    }
    let n = providers.len();
    let (mut uuids, mut names, mut generations, mut parents) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut roots, mut updated, mut expected) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for (row, expect) in providers {
        uuids.push(row.uuid.to_string());
        names.push(row.name.as_str());
        generations.push(row.generation);
        parents.push(row.parent.map(|p| p.to_string()));
        roots.push(row.root.to_string());
        updated.push(row.updated_at);
        expected.push(*expect);
    }
    let changed = tx
        .execute(
            "UPDATE resource_providers AS t
             SET name = v.name, generation = v.generation, parent_uuid = v.parent, root_uuid = v.root,
                 updated_at = v.updated
             FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
                 AS v(uuid, name, generation, parent, root, updated, expected)
             WHERE t.uuid = v.uuid AND t.generation = v.expected",
            &[&uuids, &names, &generations, &parents, &roots, &updated, &expected],
        )
        .map_err(classify)?;
    if changed == n as u64 {
        Ok(())
    } else {
        Err(StoreError::Conflict("resource provider generation changed".to_owned()))
    }
}

/// Write one writer's change set under a savepoint: on error it is rolled
/// back alone (the transaction goes on if the error is the change's own).
/// `open` says whether the previous writer's savepoint is still open: it
/// is released in the round trip that opens this one (and the last one is
/// committed with the transaction), so a writer costs one round trip
/// besides its statements; the first savepoint is opened with the
/// transaction.
///
/// A change set of compute rows alone (admitting a boot, a task state)
/// needs no savepoint: its upserts and deletes by key can fail only for
/// the database's own reasons once its keys are known to fit the index
/// and hold no NUL ([`ComputeRows::refusable`]), and such a failure fails
/// the whole batch anyway. So it is not written at once either: its rows
/// join `deferred`, written in one statement per kind before the next
/// writer that needs a savepoint and before the commit. Each writer of a
/// group commit was a round trip (and the leader waited for it) before
/// the next one's turn; a burst of admissions is now one upsert.
fn write_isolated<C: postgres::GenericClient>(
    tx: &mut Cached<'_, C>,
    changes: &WorldChangeSet,
    open: &mut bool,
    first: &mut bool,
    feed: &mut codec::FeedText,
    deferred: &mut ComputeRows,
) -> Result<(), StoreError> {
    let rows = ComputeRows::of(changes.changes.iter().filter_map(|change| match change {
        WorldChange::Compute(change) => Some(change),
        WorldChange::Placement(_) => None,
    }));
    let placement = changes.changes.iter().any(|change| matches!(change, WorldChange::Placement(_)));
    if !*first && !placement && !rows.refusable() {
        feed_written(feed, changes, &rows);
        deferred.each.extend(rows.each);
        return Ok(());
    }
    // What earlier writers deferred goes first: this writer's statements
    // (and a rollback to its savepoint) come after them.
    deferred.flush(tx)?;
    if std::mem::take(first) {
        // Opened by the transaction's first round trip.
    } else if *open {
        tx.conn.batch_execute("RELEASE SAVEPOINT berth_member; SAVEPOINT berth_member").map_err(classify)?;
    } else {
        tx.conn.batch_execute("SAVEPOINT berth_member").map_err(classify)?;
    }
    *open = true;
    let written = write_placement_changes(
        tx,
        changes.changes.iter().filter_map(|change| match change {
            WorldChange::Placement(change) => Some(change),
            WorldChange::Compute(_) => None,
        }),
    )
    .and_then(|()| rows.write(tx));
    if let Err(err) = written {
        if err.is_per_change() {
            tx.conn
                .batch_execute("ROLLBACK TO SAVEPOINT berth_member; RELEASE SAVEPOINT berth_member")
                .map_err(classify)?;
            *open = false;
        }
        return Err(err);
    }
    feed_written(feed, changes, &rows);
    Ok(())
}

/// Add a written change set to the batch's change feed payload, its
/// compute changes as the rows they wrote.
fn feed_written(feed: &mut codec::FeedText, changes: &WorldChangeSet, rows: &ComputeRows) {
    let mut each = rows.each.iter();
    for change in &changes.changes {
        match change {
            WorldChange::Placement(change) => feed.placement(change),
            WorldChange::Compute(_) => {
                if let Some((kind, key, body)) = each.next() {
                    feed.compute(kind, key, body.as_deref());
                }
            }
        }
    }
}

/// Quote `text` as a PostgreSQL dollar-quoted literal, with a tag that
/// does not occur in it.
fn dollar_quoted(text: &str) -> String {
    let mut tag = String::from("$berth$");
    let mut n = 0u32;
    while text.contains(&tag) {
        n += 1;
        tag = format!("$berth{n}$");
    }
    format!("{tag}{text}{tag}")
}

/// Append `payload` to the change feed and commit, in one round trip;
/// returns the entry's sequence number.
fn append_and_commit(client: &mut Client, payload: &str) -> Result<Seq, StoreError> {
    let sql = format!("INSERT INTO berth_changes (payload) VALUES ({}) RETURNING seq; COMMIT", dollar_quoted(payload));
    let messages = client.simple_query(&sql).map_err(classify)?;
    let seq = messages.iter().find_map(|message| match message {
        postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    seq.and_then(|seq| seq.parse().ok())
        .ok_or_else(|| StoreError::Internal("change feed: no sequence number returned".into()))
}

impl Store for PostgresStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        self.with_conn(&self.read_conn, |conn| {
            let mut tx = conn
                .client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .map_err(classify)?;
            let loaded = load_state(&mut tx)?;
            tx.commit().map_err(classify)?;
            Ok(loaded)
        })
    }

    fn write(&self, seen: Seq, plan: &mut PlanFn<'_>) -> Result<Option<Seq>, StoreError> {
        self.with_conn(&self.write_conn, |conn| {
            // Round trips: BEGIN with the writer lock and the first
            // savepoint; the catch-up; each writer's statements (and one
            // savepoint for each writer after the first); the feed entry
            // with COMMIT. On any error the transaction is rolled back
            // (a broken connection is dropped by `with_conn`).
            conn.client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY}); SAVEPOINT berth_member"
                ))
                .map_err(classify)?;
            let result = self.write_locked(conn, seen, plan);
            if !matches!(result, Ok(Some(_))) && !conn.client.is_closed() {
                if let Err(err) = conn.client.batch_execute("ROLLBACK") {
                    // The connection's state is unknown: drop it.
                    return Err(StoreError::Unavailable(format!("rollback failed: {err}")));
                }
            }
            result
        })
    }

    fn changes_since(&self, seen: Seq) -> Result<CatchUp, StoreError> {
        self.with_conn(&self.read_conn, |conn| {
            read_changes(&mut Cached { conn: &mut conn.client, statements: &mut conn.statements }, seen)
        })
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.with_conn(&self.read_conn, |conn| conn.client.simple_query("SELECT 1").map(|_| ()).map_err(classify))
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }

    fn shared(&self) -> bool {
        true
    }

    fn feed_head(&self) -> Result<Seq, StoreError> {
        self.with_conn(&self.read_conn, |conn| {
            let mut cached = Cached { conn: &mut conn.client, statements: &mut conn.statements };
            let row = cached.query_one("SELECT COALESCE(MAX(seq), 0) FROM berth_changes", &[]).map_err(classify)?;
            Ok(row.get::<_, i64>(0))
        })
    }

    fn notify_peers(&self, payload: &str) -> Result<(), StoreError> {
        let channel = peers::channel(self.schema.as_deref());
        let message = peers::message(&self.peer_token, payload);
        self.with_conn(&self.notify_conn, |conn| {
            let mut cached = Cached { conn: &mut conn.client, statements: &mut conn.statements };
            cached.execute("SELECT pg_notify($1, $2)", &[&channel, &message]).map(|_| ()).map_err(classify)
        })
    }

    fn listen_peers(&self, on: Box<dyn Fn(&str) + Send + Sync>) -> bool {
        let (config, channel, own) =
            (self.config.clone(), peers::channel(self.schema.as_deref()), self.peer_token.clone());
        std::thread::Builder::new()
            .name("berth-peers".into())
            .spawn(move || peers::listen_forever(config, channel, own, on))
            .is_ok()
    }
}

fn load_state(tx: &mut Transaction<'_>) -> Result<Loaded, StoreError> {
    let seq: i64 = tx
        .query_one(
            "SELECT GREATEST((SELECT COALESCE(MAX(seq), 0) FROM berth_changes),
                             (SELECT pruned_through FROM berth_feed_state WHERE id = 1))",
            &[],
        )
        .map_err(classify)?
        .get(0);
    let mut query = |sql: &str| tx.query(sql, &[]).map_err(classify);
    let mut rows = Rows::default();
    for row in query("SELECT id, name, created_at, updated_at FROM resource_classes")? {
        rows.resource_classes.push((row.get(0), row.get(1), row.get(2), row.get(3)));
    }
    for row in query("SELECT id, name, created_at FROM traits")? {
        rows.traits.push((row.get(0), row.get(1), row.get(2)));
    }
    for row in query(
        "SELECT id, uuid, name, generation, parent_uuid, root_uuid, created_at, updated_at FROM resource_providers",
    )? {
        let parent: Option<String> = row.get(4);
        rows.providers.push(ProviderRow {
            id: row.get(0),
            uuid: parse_uuid(row.get(1))?,
            name: row.get(2),
            generation: row.get(3),
            parent: parent.as_deref().map(parse_uuid).transpose()?,
            root: parse_uuid(row.get(5))?,
            created_at: row.get(6),
            updated_at: row.get(7),
        });
    }
    for row in query(
        "SELECT provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio
         FROM inventories",
    )? {
        let inventory = Inventory {
            total: row.get(2),
            reserved: row.get(3),
            min_unit: row.get(4),
            max_unit: row.get(5),
            step_size: row.get(6),
            allocation_ratio: row.get(7),
        };
        rows.inventories.push((parse_uuid(row.get(0))?, row.get(1), inventory));
    }
    for row in query("SELECT provider_uuid, trait FROM provider_traits")? {
        rows.provider_traits.push((parse_uuid(row.get(0))?, row.get(1)));
    }
    for row in query("SELECT provider_uuid, aggregate_uuid FROM provider_aggregates")? {
        rows.provider_aggregates.push((parse_uuid(row.get(0))?, parse_uuid(row.get(1))?));
    }
    for row in
        query("SELECT consumer_uuid, provider_uuid, resource_class, used FROM allocations ORDER BY seq, consumer_uuid")?
    {
        rows.allocations.push((parse_uuid(row.get(0))?, parse_uuid(row.get(1))?, row.get(2), row.get(3)));
    }
    for row in
        query("SELECT uuid, project_id, user_id, generation, consumer_type, created_at, updated_at FROM consumers")?
    {
        rows.consumers.push(ConsumerRow {
            uuid: parse_uuid(row.get(0))?,
            project_id: row.get(1),
            user_id: row.get(2),
            generation: row.get(3),
            consumer_type: row.get(4),
            created_at: row.get(5),
            updated_at: row.get(6),
        });
    }
    for row in query("SELECT kind, key, body FROM compute_rows")? {
        let (kind, key, body): (String, String, String) = (row.get(0), row.get(1), row.get(2));
        let body: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| StoreError::Internal(format!("compute row {kind}/{key}: {e}")))?;
        rows.compute.push(berth_store::json::row_change(&kind, &key, Some(&body))?);
    }
    Ok(Loaded { state: rows.into_state(), seq })
}

/// The `compute_rows` a change set writes, each change as its row (kind,
/// key, body as JSON text, `None` for a row gone), in order. Compute rows
/// live in a table of their own, so their order relative to the placement
/// changes does not matter; among themselves only the last change of each
/// row counts.
#[derive(Default)]
struct ComputeRows {
    each: Vec<(&'static str, String, Option<String>)>,
}

/// The longest key written without a savepoint: far below what a btree
/// index entry holds (about 2,700 bytes).
const PLAIN_KEY_BYTES: usize = 1024;

impl ComputeRows {
    fn of<'c>(changes: impl Iterator<Item = &'c ComputeChange>) -> Self {
        let each = changes
            .map(|change| {
                let (kind, key, body) = berth_store::json::change_row(change);
                (kind, key, body.map(|body| body.to_string()))
            })
            .collect();
        ComputeRows { each }
    }

    /// Could the database refuse these rows for their own sake? Only a key
    /// with NUL (text cannot hold it) or too long for the index can be;
    /// bodies are JSON text, which escapes NUL.
    fn refusable(&self) -> bool {
        self.each.iter().any(|(_, key, body)| {
            key.len() > PLAIN_KEY_BYTES || key.contains('\0') || body.as_ref().is_some_and(|body| body.contains('\0'))
        })
    }

    /// Write deferred rows (none: nothing) and empty the list. A refusal
    /// here fails the batch: they were written without a savepoint.
    fn flush<C: postgres::GenericClient>(&mut self, tx: &mut Cached<'_, C>) -> Result<(), StoreError> {
        if self.each.is_empty() {
            return Ok(());
        }
        let written = self.write(tx).map_err(|err| match err {
            StoreError::Rejected(m) | StoreError::Conflict(m) => {
                StoreError::Internal(format!("compute rows refused without a savepoint: {m}"))
            }
            other => other,
        });
        self.each.clear();
        written
    }

    /// At most two statements: one upsert for the rows put, one delete for
    /// the rows gone (each row as its last change left it).
    fn write<C: postgres::GenericClient>(&self, tx: &mut Cached<'_, C>) -> Result<(), StoreError> {
        let mut last: HashMap<(&str, &str), usize> = HashMap::with_capacity(self.each.len());
        for (n, (kind, key, _)) in self.each.iter().enumerate() {
            last.insert((kind, key.as_str()), n);
        }
        let (mut put_kinds, mut put_keys, mut put_bodies) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gone_kinds, mut gone_keys) = (Vec::new(), Vec::new());
        for (n, (kind, key, body)) in self.each.iter().enumerate() {
            if last.get(&(*kind, key.as_str())) != Some(&n) {
                continue;
            }
            match body {
                Some(body) => {
                    put_kinds.push(*kind);
                    put_keys.push(key.as_str());
                    put_bodies.push(body.as_str());
                }
                None => {
                    gone_kinds.push(*kind);
                    gone_keys.push(key.as_str());
                }
            }
        }
        if !put_kinds.is_empty() {
            tx.execute(
                "INSERT INTO compute_rows (kind, key, body)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
                 ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body",
                &[&put_kinds, &put_keys, &put_bodies],
            )
            .map_err(classify)?;
        }
        if !gone_kinds.is_empty() {
            tx.execute(
                "DELETE FROM compute_rows WHERE (kind, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
                &[&gone_kinds, &gone_keys],
            )
            .map_err(classify)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::split_schema;

    #[test]
    fn schema_parameter_is_split_off() {
        assert_eq!(split_schema("postgres://h/db"), ("postgres://h/db".into(), None));
        assert_eq!(split_schema("postgres://h/db?schema=t1"), ("postgres://h/db".into(), Some("t1".into())));
        assert_eq!(
            split_schema("postgres://h/db?sslmode=disable&schema=t1"),
            ("postgres://h/db?sslmode=disable".into(), Some("t1".into()))
        );
    }
}
