//! Glance's metadata-definitions catalog at `/v2/metadefs/...`:
//! namespaces (with visibility, protection and owner), and in each its
//! objects, properties, tags and resource-type associations; the list of
//! resource types.
//!
//! A namespace and everything in it is one control row
//! (`berth_compute_model::MetadefNamespace`, its contents a JSON document
//! this module owns). Every change is one planned write: the namespace is
//! read inside the write, checked (visible, admin, names free), changed
//! and put back with `plan_put_metadef_namespace`, so two concurrent
//! changes to one namespace never lose each other.
//!
//! Policy as Glance's defaults: reading needs the namespace to be visible
//! (public, or the caller's project owns it, or an admin); every write is
//! an admin's (`metadef_admin`). A namespace the caller cannot see is 404.

use berth_compute_api::api::{self, is_admin};
use berth_compute_api::views::isotime;
use berth_compute_model::plan::{plan_delete_metadef_namespace, plan_put_metadef_namespace};
use berth_compute_model::MetadefNamespace;
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Map, Value};

use crate::ImageCtx;

/// The resource types Glance's shipped definitions (`glance-manage db
/// load_metadefs`) seed; associations may name others, which are then
/// listed too.
pub const SEEDED_RESOURCE_TYPES: [&str; 5] =
    ["OS::Cinder::Volume", "OS::Glance::Image", "OS::Nova::Aggregate", "OS::Nova::Flavor", "OS::Nova::Server"];

pub(crate) fn now() -> String {
    isotime(berth_core::now())
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("Metadata definition namespace={name} was not found."))
}

pub(crate) fn visible(req: &Req, ns: &MetadefNamespace) -> bool {
    is_admin(req) || ns.visibility == "public" || req.auth.project_id.as_deref() == Some(ns.owner.as_str())
}

pub(crate) fn document(ns: &MetadefNamespace) -> Map<String, Value> {
    match serde_json::from_str(&ns.document) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// A namespace's view (`detail`: with its objects, properties and tags).
fn view(ns: &MetadefNamespace, detail: bool) -> Value {
    let doc = document(ns);
    let mut out = Map::new();
    out.insert("namespace".into(), json!(ns.namespace));
    for key in ["display_name", "description"] {
        if let Some(v) = doc.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert("visibility".into(), json!(ns.visibility));
    out.insert("protected".into(), json!(ns.protected));
    out.insert("owner".into(), json!(ns.owner));
    for key in ["created_at", "updated_at"] {
        out.insert(key.into(), doc.get(key).cloned().unwrap_or(Value::Null));
    }
    let assoc = doc.get("resource_type_associations").and_then(Value::as_array).cloned().unwrap_or_default();
    if !assoc.is_empty() {
        out.insert("resource_type_associations".into(), json!(assoc));
    }
    if detail {
        for key in ["objects", "properties"] {
            let items = doc.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
            if !items.is_empty() {
                let value = if key == "objects" { json!(items.values().collect::<Vec<_>>()) } else { json!(items) };
                out.insert(key.into(), value);
            }
        }
        let tags = doc.get("tags").and_then(Value::as_array).cloned().unwrap_or_default();
        if !tags.is_empty() {
            out.insert("tags".into(), json!(tags.iter().map(|t| json!({"name": t["name"]})).collect::<Vec<_>>()));
        }
    }
    out.insert("self".into(), json!(format!("/v2/metadefs/namespaces/{}", ns.namespace)));
    out.insert("schema".into(), json!("/v2/schemas/metadefs/namespace"));
    Value::Object(out)
}

/// The namespace a path names, as the caller may see it.
pub(crate) fn find(ctx: &ImageCtx, req: &Req) -> ApiResult<MetadefNamespace> {
    let name = req.param(0);
    let world = ctx.core.read();
    world.compute.metadef_namespaces.get(name).filter(|ns| visible(req, ns)).cloned().ok_or_else(|| not_found(name))
}

fn admin_only(req: &Req, rule: &str) -> ApiResult<()> {
    if is_admin(req) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!("You are not authorized to complete {rule} action.")))
}

