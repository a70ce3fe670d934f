//! berth's own APIs: the agent API (`/agent/v1`: register, heartbeat, work,
//! events), the admin API (`/admin/v1`: cells, host discovery, and — with
//! `--test-hooks` — conductor breakpoints and the clock), and the minimal
//! identity endpoints openstackclient asks for (`/identity/v3/projects`).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use berth_compute::agents::{AgentEvent, HostRegistration};
use berth_compute::control::{read, write};
use berth_compute_model::plan::{plan_map_host, plan_put_cell, plan_unbind_host};
use berth_compute_model::CellMapping;
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::api::{ComputeCtx, NovaResult};

pub(crate) fn json_body(req: &Req) -> ApiResult<Value> {
    let value: Value =
        serde_json::from_slice(&req.body).map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
    match berth_http::request::find_nul(&value) {
        Some(at) => Err(ApiError::bad_request(format!("{} (at {at})", berth_http::request::NUL_REFUSED))),
        None => Ok(value),
    }
}

pub(crate) fn admin_only(req: &Req, rule: &str) -> ApiResult<()> {
    if req.allowed(rule, &berth_http::policy::Target::for_caller(&req.auth)) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!("Policy does not allow {rule} to be performed.")))
    }
}

/// Rules of the agent and admin APIs.
pub const RULES: &berth_http::policy::RuleTable =
    &[("agent:manage", "role:admin or role:service", None), ("admin:manage", "role:admin", None)];

/// The agent identity of a request: the caller's user id (a Keystone
/// service user, or the noauth2 token's user).
fn caller(req: &Req) -> String {
    req.auth.user_id.clone().unwrap_or_default()
}

/// `DELETE /admin/v1/hosts/{host}/binding`: free a host from the agent
/// identity it is bound to (204).
pub fn unbind_host(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let host = req.param(0).to_owned();
    write(&*ctx.compute.control, |w| Ok((plan_unbind_host(w, &host)?, ()))).nova()?;
    Ok(Resp::no_content())
}

fn text<'a>(v: &'a Value, key: &str) -> ApiResult<&'a str> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| ApiError::bad_request(format!("'{key}' is a required string")))
}

/// `POST /agent/v1/register`.
pub fn register(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let body = json_body(&req)?;
        let agent = text(&body, "agent")?.to_owned();
        let cell = body.get("cell").and_then(Value::as_str).map(str::to_owned);
        // Pull mode: the agent takes tasks on its hosts' NATS subjects.
        let pulls = match body.get("pull") {
            None | Some(Value::Null) => false,
            Some(v) => v.as_bool().ok_or_else(|| ApiError::bad_request("'pull' must be a boolean"))?,
        };
        let hosts = body["hosts"].as_array().ok_or_else(|| ApiError::bad_request("'hosts' is a required list"))?;
        let mut registrations = Vec::with_capacity(hosts.len());
        for h in hosts {
            let host = text(h, "host")?.to_owned();
            // Sizes as a compute node row holds them (32-bit, not negative).
            let num = |k: &str| -> ApiResult<i64> {
                match h.get(k) {
                    None | Some(Value::Null) => Ok(0),
                    Some(v) => v.as_i64().filter(|n| (0..=i64::from(i32::MAX)).contains(n)).ok_or_else(|| {
                        ApiError::bad_request(format!("'{k}' must be an integer between 0 and {}", i32::MAX))
                    }),
                }
            };
            registrations.push(HostRegistration {
                node: h.get("node").and_then(Value::as_str).unwrap_or(&host).to_owned(),
                vcpus: num("vcpus")?,
                memory_mb: num("memory_mb")?,
                local_gb: num("local_gb")?,
                hypervisor_type: h.get("hypervisor_type").and_then(Value::as_str).unwrap_or("fake").to_owned(),
                host_ip: h.get("host_ip").and_then(Value::as_str).unwrap_or("127.0.0.1").to_owned(),
                host,
            });
        }
        let registered =
            ctx.compute.register_agent(&agent, &caller(&req), cell.as_deref(), &registrations, pulls).await.nova()?;
        let hosts: Vec<Value> = registered
            .iter()
            .map(|r| {
                json!({"host": r.host, "node": r.node, "node_uuid": r.node_uuid.to_string(),
                       "service_id": r.service_id, "cell": r.cell.to_string()})
            })
            .collect();
        Ok(Resp::ok(json!({"hosts": hosts})))
    })
}

