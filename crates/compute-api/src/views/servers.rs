//! `/servers` bodies (Nova's `views/servers.py` and the server controller).
//!
//! A server is shown from one of three sources:
//!
//! - an [`Instance`] in a cell ([`show`], [`detail_item`], [`update`]);
//! - a [`BuildRequest`] not yet in a cell: Nova shows the instance the
//!   build request carries, in BUILD/scheduling with no host, so
//!   [`build_request_instance`] builds that [`Instance`] and it is rendered
//!   like any other;
//! - from 2.69, a stub for a server whose cell did not answer, built from
//!   the API database alone ([`down_cell_index_item`],
//!   [`down_cell_detail_item`], [`down_cell_show`]).
//!
//! berth has no networks or volumes: `addresses` is always `{}`,
//! `os-extended-volumes:volumes_attached` `[]`, `security_groups` lists
//! the groups the server keeps (its create's, as Nova's ports would
//! carry them; left out while it is building and once none are left, as
//! Nova leaves it out of a server whose ports have none), and
//! `OS-DCF:diskConfig` shows the instance's `auto_disk_config`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use berth_compute_model::cell::{power_state, Fault, Instance};
use berth_compute_model::{BuildRequest, Flavor, InstanceMapping, RequestSpec};

use super::{host_id, isotime, list_body, opt_str, string_map, strtime_or_null, wrap, Links};
use crate::ComputeVersion;

/// The collection segment of server links.
pub const COLLECTION: &str = "servers";

/// What policy lets the requester see of a server. The caller evaluates the
/// rules; the view only obeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAccess {
    /// The request context is an admin. Nova shows the `details` of a fault
    /// whose code is 500 only to admins (it checks `context.is_admin`, not a
    /// policy rule); other faults' details are shown to everyone.
    pub show_admin_fields: bool,
    /// `os_compute_api:os-extended-server-attributes`: the
    /// `OS-EXT-SRV-ATTR:*` keys (host, node, instance name; from 2.3 also
    /// hostname, launch index, reservation id, kernel/ramdisk, root device,
    /// user data).
    pub show_extended_attributes: bool,
    /// `os_compute_api:servers:show:flavor-extra-specs`: `extra_specs` in
    /// the embedded flavor (2.47+).
    pub show_flavor_extra_specs: bool,
    /// `os_compute_api:servers:show:host_status` and its `unknown-only`
    /// variant (2.16+).
    pub host_status: HostStatusAccess,
}

/// How much of `host_status` policy allows (Nova's `unknown_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostStatusAccess {
    /// Neither rule passes: no `host_status` key.
    Hidden,
    /// Only `show:host_status:unknown-only` passes: the key appears only
    /// when the status is `UNKNOWN`.
    UnknownOnly,
    /// `show:host_status` passes: always shown.
    All,
}

/// The status of a server's compute host (Nova's `HostStatus`), computed by
/// the caller from the host's service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostStatus {
    /// The service is up and enabled.
    Up,
    /// The service is down (or forced down).
    Down,
    /// The service is disabled.
    Maintenance,
    /// The service's state could not be read (e.g. its cell is down).
    Unknown,
    /// The server has no host.
    NoHost,
}

impl HostStatus {
    /// The wire value: `UP`, `DOWN`, `MAINTENANCE`, `UNKNOWN` or `""`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostStatus::Up => "UP",
            HostStatus::Down => "DOWN",
            HostStatus::Maintenance => "MAINTENANCE",
            HostStatus::Unknown => "UNKNOWN",
            HostStatus::NoHost => "",
        }
    }
}

/// Per-server facts that are not in the [`Instance`] row.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerExtras<'a> {
    /// The latest fault of the instance. Shown only when the status is
    /// `ERROR` or `DELETED`.
    pub fault: Option<&'a Fault>,
    /// The status of the instance's host (2.16+); filtered by
    /// [`ServerAccess::host_status`]. `None` leaves the key out.
    pub host_status: Option<HostStatus>,
    /// The server groups the server belongs to (at most one). From 2.71
    /// [`show`] and [`update`] always carry `server_groups` (empty when
    /// this is); [`detail_item`] never does, as in Nova.
    pub server_groups: &'a [Uuid],
    /// The server's request spec: `pinned_availability_zone` (2.96) is its
    /// `availability_zone` and `scheduler_hints` (2.100) its hints. Without
    /// one, Nova shows `null` and `{}`.
    pub request_spec: Option<&'a RequestSpec>,
}

