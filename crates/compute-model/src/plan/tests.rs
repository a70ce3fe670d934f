//! Tests of the control plans (and of the heal's, which share their
//! fixtures); `world_with_hosts`, `admit` and `choice` are used by other
//! modules' tests too.

use std::collections::BTreeMap;

use berth_model::allocations::{plan_replace_allocations, ConsumerAllocations, ConsumerGeneration};
use berth_model::{AllocationMap, Change, ChangeSet, Inventory, ProviderRow};
use uuid::Uuid;

use super::*;
use crate::choice::HostChoice;
use crate::world::tests::flavor;
use crate::{
    BuildRetry, CellMapping, ComputeChange, ComputeError, ComputeNodeRef, GroupPolicy, HostMapping, InstanceSpec,
    RequestSpec, ServerGroup, World, WorldChangeSet, CONSUMER_TYPE_INSTANCE,
};

fn spec(name: &str) -> InstanceSpec {
    InstanceSpec {
        display_name: name.into(),
        display_description: None,
        hostname: name.into(),
        image_ref: None,
        image_properties: BTreeMap::new(),
        flavor: flavor(1, 512),
        metadata: BTreeMap::new(),
        key_name: None,
        key_data: None,
        availability_zone: None,
        reservation_id: "r-1".into(),
        launch_index: 0,
        config_drive: String::new(),
        user_data: None,
        access_ip_v4: None,
        access_ip_v6: None,
        tags: vec![],
        scheduler_hints: BTreeMap::new(),
        auto_disk_config: false,
        security_groups: Vec::new(),
        rescue_image: None,
        nics: 0,
    }
}

fn request_spec(group: Option<Uuid>) -> RequestSpec {
    RequestSpec {
        key_data: None,
        move_token: None,
        instance_uuid: Uuid::nil(),
        project_id: "p".into(),
        user_id: "u".into(),
        flavor: flavor(1, 512),
        image: None,
        num_instances: 1,
        availability_zone: None,
        force_host: None,
        force_node: None,
        group,
        same_host: vec![],
        different_host: vec![],
        hints: BTreeMap::new(),
        reservation_id: "r-1".into(),
        retry: BuildRetry::default(),
    }
}

