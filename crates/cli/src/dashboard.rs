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
use berth_compute_model::lease::PowerState;
use berth_compute_model::quota;
use berth_compute_model::World;
use berth_reservations::PoolState;
use berth_scheduler::HostHealth;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::services::Services;

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
            let body = capacity(&world, &health, now, rules(runtime));
            drop(world);
            respond(StatusCode::OK, "application/json", body)
        }
        "flavors" => {
            if let Some(refused) = admin_only(&caller) {
                return refused;
            }
            let at = match param("at") {
                None | Some("") => now,
                Some(v) => match v.parse::<i64>() {
                    Ok(at) if at >= now => at,
                    Ok(_) => return error(StatusCode::BAD_REQUEST, "at must not be in the past."),
                    Err(_) => return error(StatusCode::BAD_REQUEST, "Invalid at: expected seconds since the epoch."),
                },
            };
            let health = runtime.health.at(now);
            let world = services.core.read();
            json_response(StatusCode::OK, &free_by_flavor(&world, &health, now, at, rules(runtime)))
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
            let body = leases(&world, &caller, start, end, now, rules(runtime));
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
            let (counters, gauges) = crate::services::collect_metrics(services);
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
            let timings: BTreeMap<&str, Value> = [
                ("time_to_active", &runtime.metrics.timings.time_to_active),
                ("scheduler", &runtime.metrics.timings.scheduler),
                ("claim", &runtime.metrics.timings.claim),
            ]
            .into_iter()
            .map(|(name, h)| {
                let s = h.summary();
                (name, json!({"count": s.count, "mean": s.mean, "p50": s.p50, "p99": s.p99}))
            })
            .collect();
            let count = |name: &str| counters.get(name).copied().unwrap_or(0);
            let boots = json!({"accepted": count("berth_compute_boots_accepted_total"),
                               "active": count("berth_compute_instances_active_total"),
                               "failed": count("berth_compute_builds_failed_total"),
                               "buried": count("berth_compute_instances_buried_total")});
            json_response(
                StatusCode::OK,
                &json!({"now": now, "counters": counters, "gauges": gauges, "latency": latency,
                        "timings": timings, "boots": boots,
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
                match host_detail(&world, uuid, now, rules(runtime)) {
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

/// The classes the capacity view draws.
const CLASSES: [&str; 3] = ["VCPU", "MEMORY_MB", "DISK_GB"];

/// One class on one node: usable capacity, used, largest `max_unit`
/// (summed over the node's provider tree).
type Room = (i64, i64, i64);

/// A compute node's provider tree, summed: each class's room ([`CLASSES`]
/// in place, any other class in `other`; no allocation for a node with
/// only those), and its providers (for traits, read only when a flavor
/// asks for some).
struct Tree<'a> {
    rooms: [Option<Room>; 3],
    other: Vec<(&'a str, Room)>,
    providers: Providers<'a>,
}

/// The trait sets of a node tree's providers: the root's alone (most
/// nodes), or all.
enum Providers<'a> {
    Root(&'a BTreeSet<String>),
    All(Vec<&'a BTreeSet<String>>),
    None,
}

impl Tree<'_> {
    fn room(&self, class: &str) -> Option<Room> {
        match CLASSES.iter().position(|c| *c == class) {
            Some(i) => self.rooms[i],
            None => self.other.iter().find(|(c, _)| *c == class).map(|(_, r)| *r),
        }
    }

    /// Is `name` a trait of any provider of the tree?
    fn has_trait(&self, name: &str) -> bool {
        match &self.providers {
            Providers::Root(traits) => traits.contains(name),
            Providers::All(all) => all.iter().any(|traits| traits.contains(name)),
            Providers::None => false,
        }
    }
}

fn tree(world: &World, root: Uuid) -> Tree<'_> {
    let mut out = Tree { rooms: [None; 3], other: Vec::new(), providers: Providers::None };
    let add = |out: &mut Tree<'_>, class: &str, room: Room| {
        let slot = match CLASSES.iter().position(|c| *c == class) {
            Some(i) => &mut out.rooms[i],
            None => return false,
        };
        let entry = slot.get_or_insert((0, 0, 0));
        entry.0 += room.0;
        entry.1 += room.1;
        entry.2 = entry.2.max(room.2);
        true
    };
    let Some(top) = world.placement.providers.get(&root) else { return out };
    let mut all: Vec<&BTreeSet<String>> = Vec::new();
    let mut stack = vec![top];
    while let Some(provider) = stack.pop() {
        for (class, inv) in &provider.inventories {
            let room = (inv.capacity(), provider.usages.get(class).copied().unwrap_or(0), inv.max_unit);
            if !add(&mut out, class, room) {
                match out.other.iter_mut().find(|(c, _)| c == class) {
                    Some((_, r)) => {
                        r.0 += room.0;
                        r.1 += room.1;
                        r.2 = r.2.max(room.2);
                    }
                    None => out.other.push((class.as_str(), room)),
                }
            }
        }
        if !provider.children.is_empty() || !all.is_empty() {
            all.push(&provider.traits);
        }
        stack.extend(provider.children.iter().filter_map(|c| world.placement.providers.get(c)));
    }
    out.providers = if all.is_empty() { Providers::Root(&top.traits) } else { Providers::All(all) };
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

/// A reservation-pool host as the dashboard shows it.
#[derive(Clone, Copy)]
struct PoolHost {
    /// The enrolled host's id (os-hosts).
    id: i64,
    /// `pool_state` now: free, reserved, recycling, lent or reclaimed.
    state: PoolState,
    /// Power (issue 22).
    power: PowerState,
    reservable: bool,
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
    pool: Option<PoolHost>,
    tree: Tree<'a>,
}

impl HostView<'_> {
    /// May general scheduling place a new server here now? (A pool host
    /// only while lent.)
    fn schedulable(&self) -> bool {
        self.up && !self.disabled && self.pool.is_none_or(|p| p.state == PoolState::Lent)
    }
}

/// Pool hosts' `pool_state` at `now`, as
/// `berth_reservation_model::end_policy::pool_state` decides it, for many
/// hosts at once: the hosts an ended lease still lists as recycling are
/// gathered in one pass over the leases (the only bookings an ended lease
/// keeps), and a host's other bookings are found by time, not scanned.
struct PoolStates<'a> {
    world: &'a World,
    recycling: std::collections::HashSet<i64>,
    now: i64,
    lend_lead: Option<i64>,
}

impl<'a> PoolStates<'a> {
    fn new(world: &'a World, now: i64, lend_lead: Option<i64>) -> Self {
        let tables = &world.compute.leases;
        let recycling = tables
            .leases
            .values()
            .filter(|l| l.is_over())
            .flat_map(|l| l.reservations.iter().flat_map(|r| r.recycling.iter().copied()))
            .filter(|h| tables.bookings.contains_key(h))
            .collect();
        PoolStates { world, recycling, now, lend_lead }
    }

    fn of(&self, host: &berth_compute_model::lease::ReservableHost) -> PoolState {
        let tables = &self.world.compute.leases;
        if self.recycling.contains(&host.id) {
            return PoolState::Recycling;
        }
        if tables.overlapping(host.id, self.now, self.now.saturating_add(1), None).next().is_some() {
            return PoolState::Reserved;
        }
        match self.lend_lead {
            None => PoolState::Free,
            Some(_) if tables.lent(host.id, self.now, self.lend_lead) && host.power.state == PowerState::On => {
                PoolState::Lent
            }
            Some(_) if tables.lent(host.id, self.now, self.lend_lead) => PoolState::Free,
            Some(_) => PoolState::Reclaimed,
        }
    }
}

/// Lending's lead (`--pool-lend-lead`; `None`: lending off) and whether
/// isolated aggregates are filtered, from the scheduler's settings.
#[derive(Clone, Copy)]
struct Rules {
    lend_lead: Option<i64>,
    isolate: bool,
}

fn rules(compute: &berth_compute::Compute) -> Rules {
    let scheduler = &compute.config.scheduler;
    Rules { lend_lead: scheduler.pool_lend_lead, isolate: scheduler.enable_isolated_aggregate_filtering }
}

fn host_views<'a>(world: &'a World, health: &dyn HostHealth, now: i64, rules: Rules) -> Vec<HostView<'a>> {
    let groups = host_groups(world);
    let tables = &world.compute.leases;
    let states = PoolStates::new(world, now, rules.lend_lead);
    let mut nodes: Vec<_> = world.compute.compute_nodes.values().collect();
    nodes.sort_by(|a, b| (a.host.as_str(), a.node.as_str()).cmp(&(b.host.as_str(), b.node.as_str())));
    nodes
        .into_iter()
        .map(|node| {
            let (aggregates, zones) = groups.get(node.host.as_str()).cloned().unwrap_or_default();
            let pool = tables.host_of_service(&node.host).map(|h| PoolHost {
                id: h.id,
                state: states.of(h),
                power: h.power.state,
                reservable: h.reservable,
            });
            HostView {
                uuid: node.uuid,
                host: &node.host,
                node: &node.node,
                cell: world.compute.cells.get(&node.cell).map_or("", |c| c.name.as_str()),
                aggregates,
                zone: zones.first().copied().unwrap_or("nova"),
                up: health.is_up(&node.host),
                disabled: health.is_disabled(&node.host),
                pool,
                tree: tree(world, node.uuid),
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
fn capacity(world: &World, health: &dyn HostHealth, now: i64, rules: Rules) -> String {
    use std::fmt::Write;
    let hosts = host_views(world, health, now, rules);
    let mut totals = [(0i64, 0i64); 3];
    let mut out = String::with_capacity(360 * hosts.len() + 200);
    out.push_str("{\"hosts\":[");
    for (i, h) in hosts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let aggregates: Vec<String> = h.aggregates.iter().map(|a| quoted(a)).collect();
        let (pool_state, power, q) = match h.pool {
            Some(p) => (p.state.as_str(), p.power.as_str(), "\""),
            None => ("null", "null", ""),
        };
        let _ = write!(
            out,
            "{{\"uuid\":\"{}\",\"host\":{},\"node\":{},\"cell\":{},\"aggregates\":[{}],\"availability_zone\":{},\
             \"up\":{},\"disabled\":{},\"reserved\":{},\"pool_state\":{q}{pool_state}{q},\"power\":{q}{power}{q},\
             \"resources\":{{",
            h.uuid,
            quoted(h.host),
            quoted(h.node),
            quoted(h.cell),
            aggregates.join(","),
            quoted(h.zone),
            h.up,
            h.disabled,
            h.pool.is_some(),
        );
        let mut first = true;
        for (class, total) in CLASSES.iter().zip(totals.iter_mut()) {
            if let Some((cap, used, _)) = h.tree.room(class) {
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

/// What one server of a flavor asks of a host, as the scheduler's
/// placement query builds it from the flavor and its extra specs:
/// amounts per class (`resources[S]:CLASS=N` overriding the flavor's,
/// `hw:cpu_policy=dedicated` asking PCPU), required and forbidden traits
/// (`trait[S]:NAME=required|forbidden`), and the isolated aggregates
/// (metadata `trait:X=required` for an X the flavor does not require)
/// it may not use when `enable_isolated_aggregate_filtering` is on. All
/// request groups are summed over the host's provider tree.
#[derive(Debug, Default, PartialEq)]
struct Need<'a> {
    resources: BTreeMap<String, i64>,
    required: Vec<&'a str>,
    forbidden: Vec<&'a str>,
    isolated: BTreeSet<&'a str>,
}

fn need<'a>(world: &'a World, flavor: &'a berth_compute_model::Flavor, isolate: bool) -> Need<'a> {
    use berth_compute_model::extra_specs::{parse_granular, GranularKey};
    let mut out = Need::default();
    for (key, value) in &flavor.extra_specs {
        match parse_granular(key) {
            Some(GranularKey::Resource { class, .. }) => {
                if let Ok(amount) = value.trim().parse::<i64>() {
                    if amount >= 0 {
                        *out.resources.entry(class.to_owned()).or_insert(0) += amount;
                    }
                }
            }
            Some(GranularKey::Trait { name, .. }) => match value.as_str() {
                "required" => out.required.push(name),
                "forbidden" => out.forbidden.push(name),
                _ => {}
            },
            None => {}
        }
    }
    let spec = |key: &str| flavor.extra_specs.get(key).map(String::as_str);
    if spec("hw:cpu_policy") == Some("dedicated") {
        let extra = i64::from(spec("hw:emulator_threads_policy") == Some("isolate"));
        *out.resources.entry("PCPU".to_owned()).or_insert(0) += flavor.vcpus + extra;
        match spec("hw:cpu_thread_policy") {
            Some("isolate") => out.forbidden.push("HW_CPU_HYPERTHREADING"),
            Some("require") => out.required.push("HW_CPU_HYPERTHREADING"),
            _ => {}
        }
    }
    if !out.resources.contains_key("VCPU") && !out.resources.contains_key("PCPU") {
        out.resources.insert("VCPU".to_owned(), flavor.vcpus);
    }
    out.resources.entry("MEMORY_MB".to_owned()).or_insert(flavor.memory_mb);
    out.resources.entry("DISK_GB".to_owned()).or_insert(flavor.disk_gb());
    out.resources.retain(|_, amount| *amount != 0);
    if isolate {
        for aggregate in world.compute.aggregates.values() {
            let isolated = aggregate
                .metadata
                .iter()
                .any(|(k, v)| v == "required" && k.strip_prefix("trait:").is_some_and(|t| !out.required.contains(&t)));
            if isolated {
                out.isolated.insert(aggregate.name.as_str());
            }
        }
    }
    out
}

/// How many more servers needing `need` fit on `host` (0 when a trait
/// rules it out or one does not fit a single allocation's `max_unit`);
/// `empty`: count as if nothing ran on it.
fn fits(need: &Need, host: &HostView, empty: bool) -> i64 {
    if need.required.iter().any(|t| !host.tree.has_trait(t))
        || need.forbidden.iter().any(|t| host.tree.has_trait(t))
        || host.aggregates.iter().any(|a| need.isolated.contains(a))
    {
        return 0;
    }
    let mut count = i64::MAX;
    for (class, amount) in &need.resources {
        if *amount < 0 {
            continue;
        }
        let Some((cap, used, max_unit)) = host.tree.room(class) else { return 0 };
        if *amount > max_unit {
            return 0;
        }
        let used = if empty { 0 } else { used };
        count = count.min((cap - used).max(0) / amount);
    }
    if count == i64::MAX {
        0
    } else {
        count
    }
}

/// A host at time `at`: may general scheduling use it (on demand), may a
/// new lease take it (a free pool host), and will it be empty (a lease
/// holding it now ends by then, its servers gone).
#[derive(Clone, Copy, Default)]
struct AtTime {
    on_demand: bool,
    pool_free: bool,
    empty: bool,
}

/// Each host at `at` (≥ `now`), from the reservations timeline: a pool
/// host booked by a lease live at `at` is not free; one whose every
/// current lease ends by `at` is empty then; with lending on, a pool host
/// no lease needs within the lead of `at` is lent to general scheduling
/// (powered on only). Health (up, disabled) and usage are today's.
fn at_time(world: &World, host: &HostView, now: i64, at: i64, rules: Rules) -> AtTime {
    let healthy = host.up && !host.disabled;
    let Some(pool) = host.pool else { return AtTime { on_demand: healthy, ..AtTime::default() } };
    let tables = &world.compute.leases;
    let booked = tables.overlapping(pool.id, at, at.saturating_add(1), None).next().is_some();
    let empty = at > now && {
        let mut holding = tables.overlapping(pool.id, now, now.saturating_add(1), None).peekable();
        holding.peek().is_some() && holding.all(|b| b.end <= at)
    };
    AtTime {
        on_demand: healthy && pool.power == PowerState::On && tables.lent(pool.id, at, rules.lend_lead),
        pool_free: healthy && pool.reservable && !booked && pool.power != PowerState::Failed,
        empty,
    }
}

/// Free capacity by flavor at `at` (≥ `now`): for each enabled flavor
/// that names no reservation, how many more servers fit on the hosts
/// general scheduling may use then (`free`, with `hosts_with_room`, and
/// per availability zone and aggregate), and how many a new lease could
/// reserve on the pool hosts no lease holds then (`pool_free`), honouring
/// the flavor's extra specs ([`Need`]). Reservation flavors (one per
/// instance reservation, naming it in `RESERVATION_SPEC`) are listed
/// apart in `reservation_flavors` when their lease is live at `at`: their
/// slots are the lease's. Also the source of the
/// `berth_free_capacity_by_flavor_*` gauges.
fn free_by_flavor(world: &World, health: &dyn HostHealth, now: i64, at: i64, rules: Rules) -> Value {
    use berth_compute_model::lease::{ReservationStatus, RESERVATION_SPEC};
    let hosts = host_views(world, health, now, rules);
    let times: Vec<AtTime> = hosts.iter().map(|h| at_time(world, h, now, at, rules)).collect();
    let mut flavors = Vec::new();
    let mut reservation_flavors = Vec::new();
    for flavor in world.compute.flavors.values() {
        if let Some(reservation) = flavor.extra_specs.get(RESERVATION_SPEC) {
            let found = Uuid::parse_str(reservation).ok().and_then(|id| world.compute.leases.reservation(id));
            let Some((lease, r)) = found else { continue };
            if lease.is_over() || r.status == ReservationStatus::Deleted || !(lease.start <= at && at < lease.end) {
                continue;
            }
            let slots: i64 = r.allocations.iter().map(|a| a.slots).sum();
            reservation_flavors.push(json!({"flavor": flavor.name, "id": flavor.flavorid, "vcpus": flavor.vcpus,
                "ram": flavor.memory_mb, "disk": flavor.disk_gb(), "lease": lease.id.to_string(),
                "lease_name": lease.name, "project": lease.project_id, "reservation": r.id.to_string(),
                "start": lease.start, "end": lease.end, "status": lease.status.as_str(), "slots": slots}));
            continue;
        }
        if flavor.disabled {
            continue;
        }
        let need = need(world, flavor, rules.isolate);
        let (mut total, mut hosts_with_room, mut pool_free) = (0, 0, 0);
        let mut by_zone: BTreeMap<&str, i64> = BTreeMap::new();
        let mut by_aggregate: BTreeMap<&str, i64> = BTreeMap::new();
        for (host, time) in hosts.iter().zip(&times) {
            if time.on_demand {
                let n = fits(&need, host, time.empty);
                total += n;
                hosts_with_room += i64::from(n > 0);
                *by_zone.entry(host.zone).or_default() += n;
                for aggregate in &host.aggregates {
                    *by_aggregate.entry(aggregate).or_default() += n;
                }
            }
            if time.pool_free {
                pool_free += fits(&need, host, time.empty);
            }
        }
        flavors.push(json!({"flavor": flavor.name, "id": flavor.flavorid, "vcpus": flavor.vcpus,
               "ram": flavor.memory_mb, "disk": flavor.disk_gb(),
               "free": total, "hosts_with_room": hosts_with_room, "by_zone": by_zone,
               "by_aggregate": by_aggregate, "pool_free": pool_free,
               "needs": {"resources": need.resources, "required": need.required, "forbidden": need.forbidden,
                         "isolated_aggregates": need.isolated}}));
    }
    json!({"now": now, "at": at, "lending": rules.lend_lead.is_some(), "flavors": flavors,
           "reservation_flavors": reservation_flavors})
}

/// `/dashboard/api/leases`: the bars of the lease calendar in
/// `[start, end)`: one per (reservation, host), the caller's project only
/// unless admin; rows are the enrolled hosts (for a non-admin, those its
/// bars are on).
fn leases(world: &World, caller: &Caller, start: i64, end: i64, now: i64, rules: Rules) -> String {
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
    // Each host's aggregates and its root provider's traits (the
    // calendar's filters; traits as indices into `traits`), its pool
    // state and power (admin only).
    let groups = host_groups(world);
    let mut trait_index: BTreeMap<&str, usize> = BTreeMap::new();
    let states = PoolStates::new(world, now, rules.lend_lead);
    let mut out = String::with_capacity(bars.len() + lease_list.len() + 260 * tables.hosts.len() + 100);
    let _ = write!(out, "{{\"start\":{start},\"end\":{end},\"now\":{now},\"hosts\":[");
    let mut first = true;
    for h in tables.hosts.values().filter(|h| caller.admin || on_hosts.contains(&h.id)) {
        let comma = if first { "" } else { "," };
        first = false;
        let aggregates: Vec<String> = groups
            .get(h.service_name.as_str())
            .map(|(names, _)| names.iter().map(|a| quoted(a)).collect())
            .unwrap_or_default();
        let root =
            world.placement.provider_names.get(&h.hypervisor_hostname).and_then(|u| world.placement.providers.get(u));
        let traits: Vec<String> = root
            .map(|p| {
                p.traits
                    .iter()
                    .map(|t| {
                        let next = trait_index.len();
                        trait_index.entry(t.as_str()).or_insert(next).to_string()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (pool_state, power) = if caller.admin {
            let state = states.of(h);
            (format!("\"{}\"", state.as_str()), format!("\"{}\"", h.power.state.as_str()))
        } else {
            ("null".to_owned(), "null".to_owned())
        };
        let _ = write!(
            out,
            "{comma}{{\"id\":\"{}\",\"name\":{},\"host\":{},\"availability_zone\":{},\"reservable\":{},\
             \"vcpus\":{},\"memory_mb\":{},\"aggregates\":[{}],\"traits\":[{}],\"pool_state\":{pool_state},\
             \"power\":{power}}}",
            h.id,
            quoted(&h.hypervisor_hostname),
            quoted(&h.service_name),
            quoted(&h.availability_zone),
            h.reservable,
            h.vcpus,
            h.memory_mb,
            aggregates.join(","),
            traits.join(",")
        );
    }
    let mut names: Vec<(&str, usize)> = trait_index.into_iter().collect();
    names.sort_by_key(|(_, i)| *i);
    let names: Vec<String> = names.into_iter().map(|(t, _)| quoted(t)).collect();
    let _ = write!(out, "],\"traits\":[{}],\"leases\":[{lease_list}],\"bars\":[{bars}]}}", names.join(","));
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
fn host_detail(world: &World, root: Uuid, now: i64, rules: Rules) -> Option<Value> {
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
    let tables = &world.compute.leases;
    let pool = tables.host_of_service(&node.host).map(|h| {
        let next = tables.next_needed(h.id, now);
        json!({"id": h.id.to_string(), "pool_state": berth_reservations::pool_state(world, h.id, now, rules.lend_lead).as_str(),
               "power": h.power.state.as_str(), "power_since": h.power.since, "reservable": h.reservable,
               "next_needed": (next != i64::MAX).then_some(next)})
    });
    Some(json!({"uuid": root.to_string(), "host": node.host, "node": node.node,
                "cell": world.compute.cells.get(&node.cell).map(|c| c.name.clone()),
                "pool": pool, "providers": providers, "allocations": allocations}))
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
    let now = runtime.now();
    let health = runtime.health.at(now);
    let rules = rules(runtime);
    let world = services.core.read();
    let free = free_by_flavor(&world, &health, now, now, rules);
    let flavors = free["flavors"].as_array().cloned().unwrap_or_default();
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
    family(
        &mut out,
        "berth_free_capacity_by_flavor_and_aggregate_total",
        "Free capacity by flavor, per host aggregate.",
    );
    for f in &flavors {
        let name = f["flavor"].as_str().unwrap_or_default();
        if let Some(aggregates) = f["by_aggregate"].as_object() {
            for (aggregate, n) in aggregates {
                out.push_str(&format!(
                    "berth_free_capacity_by_flavor_and_aggregate_total{{flavor=\"{}\",aggregate=\"{}\"}} {}\n",
                    escape(name),
                    escape(aggregate),
                    n
                ));
            }
        }
    }
    family(
        &mut out,
        "berth_free_pool_capacity_by_flavor_total",
        "How many servers of each flavor a new lease could reserve now on the pool hosts no lease holds.",
    );
    for f in &flavors {
        let name = f["flavor"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "berth_free_pool_capacity_by_flavor_total{{flavor=\"{}\"}} {}\n",
            escape(name),
            f["pool_free"]
        ));
    }
    let mut by_zone: BTreeMap<(&str, &str), (i64, i64)> = BTreeMap::new();
    for host in host_views(&world, &health, now, rules).iter().filter(|h| h.schedulable()) {
        for class in CLASSES {
            if let Some((cap, used, _)) = host.tree.room(class) {
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

    fn flavor(vcpus: i64, ram: i64, disk: i64, specs: &[(&str, &str)]) -> berth_compute_model::Flavor {
        berth_compute_model::Flavor {
            vcpus,
            memory_mb: ram,
            root_gb: disk,
            extra_specs: specs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..Default::default()
        }
    }

    fn host<'a>(rooms: Vec<(&'a str, Room)>, traits: &[&'a str], aggregates: Vec<&'a str>) -> HostView<'a> {
        let mut h = HostView {
            uuid: Uuid::nil(),
            host: "h",
            node: "h",
            cell: "cell1",
            aggregates,
            zone: "nova",
            up: true,
            disabled: false,
            pool: None,
            tree: Tree { rooms: [None; 3], other: Vec::new(), providers: Providers::None },
        };
        for (class, room) in rooms {
            match CLASSES.iter().position(|c| *c == class) {
                Some(i) => h.tree.rooms[i] = Some(room),
                None => h.tree.other.push((class, room)),
            }
        }
        if !traits.is_empty() {
            let set: BTreeSet<String> = traits.iter().map(|t| (*t).to_owned()).collect();
            h.tree.providers = Providers::Root(Box::leak(Box::new(set)));
        }
        h
    }

    fn fit(world: &World, flavor: &berth_compute_model::Flavor, host: &HostView, empty: bool) -> i64 {
        fits(&need(world, flavor, false), host, empty)
    }

    #[test]
    fn a_flavor_fits_as_often_as_its_scarcest_class_allows() {
        let world = World::default();
        let h = host(
            vec![("VCPU", (16, 4, 16)), ("MEMORY_MB", (8192, 1024, 8192)), ("DISK_GB", (100, 0, 100))],
            &[],
            vec![],
        );
        assert_eq!(fit(&world, &flavor(2, 512, 10, &[]), &h, false), 6, "VCPU: 12 free / 2");
        assert_eq!(fit(&world, &flavor(2, 512, 10, &[]), &h, true), 8, "empty: 16 / 2");
        assert_eq!(fit(&world, &flavor(1, 2048, 1, &[]), &h, false), 3, "RAM: 7168 free / 2048");
        assert_eq!(fit(&world, &flavor(32, 512, 1, &[]), &h, false), 0, "above max_unit");
        let no_disk = host(vec![("VCPU", (16, 4, 16)), ("MEMORY_MB", (8192, 1024, 8192))], &[], vec![]);
        assert_eq!(
            fit(&world, &flavor(1, 512, 1, &[]), &no_disk, false),
            0,
            "no disk inventory for a flavor that needs disk"
        );
        assert_eq!(fit(&world, &flavor(1, 512, 0, &[]), &no_disk, false), 12);
    }

    #[test]
    fn extra_specs_constrain_where_a_flavor_fits() {
        let world = World::default();
        let gpu = host(
            vec![
                ("VCPU", (16, 0, 16)),
                ("MEMORY_MB", (8192, 0, 8192)),
                ("DISK_GB", (100, 0, 100)),
                ("CUSTOM_GPU", (2, 1, 2)),
            ],
            &["CUSTOM_FAST"],
            vec![],
        );
        let plain =
            host(vec![("VCPU", (16, 0, 16)), ("MEMORY_MB", (8192, 0, 8192)), ("DISK_GB", (100, 0, 100))], &[], vec![]);
        let needs_gpu = flavor(1, 512, 1, &[("resources:CUSTOM_GPU", "1")]);
        assert_eq!(
            (fit(&world, &needs_gpu, &gpu, false), fit(&world, &needs_gpu, &plain, false)),
            (1, 0),
            "custom resource: 1 GPU left"
        );
        let fast = flavor(1, 512, 1, &[("trait:CUSTOM_FAST", "required")]);
        assert_eq!((fit(&world, &fast, &gpu, false), fit(&world, &fast, &plain, false)), (16, 0), "required trait");
        let not_fast = flavor(1, 512, 1, &[("trait:CUSTOM_FAST", "forbidden")]);
        assert_eq!(
            (fit(&world, &not_fast, &gpu, false), fit(&world, &not_fast, &plain, false)),
            (0, 16),
            "forbidden trait"
        );
        let fewer = flavor(4, 512, 1, &[("resources:VCPU", "1")]);
        assert_eq!(fit(&world, &fewer, &plain, false), 16, "resources:VCPU overrides the flavor's vcpus");
        let pinned = flavor(2, 512, 1, &[("hw:cpu_policy", "dedicated")]);
        assert_eq!(fit(&world, &pinned, &plain, false), 0, "dedicated CPUs need PCPU inventory");
        assert_eq!(need(&world, &pinned, false).resources.get("PCPU"), Some(&2));
    }
}
