//! `/servers`: create (boot), list, detail, show, update, delete, actions
//! (`os-start`, `os-stop`, `reboot`) and `os-instance-actions`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::evacuate::EvacuateRequest;
use berth_compute::live::LiveMigrateRequest;
use berth_compute::moves::MoveRequest;
use berth_compute::servers::{Caller, ListRequest, Listed, ServerAction, ServerRecord};
use berth_compute::shelve::UnshelveRequest;
use berth_compute_model::cell::{states_for_status, Instance, InstanceFilter, SortKey};
use berth_compute_model::plan::BootAdmission;
use berth_compute_model::{ImageRef, InstanceSpec, RequestSpec};
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use crate::api::{self, authorize, authorize_on, body, is_admin, version, ComputeCtx, NovaResult};
use crate::schemas;
use crate::version::ComputeVersion;
use crate::views::servers::{self as view, HostStatus, HostStatusAccess, ServerAccess, ServerExtras};
use crate::views::{instance_actions as actions_view, page_is_full};

const RULE: &str = "os_compute_api:servers:";

fn rule(name: &str) -> String {
    format!("{RULE}{name}")
}

/// A random string of `n` characters from `alphabet`.
fn random_string(n: usize, alphabet: &[u8]) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        for byte in Uuid::new_v4().as_bytes() {
            if out.len() < n {
                out.push(alphabet[*byte as usize % alphabet.len()] as char);
            }
        }
    }
    out
}

/// The last path segment of a `flavorRef`/`imageRef` (ids or links).
fn ref_id(text: &str) -> &str {
    text.trim_end_matches('/').rsplit('/').next().unwrap_or(text)
}

/// Nova's hostname sanitisation of a display name.
fn hostname_from(name: &str) -> String {
    let mut out = String::new();
    for c in name.to_ascii_lowercase().chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
        } else if c == ' ' || c == '_' {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches(['-', '.']).chars().take(63).collect::<String>();
    if trimmed.is_empty() {
        "server".to_owned()
    } else {
        trimmed
    }
}

fn hint_list(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        other => vec![other.to_string()],
    }
}

fn access(req: &Req) -> ServerAccess {
    let host_status = if api::allowed(req, "os_compute_api:servers:show:host_status") {
        HostStatusAccess::All
    } else if api::allowed(req, "os_compute_api:servers:show:host_status:unknown-only") {
        HostStatusAccess::UnknownOnly
    } else {
        HostStatusAccess::Hidden
    };
    ServerAccess {
        show_admin_fields: is_admin(req),
        show_extended_attributes: api::allowed(req, "os_compute_api:os-extended-server-attributes"),
        show_flavor_extra_specs: api::allowed(req, "os_compute_api:servers:show:flavor-extra-specs"),
        host_status,
    }
}

fn host_status(ctx: &ComputeCtx, instance: &Instance) -> HostStatus {
    let Some(host) = instance.host.as_deref() else { return HostStatus::NoHost };
    let compute = &ctx.compute;
    let now = compute.now();
    if !compute.health.is_up_at(host, now) {
        return HostStatus::Down;
    }
    if berth_scheduler::HostHealth::is_disabled(&compute.health.at(now), host) {
        return HostStatus::Maintenance;
    }
    HostStatus::Up
}

fn groups_of(ctx: &ComputeCtx, instance: &Uuid) -> Vec<Uuid> {
    ctx.core.read().compute.group_of_instance.get(instance).copied().into_iter().collect()
}

// ---------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------

