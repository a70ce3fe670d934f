//! Reporting a host's provider tree through the Placement HTTP API, the
//! way nova-compute's report client does: look the providers up, create
//! the missing ones (root first, then children with their parent), then
//! put inventories and traits with the provider generation the agent last
//! saw; on a 409 generation conflict, refresh the generation and retry.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{HostShape, Link, VgpuLayout};

/// Attempts on generation conflicts before giving up (the report client
/// retries a few times, then the next periodic tries again).
const CONFLICT_RETRIES: usize = 4;

/// Traits the control plane sets on compute node providers (a disabled
/// service's `COMPUTE_STATUS_DISABLED`): never the agent's, so a restart or
/// a reshape does not silently re-enable a host.
const CONTROL_PLANE_TRAITS: &[&str] = &["COMPUTE_STATUS_DISABLED"];

/// One provider of a host's tree, as the agent wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredProvider {
    /// Name (unique in placement).
    pub name: String,
    /// Parent's name (`None` for the root).
    pub parent: Option<String>,
    /// Inventories: class -> (total, reserved, allocation_ratio).
    pub inventories: BTreeMap<String, (i64, i64, f64)>,
    /// Traits.
    pub traits: Vec<String>,
}

/// The tree of one host: the root (the compute node, named after it) with
/// DISK_GB; VCPU/MEMORY_MB on the root, or split over `NUMA` children;
/// devices as children of the NUMA nodes (grandchildren of the root), or of
/// the root when there are no NUMA nodes; VGPU on the root or on pGPU
/// children of the root, as `shape.vgpu_layout` says.
pub fn desired_tree(node: &str, shape: &HostShape) -> Vec<DesiredProvider> {
    let mut out = base_tree(node, shape);
    if shape.vgpus <= 0 {
        return out;
    }
    match shape.vgpu_layout {
        VgpuLayout::Root => {
            out[0].inventories.insert("VGPU".to_owned(), (shape.vgpus, 0, 1.0));
        }
        VgpuLayout::Children { pgpus, per_pgpu } => {
            for idx in 0..pgpus {
                let count = per_pgpu.unwrap_or_else(|| {
                    shape.vgpus / pgpus as i64 + i64::from((idx as i64) < shape.vgpus % pgpus as i64)
                });
                if count <= 0 {
                    continue;
                }
                let mut inventories = BTreeMap::new();
                inventories.insert("VGPU".to_owned(), (count, 0, 1.0));
                out.push(DesiredProvider {
                    name: format!("{node}_pgpu{idx}"),
                    parent: Some(node.to_owned()),
                    inventories,
                    traits: vec![],
                });
            }
        }
    }
    out
}

fn base_tree(node: &str, shape: &HostShape) -> Vec<DesiredProvider> {
    let mut root = DesiredProvider {
        name: node.to_owned(),
        parent: None,
        inventories: BTreeMap::new(),
        traits: shape.traits.clone(),
    };
    if shape.disk_gb > 0 {
        root.inventories.insert("DISK_GB".to_owned(), (shape.disk_gb, 0, shape.disk_allocation_ratio));
    }
    let mut out = Vec::new();
    let numa = shape.numa_nodes;
    if numa == 0 {
        root.inventories.insert("VCPU".to_owned(), (shape.vcpus, shape.reserved_vcpus, shape.cpu_allocation_ratio));
        root.inventories
            .insert("MEMORY_MB".to_owned(), (shape.memory_mb, shape.reserved_memory_mb, shape.ram_allocation_ratio));
        if shape.pcpus > 0 {
            root.inventories.insert("PCPU".to_owned(), (shape.pcpus, 0, 1.0));
        }
        out.push(root);
        for (class, count) in &shape.devices {
            out.push(device(node, node, class, *count));
        }
        return out;
    }
    out.push(root);
    for idx in 0..numa {
        let name = format!("{node}_NUMA{idx}");
        let share = |total: i64| total / numa as i64 + i64::from((idx as i64) < total % numa as i64);
        let mut child = DesiredProvider {
            name: name.clone(),
            parent: Some(node.to_owned()),
            inventories: BTreeMap::new(),
            traits: vec![],
        };
        child.inventories.insert(
            "VCPU".to_owned(),
            (share(shape.vcpus), if idx == 0 { shape.reserved_vcpus } else { 0 }, shape.cpu_allocation_ratio),
        );
        child.inventories.insert(
            "MEMORY_MB".to_owned(),
            (share(shape.memory_mb), if idx == 0 { shape.reserved_memory_mb } else { 0 }, shape.ram_allocation_ratio),
        );
        if shape.pcpus > 0 {
            child.inventories.insert("PCPU".to_owned(), (share(shape.pcpus), 0, 1.0));
        }
        out.push(child);
        for (class, count) in &shape.devices {
            out.push(device(node, &name, class, *count));
        }
    }
    out
}

