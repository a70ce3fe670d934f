//! The operator dashboard (`/dashboard`, issue 25): the page and its
//! script and style, embedded in the binary (`assets/dashboard/`), and the
//! JSON data endpoints behind its views (`/dashboard/api/...`, documented
//! in docs/DASHBOARD.md). Every data endpoint answers from the in-memory
//! `World` in one read (plus the host health the compute runtime keeps in
//! memory); nothing here writes. Callers authenticate like the APIs
//! (`X-Auth-Token`, in the listener's auth mode); capacity, hosts and
//! activity are for admins, leases and projects show a project member its
//! own project only.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::body::Body;
use axum::http::{header, Method, Response, StatusCode};
use berth_compute_model::quota;
use berth_compute_model::World;
use berth_scheduler::HostHealth;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::router::Services;

const INDEX_HTML: &str = include_str!("../assets/dashboard/index.html");
const APP_JS: &str = include_str!("../assets/dashboard/app.js");
const APP_CSS: &str = include_str!("../assets/dashboard/app.css");

/// Who is asking, as the dashboard sees it.
struct Caller {
    user: String,
    project: String,
    admin: bool,
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
        .body(body.into())
        .unwrap_or_default()
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    respond(status, "application/json", body.to_string())
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({"error": {"code": status.as_u16(), "message": message}}))
}