/// `POST /agent/v1/heartbeat`: 204, or 404 when the agent must register
/// again (this process does not know it).
pub fn heartbeat(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let body = json_body(&req)?;
        let agent = text(&body, "agent")?.to_owned();
        let hosts: Vec<String> = body["hosts"]
            .as_array()
            .map(|h| h.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if ctx.compute.heartbeat(&agent, &caller(&req), &hosts).await.nova()? {
            Ok(Resp::no_content())
        } else {
            Err(ApiError::not_found(format!("Agent {agent} is not registered with this server.")))
        }
    })
}

/// A task as agents get it: from the long poll, in a claim's answer, and
/// on a host's NATS subject in pull mode (the same payload on every
/// path: [`task_payloads`]). A task that spawns the instance (build,
/// rebuild, unshelve) carries `key_data`, the public key to inject, when
/// the server was booted with a key pair and `world` is given (the request
/// spec keeps it for the instance's life); a task that names the server
/// (console output) carries its `display_name`; a snapshot or shelve task
/// the `image` it uploads to, an unshelve the shelve snapshot it boots
/// from. A task that makes or moves the guest
/// carries `server`, what a driver needs to make it ([`guest_view`]); a
/// cold move's tasks carry `move`: the migration, its hosts and the
/// move's secret, which the destination's agent shows the source's to
/// fetch the disk.
pub fn task_json(
    task: &berth_compute::hub::Task,
    world: Option<&berth_compute_model::World>,
    guest: Option<&berth_compute::guest::GuestFacts>,
) -> Value {
    use berth_compute::hub::TaskKind;
    let mut body =
        json!({"id": task.id, "kind": task.kind.as_str(), "instance": task.instance.to_string(), "host": task.host});
    if matches!(task.kind, TaskKind::Build | TaskKind::Rebuild | TaskKind::Unshelve) {
        let key_data = world.and_then(|w| w.compute.request_specs.get(&task.instance)).and_then(|s| s.key_data.clone());
        if let Some(key_data) = key_data {
            body["key_data"] = json!(key_data);
        }
    }
    if let Some(name) = &task.display_name {
        body["display_name"] = json!(name);
    }
    // A snapshot or a shelve names the image it uploads to (the server's
    // image under way; none when it was deleted meanwhile).
    if matches!(task.kind, TaskKind::Snapshot | TaskKind::Shelve) {
        let image = world.and_then(|w| berth_compute_model::plan::snapshot_image_of(w, &task.instance));
        if let Some(image) = image {
            body["image"] = json!(image.to_string());
        }
    }
    // An unshelve names the shelve snapshot an offloaded server boots
    // from (the libvirt driver boots it; a shelved server's guest is
    // still on its host and starts again).
    if task.kind == TaskKind::Unshelve {
        body["image"] = json!(berth_compute_model::rehome::shelved_image_id(&task.instance).to_string());
    }
    // A rescue names its image when the user gave one.
    if task.kind == TaskKind::Rescue {
        if let Some(image) = guest.and_then(|g| g.instance.spec.rescue_image) {
            body["rescue_image"] = json!(image.to_string());
        }
    }
    if let Some(guest) = guest {
        body["server"] = guest_view(guest);
        if let Some(m) = &guest.migration {
            let token =
                world.and_then(|w| w.compute.request_specs.get(&task.instance)).and_then(|s| s.move_token.clone());
            body["move"] = json!({
                "migration": m.uuid.to_string(), "migration_type": m.migration_type, "status": m.status,
                "source_host": m.source_compute, "dest_host": m.dest_compute, "source_ip": guest.source_ip,
                "dest_ip": m.dest_host,
                "token": token,
            });
        }
    }
    body
}

