//! `GET /os-migrations` (every move across the cells, Nova's filters,
//! 2.59 paging and `changes-since`, 2.66 `changes-before`, 2.80 user and
//! project) and the server migrations of live migration (2.22–2.24):
//! `GET /servers/{id}/migrations[/{mid}]` (in progress only, as Nova),
//! `DELETE …/{mid}` (abort) and `POST …/{mid}/action {"force_complete"}`.

use std::sync::Arc;

use berth_compute::servers::ServerRecord;
use berth_compute_model::cell::{Migration, MigrationFilter};
use berth_http::{ApiError, HandlerFuture, Req, Resp};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use axum::http::StatusCode;

use crate::api::{self, authorize, authorize_on, body, version, ComputeCtx, NovaResult};
use crate::views::{page_is_full, strtime};

const RULE: &str = "os_compute_api:os-migrations:";

/// Query parameters Nova's schema knows, per microversion (2.59 made the
/// schema strict).
fn known(v: u16) -> Vec<&'static str> {
    let mut names = vec!["hidden", "host", "instance_uuid", "source_compute", "status", "migration_type"];
    if v >= 59 {
        names.extend(["limit", "marker", "changes-since"]);
    }
    if v >= 66 {
        names.push("changes-before");
    }
    if v >= 80 {
        names.extend(["user_id", "project_id"]);
    }
    names
}

fn bad_time(key: &str, value: &str) -> ApiError {
    ApiError::bad_request(format!(
        "Invalid input for query parameters {key}. Value: {value}. '{value}' is not a 'date-time'"
    ))
}

/// `GET /os-migrations`.
pub fn list_migrations(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req).0;
        authorize(&req, &format!("{RULE}index"))?;
        if v >= 59 {
            let known = known(v);
            if let Some((name, _)) = req.query.iter().find(|(n, _)| !known.contains(&n.as_str())) {
                return Err(ApiError::bad_request(format!(
                    "Invalid input for query parameters {name}. Value: {name}. Additional properties are not allowed ('{name}' was unexpected)"
                )));
            }
        }
        let query = |name: &str| req.query_one(name).map(str::to_owned);
        let mut filter = MigrationFilter {
            host: query("host"),
            status: query("status"),
            migration_type: query("migration_type"),
            source_compute: query("source_compute"),
            ..MigrationFilter::default()
        };
        if let Some(text) = query("instance_uuid") {
            match Uuid::parse_str(&text) {
                Ok(uuid) => filter.instance_uuid = Some(uuid),
                // No migration can match a malformed uuid.
                Err(_) => return Ok(Resp::ok(json!({"migrations": []}))),
            }
        }
        if v >= 59 {
            if let Some(text) = query("changes-since") {
                filter.changes_since = Some(api::parse_time(&text).ok_or_else(|| bad_time("changes-since", &text))?);
            }
        }
        if v >= 66 {
            if let Some(text) = query("changes-before") {
                filter.changes_before = Some(api::parse_time(&text).ok_or_else(|| bad_time("changes-before", &text))?);
            }
            if let (Some(since), Some(before)) = (filter.changes_since, filter.changes_before) {
                if before < since {
                    return Err(ApiError::bad_request(
                        "The value of changes-since must be less than or equal to changes-before.",
                    ));
                }
            }
        }
        if v >= 80 {
            filter.user_id = query("user_id");
            filter.project_id = query("project_id");
        }
        // Nova: listing another project's (or every project's) migrations
        // needs `index:all_projects`.
        if filter.project_id.as_deref().is_none_or(|p| p != api::project(&req)) {
            authorize(&req, &format!("{RULE}index:all_projects"))?;
        }
        let add_host = api::allowed(&req, &format!("{RULE}index:host"));
        let (limit, marker) = if v >= 59 { api::paging(&req, ctx.max_limit)? } else { (None, None) };
        let mut rows = ctx.compute.list_migrations(&filter).await.nova()?;
        if let Some(marker) = &marker {
            let position = rows.iter().position(|m| m.uuid.to_string() == *marker);
            match position {
                Some(idx) => {
                    rows.drain(..=idx);
                }
                None => {
                    // The marker may be filtered out: look it up unfiltered.
                    let all = ctx.compute.list_migrations(&MigrationFilter::default()).await.nova()?;
                    let Some(m) = all.iter().find(|m| m.uuid.to_string() == *marker) else {
                        return Err(ApiError::bad_request(format!("Marker {marker} could not be found.")));
                    };
                    let key = (m.created_at, m.id, m.uuid);
                    rows.retain(|r| (r.created_at, r.id, r.uuid) < key);
                }
            }
        }
        if v >= 59 {
            rows.truncate(limit.unwrap_or(ctx.max_limit));
        }
        let links = ctx.links(&req);
        let items: Vec<Value> = rows
            .iter()
            .map(|m| {
                let mut item = view(m, v, add_host);
                // Nova links an in-progress live migration (2.23) to its
                // server migration.
                if v >= 23
                    && m.migration_type == berth_compute::live::MIGRATION_TYPE_LIVE
                    && berth_compute::live::IN_PROGRESS.contains(&m.status.as_str())
                {
                    let collection = format!("servers/{}/migrations", m.instance_uuid);
                    item["links"] = links.resource(&collection, &m.id.to_string());
                }
                item
            })
            .collect();
        let mut body = Map::new();
        let next = match rows.last() {
            Some(last) if v >= 59 && page_is_full(items.len(), limit, ctx.max_limit) => {
                let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                Some(ctx.links(&req).next("os-migrations", &query, &last.uuid.to_string()))
            }
            _ => None,
        };
        body.insert("migrations".into(), Value::Array(items));
        if let Some(next) = next {
            body.insert("migrations_links".into(), next);
        }
        Ok(Resp::ok(Value::Object(body)))
    })
}

