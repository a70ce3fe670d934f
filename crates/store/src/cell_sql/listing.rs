//! Listing instances: the SQL of one page ([`list_sql`]: filters, sort
//! keys in [`compare_instances`] order, the marker, the limit) and
//! [`list_instances`], which runs it and applies the name regex.
//!
//! [`compare_instances`]: berth_compute_model::cell::compare_instances

use berth_compute_model::cell::{Instance, InstanceQuery, Marker, SortValue, SORT_KEYS};

use super::instances::{brief_select_list, decode_instance, instance_kinds, instance_select_list};
use super::{boolean, int, text, Builder, CellConn, Dialect, Kind, Result, Sql};
use crate::StoreError;

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

#[cfg(test)]
mod tests {
    use berth_compute_model::cell::{InstanceFilter, SortKey};
    use uuid::Uuid;

    use super::*;

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