/// Change the namespace a path names in one planned write: `change` gets
/// its record and document as they are inside the write.
pub(crate) fn change_namespace<T: Send>(
    ctx: &ImageCtx,
    req: &Req,
    rule: &str,
    change: impl FnOnce(&mut MetadefNamespace, &mut Map<String, Value>) -> ApiResult<T> + Send,
) -> ApiResult<(MetadefNamespace, T)> {
    let name = req.param(0).to_owned();
    let admin = is_admin(req);
    ctx.core.write(|w| {
        let mut ns = w
            .compute
            .metadef_namespaces
            .get(&name)
            .filter(|ns| visible(req, ns))
            .cloned()
            .ok_or_else(|| not_found(&name))?;
        if !admin {
            return Err(ApiError::forbidden(format!("You are not authorized to complete {rule} action.")));
        }
        let mut doc = document(&ns);
        let out = change(&mut ns, &mut doc)?;
        doc.insert("updated_at".into(), json!(now()));
        ns.document = Value::Object(doc).to_string();
        let set = plan_put_metadef_namespace(w, Some(&name), ns.clone()).map_err(api::refused)?;
        Ok((set, (ns, out)))
    })
}

fn str_field(body: &Value, key: &str) -> ApiResult<Option<String>> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_request(format!("{other} is not of type 'string'"))),
    }
}

pub(crate) fn required_name(body: &Value, key: &str) -> ApiResult<String> {
    match str_field(body, key)? {
        Some(name) if !name.is_empty() && name.chars().count() <= 80 => Ok(name),
        Some(name) if name.is_empty() => Err(ApiError::bad_request(format!("'' is too short: {key}"))),
        Some(name) => Err(ApiError::bad_request(format!("'{name}' is too long: {key}"))),
        None => Err(ApiError::bad_request(format!("'{key}' is a required property"))),
    }
}

/// Apply the namespace fields of a create or update body.
fn namespace_fields(ns: &mut MetadefNamespace, doc: &mut Map<String, Value>, body: &Value) -> ApiResult<()> {
    if let Some(v) = str_field(body, "visibility")? {
        if v != "public" && v != "private" {
            return Err(ApiError::bad_request(format!("'{v}' is not one of ['public', 'private']")));
        }
        ns.visibility = v;
    }
    match body.get("protected") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => ns.protected = *b,
        Some(other) => return Err(ApiError::bad_request(format!("{other} is not of type 'boolean'"))),
    }
    if let Some(owner) = str_field(body, "owner")? {
        ns.owner = owner;
    }
    for key in ["display_name", "description"] {
        if let Some(v) = str_field(body, key)? {
            doc.insert(key.into(), json!(v));
        }
    }
    Ok(())
}

/// `GET /v2/metadefs/namespaces`: the visible namespaces, by name
/// (`visibility` and `resource_types` filters).
pub fn index(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let world = ctx.core.read();
    let visibility = req.query_one("visibility");
    let types: Vec<&str> = req.query_one("resource_types").map(|t| t.split(',').collect()).unwrap_or_default();
    let namespaces: Vec<Value> = world
        .compute
        .metadef_namespaces
        .values()
        .filter(|ns| visible(req, ns) && visibility.is_none_or(|v| v == ns.visibility))
        .map(|ns| view(ns, false))
        .filter(|v| {
            types.is_empty()
                || v["resource_type_associations"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|r| types.contains(&r["name"].as_str().unwrap_or_default())))
        })
        .collect();
    Ok(Resp::ok(json!({
        "namespaces": namespaces, "first": "/v2/metadefs/namespaces", "schema": "/v2/schemas/metadefs/namespaces",
    })))
}

/// `POST /v2/metadefs/namespaces` (admin): 201 with the namespace.
pub fn create(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "add_metadef_namespace")?;
    let body = api::parse_body(req)?;
    let name = required_name(&body, "namespace")?;
    let now = now();
    let mut ns = MetadefNamespace {
        namespace: name,
        owner: req.auth.project_id.clone().unwrap_or_default(),
        visibility: "private".into(),
        protected: false,
        document: String::new(),
    };
    let mut doc = Map::new();
    namespace_fields(&mut ns, &mut doc, &body)?;
    doc.insert("created_at".into(), json!(now));
    doc.insert("updated_at".into(), json!(now));
    let mut assoc = Vec::new();
    for r in body.get("resource_type_associations").and_then(Value::as_array).into_iter().flatten() {
        assoc.push(association(r, &now)?);
    }
    doc.insert("resource_type_associations".into(), json!(assoc));
    let mut objects = Map::new();
    for o in body.get("objects").and_then(Value::as_array).into_iter().flatten() {
        let object = object(o, &now, None)?;
        objects.insert(object["name"].as_str().unwrap_or_default().to_owned(), object);
    }
    doc.insert("objects".into(), Value::Object(objects));
    let mut properties = Map::new();
    for (key, p) in body.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let mut p = p.clone();
        p["name"] = json!(key);
        properties.insert(key.clone(), property(&p)?);
    }
    doc.insert("properties".into(), Value::Object(properties));
    let mut tags = Vec::new();
    for t in body.get("tags").and_then(Value::as_array).into_iter().flatten() {
        tags.push(json!({"name": required_name(t, "name")?, "created_at": now, "updated_at": now}));
    }
    doc.insert("tags".into(), json!(tags));
    ns.document = Value::Object(doc).to_string();
    let created = ns.clone();
    ctx.core.write(|w| Ok::<_, ApiError>((plan_put_metadef_namespace(w, None, ns).map_err(api::refused)?, ())))?;
    Ok(Resp::json(axum::http::StatusCode::CREATED, view(&created, true)))
}

