//! The reservation API (Blazar v1 at `/reservation/v1`): leases,
//! `os-hosts` with properties and allocations, and berth's extensions
//! (`/availability`, `?dry_run=true`). Bodies, dates, messages and
//! policy rule names are Blazar 18.0.0's; admission is berth's (one planned
//! write, peak usage in the window).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use berth_compute_api::api;
use berth_compute_model::lease::{
    EndPolicy, HostAllocation, Lease, ReservationKind, RESOURCE_FLAVOR_INSTANCE, RESOURCE_PHYSICAL_HOST,
    RESOURCE_VIRTUAL_INSTANCE,
};
use berth_compute_model::{ComputeError, World};
use berth_http::policy::{RuleTable, Target};
use berth_http::{error_response, ApiError, ApiResult, Req, Resp, Version};
use berth_reservation_model::{self as plan, LeaseRequest, LeaseUpdate, Query, ReservationRequest};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::dates::{before_end_date, iso, parse_date};
use crate::views::{host_view, lease_view, property_view};
use crate::ReservationCtx;

/// Blazar 18.0.0's policy rules and defaults.
pub const RULES: &RuleTable = &[
    ("admin", "is_admin:True or role:admin", None),
    ("admin_or_owner", "rule:admin or project_id:%(project_id)s", None),
    ("project_member_api", "role:member and project_id:%(project_id)s", None),
    ("project_reader_api", "role:reader and project_id:%(project_id)s", None),
    ("project_member_or_admin", "rule:project_member_api or rule:admin", None),
    ("project_reader_or_admin", "rule:project_reader_api or rule:admin", None),
    ("blazar:leases:get", "rule:project_reader_or_admin", None),
    ("blazar:leases:post", "rule:project_member_or_admin", None),
    ("blazar:leases:put", "rule:project_member_or_admin", None),
    ("blazar:leases:delete", "rule:project_member_or_admin", None),
    ("blazar:oshosts:get", "rule:admin", None),
    ("blazar:oshosts:post", "rule:admin", None),
    ("blazar:oshosts:put", "rule:admin", None),
    ("blazar:oshosts:delete", "rule:admin", None),
    ("blazar:oshosts:get_allocations", "rule:admin", None),
    ("blazar:oshosts:get_resource_properties", "rule:admin", None),
    ("blazar:oshosts:update_resource_properties", "rule:admin", None),
];

/// Blazar's error body: `{"error_code": 400, "error_message": "...",
/// "error_name": 400}` (Blazar puts the code in `error_name` too).
pub fn render_error(err: &ApiError, _: Option<Version>, _: &str, _: &HeaderMap) -> Response<Body> {
    let code = err.status.as_u16();
    let body = json!({"error_code": code, "error_message": err.detail, "error_name": code});
    error_response(err, "application/json", body.to_string())
}

fn refused(err: ComputeError) -> ApiError {
    api::refused(err)
}

fn policy(req: &Req, rule: &str, project_id: &str) -> ApiResult<()> {
    let mut target = Target::default();
    target.values.insert("project_id".into(), project_id.to_owned());
    if req.allowed(rule, &target) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!("Policy doesn't allow {rule} to be performed")))
    }
}

fn is_admin(req: &Req) -> bool {
    api::is_admin(req)
}

// ---------------------------------------------------------------- bodies

fn body(req: &Req) -> ApiResult<Map<String, Value>> {
    match api::parse_body(req)? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request("Malformed request body: a JSON object is expected")),
    }
}

fn missing(param: &str) -> ApiError {
    ApiError::bad_request(format!("Missing parameter {param}"))
}

/// Blazar's `leases.name` column is `String(80)`.
const LEASE_NAME_MAX: usize = 80;

fn check_name(name: &str) -> ApiResult<()> {
    if name.chars().count() > LEASE_NAME_MAX {
        return Err(ApiError::bad_request(format!("Lease name must be at most {LEASE_NAME_MAX} characters long.")));
    }
    Ok(())
}

fn malformed(param: &str) -> ApiError {
    ApiError::bad_request(format!("Malformed parameter {param}"))
}

/// An integer parameter: JSON integers, or strings holding one (Blazar's
/// client sends both); anything else is "Malformed parameter".
fn int_param(map: &Map<String, Value>, key: &str) -> ApiResult<Option<i64>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| malformed(key)),
        Some(Value::String(s)) => s.trim().parse::<i64>().map(Some).map_err(|_| malformed(key)),
        Some(_) => Err(malformed(key)),
    }
}