/// Block device mappings berth can honour: local disks only (the image as
/// the root disk, blank swap/ephemeral disks), as openstackclient sends
/// them with `--image`. Anything backed by a volume is refused: berth has
/// no block storage service. Returns the boot image a mapping names.
fn local_image_from_bdms(server: &Value) -> ApiResult<Option<String>> {
    if server.get("block_device_mapping").is_some() {
        return Err(ApiError::bad_request(
            "Block device mappings with volumes are not supported: berth has no volume service.",
        ));
    }
    let Some(list) = server.get("block_device_mapping_v2").and_then(Value::as_array) else { return Ok(None) };
    let mut image = None;
    for bdm in list {
        let source = bdm.get("source_type").and_then(Value::as_str).unwrap_or("");
        let destination = bdm.get("destination_type").and_then(Value::as_str).unwrap_or("volume");
        if destination != "local" || !matches!(source, "image" | "blank") {
            return Err(ApiError::bad_request(
                "Block device mappings with volumes are not supported: berth has no volume service.",
            ));
        }
        let boot = bdm.get("boot_index").and_then(value_int) == Some(0);
        if source == "image" {
            if !boot {
                return Err(ApiError::bad_request("Mapping image to local is not supported."));
            }
            image = bdm.get("uuid").and_then(Value::as_str).map(str::to_owned);
        }
    }
    Ok(image)
}

/// The `POST /servers` schema of microversion `v`, built once per
/// microversion (building it is a few hundred JSON values: about a tenth
/// of a boot's API work when done per request).
fn create_schema(v: ComputeVersion) -> &'static Value {
    const N: usize = ComputeVersion::MAX.0 as usize + 1;
    static SCHEMAS: [std::sync::OnceLock<Value>; N] = [const { std::sync::OnceLock::new() }; N];
    SCHEMAS[usize::from(v.0).min(N - 1)].get_or_init(|| schemas::servers::create(v))
}

