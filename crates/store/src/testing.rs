//! The store conformance suite: every backend runs [`store_suite`] against
//! a fresh, empty store, so both behave identically where the API can tell.

use std::collections::BTreeMap;

use berth_compute_model::{BuildRequest, ComputeChange, Flavor, InstanceMapping, InstanceSpec, World, WorldChangeSet};
use berth_model::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ProviderRow, State, Uuid};

use crate::{Store, StoreError};

pub use crate::cell_testing::cell_suite;

fn commit(
    store: &dyn Store,
    seen: crate::Seq,
    set: impl Into<WorldChangeSet>,
) -> Result<Option<crate::Seq>, StoreError> {
    crate::write_one(store, seen, set.into())
}

fn provider(id: i64, uuid: Uuid, name: &str, generation: i64, parent: Option<Uuid>, root: Uuid) -> ProviderRow {
    ProviderRow { id, uuid, name: name.to_owned(), generation, parent, root, created_at: 100, updated_at: 100 }
}

fn summary(state: &State) -> String {
    let mut out = String::new();
    for p in state.providers_in_order() {
        out.push_str(&format!(
            "P {} {} g{} parent={:?} root={} inv={:?} traits={:?} aggs={:?} usages={:?} children={:?}\n",
            p.row.uuid,
            p.row.name,
            p.row.generation,
            p.row.parent,
            p.row.root,
            p.inventories,
            p.traits,
            p.aggregates,
            p.usages,
            p.children
        ));
    }
    let mut consumers: Vec<_> = state.consumers.values().collect();
    consumers.sort_by_key(|c| c.row.uuid);
    for c in consumers {
        out.push_str(&format!("C {:?} {:?}\n", c.row, c.allocations));
    }
    out.push_str(&format!("classes={:?}\ntraits={:?}\n", state.resource_classes, state.traits));
    out
}

fn compute_summary(world: &World) -> String {
    let c = &world.compute;
    let mut mappings: Vec<_> = c.instance_mappings.values().map(|m| format!("{m:?}")).collect();
    mappings.sort();
    let mut builds: Vec<_> = c.build_requests.values().map(|b| format!("{b:?}")).collect();
    builds.sort();
    format!("{:?}\n{mappings:?}\n{builds:?}\n{:?}", c.flavors, c.quotas)
}