fn str_param(map: &Map<String, Value>, key: &str) -> ApiResult<Option<String>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(malformed(key)),
    }
}

/// `on_end` and `grace` (berth's extension fields of the lease body):
/// `None` when the body gives neither. `on_end` must be one of `delete`,
/// `recycle`, `release` (a string); `grace` an integer number of seconds
/// (a JSON integer or a string holding one), `>= 0`. Without `on_end`,
/// `default` applies (the lease's current policy on update, the server's
/// `--lease-on-end` on create).
fn end_choice_param(map: &Map<String, Value>, default: EndPolicy) -> ApiResult<Option<plan::end_policy::EndChoice>> {
    let on_end = match map.get("on_end") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(EndPolicy::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Malformed parameter on_end: '{s}' is not one of 'delete', 'recycle', 'release'"
            ))
        })?),
        Some(_) => return Err(ApiError::bad_request("Malformed parameter on_end: a string is expected")),
    };
    let grace = match map.get("grace") {
        Some(Value::Bool(_)) => return Err(malformed("grace")),
        _ => int_param(map, "grace")?,
    };
    if on_end.is_none() && grace.is_none() {
        return Ok(None);
    }
    Ok(Some(plan::end_policy::EndChoice { on_end: on_end.unwrap_or(default), grace }))
}

/// Parse Blazar's JSON query text (`""` and `"[]"` mean no requirement).
pub fn parse_query(text: &str) -> ApiResult<Option<Query>> {
    berth_reservations::query::parse(text).map_err(ApiError::bad_request)
}

fn check_keys(world: &World, query: &Option<Query>, hypervisor: bool, text: &str) -> ApiResult<()> {
    let Some(q) = query else { return Ok(()) };
    let mut keys = Vec::new();
    q.keys(&mut keys);
    for key in keys {
        let known = if hypervisor {
            matches!(
                key.as_str(),
                "vcpus"
                    | "memory_mb"
                    | "local_gb"
                    | "hypervisor_type"
                    | "hypervisor_version"
                    | "hypervisor_hostname"
                    | "service_name"
                    | "cpu_info"
                    | "availability_zone"
            )
        } else {
            world.compute.leases.properties.contains_key(&(RESOURCE_PHYSICAL_HOST.to_string(), key.clone()))
        };
        if !known {
            return Err(ApiError::bad_request(format!("Malformed requirements {text}: unknown property {key}")));
        }
    }
    Ok(())
}

/// `affinity`: `None` when absent, `Some(None)` for null or "none".
fn affinity_param(map: &Map<String, Value>) -> ApiResult<Option<Option<bool>>> {
    let bad = || malformed("affinity (must be a bool value or None)");
    Ok(match map.get("affinity") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::Bool(b)) => Some(Some(*b)),
        Some(Value::String(s)) => match api::parse_bool(s) {
            Some(b) => Some(Some(b)),
            None if s.eq_ignore_ascii_case("none") => Some(None),
            None => return Err(bad()),
        },
        Some(_) => return Err(bad()),
    })
}

/// A slot size (`vcpus`, `memory_mb`, `disk_gb`): below 0 is malformed.
fn non_negative(name: &str, value: Option<i64>) -> ApiResult<Option<i64>> {
    match value {
        Some(v) if v < 0 => Err(malformed(name)),
        v => Ok(v),
    }
}

