//! Reshaping a host's provider tree: moving inventory from one provider of
//! the tree to others (VGPU from the compute node to its pGPU children)
//! while consumers hold it, in one `POST /reshaper` that moves their
//! allocations too.
//!
//! This is nova-compute's resource tracker path: the driver's
//! `update_provider_tree` raises `ReshapeNeeded` when the inventory it
//! wants would strand allocations, and the tracker calls it again with
//! every allocation of the tree, then the report client's `_reshape` posts
//! the new inventories of the whole tree and the moved allocations at
//! once. A reader of placement sees the tree before or after, never a
//! state with the class in both places or in neither.
//!
//! [`report_tree`] decides between the plain report
//! ([`crate::placement::ensure_tree`]) and a reshape; [`plan_reshape`]
//! (pure) computes the reshaper body from the tree and allocations read
//! just before. A 409 generation conflict (someone wrote the tree or one of
//! its consumers since that read) refreshes both and retries, at most
//! [`RESHAPE_ATTEMPTS`] times; anything else fails with a message naming
//! the host and its root provider.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::placement::{ensure_provider, ensure_tree, inventories_body, DesiredProvider};
use crate::Link;

/// Attempts of a reshape that keeps meeting generation conflicts.
pub const RESHAPE_ATTEMPTS: usize = 4;

/// The microversion of the reshape request: 1.30 introduced the
/// reshaper; before 1.38 a consumer's type may be left out and is kept,
/// which is what moving allocations wants.
const RESHAPE_VERSION: &str = "placement 1.37";

/// A test breakpoint (`berth agent --test-hold-reshape-file`): while it
/// answers true, a reshape waits after reading the tree and before
/// posting, so a test can write to the tree in between.
#[derive(Clone)]
pub struct ReshapeGate(pub Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for ReshapeGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReshapeGate")
    }
}

/// One provider of the tree as placement holds it now.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentProvider {
    /// Provider uuid.
    pub uuid: Uuid,
    /// Provider name.
    pub name: String,
    /// Generation read.
    pub generation: i64,
    /// Inventories: class -> (total, reserved, allocation_ratio).
    pub inventories: BTreeMap<String, (i64, i64, f64)>,
}

/// One consumer with allocations in the tree, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerNow {
    /// Consumer generation.
    pub generation: Option<i64>,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Provider uuid -> class -> amount (providers outside the tree too).
    pub allocations: BTreeMap<Uuid, BTreeMap<String, i64>>,
}

/// What [`report_tree`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// Inventories and traits put in place; nothing had to move.
    Plain,
    /// A reshape succeeded after this many attempts.
    Reshaped {
        /// Attempts made (1: no conflict).
        attempts: usize,
    },
}

/// Does turning `current` into `desired` move a class from one provider to
/// another (a provider loses a class that another one of the tree gets)?
pub fn needs_reshape(current: &[CurrentProvider], desired: &[DesiredProvider]) -> bool {
    let wanted: BTreeMap<&str, &DesiredProvider> = desired.iter().map(|p| (p.name.as_str(), p)).collect();
    let classes_wanted: BTreeSet<&str> =
        desired.iter().flat_map(|p| p.inventories.keys().map(String::as_str)).collect();
    current.iter().any(|provider| {
        provider.inventories.keys().any(|class| {
            let kept = wanted.get(provider.name.as_str()).is_some_and(|p| p.inventories.contains_key(class));
            !kept && classes_wanted.contains(class.as_str())
        })
    })
}

fn capacity(total: i64, reserved: i64, ratio: f64) -> i64 {
    ((total - reserved) as f64 * ratio) as i64
}

