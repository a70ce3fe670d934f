//! `/os-hypervisors` bodies (Nova's `hypervisors.py` `_view_hypervisor`).
//!
//! A hypervisor is a compute node seen with its service: `state` is
//! `up`/`down` (the caller's liveness verdict on the service) and `status`
//! `enabled`/`disabled`.

use serde_json::{json, Map, Value};
use uuid::Uuid;

use berth_compute_model::cell::{ComputeNode, Service};

use super::{list_body, wrap};
use crate::ComputeVersion;

/// Resource usage Nova showed in hypervisor details before 2.88 (it kept
/// them on the compute node row; berth counts them from placement and the
/// cell, so the caller passes them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HypervisorUsage {
    /// vCPUs used by instances.
    pub vcpus_used: i64,
    /// RAM used (MiB).
    pub memory_mb_used: i64,
    /// Disk used (GiB).
    pub local_gb_used: i64,
    /// Instances on the node.
    pub running_vms: i64,
    /// Instances with a task in progress.
    pub current_workload: i64,
    /// Free disk after overcommit, if the driver knows it.
    pub disk_available_least: Option<i64>,
}

/// What one hypervisor entry is built from.
#[derive(Debug, Clone, Copy)]
pub struct HypervisorSource<'a> {
    /// The compute node.
    pub node: &'a ComputeNode,
    /// Its compute service.
    pub service: &'a Service,
    /// The caller's verdict: is the service up?
    pub up: bool,
    /// Servers on the node `(uuid, name)` when the request asked for them
    /// (`with_servers=true` from 2.53, the `/servers` route before); `None`
    /// when it did not.
    pub servers: Option<&'a [(Uuid, &'a str)]>,
}

fn base(version: ComputeVersion, source: &HypervisorSource<'_>) -> Map<String, Value> {
    let mut body = Map::new();
    let id = if version.at_least(53) { json!(source.node.uuid.to_string()) } else { json!(source.node.id) };
    body.insert("id".into(), id);
    body.insert("hypervisor_hostname".into(), json!(source.node.hypervisor_hostname));
    body.insert("state".into(), json!(if source.up { "up" } else { "down" }));
    body.insert("status".into(), json!(if source.service.disabled { "disabled" } else { "enabled" }));
    body
}

fn add_servers(version: ComputeVersion, body: &mut Map<String, Value>, servers: Option<&[(Uuid, &str)]>) {
    match servers {
        // Before 2.75 Nova omits the key when the node has no servers.
        Some(list) if !list.is_empty() || version.at_least(75) => {
            let entries: Vec<Value> =
                list.iter().map(|(uuid, name)| json!({"name": name, "uuid": uuid.to_string()})).collect();
            body.insert("servers".into(), Value::Array(entries));
        }
        _ => {}
    }
}

/// One entry of `GET /os-hypervisors`: `id` (the integer id before 2.53,
/// the uuid from 2.53), `hypervisor_hostname`, `state`, `status`, and
/// `servers` when asked for.
pub fn index_item(version: ComputeVersion, source: &HypervisorSource<'_>) -> Value {
    let mut body = base(version, source);
    add_servers(version, &mut body, source.servers);
    Value::Object(body)
}

/// One hypervisor in detail (`GET /os-hypervisors/detail` entry, inside of
/// `GET /os-hypervisors/{id}`). Before 2.88 it carries the node's sizes
/// and `usage` (free RAM and disk derived from them) and `cpu_info` (the
/// node's JSON text before 2.28, parsed from 2.28); from 2.88 those are
/// gone and `uptime` (the caller's, `null` when unknown) appears.
pub fn detail_item(
    version: ComputeVersion,
    source: &HypervisorSource<'_>,
    usage: &HypervisorUsage,
    uptime: Option<&str>,
) -> Value {
    let node = source.node;
    let mut body = base(version, source);
    body.insert("hypervisor_type".into(), json!(node.hypervisor_type));
    body.insert("hypervisor_version".into(), json!(node.hypervisor_version));
    body.insert("host_ip".into(), json!(node.host_ip));
    let service_id =
        if version.at_least(53) { json!(source.service.uuid.to_string()) } else { json!(source.service.id) };
    body.insert(
        "service".into(),
        json!({"id": service_id, "host": node.host, "disabled_reason": source.service.disabled_reason}),
    );
    if version.at_least(88) {
        body.insert("uptime".into(), json!(uptime));
    } else {
        body.insert("vcpus".into(), json!(node.vcpus));
        body.insert("memory_mb".into(), json!(node.memory_mb));
        body.insert("local_gb".into(), json!(node.local_gb));
        body.insert("vcpus_used".into(), json!(usage.vcpus_used));
        body.insert("memory_mb_used".into(), json!(usage.memory_mb_used));
        body.insert("local_gb_used".into(), json!(usage.local_gb_used));
        body.insert("free_ram_mb".into(), json!(node.memory_mb - usage.memory_mb_used));
        body.insert("free_disk_gb".into(), json!(node.local_gb - usage.local_gb_used));
        body.insert("current_workload".into(), json!(usage.current_workload));
        body.insert("running_vms".into(), json!(usage.running_vms));
        body.insert("disk_available_least".into(), json!(usage.disk_available_least));
        let cpu_info = if version.at_least(28) {
            match serde_json::from_str::<Value>(&node.cpu_info) {
                Ok(Value::Object(info)) => Value::Object(info),
                _ => json!({}),
            }
        } else {
            json!(node.cpu_info)
        };
        body.insert("cpu_info".into(), cpu_info);
    }
    add_servers(version, &mut body, source.servers);
    Value::Object(body)
}

/// The `GET /os-hypervisors/{id}` body.
pub fn show(
    version: ComputeVersion,
    source: &HypervisorSource<'_>,
    usage: &HypervisorUsage,
    uptime: Option<&str>,
) -> Value {
    wrap("hypervisor", detail_item(version, source, usage, uptime))
}

/// The `GET /os-hypervisors` (and `detail`) body from rendered items,
/// with `hypervisors_links` when `next` is given and `version` pages
/// (2.33+; the marker is the last hypervisor's `id`).
pub fn list(version: ComputeVersion, items: Vec<Value>, next: Option<Value>) -> Value {
    list_body("hypervisors", items, "hypervisors_links", next.filter(|_| version.at_least(33)))
}