/// Which optional groups of attributes a rendering includes (Nova's `show`
/// keyword arguments).
#[derive(Debug, Clone, Copy)]
struct Parts {
    availability_zone: bool,
    config_drive: bool,
    key_name: bool,
    usage: bool,
    extended_attributes: bool,
    host_status: bool,
    extended_status: bool,
    extended_volumes: bool,
    security_groups: bool,
}

impl Parts {
    fn all(access: &ServerAccess) -> Parts {
        Parts {
            availability_zone: true,
            config_drive: true,
            key_name: true,
            usage: true,
            extended_attributes: access.show_extended_attributes,
            host_status: true,
            extended_status: true,
            extended_volumes: true,
            security_groups: true,
        }
    }

    /// The reduced view `PUT /servers/{id}` returned before 2.75.
    fn legacy_update() -> Parts {
        Parts {
            availability_zone: false,
            config_drive: false,
            key_name: false,
            usage: false,
            extended_attributes: false,
            host_status: false,
            extended_status: false,
            extended_volumes: false,
            security_groups: false,
        }
    }
}

/// One entry of `GET /servers`: `id`, `name`, `links`. Works for instances
/// and build requests alike.
pub fn index_item(links: &Links, id: Uuid, name: &str) -> Value {
    let id = id.to_string();
    json!({"id": id, "name": name, "links": links.resource(COLLECTION, &id)})
}

/// The `GET /servers` body (`servers_links` when `next` is given).
pub fn index(items: Vec<Value>, next: Option<Value>) -> Value {
    list_body("servers", items, "servers_links", next)
}

/// The `GET /servers/detail` body (`servers_links` when `next` is given).
pub fn detail(items: Vec<Value>, next: Option<Value>) -> Value {
    list_body("servers", items, "servers_links", next)
}

/// One server of `GET /servers/detail`, or the inside of `GET
/// /servers/{id}`: everything the requester may see of an instance at
/// `version`.
pub fn detail_item(
    version: ComputeVersion,
    links: &Links,
    access: &ServerAccess,
    instance: &Instance,
    extras: &ServerExtras<'_>,
) -> Value {
    render(version, links, access, instance, extras, Parts::all(access), false)
}

/// The `GET /servers/{id}` body: [`detail_item`] plus, from 2.71,
/// `server_groups`.
pub fn show(
    version: ComputeVersion,
    links: &Links,
    access: &ServerAccess,
    instance: &Instance,
    extras: &ServerExtras<'_>,
) -> Value {
    wrap("server", render(version, links, access, instance, extras, Parts::all(access), true))
}

/// The `PUT /servers/{id}` body: from 2.75 the same as [`show`]; before, a
/// reduced view without availability zone, config drive, key name, usage
/// times, extended attributes and statuses, host status and volumes.
pub fn update(
    version: ComputeVersion,
    links: &Links,
    access: &ServerAccess,
    instance: &Instance,
    extras: &ServerExtras<'_>,
) -> Value {
    let parts = if version.at_least(75) { Parts::all(access) } else { Parts::legacy_update() };
    wrap("server", render(version, links, access, instance, extras, parts, true))
}

/// The `rebuild` action's body: [`update`]'s view (the full one from
/// 2.75, without `OS-EXT-SRV-ATTR:user_data`), plus `key_name` from 2.54,
/// `user_data` from 2.57, and `adminPass` (Nova's default
/// `enable_instance_password`).
pub fn rebuild(
    version: ComputeVersion,
    links: &Links,
    access: &ServerAccess,
    instance: &Instance,
    extras: &ServerExtras<'_>,
    admin_pass: &str,
) -> Value {
    let mut body = update(version, links, access, instance, extras);
    if let Some(server) = body.get_mut("server").and_then(Value::as_object_mut) {
        server.remove("OS-EXT-SRV-ATTR:user_data");
        if version.at_least(54) {
            server.insert("key_name".into(), opt_str(instance.spec.key_name.as_deref()));
        }
        if version.at_least(57) {
            server.insert("user_data".into(), opt_str(instance.spec.user_data.as_deref()));
        }
        server.insert("adminPass".into(), json!(admin_pass));
    }
    body
}

/// The instance Nova shows for a build request: the requested server in
/// `BUILD` (`building`/`scheduling`), power state NOSTATE, no host, created
/// (and last updated) when the request was accepted. A held build request
/// (a reserved server waiting for its lease) is `RESERVED` (`reserved`, no
/// task) instead.
pub fn build_request_instance(build_request: &BuildRequest) -> Instance {
    let (vm, task) = build_request.shown_state();
    Instance::from_spec(
        build_request.instance_uuid,
        &build_request.project_id,
        &build_request.user_id,
        build_request.spec.clone(),
        build_request.created_at,
        vm,
        task,
    )
}