/// A world with one cell and `hosts` compute nodes of 4 VCPU each.
pub(crate) fn world_with_hosts(hosts: usize) -> (World, Vec<Uuid>) {
    let mut world = World::with_standard_data(0);
    let cell = Uuid::new_v4();
    let mut set = WorldChangeSet::new();
    set.compute(ComputeChange::PutCell(CellMapping {
        uuid: cell,
        name: "cell1".into(),
        database_connection: "sqlite://x".into(),
        disabled: false,
    }));
    let mut roots = Vec::new();
    for i in 0..hosts {
        let uuid = Uuid::new_v4();
        roots.push(uuid);
        let mut placement = ChangeSet::new();
        placement.push(Change::PutProvider {
            row: ProviderRow {
                id: i as i64 + 1,
                uuid,
                name: format!("h{i}"),
                generation: 0,
                parent: None,
                root: uuid,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        let inv = Inventory { total: 4, reserved: 0, min_unit: 1, max_unit: 4, step_size: 1, allocation_ratio: 1.0 };
        placement.push(Change::SetInventories { provider: uuid, inventories: [("VCPU".to_owned(), inv)].into() });
        set.placement(placement);
        set.compute(ComputeChange::PutHostMapping(HostMapping { host: format!("h{i}"), cell, owner: None }));
        set.compute(ComputeChange::PutComputeNode(ComputeNodeRef {
            uuid,
            host: format!("h{i}"),
            node: format!("h{i}"),
            cell,
        }));
    }
    world.apply(&set);
    (world, roots)
}

pub(crate) fn admit(world: &mut World, n: usize, group: Option<Uuid>) -> Vec<Uuid> {
    let boot = BootAdmission {
        project_id: "p".into(),
        user_id: "u".into(),
        instances: (0..n).map(|i| (Uuid::new_v4(), spec(&format!("vm{i}")))).collect(),
        min_count: n as i64,
        request_spec: request_spec(group),
        now: 1,
    };
    let (set, admitted) = plan_admit_boot(world, &boot).expect("admitted");
    world.apply(&set);
    admitted
}

pub(crate) fn choice(root: Uuid, vcpus: i64) -> HostChoice {
    let mut allocations = AllocationMap::new();
    allocations.entry(root).or_default().insert("VCPU".into(), vcpus);
    HostChoice { root, allocations }
}

#[test]
fn quota_admission_lowers_to_headroom_and_refuses_below_min() {
    let (mut world, _) = world_with_hosts(1);
    let mut limits = BTreeMap::new();
    limits.insert("instances".to_owned(), 3);
    world.apply(&plan_set_quotas(&world, "p", None, &limits, false).expect("quota"));
    admit(&mut world, 2, None);
    let boot = BootAdmission {
        project_id: "p".into(),
        user_id: "u".into(),
        instances: (0..5).map(|i| (Uuid::new_v4(), spec(&format!("m{i}")))).collect(),
        min_count: 1,
        request_spec: request_spec(None),
        now: 1,
    };
    let (_, admitted) = plan_admit_boot(&world, &boot).expect("lowered");
    assert_eq!(admitted.len(), 1, "max_count lowered to the headroom");
    let strict = BootAdmission { min_count: 2, ..boot };
    let err = plan_admit_boot(&world, &strict).unwrap_err();
    assert_eq!(
        err,
        ComputeError::OverQuota(
            "Quota exceeded for instances: Requested 2-5, but already used 2 of 3 instances".into()
        )
    );
}

#[test]
fn claim_tries_alternates_and_is_all_or_nothing() {
    let (mut world, roots) = world_with_hosts(2);
    let instances = admit(&mut world, 2, None);
    // Both want 3 of 4 VCPU on host 0 first; the second must fall back.
    let claims: Vec<InstanceChoices> = instances
        .iter()
        .map(|i| InstanceChoices { instance: *i, choices: vec![choice(roots[0], 3), choice(roots[1], 3)] })
        .collect();
    let (set, claimed) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
    assert_eq!(claimed.placed[0].1.uuid, roots[0]);
    assert_eq!(claimed.placed[1].1.uuid, roots[1]);
    world.apply(&set);
    assert!(world.compute.build_requests.is_empty());
    assert!(world.compute.instance_mappings.values().all(|m| m.cell.is_some()));

    // No room for two more 3-VCPU instances: nothing is claimed.
    let more = admit(&mut world, 2, None);
    let claims: Vec<InstanceChoices> = more
        .iter()
        .map(|i| InstanceChoices { instance: *i, choices: vec![choice(roots[0], 1), choice(roots[1], 3)] })
        .collect();
    assert_eq!(plan_claim(&world, &claims, 3, None).expect("plan"), Err(ClaimFailure::NoRoom(more[1])));
}

/// Instances' VCPU per root provider.
fn vcpus_on(world: &World, instance: &Uuid) -> Vec<(Uuid, i64)> {
    let Some(consumer) = world.placement.consumers.get(instance) else { return Vec::new() };
    consumer.allocations.iter().map(|(p, a)| (*p, a.get("VCPU").copied().unwrap_or(0))).collect()
}

/// One instance claimed on host 0 with hosts 1 and 2 as alternates.
fn claimed_with_alternates(world: &mut World, roots: &[Uuid]) -> Uuid {
    let instance = admit(world, 1, None)[0];
    let claims = vec![InstanceChoices {
        instance,
        choices: vec![choice(roots[0], 2), choice(roots[1], 2), choice(roots[2], 2)],
    }];
    let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
    world.apply(&set);
    instance
}

#[test]
fn claim_keeps_the_alternates_and_reschedule_consumes_them() {
    let (mut world, roots) = world_with_hosts(3);
    let instance = claimed_with_alternates(&mut world, &roots);
    let retry = &world.compute.request_specs[&instance].retry;
    assert_eq!(retry.num_attempts, 1);
    assert_eq!(retry.alternates, vec![choice(roots[1], 2), choice(roots[2], 2)]);

    // Failed on h0: one write replaces the allocation by host 1's.
    let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
    assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[1]].clone(), attempt: 2 });
    world.apply(&set);
    assert_eq!(vcpus_on(&world, &instance), vec![(roots[1], 2)], "never on both hosts");
    let retry = &world.compute.request_specs[&instance].retry;
    assert_eq!((retry.num_attempts, retry.failed_hosts.clone()), (2, vec!["h0".to_owned()]));
    assert_eq!(retry.alternates, vec![choice(roots[2], 2)]);

    // The same report again: nothing written, the same answer.
    let (again, decided) = plan_reschedule(&world, &instance, "h0", 3, 4).expect("plan");
    assert!(again.is_empty());
    assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[1]].clone(), attempt: 2 });

    // Failed on h1 too: host 2, the last attempt.
    let (set, decided) = plan_reschedule(&world, &instance, "h1", 3, 5).expect("plan");
    assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[2]].clone(), attempt: 3 });
    world.apply(&set);
    // And on h2: max_attempts reached, no allocation left.
    let (set, decided) = plan_reschedule(&world, &instance, "h2", 3, 6).expect("plan");
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
    world.apply(&set);
    assert!(!world.placement.consumers.contains_key(&instance));
    assert!(world.compute.request_specs[&instance].retry.alternates.is_empty());
    let (again, decided) = plan_reschedule(&world, &instance, "h2", 3, 7).expect("plan");
    assert!(again.is_empty());
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
}