/// `POST /servers`.
pub fn create(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, &rule("create"))?;
    let body = body(req, create_schema(v))?;
    let server = &body["server"];
    let project = api::project(req);
    let user = api::user(req);
    let name = server["name"].as_str().unwrap_or("").to_owned();
    let bdm_image = local_image_from_bdms(server)?;
    if server.get("key_name").is_some_and(|k| !k.is_null()) {
        return Err(ApiError::bad_request("Invalid key_name provided."));
    }
    if let Some(networks) = server.get("networks").and_then(Value::as_array) {
        if let Some(first) = networks.first() {
            let id = first.get("uuid").or_else(|| first.get("port")).and_then(Value::as_str).unwrap_or("");
            return Err(ApiError::bad_request(format!("Network {id} could not be found.")));
        }
    }
    let min_count = server.get("min_count").map_or(1, count);
    let max_count = server.get("max_count").map_or(min_count, count);
    if min_count > max_count {
        return Err(ApiError::bad_request("min_count must be <= max_count"));
    }
    // Where: `az`, `az:host`, `az:host:node` (host/node for admins), and
    // from 2.74 `host`/`hypervisor_hostname`.
    let mut az: Option<String> = None;
    let (mut force_host, mut force_node) = (None, None);
    if let Some(text) = server.get("availability_zone").and_then(Value::as_str) {
        let mut parts = text.splitn(3, ':');
        az = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
        force_host = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
        force_node = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
        if force_host.is_some() || force_node.is_some() {
            authorize(req, &rule("create:forced_host"))?;
        }
    }
    if v.at_least(74) {
        let host = server.get("host").and_then(Value::as_str).map(str::to_owned);
        let node = server.get("hypervisor_hostname").and_then(Value::as_str).map(str::to_owned);
        if host.is_some() || node.is_some() {
            authorize(req, "compute:servers:create:requested_destination")?;
            force_host = force_host.or(host);
            force_node = force_node.or(node);
        }
    }
    let hints_body = body.get("os:scheduler_hints").or_else(|| body.get("OS-SCH-HNT:scheduler_hints"));
    let mut hints: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(obj) = hints_body.and_then(Value::as_object) {
        for (key, value) in obj {
            hints.insert(key.clone(), hint_list(value));
        }
    }
    let parse_uuids = |key: &str| -> ApiResult<Vec<Uuid>> {
        hints
            .get(key)
            .map(|list| {
                list.iter()
                    .map(|u| Uuid::parse_str(u).map_err(|_| ApiError::bad_request(format!("Invalid {key} hint: {u}"))))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    };
    let same_host = parse_uuids("same_host")?;
    let different_host = parse_uuids("different_host")?;
    let group = match hints.get("group").and_then(|g| g.first()) {
        None => None,
        Some(text) => Some(
            Uuid::parse_str(text)
                .map_err(|_| ApiError::bad_request(format!("Instance group {text} could not be found.")))?,
        ),
    };
    let flavor_ref = server["flavorRef"].as_str().map(str::to_owned).unwrap_or_else(|| server["flavorRef"].to_string());
    let flavor_id = ref_id(&flavor_ref).to_owned();
    let image_text = server
        .get("imageRef")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .or(bdm_image)
        .unwrap_or_default();
    let (flavor, image, known_zones, group_ok) = {
        let world = ctx.core.read();
        let compute = &world.compute;
        let flavor = compute
            .flavors
            .get(&flavor_id)
            .filter(|f| f.is_public || f.projects.contains(&project) || is_admin(req))
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("Flavor {flavor_id} could not be found.")))?;
        let image = if image_text.is_empty() {
            None
        } else {
            let id = Uuid::parse_str(ref_id(&image_text))
                .map_err(|_| ApiError::bad_request("Can not find requested image"))?;
            Some(
                compute
                    .images
                    .get(&id)
                    .filter(|i| i.visible_to(req.auth.project_id.as_deref(), is_admin(req)))
                    .cloned()
                    .ok_or_else(|| ApiError::bad_request("Can not find requested image"))?,
            )
        };
        let mut zones: Vec<String> =
            compute.aggregates.values().filter_map(|a| a.availability_zone().map(str::to_owned)).collect();
        zones.push(ctx.compute.config.scheduler.default_availability_zone.clone());
        let group_ok = group.is_none_or(|g| {
            compute.server_groups.get(&g).is_some_and(|grp| grp.project_id == project || is_admin(req))
        });
        (flavor, image, zones, group_ok)
    };
    let Some(image) = image else { return Err(ApiError::bad_request("Missing imageRef attribute")) };
    if flavor.disabled {
        return Err(ApiError::bad_request("Flavor is disabled."));
    }
    if image.status != "active" {
        return Err(ApiError::bad_request(format!("Image {} is not active.", image.id)));
    }
    if image.min_ram > flavor.memory_mb {
        return Err(ApiError::bad_request("Flavor's memory is too small for requested image."));
    }
    if flavor.root_gb > 0 && image.min_disk > flavor.root_gb {
        return Err(ApiError::bad_request("Flavor's disk is too small for requested image."));
    }
    if let Some(zone) = &az {
        if !known_zones.contains(zone) {
            return Err(ApiError::bad_request("The requested availability zone is not available"));
        }
    }
    if !group_ok {
        return Err(ApiError::bad_request(format!(
            "Instance group {} could not be found.",
            group.map(|g| g.to_string()).unwrap_or_default()
        )));
    }
    let metadata: BTreeMap<String, String> = server
        .get("metadata")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))).collect()
        })
        .unwrap_or_default();
    let reservation_id = format!("r-{}", random_string(8, b"abcdefghijklmnopqrstuvwxyz0123456789"));
    let tags: Vec<String> = server
        .get("tags")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    if let Some(data) = server.get("user_data").and_then(Value::as_str) {
        if !is_base64(data) {
            return Err(ApiError::bad_request(format!(
                "Invalid input for field/attribute user_data. Value: {data}. '{data}' is not a 'base64'"
            )));
        }
    }
    // Nova's schema takes any positive count and its quota check refuses
    // (403) or lowers what does not fit: checked here on the snapshot, so
    // that no more instances are built than could be admitted (the
    // admission write checks again). Unlimited quotas stop at
    // `MAX_COUNT` per request.
    let max_count = {
        let world = ctx.core.read();
        berth_compute_model::quota::admit_instances(
            &world,
            &project,
            &user,
            flavor.vcpus,
            flavor.memory_mb,
            min_count,
            max_count,
        )
        .map_err(api::refused)?
    };
    if min_count > MAX_COUNT {
        return Err(ApiError::bad_request(format!("min_count must be <= {MAX_COUNT}")));
    }
    let max_count = max_count.min(MAX_COUNT);
    let requested_hostname = server.get("hostname").and_then(Value::as_str).map(str::to_owned);
    if requested_hostname.is_some() && max_count > 1 {
        return Err(ApiError::bad_request(
            "Unable to allocate a hostname to multiple instances. Remove the hostname or request a single instance.",
        ));
    }
    let now = berth_core::now();
    let instances: Vec<(Uuid, InstanceSpec)> = (0..max_count)
        .map(|idx| {
            let display_name = if max_count > 1 { format!("{name}-{}", idx + 1) } else { name.clone() };
            let hostname = requested_hostname.clone().unwrap_or_else(|| hostname_from(&display_name));
            let spec = InstanceSpec {
                display_name,
                display_description: server.get("description").and_then(Value::as_str).map(str::to_owned),
                hostname,
                image_ref: Some(image.id),
                image_properties: image.properties.clone(),
                flavor: flavor.clone(),
                metadata: metadata.clone(),
                key_name: None,
                availability_zone: az.clone(),
                reservation_id: reservation_id.clone(),
                launch_index: idx,
                config_drive: match server.get("config_drive") {
                    Some(Value::Bool(true)) => "True".to_owned(),
                    Some(Value::String(s)) => s.clone(),
                    _ => String::new(),
                },
                user_data: server.get("user_data").and_then(Value::as_str).map(str::to_owned),
                access_ip_v4: server.get("accessIPv4").and_then(Value::as_str).map(str::to_owned),
                access_ip_v6: server.get("accessIPv6").and_then(Value::as_str).map(str::to_owned),
                tags: tags.clone(),
                scheduler_hints: hints.clone(),
            };
            (Uuid::new_v4(), spec)
        })
        .collect();
    let request_spec = RequestSpec {
        instance_uuid: Uuid::nil(),
        project_id: project.clone(),
        user_id: user.clone(),
        flavor: flavor.clone(),
        image: Some(ImageRef {
            id: image.id,
            disk_format: image.disk_format.clone(),
            properties: image.properties.clone(),
        }),
        num_instances: max_count,
        availability_zone: az.clone(),
        force_host,
        force_node,
        group,
        same_host,
        different_host,
        hints,
        reservation_id: reservation_id.clone(),
        retry: Default::default(),
    };
    let boot = BootAdmission { project_id: project, user_id: user, instances, min_count, request_spec, now };
    let admitted = ctx.compute.accept_boot(boot, &req.request_id).nova()?;
    if server.get("return_reservation_id").and_then(Value::as_bool).unwrap_or(false) {
        return Ok(Resp::json(StatusCode::ACCEPTED, view::create_reservation(&reservation_id)));
    }
    let first = admitted.first().copied().ok_or_else(ApiError::internal)?;
    let links = ctx.links(req);
    let password = random_string(12, b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789");
    let groups: Vec<&str> = server
        .get("security_groups")
        .and_then(Value::as_array)
        .map(|g| g.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    let location = links.self_href(view::COLLECTION, &first.to_string());
    Ok(Resp::json(StatusCode::ACCEPTED, view::create(&links, first, &groups, Some(&password))).location(location))
}

fn value_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// Instances one request may create when quotas do not limit it.
const MAX_COUNT: i64 = 10_000;

/// A `min_count`/`max_count` the schema accepted (a positive integer, or
/// a string of digits): its value, `i64::MAX` when larger (Python's
/// integers have no bound; the quota check refuses it).
fn count(v: &Value) -> i64 {
    match v {
        // Beyond `i64` (or a float): saturated.
        Value::Number(n) => n.as_i64().unwrap_or_else(|| n.as_f64().map_or(i64::MAX, |f| f as i64)),
        Value::String(s) => s.trim().parse().unwrap_or(i64::MAX),
        _ => 1,
    }
}

/// Is `text` what Python's `base64.b64decode` decodes (Nova's `format:
/// base64`, via oslo's `decode_as_bytes`)? Characters outside the
/// alphabet are skipped; the data characters must end on a whole quantum,
/// or be completed by enough `=` (anything after those is ignored). Text
/// that is not ASCII is refused.
fn is_base64(text: &str) -> bool {
    if !text.is_ascii() {
        return false;
    }
    let (mut quad, mut pads) = (0u8, 0u8);
    for b in text.bytes() {
        if b == b'=' {
            if quad >= 2 {
                pads += 1;
                if quad + pads >= 4 {
                    return true;
                }
            }
            continue;
        }
        if b.is_ascii_alphanumeric() || b == b'+' || b == b'/' {
            quad = (quad + 1) % 4;
        }
    }
    quad == 0
}

// ---------------------------------------------------------------------------
// List
// ---------------------------------------------------------------------------

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
    } else if is_admin(req) && (req.query_one("project_id").is_some() || req.query_one("tenant_id").is_some()) {
        filter.project_id = req.query_one("project_id").or_else(|| req.query_one("tenant_id")).map(str::to_owned);
    } else {
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

// ---------------------------------------------------------------------------
// One server
// ---------------------------------------------------------------------------

fn server_id(req: &Req) -> ApiResult<Uuid> {
    let text = req.param(0);
    Uuid::parse_str(text).map_err(|_| ApiError::not_found(format!("Instance {text} could not be found.")))
}

/// Load a server the caller may see (404 for other projects' servers
/// unless admin).
async fn visible(ctx: &ComputeCtx, req: &Req, id: &Uuid) -> ApiResult<ServerRecord> {
    let record = ctx.compute.get_server(id).await.nova()?;
    if record.project_id() != api::project(req) && !is_admin(req) {
        return Err(ApiError::not_found(format!("Instance {id} could not be found.")));
    }
    Ok(record)
}

fn render_show(ctx: &ComputeCtx, req: &Req, record: &ServerRecord) -> ApiResult<Value> {
    let v = version(req);
    let links = ctx.links(req);
    let access = access(req);
    let spec = ctx.core.read().compute.request_specs.get(&record.uuid()).cloned();
    let groups = groups_of(ctx, &record.uuid());
    Ok(match record {
        ServerRecord::Pending(build) => {
            let instance = view::build_request_instance(build);
            let extras = ServerExtras {
                host_status: Some(HostStatus::NoHost),
                server_groups: &groups,
                request_spec: spec.as_ref(),
                ..ServerExtras::default()
            };
            view::show(v, &links, &access, &instance, &extras)
        }
        ServerRecord::Placed { instance, fault, .. } => {
            let extras = ServerExtras {
                fault: fault.as_ref(),
                host_status: Some(host_status(ctx, instance)),
                server_groups: &groups,
                request_spec: spec.as_ref(),
            };
            view::show(v, &links, &access, instance, &extras)
        }
        ServerRecord::Unreachable(mapping) => {
            if !v.at_least(69) {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The cell holding this server is not answering; retry later.",
                ));
            }
            let spec = spec.ok_or_else(|| {
                ApiError::not_found(format!("Instance {} could not be found.", mapping.instance_uuid))
            })?;
            view::down_cell_show(v, &links, mapping, &spec, access.show_flavor_extra_specs, &groups)
        }
    })
}