fn reservation_request(world: &World, map: &Map<String, Value>) -> ApiResult<ReservationRequest> {
    let resource_type = str_param(map, "resource_type")?.ok_or_else(|| missing("resource_type"))?;
    match resource_type.as_str() {
        RESOURCE_PHYSICAL_HOST => {
            let min = int_param(map, "min")?.ok_or_else(|| missing("min"))?;
            let max = int_param(map, "max")?.ok_or_else(|| missing("max"))?;
            plan::check_min_max(min, max).map_err(refused)?;
            let hyp = str_param(map, "hypervisor_properties")?.unwrap_or_default();
            let res = str_param(map, "resource_properties")?.unwrap_or_default();
            let hypervisor_query = parse_query(&hyp)?;
            let resource_query = parse_query(&res)?;
            check_keys(world, &hypervisor_query, true, &hyp)?;
            check_keys(world, &resource_query, false, &res)?;
            let before_end = str_param(map, "before_end")?.unwrap_or_else(|| "default".into());
            if !matches!(before_end.as_str(), "default" | "snapshot" | "notification") {
                return Err(malformed("before_end"));
            }
            Ok(ReservationRequest {
                kind: ReservationKind::Host {
                    min,
                    max,
                    hypervisor_properties: hyp,
                    resource_properties: res,
                    before_end,
                },
                hypervisor_query,
                resource_query,
            })
        }
        RESOURCE_VIRTUAL_INSTANCE | RESOURCE_FLAVOR_INSTANCE => {
            let (vcpus, memory_mb, disk_gb, source_flavor) = if resource_type == RESOURCE_FLAVOR_INSTANCE {
                let id = str_param(map, "flavor_id")?.ok_or_else(|| missing("flavor_id"))?;
                let flavor = world
                    .compute
                    .flavors
                    .get(&id)
                    .ok_or_else(|| ApiError::bad_request(format!("Flavor {id} could not be found.")))?;
                (flavor.vcpus, flavor.memory_mb, flavor.root_gb + flavor.ephemeral_gb, Some(id))
            } else {
                let need = |k: &str| int_param(map, k)?.ok_or_else(|| missing(k));
                (need("vcpus")?, need("memory_mb")?, need("disk_gb")?, None)
            };
            let amount = int_param(map, "amount")?.ok_or_else(|| missing("amount"))?;
            for (name, v) in [("vcpus", vcpus), ("memory_mb", memory_mb), ("disk_gb", disk_gb)] {
                non_negative(name, Some(v))?;
            }
            plan::check_amount(amount).map_err(refused)?;
            let affinity = affinity_param(map)?.flatten();
            let res = str_param(map, "resource_properties")?.unwrap_or_default();
            let resource_query = parse_query(&res)?;
            check_keys(world, &resource_query, false, &res)?;
            Ok(ReservationRequest {
                kind: ReservationKind::Instance {
                    vcpus,
                    memory_mb,
                    disk_gb,
                    amount,
                    affinity,
                    resource_properties: res,
                    source_flavor,
                },
                hypervisor_query: None,
                resource_query,
            })
        }
        other => Err(ApiError::bad_request(format!("The {other} resource type is not supported"))),
    }
}

// ---------------------------------------------------------------- versions

fn version_doc(req: &Req, prefix: &str) -> Value {
    json!({"id": "v1.0", "status": "CURRENT",
           "links": [{"href": format!("{}{prefix}/v1/", req.base_url), "rel": "self"}]})
}

/// `GET /reservation/`: Blazar's version list.
pub fn versions(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::json(StatusCode::MULTIPLE_CHOICES, json!({"versions": [version_doc(req, mount(ctx))]})))
}

/// `GET /reservation/v1/`.
pub fn version_show(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(json!({"version": version_doc(req, mount(ctx))})))
}

/// Where the API is mounted: `/reservation` on the shared listener, the
/// root on its own (`--reservation-listen`, Blazar's `/v1`).
fn mount(ctx: &ReservationCtx) -> &'static str {
    ctx.prefix
}

// ---------------------------------------------------------------- leases

fn lease_id(req: &Req) -> ApiResult<Uuid> {
    let text = req.param(0).trim_end_matches(".json");
    Uuid::parse_str(text).map_err(|_| ApiError::not_found(format!("Object with {{'lease_id': '{text}'}} not found")))
}

fn visible_lease(ctx: &ReservationCtx, req: &Req, rule: &str) -> ApiResult<Lease> {
    let id = lease_id(req)?;
    let lease = ctx
        .core
        .read()
        .compute
        .leases
        .leases
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Object with {{'lease_id': '{id}'}} not found")))?;
    if !is_admin(req) && lease.project_id != api::project(req) {
        return Err(ApiError::not_found(format!("Object with {{'lease_id': '{id}'}} not found")));
    }
    policy(req, rule, &lease.project_id)?;
    Ok(lease)
}

/// `GET /leases`: the caller's project's leases (admins: all).
pub fn list_leases(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:leases:get", &api::project(req))?;
    let world = ctx.core.read();
    let project = api::project(req);
    let admin = is_admin(req);
    let filter = req.query_one("project_id").map(str::to_owned);
    let mut leases: Vec<&Lease> = world
        .compute
        .leases
        .leases
        .values()
        .filter(|l| if admin { filter.as_ref().is_none_or(|p| &l.project_id == p) } else { l.project_id == project })
        .collect();
    leases.sort_by_key(|l| (l.created_at, l.id));
    Ok(Resp::ok(json!({"leases": leases.into_iter().map(lease_view).collect::<Vec<_>>()})))
}

