//! `/os-keypairs`: create (import a public key, or generate one before
//! 2.92), list, show, delete, as Nova's `keypairs.py`. A key pair belongs
//! to a user; from 2.10 an admin names another user with `user_id` (in
//! the body of a create, in the query otherwise). The name's uniqueness
//! and the `key_pairs` quota are checked in the create's one write.

use axum::http::StatusCode;
use berth_compute_model::plan::{key_pair_not_found, plan_create_key_pair, plan_delete_key_pair};
use berth_compute_model::{ComputeError, KeyPair, KeyPairType};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::Value;

use crate::api::{self, authorize_on, body, version, ComputeCtx};
use crate::views::{keypairs as view, page_is_full};
use crate::{keys, schemas, ComputeVersion};

const RULE: &str = "os_compute_api:os-keypairs:";

/// The user a request acts for: `user_id` in the query from 2.10 (the
/// first given, as Nova's `GET.getall('user_id')[0]`), else the caller.
fn query_user(req: &Req, v: ComputeVersion) -> String {
    let asked = if v.at_least(10) { req.query_all("user_id").next() } else { None };
    asked.filter(|u| !u.is_empty()).map(str::to_owned).unwrap_or_else(|| api::user(req))
}

/// From 2.75 the queries take only the parameters Nova's query schemas
/// list (before, anything else is ignored).
fn check_query(req: &Req, v: ComputeVersion, known: &[&str]) -> ApiResult<()> {
    if !v.at_least(75) {
        return Ok(());
    }
    if let Some((name, _)) = req.query.iter().find(|(n, _)| !known.contains(&n.as_str())) {
        return Err(ApiError::bad_request(format!(
            "Invalid input for query parameters {name}. Value: {name}. Additional properties are not allowed ('{name}' was unexpected)"
        )));
    }
    Ok(())
}

fn authorize(req: &Req, action: &str, user: &str) -> ApiResult<()> {
    authorize_on(req, &format!("{RULE}{action}"), &api::project(req), Some(user))
}

fn find(ctx: &ComputeCtx, user: &str, name: &str) -> ApiResult<KeyPair> {
    let world = ctx.core.read();
    world
        .compute
        .key_pairs
        .get(&(user.to_owned(), name.to_owned()))
        .cloned()
        .ok_or_else(|| api::refused(key_pair_not_found(user, name)))
}

/// `POST /os-keypairs`: 200 before 2.2, 201 from 2.2.
pub fn create(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    let body = body(req, &schemas::keypairs::create(v))?;
    berth_http::schema::validate(&schemas::keypairs::create_name(), &body)
        .map_err(|e| ApiError::bad_request(format!("Invalid input for field/attribute. {}", e.message)))?;
    let params = &body["keypair"];
    let name = params["name"].as_str().unwrap_or("").trim().to_owned();
    let user = params
        .get("user_id")
        .and_then(Value::as_str)
        .filter(|u| v.at_least(10) && !u.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| api::user(req));
    authorize(req, "create", &user)?;
    let key_type = params.get("type").and_then(Value::as_str).and_then(KeyPairType::parse).unwrap_or(KeyPairType::Ssh);
    let now = berth_core::now();
    // The key's material, or why it is refused: the plan refuses a bad key
    // only after the quota, as Nova checks quota before the fingerprint.
    let (material, private_key) = match params.get("public_key").and_then(Value::as_str) {
        Some(public_key) => {
            let fingerprint = match key_type {
                KeyPairType::Ssh => keys::ssh_fingerprint(public_key),
                KeyPairType::X509 => keys::x509_fingerprint(public_key),
            };
            let material = fingerprint
                .map(|f| (public_key.to_owned(), f))
                .map_err(|e| ComputeError::Invalid(format!("Keypair data is invalid: {}", e.0)));
            (material, None)
        }
        None => {
            let generated = match key_type {
                KeyPairType::Ssh => keys::generate_ssh(),
                KeyPairType::X509 => keys::generate_x509(&user, now),
            };
            let (private_key, public_key, fingerprint) = generated.map_err(|why| {
                tracing::error!(error = %why, "key pair generation failed");
                ApiError::internal()
            })?;
            (Ok((public_key, fingerprint)), Some(private_key))
        }
    };
    let project = api::project(req);
    let key_pair = material.map(|(public_key, fingerprint)| KeyPair {
        id: 0,
        user_id: user.clone(),
        name: name.clone(),
        key_type,
        public_key,
        fingerprint,
        created_at: now,
    });
    let created = ctx.core.write(move |w| plan_create_key_pair(w, &project, &user, key_pair).map_err(api::refused))?;
    let status = if v.at_least(2) { StatusCode::CREATED } else { StatusCode::OK };
    Ok(Resp::json(status, view::create(v, &created, private_key.as_deref())))
}

/// `GET /os-keypairs`: the user's key pairs by name; from 2.35 `limit`,
/// `marker` (a name; 400 when the user has none by that name) and
/// `keypairs_links`.
pub fn index(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    check_query(req, v, &["user_id", "limit", "marker"])?;
    let user = query_user(req, v);
    authorize(req, "index", &user)?;
    let (limit, marker) = if v.at_least(35) { api::paging(req, ctx.max_limit)? } else { (None, None) };
    let world = ctx.core.read();
    let mut key_pairs: Vec<&KeyPair> = world.compute.key_pairs_of(&user).collect();
    if let Some(marker) = &marker {
        let at = key_pairs
            .iter()
            .position(|k| &k.name == marker)
            .ok_or_else(|| ApiError::bad_request(format!("Marker {marker} could not be found.")))?;
        key_pairs.drain(..=at);
    }
    if v.at_least(35) {
        key_pairs.truncate(limit.unwrap_or(ctx.max_limit).min(ctx.max_limit));
    }
    let next = match key_pairs.last() {
        Some(last) if v.at_least(35) && page_is_full(key_pairs.len(), limit, ctx.max_limit) => {
            let query: Vec<(&str, &str)> = req.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            Some(ctx.links(req).next("os-keypairs", &query, &last.name))
        }
        _ => None,
    };
    Ok(Resp::ok(view::index(v, &key_pairs, next)))
}

/// `GET /os-keypairs/{name}`.
pub fn show(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    check_query(req, v, &["user_id"])?;
    let user = query_user(req, v);
    authorize(req, "show", &user)?;
    let key_pair = find(ctx, &user, req.param(0))?;
    Ok(Resp::ok(view::show(v, &key_pair)))
}

/// `DELETE /os-keypairs/{name}`: 202 before 2.2, 204 from 2.2.
pub fn delete(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    check_query(req, v, &["user_id"])?;
    let user = query_user(req, v);
    authorize(req, "delete", &user)?;
    let name = req.param(0).to_owned();
    ctx.core.write(|w| plan_delete_key_pair(w, &user, &name).map(|s| (s, ())).map_err(api::refused))?;
    Ok(if v.at_least(2) { Resp::no_content() } else { Resp::empty(StatusCode::ACCEPTED) })
}