/// `GET /v2/metadefs/namespaces/{ns}`.
pub fn show(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(view(&find(ctx, req)?, true)))
}

/// `PUT /v2/metadefs/namespaces/{ns}` (admin): replace its fields (a
/// new `namespace` renames it).
pub fn update(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let new_name = required_name(&body, "namespace")?;
    let (ns, ()) = change_namespace(ctx, req, "modify_metadef_namespace", |ns, doc| {
        ns.namespace = new_name;
        namespace_fields(ns, doc, &body)
    })?;
    Ok(Resp::ok(view(&ns, false)))
}

/// `DELETE /v2/metadefs/namespaces/{ns}` (admin; a protected one is 403).
pub fn delete(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = req.param(0).to_owned();
    find(ctx, req)?;
    admin_only(req, "delete_metadef_namespace")?;
    ctx.core.write(|w| {
        if !w.compute.metadef_namespaces.get(&name).is_some_and(|ns| visible(req, ns)) {
            return Err(not_found(&name));
        }
        Ok((plan_delete_metadef_namespace(w, &name).map_err(api::refused)?, ()))
    })?;
    Ok(Resp::no_content())
}

pub(crate) fn association(body: &Value, now: &str) -> ApiResult<Value> {
    let mut out = json!({"name": required_name(body, "name")?, "created_at": now, "updated_at": now});
    for key in ["prefix", "properties_target"] {
        if let Some(v) = str_field(body, key)? {
            out[key] = json!(v);
        }
    }
    Ok(out)
}

fn object(body: &Value, now: &str, created: Option<&Value>) -> ApiResult<Value> {
    let name = required_name(body, "name")?;
    let mut out = json!({
        "name": name,
        "required": body.get("required").cloned().unwrap_or(json!([])),
        "properties": body.get("properties").cloned().unwrap_or(json!({})),
        "created_at": created.cloned().unwrap_or(json!(now)),
        "updated_at": now,
    });
    if let Some(d) = str_field(body, "description")? {
        out["description"] = json!(d);
    }
    Ok(out)
}

/// A property definition: `name`, `title` and `type` required, the rest
/// kept as given (Glance's property schema).
fn property(body: &Value) -> ApiResult<Value> {
    required_name(body, "name")?;
    for key in ["title", "type"] {
        if str_field(body, key)?.is_none() {
            return Err(ApiError::bad_request(format!("'{key}' is a required property")));
        }
    }
    let Some(map) = body.as_object() else {
        return Err(ApiError::bad_request("Malformed request body"));
    };
    Ok(Value::Object(map.clone()))
}

fn object_view(ns: &str, object: &Value) -> Value {
    let mut out = object.clone();
    out["self"] = json!(format!("/v2/metadefs/namespaces/{ns}/objects/{}", object["name"].as_str().unwrap_or("")));
    out["schema"] = json!("v2/schemas/metadefs/object");
    out
}

/// `GET /v2/metadefs/namespaces/{ns}/objects`.
pub fn objects(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let doc = document(&ns);
    let objects: Vec<Value> = doc
        .get("objects")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(_, o)| object_view(&ns.namespace, o))
        .collect();
    Ok(Resp::ok(json!({"objects": objects, "schema": "v2/schemas/metadefs/objects"})))
}

fn object_missing(ns: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("The metadata definition object with name={name} was not found in namespace={ns}."))
}

/// `POST /v2/metadefs/namespaces/{ns}/objects` (admin): 201.
pub fn create_object(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let object = object(&body, &now(), None)?;
    let (ns, object) = change_namespace(ctx, req, "add_metadef_object", |ns, doc| {
        let objects = entry_map(doc, "objects");
        let name = object["name"].as_str().unwrap_or_default().to_owned();
        if objects.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "A metadata definition object with name={name} already exists in namespace={}.",
                ns.namespace
            )));
        }
        objects.insert(name, object.clone());
        Ok(object)
    })?;
    Ok(Resp::json(axum::http::StatusCode::CREATED, object_view(&ns.namespace, &object)))
}