/// The guest as a driver needs it, in the compute API's names (2.79): id,
/// name, hostname, launch index, availability zone, states, project, metadata, key
/// pair name, user data, config drive, the flavor (the move's new one on
/// its destination) with its extra specs, and the image with the
/// properties it had at boot.
pub fn guest_view(guest: &berth_compute::guest::GuestFacts) -> Value {
    let (i, f) = (&guest.instance, &guest.flavor);
    json!({
        "id": i.uuid.to_string(),
        "name": i.spec.display_name,
        "OS-EXT-SRV-ATTR:hostname": i.spec.hostname,
        "OS-EXT-SRV-ATTR:launch_index": i.spec.launch_index,
        "OS-EXT-AZ:availability_zone": i.availability_zone,
        "OS-EXT-STS:vm_state": i.vm_state,
        "OS-EXT-STS:task_state": i.task_state,
        "OS-EXT-STS:power_state": i.power_state,
        "tenant_id": i.project_id,
        "user_id": i.user_id,
        "metadata": i.spec.metadata,
        "key_name": i.spec.key_name,
        "key_data": i.spec.key_data,
        "OS-EXT-SRV-ATTR:user_data": i.spec.user_data,
        "config_drive": i.spec.config_drive,
        "nics": i.spec.nics,
        "flavor": {"original_name": f.name, "vcpus": f.vcpus, "ram": f.memory_mb, "disk": f.root_gb,
                   "ephemeral": f.ephemeral_gb, "swap": f.swap, "extra_specs": f.extra_specs},
        "image": {"id": i.spec.image_ref.map(|u| u.to_string()), "properties": i.spec.image_properties},
    })
}

/// The payloads of `tasks` ([`task_json`]), with their guests read from
/// the cells (one read per cell).
pub async fn task_payloads(
    compute: &berth_compute::Compute,
    core: &berth_core::App,
    tasks: &[berth_compute::hub::Task],
) -> Vec<Value> {
    let guests = compute.guest_facts(tasks).await;
    let world = core.read();
    tasks.iter().map(|t| task_json(t, Some(&world), guests.get(&t.instance))).collect()
}

/// `GET /agent/v1/work?agent=ID&wait=SECONDS[&guests=1]`: long-poll for tasks
/// (`guests=1`: with the guest a task makes or moves, `server`).
pub fn work(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let agent =
            req.query_one("agent").ok_or_else(|| ApiError::bad_request("'agent' query parameter required"))?.to_owned();
        let wait: u64 = req.query_one("wait").and_then(|w| w.parse().ok()).unwrap_or(20).min(60);
        // Only the identity an agent's hosts are bound to takes its work.
        ctx.compute.check_agent_hosts(&agent, &caller(&req)).nova()?;
        let Some(tasks) = ctx.compute.hub.take(&agent, Duration::from_secs(wait), 1000).await else {
            return Err(ApiError::not_found(format!("Agent {agent} is not registered with this server.")));
        };
        // The guest (`server`) only for agents whose driver makes guests
        // from it (`guests=1`): reading the instances costs every poll.
        let tasks = if req.query_one("guests") == Some("1") {
            task_payloads(&ctx.compute, &ctx.core, &tasks).await
        } else {
            let world = ctx.core.read();
            tasks.iter().map(|t| task_json(t, Some(&world), None)).collect()
        };
        Ok(Resp::ok(json!({"tasks": tasks})))
    })
}