/// Serve `/dashboard{rest}`.
pub(crate) async fn serve(services: &Services, rest: &str, request: axum::extract::Request) -> Response<Body> {
    if rest == "/api/login" {
        return login(services, request).await;
    }
    let method = request.method();
    let query = request.uri().query().unwrap_or_default();
    let headers = request.headers();
    if method != Method::GET {
        return error(StatusCode::METHOD_NOT_ALLOWED, "The dashboard is read-only: only GET is allowed.");
    }
    match rest {
        "" | "/" | "/index.html" => return respond(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML),
        "/app.js" => return respond(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS),
        "/app.css" => return respond(StatusCode::OK, "text/css; charset=utf-8", APP_CSS),
        "/api/config" => {
            let mode = match services.server.config.auth_mode {
                berth_http::AuthMode::NoAuth2 => "noauth2",
                berth_http::AuthMode::Keystone => "keystone",
                berth_http::AuthMode::TrustedHeaders => "trusted-headers",
            };
            return json_response(StatusCode::OK, &json!({"auth_mode": mode}));
        }
        _ => {}
    }
    let Some(endpoint) = rest.strip_prefix("/api/") else {
        return error(StatusCode::NOT_FOUND, "No such dashboard page.");
    };
    let caller = match berth_http::identify(&services.server.config, headers).await {
        Ok(auth) => Caller {
            admin: auth.roles.iter().any(|r| r == "admin"),
            user: auth.user_id.unwrap_or_default(),
            project: auth.project_id.unwrap_or_default(),
        },
        Err(err) => return error(err.status, "Log in with a token (X-Auth-Token) to read the dashboard."),
    };
    let Some(compute) = &services.compute else {
        return error(StatusCode::NOT_FOUND, "This process serves placement only: no dashboard data.");
    };
    let query = berth_http::parse_query(query);
    let param = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let runtime = &compute.compute;
    let now = runtime.now();
    let admin_only = |caller: &Caller| -> Option<Response<Body>> {
        (!caller.admin).then(|| error(StatusCode::FORBIDDEN, "Only an admin may read this view."))
    };
    match endpoint {
        "session" => json_response(
            StatusCode::OK,
            &json!({"user": caller.user, "project": caller.project, "admin": caller.admin, "now": now}),
        ),
        "capacity" => {
            if let Some(refused) = admin_only(&caller) {
                return refused;
            }
            let health = runtime.health.at(now);
            let world = services.core.read();
            let body = capacity(&world, &health);
            drop(world);
            respond(StatusCode::OK, "application/json", body)
        }
        "flavors" => {
            if let Some(refused) = admin_only(&caller) {
                return refused;
            }
            let health = runtime.health.at(now);
            let world = services.core.read();
            json_response(StatusCode::OK, &json!({"flavors": free_by_flavor(&world, &health)}))
        }
        "leases" => {
            // `Err(key)`: that parameter is not an integer.
            let parse = |key: &'static str, default: i64| -> Result<i64, &'static str> {
                match param(key) {
                    None | Some("") => Ok(default),
                    Some(v) => v.parse::<i64>().map_err(|_| key),
                }
            };
            let (start, end) = match (parse("start", now - 86_400), parse("end", now + 7 * 86_400)) {
                (Ok(start), Ok(end)) => (start, end),
                (Err(key), _) | (_, Err(key)) => {
                    return error(StatusCode::BAD_REQUEST, &format!("Invalid {key}: expected seconds since the epoch."))
                }
            };
            if end <= start {
                return error(StatusCode::BAD_REQUEST, "end must be later than start.");
            }
            let world = services.core.read();
            let body = leases(&world, &caller, start, end, now);
            drop(world);
            respond(StatusCode::OK, "application/json", body)
        }
        "projects" => {
            let world = services.core.read();
            json_response(StatusCode::OK, &json!({"projects": projects(&world, &caller)}))
        }
        "activity" => {
            if let Some(refused) = admin_only(&caller) {
                return refused;
            }
            let (counters, gauges) = crate::router::collect_metrics(services);
            let counters: BTreeMap<&str, u64> = counters.iter().map(|(n, _, v)| (*n, *v)).collect();
            let gauges: BTreeMap<&str, f64> = gauges.iter().map(|(n, _, v)| (*n, *v)).collect();
            let latency: Vec<Value> = services
                .server
                .metrics
                .latency_summary()
                .into_iter()
                .map(|l| {
                    json!({"route": l.route, "method": l.method, "count": l.count,
                                "mean": l.mean, "p50": l.p50, "p99": l.p99})
                })
                .collect();
            let (requests, client_errors, server_errors) = services.server.metrics.status_totals();
            json_response(
                StatusCode::OK,
                &json!({"now": now, "counters": counters, "gauges": gauges, "latency": latency,
                        "requests": {"total": requests, "4xx": client_errors, "5xx": server_errors}}),
            )
        }
        other => match other.strip_prefix("hosts/") {
            Some(id) => {
                if let Some(refused) = admin_only(&caller) {
                    return refused;
                }
                let Ok(uuid) = Uuid::parse_str(id) else {
                    return error(StatusCode::BAD_REQUEST, "Invalid host: expected a compute node uuid.");
                };
                let world = services.core.read();
                match host_detail(&world, uuid) {
                    Some(body) => json_response(StatusCode::OK, &body),
                    None => error(StatusCode::NOT_FOUND, &format!("No compute node {uuid}.")),
                }
            }
            None => error(StatusCode::NOT_FOUND, "No such dashboard endpoint."),
        },
    }
}

/// `POST /dashboard/api/login` `{"user", "password", "project"[,
/// "domain"]}` (keystone mode): Keystone's token for that user, scoped to
/// that project (names; domain `Default` unless given), as `{"token"}`;
/// 401 when Keystone refuses the credentials, 503 when it cannot be asked.
async fn login(services: &Services, request: axum::extract::Request) -> Response<Body> {
    if request.method() != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "Log in with POST.");
    }
    let Some(keystone) = &services.keystone else {
        return error(StatusCode::BAD_REQUEST, "This berth does not use Keystone: log in with a token.");
    };
    let limit = services.server.config.max_body_bytes;
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), limit).await else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large.");
    };
    let Ok(body) = serde_json::from_slice::<Value>(&bytes) else {
        return error(StatusCode::BAD_REQUEST, "Malformed JSON: expected {\"user\", \"password\", \"project\"}.");
    };
    let field = |key: &str| body.get(key).and_then(Value::as_str).filter(|v| !v.is_empty());
    let (Some(user), Some(password), Some(project)) = (field("user"), field("password"), field("project")) else {
        return error(StatusCode::BAD_REQUEST, "user, password and project are required strings.");
    };
    let domain = match body.get("domain") {
        None | Some(Value::Null) => "Default",
        Some(Value::String(d)) if !d.is_empty() => d.as_str(),
        Some(_) => return error(StatusCode::BAD_REQUEST, "domain must be a non-empty string."),
    };
    match keystone.issue_user_token(user, password, project, domain).await {
        Ok(token) => json_response(StatusCode::OK, &json!({"token": token})),
        Err(berth_identity::Error::Invalid(_)) => {
            error(StatusCode::UNAUTHORIZED, "Keystone refused these credentials.")
        }
        Err(berth_identity::Error::Unavailable(_)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, "Keystone could not be reached; try again.")
        }
    }
}