/// `GET /leases/{id}`.
pub fn show_lease(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    let lease = visible_lease(ctx, req, "blazar:leases:get")?;
    Ok(Resp::ok(json!({"lease": lease_view(&lease)})))
}

fn dry_run(req: &Req) -> ApiResult<bool> {
    match req.query_one("dry_run") {
        None => Ok(false),
        Some(v) => api::parse_bool(v).ok_or_else(|| malformed("dry_run")),
    }
}

/// What a refused dry run reports: the leases whose bookings overlap.
fn blockers(world: &World, requests: &[ReservationRequest], start: i64, end: i64) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in requests {
        for id in plan::blocking_leases(world, r, start, end) {
            let id = id.to_string();
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// `POST /leases`: validate, then admit in one planned write.
pub fn create_lease(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:leases:post", &api::project(req))?;
    let map = body(req)?;
    let now = ctx.reservations.compute.now();
    for key in ["name", "start_date", "end_date"] {
        if !map.contains_key(key) {
            return Err(missing(key));
        }
    }
    let name = str_param(&map, "name")?.ok_or_else(|| missing("name"))?;
    check_name(&name)?;
    let start_text = str_param(&map, "start_date")?.ok_or_else(|| missing("start_date"))?;
    let end_text = str_param(&map, "end_date")?.ok_or_else(|| missing("end_date"))?;
    let start = parse_date(&start_text, now)?;
    let end = parse_date(&end_text, now)?;
    let minute = now - now.rem_euclid(60);
    if start < minute {
        return Err(ApiError::bad_request("Start date must be later than current date"));
    }
    if end <= start {
        return Err(ApiError::bad_request("End date must be later than start date."));
    }
    let before_end = match str_param(&map, "before_end_date")? {
        None => Some(default_before_end(ctx, start, end)),
        Some(t) => Some(before_end_date(&t, start, end, now)?),
    };
    let reservations = match map.get("reservations") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(malformed("reservations")),
    };
    // Blazar stores what a client lists here next to the events it
    // schedules (and fails on anything that is not an event row); berth
    // schedules its own and ignores these, but refuses what is not one.
    match map.get("events") {
        None | Some(Value::Null) => {}
        Some(Value::Array(events)) => {
            let is_event = |e: &Value| {
                e.as_object().is_some_and(|m| {
                    m.get("event_type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| matches!(t, "start_lease" | "end_lease" | "before_end_lease"))
                        && m.keys().all(|k| matches!(k.as_str(), "event_type" | "time" | "status"))
                })
            };
            if !events.iter().all(is_event) {
                return Err(malformed("events"));
            }
        }
        Some(_) => return Err(malformed("events")),
    }
    let requests = {
        let world = ctx.core.read();
        reservations
            .iter()
            .map(|r| match r {
                Value::Object(m) => reservation_request(&world, m),
                _ => Err(malformed("reservations")),
            })
            .collect::<ApiResult<Vec<_>>>()?
    };
    let request = LeaseRequest {
        name,
        user_id: api::user(req),
        project_id: api::project(req),
        start,
        end,
        before_end,
        reservations: requests,
    };
    let default_on_end = ctx.reservations.config.on_end;
    let choice = end_choice_param(&map, default_on_end)?
        .unwrap_or(plan::end_policy::EndChoice { on_end: default_on_end, grace: None });
    plan::end_policy::check_choice_for(request.reservations.iter().map(|r| &r.kind), choice).map_err(refused)?;
    if dry_run(req)? {
        let world = ctx.core.read();
        let mut ids = Uuid::new_v4;
        return Ok(match plan::plan_create_lease_ending(&world, &request, choice, &mut ids, now) {
            Ok((_, lease)) => Resp::ok(json!({"admitted": true, "lease": lease_view(&lease)})),
            Err(ComputeError::Conflict(m)) => Resp::ok(json!({
                "admitted": false, "reason": m,
                "blocking_leases": blockers(&world, &request.reservations, start, end),
            })),
            Err(e) => return Err(refused(e)),
        });
    }
    let lease = ctx.core.write(|w| {
        let mut ids = Uuid::new_v4;
        plan::plan_create_lease_ending(w, &request, choice, &mut ids, now).map_err(refused)
    })?;
    ctx.reservations.leases_changed();
    Ok(Resp::json(StatusCode::CREATED, json!({"lease": lease_view(&lease)})))
}

/// The `before_end_date` of a lease that gives none: Blazar's
/// `minutes_before_end_lease` before the end (`--lease-minutes-before-end`),
/// not before the start.
fn default_before_end(ctx: &ReservationCtx, start: i64, end: i64) -> i64 {
    (end - ctx.reservations.config.minutes_before_end * 60).max(start)
}

/// `PUT /leases/{id}`: name, dates, `before_end_date`, and per
/// reservation `min`/`max`/`amount`/properties; admitted like a create.
pub fn update_lease(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    let lease = visible_lease(ctx, req, "blazar:leases:put")?;
    let map = body(req)?;
    let now = ctx.reservations.compute.now();
    let mut update = LeaseUpdate {
        name: str_param(&map, "name")?,
        end_choice: end_choice_param(&map, lease.on_end)?,
        ..Default::default()
    };
    if let Some(name) = &update.name {
        check_name(name)?;
    }
    if let Some(t) = str_param(&map, "start_date")? {
        update.start = Some(parse_date(&t, now)?);
    }
    if let Some(t) = str_param(&map, "end_date")? {
        update.end = Some(parse_date(&t, now)?);
    }
    // Without one, the warning keeps its distance to the end (Blazar's
    // `_update_before_end_event`, in `plan_update_lease`).
    if let Some(t) = str_param(&map, "before_end_date")? {
        let (start, end) = (update.start.unwrap_or(lease.start), update.end.unwrap_or(lease.end));
        update.before_end = Some(before_end_date(&t, start, end, now)?);
    }
    for key in ["prolong_for", "reduce_by", "defer_by", "advance_by"] {
        if map.contains_key(key) {
            return Err(ApiError::bad_request(format!("{key} is computed by the client: send end_date/start_date")));
        }
    }
    match map.get("reservations") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for r in list {
                let m = r.as_object().ok_or_else(|| malformed("reservations"))?;
                let id = str_param(m, "id")?.ok_or_else(|| missing("reservation ID"))?;
                let id = Uuid::parse_str(&id).map_err(|_| {
                    ApiError::bad_request(format!(
                        "Please enter valid reservation IDs. Invalid reservation IDs are: {id}"
                    ))
                })?;
                let props = |key: &str| -> ApiResult<Option<(String, Option<Query>)>> {
                    match str_param(m, key)? {
                        None => Ok(None),
                        Some(text) => {
                            let q = parse_query(&text)?;
                            check_keys(&ctx.core.read(), &q, key == "hypervisor_properties", &text)?;
                            Ok(Some((text, q)))
                        }
                    }
                };
                update.reservations.push(plan::ReservationUpdate {
                    id,
                    min: int_param(m, "min")?,
                    max: int_param(m, "max")?,
                    amount: int_param(m, "amount")?,
                    hypervisor_properties: props("hypervisor_properties")?,
                    resource_properties: props("resource_properties")?,
                    vcpus: non_negative("vcpus", int_param(m, "vcpus")?)?,
                    memory_mb: non_negative("memory_mb", int_param(m, "memory_mb")?)?,
                    disk_gb: non_negative("disk_gb", int_param(m, "disk_gb")?)?,
                    affinity: affinity_param(m)?,
                });
            }
        }
        Some(_) => return Err(malformed("reservations")),
    }
    let parse = |text: &str| parse_query(text).map_err(|e| ComputeError::Invalid(e.detail.clone()));
    if dry_run(req)? {
        let world = ctx.core.read();
        plan::reserved::check_update(&world, &update).map_err(refused)?;
        return Ok(match plan::plan_update_lease(&world, lease.id, &update, &parse, &mut Uuid::new_v4, now) {
            Ok((_, lease)) => Resp::ok(json!({"admitted": true, "lease": lease_view(&lease)})),
            Err(ComputeError::Conflict(m)) => Resp::ok(json!({"admitted": false, "reason": m})),
            Err(e) => return Err(refused(e)),
        });
    }
    let lease = ctx.core.write(|w| {
        plan::reserved::check_update(w, &update).map_err(refused)?;
        plan::plan_update_lease(w, lease.id, &update, &parse, &mut Uuid::new_v4, now).map_err(refused)
    })?;
    ctx.reservations.leases_changed();
    Ok(Resp::ok(json!({"lease": lease_view(&lease)})))
}