#[test]
fn reschedule_skips_an_alternate_taken_meanwhile() {
    let (mut world, roots) = world_with_hosts(3);
    let instance = claimed_with_alternates(&mut world, &roots);
    // Someone else takes 3 of host 1's 4 VCPU.
    let other = admit(&mut world, 1, None)[0];
    let claims = vec![InstanceChoices { instance: other, choices: vec![choice(roots[1], 3)] }];
    let (set, _) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
    world.apply(&set);
    let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
    assert_eq!(decided, Rescheduled::Build { node: world.compute.compute_nodes[&roots[2]].clone(), attempt: 2 });
    world.apply(&set);
    assert_eq!(vcpus_on(&world, &instance), vec![(roots[2], 2)]);
    assert!(world.compute.request_specs[&instance].retry.alternates.is_empty(), "host 1 was skipped for good");

    // Host 2 fails too and nothing is left: the allocations go.
    let (set, decided) = plan_reschedule(&world, &instance, "h2", 3, 4).expect("plan");
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::NoHostsLeft));
    world.apply(&set);
    assert!(!world.placement.consumers.contains_key(&instance));
    assert!(Exhausted::NoHostsLeft
        .message(&instance, "boom")
        .starts_with("Exceeded maximum number of retries. Exhausted all hosts available"));
}

/// One instance claimed on host 0 alone (a pull claim: no alternates).
fn claimed_alone(world: &mut World, root: Uuid) -> Uuid {
    let instance = admit(world, 1, None)[0];
    let claims = vec![InstanceChoices { instance, choices: vec![choice(root, 2)] }];
    let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
    world.apply(&set);
    instance
}

fn claim_requeued(world: &World, instance: Uuid, root: Uuid) -> (WorldChangeSet, RequeueClaim) {
    plan_claim_requeued(world, &InstanceChoices { instance, choices: vec![choice(root, 2)] }, 5, None).expect("plan")
}

