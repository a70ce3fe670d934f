//! `/flavors`: list, detail, show, create, update (2.55), delete,
//! `os-extra_specs` and `os-flavor-access`.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use berth_compute_model::extra_specs;
use berth_compute_model::plan::{plan_create_flavor, plan_delete_flavor, plan_edit_flavor, NewFlavor};
use berth_compute_model::{ComputeError, Flavor};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use crate::api::{self, authorize, body, is_admin, version, ComputeCtx};
use crate::views::{flavors as view, page_is_full};
use crate::{schemas, ComputeVersion};

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Flavor {id} could not be found."))
}

/// Flavors the caller may see, filtered as `GET /flavors` asks.
fn visible(ctx: &ComputeCtx, req: &Req) -> ApiResult<Vec<Flavor>> {
    let admin = is_admin(req);
    let project = api::project(req);
    // Nova: `is_public` defaults to true; admins may ask for `none` (all)
    // or `false` (private only).
    let is_public = match req.query_one("is_public").map(|v| v.trim().to_ascii_lowercase()) {
        None => Some(true),
        Some(v) if v == "none" => None,
        Some(v) => {
            Some(api::parse_bool(&v).ok_or_else(|| ApiError::bad_request(format!("Invalid is_public filter [{v}]")))?)
        }
    };
    let int_param = |name: &str| -> ApiResult<Option<i64>> {
        req.query_one(name)
            .map(|v| v.trim().parse::<i64>().map_err(|_| ApiError::bad_request(format!("Invalid {name} filter [{v}]"))))
            .transpose()
    };
    let min_ram = int_param("minRam")?;
    let min_disk = int_param("minDisk")?;
    let name = if version(req).at_least(102) { req.query_one("name").map(str::to_owned) } else { None };
    let world = ctx.core.read();
    let mut flavors: Vec<Flavor> = world
        .compute
        .flavors
        .values()
        .filter(|f| match (admin, is_public) {
            (true, None) => true,
            (true, Some(public)) => f.is_public == public,
            (false, _) => f.is_public || f.projects.contains(&project),
        })
        .filter(|f| min_ram.is_none_or(|m| f.memory_mb >= m))
        .filter(|f| min_disk.is_none_or(|m| f.root_gb >= m))
        .filter(|f| name.as_ref().is_none_or(|n| f.name.contains(n.as_str())))
        .cloned()
        .collect();
    let key = req.query_one("sort_key").unwrap_or("flavorid");
    let ascending = req.query_one("sort_dir").unwrap_or("asc") != "desc";
    let valid = [
        "flavorid",
        "name",
        "memory_mb",
        "vcpus",
        "root_gb",
        "ephemeral_gb",
        "swap",
        "rxtx_factor",
        "id",
        "created_at",
        "description",
        "disabled",
        "is_public",
    ];
    if !valid.contains(&key) {
        return Err(ApiError::bad_request(format!("Invalid sort_key {key}")));
    }
    flavors.sort_by(|a, b| {
        let ord = match key {
            "name" => a.name.cmp(&b.name),
            "memory_mb" => a.memory_mb.cmp(&b.memory_mb),
            "vcpus" => a.vcpus.cmp(&b.vcpus),
            "root_gb" => a.root_gb.cmp(&b.root_gb),
            "ephemeral_gb" => a.ephemeral_gb.cmp(&b.ephemeral_gb),
            "swap" => a.swap.cmp(&b.swap),
            "id" => a.id.cmp(&b.id),
            "created_at" => a.created_at.cmp(&b.created_at),
            _ => a.flavorid.cmp(&b.flavorid),
        };
        let ord = ord.then_with(|| a.flavorid.cmp(&b.flavorid));
        if ascending {
            ord
        } else {
            ord.reverse()
        }
    });
    let (limit, marker) = api::paging(req, ctx.max_limit)?;
    if let Some(marker) = marker {
        let pos = flavors
            .iter()
            .position(|f| f.flavorid == marker)
            .ok_or_else(|| ApiError::bad_request(format!("marker [{marker}] not found")))?;
        flavors.drain(..=pos);
    }
    flavors.truncate(limit.unwrap_or(ctx.max_limit));
    Ok(flavors)
}

fn next(ctx: &ComputeCtx, req: &Req, flavors: &[Flavor], collection: &str) -> Option<Value> {
    let (limit, _) = api::paging(req, ctx.max_limit).ok()?;
    let last = flavors.last()?;
    page_is_full(flavors.len(), limit, ctx.max_limit).then(|| {
        let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        ctx.links(req).next(collection, &query, &last.flavorid)
    })
}

fn show_extra_specs(req: &Req) -> bool {
    api::allowed(req, "os_compute_api:os-flavor-extra-specs:index")
}

/// `GET /flavors`.
pub fn index(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let flavors = visible(ctx, req)?;
    let next = next(ctx, req, &flavors, "flavors");
    Ok(Resp::ok(view::index(version(req), &ctx.links(req), &flavors, next)))
}