/// `OS-DCF:diskConfig` as Nova shows `auto_disk_config`.
pub fn disk_config(auto_disk_config: bool) -> &'static str {
    if auto_disk_config {
        "AUTO"
    } else {
        "MANUAL"
    }
}

/// The `POST /servers` body (unless `return_reservation_id` was asked):
/// `id`, `links`, `OS-DCF:diskConfig`, the security groups asked for (Nova
/// echoes `[{"name": "default"}]` when none were), and `adminPass` when the
/// caller generated or received one (Nova leaves it out when
/// `[api] enable_instance_password` is off).
pub fn create(
    links: &Links,
    id: Uuid,
    auto_disk_config: bool,
    security_groups: &[&str],
    admin_pass: Option<&str>,
) -> Value {
    let id = id.to_string();
    let groups: Vec<Value> = if security_groups.is_empty() {
        vec![json!({"name": "default"})]
    } else {
        security_groups.iter().map(|name| json!({"name": name})).collect()
    };
    let mut server = Map::new();
    server.insert("id".into(), json!(id));
    server.insert("links".into(), links.resource(COLLECTION, &id));
    server.insert("OS-DCF:diskConfig".into(), json!(disk_config(auto_disk_config)));
    server.insert("security_groups".into(), Value::Array(groups));
    if let Some(pass) = admin_pass {
        server.insert("adminPass".into(), json!(pass));
    }
    wrap("server", Value::Object(server))
}

/// The `POST /servers` body when `return_reservation_id` was true.
pub fn create_reservation(reservation_id: &str) -> Value {
    json!({"reservation_id": reservation_id})
}

/// A server of `GET /servers` whose cell is down (2.69+): `id`,
/// `status: UNKNOWN`, `links`, from its instance mapping.
pub fn down_cell_index_item(links: &Links, mapping: &InstanceMapping) -> Value {
    let id = mapping.instance_uuid.to_string();
    json!({"id": id, "status": "UNKNOWN", "links": links.resource(COLLECTION, &id)})
}

/// A server of `GET /servers/detail` whose cell is down (2.69+): `id`,
/// `status: UNKNOWN`, `tenant_id`, `created`, `links`.
pub fn down_cell_detail_item(links: &Links, mapping: &InstanceMapping) -> Value {
    let id = mapping.instance_uuid.to_string();
    json!({
        "id": id,
        "status": "UNKNOWN",
        "tenant_id": mapping.project_id,
        "created": isotime(mapping.created_at),
        "links": links.resource(COLLECTION, &id),
    })
}

/// The `GET /servers/{id}` body of a server whose cell is down (2.69+):
/// the mapping's fields plus what the request spec knows (image, flavor,
/// requested availability zone or `UNKNOWN`, user), power state 0, and
/// from 2.71 the server groups. Nova answers 404 when there is no request
/// spec, so one is required.
pub fn down_cell_show(
    version: ComputeVersion,
    links: &Links,
    mapping: &InstanceMapping,
    request_spec: &RequestSpec,
    show_flavor_extra_specs: bool,
    server_groups: &[Uuid],
) -> Value {
    let id = mapping.instance_uuid.to_string();
    let mut server = Map::new();
    server.insert("id".into(), json!(id));
    server.insert("status".into(), json!("UNKNOWN"));
    server.insert("tenant_id".into(), json!(mapping.project_id));
    server.insert("created".into(), json!(isotime(mapping.created_at)));
    server.insert("links".into(), links.resource(COLLECTION, &id));
    // The stub's image has no properties: Nova builds it from the request
    // spec, whose instance has no system metadata to read them from.
    server.insert("image".into(), image_ref(links, request_spec.image.as_ref().map(|i| i.id)));
    server.insert("flavor".into(), flavor(version, links, &request_spec.flavor, show_flavor_extra_specs));
    let zone = request_spec.availability_zone.as_deref().filter(|z| !z.is_empty()).unwrap_or("UNKNOWN");
    server.insert("OS-EXT-AZ:availability_zone".into(), json!(zone));
    server.insert("OS-EXT-STS:power_state".into(), json!(power_state::NOSTATE));
    let user = if request_spec.user_id.is_empty() { "UNKNOWN" } else { &request_spec.user_id };
    server.insert("user_id".into(), json!(user));
    if version.at_least(71) {
        server.insert("server_groups".into(), uuids(server_groups));
    }
    wrap("server", Value::Object(server))
}