/// The classes the dashboard draws.
const CLASSES: [&str; 3] = ["VCPU", "MEMORY_MB", "DISK_GB"];

/// One class on one node: usable capacity, used, largest `max_unit`
/// (summed over the node's provider tree); `None` without inventory.
type Room = Option<(i64, i64, i64)>;

/// Capacity and usage of one compute node's provider tree, per class of
/// [`CLASSES`].
fn tree_capacity(world: &World, root: Uuid) -> [Room; 3] {
    let mut out = [None; 3];
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        let Some(provider) = world.placement.providers.get(&id) else { continue };
        for (slot, class) in out.iter_mut().zip(CLASSES) {
            if let Some(inv) = provider.inventories.get(class) {
                let entry = slot.get_or_insert((0, 0, 0));
                entry.0 += inv.capacity();
                entry.1 += provider.usages.get(class).copied().unwrap_or(0);
                entry.2 = entry.2.max(inv.max_unit);
            }
        }
        stack.extend(provider.children.iter().copied());
    }
    out
}

/// Aggregate names and availability zones per host.
fn host_groups(world: &World) -> HashMap<&str, (Vec<&str>, Vec<&str>)> {
    let mut out: HashMap<&str, (Vec<&str>, Vec<&str>)> = HashMap::new();
    for aggregate in world.compute.aggregates.values() {
        for host in &aggregate.hosts {
            let entry = out.entry(host.as_str()).or_default();
            entry.0.push(aggregate.name.as_str());
            if let Some(az) = aggregate.availability_zone() {
                entry.1.push(az);
            }
        }
    }
    out
}

/// One compute node as the capacity views see it.
struct HostView<'a> {
    uuid: Uuid,
    host: &'a str,
    node: &'a str,
    cell: &'a str,
    aggregates: Vec<&'a str>,
    zone: &'a str,
    up: bool,
    disabled: bool,
    /// Enrolled in the reservation pool (Blazar's os-hosts).
    reserved: bool,
    capacity: [Room; 3],
}

impl HostView<'_> {
    /// May general scheduling place a new server here now?
    fn schedulable(&self) -> bool {
        self.up && !self.disabled && !self.reserved
    }
}

fn host_views<'a>(world: &'a World, health: &dyn HostHealth) -> Vec<HostView<'a>> {
    let groups = host_groups(world);
    let mut nodes: Vec<_> = world.compute.compute_nodes.values().collect();
    nodes.sort_by(|a, b| (a.host.as_str(), a.node.as_str()).cmp(&(b.host.as_str(), b.node.as_str())));
    nodes
        .into_iter()
        .map(|node| {
            let (aggregates, zones) = groups.get(node.host.as_str()).cloned().unwrap_or_default();
            HostView {
                uuid: node.uuid,
                host: &node.host,
                node: &node.node,
                cell: world.compute.cells.get(&node.cell).map_or("", |c| c.name.as_str()),
                aggregates,
                zone: zones.first().copied().unwrap_or("nova"),
                up: health.is_up(&node.host),
                disabled: health.is_disabled(&node.host),
                reserved: world.compute.leases.host_by_service.contains_key(&node.host),
                capacity: tree_capacity(world, node.uuid),
            }
        })
        .collect()
}