/// `GET /flavors/detail`.
pub fn detail(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let flavors = visible(ctx, req)?;
    let next = next(ctx, req, &flavors, "flavors/detail");
    Ok(Resp::ok(view::detail(version(req), &ctx.links(req), &flavors, show_extra_specs(req), next)))
}

/// A flavor the caller may see.
fn get(ctx: &ComputeCtx, req: &Req, id: &str) -> ApiResult<Flavor> {
    let project = api::project(req);
    ctx.core
        .read()
        .compute
        .flavors
        .get(id)
        .filter(|f| f.is_public || is_admin(req) || f.projects.contains(&project))
        .cloned()
        .ok_or_else(|| not_found(id))
}

/// `GET /flavors/{id}`.
pub fn show(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let flavor = get(ctx, req, req.param(0))?;
    Ok(Resp::ok(view::show(version(req), &ctx.links(req), &flavor, show_extra_specs(req))))
}

fn int(v: &Value, key: &str, default: i64) -> i64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(default),
        _ => default,
    }
}

/// `POST /flavors`.
pub fn create(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, "os_compute_api:os-flavor-manage:create")?;
    let body = body(req, &schemas::flavors::create(v))?;
    let f = &body["flavor"];
    let new = NewFlavor {
        flavorid: f.get("id").and_then(|i| match i {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }),
        name: f["name"].as_str().unwrap_or("").trim().to_owned(),
        memory_mb: int(f, "ram", 0),
        vcpus: int(f, "vcpus", 0),
        root_gb: int(f, "disk", 0),
        ephemeral_gb: int(f, "OS-FLV-EXT-DATA:ephemeral", 0),
        swap: int(f, "swap", 0),
        rxtx_factor: f
            .get("rxtx_factor")
            .and_then(|x| x.as_f64().or_else(|| x.as_str().and_then(|s| s.parse().ok())))
            .unwrap_or(1.0),
        is_public: f
            .get("os-flavor-access:is_public")
            .map(|x| match x {
                Value::Bool(b) => *b,
                Value::String(s) => api::parse_bool(s).unwrap_or(true),
                _ => true,
            })
            .unwrap_or(true),
        description: f.get("description").and_then(Value::as_str).map(str::to_owned),
    };
    let now = berth_core::now();
    let flavor = ctx.core.write(|w| plan_create_flavor(w, new, Uuid::new_v4(), now).map_err(api::refused))?;
    Ok(Resp::ok(view::show(v, &ctx.links(req), &flavor, true)))
}

/// `PUT /flavors/{id}` (2.55): the description.
pub fn update(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, "os_compute_api:os-flavor-manage:update")?;
    let body = body(req, &schemas::flavors::update())?;
    let description = body["flavor"].get("description").and_then(Value::as_str).map(str::to_owned);
    let id = req.param(0).to_owned();
    let now = berth_core::now();
    let flavor = ctx.core.write(|w| {
        plan_edit_flavor(w, &id, now, |f| {
            f.description = description;
            Ok(())
        })
        .map_err(api::refused)
    })?;
    Ok(Resp::ok(view::show(v, &ctx.links(req), &flavor, true)))
}

/// `DELETE /flavors/{id}`.
pub fn delete(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-flavor-manage:delete")?;
    let id = req.param(0).to_owned();
    ctx.core.write(|w| plan_delete_flavor(w, &id).map(|set| (set, ())).map_err(api::refused))?;
    Ok(Resp::empty(StatusCode::ACCEPTED))
}

// ---------------------------------------------------------------------------
// Extra specs
// ---------------------------------------------------------------------------

fn validate_specs(v: ComputeVersion, req: &Req, specs: &BTreeMap<String, String>) -> ApiResult<()> {
    // From 2.86 extra specs are validated (unless the caller opts out with
    // `?validation=false`... which Nova does not offer; it always validates).
    if !v.at_least(86) {
        return Ok(());
    }
    let _ = req;
    for (key, value) in specs {
        extra_specs::validate(key, value).map_err(ApiError::bad_request)?;
    }
    Ok(())
}

fn spec_map(value: &Value) -> ApiResult<BTreeMap<String, String>> {
    let obj = value.as_object().ok_or_else(|| ApiError::bad_request("Malformed request body"))?;
    obj.iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => {
                    if *b {
                        "True".to_owned()
                    } else {
                        "False".to_owned()
                    }
                }
                _ => return Err(ApiError::bad_request(format!("Invalid input for field/attribute {k}. Value: {v}."))),
            };
            Ok((k.clone(), text))
        })
        .collect()
}

/// `GET /flavors/{id}/os-extra_specs`.
pub fn list_extra_specs(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-flavor-extra-specs:index")?;
    let flavor = get(ctx, req, req.param(0))?;
    Ok(Resp::ok(view::extra_specs(&flavor.extra_specs)))
}