/// `POST /agent/v1/guests` `{"agent", "host", "instances": [uuid…]}`:
/// which of the guests the host runs belong to servers deleted on that
/// host (`{"deleted": [uuid…]}`; Nova's running deleted instances). A
/// guest whose server lives, or that berth never made, is not named.
pub fn guests(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let body = json_body(&req)?;
        let host = text(&body, "host")?.to_owned();
        let list =
            body["instances"].as_array().ok_or_else(|| ApiError::bad_request("'instances' is a required list"))?;
        if list.len() > 10_000 {
            return Err(ApiError::bad_request("at most 10000 instances at once"));
        }
        let mut instances = Vec::with_capacity(list.len());
        for item in list {
            let id = item.as_str().and_then(|t| Uuid::parse_str(t).ok());
            instances.push(id.ok_or_else(|| ApiError::bad_request("bad instance uuid"))?);
        }
        // An identity asks only about the hosts bound to it.
        ctx.compute.check_agent_identity(&caller(&req), [host.as_str()]).nova()?;
        let deleted = ctx.compute.deleted_guests(&host, &instances).await;
        Ok(Resp::ok(json!({"deleted": deleted.iter().map(ToString::to_string).collect::<Vec<_>>()})))
    })
}

/// `POST /agent/v1/events`.
pub fn events(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let body = json_body(&req)?;
        let list = body["events"].as_array().ok_or_else(|| ApiError::bad_request("'events' is a required list"))?;
        let mut events = Vec::with_capacity(list.len());
        for e in list {
            let instance =
                Uuid::parse_str(text(e, "instance")?).map_err(|_| ApiError::bad_request("bad instance uuid"))?;
            events.push(AgentEvent {
                instance,
                host: e.get("host").and_then(Value::as_str).unwrap_or("").to_owned(),
                kind: text(e, "kind")?.to_owned(),
                message: e.get("message").and_then(Value::as_str).map(str::to_owned),
                task: e.get("task").and_then(Value::as_str).map(str::to_owned),
            });
        }
        // An identity reports only on the hosts bound to it.
        ctx.compute.check_agent_identity(&caller(&req), events.iter().map(|e| e.host.as_str())).nova()?;
        let results = ctx.compute.agent_events(&events).await;
        let results: Vec<Value> = events
            .iter()
            .zip(results)
            .map(|(e, r)| match r {
                Ok(applied) => json!({"instance": e.instance.to_string(), "applied": applied}),
                Err(err) => json!({"instance": e.instance.to_string(), "applied": false, "error": err.to_string()}),
            })
            .collect();
        Ok(Resp::ok(json!({"results": results})))
    })
}

// ---------------------------------------------------------------------------
// Pull mode: queues and claims
// ---------------------------------------------------------------------------

/// `GET /agent/v1/queues?agent=ID` (or `&host=NAME`, repeatable): the pull
/// queues each of the agent's hosts can take now, as
/// `{"queues": {"KEY": ["host", ...]}, "mode": "pull"|"push"}`.
pub fn queues(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "agent:manage")?;
    let mut hosts: Vec<String> = req.query_all("host").map(str::to_owned).collect();
    if let Some(agent) = req.query_one("agent") {
        let Some(own) = ctx.compute.hub.hosts_of(agent) else {
            return Err(ApiError::not_found(format!("Agent {agent} is not registered with this server.")));
        };
        hosts.extend(own.iter().cloned());
    }
    if hosts.is_empty() {
        return Err(ApiError::bad_request("'agent' or 'host' query parameter required"));
    }
    hosts.sort();
    hosts.dedup();
    ctx.compute.check_agent_identity(&caller(req), hosts.iter().map(String::as_str)).nova()?;
    let mode = if ctx.compute.pull.enabled() { "pull" } else { "push" };
    let queues = berth_compute::pull::queues_for_hosts(&ctx.compute, &hosts);
    Ok(Resp::ok(json!({"mode": mode, "queues": queues})))
}