#[test]
fn requeue_releases_counts_and_a_claim_on_another_host_takes_it_once() {
    let (mut world, roots) = world_with_hosts(3);
    let instance = claimed_alone(&mut world, roots[0]);
    let nodes: Vec<ComputeNodeRef> = roots.iter().map(|r| world.compute.compute_nodes[r].clone()).collect();
    let node = |i: usize| nodes[i].clone();

    // Failed on h0: allocations released, attempt 2 waiting.
    let (set, decided) = plan_requeue(&world, &instance, "h0", 3, 3).expect("plan");
    assert_eq!(decided, Rescheduled::Requeued { attempt: 2, since: 3 });
    world.apply(&set);
    assert!(vcpus_on(&world, &instance).is_empty(), "no allocations while queued");
    assert_eq!(world.compute.counted("p", None).cores, 1, "counted as pending (its flavor) for quota");
    let retry = &world.compute.request_specs[&instance].retry;
    assert_eq!((retry.num_attempts, retry.failed_hosts.clone(), retry.requeued_at), (2, vec!["h0".into()], Some(3)));
    // The same report again: nothing written, still waiting.
    let (again, decided) = plan_requeue(&world, &instance, "h0", 3, 4).expect("plan");
    assert!(again.is_empty());
    assert_eq!(decided, Rescheduled::Requeued { attempt: 2, since: 3 });

    // The failed host may not take it back; another host does, once.
    let (set, claimed) = claim_requeued(&world, instance, roots[0]);
    assert_eq!((set.is_empty(), claimed), (true, RequeueClaim::NoRoom));
    let (set, claimed) = claim_requeued(&world, instance, roots[1]);
    assert_eq!(claimed, RequeueClaim::Placed(node(1)));
    world.apply(&set);
    assert_eq!(vcpus_on(&world, &instance), vec![(roots[1], 2)]);
    assert_eq!(world.compute.request_specs[&instance].retry.requeued_at, None);
    assert_eq!(world.compute.counted("p", None).cores, 2, "counted by its allocations only");
    let (set, claimed) = claim_requeued(&world, instance, roots[2]);
    assert_eq!((set.is_empty(), claimed), (true, RequeueClaim::Gone), "a racing agent gets gone");
    // A re-drive of the first failure (a crash before the row moved)
    // answers the build on the new host.
    let (again, decided) = plan_requeue(&world, &instance, "h0", 3, 6).expect("plan");
    assert!(again.is_empty());
    assert_eq!(decided, Rescheduled::Build { node: node(1), attempt: 2 });

    // Fails on h1 (attempt 3), then on h2: max_attempts, nothing held.
    let (set, decided) = plan_requeue(&world, &instance, "h1", 3, 7).expect("plan");
    assert_eq!(decided, Rescheduled::Requeued { attempt: 3, since: 7 });
    world.apply(&set);
    let (set, _) = claim_requeued(&world, instance, roots[2]);
    world.apply(&set);
    let (set, decided) = plan_requeue(&world, &instance, "h2", 3, 8).expect("plan");
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
    world.apply(&set);
    assert!(vcpus_on(&world, &instance).is_empty());
    let retry = &world.compute.request_specs[&instance].retry;
    assert_eq!((retry.num_attempts, retry.failed_hosts.len(), retry.requeued_at), (3, 3, None));
    let (again, decided) = plan_requeue(&world, &instance, "h2", 3, 9).expect("plan");
    assert!(again.is_empty());
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::MaxAttempts { max_attempts: 3 }));
}