/// A JSON string literal.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// `/dashboard/api/capacity`, written straight into a string (thousands
/// of hosts: no `Value` tree).
fn capacity(world: &World, health: &dyn HostHealth) -> String {
    use std::fmt::Write;
    let hosts = host_views(world, health);
    let mut totals = [(0i64, 0i64); 3];
    let mut out = String::with_capacity(320 * hosts.len() + 200);
    out.push_str("{\"hosts\":[");
    for (i, h) in hosts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let aggregates: Vec<String> = h.aggregates.iter().map(|a| quoted(a)).collect();
        let _ = write!(
            out,
            "{{\"uuid\":\"{}\",\"host\":{},\"node\":{},\"cell\":{},\"aggregates\":[{}],\"availability_zone\":{},\
             \"up\":{},\"disabled\":{},\"reserved\":{},\"resources\":{{",
            h.uuid,
            quoted(h.host),
            quoted(h.node),
            quoted(h.cell),
            aggregates.join(","),
            quoted(h.zone),
            h.up,
            h.disabled,
            h.reserved
        );
        let mut first = true;
        for ((room, class), total) in h.capacity.iter().zip(CLASSES).zip(totals.iter_mut()) {
            if let Some((cap, used, _)) = room {
                total.0 += cap;
                total.1 += used;
                let comma = if first { "" } else { "," };
                first = false;
                let _ = write!(out, "{comma}\"{class}\":{{\"total\":{cap},\"used\":{used}}}");
            }
        }
        out.push_str("}}");
    }
    out.push_str("],\"totals\":{");
    for (i, (class, (cap, used))) in CLASSES.iter().zip(totals).enumerate() {
        let comma = if i > 0 { "," } else { "" };
        let _ = write!(out, "{comma}\"{class}\":{{\"total\":{cap},\"used\":{used}}}");
    }
    out.push_str("}}");
    out
}

/// How many more servers of `flavor` fit on a host now (0 when one does
/// not fit in a single allocation's `max_unit`).
fn fits(flavor: &berth_compute_model::Flavor, capacity: &[Room; 3]) -> i64 {
    let need = [flavor.vcpus, flavor.memory_mb, flavor.root_gb + flavor.ephemeral_gb];
    let mut count = i64::MAX;
    for (amount, room) in need.into_iter().zip(capacity) {
        if amount <= 0 {
            continue;
        }
        let Some((cap, used, max_unit)) = room else { return 0 };
        if amount > *max_unit {
            return 0;
        }
        count = count.min((cap - used).max(0) / amount);
    }
    if count == i64::MAX {
        0
    } else {
        count
    }
}

/// Free capacity by flavor: how many more of each enabled flavor fit now
/// on the hosts general scheduling may use (up, enabled, not in the
/// reservation pool), overall and per availability zone. Reservation
/// flavors (Blazar's `reservation:ID`, one per instance reservation) are
/// left out: their slots are the lease's. Also the source of the
/// `berth_free_capacity_by_flavor_total` gauges.
pub(crate) fn free_by_flavor(world: &World, health: &dyn HostHealth) -> Vec<Value> {
    let hosts = host_views(world, health);
    let usable: Vec<&HostView> = hosts.iter().filter(|h| h.schedulable()).collect();
    world
        .compute
        .flavors
        .values()
        .filter(|f| !f.disabled && !f.extra_specs.contains_key(berth_compute_model::lease::RESERVATION_SPEC))
        .map(|flavor| {
            let mut total = 0;
            let mut hosts_with_room = 0;
            let mut by_zone: BTreeMap<&str, i64> = BTreeMap::new();
            for host in &usable {
                let n = fits(flavor, &host.capacity);
                total += n;
                hosts_with_room += i64::from(n > 0);
                *by_zone.entry(host.zone).or_default() += n;
            }
            json!({"flavor": flavor.name, "id": flavor.flavorid, "vcpus": flavor.vcpus,
                   "ram": flavor.memory_mb, "disk": flavor.root_gb + flavor.ephemeral_gb,
                   "free": total, "hosts_with_room": hosts_with_room, "by_zone": by_zone})
        })
        .collect()
}