fn device(node: &str, parent: &str, class: &str, count: i64) -> DesiredProvider {
    let _ = node;
    let mut inventories = BTreeMap::new();
    inventories.insert(class.to_owned(), (count, 0, 1.0));
    DesiredProvider {
        name: format!("{parent}_{}", class.to_ascii_lowercase()),
        parent: Some(parent.to_owned()),
        inventories,
        traits: vec![],
    }
}

pub(crate) fn inventories_body(generation: i64, provider: &DesiredProvider) -> Value {
    let mut inventories = serde_json::Map::new();
    for (class, (total, reserved, ratio)) in &provider.inventories {
        inventories.insert(
            class.clone(),
            json!({"total": total, "reserved": reserved, "min_unit": 1, "max_unit": total,
                   "step_size": 1, "allocation_ratio": ratio}),
        );
    }
    json!({"resource_provider_generation": generation, "inventories": inventories})
}

/// Make placement hold `tree` for the compute node `root_uuid`. Providers
/// are found by name (children) or uuid (root); missing ones are created.
pub async fn ensure_tree(link: &Link, root_uuid: Uuid, tree: &[DesiredProvider]) -> anyhow::Result<()> {
    let mut uuids: BTreeMap<String, Uuid> = BTreeMap::new();
    for provider in tree {
        let uuid = match &provider.parent {
            None => {
                ensure_provider(link, root_uuid, &provider.name, None).await?;
                root_uuid
            }
            Some(parent) => {
                let parent_uuid = *uuids.get(parent).context("child before its parent")?;
                let existing = find_by_name(link, &provider.name).await?;
                let uuid = existing.unwrap_or_else(Uuid::new_v4);
                if existing.is_none() {
                    ensure_provider(link, uuid, &provider.name, Some(parent_uuid)).await?;
                }
                uuid
            }
        };
        uuids.insert(provider.name.clone(), uuid);
        put_with_retries(link, uuid, "inventories", |generation| inventories_body(generation, provider)).await?;
        // A compute node's traits are always reconciled (its capability
        // traits may have gone); a child's only when the agent reports some.
        if provider.parent.is_none() || !provider.traits.is_empty() {
            for name in provider.traits.iter().filter(|t| t.starts_with("CUSTOM_")) {
                let resp = link.placement(reqwest::Method::PUT, &format!("/traits/{name}"), None).await?;
                if !resp.status().is_success() {
                    bail!("creating trait {name}: {}", resp.status());
                }
            }
            put_traits(link, uuid, &provider.traits).await?;
        }
    }
    Ok(())
}

/// Whether the agent (its driver) owns `name` on its providers: the
/// capability (`COMPUTE_*`, but not the control plane's status traits)
/// and CPU feature (`HW_CPU_*`) namespaces, as nova-compute's drivers add
/// and remove only those. Every other trait on the provider (an
/// operator's `CUSTOM_GOLD`, a `STORAGE_DISK_SSD` set by hand) is kept.
fn agent_owns(name: &str) -> bool {
    (name.starts_with("COMPUTE_") && !CONTROL_PLANE_TRAITS.contains(&name)) || name.starts_with("HW_CPU_")
}

/// The traits a provider should carry: the agent's `reported` ones, plus
/// every trait of `current` the agent does not own (sorted, no repeats).
pub(crate) fn merged_traits<'a>(reported: &[String], current: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut traits: Vec<String> = reported.to_vec();
    traits.extend(current.into_iter().filter(|name| !agent_owns(name)).map(str::to_owned));
    traits.sort();
    traits.dedup();
    traits
}