/// `POST /agent/v1/claim {"instance": UUID, "host": NAME}`: claim a boot
/// fetched from a pull queue for `host` (one planned write, idempotent per
/// instance). `{"result": "claimed", "task": {...}}` (build it),
/// `"gone"` (claimed elsewhere or deleted: drop it) or `"refused"` with a
/// `reason` (let another host take it).
///
/// `{"instances": [UUID, ...], "hosts": [NAME, ...]}`: claim a
/// multi-create's gang on those hosts, all or none:
/// `{"result": "claimed", "tasks": [...]}`, `"gone"` or `"refused"`.
pub fn claim(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "agent:manage")?;
        let body = json_body(&req)?;
        let uuids = |key: &str| -> Result<Vec<Uuid>, ApiError> {
            let list = body[key].as_array().ok_or_else(|| ApiError::bad_request(format!("'{key}' must be a list")))?;
            list.iter()
                .map(|u| u.as_str().and_then(|u| Uuid::parse_str(u).ok()))
                .collect::<Option<Vec<Uuid>>>()
                .ok_or_else(|| ApiError::bad_request(format!("'{key}' must be a list of instance uuids")))
        };
        let (instances, hosts) = if body.get("instances").is_some() {
            let instances = uuids("instances")?;
            let hosts: Vec<String> = body["hosts"]
                .as_array()
                .and_then(|l| l.iter().map(|h| h.as_str().map(str::to_owned)).collect::<Option<Vec<String>>>())
                .ok_or_else(|| ApiError::bad_request("'hosts' must be a list of host names"))?;
            if instances.is_empty() || hosts.is_empty() || instances.len() > 1000 || hosts.len() > 1000 {
                return Err(ApiError::bad_request("'instances' and 'hosts' need 1 to 1000 entries"));
            }
            (instances, hosts)
        } else {
            let instance =
                Uuid::parse_str(text(&body, "instance")?).map_err(|_| ApiError::bad_request("bad instance uuid"))?;
            (vec![instance], vec![text(&body, "host")?.to_owned()])
        };
        ctx.compute.check_agent_identity(&caller(&req), hosts.iter().map(String::as_str)).nova()?;
        if !ctx.compute.pull.enabled() {
            return Err(ApiError::conflict("This server schedules in push mode; claims are for pull mode."));
        }
        let claim = if body.get("instances").is_some() {
            berth_compute::pull::claim_gang(&ctx.compute, &instances, &hosts).await
        } else {
            berth_compute::pull::claim_on_host(&ctx.compute, instances[0], &hosts[0]).await
        };
        let answer = match claim {
            berth_compute::pull::PullClaim::Claimed(t) => {
                let task = task_payloads(&ctx.compute, &ctx.core, std::slice::from_ref(&t)).await.remove(0);
                json!({"result": "claimed", "task": task})
            }
            berth_compute::pull::PullClaim::ClaimedAll(tasks) => {
                json!({"result": "claimed", "tasks": task_payloads(&ctx.compute, &ctx.core, &tasks).await})
            }
            berth_compute::pull::PullClaim::Gone => json!({"result": "gone"}),
            berth_compute::pull::PullClaim::Refused(reason) => json!({"result": "refused", "reason": reason}),
        };
        Ok(Resp::ok(answer))
    })
}

// ---------------------------------------------------------------------------
// Admin: cells, discovery, test hooks
// ---------------------------------------------------------------------------

fn cell_view(cell: &CellMapping) -> Value {
    json!({"uuid": cell.uuid.to_string(), "name": cell.name, "database_connection": redact(&cell.database_connection),
           "disabled": cell.disabled})
}

/// A database URL without its password.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:****{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// `GET /admin/v1/cells`.
pub fn list_cells(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let cells: Vec<Value> = ctx.compute.cell_mappings().iter().map(cell_view).collect();
    Ok(Resp::ok(json!({"cells": cells})))
}