/// `GET /servers/{id}`.
pub fn show(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("show"), record.project_id(), None)?;
        Ok(Resp::ok(render_show(&ctx, &req, &record)?))
    })
}

/// `PUT /servers/{id}`: name and description.
pub fn update(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("update"), record.project_id(), None)?;
        let body = body(&req, &schemas::servers::update(v))?;
        let server = &body["server"];
        let name = server.get("name").and_then(Value::as_str).map(str::to_owned);
        let description = server.get("description").map(|d| d.as_str().map(str::to_owned));
        ctx.compute.update_server(&id, name, description).await.nova()?;
        let record = ctx.compute.get_server(&id).await.nova()?;
        let links = ctx.links(&req);
        let access = access(&req);
        let groups = groups_of(&ctx, &id);
        match &record {
            ServerRecord::Placed { instance, fault, .. } => {
                let extras = ServerExtras {
                    fault: fault.as_ref(),
                    host_status: Some(host_status(&ctx, instance)),
                    server_groups: &groups,
                    request_spec: None,
                };
                Ok(Resp::ok(view::update(v, &links, &access, instance, &extras)))
            }
            _ => Ok(Resp::ok(render_show(&ctx, &req, &record)?)),
        }
    })
}

pub(crate) fn caller(req: &Req) -> Caller {
    Caller { request_id: req.request_id.clone(), user_id: api::user(req), project_id: api::project(req) }
}

