//! `GET /servers` and `GET /servers/detail`: the query parsed (filters an
//! admin may use, sort keys, paging), the cells listed, each entry drawn
//! (pending, placed, or a stub for a cell that did not answer) and the
//! next link.

use std::sync::Arc;

use berth_compute::servers::{ListRequest, Listed};
use berth_compute_model::cell::{states_for_status, InstanceFilter, SortKey};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use uuid::Uuid;

use super::{access, host_status, ref_id, rule};
use crate::api::{self, authorize, version, ComputeCtx, NovaResult};
use crate::views::page_is_full;
use crate::views::servers::{self as view, HostStatus, ServerExtras};

const NON_ADMIN_FILTERS: &[&str] = &[
    "name",
    "status",
    "image",
    "image_ref",
    "flavor",
    "reservation_id",
    "changes-since",
    "changes-before",
    "tags",
    "tags-any",
    "not-tags",
    "not-tags-any",
    "locked",
    "ip",
    "ip6",
    "availability_zone",
    "config_drive",
    "key_name",
    "created_at",
    "launched_at",
    "terminated_at",
    "power_state",
    "task_state",
    "vm_state",
    "progress",
    "user_id",
    "description",
];
const PAGING: &[&str] = &["limit", "marker", "sort_key", "sort_dir", "all_tenants", "project_id", "tenant_id"];
const SORT_KEYS: &[&str] = &[
    "access_ip_v4",
    "access_ip_v6",
    "auto_disk_config",
    "availability_zone",
    "config_drive",
    "created_at",
    "display_description",
    "display_name",
    "host",
    "hostname",
    "image_ref",
    "instance_type_id",
    "kernel_id",
    "key_name",
    "launch_index",
    "launched_at",
    "locked",
    "locked_by",
    "node",
    "power_state",
    "progress",
    "project_id",
    "ramdisk_id",
    "root_device_name",
    "task_state",
    "terminated_at",
    "updated_at",
    "user_id",
    "uuid",
    "vm_state",
];

struct Parsed {
    request: ListRequest,
    query: Vec<(String, String)>,
    limit: Option<usize>,
    empty: bool,
}

fn parse_list(ctx: &ComputeCtx, req: &Req, detail: bool) -> ApiResult<Parsed> {
    let v = version(req);
    authorize(req, &rule(if detail { "detail" } else { "index" }))?;
    let admin_filters = api::allowed(req, &rule("allow_all_filters"));
    let mut filter = InstanceFilter::default();
    let all_tenants = req.query_one("all_tenants").is_some_and(|v| parse_bool(v).unwrap_or(true));
    if all_tenants {
        authorize(req, &rule(if detail { "detail:get_all_tenants" } else { "index:get_all_tenants" }))?;
        filter.project_id = req.query_one("project_id").or_else(|| req.query_one("tenant_id")).map(str::to_owned);
    } else {
        // Without `all_tenants` Nova ignores `tenant_id` and `project_id`
        // (lp:#1185290), admins included: the caller's own project.
        filter.project_id = Some(api::project(req));
    }
    let mut has_filters = false;
    let mut empty = false;
    for (key, value) in &req.query {
        if PAGING.contains(&key.as_str()) {
            continue;
        }
        if !admin_filters && !NON_ADMIN_FILTERS.contains(&key.as_str()) {
            continue; // Nova silently drops filters a non-admin may not use.
        }
        has_filters = true;
        match key.as_str() {
            "name" => {
                if regex::Regex::new(value).is_err() {
                    return Err(ApiError::bad_request(format!(
                        "Invalid filter name: {value} is not a valid regular expression"
                    )));
                }
                filter.name_regex = Some(value.clone());
            }
            "status" => match states_for_status(value) {
                Some((vm, tasks)) => {
                    let vms: Vec<String> = vm.iter().map(|s| (*s).to_owned()).collect();
                    filter.vm_states.get_or_insert_with(Vec::new).extend(vms);
                    if let Some(tasks) = tasks {
                        if !tasks.is_empty() {
                            filter
                                .task_states
                                .get_or_insert_with(Vec::new)
                                .extend(tasks.iter().map(|s| (*s).to_owned()));
                        }
                    }
                }
                None => empty = true,
            },
            "host" => filter.host = Some(value.clone()),
            "node" => filter.node = Some(value.clone()),
            "availability_zone" => filter.availability_zone = Some(value.clone()),
            "image" | "image_ref" => filter.image_ref = Some(ref_id(value).to_owned()),
            "flavor" => {
                let world = ctx.core.read();
                match world.compute.flavors.get(ref_id(value)) {
                    Some(f) => filter.flavor_id = Some(f.id),
                    None => empty = true,
                }
            }
            "reservation_id" => filter.reservation_id = Some(value.clone()),
            "changes-since" | "changes-before" => {
                let t = api::parse_time(value).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Invalid input for query parameters {key}. Value: {value}. '{value}' is not a 'date-time'"
                    ))
                })?;
                if key == "changes-since" {
                    filter.changes_since = Some(t);
                } else {
                    if v.0 < 66 {
                        continue;
                    }
                    filter.changes_before = Some(t);
                }
            }
            "deleted" => {
                let deleted = parse_bool(value).unwrap_or(false);
                filter.deleted = Some(deleted);
            }
            "tags" | "tags-any" | "not-tags" | "not-tags-any" if v.at_least(26) => {
                let list: Vec<String> = value.split(',').map(str::to_owned).collect();
                match key.as_str() {
                    "tags" => filter.tags.extend(list),
                    "tags-any" => filter.tags_any.extend(list),
                    "not-tags" => filter.not_tags.extend(list),
                    _ => filter.not_tags_any.extend(list),
                }
            }
            "locked" if v.at_least(73) => {
                let locked = parse_bool(value).ok_or_else(|| {
                    ApiError::bad_request(format!("Invalid input for query parameters locked. Value: {value}."))
                })?;
                filter.locked = Some(locked);
            }
            "user_id" => filter.user_id = Some(value.clone()),
            "vm_state" => filter.vm_states.get_or_insert_with(Vec::new).push(value.clone()),
            "task_state" => filter.task_states.get_or_insert_with(Vec::new).push(value.clone()),
            "key_name" | "hostname" | "config_drive" | "access_ip_v4" | "access_ip_v6" => {
                filter.exact.insert(key.clone(), value.clone());
            }
            "uuid" => {
                let id = Uuid::parse_str(value).map_err(|_| ApiError::bad_request(format!("Invalid uuid {value}")))?;
                filter.uuids.get_or_insert_with(Vec::new).push(id);
            }
            _ => {}
        }
    }
    let keys: Vec<&str> = req.query_all("sort_key").collect();
    let dirs: Vec<&str> = req.query_all("sort_dir").collect();
    let mut sort = Vec::new();
    for (idx, key) in keys.iter().enumerate() {
        if !SORT_KEYS.contains(key) {
            return Err(ApiError::bad_request(format!(
                "Invalid input for query parameters sort_key. Value: {key}. '{key}' is not one of {:?}",
                SORT_KEYS
            )));
        }
        let dir = dirs.get(idx).or(dirs.last()).copied().unwrap_or("desc");
        let ascending = match dir {
            "asc" => true,
            "desc" => false,
            other => {
                let _ = other;
                return Err(ApiError::bad_request(
                    "Invalid input received: Unknown sort direction, must be 'desc' or 'asc'",
                ));
            }
        };
        if berth_compute_model::cell::SORT_KEYS.contains(key) {
            sort.push(SortKey { key: (*key).to_owned(), ascending });
        }
    }
    let (limit, marker) = api::paging(req, ctx.max_limit)?;
    let marker = match marker {
        None => None,
        Some(m) => Some(Uuid::parse_str(&m).map_err(|_| ApiError::bad_request(format!("marker [{m}] not found")))?),
    };
    let down_cell_stubs = v.at_least(69) && !has_filters && sort.is_empty();
    let request =
        ListRequest { filter, sort, limit: limit.unwrap_or(ctx.max_limit), marker, down_cell_stubs, brief: !detail };
    Ok(Parsed { request, query: req.query.clone(), limit, empty })
}