/// `POST /admin/v1/cells` `{"name", "database_connection"?}`: a new cell
/// (the database defaults to one beside the control database).
pub fn create_cell(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let body = json_body(req)?;
    let fields = body.as_object().ok_or_else(|| ApiError::bad_request("The body must be a JSON object."))?;
    if let Some(key) = fields.keys().find(|k| !matches!(k.as_str(), "name" | "database_connection")) {
        return Err(ApiError::bad_request(format!("Additional properties are not allowed ('{key}' was unexpected)")));
    }
    let name = text(&body, "name")?.to_owned();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(ApiError::bad_request("Cell names are letters, digits, '-' and '_'."));
    }
    // Absent means a database beside the control database; anything given
    // must be a connection URL (a number or null is a schema error, not a
    // request for the default).
    let database = match body.get("database_connection") {
        None => ctx.compute.default_cell_database(&name),
        Some(Value::String(url)) => {
            let sqlite_path = url.strip_prefix("sqlite://");
            let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
            if sqlite_path.is_none() && !postgres {
                return Err(ApiError::bad_request(
                    "'database_connection' must be a sqlite:///ABSOLUTE/PATH or postgres:// URL",
                ));
            }
            // A relative path would land in whatever directory the
            // server was started from.
            if sqlite_path.is_some_and(|path| !path.starts_with('/')) {
                return Err(ApiError::bad_request("A sqlite:// cell database needs an absolute path."));
            }
            url.clone()
        }
        Some(_) => return Err(ApiError::bad_request("'database_connection' must be a non-empty string")),
    };
    let cell = CellMapping { uuid: Uuid::new_v4(), name, database_connection: database, disabled: false };
    // The write's own checks (a duplicate name) run once before any
    // database is opened, so a refused cell leaves no file behind; the
    // write runs them again against the state it commits on.
    plan_put_cell(&ctx.core.read(), cell.clone()).map_err(crate::api::refused)?;
    // Open (and migrate) the database before anything points at it.
    ctx.compute.cells.get(&cell).map_err(|e| ApiError::bad_request(format!("Cannot open the cell database: {e}")))?;
    ctx.core.write(|w| plan_put_cell(w, cell.clone()).map(|s| (s, ())).map_err(crate::api::refused))?;
    Ok(Resp::json(StatusCode::CREATED, json!({"cell": cell_view(&cell)})))
}

fn set_disabled(ctx: &ComputeCtx, req: &Req, disabled: bool) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let name = req.param(0).to_owned();
    let mut cell = ctx
        .compute
        .cell_by_name(&name)
        .ok_or_else(|| ApiError::not_found(format!("Cell {name} could not be found.")))?;
    if disabled && cell.uuid == berth_compute_model::CELL0_UUID {
        return Err(ApiError::bad_request("Cell0 cannot be disabled."));
    }
    cell.disabled = disabled;
    ctx.core.write(|w| plan_put_cell(w, cell.clone()).map(|s| (s, ())).map_err(crate::api::refused))?;
    Ok(Resp::no_content())
}

/// `POST /admin/v1/cells/{name}/disable`.
pub fn disable_cell(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    set_disabled(ctx, req, true)
}

/// `POST /admin/v1/cells/{name}/enable`.
pub fn enable_cell(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    set_disabled(ctx, req, false)
}

/// `POST /admin/v1/discover-hosts`: map every compute host found in a
/// cell's services that has no host mapping yet (Nova's
/// `nova-manage cell_v2 discover_hosts`).
pub fn discover_hosts(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "admin:manage")?;
        let overview = ctx.compute.overview().await;
        let mapped: Vec<String> = read(&*ctx.compute.control, |w| w.compute.host_mappings.keys().cloned().collect());
        let mut found = Vec::new();
        for s in overview.services.iter().filter(|s| s.service.binary == "nova-compute") {
            if mapped.contains(&s.service.host) {
                continue;
            }
            let nodes: Vec<(Uuid, String)> = s.nodes.iter().map(|n| (n.uuid, n.hypervisor_hostname.clone())).collect();
            let (host, cell) = (s.service.host.clone(), s.cell);
            write(&*ctx.compute.control, |w| Ok((plan_map_host(w, &host, cell, &nodes)?, ()))).nova()?;
            found.push(json!({"host": host, "cell": cell.to_string()}));
        }
        Ok(Resp::ok(json!({"mapped": found})))
    })
}