/// `DELETE /leases/{id}`: an active lease is ended first (its servers
/// deleted), then the row goes.
pub fn delete_lease(ctx: std::sync::Arc<ReservationCtx>, req: Req) -> berth_http::HandlerFuture {
    Box::pin(async move {
        let lease = visible_lease(&ctx, &req, "blazar:leases:delete")?;
        ctx.reservations.end_lease_now(lease.id).await.map_err(api::service)?;
        // Reserved servers still waiting for the lease go with it.
        ctx.core.write(|w| {
            let mut set = plan::plan_delete_lease(w, lease.id).map_err(refused)?;
            for held in plan::reserved::held_of_lease(w, lease.id) {
                set.extend(berth_compute_model::plan::plan_delete_build_request(w, &held).0);
            }
            Ok::<_, ApiError>((set, ()))
        })?;
        ctx.reservations.leases_changed();
        Ok(Resp::no_content())
    })
}

// ---------------------------------------------------------------- hosts

fn host_id(req: &Req) -> ApiResult<i64> {
    let text = req.param(0).trim_end_matches(".json");
    text.parse().map_err(|_| ApiError::not_found(format!("Object with {{'host_id': '{text}'}} not found")))
}

/// `GET /os-hosts`.
pub fn list_hosts(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get", &api::project(req))?;
    let world = ctx.core.read();
    let admin = is_admin(req);
    let now = ctx.reservations.compute.now();
    let hosts: Vec<Value> = world
        .compute
        .leases
        .hosts
        .values()
        .map(|h| host_view(&world, h, admin, now, ctx.reservations.lend_lead()))
        .collect();
    Ok(Resp::ok(json!({"hosts": hosts})))
}