/// `/dashboard/api/leases`: the bars of the lease calendar in
/// `[start, end)`: one per (reservation, host), the caller's project only
/// unless admin; rows are the enrolled hosts (for a non-admin, those its
/// bars are on).
fn leases(world: &World, caller: &Caller, start: i64, end: i64, now: i64) -> String {
    use std::fmt::Write;
    let tables = &world.compute.leases;
    // Written straight into strings: a month of ten thousand leases is
    // thousands of bars.
    let mut bars = String::new();
    let mut lease_list = String::new();
    let mut on_hosts = BTreeSet::new();
    for lease in tables.leases.values() {
        if !caller.admin && lease.project_id != caller.project {
            continue;
        }
        if !(lease.start < end && start < lease.end) {
            continue;
        }
        let (name, project, status) = (quoted(&lease.name), quoted(&lease.project_id), lease.status.as_str());
        let comma = if lease_list.is_empty() { "" } else { "," };
        let _ = write!(
            lease_list,
            "{comma}{{\"id\":\"{}\",\"name\":{name},\"project\":{project},\"status\":\"{status}\",\
             \"start\":{},\"end\":{}}}",
            lease.id, lease.start, lease.end
        );
        for reservation in &lease.reservations {
            let (kind, shape) = match &reservation.kind {
                berth_compute_model::lease::ReservationKind::Host { .. } => ("physical:host", "null".to_owned()),
                berth_compute_model::lease::ReservationKind::Instance { vcpus, memory_mb, disk_gb, amount, .. } => (
                    "virtual:instance",
                    format!(
                        "{{\"vcpus\":{vcpus},\"memory_mb\":{memory_mb},\"disk_gb\":{disk_gb},\"amount\":{amount}}}"
                    ),
                ),
            };
            for alloc in &reservation.allocations {
                on_hosts.insert(alloc.host_id);
                let comma = if bars.is_empty() { "" } else { "," };
                let _ = write!(
                    bars,
                    "{comma}{{\"lease\":\"{}\",\"name\":{name},\"project\":{project},\"status\":\"{status}\",\
                     \"reservation\":\"{}\",\"type\":\"{kind}\",\"shape\":{shape},\"host\":\"{}\",\
                     \"slots\":{},\"start\":{},\"end\":{}}}",
                    lease.id, reservation.id, alloc.host_id, alloc.slots, lease.start, lease.end
                );
            }
        }
    }
    let mut out = String::with_capacity(bars.len() + lease_list.len() + 160 * tables.hosts.len() + 100);
    let _ = write!(out, "{{\"start\":{start},\"end\":{end},\"now\":{now},\"hosts\":[");
    let mut first = true;
    for h in tables.hosts.values().filter(|h| caller.admin || on_hosts.contains(&h.id)) {
        let comma = if first { "" } else { "," };
        first = false;
        let _ = write!(
            out,
            "{comma}{{\"id\":\"{}\",\"name\":{},\"host\":{},\"availability_zone\":{},\"reservable\":{},\
             \"vcpus\":{},\"memory_mb\":{}}}",
            h.id,
            quoted(&h.hypervisor_hostname),
            quoted(&h.service_name),
            quoted(&h.availability_zone),
            h.reservable,
            h.vcpus,
            h.memory_mb
        );
    }
    let _ = write!(out, "],\"leases\":[{lease_list}],\"bars\":[{bars}]}}");
    out
}