#[test]
fn an_expired_requeue_is_claimed_by_nobody_and_a_deleted_one_is_gone() {
    let (mut world, roots) = world_with_hosts(2);
    let instance = claimed_alone(&mut world, roots[0]);
    let (set, _) = plan_requeue(&world, &instance, "h0", 3, 3).expect("plan");
    world.apply(&set);
    assert!(!plan_expire_requeued(&world, &instance, 2).1, "another requeue's timeout");
    let (set, expired) = plan_expire_requeued(&world, &instance, 3);
    assert!(expired);
    world.apply(&set);
    assert!(!plan_expire_requeued(&world, &instance, 3).1, "once");
    assert_eq!(world.compute.counted("p", None), Default::default(), "given up: nothing counted");
    assert_eq!(claim_requeued(&world, instance, roots[1]).1, RequeueClaim::Gone);
    let (set, decided) = plan_requeue(&world, &instance, "h0", 3, 4).expect("plan");
    assert!(set.is_empty());
    assert_eq!(decided, Rescheduled::Exhausted(Exhausted::NoHostsLeft));

    let other = claimed_alone(&mut world, roots[0]);
    let (set, _) = plan_requeue(&world, &other, "h0", 3, 3).expect("plan");
    world.apply(&set);
    world.apply(&plan_forget_instance(&world, &other));
    assert_eq!(claim_requeued(&world, other, roots[1]).1, RequeueClaim::Gone);
    assert_eq!(world.compute.counted("p", None), Default::default(), "forgotten: nothing counted");
}

#[test]
fn reschedule_of_a_deleted_instance_does_nothing() {
    let (mut world, roots) = world_with_hosts(3);
    let instance = claimed_with_alternates(&mut world, &roots);
    world.apply(&plan_forget_instance(&world, &instance));
    let (set, decided) = plan_reschedule(&world, &instance, "h0", 3, 3).expect("plan");
    assert!(set.is_empty());
    assert_eq!(decided, Rescheduled::Gone);
}

#[test]
fn claim_keeps_hard_anti_affinity() {
    let (mut world, roots) = world_with_hosts(2);
    let group = ServerGroup {
        uuid: Uuid::new_v4(),
        name: "g".into(),
        project_id: "p".into(),
        user_id: "u".into(),
        policy: GroupPolicy::AntiAffinity,
        max_server_per_host: None,
        members: vec![],
        created_at: 0,
    };
    world.apply(&plan_create_server_group(&world, group.clone()).expect("group"));
    let first = admit(&mut world, 1, Some(group.uuid));
    let second = admit(&mut world, 1, Some(group.uuid));
    let claim = |instance: Uuid| vec![InstanceChoices { instance, choices: vec![choice(roots[0], 1)] }];
    let (set, _) = plan_claim(&world, &claim(first[0]), 2, None).expect("plan").expect("fits");
    world.apply(&set);
    // The second was scheduled concurrently onto the same host: refused.
    assert_eq!(plan_claim(&world, &claim(second[0]), 2, None).expect("plan"), Err(ClaimFailure::NoRoom(second[0])));
    let alternate =
        vec![InstanceChoices { instance: second[0], choices: vec![choice(roots[0], 1), choice(roots[1], 1)] }];
    let (_, claimed) = plan_claim(&world, &alternate, 2, None).expect("plan").expect("fits");
    assert_eq!(claimed.placed[0].1.uuid, roots[1]);
}

#[test]
fn delete_pending_and_forget() {
    let (mut world, roots) = world_with_hosts(1);
    let instances = admit(&mut world, 2, None);
    let (set, deleted) = plan_delete_build_request(&world, &instances[0]);
    assert!(deleted);
    world.apply(&set);
    assert_eq!(world.compute.instance_count("p", None), 1);
    let claims = vec![InstanceChoices { instance: instances[1], choices: vec![choice(roots[0], 1)] }];
    let (set, _) = plan_claim(&world, &claims, 2, None).expect("plan").expect("fits");
    world.apply(&set);
    assert!(!plan_delete_build_request(&world, &instances[1]).1, "scheduled: delete goes to the cell");
    world.apply(&plan_forget_instance(&world, &instances[1]));
    assert!(world.placement.consumers.is_empty());
    assert!(world.compute.instance_mappings.is_empty());
    assert_eq!(world.compute.counted("p", None), Default::default());
}