fn uuids(ids: &[Uuid]) -> Value {
    Value::Array(ids.iter().map(|u| Value::String(u.to_string())).collect())
}

/// A server's `image`: `{id, links}` (bookmark only), or `""` when it
/// booted from a volume.
fn image_ref(links: &Links, image: Option<Uuid>) -> Value {
    match image {
        Some(id) => {
            let id = id.to_string();
            json!({"id": id, "links": links.bookmark("images", &id)})
        }
        None => json!(""),
    }
}

/// A server's `flavor`: before 2.47 a reference (`id` and a bookmark), from
/// 2.47 the embedded copy, with `extra_specs` only when allowed.
fn flavor(version: ComputeVersion, links: &Links, flavor: &Flavor, show_extra_specs: bool) -> Value {
    if !version.at_least(47) {
        return json!({"id": flavor.flavorid, "links": links.bookmark("flavors", &flavor.flavorid)});
    }
    let mut body = Map::new();
    body.insert("vcpus".into(), json!(flavor.vcpus));
    body.insert("ram".into(), json!(flavor.memory_mb));
    body.insert("disk".into(), json!(flavor.root_gb));
    body.insert("ephemeral".into(), json!(flavor.ephemeral_gb));
    body.insert("swap".into(), json!(flavor.swap));
    body.insert("original_name".into(), json!(flavor.name));
    if show_extra_specs {
        body.insert("extra_specs".into(), string_map(&flavor.extra_specs));
    }
    Value::Object(body)
}

/// Image properties Nova 2.98 shows: the instance's image properties whose
/// names are `ImageMetaProps` fields or their legacy aliases (Nova keeps
/// every property in system metadata but shows only these).
pub const SHOWN_IMAGE_PROPERTIES: &[&str] = &[
    // ImageMetaProps fields.
    "hw_architecture",
    "hw_auto_disk_config",
    "hw_boot_menu",
    "hw_cdrom_bus",
    "hw_cpu_cores",
    "hw_cpu_max_cores",
    "hw_cpu_max_sockets",
    "hw_cpu_max_threads",
    "hw_cpu_policy",
    "hw_cpu_realtime_mask",
    "hw_cpu_sockets",
    "hw_cpu_thread_policy",
    "hw_cpu_threads",
    "hw_device_id",
    "hw_disk_bus",
    "hw_disk_type",
    "hw_emulation_architecture",
    "hw_ephemeral_encryption",
    "hw_ephemeral_encryption_format",
    "hw_ephemeral_encryption_secret_uuid",
    "hw_firmware_stateless",
    "hw_firmware_type",
    "hw_floppy_bus",
    "hw_input_bus",
    "hw_ipxe_boot",
    "hw_locked_memory",
    "hw_machine_type",
    "hw_maxphysaddr_bits",
    "hw_maxphysaddr_mode",
    "hw_mem_encryption",
    "hw_mem_encryption_model",
    "hw_mem_page_size",
    "hw_numa_cpus",
    "hw_numa_mem",
    "hw_numa_nodes",
    "hw_pci_numa_affinity_policy",
    "hw_pmu",
    "hw_pointer_model",
    "hw_qemu_guest_agent",
    "hw_redirected_usb_ports",
    "hw_rescue_bus",
    "hw_rescue_device",
    "hw_rng_model",
    "hw_scsi_model",
    "hw_serial_port_count",
    "hw_sound_model",
    "hw_time_hpet",
    "hw_tpm_model",
    "hw_tpm_version",
    "hw_usb_model",
    "hw_video_model",
    "hw_video_ram",
    "hw_vif_model",
    "hw_vif_multiqueue_enabled",
    "hw_viommu_model",
    "hw_virtio_packed_ring",
    "hw_vm_mode",
    "hw_watchdog_action",
    "img_bdm_v2",
    "img_bittorrent",
    "img_block_device_mapping",
    "img_cache_in_nova",
    "img_compression_level",
    "img_config_drive",
    "img_hide_hypervisor_id",
    "img_hv_requested_version",
    "img_hv_type",
    "img_linked_clone",
    "img_mappings",
    "img_owner_id",
    "img_root_device_name",
    "img_signature",
    "img_signature_certificate_uuid",
    "img_signature_hash_method",
    "img_signature_key_type",
    "img_use_agent",
    "img_version",
    "os_admin_user",
    "os_command_line",
    "os_distro",
    "os_require_quiesce",
    "os_secure_boot",
    "os_skip_agent_inject_files_at_boot",
    "os_skip_agent_inject_ssh",
    "os_type",
    "traits_required",
    // Legacy names (ImageMetaProps._legacy_property_map).
    "architecture",
    "auto_disk_config",
    "bdm_v2",
    "bittorrent",
    "block_device_mapping",
    "cache_in_nova",
    "hypervisor_type",
    "hypervisor_version_requires",
    "ipxe_boot",
    "mappings",
    "owner_id",
    "root_device_name",
    "vm_mode",
    "vmware_disktype",
    "vmware_image_version",
    "vmware_linked_clone",
    "vmware_ostype",
    "xenapi_device_id",
    "xenapi_image_compression_level",
    "xenapi_skip_agent_inject_files_at_boot",
    "xenapi_skip_agent_inject_ssh",
    "xenapi_use_agent",
];

