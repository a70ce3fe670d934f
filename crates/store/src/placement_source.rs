//! Reading an OpenStack Placement database (MariaDB/MySQL or PostgreSQL)
//! into a [`Dump`] for `berth import placement`.
//!
//! Like [`crate::cell_sql`], this module holds SQL *text* and never talks
//! to a database: a driver runs each query through [`SourceConn`] and
//! hands back every cell as text (MySQL's text protocol and PostgreSQL's
//! simple query protocol both do so, and text keeps a MySQL `FLOAT`
//! allocation ratio such as `0.9` exactly as Placement's own driver reads
//! it). The schema is upstream's (openstack-placement's SQLAlchemy models
//! and alembic migrations); only the versions in [`KNOWN_VERSIONS`] are
//! read, anything else is refused before a row is read.

use std::collections::{BTreeMap, HashMap};

use berth_model::import::{Dump, DumpConsumer, DumpProvider};
use berth_model::{parents_first, AllocationMap, ConsumerRow, Inventory, ProviderRow};
use uuid::Uuid;

/// The alembic revisions of Placement's schema this reader knows: the
/// consumer types table (Placement 6.0, Xena) and the index clean-up that
/// is head from Placement 8.0 (Zed) through 16.0 (2026.1).
pub const KNOWN_VERSIONS: [&str; 2] = ["422ece571366", "a082b8bb98d0"];

/// Which SQL dialect the source speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceDialect {
    /// MariaDB or MySQL.
    Mysql,
    /// PostgreSQL.
    Postgres,
}

impl SourceDialect {
    /// Seconds since the epoch of a `DATETIME` column holding UTC (the
    /// MySQL session must use time zone `+00:00`).
    fn epoch(self, column: &str) -> String {
        match self {
            SourceDialect::Mysql => format!("COALESCE(UNIX_TIMESTAMP({column}), 0)"),
            SourceDialect::Postgres => format!("COALESCE(CAST(EXTRACT(EPOCH FROM {column}) AS BIGINT), 0)"),
        }
    }
}

/// A connection to the source database: runs one query and returns its
/// rows, each cell as text (`None` for NULL).
pub trait SourceConn {
    /// The dialect of the database.
    fn dialect(&self) -> SourceDialect;
    /// Run `sql` and return every row.
    fn text_rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String>;
}

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The database could not be queried.
    #[error("reading the Placement database: {0}")]
    Query(String),
    /// The schema is not one this reader knows.
    #[error("{0}")]
    Version(String),
    /// A row does not hold what Placement's schema promises.
    #[error("the Placement database holds an unexpected value: {0}")]
    Data(String),
}

type Row = Vec<Option<String>>;

fn rows(conn: &mut dyn SourceConn, sql: &str) -> Result<Vec<Row>, SourceError> {
    conn.text_rows(sql).map_err(SourceError::Query)
}

fn text(row: &Row, idx: usize, what: &str) -> Result<String, SourceError> {
    row.get(idx).cloned().flatten().ok_or_else(|| SourceError::Data(format!("{what} is NULL")))
}

fn int(row: &Row, idx: usize, what: &str) -> Result<i64, SourceError> {
    let value = text(row, idx, what)?;
    // UNIX_TIMESTAMP of a DATETIME(6) has decimals.
    let whole = value.split('.').next().unwrap_or("");
    whole.parse().map_err(|_| SourceError::Data(format!("{what} is {value:?}, not an integer")))
}

fn opt_int(row: &Row, idx: usize, what: &str) -> Result<Option<i64>, SourceError> {
    match row.get(idx).cloned().flatten() {
        None => Ok(None),
        Some(_) => int(row, idx, what).map(Some),
    }
}

fn uuid(row: &Row, idx: usize, what: &str) -> Result<Uuid, SourceError> {
    let value = text(row, idx, what)?;
    Uuid::parse_str(&value).map_err(|_| SourceError::Data(format!("{what} is {value:?}, not a uuid")))
}

/// Check the schema version (`alembic_version`), refusing one this reader
/// does not know with a message that says what to do.
pub fn check_version(conn: &mut dyn SourceConn) -> Result<String, SourceError> {
    let found = conn.text_rows("SELECT version_num FROM alembic_version").map_err(|err| {
        SourceError::Version(format!(
            "this does not look like a Placement database (no alembic_version table: {err}); \
             run `placement-manage db sync` on it first"
        ))
    })?;
    let versions: Vec<String> = found.into_iter().filter_map(|row| row.into_iter().next().flatten()).collect();
    match versions.as_slice() {
        [one] if KNOWN_VERSIONS.contains(&one.as_str()) => Ok(one.clone()),
        _ => Err(SourceError::Version(format!(
            "unknown Placement schema version {:?} (alembic_version); berth imports {}: \
             upgrade the old Placement to 6.0 or later (`placement-manage db sync`) and retry, \
             or a berth that knows the newer schema",
            versions.join(","),
            KNOWN_VERSIONS.join(", ")
        ))),
    }
}