/// `POST /flavors/{id}/os-extra_specs`.
pub fn create_extra_specs(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, "os_compute_api:os-flavor-extra-specs:create")?;
    let body = body(req, &schemas::flavors::extra_specs_create())?;
    let specs = spec_map(&body["extra_specs"])?;
    validate_specs(v, req, &specs)?;
    let id = req.param(0).to_owned();
    let now = berth_core::now();
    ctx.core.write(|w| {
        plan_edit_flavor(w, &id, now, |f| {
            f.extra_specs.extend(specs.clone());
            Ok(())
        })
        .map_err(api::refused)
    })?;
    Ok(Resp::ok(view::extra_specs(&specs)))
}

/// `GET /flavors/{id}/os-extra_specs/{key}`.
pub fn show_extra_spec(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-flavor-extra-specs:show")?;
    let flavor = get(ctx, req, req.param(0))?;
    let key = req.param(1);
    let value = flavor
        .extra_specs
        .get(key)
        .ok_or_else(|| ApiError::not_found(format!("Flavor {} has no extra specs with key {key}.", flavor.flavorid)))?;
    Ok(Resp::ok(view::extra_spec(key, value)))
}

/// `PUT /flavors/{id}/os-extra_specs/{key}`.
pub fn update_extra_spec(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, "os_compute_api:os-flavor-extra-specs:update")?;
    let body = body(req, &schemas::flavors::extra_spec_update())?;
    let specs = spec_map(&body)?;
    let key = req.param(1).to_owned();
    if specs.len() != 1 || !specs.contains_key(&key) {
        return Err(ApiError::bad_request("Request body and URI mismatch"));
    }
    validate_specs(v, req, &specs)?;
    let id = req.param(0).to_owned();
    let now = berth_core::now();
    ctx.core.write(|w| {
        plan_edit_flavor(w, &id, now, |f| {
            f.extra_specs.extend(specs.clone());
            Ok(())
        })
        .map_err(api::refused)
    })?;
    Ok(Resp::ok(view::extra_spec(&key, &specs[&key])))
}

/// `DELETE /flavors/{id}/os-extra_specs/{key}`.
pub fn delete_extra_spec(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-flavor-extra-specs:delete")?;
    let (id, key) = (req.param(0).to_owned(), req.param(1).to_owned());
    let now = berth_core::now();
    ctx.core.write(|w| {
        plan_edit_flavor(w, &id, now, |f| {
            f.extra_specs
                .remove(&key)
                .map(|_| ())
                .ok_or_else(|| ComputeError::NotFound(format!("Flavor {id} has no extra specs with key {key}.")))
        })
        .map_err(api::refused)
    })?;
    // Nova answers 200 with no body (no `@wsgi.response` on the method).
    Ok(Resp::empty(StatusCode::OK))
}

// ---------------------------------------------------------------------------
// Flavor access
// ---------------------------------------------------------------------------

/// `GET /flavors/{id}/os-flavor-access`.
pub fn list_access(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    authorize(req, "os_compute_api:os-flavor-access")?;
    let flavor = get(ctx, req, req.param(0))?;
    if flavor.is_public {
        return Err(ApiError::not_found("Access list not available for public flavors."));
    }
    Ok(Resp::ok(view::flavor_access(&flavor)))
}

/// `POST /flavors/{id}/action`: `addTenantAccess`, `removeTenantAccess`.
pub fn action(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let value: Value = crate::api::parse_body(req)?;
    let (add, schema, rule) = if value.get("addTenantAccess").is_some() {
        (true, schemas::flavors::add_tenant_access(), "os_compute_api:os-flavor-access:add_tenant_access")
    } else if value.get("removeTenantAccess").is_some() {
        (false, schemas::flavors::remove_tenant_access(), "os_compute_api:os-flavor-access:remove_tenant_access")
    } else {
        return Err(ApiError::bad_request("There is no such action"));
    };
    authorize(req, rule)?;
    let body = body(req, &schema)?;
    let tenant =
        body[if add { "addTenantAccess" } else { "removeTenantAccess" }]["tenant"].as_str().unwrap_or("").to_owned();
    let id = req.param(0).to_owned();
    let now = berth_core::now();
    let flavor = ctx.core.write(|w| {
        plan_edit_flavor(w, &id, now, |f| {
            if f.is_public {
                return Err(ComputeError::Conflict("Can not add access to a public flavor.".into()));
            }
            if add {
                if !f.projects.insert(tenant.clone()) {
                    return Err(ComputeError::Conflict(format!(
                        "Flavor access already exists for flavor {id} and project {tenant} combination."
                    )));
                }
            } else if !f.projects.remove(&tenant) {
                return Err(ComputeError::NotFound(format!(
                    "Flavor access not found for {id} / {tenant} combination."
                )));
            }
            Ok(())
        })
        .map_err(api::refused)
    })?;
    Ok(Resp::ok(view::flavor_access(&flavor)))
}