fn image(version: ComputeVersion, links: &Links, instance: &Instance) -> Value {
    let mut image = image_ref(links, instance.spec.image_ref);
    if let (true, Value::Object(body)) = (version.at_least(98), &mut image) {
        let shown = instance.spec.image_properties.iter().filter(|(k, _)| SHOWN_IMAGE_PROPERTIES.contains(&k.as_str()));
        body.insert("properties".into(), string_map(shown));
    }
    image
}

fn fault(access: &ServerAccess, fault: &Fault) -> Value {
    let mut body = Map::new();
    body.insert("code".into(), json!(fault.code));
    body.insert("created".into(), json!(isotime(fault.created_at)));
    body.insert("message".into(), json!(fault.message));
    if !fault.details.is_empty() && (access.show_admin_fields || fault.code != 500) {
        body.insert("details".into(), json!(fault.details));
    }
    Value::Object(body)
}

fn hints(hints: &BTreeMap<String, Vec<String>>) -> Value {
    Value::Object(hints.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// Statuses whose servers show `progress`.
const PROGRESS_STATUSES: &[&str] = &["ACTIVE", "BUILD", "REBUILD", "RESIZE", "VERIFY_RESIZE", "MIGRATING"];
/// Statuses whose servers show their `fault`.
const FAULT_STATUSES: &[&str] = &["ERROR", "DELETED"];

fn render(
    version: ComputeVersion,
    links: &Links,
    access: &ServerAccess,
    instance: &Instance,
    extras: &ServerExtras<'_>,
    parts: Parts,
    show_server_groups: bool,
) -> Value {
    let spec = &instance.spec;
    let id = instance.uuid.to_string();
    let status = if instance.deleted { "DELETED" } else { instance.status() };
    let mut server = Map::new();
    server.insert("accessIPv4".into(), json!(spec.access_ip_v4.as_deref().unwrap_or("")));
    server.insert("accessIPv6".into(), json!(spec.access_ip_v6.as_deref().unwrap_or("")));
    server.insert("addresses".into(), json!({}));
    server.insert("created".into(), json!(isotime(instance.created_at)));
    server.insert("flavor".into(), flavor(version, links, &spec.flavor, access.show_flavor_extra_specs));
    server.insert("hostId".into(), json!(host_id(&instance.project_id, instance.host.as_deref())));
    server.insert("id".into(), json!(id));
    server.insert("image".into(), image(version, links, instance));
    server.insert("links".into(), links.resource(COLLECTION, &id));
    server.insert("metadata".into(), string_map(&spec.metadata));
    server.insert("name".into(), json!(spec.display_name));
    server.insert("status".into(), json!(status));
    server.insert("tenant_id".into(), json!(instance.project_id));
    server.insert("user_id".into(), json!(instance.user_id));
    // Nova stamps a never-updated row with the current time; a pure view
    // uses the creation time instead.
    server.insert("updated".into(), json!(isotime(instance.updated_at.unwrap_or(instance.created_at))));
    server.insert("OS-DCF:diskConfig".into(), json!(disk_config(spec.auto_disk_config)));
    if FAULT_STATUSES.contains(&status) {
        if let Some(f) = extras.fault {
            server.insert("fault".into(), fault(access, f));
        }
    }
    if PROGRESS_STATUSES.contains(&status) {
        server.insert("progress".into(), json!(instance.progress));
    }
    if parts.availability_zone {
        server.insert("OS-EXT-AZ:availability_zone".into(), json!(instance.availability_zone.as_deref().unwrap_or("")));
    }
    if parts.config_drive {
        server.insert("config_drive".into(), json!(spec.config_drive));
    }
    if parts.key_name {
        server.insert("key_name".into(), opt_str(spec.key_name.as_deref()));
    }
    if parts.usage {
        server.insert("OS-SRV-USG:launched_at".into(), strtime_or_null(instance.launched_at));
        server.insert("OS-SRV-USG:terminated_at".into(), strtime_or_null(instance.terminated_at));
    }
    if parts.extended_attributes {
        server.insert("OS-EXT-SRV-ATTR:host".into(), opt_str(instance.host.as_deref()));
        server.insert("OS-EXT-SRV-ATTR:instance_name".into(), json!(instance_name(instance.uuid)));
        server.insert("OS-EXT-SRV-ATTR:hypervisor_hostname".into(), opt_str(instance.node.as_deref()));
        if version.at_least(3) {
            server.insert("OS-EXT-SRV-ATTR:hostname".into(), json!(spec.hostname));
            server.insert("OS-EXT-SRV-ATTR:kernel_id".into(), json!(""));
            server.insert("OS-EXT-SRV-ATTR:launch_index".into(), json!(spec.launch_index));
            server.insert("OS-EXT-SRV-ATTR:ramdisk_id".into(), json!(""));
            server.insert("OS-EXT-SRV-ATTR:reservation_id".into(), json!(spec.reservation_id));
            server.insert("OS-EXT-SRV-ATTR:root_device_name".into(), Value::Null);
            server.insert("OS-EXT-SRV-ATTR:user_data".into(), opt_str(spec.user_data.as_deref()));
        }
    }
    if parts.extended_status {
        server.insert("OS-EXT-STS:task_state".into(), opt_str(instance.task_state.as_deref()));
        server.insert("OS-EXT-STS:vm_state".into(), json!(instance.vm_state));
        server.insert("OS-EXT-STS:power_state".into(), json!(instance.power_state));
    }
    if parts.extended_volumes {
        server.insert("os-extended-volumes:volumes_attached".into(), json!([]));
    }
    if parts.security_groups && !spec.security_groups.is_empty() && instance.vm_state != "building" {
        let groups: Vec<Value> = spec.security_groups.iter().map(|name| json!({"name": name})).collect();
        server.insert("security_groups".into(), Value::Array(groups));
    }
    if version.at_least(9) {
        server.insert("locked".into(), json!(instance.locked));
    }
    if version.at_least(16) && parts.host_status {
        let shown = match (access.host_status, extras.host_status) {
            (HostStatusAccess::All, Some(s)) => Some(s),
            (HostStatusAccess::UnknownOnly, Some(HostStatus::Unknown)) => Some(HostStatus::Unknown),
            _ => None,
        };
        if let Some(s) = shown {
            server.insert("host_status".into(), json!(s.as_str()));
        }
    }
    if version.at_least(19) {
        server.insert("description".into(), opt_str(spec.display_description.as_deref()));
    }
    if version.at_least(26) {
        server.insert("tags".into(), json!(spec.tags));
    }
    if version.at_least(63) {
        // berth does not verify image signatures: no trusted certificates.
        server.insert("trusted_image_certificates".into(), Value::Null);
    }
    if version.at_least(71) && show_server_groups {
        server.insert("server_groups".into(), uuids(extras.server_groups));
    }
    if version.at_least(73) {
        server.insert("locked_reason".into(), opt_str(instance.locked_reason.as_deref()));
    }
    if version.at_least(90) && !parts.extended_attributes {
        server.insert("OS-EXT-SRV-ATTR:hostname".into(), json!(spec.hostname));
    }
    if version.at_least(96) && parts.availability_zone {
        let pinned = extras.request_spec.and_then(|rs| rs.availability_zone.as_deref());
        server.insert("pinned_availability_zone".into(), opt_str(pinned));
    }
    if version.at_least(100) {
        let hinted = extras.request_spec.map_or_else(|| json!({}), |rs| hints(&rs.hints));
        server.insert("scheduler_hints".into(), hinted);
    }
    Value::Object(server)
}

/// `OS-EXT-SRV-ATTR:instance_name`. Nova renders its
/// `instance_name_template` (`instance-%08x` of the row's integer id);
/// berth's instances have no integer id, so the name is built from the
/// uuid, which Nova's template also allows (`instance-%(uuid)s`).
pub fn instance_name(id: Uuid) -> String {
    format!("instance-{id}")
}
