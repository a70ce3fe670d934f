//! Request spec -> placement query, as Nova's `ResourceRequest` and its
//! request filters build it (`scheduler/utils.py`,
//! `scheduler/request_filter.py`).

use std::collections::BTreeMap;

use berth_candidates::{GroupPolicy, Request, RequestGroup};
use berth_compute_model::extra_specs::{parse_granular, GranularKey};
use berth_compute_model::{image_required_traits, RequestSpec, World, COMPUTE_STATUS_DISABLED};
use uuid::Uuid;

use crate::{Config, NoValidHost};

/// The placement query for a request spec, plus what the host filters
/// need to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementQuery {
    /// The allocation-candidates request.
    pub request: Request,
    /// Every trait the request requires (for isolated aggregates).
    pub required_traits: Vec<String>,
}

#[derive(Default)]
struct Group {
    resources: BTreeMap<String, i64>,
    required: Vec<String>,
    forbidden: Vec<String>,
}

/// Build the placement query for `spec` (Nova's
/// `resources_from_request_spec` with the request filters berth runs).
pub fn placement_query(world: &World, spec: &RequestSpec, config: &Config) -> Result<PlacementQuery, NoValidHost> {
    let flavor = &spec.flavor;
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut group_policy = None;
    // 1. Flavor extra specs: resources[S]:RC, trait[S]:T, group_policy.
    for (key, value) in &flavor.extra_specs {
        if key == "group_policy" {
            group_policy = match value.as_str() {
                "isolate" => Some(GroupPolicy::Isolate),
                "none" => Some(GroupPolicy::None),
                _ => group_policy,
            };
            continue;
        }
        match parse_granular(key) {
            Some(GranularKey::Resource { suffix, class }) => {
                // Not a nonnegative integer: ignored, so the flavor's own
                // amount applies (Nova's `RequestGroup.add_resource`).
                let Ok(amount) = value.trim().parse::<i64>() else { continue };
                if amount < 0 {
                    continue;
                }
                *groups.entry(suffix.to_owned()).or_default().resources.entry(class.to_owned()).or_insert(0) += amount;
            }
            Some(GranularKey::Trait { suffix, name }) => {
                let group = groups.entry(suffix.to_owned()).or_default();
                match value.as_str() {
                    "required" => group.required.push(name.to_owned()),
                    "forbidden" => group.forbidden.push(name.to_owned()),
                    _ => {}
                }
            }
            None => {}
        }
    }
    let suffixed_from_flavor = groups.keys().filter(|s| !s.is_empty()).count();
    // 2. Image traits go to the unsuffixed group.
    let image_properties = spec.image.as_ref().map(|i| i.properties.clone()).unwrap_or_default();
    for name in image_required_traits(&image_properties) {
        groups.entry(String::new()).or_default().required.push(name);
    }
    // 3. CPU pinning: `hw:cpu_policy=dedicated` asks for PCPU instead of
    //    VCPU; the thread policy becomes the hyperthreading trait.
    let cpu_policy = flavor.extra_specs.get("hw:cpu_policy").or_else(|| image_properties.get("hw_cpu_policy"));
    if cpu_policy.map(String::as_str) == Some("dedicated") {
        let mut pcpus = flavor.vcpus;
        if flavor.extra_specs.get("hw:emulator_threads_policy").map(String::as_str) == Some("isolate") {
            pcpus += 1;
        }
        *groups.entry(String::new()).or_default().resources.entry("PCPU".to_owned()).or_insert(0) += pcpus;
        let thread =
            flavor.extra_specs.get("hw:cpu_thread_policy").or_else(|| image_properties.get("hw_cpu_thread_policy"));
        let group = groups.entry(String::new()).or_default();
        match thread.map(String::as_str) {
            Some("isolate") => group.forbidden.push("HW_CPU_HYPERTHREADING".to_owned()),
            Some("require") => group.required.push("HW_CPU_HYPERTHREADING".to_owned()),
            _ => {}
        }
    }
    // 4. The flavor's own amounts, unless extra specs already name them.
    let merged =
        |class: &str, groups: &BTreeMap<String, Group>| groups.values().any(|g| g.resources.contains_key(class));
    if !merged("VCPU", &groups) && !merged("PCPU", &groups) {
        groups.entry(String::new()).or_default().resources.insert("VCPU".to_owned(), flavor.vcpus);
    }
    if !merged("MEMORY_MB", &groups) {
        groups.entry(String::new()).or_default().resources.insert("MEMORY_MB".to_owned(), flavor.memory_mb);
    }
    if !merged("DISK_GB", &groups) {
        let disk = flavor.disk_gb();
        if disk != 0 {
            groups.entry(String::new()).or_default().resources.insert("DISK_GB".to_owned(), disk);
        }
    }
    // 5. Strip zero amounts and empty groups.
    for group in groups.values_mut() {
        group.resources.retain(|_, amount| *amount != 0);
    }
    groups.retain(|_, g| !(g.resources.is_empty() && g.required.is_empty() && g.forbidden.is_empty()));

    let mut request = Request { nested_aware: true, group_policy, ..Request::default() };
    let mut unsuffixed = RequestGroup::default();
    let mut suffixed = Vec::new();
    let mut required_traits = Vec::new();
    for (suffix, group) in groups {
        required_traits.extend(group.required.iter().cloned());
        let rg = RequestGroup {
            suffix: suffix.clone(),
            resources: group.resources.into_iter().collect(),
            required_traits: group.required.into_iter().map(|t| vec![t]).collect(),
            forbidden_traits: group.forbidden,
            ..RequestGroup::default()
        };
        if suffix.is_empty() {
            unsuffixed = rg;
        } else {
            suffixed.push(rg);
        }
    }
    // 6. Request filters.
    request.root_forbidden.push(COMPUTE_STATUS_DISABLED.to_owned());
    if config.query_placement_for_image_type_support {
        if let Some(format) = spec.image.as_ref().and_then(|i| i.disk_format.as_deref()) {
            request.root_required.push(format!("COMPUTE_IMAGE_TYPE_{}", format.to_ascii_uppercase()));
        }
    }
    if config.image_metadata_prefilter {
        const PREFIXES: &[(&str, &str)] = &[
            ("hw_cdrom_bus", "COMPUTE_STORAGE_BUS"),
            ("hw_disk_bus", "COMPUTE_STORAGE_BUS"),
            ("hw_video_model", "COMPUTE_GRAPHICS_MODEL"),
            ("hw_vif_model", "COMPUTE_NET_VIF_MODEL"),
            ("hw_architecture", "HW_ARCH"),
            ("hw_emulation_architecture", "COMPUTE_ARCH"),
            ("hw_viommu_model", "COMPUTE_VIOMMU"),
        ];
        for (key, prefix) in PREFIXES {
            if let Some(value) = image_properties.get(*key) {
                request.root_required.push(format!("{prefix}_{}", value.replace('-', "_").to_ascii_uppercase()));
            }
        }
    }
    let compute = &world.compute;
    // Availability zone -> member_of the aggregates defining it. The
    // default zone has no aggregate: then hosts of every zone-defining
    // aggregate are excluded (Nova leaves them in; an operator asking for
    // the default zone means "not in another zone").
    if let Some(az) = spec.availability_zone.as_deref().filter(|az| !az.is_empty()) {
        let in_zone: Vec<Uuid> =
            compute.aggregates.values().filter(|a| a.availability_zone() == Some(az)).map(|a| a.uuid).collect();
        if !in_zone.is_empty() {
            unsuffixed.member_of.push(in_zone);
        } else if az == config.default_availability_zone {
            unsuffixed
                .forbidden_aggregates
                .extend(compute.aggregates.values().filter(|a| a.availability_zone().is_some()).map(|a| a.uuid));
        } else {
            return Err(NoValidHost(format!("No hosts in availability zone {az}")));
        }
    }
    if config.limit_tenants_to_placement_aggregate {
        let tenant_aggregates: Vec<Uuid> = compute
            .aggregates
            .values()
            .filter(|a| a.metadata.iter().any(|(k, v)| k.starts_with("filter_tenant_id") && *v == spec.project_id))
            .map(|a| a.uuid)
            .collect();
        if !tenant_aggregates.is_empty() {
            unsuffixed.member_of.push(tenant_aggregates);
        } else if config.placement_aggregate_required_for_tenants {
            return Err(NoValidHost("No hosts available for tenant".to_owned()));
        }
    }
    if config.enable_isolated_aggregate_filtering {
        let isolated = compute.aggregates.values().filter(|a| {
            a.metadata.iter().any(|(k, v)| {
                v == "required" && k.strip_prefix("trait:").is_some_and(|t| !required_traits.iter().any(|r| r == t))
            })
        });
        unsuffixed.forbidden_aggregates.extend(isolated.map(|a| a.uuid));
    }
    // Forced host/node -> in_tree of its node.
    let mut limit = Some(config.max_placement_results);
    if spec.force_host.is_some() || spec.force_node.is_some() {
        let nodes: Vec<Uuid> = compute
            .compute_nodes
            .values()
            .filter(|n| {
                spec.force_host.as_ref().is_none_or(|h| &n.host == h)
                    && spec.force_node.as_ref().is_none_or(|x| &n.node == x)
            })
            .map(|n| n.uuid)
            .collect();
        match nodes.as_slice() {
            [] => {
                return Err(NoValidHost(format!(
                    "No such host - host: {} node: {} ",
                    spec.force_host.as_deref().unwrap_or("None"),
                    spec.force_node.as_deref().unwrap_or("None")
                )))
            }
            [one] => unsuffixed.in_tree = Some(*one),
            _ => limit = None,
        }
    }
    if spec.group.is_some() || !spec.same_host.is_empty() || !spec.different_host.is_empty() {
        limit = None;
    }
    if suffixed.len() >= 2 && request.group_policy.is_none() && suffixed_from_flavor <= 1 {
        request.group_policy = Some(GroupPolicy::None);
    }
    let has_unsuffixed = !(unsuffixed.resources.is_empty()
        && unsuffixed.required_traits.is_empty()
        && unsuffixed.forbidden_traits.is_empty()
        && unsuffixed.member_of.is_empty()
        && unsuffixed.forbidden_aggregates.is_empty()
        && unsuffixed.in_tree.is_none());
    if has_unsuffixed {
        request.groups.push(unsuffixed);
    }
    request.groups.extend(suffixed);
    request.limit = limit;
    Ok(PlacementQuery { request, required_traits })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_compute_model::{Flavor, ImageRef};

    use super::*;

    fn spec(extra: &[(&str, &str)]) -> RequestSpec {
        RequestSpec {
            key_data: None,
            move_token: None,
            instance_uuid: Uuid::nil(),
            project_id: "p".into(),
            user_id: "u".into(),
            flavor: Flavor {
                id: 1,
                flavorid: "1".into(),
                name: "f".into(),
                memory_mb: 2048,
                vcpus: 2,
                root_gb: 10,
                ephemeral_gb: 5,
                swap: 1536,
                rxtx_factor: 1.0,
                vcpu_weight: None,
                disabled: false,
                is_public: true,
                description: None,
                extra_specs: extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                projects: Default::default(),
                created_at: 0,
                updated_at: None,
            },
            image: None,
            num_instances: 1,
            availability_zone: None,
            force_host: None,
            force_node: None,
            group: None,
            same_host: vec![],
            different_host: vec![],
            hints: BTreeMap::new(),
            reservation_id: "r".into(),
            retry: Default::default(),
        }
    }

    fn resources(query: &PlacementQuery, suffix: &str) -> Vec<(String, i64)> {
        query.request.groups.iter().find(|g| g.suffix == suffix).map(|g| g.resources.clone()).unwrap_or_default()
    }

    #[test]
    fn flavor_amounts_with_disk_from_root_ephemeral_and_swap() {
        let world = World::default();
        let q = placement_query(&world, &spec(&[]), &Config::default()).expect("query");
        assert_eq!(
            resources(&q, ""),
            vec![("DISK_GB".to_owned(), 17), ("MEMORY_MB".to_owned(), 2048), ("VCPU".to_owned(), 2)]
        );
        assert_eq!(q.request.root_forbidden, vec![COMPUTE_STATUS_DISABLED.to_owned()]);
        assert_eq!(q.request.limit, Some(1000));
    }

    #[test]
    fn extra_specs_override_and_granular_groups() {
        let world = World::default();
        let s = spec(&[
            ("resources:VCPU", "0"),
            ("resources:PCPU", "2"),
            ("resources1:VGPU", "1"),
            ("trait1:CUSTOM_GPU", "required"),
            ("trait:HW_CPU_X86_AVX2", "forbidden"),
            ("group_policy", "isolate"),
        ]);
        let q = placement_query(&world, &s, &Config::default()).expect("query");
        assert_eq!(
            resources(&q, ""),
            vec![("DISK_GB".to_owned(), 17), ("MEMORY_MB".to_owned(), 2048), ("PCPU".to_owned(), 2)],
            "VCPU:0 is dropped and PCPU replaces it"
        );
        assert_eq!(resources(&q, "1"), vec![("VGPU".to_owned(), 1)]);
        assert_eq!(q.request.group_policy, Some(GroupPolicy::Isolate));
        let g1 = q.request.groups.iter().find(|g| g.suffix == "1").expect("group 1");
        assert_eq!(g1.required_traits, vec![vec!["CUSTOM_GPU".to_owned()]]);
        let g0 = q.request.groups.iter().find(|g| g.suffix.is_empty()).expect("group");
        assert_eq!(g0.forbidden_traits, vec!["HW_CPU_X86_AVX2".to_owned()]);
    }

    #[test]
    fn a_negative_or_bad_resource_amount_is_ignored_and_the_flavor_amount_applies() {
        let world = World::default();
        for (key, value) in [("resources:VCPU", "-1"), ("resources:VCPU", "many"), ("resources1:VGPU", "-2")] {
            let q = placement_query(&world, &spec(&[(key, value)]), &Config::default()).expect("query");
            assert_eq!(
                resources(&q, ""),
                vec![("DISK_GB".to_owned(), 17), ("MEMORY_MB".to_owned(), 2048), ("VCPU".to_owned(), 2)],
                "{key}={value}"
            );
            assert_eq!(resources(&q, "1"), vec![], "{key}={value}");
        }
    }

    #[test]
    fn cpu_policy_dedicated_becomes_pcpu() {
        let world = World::default();
        let q = placement_query(&world, &spec(&[("hw:cpu_policy", "dedicated")]), &Config::default()).expect("query");
        assert_eq!(
            resources(&q, ""),
            vec![("DISK_GB".to_owned(), 17), ("MEMORY_MB".to_owned(), 2048), ("PCPU".to_owned(), 2)]
        );
    }

    #[test]
    fn image_traits_and_type() {
        let world = World::default();
        let mut s = spec(&[]);
        s.image = Some(ImageRef {
            id: Uuid::nil(),
            disk_format: Some("qcow2".into()),
            properties: [("trait:HW_CPU_X86_AVX2".to_owned(), "required".to_owned())].into(),
        });
        let config = Config { query_placement_for_image_type_support: true, ..Config::default() };
        let q = placement_query(&world, &s, &config).expect("query");
        assert_eq!(q.request.groups[0].required_traits, vec![vec!["HW_CPU_X86_AVX2".to_owned()]]);
        assert!(q.request.root_required.contains(&"COMPUTE_IMAGE_TYPE_QCOW2".to_owned()));
    }

    #[test]
    fn group_hints_lift_the_limit_and_unknown_az_fails() {
        let world = World::default();
        let mut s = spec(&[]);
        s.group = Some(Uuid::nil());
        assert_eq!(placement_query(&world, &s, &Config::default()).expect("q").request.limit, None);
        s.availability_zone = Some("nowhere".into());
        assert!(placement_query(&world, &s, &Config::default()).is_err());
    }
}
