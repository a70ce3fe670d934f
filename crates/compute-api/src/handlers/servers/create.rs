//! `POST /servers` (boot). [`create`] is a sequence of named steps: parse
//! and check the body on its own ([`parse_create`]); resolve its flavor
//! and image on the snapshot ([`resolve_flavor_and_image`]); check
//! `user_data` ([`check_user_data`], after the lookups, where it always
//! was, so a body with several faults is refused for the same one); find
//! the caller's key pair it names ([`resolve_key_pair`], where Nova looks
//! it up, after `user_data`); lower
//! the count to what quotas admit ([`admitted_count`]); build the
//! instances' specs and the request spec they share ([`build_boot`]);
//! admit the boot in one control write (`Compute::accept_boot`); answer
//! 202 ([`answer_create`]).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use berth_compute_model::plan::BootAdmission;
use berth_compute_model::{Flavor, Image, ImageRef, InstanceSpec, RequestSpec};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use super::{access_ips, disk_config_requested, random_string, ref_id, rule};
use crate::api::{self, authorize, body, is_admin, version, ComputeCtx, NovaResult};
use crate::handlers::resources::DEFAULT_NETWORK_ID;
use crate::schemas;
use crate::version::ComputeVersion;
use crate::views::servers as view;

/// `POST /servers`.
pub fn create(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    let v = version(req);
    authorize(req, &rule("create"))?;
    let body = body(req, create_schema(v))?;
    let server = &body["server"];
    let request = parse_create(req, v, &body)?;
    let (flavor, image) = resolve_flavor_and_image(ctx, req, &request)?;
    let auto_disk_config = auto_disk_config(request.disk_config, &image)?;
    check_user_data(server)?;
    super::check_personality(ctx, req, server)?;
    let key_pair = resolve_key_pair(ctx, &request)?;
    let max_count = admitted_count(ctx, &request, &flavor)?;
    let boot = build_boot(server, request, flavor, image, key_pair, max_count, auto_disk_config);
    let reservation_id = boot.request_spec.reservation_id.clone();
    let admitted = ctx.compute.accept_boot(boot, &req.request_id).nova()?;
    answer_create(ctx, req, server, &reservation_id, &admitted, auto_disk_config)
}

/// The instance's `auto_disk_config`: as asked, else the image's
/// `auto_disk_config` property (oslo's lenient `bool_from_string`); an
/// image whose property is `disabled` refuses `AUTO` (Nova's
/// `_inherit_properties_from_image`).
fn auto_disk_config(requested: Option<bool>, image: &Image) -> ApiResult<bool> {
    let property = image.properties.get("auto_disk_config").map(|p| p.trim().to_ascii_lowercase());
    if property.as_deref() == Some("disabled") && requested == Some(true) {
        return Err(ApiError::bad_request(format!("Requested image {} has automatic disk resize disabled.", image.id)));
    }
    Ok(requested.unwrap_or_else(|| property.as_deref().and_then(api::parse_bool).unwrap_or(false)))
}

/// A `POST /servers` body as far as it can be read and checked without
/// the control state.
struct CreateRequest {
    project: String,
    user: String,
    name: String,
    min_count: i64,
    max_count: i64,
    /// The availability zone asked for (`az` of `az:host:node`).
    az: Option<String>,
    force_host: Option<String>,
    force_node: Option<String>,
    hints: BTreeMap<String, Vec<String>>,
    same_host: Vec<Uuid>,
    different_host: Vec<Uuid>,
    group: Option<Uuid>,
    flavor_id: String,
    /// `imageRef`, else the image a block device mapping boots from
    /// (empty: none).
    image_text: String,
    /// The `hostname` asked for, for a single instance only.
    requested_hostname: Option<String>,
    /// `key_name`: one of the caller's key pairs.
    key_name: Option<String>,
    /// `accessIPv4` and `accessIPv6`, checked and normalised.
    access_ips: (Option<String>, Option<String>),
    /// `OS-DCF:diskConfig` as asked (`Some(true)`: `AUTO`).
    disk_config: Option<bool>,
}

