//! Pull-mode scheduling's queue key: which work queue a boot goes to.
//!
//! A queue is a set of boots any host that can take one of them can
//! usually take any other: the key is a pure function of what the
//! scheduler's placement query and static filters read from a request
//! spec:
//!
//! - the flavor's resources (`vcpus`, `memory_mb`, `root_gb`,
//!   `ephemeral_gb`, `swap`) and every extra spec (`resources:*`,
//!   `trait:*` required and forbidden, `hw:*`, `aggregate_instance_extra_specs:*`,
//!   the reservation flavor's spec);
//! - the image's `trait:*` properties and its disk format (the image type
//!   prefilter);
//! - the requested availability zone (AZ pre-filter) and the
//!   `reservation` scheduler hint.
//!
//! Not in the key: the project (tenant isolation's aggregates are checked
//! by the claim), the image id and its other properties, and every other
//! hint. The key only routes: the claim re-runs the scheduler's filters
//! for the claiming host, so a boot in a queue its host cannot take is
//! refused (the agent naks), never placed wrongly.
//!
//! The key is `{flavor}-{hash}`: the flavor id made subject-safe
//! (`[A-Za-z0-9_-]`, at most 32 characters) and 16 hex digits of an
//! FNV-1a hash of the canonical text of everything above. Two specs with
//! the same key share a queue; the flavor part keeps keys readable.
//!
//! What pull cannot express ([`pull_routable`]): affinity and the soft
//! group policies, forced hosts and `same_host`/`different_host` hints go
//! through the push scheduler; hard anti-affinity and multi-create (as a
//! gang) have pull-mode rules.

use crate::{GroupPolicy, RequestSpec};

/// The queue key of `spec` (see the module doc).
pub fn queue_key(spec: &RequestSpec) -> String {
    let flavor = &spec.flavor;
    let mut canonical = format!(
        "v1|vcpus={}|ram={}|root={}|eph={}|swap={}",
        flavor.vcpus, flavor.memory_mb, flavor.root_gb, flavor.ephemeral_gb, flavor.swap
    );
    for (key, value) in &flavor.extra_specs {
        canonical.push_str(&format!("|spec:{key}={value}"));
    }
    if let Some(image) = &spec.image {
        if let Some(format) = &image.disk_format {
            canonical.push_str(&format!("|disk_format={format}"));
        }
        for (key, value) in image.properties.iter().filter(|(k, _)| k.starts_with("trait:")) {
            canonical.push_str(&format!("|image:{key}={value}"));
        }
    }
    if let Some(zone) = &spec.availability_zone {
        canonical.push_str(&format!("|az={zone}"));
    }
    if let Some(reservations) = spec.hints.get("reservation") {
        canonical.push_str(&format!("|reservation={}", reservations.join(",")));
    }
    let hash =
        canonical.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut name: String = flavor
        .flavorid
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(32)
        .collect();
    if name.is_empty() {
        name.push('_');
    }
    format!("{name}-{hash:016x}")
}