/// `GET /os-hosts/{id}`.
pub fn show_host(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get", &api::project(req))?;
    let id = host_id(req)?;
    let world = ctx.core.read();
    let host = world
        .compute
        .leases
        .hosts
        .get(&id)
        .ok_or_else(|| ApiError::not_found(format!("Object with {{'host_id': '{id}'}} not found")))?;
    Ok(Resp::ok(
        json!({"host": host_view(&world, host, is_admin(req), ctx.reservations.compute.now(), ctx.reservations.lend_lead())}),
    ))
}

fn extra_capabilities(map: &Map<String, Value>, skip: &[&str]) -> ApiResult<BTreeMap<String, String>> {
    let mut extra = BTreeMap::new();
    for (k, v) in map {
        if skip.contains(&k.as_str()) {
            continue;
        }
        if k.len() > 64 {
            return Err(ApiError::bad_request("Extra capability key too long"));
        }
        let value = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => return Err(ApiError::bad_request(format!("Invalid values for host: {k} must be a string"))),
        };
        extra.insert(k.clone(), value);
    }
    Ok(extra)
}

/// `POST /os-hosts {"name": ..., <extra capabilities>}`: enrol a compute
/// host that has no servers.
pub fn create_host(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:post", &api::project(req))?;
    let map = body(req)?;
    let name = str_param(&map, "name")?.ok_or_else(|| missing("name"))?;
    let extra = extra_capabilities(&map, &["name"])?;
    let now = ctx.reservations.compute.now();
    let host = ctx.core.write(|w| {
        let enrolment = enrolment_of(w, &name, extra.clone())?;
        plan::plan_enrol_host(w, enrolment, now).map_err(refused)
    })?;
    ctx.reservations.leases_changed();
    let world = ctx.core.read();
    Ok(Resp::json(
        StatusCode::CREATED,
        json!({"host": host_view(&world, &host, true, now, ctx.reservations.lend_lead())}),
    ))
}

fn enrolment_of(world: &World, name: &str, extra: BTreeMap<String, String>) -> ApiResult<plan::HostEnrolment> {
    plan::end_policy::node_enrolment(world, name, extra, Uuid::new_v4().simple().to_string()).map_err(refused)
}