/// Read and check the body: what berth cannot do (networks,
/// volumes), the counts, where to boot (a forced host or node needs its
/// policy), the scheduler hints, and the flavor and image references.
fn parse_create(req: &Req, v: ComputeVersion, body: &Value) -> ApiResult<CreateRequest> {
    let server = &body["server"];
    let project = api::project(req);
    let user = api::user(req);
    let name = server["name"].as_str().unwrap_or("").to_owned();
    // Nova checks the address formats with the schema, before anything.
    let access_ips = access_ips(server)?;
    let bdm_image = local_image_from_bdms(server)?;
    let key_name = server.get("key_name").and_then(Value::as_str).map(str::to_owned);
    // No network service: only the default network `os-networks` lists
    // may be named, without a port or a fixed address (which is `auto`).
    if let Some(networks) = server.get("networks").and_then(Value::as_array) {
        for network in networks {
            let id = network.get("uuid").or_else(|| network.get("port")).and_then(Value::as_str).unwrap_or("");
            if id != DEFAULT_NETWORK_ID {
                return Err(ApiError::bad_request(format!("Network {id} could not be found.")));
            }
            if ["port", "fixed_ip"].iter().any(|k| network.get(*k).is_some_and(|v| !v.is_null())) {
                return Err(ApiError::bad_request(format!(
                    "Network {id} has no ports or fixed addresses to give: berth has no network service."
                )));
            }
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
    let requested_hostname = server.get("hostname").and_then(Value::as_str).map(str::to_owned);
    Ok(CreateRequest {
        project,
        user,
        name,
        min_count,
        max_count,
        az,
        force_host,
        force_node,
        hints,
        same_host,
        different_host,
        group,
        flavor_id,
        image_text,
        requested_hostname,
        key_name,
        access_ips,
        disk_config: disk_config_requested(server),
    })
}

/// The key pair a boot names, as `(name, public key)`: the caller's own
/// (Nova looks it up for `context.user_id`), else 400 as Nova.
fn resolve_key_pair(ctx: &ComputeCtx, request: &CreateRequest) -> ApiResult<Option<(String, String)>> {
    let Some(name) = &request.key_name else { return Ok(None) };
    let world = ctx.core.read();
    let key_pair = world
        .compute
        .key_pairs
        .get(&(request.user.clone(), name.clone()))
        .ok_or_else(|| ApiError::bad_request("Invalid key_name provided."))?;
    Ok(Some((key_pair.name.clone(), key_pair.public_key.clone())))
}

/// Nova's `_check_requested_image` and `_validate_flavor_image_nostatus`
/// for an image-backed root disk: the image is `active`, its
/// `img_config_drive` is one Nova knows, and the flavor holds it (RAM
/// against `min_ram`; a root disk of 0 is not checked, otherwise in bytes
/// against the image's size and `min_disk`).
pub(crate) fn check_image_for_flavor(image: &Image, flavor: &Flavor) -> ApiResult<()> {
    if image.status != "active" {
        return Err(ApiError::bad_request(format!("Image {} is not active.", image.id)));
    }
    if let Some(option) = image.properties.get("img_config_drive") {
        if !matches!(option.as_str(), "optional" | "mandatory") {
            return Err(ApiError::bad_request(format!("Image's config drive option '{option}' is invalid")));
        }
    }
    if image.min_ram > flavor.memory_mb {
        return Err(ApiError::bad_request("Flavor's memory is too small for requested image."));
    }
    const GIB: i64 = 1 << 30;
    let dest_size = flavor.root_gb.saturating_mul(GIB);
    if dest_size != 0 {
        let image_size = image.size.unwrap_or(0);
        if image_size > dest_size {
            return Err(ApiError::bad_request(format!(
                "Flavor's disk is too small for requested image. Flavor disk is {dest_size} bytes, image is \
                 {image_size} bytes."
            )));
        }
        let min_disk = image.min_disk.saturating_mul(GIB);
        if min_disk > dest_size {
            return Err(ApiError::bad_request(format!(
                "Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is \
                 {dest_size} bytes, minimum size is {min_disk} bytes."
            )));
        }
    }
    Ok(())
}

/// The flavor and image a boot names, as the caller may see them on the
/// snapshot, checked against each other; and the availability zone and
/// server group it names.
fn resolve_flavor_and_image(ctx: &ComputeCtx, req: &Req, request: &CreateRequest) -> ApiResult<(Flavor, Image)> {
    let CreateRequest { project, az, group, flavor_id, image_text, .. } = request;
    let (flavor, image, known_zones, group_ok) = {
        let world = ctx.core.read();
        let compute = &world.compute;
        let flavor = compute
            .flavors
            .get(flavor_id)
            .filter(|f| f.is_public || f.projects.contains(project) || is_admin(req))
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("Flavor {flavor_id} could not be found.")))?;
        let image = if image_text.is_empty() {
            None
        } else {
            let id = Uuid::parse_str(ref_id(image_text))
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
            compute.server_groups.get(&g).is_some_and(|grp| grp.project_id == *project || is_admin(req))
        });
        (flavor, image, zones, group_ok)
    };
    let Some(image) = image else { return Err(ApiError::bad_request("Missing imageRef attribute")) };
    if flavor.disabled {
        return Err(ApiError::bad_request("Flavor is disabled."));
    }
    check_image_for_flavor(&image, &flavor)?;
    if let Some(zone) = az {
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
    Ok((flavor, image))
}

/// `user_data`, if any, must be base64 as Python decodes it.
pub(super) fn check_user_data(server: &Value) -> ApiResult<()> {
    if let Some(data) = server.get("user_data").and_then(Value::as_str) {
        if !is_base64(data) {
            return Err(ApiError::bad_request(format!(
                "Invalid input for field/attribute user_data. Value: {data}. '{data}' is not a 'base64'"
            )));
        }
    }
    Ok(())
}