fn parse_bool(text: &str) -> Option<bool> {
    api::parse_bool(text)
}

fn list(ctx: Arc<ComputeCtx>, req: Req, detail: bool) -> HandlerFuture {
    Box::pin(async move {
        let parsed = parse_list(&ctx, &req, detail)?;
        let v = version(&req);
        let links = ctx.links(&req);
        let listed = if parsed.empty || parsed.request.limit == 0 {
            Vec::new()
        } else {
            ctx.compute.list_servers(&parsed.request).await.nova()?
        };
        let access = access(&req);
        let mut items = Vec::with_capacity(listed.len());
        let mut last_id = None;
        for entry in &listed {
            let item = match entry {
                Listed::Pending(build) => {
                    let instance = view::build_request_instance(build);
                    last_id = Some(instance.uuid);
                    if detail {
                        let extras = ServerExtras { host_status: Some(HostStatus::NoHost), ..ServerExtras::default() };
                        view::detail_item(v, &links, &access, &instance, &extras)
                    } else {
                        view::index_item(&links, instance.uuid, &instance.spec.display_name)
                    }
                }
                Listed::Placed(instance, fault) => {
                    last_id = Some(instance.uuid);
                    if detail {
                        let extras = ServerExtras {
                            fault: fault.as_ref(),
                            host_status: Some(host_status(&ctx, instance)),
                            ..ServerExtras::default()
                        };
                        view::detail_item(v, &links, &access, instance, &extras)
                    } else {
                        view::index_item(&links, instance.uuid, &instance.spec.display_name)
                    }
                }
                Listed::Stub(mapping) => {
                    last_id = Some(mapping.instance_uuid);
                    if detail {
                        view::down_cell_detail_item(&links, mapping)
                    } else {
                        view::down_cell_index_item(&links, mapping)
                    }
                }
            };
            items.push(item);
        }
        let next = match last_id {
            Some(id) if page_is_full(items.len(), parsed.limit, ctx.max_limit) => {
                let query: Vec<(&str, &str)> = parsed.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let collection = if detail { "servers/detail" } else { "servers" };
                Some(links.next(collection, &query, &id.to_string()))
            }
            _ => None,
        };
        let body = if detail { view::detail(items, next) } else { view::index(items, next) };
        Ok(Resp::ok(body))
    })
}

/// `GET /servers`.
pub fn index(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    list(ctx, req, false)
}

/// `GET /servers/detail`.
pub fn detail(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    list(ctx, req, true)
}