fn entry_map<'d>(doc: &'d mut Map<String, Value>, key: &str) -> &'d mut Map<String, Value> {
    if !doc.get(key).is_some_and(Value::is_object) {
        doc.insert(key.into(), json!({}));
    }
    doc.get_mut(key).and_then(Value::as_object_mut).expect("an object was just put there")
}

/// `GET /v2/metadefs/namespaces/{ns}/objects/{name}`.
pub fn show_object(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let name = req.param(1);
    let doc = document(&ns);
    let object = doc.get("objects").and_then(|o| o.get(name)).ok_or_else(|| object_missing(&ns.namespace, name))?;
    Ok(Resp::ok(object_view(&ns.namespace, object)))
}

/// `PUT /v2/metadefs/namespaces/{ns}/objects/{name}` (admin).
pub fn update_object(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let old = req.param(1).to_owned();
    let (ns, object) = change_namespace(ctx, req, "modify_metadef_object", |ns, doc| {
        let objects = entry_map(doc, "objects");
        let current = objects.remove(&old).ok_or_else(|| object_missing(&ns.namespace, &old))?;
        let object = object(&body, &now(), current.get("created_at"))?;
        let name = object["name"].as_str().unwrap_or_default().to_owned();
        if objects.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "Invalid update. It would result in a duplicate metadata definition object with the same name={name} in namespace={}.",
                ns.namespace
            )));
        }
        objects.insert(name, object.clone());
        Ok(object)
    })?;
    Ok(Resp::ok(object_view(&ns.namespace, &object)))
}

/// `DELETE /v2/metadefs/namespaces/{ns}/objects/{name}` (admin).
pub fn delete_object(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = req.param(1).to_owned();
    change_namespace(ctx, req, "delete_metadef_object", |ns, doc| {
        entry_map(doc, "objects").remove(&name).map(|_| ()).ok_or_else(|| object_missing(&ns.namespace, &name))
    })?;
    Ok(Resp::no_content())
}

fn property_missing(ns: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("The metadata definition property with name={name} was not found in namespace={ns}."))
}

/// `GET /v2/metadefs/namespaces/{ns}/properties`.
pub fn properties(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let doc = document(&ns);
    let mut properties = Map::new();
    for (key, p) in doc.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let mut p = p.clone();
        if let Some(map) = p.as_object_mut() {
            map.remove("name");
        }
        properties.insert(key.clone(), p);
    }
    Ok(Resp::ok(json!({"properties": properties})))
}

/// `POST /v2/metadefs/namespaces/{ns}/properties` (admin): 201.
pub fn create_property(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let property = property(&body)?;
    let (_, property) = change_namespace(ctx, req, "add_metadef_property", |ns, doc| {
        let name = property["name"].as_str().unwrap_or_default().to_owned();
        let properties = entry_map(doc, "properties");
        if properties.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "A metadata definition property with name={name} already exists in namespace={}.",
                ns.namespace
            )));
        }
        properties.insert(name, property.clone());
        Ok(property)
    })?;
    Ok(Resp::json(axum::http::StatusCode::CREATED, property))
}

/// `GET /v2/metadefs/namespaces/{ns}/properties/{name}`.
pub fn show_property(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let ns = find(ctx, req)?;
    let name = req.param(1);
    let doc = document(&ns);
    let property =
        doc.get("properties").and_then(|p| p.get(name)).ok_or_else(|| property_missing(&ns.namespace, name))?;
    Ok(Resp::ok(property.clone()))
}

/// `PUT /v2/metadefs/namespaces/{ns}/properties/{name}` (admin).
pub fn update_property(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let body = api::parse_body(req)?;
    let property = property(&body)?;
    let old = req.param(1).to_owned();
    let (_, property) = change_namespace(ctx, req, "modify_metadef_property", |ns, doc| {
        let properties = entry_map(doc, "properties");
        properties.remove(&old).ok_or_else(|| property_missing(&ns.namespace, &old))?;
        let name = property["name"].as_str().unwrap_or_default().to_owned();
        if properties.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "Invalid update. It would result in a duplicate metadata definition property with the same name={name} in namespace={}.",
                ns.namespace
            )));
        }
        properties.insert(name, property.clone());
        Ok(property)
    })?;
    Ok(Resp::ok(property))
}

/// `DELETE /v2/metadefs/namespaces/{ns}/properties/{name}` (admin).
pub fn delete_property(ctx: &ImageCtx, req: &Req) -> ApiResult<Resp> {
    let name = req.param(1).to_owned();
    change_namespace(ctx, req, "remove_metadef_property", |ns, doc| {
        entry_map(doc, "properties").remove(&name).map(|_| ()).ok_or_else(|| property_missing(&ns.namespace, &name))
    })?;
    Ok(Resp::no_content())
}