#[test]
fn a_deleted_report_forgets_only_an_instance_queued_for_delete() {
    let (mut world, roots) = world_with_hosts(1);
    let instance = claimed_instance(&mut world, roots[0], 1);
    let migration = Uuid::new_v4();
    put_consumer(&mut world, migration, roots[0], Some("MIGRATION"), 10);
    let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
    assert!(!applies && set.is_empty(), "nobody deleted it: nothing changes");
    world.apply(&plan_queue_for_delete(&world, &instance));
    let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
    assert!(applies);
    world.apply(&set);
    assert!(world.placement.consumers.is_empty(), "instance and migration consumers gone");
    assert!(world.compute.instance_mappings.is_empty() && world.compute.request_specs.is_empty());
    let (set, applies) = plan_forget_deleted(&world, &instance, &[migration]);
    assert!(!applies && set.is_empty(), "a repeated report changes nothing");
}

// -- heal (crate::heal): the plans re-check what the scan saw ----------

fn claimed_instance(world: &mut World, root: Uuid, vcpus: i64) -> Uuid {
    let instance = admit(world, 1, None)[0];
    let claims = [InstanceChoices { instance, choices: vec![choice(root, vcpus)] }];
    let (set, _) = plan_claim(world, &claims, 2, None).expect("plan").expect("fits");
    world.apply(&set);
    instance
}

fn put_consumer(world: &mut World, consumer: Uuid, root: Uuid, consumer_type: Option<&str>, now: i64) {
    let mut allocations = AllocationMap::new();
    allocations.entry(root).or_default().insert("VCPU".into(), 1);
    let request = ConsumerAllocations {
        consumer,
        project_id: "p".into(),
        user_id: "u".into(),
        generation: ConsumerGeneration::New,
        consumer_type: consumer_type.map(str::to_owned),
        allocations,
    };
    let mut set = WorldChangeSet::new();
    set.placement(plan_replace_allocations(&world.placement, &[request], now).expect("fits"));
    world.apply(&set);
}

#[test]
fn heal_removes_an_orphan_only_when_still_orphaned_unchanged_and_old() {
    use crate::heal::{consumer_kind, plan_remove_orphan, ConsumerKind, Healed};
    let (mut world, roots) = world_with_hosts(1);
    let instance = claimed_instance(&mut world, roots[0], 1);
    let (orphan, migration, foreign) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    put_consumer(&mut world, orphan, roots[0], Some(CONSUMER_TYPE_INSTANCE), 10);
    put_consumer(&mut world, migration, roots[0], Some("MIGRATION"), 10);
    put_consumer(&mut world, foreign, roots[0], None, 10);
    assert_eq!(consumer_kind(&world, &instance), ConsumerKind::Known);
    assert_eq!(consumer_kind(&world, &orphan), ConsumerKind::OrphanInstance);
    assert_eq!(consumer_kind(&world, &migration), ConsumerKind::Migration);
    assert_eq!(consumer_kind(&world, &foreign), ConsumerKind::Foreign);
    let generation = world.placement.consumers[&orphan].row.generation;

    let (set, healed) = plan_remove_orphan(&world, &orphan, generation, 9);
    assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "inside the grace period");
    let (set, healed) = plan_remove_orphan(&world, &orphan, generation + 1, 20);
    assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "written since the scan");
    let (set, healed) = plan_remove_orphan(&world, &instance, 1, 20);
    assert!(set.is_empty() && matches!(healed, Healed::Skipped(_)), "a mapped instance is never an orphan");
    let (set, healed) = plan_remove_orphan(&world, &orphan, generation, 20);
    assert_eq!(healed, Healed::Done);
    world.apply(&set);
    assert!(!world.placement.consumers.contains_key(&orphan));
    assert!(world.placement.consumers.contains_key(&instance));
}