/// One migration as Nova renders it at microversion `2.v`.
fn view(m: &Migration, v: u16, add_host: bool) -> Value {
    let host = |value: &Option<String>| if add_host { json!(value) } else { Value::Null };
    let mut out = Map::new();
    out.insert("created_at".into(), json!(strtime(m.created_at)));
    out.insert("dest_compute".into(), host(&m.dest_compute));
    out.insert("dest_host".into(), host(&m.dest_host));
    out.insert("dest_node".into(), host(&m.dest_node));
    out.insert("id".into(), json!(m.id));
    out.insert("instance_uuid".into(), json!(m.instance_uuid.to_string()));
    out.insert("new_instance_type_id".into(), json!(m.new_flavor.id));
    out.insert("old_instance_type_id".into(), json!(m.old_flavor.id));
    out.insert("source_compute".into(), host(&m.source_compute));
    out.insert("source_node".into(), host(&m.source_node));
    out.insert("status".into(), json!(m.status));
    out.insert("updated_at".into(), json!(m.updated_at.map(strtime)));
    if v >= 23 {
        out.insert("migration_type".into(), json!(m.migration_type));
    }
    if v >= 59 {
        out.insert("uuid".into(), json!(m.uuid.to_string()));
    }
    if v >= 80 {
        out.insert("user_id".into(), json!(m.user_id));
        out.insert("project_id".into(), json!(m.project_id));
    }
    Value::Object(out)
}

/// One server migration as Nova's `server_migrations.output` renders it.
/// The fake transfer copies no disks (`disk_*` null); memory is the
/// flavor's, all remaining until the migration ends.
fn server_migration_view(m: &Migration, v: u16, add_host: bool) -> Value {
    let host = |value: &Option<String>| if add_host { json!(value) } else { Value::Null };
    let total = m.new_flavor.memory_mb.max(0) * 1024 * 1024;
    let mut out = Map::new();
    out.insert("created_at".into(), json!(strtime(m.created_at)));
    out.insert("dest_compute".into(), host(&m.dest_compute));
    out.insert("dest_host".into(), host(&m.dest_host));
    out.insert("dest_node".into(), host(&m.dest_node));
    out.insert("disk_processed_bytes".into(), Value::Null);
    out.insert("disk_remaining_bytes".into(), Value::Null);
    out.insert("disk_total_bytes".into(), Value::Null);
    out.insert("id".into(), json!(m.id));
    out.insert("memory_processed_bytes".into(), json!(0));
    out.insert("memory_remaining_bytes".into(), json!(total));
    out.insert("memory_total_bytes".into(), json!(total));
    out.insert("server_uuid".into(), json!(m.instance_uuid.to_string()));
    out.insert("source_compute".into(), host(&m.source_compute));
    out.insert("source_node".into(), host(&m.source_node));
    out.insert("status".into(), json!(m.status));
    out.insert("updated_at".into(), json!(m.updated_at.map(strtime)));
    if v >= 59 {
        out.insert("uuid".into(), json!(m.uuid.to_string()));
    }
    if v >= 80 {
        out.insert("user_id".into(), json!(m.user_id));
        out.insert("project_id".into(), json!(m.project_id));
    }
    Value::Object(out)
}