/// Can this boot be delivered through a pull queue? `instances` is the
/// number of servers of the request still to place; `group` the policy of
/// its server group, if it has one. `Err` names why not (the boot then
/// goes through the push scheduler, counted by that name).
///
/// Pull-mode rules (docs/pull-vs-push.md):
/// - a hard anti-affinity member rides the queue of its flavor like any
///   boot: the claim re-runs the group filter for the claiming host and
///   `plan_claim` checks the policy again in its write, so an agent whose
///   hosts hold a member is refused and naks;
/// - a multi-create is one message (a gang): the agent that takes it
///   claims every instance on its own hosts in one planned write, all or
///   nothing, or naks it for another agent;
/// - affinity (every member on the one host the first landed on) and the
///   soft policies (weighers), a group with a multi-create, forced hosts
///   and `same_host`/`different_host` go through push.
pub fn pull_routable(spec: &RequestSpec, instances: usize, group: Option<&GroupPolicy>) -> Result<(), &'static str> {
    if spec.group.is_some() {
        match group {
            Some(GroupPolicy::AntiAffinity) if instances <= 1 && spec.num_instances <= 1 => {}
            Some(GroupPolicy::AntiAffinity) => return Err("server_group_multi_create"),
            Some(GroupPolicy::Affinity) => return Err("affinity"),
            Some(GroupPolicy::SoftAffinity | GroupPolicy::SoftAntiAffinity) => return Err("soft_policy"),
            // The group went away meanwhile: the claim answers for it.
            None => return Err("server_group"),
        }
    }
    if spec.force_host.is_some() || spec.force_node.is_some() {
        return Err("forced_host");
    }
    if !spec.same_host.is_empty() || !spec.different_host.is_empty() {
        return Err("host_hints");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Flavor, ImageRef};
    use std::collections::{BTreeMap, BTreeSet};
    use uuid::Uuid;

    fn spec(flavorid: &str, vcpus: i64) -> RequestSpec {
        RequestSpec {
            key_data: None,
            move_token: None,
            instance_uuid: Uuid::new_v4(),
            project_id: "p".into(),
            user_id: "u".into(),
            flavor: Flavor {
                id: 1,
                flavorid: flavorid.into(),
                name: flavorid.into(),
                memory_mb: 1024,
                vcpus,
                root_gb: 10,
                ephemeral_gb: 0,
                swap: 0,
                rxtx_factor: 1.0,
                vcpu_weight: None,
                disabled: false,
                is_public: true,
                description: None,
                extra_specs: BTreeMap::new(),
                projects: BTreeSet::new(),
                created_at: 0,
                updated_at: None,
            },
            image: None,
            num_instances: 1,
            availability_zone: None,
            force_host: None,
            force_node: None,
            group: None,
            same_host: Vec::new(),
            different_host: Vec::new(),
            hints: BTreeMap::new(),
            reservation_id: "r-1".into(),
            retry: Default::default(),
        }
    }

    #[test]
    fn same_shape_same_queue_other_shape_other_queue() {
        let a = spec("m1.small", 1);
        let mut b = spec("m1.small", 1);
        // Instance, project and reservation id do not route.
        b.project_id = "other".into();
        b.reservation_id = "r-2".into();
        assert_eq!(queue_key(&a), queue_key(&b));
        assert!(queue_key(&a).starts_with("m1_small-"), "{}", queue_key(&a));
        assert_ne!(queue_key(&a), queue_key(&spec("m1.small", 2)), "resources route");
        let mut traited = spec("m1.small", 1);
        traited.flavor.extra_specs.insert("trait:CUSTOM_GPU".into(), "required".into());
        assert_ne!(queue_key(&a), queue_key(&traited), "traits route");
        let mut forbidden = spec("m1.small", 1);
        forbidden.flavor.extra_specs.insert("trait:CUSTOM_GPU".into(), "forbidden".into());
        assert_ne!(queue_key(&traited), queue_key(&forbidden), "required and forbidden differ");
        let mut zoned = spec("m1.small", 1);
        zoned.availability_zone = Some("az1".into());
        assert_ne!(queue_key(&a), queue_key(&zoned), "zones route");
        let mut reserved = spec("m1.small", 1);
        reserved.hints.insert("reservation".into(), vec![Uuid::nil().to_string()]);
        assert_ne!(queue_key(&a), queue_key(&reserved), "reservations route");
        let mut imaged = spec("m1.small", 1);
        imaged.image = Some(ImageRef {
            id: Uuid::new_v4(),
            disk_format: None,
            properties: [("hw_foo".to_owned(), "x".to_owned())].into(),
        });
        assert_eq!(queue_key(&a), queue_key(&imaged), "non-trait image properties do not route");
    }

    #[test]
    fn keys_are_subject_tokens() {
        for id in ["a.b*c>d e", "", "ünï", &"x".repeat(80)] {
            let key = queue_key(&spec(id, 1));
            assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{key}");
            assert!(key.len() <= 32 + 17, "{key}");
        }
    }

    #[test]
    fn what_pull_cannot_express_is_routed_to_push() {
        assert_eq!(pull_routable(&spec("f", 1), 1, None), Ok(()));
        let mut gang = spec("f", 1);
        gang.num_instances = 5;
        assert_eq!(pull_routable(&gang, 5, None), Ok(()), "a multi-create is a gang");
        let mut grouped = spec("f", 1);
        grouped.group = Some(Uuid::new_v4());
        assert_eq!(pull_routable(&grouped, 1, Some(&GroupPolicy::AntiAffinity)), Ok(()));
        assert_eq!(pull_routable(&grouped, 1, Some(&GroupPolicy::Affinity)), Err("affinity"));
        assert_eq!(pull_routable(&grouped, 1, Some(&GroupPolicy::SoftAntiAffinity)), Err("soft_policy"));
        assert_eq!(pull_routable(&grouped, 1, Some(&GroupPolicy::SoftAffinity)), Err("soft_policy"));
        assert_eq!(pull_routable(&grouped, 1, None), Err("server_group"));
        assert_eq!(
            pull_routable(&grouped, 3, Some(&GroupPolicy::AntiAffinity)),
            Err("server_group_multi_create"),
            "a gang of one group is placed by push"
        );
        let mut forced = spec("f", 1);
        forced.force_host = Some("h".into());
        assert_eq!(pull_routable(&forced, 1, None), Err("forced_host"));
        let mut hinted = spec("f", 1);
        hinted.different_host = vec![Uuid::new_v4()];
        assert_eq!(pull_routable(&hinted, 1, None), Err("host_hints"));
    }
}
