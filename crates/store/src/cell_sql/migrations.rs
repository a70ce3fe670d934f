//! The `migrations` table: a row encoded and decoded, the statements a
//! move op uses (select, insert, update), and [`migrations`], the listing
//! by filter.

use berth_compute_model::cell::{Migration, MigrationFilter};
use uuid::Uuid;

use super::{int, opt_int, opt_text, text, Builder, CellConn, Cols, Kind, Result, Value};
use crate::cell::MigrationUpdate;
use crate::StoreError;

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

pub(super) fn select_migration(conn: &mut dyn CellConn, uuid: &Uuid, lock: bool) -> Result<Option<Migration>> {
    let d = conn.dialect();
    let sql = format!(
        "SELECT {MIGRATION_COLUMNS} FROM migrations WHERE uuid = {} AND deleted = 0{}",
        d.placeholder(1),
        if lock { d.for_update() } else { "" }
    );
    let rows = conn.query(&sql, &[text(&uuid.to_string())], &MIGRATION_KINDS)?;
    rows.first().map(|r| migration_from_row(r)).transpose()
}

pub(super) fn insert_migration(conn: &mut dyn CellConn, m: &Migration) -> Result<()> {
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

pub(super) fn update_migration(
    conn: &mut dyn CellConn,
    uuid: &Uuid,
    m: &mut Migration,
    u: &MigrationUpdate,
) -> Result<()> {
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