/// Put `reported` on the provider, keeping what the agent does not own
/// (read inside each attempt, so an operator's trait put between the read
/// and the write makes a generation conflict and a fresh read, not a loss).
async fn put_traits(link: &Link, uuid: Uuid, reported: &[String]) -> anyhow::Result<()> {
    let path = format!("/resource_providers/{uuid}/traits");
    for _ in 0..CONFLICT_RETRIES {
        let current: Value = link.placement(reqwest::Method::GET, &path, None).await?.json().await?;
        let generation = current["resource_provider_generation"].as_i64().context("traits without generation")?;
        let have: Vec<&str> = current["traits"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let traits = merged_traits(reported, have.iter().copied());
        let mut sorted_have: Vec<&str> = have.clone();
        sorted_have.sort_unstable();
        sorted_have.dedup();
        if sorted_have == traits.iter().map(String::as_str).collect::<Vec<_>>() {
            return Ok(());
        }
        let body = json!({"resource_provider_generation": generation, "traits": traits});
        let resp = link.placement(reqwest::Method::PUT, &path, Some(body)).await?;
        if resp.status().is_success() {
            return Ok(());
        }
        if resp.status() != reqwest::StatusCode::CONFLICT {
            bail!("PUT traits of {uuid}: {} {}", resp.status(), resp.text().await.unwrap_or_default());
        }
        tracing::debug!(%uuid, "generation conflict on traits; refreshing and retrying");
    }
    bail!("PUT traits of {uuid}: still conflicting after {CONFLICT_RETRIES} attempts")
}

async fn find_by_name(link: &Link, name: &str) -> anyhow::Result<Option<Uuid>> {
    let path = format!("/resource_providers?name={}", percent(name));
    let resp = link.placement(reqwest::Method::GET, &path, None).await?;
    let body: Value = resp.json().await?;
    Ok(body["resource_providers"]
        .as_array()
        .and_then(|list| list.first())
        .and_then(|p| p["uuid"].as_str())
        .and_then(|u| Uuid::parse_str(u).ok()))
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub(crate) async fn ensure_provider(link: &Link, uuid: Uuid, name: &str, parent: Option<Uuid>) -> anyhow::Result<()> {
    let resp = link.placement(reqwest::Method::GET, &format!("/resource_providers/{uuid}"), None).await?;
    if resp.status().is_success() {
        return Ok(());
    }
    let mut body = json!({"uuid": uuid.to_string(), "name": name});
    if let Some(parent) = parent {
        body["parent_provider_uuid"] = json!(parent.to_string());
    }
    let resp = link.placement(reqwest::Method::POST, "/resource_providers", Some(body)).await?;
    // 409: another agent (or a previous run) created it meanwhile.
    if resp.status().is_success() || resp.status() == reqwest::StatusCode::CONFLICT {
        return Ok(());
    }
    bail!("creating provider {name}: {} {}", resp.status(), resp.text().await.unwrap_or_default())
}

async fn generation(link: &Link, uuid: Uuid) -> anyhow::Result<i64> {
    let resp = link.placement(reqwest::Method::GET, &format!("/resource_providers/{uuid}"), None).await?;
    let body: Value = resp.json().await?;
    body["generation"].as_i64().context("provider without generation")
}

/// PUT `/resource_providers/{uuid}/{what}` with the current generation,
/// refreshing it and retrying on 409 (the report client's behaviour).
async fn put_with_retries(link: &Link, uuid: Uuid, what: &str, body: impl Fn(i64) -> Value) -> anyhow::Result<()> {
    for _ in 0..CONFLICT_RETRIES {
        let gen = generation(link, uuid).await?;
        let resp = link
            .placement(reqwest::Method::PUT, &format!("/resource_providers/{uuid}/{what}"), Some(body(gen)))
            .await?;
        if resp.status().is_success() {
            return Ok(());
        }
        if resp.status() != reqwest::StatusCode::CONFLICT {
            bail!("PUT {what} of {uuid}: {} {}", resp.status(), resp.text().await.unwrap_or_default());
        }
        tracing::debug!(%uuid, what, "generation conflict; refreshing and retrying");
    }
    bail!("PUT {what} of {uuid}: still conflicting after {CONFLICT_RETRIES} attempts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_tree_splits_cpu_and_memory_and_hangs_devices_below() {
        let shape = HostShape { numa_nodes: 2, devices: vec![("VGPU".into(), 2)], ..HostShape::default() };
        let tree = desired_tree("h1", &shape);
        let names: Vec<&str> = tree.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["h1", "h1_NUMA0", "h1_NUMA0_vgpu", "h1_NUMA1", "h1_NUMA1_vgpu"]);
        assert_eq!(tree[0].inventories.keys().collect::<Vec<_>>(), vec!["DISK_GB"]);
        let vcpus: i64 = tree.iter().filter_map(|p| p.inventories.get("VCPU")).map(|i| i.0).sum();
        assert_eq!(vcpus, shape.vcpus);
        assert_eq!(tree[2].parent.as_deref(), Some("h1_NUMA0"));
    }

    #[test]
    fn merged_traits_keep_what_the_agent_does_not_own() {
        let reported = vec!["COMPUTE_NODE".to_owned(), "HW_CPU_X86_AVX".to_owned()];
        let current = [
            "CUSTOM_GOLD",
            "COMPUTE_STATUS_DISABLED",
            "COMPUTE_VOLUME_MULTI_ATTACH",
            "HW_CPU_X86_SSE",
            "STORAGE_DISK_SSD",
        ];
        assert_eq!(
            merged_traits(&reported, current),
            vec!["COMPUTE_NODE", "COMPUTE_STATUS_DISABLED", "CUSTOM_GOLD", "HW_CPU_X86_AVX", "STORAGE_DISK_SSD"]
        );
        assert_eq!(merged_traits(&[], ["CUSTOM_GOLD", "CUSTOM_GOLD"]), vec!["CUSTOM_GOLD"]);
    }

    #[test]
    fn flat_tree() {
        let tree = desired_tree("h1", &HostShape::default());
        assert_eq!(tree.len(), 1);
        assert!(tree[0].inventories.contains_key("VCPU"));
    }
}