/// `/dashboard/api/projects`: usage against quota per project (only the
/// caller's unless admin).
fn projects(world: &World, caller: &Caller) -> Vec<Value> {
    let mut names: BTreeSet<&str> = BTreeSet::new();
    if caller.admin {
        names.extend(world.compute.instance_mappings.values().map(|m| m.project_id.as_str()));
        names.extend(world.compute.quotas.keys().map(|(p, _, _)| p.as_str()));
        names.extend(world.compute.leases.leases.values().map(|l| l.project_id.as_str()));
    } else {
        names.insert(caller.project.as_str());
    }
    let mut lease_counts: HashMap<&str, i64> = HashMap::new();
    for lease in world.compute.leases.leases.values() {
        if !matches!(lease.status.as_str(), "TERMINATED") {
            *lease_counts.entry(lease.project_id.as_str()).or_default() += 1;
        }
    }
    names
        .into_iter()
        .map(|project| {
            let mut resources = serde_json::Map::new();
            for resource in ["instances", "cores", "ram", "server_groups"] {
                resources.insert(
                    resource.to_owned(),
                    json!({"used": quota::usage(world, project, None, resource),
                           "limit": quota::project_limit(world, project, resource)}),
                );
            }
            json!({"project": project, "resources": resources,
                   "leases": lease_counts.get(project).copied().unwrap_or(0)})
        })
        .collect()
}

/// `/dashboard/api/hosts/{uuid}`: a compute node's providers (tree),
/// inventories, usages, traits and aggregates, and the allocations
/// against them (servers: consumers with an instance mapping).
fn host_detail(world: &World, root: Uuid) -> Option<Value> {
    let node = world.compute.compute_nodes.get(&root)?;
    let mut providers = Vec::new();
    let mut consumers = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        let Some(p) = world.placement.providers.get(&id) else { continue };
        let inventories: BTreeMap<&str, Value> = p
            .inventories
            .iter()
            .map(|(class, inv)| {
                (
                    class.as_str(),
                    json!({"total": inv.total, "reserved": inv.reserved,
                    "allocation_ratio": inv.allocation_ratio, "capacity": inv.capacity(),
                    "max_unit": inv.max_unit, "used": p.usages.get(class).copied().unwrap_or(0)}),
                )
            })
            .collect();
        providers.push(json!({"uuid": p.row.uuid.to_string(), "name": p.row.name, "parent": p.row.parent.map(|u| u.to_string()),
                              "generation": p.row.generation, "inventories": inventories,
                              "traits": p.traits, "aggregates": p.aggregates.iter().map(Uuid::to_string).collect::<Vec<_>>()}));
        consumers.extend(p.consumers.iter().copied());
        stack.extend(p.children.iter().copied());
    }
    let allocations: Vec<Value> = consumers
        .iter()
        .filter_map(|c| world.placement.consumers.get(c))
        .map(|c| {
            let mut resources: BTreeMap<&str, i64> = BTreeMap::new();
            for (provider, classes) in c.allocations.iter() {
                if world.placement.providers.get(provider).is_some_and(|p| p.row.root == root) {
                    for (class, amount) in classes {
                        *resources.entry(class.as_str()).or_default() += *amount;
                    }
                }
            }
            json!({"consumer": c.row.uuid.to_string(), "project": c.row.project_id, "user": c.row.user_id,
                   "consumer_type": c.row.consumer_type,
                   "server": world.compute.instance_mappings.contains_key(&c.row.uuid),
                   "resources": resources})
        })
        .collect();
    Some(json!({"uuid": root.to_string(), "host": node.host, "node": node.node,
                "cell": world.compute.cells.get(&node.cell).map(|c| c.name.clone()),
                "providers": providers, "allocations": allocations}))
}

