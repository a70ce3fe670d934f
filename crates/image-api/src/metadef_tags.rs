//! Metadef tags (`/v2/metadefs/namespaces/{ns}/tags[/{tag}]`), resource
//! types (`/v2/metadefs/resource_types`) and a namespace's resource-type
//! associations; each change one planned write on its namespace
//! ([`crate::metadef_catalog`]).

use axum::http::StatusCode;
use berth_compute_api::api;
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Map, Value};

use crate::metadef_catalog::{
    association, change_namespace, document, find, now, required_name, visible, SEEDED_RESOURCE_TYPES,
};
use crate::ImageCtx;

fn tags_of(doc: &mut Map<String, Value>) -> &mut Vec<Value> {
    if !doc.get("tags").is_some_and(Value::is_array) {
        doc.insert("tags".into(), json!([]));
    }
    doc.get_mut("tags").and_then(Value::as_array_mut).expect("an array was just put there")
}

fn has_tag(tags: &[Value], name: &str) -> bool {
    tags.iter().any(|t| t["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
}

fn tag_missing(ns: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("The metadata definition tag with name={name} was not found in namespace={ns}."))
}

fn duplicate_tag(ns: &str, name: &str) -> ApiError {
    ApiError::conflict(format!(
        "A metadata tag with name={name} already exists in namespace={ns}. (Please note that metadata tag names are case insensitive)."
    ))
}

fn tag_view(tag: &Value) -> Value {
    json!({"name": tag["name"], "created_at": tag["created_at"], "updated_at": tag["updated_at"]})
}

/// `GET /v2/metadefs/namespaces/{ns}/tags`.
pub fn index(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let mut doc = document(&ns);
    let tags: Vec<Value> = tags_of(&mut doc).iter().map(tag_view).collect();
    Ok(Resp::ok(json!({"tags": tags})))
}

/// `POST /v2/metadefs/namespaces/{ns}/tags` (admin): create several
/// (`X-Openstack-Append: True` keeps the present ones, else they are
/// replaced); 201 with the new ones.
pub fn create_many(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let now = now();
    let mut new = Vec::new();
    for t in body.get("tags").and_then(Value::as_array).into_iter().flatten() {
        let name = required_name(t, "name")?;
        if has_tag(&new, &name) {
            return Err(ApiError::conflict(format!("Duplicate tags: {name}")));
        }
        new.push(json!({"name": name, "created_at": now, "updated_at": now}));
    }
    let append = req
        .headers
        .get("x-openstack-append")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let created = new.clone();
    change_namespace(ctx, req, "add_metadef_tags", move |ns, doc| {
        let tags = tags_of(doc);
        if !append {
            tags.clear();
        }
        for tag in new {
            let name = tag["name"].as_str().unwrap_or_default().to_owned();
            if has_tag(tags, &name) {
                return Err(duplicate_tag(&ns.namespace, &name));
            }
            tags.push(tag);
        }
        Ok(())
    })?;
    Ok(Resp::json(
        StatusCode::CREATED,
        json!({"tags": created.iter().map(|t| json!({"name": t["name"]})).collect::<Vec<_>>()}),
    ))
}

/// `DELETE /v2/metadefs/namespaces/{ns}/tags` (admin): all of them.
pub fn delete_all(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    change_namespace(ctx, req, "delete_metadef_tags", |_, doc| {
        tags_of(doc).clear();
        Ok(())
    })?;
    Ok(Resp::no_content())
}

/// `POST /v2/metadefs/namespaces/{ns}/tags/{tag}` (admin): 201.
pub fn create(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = required_name(&json!({"name": req.param(1)}), "name")?;
    let now = now();
    let tag = json!({"name": name, "created_at": now, "updated_at": now});
    let stored = tag.clone();
    change_namespace(ctx, req, "add_metadef_tag", move |ns, doc| {
        let tags = tags_of(doc);
        if has_tag(tags, &name) {
            return Err(duplicate_tag(&ns.namespace, &name));
        }
        tags.push(stored);
        Ok(())
    })?;
    Ok(Resp::json(StatusCode::CREATED, tag_view(&tag)))
}

/// `GET /v2/metadefs/namespaces/{ns}/tags/{tag}`.
pub fn show(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let name = req.param(1);
    let mut doc = document(&ns);
    let tag = tags_of(&mut doc).iter().find(|t| t["name"] == name).map(tag_view);
    tag.map(Resp::ok).ok_or_else(|| tag_missing(&ns.namespace, name))
}

/// `PUT /v2/metadefs/namespaces/{ns}/tags/{tag}` (admin): rename.
pub fn update(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let new_name = required_name(&body, "name")?;
    let old = req.param(1).to_owned();
    let (_, tag) = change_namespace(ctx, req, "modify_metadef_tag", |ns, doc| {
        let tags = tags_of(doc);
        let at = tags.iter().position(|t| t["name"] == old.as_str()).ok_or_else(|| tag_missing(&ns.namespace, &old))?;
        if !new_name.eq_ignore_ascii_case(&old) && has_tag(tags, &new_name) {
            return Err(duplicate_tag(&ns.namespace, &new_name));
        }
        tags[at]["name"] = json!(new_name);
        tags[at]["updated_at"] = json!(now());
        Ok(tags[at].clone())
    })?;
    Ok(Resp::ok(tag_view(&tag)))
}

/// `DELETE /v2/metadefs/namespaces/{ns}/tags/{tag}` (admin).
pub fn delete(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = req.param(1).to_owned();
    change_namespace(ctx, req, "delete_metadef_tag", |ns, doc| {
        let tags = tags_of(doc);
        let before = tags.len();
        tags.retain(|t| t["name"] != name.as_str());
        if tags.len() == before {
            return Err(tag_missing(&ns.namespace, &name));
        }
        Ok(())
    })?;
    Ok(Resp::no_content())
}

/// `GET /v2/metadefs/resource_types`: the seeded types and any a visible
/// namespace associates.
pub fn resource_types(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let world = ctx.core.read();
    let mut names: std::collections::BTreeSet<String> = SEEDED_RESOURCE_TYPES.iter().map(|s| (*s).to_owned()).collect();
    for ns in world.compute.metadef_namespaces.values().filter(|ns| visible(req, ns)) {
        for r in document(ns).get("resource_type_associations").and_then(Value::as_array).into_iter().flatten() {
            if let Some(name) = r["name"].as_str() {
                names.insert(name.to_owned());
            }
        }
    }
    let epoch = berth_compute_api::views::isotime(0);
    let types: Vec<Value> =
        names.iter().map(|n| json!({"name": n, "created_at": epoch, "updated_at": epoch})).collect();
    Ok(Resp::ok(json!({"resource_types": types})))
}

fn associations(doc: &mut Map<String, Value>) -> &mut Vec<Value> {
    if !doc.get("resource_type_associations").is_some_and(Value::is_array) {
        doc.insert("resource_type_associations".into(), json!([]));
    }
    doc.get_mut("resource_type_associations").and_then(Value::as_array_mut).expect("an array was just put there")
}

/// `GET /v2/metadefs/namespaces/{ns}/resource_types`.
pub fn index_associations(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let mut doc = document(&ns);
    Ok(Resp::ok(json!({"resource_type_associations": associations(&mut doc).clone()})))
}

/// `POST /v2/metadefs/namespaces/{ns}/resource_types` (admin): 201.
pub fn create_association(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let assoc = association(&body, &now())?;
    let (_, assoc) = change_namespace(ctx, req, "add_metadef_resource_type_association", |ns, doc| {
        let name = assoc["name"].as_str().unwrap_or_default().to_owned();
        let list = associations(doc);
        if list.iter().any(|a| a["name"] == name.as_str()) {
            return Err(ApiError::conflict(format!(
                "The metadata definition resource-type association of resource-type={name} to namespace={} already exists.",
                ns.namespace
            )));
        }
        list.push(assoc.clone());
        Ok(assoc)
    })?;
    Ok(Resp::json(StatusCode::CREATED, assoc))
}

/// `DELETE /v2/metadefs/namespaces/{ns}/resource_types/{name}` (admin).
pub fn delete_association(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = req.param(1).to_owned();
    change_namespace(ctx, req, "remove_metadef_resource_type_association", |ns, doc| {
        let list = associations(doc);
        let before = list.len();
        list.retain(|a| a["name"] != name.as_str());
        if list.len() == before {
            return Err(ApiError::not_found(format!(
                "The metadata definition resource-type association of resource-type={name} to namespace={}, was not found.",
                ns.namespace
            )));
        }
        Ok(())
    })?;
    Ok(Resp::no_content())
}