/// `PUT /os-hosts/{id}`: set extra capabilities (`{"values": {...}}` is
/// also accepted).
pub fn update_host(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:put", &api::project(req))?;
    let id = host_id(req)?;
    let mut map = body(req)?;
    if let Some(Value::Object(values)) = map.get("values").cloned() {
        if map.len() == 1 {
            map = values;
        }
    }
    if map.is_empty() {
        return Err(ApiError::bad_request("No data to update"));
    }
    let extra = extra_capabilities(&map, &[])?;
    let now = ctx.reservations.compute.now();
    let host = ctx.core.write(|w| plan::plan_update_host(w, id, &extra, now).map_err(refused))?;
    let world = ctx.core.read();
    Ok(Resp::ok(json!({"host": host_view(&world, &host, true, now, ctx.reservations.lend_lead())})))
}

/// `DELETE /os-hosts/{id}`: refused while a lease holds the host.
pub fn delete_host(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:delete", &api::project(req))?;
    let id = host_id(req)?;
    ctx.core.write(|w| Ok::<_, ApiError>((plan::plan_delete_host(w, id).map_err(refused)?, ())))?;
    ctx.reservations.leases_changed();
    Ok(Resp::no_content())
}

fn allocation_view(world: &World, host: i64, lease_filter: Option<Uuid>, reservation_filter: Option<Uuid>) -> Value {
    let tables = &world.compute.leases;
    let mut reservations = Vec::new();
    for b in tables.bookings.get(&host).into_iter().flatten() {
        if lease_filter.is_some_and(|l| l != b.lease) || reservation_filter.is_some_and(|r| r != b.reservation) {
            continue;
        }
        reservations.push(json!({
            "id": b.reservation.to_string(), "lease_id": b.lease.to_string(),
            "start_date": iso(b.start), "end_date": iso(b.end),
        }));
    }
    json!({"resource_id": host.to_string(), "reservations": reservations})
}

fn uuid_query(req: &Req, key: &str) -> ApiResult<Option<Uuid>> {
    match req.query_one(key) {
        None => Ok(None),
        Some(v) => Uuid::parse_str(v).map(Some).map_err(|_| malformed(key)),
    }
}

/// `GET /os-hosts/allocations[?lease_id=&reservation_id=]`: per host, the
/// reservations holding it (hosts held by none are listed empty unless a
/// filter is given).
pub fn list_allocations(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get_allocations", &api::project(req))?;
    let lease = uuid_query(req, "lease_id")?;
    let reservation = uuid_query(req, "reservation_id")?;
    let world = ctx.core.read();
    let filtered = lease.is_some() || reservation.is_some();
    let out: Vec<Value> = world
        .compute
        .leases
        .hosts
        .keys()
        .map(|id| allocation_view(&world, *id, lease, reservation))
        .filter(|v| !filtered || v["reservations"].as_array().is_some_and(|l| !l.is_empty()))
        .collect();
    Ok(Resp::ok(json!({"allocations": out})))
}

/// `GET /os-hosts/{id}/allocation`.
pub fn host_allocation(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get_allocations", &api::project(req))?;
    let id = host_id(req)?;
    let lease = uuid_query(req, "lease_id")?;
    let reservation = uuid_query(req, "reservation_id")?;
    let world = ctx.core.read();
    if !world.compute.leases.hosts.contains_key(&id) {
        return Err(ApiError::not_found(format!("Object with {{'host_id': '{id}'}} not found")));
    }
    Ok(Resp::ok(json!({"allocation": allocation_view(&world, id, lease, reservation)})))
}

/// `GET /os-hosts/properties[?detail=True&all=True]`.
pub fn list_properties(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get_resource_properties", &api::project(req))?;
    let detail = req.query_one("detail").and_then(api::parse_bool).unwrap_or(false);
    let all = req.query_one("all").and_then(api::parse_bool).unwrap_or(false);
    let world = ctx.core.read();
    let tables = &world.compute.leases;
    let out: Vec<Value> = tables
        .properties
        .values()
        .filter(|p| all || !p.private)
        .map(|p| {
            if detail {
                let mut values: Vec<&String> = tables.hosts.values().filter_map(|h| h.extra.get(&p.name)).collect();
                values.sort();
                values.dedup();
                json!({"property": p.name, "private": p.private, "values": values})
            } else {
                json!({"property": p.name})
            }
        })
        .collect();
    Ok(Resp::ok(json!({"resource_properties": out})))
}