/// `DELETE /servers/{id}`.
pub fn delete(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, &rule("delete"), record.project_id(), None)?;
        check_lock(&req, &record)?;
        ctx.compute.delete_server(&id, &caller(&req)).await.nova()?;
        Ok(Resp::no_content())
    })
}

/// `POST /servers/{id}/action`: `os-start`, `os-stop`, `reboot`.
pub fn action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let value: Value = crate::api::parse_body(&req)?;
        let Some((name, _)) = value.as_object().and_then(|o| o.iter().next()) else {
            return Err(ApiError::bad_request("Malformed request body"));
        };
        let name = name.clone();
        let record = visible(&ctx, &req, &id).await?;
        if let Some(resp) = lock_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        if let Some(resp) = move_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        let (action, schema, policy) = match name.as_str() {
            "os-start" => (ServerAction::Start, schemas::servers::start(), rule("start")),
            "os-stop" => (ServerAction::Stop, schemas::servers::stop(), rule("stop")),
            "reboot" => {
                let hard = value["reboot"]["type"].as_str().is_some_and(|t| t.eq_ignore_ascii_case("HARD"));
                (ServerAction::Reboot { hard }, schemas::servers::reboot(), rule("reboot"))
            }
            other => return Err(ApiError::bad_request(format!("There is no such action: {other}"))),
        };
        body(&req, &schema)?;
        authorize_on(&req, &policy, record.project_id(), None)?;
        check_lock(&req, &record)?;
        ctx.compute.server_action(&id, action, &caller(&req)).await.nova()?;
        Ok(Resp::empty(StatusCode::ACCEPTED))
    })
}