/// Read the whole Placement database. A source inventory or allocation
/// names a standard class by its index in os-resource-classes' list, which
/// is berth's [`berth_model::standard_resource_classes`] order.
pub fn read_placement(conn: &mut dyn SourceConn) -> Result<Dump, SourceError> {
    check_version(conn)?;
    let d = conn.dialect();
    let mut class_names: HashMap<i64, String> =
        berth_model::standard_resource_classes().enumerate().map(|(idx, name)| (idx as i64, name.to_owned())).collect();
    let mut dump = Dump::default();
    for row in rows(conn, &format!("SELECT id, name, {} FROM resource_classes ORDER BY id", d.epoch("created_at")))? {
        let (id, name) = (int(&row, 0, "resource_classes.id")?, text(&row, 1, "resource_classes.name")?);
        class_names.insert(id, name.clone());
        dump.resource_classes.push((id, name, int(&row, 2, "resource_classes.created_at")?));
    }
    let class = |id: i64| {
        class_names.get(&id).cloned().ok_or_else(|| {
            SourceError::Data(format!(
                "resource class id {id} is not in resource_classes nor a standard class berth knows"
            ))
        })
    };
    let mut trait_names = HashMap::new();
    for row in rows(conn, &format!("SELECT id, name, {} FROM traits ORDER BY id", d.epoch("created_at")))? {
        let name = text(&row, 1, "traits.name")?;
        trait_names.insert(int(&row, 0, "traits.id")?, name.clone());
        dump.traits.push((name, int(&row, 2, "traits.created_at")?));
    }
    let mut aggregates = HashMap::new();
    for row in rows(conn, "SELECT id, uuid FROM placement_aggregates")? {
        aggregates.insert(int(&row, 0, "placement_aggregates.id")?, uuid(&row, 1, "placement_aggregates.uuid")?);
    }
    dump.counts.aggregates = aggregates.len();

    // Providers by source id, with the uuids their parent and root ids name.
    let sql = format!(
        "SELECT id, uuid, name, generation, parent_provider_id, root_provider_id, {}, {} \
         FROM resource_providers ORDER BY id",
        d.epoch("created_at"),
        d.epoch("updated_at")
    );
    let provider_rows = rows(conn, &sql)?;
    let mut uuid_of = HashMap::new();
    for row in &provider_rows {
        uuid_of.insert(int(row, 0, "resource_providers.id")?, uuid(row, 1, "resource_providers.uuid")?);
    }
    let linked = |id: i64, what: &str| {
        uuid_of.get(&id).copied().ok_or_else(|| SourceError::Data(format!("{what} {id} names no provider")))
    };
    let mut providers: Vec<DumpProvider> = Vec::with_capacity(provider_rows.len());
    let mut index_of = HashMap::new();
    for row in &provider_rows {
        let id = int(row, 0, "resource_providers.id")?;
        let provider_uuid = uuid(row, 1, "resource_providers.uuid")?;
        let parent = opt_int(row, 4, "resource_providers.parent_provider_id")?
            .map(|p| linked(p, "parent_provider_id"))
            .transpose()?;
        let root = match opt_int(row, 5, "resource_providers.root_provider_id")? {
            Some(r) => linked(r, "root_provider_id")?,
            None => provider_uuid,
        };
        index_of.insert(id, providers.len());
        providers.push(DumpProvider {
            uuid: provider_uuid,
            // Placement's API never writes a NULL name; an old row might.
            name: row.get(2).cloned().flatten().unwrap_or_else(|| provider_uuid.to_string()),
            generation: opt_int(row, 3, "resource_providers.generation")?.unwrap_or(0),
            parent,
            root,
            created_at: int(row, 6, "resource_providers.created_at")?,
            updated_at: int(row, 7, "resource_providers.updated_at")?,
            inventories: BTreeMap::new(),
            traits: Default::default(),
            aggregates: Default::default(),
        });
    }
    let provider_at = |id: i64, what: &str| {
        index_of
            .get(&id)
            .copied()
            .ok_or_else(|| SourceError::Data(format!("{what} names provider id {id}, which does not exist")))
    };
    let sql = "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, \
               allocation_ratio FROM inventories ORDER BY id";
    for row in rows(conn, sql)? {
        let idx = provider_at(int(&row, 0, "inventories.resource_provider_id")?, "an inventory")?;
        let ratio_text = text(&row, 7, "inventories.allocation_ratio")?;
        let allocation_ratio = ratio_text
            .parse::<f64>()
            .map_err(|_| SourceError::Data(format!("allocation_ratio {ratio_text:?} is not a number")))?;
        let inventory = Inventory {
            total: int(&row, 2, "inventories.total")?,
            reserved: int(&row, 3, "inventories.reserved")?,
            min_unit: int(&row, 4, "inventories.min_unit")?,
            max_unit: int(&row, 5, "inventories.max_unit")?,
            step_size: int(&row, 6, "inventories.step_size")?,
            allocation_ratio,
        };
        providers[idx].inventories.insert(class(int(&row, 1, "inventories.resource_class_id")?)?, inventory);
        dump.counts.inventories += 1;
    }
    for row in rows(conn, "SELECT resource_provider_id, trait_id FROM resource_provider_traits")? {
        let idx = provider_at(int(&row, 0, "resource_provider_traits.resource_provider_id")?, "a provider trait")?;
        let trait_id = int(&row, 1, "resource_provider_traits.trait_id")?;
        let name = trait_names
            .get(&trait_id)
            .ok_or_else(|| SourceError::Data(format!("trait id {trait_id} is not in traits")))?;
        providers[idx].traits.insert(name.clone());
    }
    for row in rows(conn, "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates")? {
        // Upstream leaves a deleted provider's aggregate rows behind.
        let Ok(idx) = provider_at(int(&row, 0, "resource_provider_aggregates.resource_provider_id")?, "") else {
            continue;
        };
        let aggregate_id = int(&row, 1, "resource_provider_aggregates.aggregate_id")?;
        let aggregate = aggregates
            .get(&aggregate_id)
            .ok_or_else(|| SourceError::Data(format!("aggregate id {aggregate_id} is not in placement_aggregates")))?;
        providers[idx].aggregates.insert(*aggregate);
    }
    // Parents first, so that each batch only names providers already
    // written (a re-parent can give a child a smaller id than its parent).
    let order = parents_first(
        &providers
            .iter()
            .map(|p| ProviderRow {
                id: 0,
                uuid: p.uuid,
                name: String::new(),
                generation: 0,
                parent: p.parent,
                root: p.root,
                created_at: 0,
                updated_at: 0,
            })
            .collect::<Vec<_>>(),
    );
    let mut slots: Vec<Option<DumpProvider>> = providers.into_iter().map(Some).collect();
    dump.providers = order.into_iter().filter_map(|idx| slots[idx].take()).collect();

    dump.counts.projects =
        rows(conn, "SELECT COUNT(*) FROM projects")?.first().map_or(Ok(0), |r| int(r, 0, "count"))? as usize;
    dump.counts.users =
        rows(conn, "SELECT COUNT(*) FROM users")?.first().map_or(Ok(0), |r| int(r, 0, "count"))? as usize;
    dump.counts.consumer_types =
        rows(conn, "SELECT COUNT(*) FROM consumer_types")?.first().map_or(Ok(0), |r| int(r, 0, "count"))? as usize;
    let sql = format!(
        "SELECT c.uuid, p.external_id, u.external_id, c.generation, t.name, {}, {} FROM consumers c \
         JOIN projects p ON p.id = c.project_id JOIN users u ON u.id = c.user_id \
         LEFT JOIN consumer_types t ON t.id = c.consumer_type_id ORDER BY c.id",
        d.epoch("c.created_at"),
        d.epoch("c.updated_at")
    );
    let mut consumers: Vec<DumpConsumer> = Vec::new();
    let mut consumer_at = HashMap::new();
    for row in rows(conn, &sql)? {
        let consumer_uuid = uuid(&row, 0, "consumers.uuid")?;
        consumer_at.insert(consumer_uuid, consumers.len());
        consumers.push(DumpConsumer {
            row: ConsumerRow {
                uuid: consumer_uuid,
                project_id: text(&row, 1, "projects.external_id")?,
                user_id: text(&row, 2, "users.external_id")?,
                generation: int(&row, 3, "consumers.generation")?,
                consumer_type: row.get(4).cloned().flatten(),
                created_at: int(&row, 5, "consumers.created_at")?,
                updated_at: int(&row, 6, "consumers.updated_at")?,
            },
            allocations: AllocationMap::new(),
        });
    }
    let sql = "SELECT consumer_id, resource_provider_id, resource_class_id, used FROM allocations ORDER BY id";
    for row in rows(conn, sql)? {
        let consumer_uuid = uuid(&row, 0, "allocations.consumer_id")?;
        let idx = *consumer_at.get(&consumer_uuid).ok_or_else(|| {
            SourceError::Data(format!(
                "allocation of consumer {consumer_uuid} has no consumers row; \
                 run `placement-manage db online_data_migrations` on the old Placement first"
            ))
        })?;
        let provider = dump_provider_uuid(&uuid_of, int(&row, 1, "allocations.resource_provider_id")?)?;
        let class_name = class(int(&row, 2, "allocations.resource_class_id")?)?;
        let used = int(&row, 3, "allocations.used")?;
        *consumers[idx].allocations.entry(provider).or_default().entry(class_name).or_insert(0) += used;
        dump.counts.allocations += 1;
    }
    let before = consumers.len();
    consumers.retain(|c| !c.allocations.is_empty());
    dump.counts.empty_consumers = before - consumers.len();
    dump.consumers = consumers;
    Ok(dump)
}

fn dump_provider_uuid(uuid_of: &HashMap<i64, Uuid>, id: i64) -> Result<Uuid, SourceError> {
    uuid_of
        .get(&id)
        .copied()
        .ok_or_else(|| SourceError::Data(format!("an allocation names provider id {id}, which does not exist")))
}