/// The reshaper body turning `current` into `desired`, with every
/// allocation of `consumers` on a provider that loses its class moved to
/// the providers that get it: each consumer's amount on one provider when
/// one has room, split over several otherwise, consumers in uuid order.
/// Every provider of `desired` must be in `current` (create them first);
/// providers of `current` not in `desired` get empty inventories. Errors
/// say which class does not fit where.
pub fn plan_reshape(
    current: &[CurrentProvider],
    desired: &[DesiredProvider],
    consumers: &BTreeMap<Uuid, ConsumerNow>,
) -> anyhow::Result<Value> {
    let by_name: BTreeMap<&str, &CurrentProvider> = current.iter().map(|p| (p.name.as_str(), p)).collect();
    let in_tree: BTreeMap<Uuid, &CurrentProvider> = current.iter().map(|p| (p.uuid, p)).collect();
    let wanted: BTreeMap<&str, &DesiredProvider> = desired.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut uuid_of: BTreeMap<&str, Uuid> = BTreeMap::new();
    for provider in desired {
        let now = by_name.get(provider.name.as_str()).with_context(|| format!("provider {} missing", provider.name))?;
        uuid_of.insert(provider.name.as_str(), now.uuid);
    }
    // Does the allocation of `class` on `provider` stay where it is?
    let stays = |provider: &Uuid, class: &str| match in_tree.get(provider) {
        None => true,
        Some(now) => wanted.get(now.name.as_str()).is_some_and(|p| p.inventories.contains_key(class)),
    };
    // Room left per (provider, class) after the allocations that stay.
    let mut room: BTreeMap<(Uuid, String), i64> = BTreeMap::new();
    for provider in desired {
        for (class, (total, reserved, ratio)) in &provider.inventories {
            room.insert((uuid_of[provider.name.as_str()], class.clone()), capacity(*total, *reserved, *ratio));
        }
    }
    for consumer in consumers.values() {
        for (provider, resources) in &consumer.allocations {
            for (class, amount) in resources {
                if in_tree.contains_key(provider) && stays(provider, class) {
                    if let Some(left) = room.get_mut(&(*provider, class.clone())) {
                        *left -= amount;
                    }
                }
            }
        }
    }
    let mut moved_total: BTreeMap<String, i64> = BTreeMap::new();
    let mut allocations = Map::new();
    for (uuid, consumer) in consumers {
        let mut new: BTreeMap<Uuid, BTreeMap<String, i64>> = BTreeMap::new();
        let mut to_move: BTreeMap<String, i64> = BTreeMap::new();
        for (provider, resources) in &consumer.allocations {
            for (class, amount) in resources {
                if stays(provider, class) {
                    *new.entry(*provider).or_default().entry(class.clone()).or_insert(0) += amount;
                } else {
                    *to_move.entry(class.clone()).or_insert(0) += amount;
                }
            }
        }
        for (class, amount) in to_move {
            *moved_total.entry(class.clone()).or_insert(0) += amount;
            let targets: Vec<Uuid> = desired
                .iter()
                .filter(|p| p.inventories.contains_key(&class))
                .map(|p| uuid_of[p.name.as_str()])
                .collect();
            let whole = targets.iter().find(|t| room.get(&(**t, class.clone())).is_some_and(|left| *left >= amount));
            let mut pieces: Vec<(Uuid, i64)> = Vec::new();
            if let Some(target) = whole {
                pieces.push((*target, amount));
            } else {
                let mut left_to_place = amount;
                for target in &targets {
                    let free = room.get(&(*target, class.clone())).copied().unwrap_or(0).max(0);
                    let take = free.min(left_to_place);
                    if take > 0 {
                        pieces.push((*target, take));
                        left_to_place -= take;
                    }
                }
                if left_to_place > 0 {
                    let names: Vec<&str> = desired
                        .iter()
                        .filter(|p| p.inventories.contains_key(&class))
                        .map(|p| p.name.as_str())
                        .collect();
                    let room_total: i64 =
                        targets.iter().map(|t| room.get(&(*t, class.clone())).copied().unwrap_or(0).max(0)).sum();
                    bail!(
                        "the {class} allocations cannot move: consumer {uuid} holds {amount} {class} and the new \
                         providers {} have {room_total} left (after {} already moved)",
                        names.join(", "),
                        moved_total[&class] - amount
                    );
                }
            }
            for (target, take) in pieces {
                if let Some(left) = room.get_mut(&(target, class.clone())) {
                    *left -= take;
                }
                *new.entry(target).or_default().entry(class.clone()).or_insert(0) += take;
            }
        }
        let body: Map<String, Value> = new
            .into_iter()
            .map(|(provider, resources)| (provider.to_string(), json!({ "resources": resources })))
            .collect();
        allocations.insert(
            uuid.to_string(),
            json!({"allocations": body, "consumer_generation": consumer.generation,
                   "project_id": consumer.project_id, "user_id": consumer.user_id}),
        );
    }
    let mut inventories = Map::new();
    for provider in current {
        let body = match wanted.get(provider.name.as_str()) {
            Some(desired) => inventories_body(provider.generation, desired),
            None => json!({"resource_provider_generation": provider.generation, "inventories": {}}),
        };
        inventories.insert(provider.uuid.to_string(), body);
    }
    Ok(json!({"inventories": inventories, "allocations": allocations}))
}