/// `PATCH /os-hosts/properties/{name} {"private": bool}`.
pub fn patch_property(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:update_resource_properties", &api::project(req))?;
    let name = req.param(0).to_owned();
    let map = body(req)?;
    let private = match map.get("private") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => api::parse_bool(s).ok_or_else(|| malformed("private"))?,
        None => return Err(missing("private")),
        Some(_) => return Err(malformed("private")),
    };
    let now = ctx.reservations.compute.now();
    let prop = ctx
        .core
        .write(|w| plan::plan_set_property_private(w, RESOURCE_PHYSICAL_HOST, &name, private, now).map_err(refused))?;
    Ok(Resp::ok(json!({"resource_property": property_view(&prop)})))
}

// ---------------------------------------------------------------- extensions

/// `GET /availability?resource_type=...&duration=SECONDS[&from=DATE]
/// [&horizon=DATE]` plus the reservation's parameters (`min`, `max`,
/// `amount`, `vcpus`, ...): the earliest window of that length in which the
/// request would be admitted, and the hosts it would get.
pub fn availability(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:leases:get", &api::project(req))?;
    let now = ctx.reservations.compute.now();
    let mut map = Map::new();
    for (k, v) in &req.query {
        map.insert(k.clone(), json!(v));
    }
    let duration = int_param(&map, "duration")?.ok_or_else(|| missing("duration"))?;
    if duration <= 0 {
        return Err(malformed("duration"));
    }
    let from = match str_param(&map, "from")? {
        Some(t) => parse_date(&t, now)?,
        None => now - now.rem_euclid(60),
    };
    let horizon = match str_param(&map, "horizon")? {
        Some(t) => parse_date(&t, now)?,
        None => from + 366 * 86_400,
    };
    let world = ctx.core.read();
    let request = reservation_request(&world, &map)?;
    Ok(Resp::ok(match plan::earliest_window(&world, &request, duration, from, horizon) {
        Some((start, hosts)) => json!({"availability": {
            "start_date": iso(start), "end_date": iso(start + duration),
            "allocations": hosts.iter().map(|a: &HostAllocation| json!({"resource_id": a.host_id.to_string(), "slots": a.slots})).collect::<Vec<_>>(),
        }}),
        None => json!({"availability": Value::Null}),
    }))
}

/// `GET /availability/hosts?start_date=DATE&end_date=DATE[&hosts=ID,ID]`
/// (berth's extension, admin like the hosts API): free capacity over time
/// per enrolled host, as steps of constant booked usage.
pub fn host_capacity(ctx: &ReservationCtx, req: &Req) -> ApiResult<Resp> {
    policy(req, "blazar:oshosts:get", &api::project(req))?;
    let now = ctx.reservations.compute.now();
    let param = |key: &str| req.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let start = parse_date(param("start_date").ok_or_else(|| missing("start_date"))?, now)?;
    let end = parse_date(param("end_date").ok_or_else(|| missing("end_date"))?, now)?;
    if end <= start {
        return Err(ApiError::bad_request("End date must be later than start date."));
    }
    let world = ctx.core.read();
    let tables = &world.compute.leases;
    let wanted: Option<Vec<i64>> = match param("hosts") {
        None | Some("") => None,
        Some(list) => Some(
            list.split(',')
                .map(|id| {
                    id.trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|id| tables.hosts.contains_key(id))
                        .ok_or_else(|| ApiError::not_found(format!("Host {id} not found.")))
                })
                .collect::<ApiResult<_>>()?,
        ),
    };
    let ids: Vec<i64> = wanted.unwrap_or_else(|| tables.hosts.keys().copied().collect());
    let hosts: Vec<Value> = ids
        .iter()
        .map(|id| {
            let host = &tables.hosts[id];
            let steps = plan::capacity::host_timeline(&world, *id, start, end);
            let capacity = plan::capacity::host_capacity(&world, host);
            json!({
                "id": id.to_string(), "hypervisor_hostname": host.hypervisor_hostname, "reservable": host.reservable,
                "vcpus": capacity.vcpus, "memory_mb": capacity.memory_mb, "local_gb": capacity.local_gb,
                "timeline": steps.iter().map(|s| {
                    let (vcpus, memory_mb, disk_gb) = s.usage.free(capacity);
                    json!({
                        "start_date": iso(s.start), "end_date": iso(s.end), "whole_host_reserved": s.usage.whole_host,
                        "used": {"vcpus": s.usage.vcpus, "memory_mb": s.usage.memory_mb, "disk_gb": s.usage.disk_gb},
                        "free": {"vcpus": vcpus, "memory_mb": memory_mb, "disk_gb": disk_gb},
                    })
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Resp::ok(json!({"hosts": hosts})))
}