#[test]
fn heal_allocation_needs_the_mapping_no_allocations_and_room() {
    use crate::heal::{plan_heal_allocation, Healed};
    let (mut world, roots) = world_with_hosts(1);
    let instance = claimed_instance(&mut world, roots[0], 3);
    let cell = world.compute.instance_mappings[&instance].cell.expect("cell");
    let wanted = choice(roots[0], 3).allocations;
    let (_, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &wanted, 5);
    assert!(matches!(healed, Healed::Skipped(_)), "it has allocations");

    let generation = world.placement.consumers[&instance].row.generation;
    let mut gone = WorldChangeSet::new();
    gone.placement(ChangeSet {
        changes: vec![Change::DeleteConsumer { uuid: instance, expected_generation: generation }],
    });
    world.apply(&gone);
    let too_big = choice(roots[0], 5).allocations;
    let (set, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &too_big, 5);
    assert!(set.is_empty() && matches!(healed, Healed::Skipped(ref why) if why.starts_with("does not fit")));
    let (_, healed) = plan_heal_allocation(&world, &instance, &Uuid::new_v4(), &roots[0], &wanted, 5);
    assert!(matches!(healed, Healed::Skipped(_)), "mapped to another cell");

    let mut queued = world.clone();
    queued.apply(&plan_queue_for_delete(&queued, &instance));
    let (_, healed) = plan_heal_allocation(&queued, &instance, &cell, &roots[0], &wanted, 5);
    assert!(matches!(healed, Healed::Skipped(_)), "being deleted");

    let (set, healed) = plan_heal_allocation(&world, &instance, &cell, &roots[0], &wanted, 5);
    assert_eq!(healed, Healed::Done);
    world.apply(&set);
    let consumer = &world.placement.consumers[&instance];
    assert_eq!(consumer.allocations, wanted);
    assert_eq!(consumer.row.consumer_type.as_deref(), Some(CONSUMER_TYPE_INSTANCE));
    assert_eq!(world.compute.counted("p", None).cores, 3, "counted again for quota");
}

#[test]
fn an_agent_credential_binds_its_host_and_speaks_only_for_it() {
    let (mut world, _) = world_with_hosts(2);
    let cell = *world.compute.cells.keys().next().expect("cell");
    // A mapped host bound to a noauth2 identity moves to the credential;
    // each binding change gives the state a new owners epoch (the
    // agents' long poll remembers its check by it), and a clone keeps it.
    let epoch = world.compute.owners_epoch;
    assert_eq!(world.clone().compute.owners_epoch, epoch);
    world.apply(&plan_bind_hosts(&world, &["h0".into()], cell, "admin").expect("bind"));
    let bound = world.compute.owners_epoch;
    assert_ne!(bound, epoch);
    world.apply(&plan_issue_agent_credential(&world, "h0", "abcd", 7).expect("issue"));
    assert_ne!(world.compute.owners_epoch, bound);
    assert_ne!(World::default().compute.owners_epoch, world.compute.owners_epoch, "a fresh state, a fresh epoch");
    assert_eq!(world.compute.host_mappings["h0"].owner.as_deref(), Some("berth-agent:h0"));
    assert!(check_host_owner(&world, "admin", ["h0"]).is_err(), "the old identity lost the host");
    assert!(check_host_owner(&world, "berth-agent:h0", ["h0"]).is_ok());
    assert!(agent_credential_matches(&world, "h0", "abcd"));
    assert!(!agent_credential_matches(&world, "h0", "abce"));
    assert!(!agent_credential_matches(&world, "h1", "abcd"));
    // A credential never speaks for another host, bound or not.
    assert!(matches!(check_host_owner(&world, "berth-agent:h0", ["h1"]), Err(ComputeError::Forbidden(_))));
    assert!(plan_bind_hosts(&world, &["new".into()], cell, "berth-agent:h0").is_err());
    // A host not yet registered is bound to its credential already.
    world.apply(&plan_issue_agent_credential(&world, "later", "ffff", 8).expect("issue"));
    assert!(matches!(plan_bind_hosts(&world, &["later".into()], cell, "admin"), Err(ComputeError::Forbidden(_))));
    assert!(plan_bind_hosts(&world, &["later".into()], cell, "berth-agent:later").is_ok());
    // Bad host names are refused.
    for bad in ["", "a:b", "a b", &"x".repeat(256)] {
        assert!(matches!(plan_issue_agent_credential(&world, bad, "00", 1), Err(ComputeError::Invalid(_))), "{bad:?}");
    }
    // Revoking unbinds the host; anyone may register it again.
    world.apply(&plan_revoke_agent_credential(&world, "h0").expect("revoke"));
    assert_eq!(world.compute.host_mappings["h0"].owner, None);
    assert!(check_host_owner(&world, "admin", ["h0"]).is_ok());
    assert!(matches!(plan_revoke_agent_credential(&world, "h0"), Err(ComputeError::NotFound(_))));
}