/// How many instances to build: `max_count` lowered to what quotas admit.
fn admitted_count(ctx: &ComputeCtx, request: &CreateRequest, flavor: &Flavor) -> ApiResult<i64> {
    let CreateRequest { project, user, min_count, max_count, requested_hostname, .. } = request;
    // Nova's schema takes any positive count and its quota check refuses
    // (403) or lowers what does not fit: checked here on the snapshot, so
    // that no more instances are built than could be admitted (the
    // admission write checks again). Unlimited quotas stop at
    // `MAX_COUNT` per request.
    let max_count = {
        let world = ctx.core.read();
        berth_compute_model::quota::admit_instances(
            &world,
            project,
            user,
            flavor.vcpus,
            flavor.memory_mb,
            *min_count,
            *max_count,
        )
        .map_err(api::refused)?
    };
    if *min_count > MAX_COUNT {
        return Err(ApiError::bad_request(format!("min_count must be <= {MAX_COUNT}")));
    }
    let max_count = max_count.min(MAX_COUNT);
    if requested_hostname.is_some() && max_count > 1 {
        return Err(ApiError::bad_request(
            "Unable to allocate a hostname to multiple instances. Remove the hostname or request a single instance.",
        ));
    }
    Ok(max_count)
}

/// The boot to admit: `max_count` instances, each with a fresh uuid and
/// its spec, and the request spec they share.
fn build_boot(
    server: &Value,
    request: CreateRequest,
    flavor: Flavor,
    image: Image,
    key_pair: Option<(String, String)>,
    max_count: i64,
    auto_disk_config: bool,
) -> BootAdmission {
    // The NICs a hypervisor driver gives each guest: one per network
    // named, one for `auto` (and without `networks`, before 2.37).
    let nics = match server.get("networks") {
        Some(Value::String(s)) if s == "none" => 0,
        Some(Value::Array(list)) => u32::try_from(list.len()).unwrap_or(u32::MAX),
        _ => 1,
    };
    let CreateRequest {
        project,
        user,
        name,
        min_count,
        az,
        force_host,
        force_node,
        hints,
        same_host,
        different_host,
        group,
        requested_hostname,
        access_ips: (access_ip_v4, access_ip_v6),
        ..
    } = request;
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
    // The groups asked for (each once), else `default`, as Nova gives a
    // server's ports.
    let mut security_groups: Vec<String> = Vec::new();
    for group in server.get("security_groups").and_then(Value::as_array).into_iter().flatten() {
        if let Some(name) = group["name"].as_str().filter(|n| !security_groups.iter().any(|g| g == n)) {
            security_groups.push(name.to_owned());
        }
    }
    if security_groups.is_empty() {
        security_groups.push("default".to_owned());
    }
    let now = berth_core::now();
    let (key_name, key_data) = key_pair.unzip();
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
                key_name: key_name.clone(),
                key_data: key_data.clone(),
                availability_zone: az.clone(),
                reservation_id: reservation_id.clone(),
                launch_index: idx,
                config_drive: match server.get("config_drive") {
                    Some(Value::Bool(true)) => "True".to_owned(),
                    Some(Value::String(s)) => s.clone(),
                    _ => String::new(),
                },
                user_data: server.get("user_data").and_then(Value::as_str).map(str::to_owned),
                access_ip_v4: access_ip_v4.clone(),
                access_ip_v6: access_ip_v6.clone(),
                tags: tags.clone(),
                scheduler_hints: hints.clone(),
                auto_disk_config,
                security_groups: security_groups.clone(),
                rescue_image: None,
                nics,
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
        key_data,
        move_token: None,
    };
    BootAdmission { project_id: project, user_id: user, instances, min_count, request_spec, now }
}

/// 202 with the first server's id, its links, its disk config and the
/// admin password given (else a made-up one, as Nova's
/// `_get_server_admin_password`); only the reservation id when
/// `return_reservation_id` asks.
fn answer_create(
    ctx: &ComputeCtx,
    req: &Req,
    server: &Value,
    reservation_id: &str,
    admitted: &[Uuid],
    auto_disk_config: bool,
) -> ApiResult<Resp> {
    if server.get("return_reservation_id").and_then(Value::as_bool).unwrap_or(false) {
        return Ok(Resp::json(StatusCode::ACCEPTED, view::create_reservation(reservation_id)));
    }
    let first = admitted.first().copied().ok_or_else(ApiError::internal)?;
    let links = ctx.links(req);
    let password = match server.get("adminPass").and_then(Value::as_str) {
        Some(given) => given.to_owned(),
        None => random_string(12, b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"),
    };
    let groups: Vec<&str> = server
        .get("security_groups")
        .and_then(Value::as_array)
        .map(|g| g.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    let location = links.self_href(view::COLLECTION, &first.to_string());
    Ok(Resp::json(StatusCode::ACCEPTED, view::create(&links, first, auto_disk_config, &groups, Some(&password)))
        .location(location))
}

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
pub(super) fn is_base64(text: &str) -> bool {
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