/// `POST /admin/v1/heal` (body optional: `{"dry_run": true}` finds and
/// reports without writing): run the heal now and return its findings.
pub fn heal(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        admin_only(&req, "admin:manage")?;
        let dry_run = if req.body.is_empty() {
            false
        } else {
            let body = json_body(&req)?;
            match body.get("dry_run") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ApiError::bad_request("dry_run must be a boolean.")),
            }
        };
        let report = berth_compute::heal::heal(&ctx.compute, dry_run).await;
        let ids = |list: &[Uuid]| list.iter().map(|u| json!(u.to_string())).collect::<Vec<_>>();
        let unresolved: Vec<Value> = report
            .unresolved
            .iter()
            .map(|f| json!({"kind": f.kind, "uuid": f.uuid.to_string(), "detail": f.detail}))
            .collect();
        Ok(Resp::ok(json!({
            "dry_run": report.dry_run,
            "orphans_removed": ids(&report.orphans_removed),
            "allocations_created": ids(&report.allocations_created),
            "unresolved": unresolved,
        })))
    })
}

fn test_hooks(ctx: &ComputeCtx, req: &Req) -> ApiResult<()> {
    if !ctx.test_hooks {
        return Err(ApiError::not_found("The resource could not be found."));
    }
    admin_only(req, "admin:manage")
}

/// `POST /admin/v1/test/hold {"point"}` (only with `--test-hooks`).
pub fn hold(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    test_hooks(ctx, req)?;
    let body = json_body(req)?;
    ctx.compute.hooks.hold(text(&body, "point")?);
    Ok(Resp::no_content())
}

/// `POST /admin/v1/test/release {"point"}`.
pub fn release(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    test_hooks(ctx, req)?;
    let body = json_body(req)?;
    ctx.compute.hooks.release(text(&body, "point")?);
    Ok(Resp::no_content())
}

/// `POST /admin/v1/test/waiting {"point"}`: how many callers are held
/// at that point now (`{"waiting": n}`).
pub fn waiting(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    test_hooks(ctx, req)?;
    let body = json_body(req)?;
    let n = ctx.compute.hooks.waiting(text(&body, "point")?);
    Ok(Resp::json(StatusCode::OK, json!({"waiting": n})))
}

/// `POST /admin/v1/test/clock {"advance": seconds}`.
pub fn advance_clock(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    test_hooks(ctx, req)?;
    let body = json_body(req)?;
    let seconds = body
        .get("advance")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("'advance' is a required integer"))?;
    ctx.compute.advance_clock(seconds);
    Ok(Resp::ok(json!({"now": ctx.compute.now()})))
}

/// Keystone's v3 version object, as clients discover it.
fn identity_v3(req: &Req) -> Value {
    json!({"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
           "links": [{"rel": "self", "href": format!("{}/identity/v3/", req.base_url)}],
           "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]})
}

/// `GET /identity/`: the version list (keystoneauth reads it first).
pub fn identity_versions(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(json!({"versions": {"values": [identity_v3(req)]}})))
}

/// `GET /identity/v3`: the v3 version document.
pub fn identity_version(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    Ok(Resp::ok(json!({"version": identity_v3(req)})))
}

/// `GET /identity/v3/projects/{id}` (and `?name=`): noauth2 has no
/// Keystone; projects are whatever ids callers use.
pub fn show_project(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let id = req.param(0);
    Ok(Resp::ok(json!({"project": {"id": id, "name": id, "domain_id": "default", "enabled": true,
                                    "description": "", "is_domain": false, "parent_id": "default", "links": {}}})))
}

/// `GET /identity/v3/projects?name=X`.
pub fn list_projects(_: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let projects: Vec<Value> = req
        .query_one("name")
        .map(|name| vec![json!({"id": name, "name": name, "domain_id": "default", "enabled": true, "links": {}})])
        .unwrap_or_default();
    Ok(Resp::ok(json!({"projects": projects, "links": {}})))
}

/// Used by tests of the redaction.
#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:****@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:///tmp/x"), "sqlite:///tmp/x");
    }
}