/// The dashboard's gauges in Prometheus text format: free capacity by
/// flavor (`berth_free_capacity_by_flavor_total{flavor}`, and per
/// availability zone as `berth_free_capacity_by_flavor_and_zone_total`),
/// allocatable vs allocated per availability zone and resource class
/// (`berth_capacity_allocatable_total` / `berth_capacity_allocated_total`,
/// hosts general scheduling may use), and each project's usage and quota
/// (`berth_project_usage_total` / `berth_project_quota_limit`, -1 =
/// unlimited).
pub(crate) fn dashboard_metrics(services: &Services) -> String {
    let Some(compute) = &services.compute else { return String::new() };
    let runtime = &compute.compute;
    let health = runtime.health.at(runtime.now());
    let world = services.core.read();
    let flavors = free_by_flavor(&world, &health);
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let mut out = String::new();
    let family = |out: &mut String, name: &str, help: &str| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
    };
    family(
        &mut out,
        "berth_free_capacity_by_flavor_total",
        "How many more servers of each flavor fit now on the hosts general scheduling may use.",
    );
    for f in &flavors {
        let name = f["flavor"].as_str().unwrap_or_default();
        out.push_str(&format!("berth_free_capacity_by_flavor_total{{flavor=\"{}\"}} {}\n", escape(name), f["free"]));
    }
    family(&mut out, "berth_free_capacity_by_flavor_and_zone_total", "Free capacity by flavor, per availability zone.");
    for f in &flavors {
        let name = f["flavor"].as_str().unwrap_or_default();
        if let Some(zones) = f["by_zone"].as_object() {
            for (zone, n) in zones {
                out.push_str(&format!(
                    "berth_free_capacity_by_flavor_and_zone_total{{flavor=\"{}\",availability_zone=\"{}\"}} {}\n",
                    escape(name),
                    escape(zone),
                    n
                ));
            }
        }
    }
    let mut by_zone: BTreeMap<(&str, &str), (i64, i64)> = BTreeMap::new();
    for host in host_views(&world, &health).iter().filter(|h| h.schedulable()) {
        for (room, class) in host.capacity.iter().zip(CLASSES) {
            if let Some((cap, used, _)) = room {
                let entry = by_zone.entry((host.zone, class)).or_default();
                entry.0 += cap;
                entry.1 += used;
            }
        }
    }
    for (name, help, pick) in [
        (
            "berth_capacity_allocatable_total",
            "Usable capacity ((total - reserved) x ratio) of the hosts general scheduling may use, per zone and class.",
            0,
        ),
        (
            "berth_capacity_allocated_total",
            "Allocated amounts on the hosts general scheduling may use, per zone and class.",
            1,
        ),
    ] {
        family(&mut out, name, help);
        for ((zone, class), (cap, used)) in &by_zone {
            let value = if pick == 0 { cap } else { used };
            out.push_str(&format!("{name}{{availability_zone=\"{}\",resource=\"{class}\"}} {value}\n", escape(zone)));
        }
    }
    let admin = Caller { user: String::new(), project: String::new(), admin: true };
    let projects = projects(&world, &admin);
    for (name, help, field) in [
        (
            "berth_project_usage_total",
            "Counted usage of each project (instances, cores, ram MiB, server groups).",
            "used",
        ),
        ("berth_project_quota_limit", "Each project's quota limit (-1: unlimited).", "limit"),
    ] {
        family(&mut out, name, help);
        for p in &projects {
            let project = p["project"].as_str().unwrap_or_default();
            if let Some(resources) = p["resources"].as_object() {
                for (resource, v) in resources {
                    out.push_str(&format!(
                        "{name}{{project=\"{}\",resource=\"{resource}\"}} {}\n",
                        escape(project),
                        v[field]
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flavor(vcpus: i64, ram: i64, disk: i64) -> berth_compute_model::Flavor {
        berth_compute_model::Flavor { vcpus, memory_mb: ram, root_gb: disk, ..Default::default() }
    }

    #[test]
    fn a_flavor_fits_as_often_as_its_scarcest_class_allows() {
        let mut cap = [Some((16, 4, 16)), Some((8192, 1024, 8192)), Some((100, 0, 100))];
        assert_eq!(fits(&flavor(2, 512, 10), &cap), 6, "VCPU: 12 free / 2");
        assert_eq!(fits(&flavor(1, 2048, 1), &cap), 3, "RAM: 7168 free / 2048");
        assert_eq!(fits(&flavor(32, 512, 1), &cap), 0, "above max_unit");
        cap[2] = None;
        assert_eq!(fits(&flavor(1, 512, 1), &cap), 0, "no disk inventory for a flavor that needs disk");
        assert_eq!(fits(&flavor(1, 512, 0), &cap), 12);
    }
}