/// Nova's `check_instance_lock`: a locked server takes state-changing
/// actions from admins only (409 `Instance X is locked`), checked after
/// the body and the policy, as Nova's compute API checks it.
pub(crate) fn check_lock(req: &Req, record: &ServerRecord) -> ApiResult<()> {
    match record {
        ServerRecord::Placed { instance, .. } if instance.locked && !api::is_admin(req) => {
            Err(ApiError::conflict(format!("Instance {} is locked", instance.uuid)))
        }
        _ => Ok(()),
    }
}

/// `lock` and `unlock` (`None`: neither).
async fn lock_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    match name {
        "lock" => {
            let v = version(req);
            body(req, &schemas::servers::lock(v.0))?;
            let user = match record {
                ServerRecord::Placed { instance, .. } => Some(instance.user_id.as_str()),
                ServerRecord::Pending(build) => Some(build.user_id.as_str()),
                ServerRecord::Unreachable(_) => None,
            };
            authorize_on(req, "os_compute_api:os-lock-server:lock", project, user)?;
            let reason = if v.at_least(73) { value["lock"]["locked_reason"].as_str().map(str::to_owned) } else { None };
            ctx.compute.lock_server(id, reason, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "unlock" => {
            body(req, &schemas::servers::unlock())?;
            authorize_on(req, "os_compute_api:os-lock-server:unlock", project, None)?;
            // Nova's `is_expected_locked_by`: undoing the other side's
            // lock needs the override (admin by default).
            let expected = if api::project(req) == project { "owner" } else { "admin" };
            if let ServerRecord::Placed { instance, .. } = record {
                if instance.locked_by.as_deref().is_some_and(|by| by != expected) {
                    authorize_on(req, "os_compute_api:os-lock-server:unlock:unlock_override", project, None)?;
                }
            }
            ctx.compute.unlock_server(id, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        _ => Ok(None),
    }
}

/// The move actions: `resize`, `migrate`, `confirmResize`, `revertResize`,
/// `evacuate`, `shelve`, `shelveOffload`, `unshelve` (`None`: not a move
/// action).
async fn move_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    match name {
        "resize" => {
            body(req, &schemas::servers::resize())?;
            authorize_on(req, &rule("resize"), project, None)?;
            check_lock(req, record)?;
            let flavor_id = match &value["resize"]["flavorRef"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            ctx.compute.move_server(id, MoveRequest::Resize { flavor_id }, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "migrate" => {
            let v256 = version(req).at_least(56);
            body(req, &schemas::servers::migrate(v256))?;
            let host = if v256 { value["migrate"]["host"].as_str().map(str::to_owned) } else { None };
            let policy = if host.is_some() {
                "os_compute_api:os-migrate-server:migrate:host"
            } else {
                "os_compute_api:os-migrate-server:migrate"
            };
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            ctx.compute.move_server(id, MoveRequest::Migrate { host }, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "confirmResize" | "revertResize" => {
            let confirm = name == "confirmResize";
            let (schema, policy) = if confirm {
                (schemas::servers::confirm_resize(), rule("confirm_resize"))
            } else {
                (schemas::servers::revert_resize(), rule("revert_resize"))
            };
            body(req, &schema)?;
            authorize_on(req, &policy, project, None)?;
            check_lock(req, record)?;
            ctx.compute.finish_move(id, confirm, &caller(req)).await.nova()?;
            Ok(Some(if confirm { Resp::no_content() } else { Resp::empty(StatusCode::ACCEPTED) }))
        }
        "evacuate" => {
            let v = version(req);
            body(req, &schemas::servers::evacuate(v.0))?;
            authorize_on(req, "os_compute_api:os-evacuate", project, None)?;
            let evacuate = &value["evacuate"];
            let host = evacuate["host"].as_str().map(str::to_owned);
            // Older shapes are upgraded here: before 2.14 `onSharedStorage`
            // only decides whether a password is made up (berth's fake
            // hosts have no disks to share); 2.29–2.67 `force` is taken as
            // a requested host (the scheduler still checks it, where Nova
            // would skip its filters).
            let shared = !v.at_least(14) && bool_value(&evacuate["onSharedStorage"]);
            if v.at_least(29) && !v.at_least(68) && bool_value(&evacuate["force"]) && host.is_none() {
                return Err(ApiError::bad_request("Can't force to a non-provided destination"));
            }
            let password = match evacuate["adminPass"].as_str() {
                Some(_) if shared => {
                    return Err(ApiError::bad_request("admin password can't be changed on existing disk"));
                }
                Some(given) => Some(given.to_owned()),
                None if shared => None,
                None => Some(random_string(12, b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")),
            };
            let request = EvacuateRequest { host, stop: v.at_least(95) };
            ctx.compute.evacuate_server(id, request, &caller(req)).await.nova()?;
            if v.at_least(14) {
                return Ok(Some(Resp::empty(StatusCode::OK)));
            }
            Ok(Some(Resp::ok(serde_json::json!({"adminPass": password}))))
        }
        "os-migrateLive" => {
            let v = version(req);
            body(req, &schemas::servers::migrate_live(v.0))?;
            let args = &value["os-migrateLive"];
            let host = args["host"].as_str().map(str::to_owned);
            let policy = if host.is_some() {
                "os_compute_api:os-migrate-server:migrate_live:host"
            } else {
                "os_compute_api:os-migrate-server:migrate_live"
            };
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            // Older shapes are upgraded here: `block_migration` and
            // `disk_over_commit` mean nothing to fake hosts without disks;
            // 2.30–2.67 `force` keeps the requested host (the scheduler
            // still checks it, where Nova would skip its filters).
            if v.at_least(30) && !v.at_least(68) && bool_value(&args["force"]) && host.is_none() {
                return Err(ApiError::bad_request("Can't force to a non-provided destination"));
            }
            let request = LiveMigrateRequest { host, synchronous: !v.at_least(34) };
            ctx.compute.live_migrate_server(id, request, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "shelve" | "shelveOffload" => {
            let offload = name == "shelveOffload";
            let (schema, policy) = if offload {
                (schemas::servers::shelve_offload(), "os_compute_api:os-shelve:shelve_offload")
            } else {
                (schemas::servers::shelve(), "os_compute_api:os-shelve:shelve")
            };
            body(req, &schema)?;
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            if offload {
                ctx.compute.shelve_offload_server(id, &caller(req)).await.nova()?;
            } else {
                ctx.compute.shelve_server(id, &caller(req)).await.nova()?;
            }
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "unshelve" => {
            let v = version(req);
            body(req, &schemas::servers::unshelve(v.0))?;
            authorize_on(req, "os_compute_api:os-shelve:unshelve", project, None)?;
            let mut request = UnshelveRequest::default();
            if let Some(args) = value["unshelve"].as_object() {
                if v.at_least(77) {
                    if let Some(zone) = args.get("availability_zone") {
                        request.availability_zone = Some(zone.as_str().map(str::to_owned));
                    }
                }
                if v.at_least(91) {
                    request.host = args.get("host").and_then(Value::as_str).map(str::to_owned);
                }
            }
            if request.host.is_some() {
                authorize_on(req, "os_compute_api:os-shelve:unshelve_to_host", project, None)?;
            }
            check_lock(req, record)?;
            ctx.compute.unshelve_server(id, request, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        _ => Ok(None),
    }
}

/// A schema-valid boolean (`true`, or a string oslo reads as true).
fn bool_value(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::String(s) => api::parse_bool(s).unwrap_or(false),
        _ => false,
    }
}

/// `GET /servers/{id}/os-instance-actions`.
pub fn list_actions(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:list", record.project_id(), None)?;
        let actions = ctx.compute.instance_actions(&id).await.nova()?;
        Ok(Resp::ok(actions_view::index(v, &actions, None)))
    })
}

/// `GET /servers/{id}/os-instance-actions/{request_id}`.
pub fn show_action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let v = version(&req);
        let id = server_id(&req)?;
        let request_id = req.param(1).to_owned();
        let record = visible(&ctx, &req, &id).await?;
        authorize_on(&req, "os_compute_api:os-instance-actions:show", record.project_id(), None)?;
        let actions = ctx.compute.instance_actions(&id).await.nova()?;
        let action = actions.into_iter().find(|a| a.request_id == request_id).ok_or_else(|| {
            ApiError::not_found(format!("Action for request_id {request_id} on instance {id} not found"))
        })?;
        let access = actions_view::EventAccess {
            show_events: api::allowed(&req, "os_compute_api:os-instance-actions:events"),
            show_details: api::allowed(&req, "os_compute_api:os-instance-actions:events:details"),
        };
        Ok(Resp::ok(actions_view::show(v, &action, record.project_id(), &access)))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn user_data_is_base64_as_python_decodes_it() {
        for good in ["", "aGVsbG8=", "aGVsbG8K", "aGV sbG8=", "aGVsbA==", "aGVsbA==trailing", "aG\nVs\nbA=="] {
            assert!(is_base64(good), "{good:?}");
        }
        for bad in ["not base64!", "abc", "a", "aGVsbA=", "aGVsbG8", "é"] {
            assert!(!is_base64(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_count_beyond_i64_saturates() {
        assert_eq!(count(&json!(3)), 3);
        assert_eq!(count(&json!("12")), 12);
        assert_eq!(count(&json!(9_223_372_036_854_775_808u64)), i64::MAX);
        assert_eq!(count(&json!("99999999999999999999999")), i64::MAX);
    }
}