/// Run the whole suite. Panics (with a message) on the first violation.
pub fn store_suite(store: &dyn Store) {
    // Empty store loads as an empty state.
    let loaded = store.load().expect("load empty");
    assert!(loaded.state.placement.providers.is_empty(), "fresh store must have no providers");
    let mut seen = loaded.seq;
    let mut mirror = loaded.state;

    // Standard data, then a small tree with inventories, traits, aggregates.
    let standard = mirror.placement.standard_data_changes(50);
    let seq = commit(store, seen, standard.clone()).expect("commit standard data");
    assert!(seq.is_some(), "a non-empty change set commits");
    seen = seq.unwrap_or(seen);
    mirror.apply_placement_set(&standard);

    let root = Uuid::new_v4();
    let child = Uuid::new_v4();
    let agg = Uuid::new_v4();
    let mut inventories = BTreeMap::new();
    inventories.insert(
        "VCPU".to_owned(),
        Inventory { total: 8, reserved: 1, min_unit: 1, max_unit: 8, step_size: 1, allocation_ratio: 16.0 },
    );
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider { row: provider(1, root, "root", 0, None, root), expected_generation: None });
    set.push(Change::PutProvider { row: provider(2, child, "child", 0, Some(root), root), expected_generation: None });
    set.push(Change::SetInventories { provider: child, inventories: inventories.clone() });
    set.push(Change::SetProviderTraits { provider: child, traits: ["HW_CPU_X86_AVX2".to_owned()].into() });
    set.push(Change::SetProviderAggregates { provider: root, aggregates: [agg].into() });
    set.push(Change::PutResourceClass { id: 10001, name: "CUSTOM_GOLD".into(), created_at: 60, updated_at: None });
    set.push(Change::PutTrait { id: 100_000, name: "CUSTOM_FAST".into(), created_at: 60 });
    seen = commit(store, seen, set.clone()).expect("commit tree").unwrap_or(seen);
    mirror.apply_placement_set(&set);

    // A consumer with allocations bumps the provider generation via CAS.
    let consumer = Uuid::new_v4();
    let mut allocations = AllocationMap::new();
    allocations.entry(child).or_default().insert("VCPU".to_owned(), 3);
    let consumer_row = ConsumerRow {
        uuid: consumer,
        project_id: "proj".into(),
        user_id: "user".into(),
        generation: 0,
        consumer_type: Some("INSTANCE".into()),
        created_at: 70,
        updated_at: 70,
    };
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider {
        row: provider(2, child, "child", 1, Some(root), root),
        expected_generation: Some(0),
    });
    set.push(Change::PutConsumer {
        row: consumer_row.clone(),
        expected_generation: None,
        allocations: allocations.clone(),
    });
    seen = commit(store, seen, set.clone()).expect("commit allocations").unwrap_or(seen);
    mirror.apply_placement_set(&set);
    assert_eq!(mirror.placement.provider(&child).map(|p| p.used("VCPU")), Some(3));

    // A stale provider generation aborts the WHOLE change set.
    let mut stale = ChangeSet::new();
    stale.push(Change::PutTrait { id: 100_001, name: "CUSTOM_SHOULD_NOT_EXIST".into(), created_at: 80 });
    stale.push(Change::PutProvider {
        row: provider(2, child, "child", 5, Some(root), root),
        expected_generation: Some(0),
    });
    match commit(store, seen, stale) {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("stale provider generation must conflict, got {other:?}"),
    }
    // A stale consumer generation conflicts too.
    let mut stale = ChangeSet::new();
    stale.push(Change::PutConsumer {
        row: ConsumerRow { generation: 9, ..consumer_row.clone() },
        expected_generation: Some(7),
        allocations: allocations.clone(),
    });
    assert!(
        matches!(commit(store, seen, stale), Err(StoreError::Conflict(_))),
        "stale consumer generation must conflict"
    );
    // Creating an existing provider (uuid or name) conflicts.
    let mut dup = ChangeSet::new();
    dup.push(Change::PutProvider {
        row: provider(3, Uuid::new_v4(), "root", 0, None, Uuid::new_v4()),
        expected_generation: None,
    });
    assert!(matches!(commit(store, seen, dup), Err(StoreError::Conflict(_))), "duplicate provider name must conflict");

    // In one transaction, a refused change set (here a duplicate name)
    // is rolled back alone; the sets before and after it commit.
    let member = |id: i64, name: &str| {
        let mut set = ChangeSet::new();
        set.push(Change::PutTrait { id, name: name.into(), created_at: 81 });
        set
    };
    let mut dup = ChangeSet::new();
    dup.push(Change::PutTrait { id: 100_002, name: "CUSTOM_REFUSED_SET".into(), created_at: 81 });
    dup.push(Change::PutProvider {
        row: provider(4, Uuid::new_v4(), "root", 0, None, Uuid::new_v4()),
        expected_generation: None,
    });
    let members = [member(100_003, "CUSTOM_BEFORE_REFUSED"), dup, member(100_004, "CUSTOM_AFTER_REFUSED")];
    let mut outcomes = Vec::new();
    let written = store
        .write(seen, &mut |_, write| {
            let mut all = WorldChangeSet::default();
            for set in &members {
                let set = WorldChangeSet::from(set.clone());
                let outcome = write(&set);
                outcomes.push(outcome.as_ref().map_err(StoreError::is_per_change).err());
                if outcome.is_ok() {
                    all.changes.extend(set.changes);
                }
            }
            Some(all)
        })
        .expect("a batch with one refused member commits");
    assert_eq!(outcomes, [None, Some(true), None], "only the duplicate is refused, as its own error");
    seen = written.unwrap_or(seen);
    mirror.apply_placement_set(&members[0]);
    mirror.apply_placement_set(&members[2]);

    // A plan that declines commits nothing.
    let declined = store.write(seen, &mut |_, _| None).expect("declined write");
    assert_eq!(declined, None);

    // Everything committed, and nothing from the failed sets, is loaded back.
    let reloaded = store.load().expect("reload");
    assert_eq!(
        summary(&reloaded.state.placement),
        summary(&mirror.placement),
        "reloaded state differs from what was committed"
    );
    for leaked in ["CUSTOM_SHOULD_NOT_EXIST", "CUSTOM_REFUSED_SET"] {
        assert!(!reloaded.state.placement.traits.contains_key(leaked), "a failed change set leaked {leaked}");
    }
    for kept in ["CUSTOM_BEFORE_REFUSED", "CUSTOM_AFTER_REFUSED"] {
        assert!(reloaded.state.placement.traits.contains_key(kept), "a refused neighbour took {kept} with it");
    }

    // Compute control rows commit in the same transactions and load back.
    let flavor = Flavor {
        id: 1,
        flavorid: "f1".into(),
        name: "tiny \"quoted\" ✓".into(),
        memory_mb: 512,
        vcpus: 1,
        root_gb: 1,
        ephemeral_gb: 0,
        swap: 0,
        rxtx_factor: 1.0,
        vcpu_weight: None,
        disabled: false,
        is_public: true,
        description: Some("d".into()),
        extra_specs: [("hw:cpu_policy".to_owned(), "dedicated".to_owned())].into(),
        projects: Default::default(),
        created_at: 70,
        updated_at: None,
    };
    let instance = Uuid::new_v4();
    let mut compute = WorldChangeSet::new();
    compute.compute(ComputeChange::PutFlavor(flavor.clone()));
    compute.compute(ComputeChange::PutInstanceMapping(InstanceMapping {
        instance_uuid: instance,
        cell: None,
        project_id: "p".into(),
        user_id: "u".into(),
        queued_for_delete: false,
        created_at: 70,
    }));
    compute.compute(ComputeChange::PutBuildRequest(BuildRequest {
        instance_uuid: instance,
        project_id: "p".into(),
        user_id: "u".into(),
        spec: InstanceSpec {
            display_name: "vm".into(),
            display_description: None,
            hostname: "vm".into(),
            image_ref: None,
            image_properties: Default::default(),
            flavor,
            metadata: Default::default(),
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
            scheduler_hints: Default::default(),
            auto_disk_config: false,
            security_groups: Vec::new(),
            rescue_image: None,
            nics: 0,
        },
        created_at: 70,
        held: true,
    }));
    compute.compute(ComputeChange::PutQuota {
        project_id: "p".into(),
        user_id: String::new(),
        resource: "instances".into(),
        limit: 3,
    });
    seen = commit(store, seen, compute.clone()).expect("commit compute rows").unwrap_or(seen);
    mirror.apply(&compute);
    let reloaded = store.load().expect("reload compute rows");
    assert_eq!(compute_summary(&reloaded.state), compute_summary(&mirror), "compute rows differ after reload");
    assert_eq!(reloaded.state.compute.instance_count("p", None), 1, "derived quota counts rebuilt on load");
    let mut forget = WorldChangeSet::new();
    forget.compute(ComputeChange::DeleteBuildRequest(instance));
    forget.compute(ComputeChange::DeleteQuota {
        project_id: "p".into(),
        user_id: String::new(),
        resource: "instances".into(),
    });
    seen = commit(store, seen, forget.clone()).expect("commit compute deletes").unwrap_or(seen);
    mirror.apply(&forget);
    assert_eq!(compute_summary(&store.load().expect("reload").state), compute_summary(&mirror));

    // Many writers in one transaction, as a group commit makes them:
    // writers of compute rows alone between writers of placement changes,
    // the same row put by one and changed or deleted by a later one, and a
    // refused writer among them. Each keeps its own outcome, the rows end
    // as the last writer left them, and the feed replays them in order.
    let quota = |resource: &str, limit: Option<i64>| {
        let mut set = WorldChangeSet::new();
        set.compute(match limit {
            Some(limit) => ComputeChange::PutQuota {
                project_id: "p".into(),
                user_id: String::new(),
                resource: resource.into(),
                limit,
            },
            None => {
                ComputeChange::DeleteQuota { project_id: "p".into(), user_id: String::new(), resource: resource.into() }
            }
        });
        set
    };
    let with = |mut a: WorldChangeSet, b: WorldChangeSet| {
        a.changes.extend(b.changes);
        a
    };
    let mut refused = ChangeSet::new();
    refused.push(Change::PutProvider {
        row: provider(5, Uuid::new_v4(), "root", 0, None, Uuid::new_v4()),
        expected_generation: None,
    });
    let writers: Vec<WorldChangeSet> = vec![
        WorldChangeSet::from(member(100_005, "CUSTOM_BATCH_FIRST")),
        quota("cores", Some(5)),
        with(quota("cores", Some(7)), quota("ram", Some(9))),
        quota("ram", None),
        WorldChangeSet::from(refused),
        quota("instances", Some(4)),
        WorldChangeSet::from(member(100_006, "CUSTOM_BATCH_LAST")),
        quota("cores", Some(8)),
    ];
    let mut refusals = Vec::new();
    let written = store
        .write(seen, &mut |_, write| {
            let mut all = WorldChangeSet::default();
            for set in &writers {
                let outcome = write(set);
                refusals.push(outcome.is_err());
                if outcome.is_ok() {
                    all.changes.extend(set.changes.clone());
                }
            }
            Some(all)
        })
        .expect("a batch of many writers commits");
    assert_eq!(refusals, [false, false, false, false, true, false, false, false], "only the duplicate is refused");
    seen = written.unwrap_or(seen);
    for (set, refused) in writers.iter().zip(&refusals) {
        if !refused {
            mirror.apply(set);
        }
    }
    let reloaded = store.load().expect("reload after the batch");
    assert_eq!(compute_summary(&reloaded.state), compute_summary(&mirror), "rows after a batch of writers");
    assert_eq!(summary(&reloaded.state.placement), summary(&mirror.placement));
    let limits: Vec<_> = ["cores", "ram", "instances"]
        .iter()
        .map(|r| reloaded.state.compute.quotas.get(&("p".to_owned(), String::new(), (*r).to_owned())).copied())
        .collect();
    assert_eq!(limits, [Some(8), None, Some(4)], "each row as its last writer left it");
    let tail = store.changes_since(seen - 1).expect("feed of the batch");
    if let Some((_, set)) = tail.last() {
        let mut replay = World::default();
        replay.apply(set);
        let quotas: Vec<_> = replay.compute.quotas.iter().filter(|((p, _, _), _)| p == "p").collect();
        assert_eq!(quotas.len(), 2, "the feed entry ends with cores and instances: {quotas:?}");
    }

    // Deletes.
    let mut set = ChangeSet::new();
    set.push(Change::DeleteConsumer { uuid: consumer, expected_generation: 0 });
    set.push(Change::DeleteProvider { uuid: child, expected_generation: 1 });
    set.push(Change::DeleteTrait { name: "CUSTOM_FAST".into() });
    set.push(Change::DeleteResourceClass { name: "CUSTOM_GOLD".into() });
    commit(store, seen, set.clone()).expect("commit deletes");
    mirror.apply_placement_set(&set);
    let reloaded = store.load().expect("reload after deletes");
    assert_eq!(summary(&reloaded.state.placement), summary(&mirror.placement), "state after deletes differs");
    assert!(reloaded.state.placement.provider(&root).is_some_and(|p| p.children.is_empty()));

    // The change feed replays, in order, exactly what others committed.
    // (A single-process backend may report an empty feed.)
    let feed = store.changes_since(0).expect("changes_since");
    if !feed.is_empty() {
        let mut replay = World::default();
        let mut last = 0;
        for (seq, set) in &feed {
            assert!(*seq > last, "feed sequence must increase");
            last = *seq;
            replay.apply(set);
        }
        assert_eq!(
            summary(&replay.placement),
            summary(&mirror.placement),
            "replaying the change feed must rebuild the state"
        );
        assert!(store.changes_since(last).expect("tail").is_empty());
    }
    store.ping().expect("ping");
}
