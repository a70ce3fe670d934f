//! The `instances` table and its `instance_tags`: the columns
//! ([`INSTANCE_COLUMNS`]), a row encoded ([`instance_values`]) and decoded
//! ([`instance_from_row`]), an [`InstanceUpdate`] applied and an
//! [`Expect`] checked in memory, and the statements that write or lock
//! one row.

use berth_compute_model::cell::Instance;
use berth_compute_model::InstanceSpec;
use uuid::Uuid;

use super::{boolean, int, opt_int, opt_text, text, CellConn, Cols, Dialect, Kind, Result, Value};
use crate::cell::{CellOutcome, Expect, InstanceUpdate};
use crate::StoreError;

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

pub(super) fn instance_kinds() -> Vec<Kind> {
    INSTANCE_COLUMNS.iter().map(|(_, k)| *k).collect()
}

pub(super) fn instance_select_list() -> String {
    INSTANCE_COLUMNS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
}

/// [`instance_select_list`] with an empty `spec`, for brief listings.
pub(super) fn brief_select_list() -> String {
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
pub(super) fn decode_instance(row: &[Value], brief: bool) -> Result<Instance> {
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
            key_data: None,
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
    if let Some(v) = u.access_ip_v4 {
        row.spec.access_ip_v4 = v;
    }
    if let Some(v) = u.access_ip_v6 {
        row.spec.access_ip_v6 = v;
    }
    if let Some(v) = u.auto_disk_config {
        row.spec.auto_disk_config = v;
    }
    if let Some((image_ref, properties)) = u.image {
        row.spec.image_ref = image_ref;
        row.spec.image_properties = properties;
    }
    if let Some((key_name, key_data)) = u.key_pair {
        row.spec.key_name = key_name;
        row.spec.key_data = key_data;
    }
    if let Some(v) = u.user_data {
        row.spec.user_data = v;
    }
    if let Some(v) = u.hostname {
        row.spec.hostname = v;
    }
    if let Some(v) = u.rescue_image {
        row.spec.rescue_image = v;
    }
    if let Some(v) = u.security_groups {
        row.spec.security_groups = v;
    }
    row.updated_at = Some(u.updated_at);
}

/// Does a row satisfy an [`Expect`]?
pub fn expect_matches(row: &Instance, expect: &Expect) -> bool {
    (expect.vm_states.is_empty() || expect.vm_states.contains(&row.vm_state))
        && (expect.task_states.is_empty() || expect.task_states.contains(&row.task_state))
        && !(expect.not_deleted && row.deleted)
        && expect.host.as_ref().is_none_or(|host| *host == row.host)
        && expect.metadata.as_ref().is_none_or(|metadata| *metadata == row.spec.metadata)
        && expect.tags.as_ref().is_none_or(|tags| *tags == row.spec.tags)
        && expect.security_groups.as_ref().is_none_or(|groups| *groups == row.spec.security_groups)
}

pub(super) fn upsert_instance_sql(dialect: Dialect, on_conflict_update: bool) -> String {
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

pub(super) fn update_instance_sql(dialect: Dialect) -> String {
    let sets: Vec<String> = INSTANCE_COLUMNS
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, (c, _))| format!("{c} = {}", dialect.placeholder(i + 1)))
        .collect();
    format!("UPDATE instances SET {} WHERE uuid = {}", sets.join(", "), dialect.placeholder(1))
}

pub(super) fn set_tags(conn: &mut dyn CellConn, uuid: &Uuid, tags: &[String]) -> Result<()> {
    let d = conn.dialect();
    let key = text(&uuid.to_string());
    conn.execute(&d.sql("DELETE FROM instance_tags WHERE uuid = ?1"), std::slice::from_ref(&key))?;
    insert_tags(conn, uuid, tags)
}

/// Add `tags` to an instance (duplicates ignored).
pub(super) fn insert_tags(conn: &mut dyn CellConn, uuid: &Uuid, tags: &[String]) -> Result<()> {
    let d = conn.dialect();
    let key = text(&uuid.to_string());
    let insert = d.sql("INSERT INTO instance_tags (uuid, tag) VALUES (?1, ?2) ON CONFLICT (uuid, tag) DO NOTHING");
    for tag in tags {
        conn.execute(&insert, &[key.clone(), text(tag)])?;
    }
    Ok(())
}

/// One instance by uuid, optionally locked for update.
pub(super) fn select_instance(conn: &mut dyn CellConn, uuid: &Uuid, lock: bool) -> Result<Option<Instance>> {
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

/// Conditionally update an instance inside a move op: `None` when it was
/// applied, else the outcome to report.
pub(super) fn instance_precondition(
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

pub(super) fn write_instance(conn: &mut dyn CellConn, mut row: Instance, update: &InstanceUpdate) -> Result<()> {
    apply_update(&mut row, update);
    let d = conn.dialect();
    conn.execute(&update_instance_sql(d), &instance_values(&row))?;
    if update.tags.is_some() {
        set_tags(conn, &row.uuid, &row.spec.tags)?;
    }
    Ok(())
}