/// The server of a `/servers/{id}/migrations…` request (404 as Nova when
/// unknown or another project's) and its project, checked against `rule`.
async fn server_for(ctx: &ComputeCtx, req: &Req, rule: &str) -> Result<(Uuid, ServerRecord), ApiError> {
    let text = req.param(0).to_owned();
    let not_found = || ApiError::not_found(format!("Instance {text} could not be found."));
    let id = Uuid::parse_str(&text).map_err(|_| not_found())?;
    let record = ctx.compute.get_server(&id).await.nova()?;
    if record.project_id() != api::project(req) && !api::is_admin(req) {
        return Err(not_found());
    }
    authorize_on(req, rule, record.project_id(), None)?;
    Ok((id, record))
}

/// The migration id of the path: Nova's integer id.
fn migration_id(req: &Req, bad: impl Fn(String) -> ApiError) -> Result<i64, ApiError> {
    let text = req.param(1);
    text.parse::<i64>().map_err(|_| bad(format!("Migration {text} could not be found.")))
}

/// `GET /servers/{id}/migrations` (2.23): the live migrations in progress.
pub fn list_server_migrations(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req).0;
        let (id, record) = server_for(&ctx, &req, "os_compute_api:servers:migrations:index").await?;
        let project = record.project_id().to_owned();
        let add_host = api::allowed_on(&req, "os_compute_api:servers:migrations:index:host", &project);
        let rows = ctx.compute.live_migrations_in_progress(&id).await.nova()?;
        let items: Vec<Value> = rows.iter().map(|m| server_migration_view(m, v, add_host)).collect();
        Ok(Resp::ok(json!({"migrations": items})))
    })
}

/// `GET /servers/{id}/migrations/{mid}` (2.23).
pub fn show_server_migration(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req).0;
        let (id, _) = server_for(&ctx, &req, "os_compute_api:servers:migrations:show").await?;
        let mid = migration_id(&req, ApiError::not_found)?;
        let migration = ctx.compute.show_live_migration(&id, mid).await.nova()?;
        Ok(Resp::ok(json!({"migration": server_migration_view(&migration, v, true)})))
    })
}

/// `DELETE /servers/{id}/migrations/{mid}` (2.24): abort a live migration
/// (2.65: also `queued` or `preparing`).
pub fn delete_server_migration(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req).0;
        let (id, record) = server_for(&ctx, &req, "os_compute_api:servers:migrations:delete").await?;
        crate::handlers::servers::check_lock(&req, &record)?;
        let mid = migration_id(&req, ApiError::not_found)?;
        let caller = crate::handlers::servers::caller(&req);
        ctx.compute.abort_live_migration(&id, mid, v >= 65, &caller).await.nova()?;
        Ok(Resp::empty(StatusCode::ACCEPTED))
    })
}

/// `POST /servers/{id}/migrations/{mid}/action {"force_complete": null}`
/// (2.22).
pub fn server_migration_action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        body(&req, &crate::schemas::servers::force_complete())?;
        let (id, record) = server_for(&ctx, &req, "os_compute_api:servers:migrations:force_complete").await?;
        crate::handlers::servers::check_lock(&req, &record)?;
        let mid = migration_id(&req, ApiError::bad_request)?;
        let caller = crate::handlers::servers::caller(&req);
        ctx.compute.force_complete_live_migration(&id, mid, &caller).await.nova()?;
        Ok(Resp::empty(StatusCode::ACCEPTED))
    })
}