fn queued_image(world: &mut World) -> Uuid {
    let id = Uuid::new_v4();
    let image = crate::Image {
        id,
        name: Some("i".into()),
        status: "queued".into(),
        visibility: "private".into(),
        protected: false,
        owner: Some("p".into()),
        disk_format: Some("raw".into()),
        container_format: Some("bare".into()),
        min_disk: 0,
        min_ram: 0,
        size: None,
        hashes: None,
        tags: Vec::new(),
        properties: BTreeMap::new(),
        members: BTreeMap::new(),
        created_at: 1,
        updated_at: 1,
    };
    world.apply(&plan_put_image(world, image).expect("put"));
    id
}

fn hashes() -> crate::ImageHashes {
    crate::ImageHashes { checksum: "c".into(), os_hash_algo: "sha512".into(), os_hash_value: "v".into() }
}

#[test]
fn an_upload_takes_a_queued_image_once_through_saving_to_active() {
    let mut world = World::with_standard_data(0);
    let id = queued_image(&mut world);
    world.apply(&plan_begin_image_upload(&world, &id, 5).expect("queued → saving"));
    assert_eq!(world.compute.images[&id].status, "saving");
    // The compare-and-set: a second upload finds `saving`.
    let second = plan_begin_image_upload(&world, &id, 6).expect_err("a second upload");
    assert_eq!(second, ComputeError::Conflict("Image status transition from saving to saving is not allowed".into()));
    world.apply(&plan_finish_image_upload(&world, &id, 3, hashes(), 7).expect("saving → active"));
    let image = &world.compute.images[&id];
    assert_eq!(
        (image.status.as_str(), image.size, image.hashes.clone(), image.updated_at),
        ("active", Some(3), Some(hashes()), 7)
    );
    let again = plan_begin_image_upload(&world, &id, 8).expect_err("an active image");
    assert_eq!(again, ComputeError::Conflict("Image status transition from active to saving is not allowed".into()));
    // An abort touches only a `saving` image.
    assert!(plan_abort_image_upload(&world, &id, 9).expect("abort").is_empty());
    let missing = Uuid::new_v4();
    assert!(matches!(plan_begin_image_upload(&world, &missing, 9), Err(ComputeError::NotFound(_))));
    assert!(matches!(plan_finish_image_upload(&world, &missing, 1, hashes(), 9), Err(ComputeError::NotFound(_))));
}

#[test]
fn an_aborted_upload_leaves_the_image_queued_and_its_finish_is_refused() {
    let mut world = World::with_standard_data(0);
    let id = queued_image(&mut world);
    assert!(matches!(plan_finish_image_upload(&world, &id, 1, hashes(), 2), Err(ComputeError::Conflict(_))));
    world.apply(&plan_begin_image_upload(&world, &id, 2).expect("begin"));
    world.apply(&plan_abort_image_upload(&world, &id, 3).expect("abort"));
    let image = &world.compute.images[&id];
    assert_eq!((image.status.as_str(), image.size, image.hashes.clone()), ("queued", None, None));
    // An upload the sweep gave back cannot complete.
    let late = plan_finish_image_upload(&world, &id, 1, hashes(), 4).expect_err("late finish");
    assert_eq!(late, ComputeError::Conflict("Image status transition from queued to active is not allowed".into()));
}