/// Report the tree of the compute node `root_uuid` (host `host`): a plain
/// [`ensure_tree`] when nothing moves, else a reshape (children created
/// first, then one `POST /reshaper`), retried on generation conflicts.
pub async fn report_tree(
    link: &Link,
    host: &str,
    root_uuid: Uuid,
    desired: &[DesiredProvider],
    gate: Option<&ReshapeGate>,
) -> anyhow::Result<Reported> {
    let context = || format!("reshaping the provider tree of host {host} (root provider {root_uuid})");
    for attempt in 1..=RESHAPE_ATTEMPTS {
        let current = read_tree(link, root_uuid).await.with_context(context)?;
        if current.is_empty() || !needs_reshape(&current, desired) {
            ensure_tree(link, root_uuid, desired).await?;
            return Ok(Reported::Plain);
        }
        // New providers first, without inventory (the report client's
        // `_ensure_resource_provider` before `_reshape`): an empty provider
        // changes no one's view of the class.
        let mut created = false;
        for provider in desired {
            if current.iter().any(|p| p.name == provider.name) {
                continue;
            }
            let parent = provider
                .parent
                .as_ref()
                .and_then(|name| current.iter().find(|p| &p.name == name))
                .map(|p| p.uuid)
                .with_context(|| format!("the parent of {} is not in the tree", provider.name))
                .with_context(context)?;
            ensure_provider(link, Uuid::new_v4(), &provider.name, Some(parent)).await.with_context(context)?;
            created = true;
        }
        let current = if created { read_tree(link, root_uuid).await.with_context(context)? } else { current };
        let consumers = read_consumers(link, &current).await.with_context(context)?;
        let body = plan_reshape(&current, desired, &consumers).with_context(context)?;
        if let Some(gate) = gate {
            if (gate.0)() {
                tracing::warn!(host, %root_uuid, "reshape held by the test hook");
                while (gate.0)() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        let resp = link.placement_at(reqwest::Method::POST, "/reshaper", Some(body), RESHAPE_VERSION).await?;
        let status = resp.status();
        if status.is_success() {
            for provider in &current {
                if !desired.iter().any(|p| p.name == provider.name) {
                    let path = format!("/resource_providers/{}", provider.uuid);
                    let _ = link.placement(reqwest::Method::DELETE, &path, None).await;
                }
            }
            // Traits and anything else the plain report sets.
            ensure_tree(link, root_uuid, desired).await.with_context(context)?;
            tracing::info!(host, %root_uuid, attempts = attempt, consumers = consumers.len(), "provider tree reshaped");
            return Ok(Reported::Reshaped { attempts: attempt });
        }
        let text = resp.text().await.unwrap_or_default();
        let conflict = status == reqwest::StatusCode::CONFLICT && text.contains("placement.concurrent_update");
        if !conflict {
            bail!("{}: POST /reshaper refused: {status} {text}", context());
        }
        tracing::warn!(
            host,
            %root_uuid,
            attempt,
            "reshape conflict (attempt {attempt} of {RESHAPE_ATTEMPTS}): refreshing the tree and allocations and retrying"
        );
    }
    bail!("{}: still conflicting after {RESHAPE_ATTEMPTS} attempts", context())
}

/// The providers of the tree rooted at `root_uuid` with their inventories
/// (empty when the root does not exist yet).
async fn read_tree(link: &Link, root_uuid: Uuid) -> anyhow::Result<Vec<CurrentProvider>> {
    let resp = link.placement(reqwest::Method::GET, &format!("/resource_providers?in_tree={root_uuid}"), None).await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(Vec::new());
    }
    if !resp.status().is_success() {
        bail!("listing the tree: {} {}", resp.status(), resp.text().await.unwrap_or_default());
    }
    let body: Value = resp.json().await?;
    let mut out = Vec::new();
    for provider in body["resource_providers"].as_array().into_iter().flatten() {
        let uuid = provider["uuid"].as_str().and_then(|u| Uuid::parse_str(u).ok()).context("provider uuid")?;
        let resp =
            link.placement(reqwest::Method::GET, &format!("/resource_providers/{uuid}/inventories"), None).await?;
        if !resp.status().is_success() {
            bail!("inventories of {uuid}: {}", resp.status());
        }
        let inv: Value = resp.json().await?;
        let inventories = inv["inventories"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(class, record)| {
                (
                    class.clone(),
                    (
                        record["total"].as_i64().unwrap_or(0),
                        record["reserved"].as_i64().unwrap_or(0),
                        record["allocation_ratio"].as_f64().unwrap_or(1.0),
                    ),
                )
            })
            .collect();
        out.push(CurrentProvider {
            uuid,
            name: provider["name"].as_str().unwrap_or("").to_owned(),
            // The inventories' generation: read after the provider's, so
            // a write in between is seen as a conflict, not lost.
            generation: inv["resource_provider_generation"].as_i64().context("provider generation")?,
            inventories,
        });
    }
    Ok(out)
}

/// Every consumer with allocations in the tree, with all its allocations
/// (outside the tree too) and its generation.
async fn read_consumers(link: &Link, tree: &[CurrentProvider]) -> anyhow::Result<BTreeMap<Uuid, ConsumerNow>> {
    let mut uuids = BTreeSet::new();
    for provider in tree {
        let path = format!("/resource_providers/{}/allocations", provider.uuid);
        let body: Value = link.placement(reqwest::Method::GET, &path, None).await?.json().await?;
        for consumer in body["allocations"].as_object().into_iter().flatten().map(|(k, _)| k) {
            uuids.insert(Uuid::parse_str(consumer).context("consumer uuid")?);
        }
    }
    let mut out = BTreeMap::new();
    for uuid in uuids {
        let body: Value =
            link.placement(reqwest::Method::GET, &format!("/allocations/{uuid}"), None).await?.json().await?;
        let mut allocations = BTreeMap::new();
        for (provider, entry) in body["allocations"].as_object().into_iter().flatten() {
            let provider = Uuid::parse_str(provider).context("provider uuid")?;
            let resources: BTreeMap<String, i64> = entry["resources"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(class, amount)| (class.clone(), amount.as_i64().unwrap_or(0)))
                .collect();
            allocations.insert(provider, resources);
        }
        if allocations.is_empty() {
            continue;
        }
        out.insert(
            uuid,
            ConsumerNow {
                generation: body["consumer_generation"].as_i64(),
                project_id: body["project_id"].as_str().unwrap_or("").to_owned(),
                user_id: body["user_id"].as_str().unwrap_or("").to_owned(),
                allocations,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::desired_tree;
    use crate::{HostShape, VgpuLayout};

    fn current_of(tree: &[DesiredProvider]) -> Vec<CurrentProvider> {
        tree.iter()
            .enumerate()
            .map(|(idx, p)| CurrentProvider {
                uuid: Uuid::from_u128(idx as u128 + 1),
                name: p.name.clone(),
                generation: 7,
                inventories: p.inventories.clone(),
            })
            .collect()
    }

    fn consumer(provider: Uuid, resources: &[(&str, i64)]) -> ConsumerNow {
        let mut allocations = BTreeMap::new();
        allocations.insert(provider, resources.iter().map(|(c, a)| (c.to_string(), *a)).collect());
        ConsumerNow { generation: Some(1), project_id: "p".into(), user_id: "u".into(), allocations }
    }

    fn shape(vgpus: i64, layout: &str) -> HostShape {
        HostShape { vgpus, vgpu_layout: layout.parse().expect("layout"), ..HostShape::default() }
    }

    /// The tree after the move: root, pgpu0, pgpu1 (uuids 1, 2, 3).
    fn moved_tree(layout: &str, vgpus: i64) -> (Vec<CurrentProvider>, Vec<DesiredProvider>) {
        let before = desired_tree("h", &shape(vgpus, "root"));
        let after = desired_tree("h", &shape(vgpus, layout));
        let mut current = current_of(&after);
        current[0].inventories = before[0].inventories.clone();
        for child in &mut current[1..] {
            child.inventories.clear();
        }
        (current, after)
    }

    fn vgpu_of(body: &Value, consumer: Uuid) -> BTreeMap<String, i64> {
        body["allocations"][consumer.to_string()]["allocations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(p, e)| e["resources"]["VGPU"].as_i64().map(|v| (p.clone(), v)))
            .collect()
    }

    #[test]
    fn layouts_parse() {
        assert_eq!("root".parse::<VgpuLayout>().ok(), Some(VgpuLayout::Root));
        assert_eq!("children".parse::<VgpuLayout>().ok(), Some(VgpuLayout::Children { pgpus: 2, per_pgpu: None }));
        assert_eq!(
            "children:3x1".parse::<VgpuLayout>().ok(),
            Some(VgpuLayout::Children { pgpus: 3, per_pgpu: Some(1) })
        );
        assert!("children:0".parse::<VgpuLayout>().is_err());
        assert!("sideways".parse::<VgpuLayout>().is_err());
    }

    #[test]
    fn moving_vgpu_off_the_root_needs_a_reshape_and_nothing_else_does() {
        let root = desired_tree("h", &shape(6, "root"));
        let children = desired_tree("h", &shape(6, "children"));
        assert!(needs_reshape(&current_of(&root), &children));
        assert!(needs_reshape(&current_of(&children), &root));
        assert!(!needs_reshape(&current_of(&root), &root));
        assert!(!needs_reshape(&current_of(&children), &desired_tree("h", &shape(8, "children"))));
    }

    #[test]
    fn allocations_move_whole_when_they_fit_and_split_when_they_must() {
        let (current, desired) = moved_tree("children", 6);
        let root = current[0].uuid;
        let (pgpu0, pgpu1) = (current[1].uuid.to_string(), current[2].uuid.to_string());
        let mut consumers = BTreeMap::new();
        for (idx, amount) in [(10u128, 2), (11, 2), (12, 2)] {
            consumers.insert(Uuid::from_u128(idx), consumer(root, &[("VCPU", 1), ("VGPU", amount)]));
        }
        let body = plan_reshape(&current, &desired, &consumers).expect("plan");
        assert_eq!(vgpu_of(&body, Uuid::from_u128(10)), BTreeMap::from([(pgpu0.clone(), 2)]));
        assert_eq!(vgpu_of(&body, Uuid::from_u128(11)), BTreeMap::from([(pgpu1.clone(), 2)]));
        // One unit left on each child: the last consumer is split.
        assert_eq!(vgpu_of(&body, Uuid::from_u128(12)), BTreeMap::from([(pgpu0.clone(), 1), (pgpu1.clone(), 1)]));
        // VCPU stays on the root; the root's new inventory has no VGPU.
        let first = &body["allocations"][Uuid::from_u128(10).to_string()];
        assert_eq!(first["allocations"][root.to_string()]["resources"], json!({"VCPU": 1}));
        assert_eq!(first["consumer_generation"], json!(1));
        let root_inv = &body["inventories"][root.to_string()];
        assert!(root_inv["inventories"].get("VGPU").is_none());
        assert_eq!(root_inv["resource_provider_generation"], json!(7));
        assert_eq!(body["inventories"][&pgpu1]["inventories"]["VGPU"]["total"], json!(3));
    }

    #[test]
    fn children_too_small_fail_naming_the_class_and_providers() {
        let (current, desired) = moved_tree("children:2x1", 6);
        let root = current[0].uuid;
        let consumers: BTreeMap<Uuid, ConsumerNow> =
            (0..3u128).map(|i| (Uuid::from_u128(20 + i), consumer(root, &[("VGPU", 1)]))).collect();
        let err = plan_reshape(&current, &desired, &consumers).expect_err("does not fit").to_string();
        assert!(err.contains("VGPU") && err.contains("h_pgpu0, h_pgpu1"), "{err}");
    }

    #[test]
    fn moving_back_to_the_root_empties_the_children() {
        let children = desired_tree("h", &shape(4, "children"));
        let current = current_of(&children);
        let root_tree = desired_tree("h", &shape(4, "root"));
        let child = current[1].uuid;
        let consumers = BTreeMap::from([(Uuid::from_u128(30), consumer(child, &[("VGPU", 2)]))]);
        let body = plan_reshape(&current, &root_tree, &consumers).expect("plan");
        assert_eq!(vgpu_of(&body, Uuid::from_u128(30)), BTreeMap::from([(current[0].uuid.to_string(), 2)]));
        assert_eq!(body["inventories"][child.to_string()]["inventories"], json!({}));
    }
}
