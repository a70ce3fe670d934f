//! The cell store conformance suite: every cell backend runs
//! [`cell_suite`] against a fresh, empty cell database, so both behave
//! identically where the API can tell. The oracles are the model's own
//! definitions: [`compare_instances`] for order, the [`InstanceFilter`]
//! docs (restated as a Rust predicate here) for filters.

use std::collections::{BTreeMap, BTreeSet};

use berth_compute_model::cell::{
    compare_instances, ActionEvent, ComputeNode, Fault, Instance, InstanceAction, InstanceFilter, InstanceQuery,
    Marker, Service, SortKey, SORT_KEYS,
};
use berth_compute_model::{Flavor, InstanceSpec};
use uuid::Uuid;

use crate::cell::{CellOp, CellOutcome, CellStore, Expect, InstanceUpdate};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn maybe(&mut self, items: &[&str]) -> Option<String> {
        if self.chance(30) {
            None
        } else {
            Some((*self.pick(items)).to_owned())
        }
    }

    fn uuid(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.next(), self.next())
    }
}

fn flavor(id: i64) -> Flavor {
    Flavor {
        id,
        flavorid: format!("f{id}"),
        name: format!("m1.f{id}"),
        memory_mb: 512 * id,
        vcpus: id,
        root_gb: 1,
        ephemeral_gb: 0,
        swap: 0,
        rxtx_factor: 1.5,
        vcpu_weight: None,
        disabled: false,
        is_public: true,
        description: None,
        extra_specs: BTreeMap::new(),
        projects: BTreeSet::new(),
        created_at: 1,
        updated_at: None,
    }
}

fn minimal_spec(name: &str) -> InstanceSpec {
    InstanceSpec {
        display_name: name.to_owned(),
        display_description: None,
        hostname: name.to_owned(),
        image_ref: None,
        image_properties: BTreeMap::new(),
        flavor: flavor(1),
        metadata: BTreeMap::new(),
        key_name: None,
        key_data: None,
        availability_zone: None,
        reservation_id: "r-min".to_owned(),
        launch_index: 0,
        config_drive: String::new(),
        user_data: None,
        access_ip_v4: None,
        access_ip_v6: None,
        tags: Vec::new(),
        scheduler_hints: BTreeMap::new(),
        auto_disk_config: false,
        security_groups: Vec::new(),
        rescue_image: None,
        nics: 0,
    }
}

fn minimal(uuid: Uuid, name: &str, created_at: i64) -> Instance {
    Instance::from_spec(uuid, "proj", "user", minimal_spec(name), created_at, "building", Some("scheduling"))
}

/// An instance with every optional field set.
fn full(uuid: Uuid) -> Instance {
    let mut spec = minimal_spec("full");
    spec.display_description = Some("every field".into());
    spec.hostname = "full-host".into();
    spec.image_ref = Some(Uuid::from_u128(0xabc));
    spec.image_properties.insert("hw_disk_bus".into(), "virtio".into());
    spec.flavor = flavor(3);
    spec.flavor.extra_specs.insert("hw:cpu_policy".into(), "dedicated".into());
    spec.flavor.projects.insert("proj".into());
    spec.flavor.description = Some("big".into());
    spec.flavor.vcpu_weight = Some(7);
    spec.flavor.updated_at = Some(9);
    spec.metadata.insert("k".into(), "v".into());
    spec.metadata.insert("ünïcode".into(), "välue".into());
    spec.key_name = Some("key".into());
    spec.availability_zone = Some("az-asked".into());
    spec.reservation_id = "r-full".into();
    spec.launch_index = 2;
    spec.config_drive = "True".into();
    spec.user_data = Some("IyEvYmluL3NoCg==".into());
    spec.access_ip_v4 = Some("10.0.0.1".into());
    spec.access_ip_v6 = Some("::1".into());
    spec.tags = vec!["t1".into(), "t2".into()];
    spec.scheduler_hints.insert("group".into(), vec!["g".into()]);
    Instance {
        uuid,
        project_id: "proj".into(),
        user_id: "user".into(),
        host: Some("host-1".into()),
        node: Some("node-1".into()),
        availability_zone: Some("az1".into()),
        vm_state: "active".into(),
        task_state: Some("rebooting".into()),
        power_state: 1,
        locked: true,
        locked_by: Some("admin".into()),
        locked_reason: Some("because".into()),
        progress: 42,
        spec,
        created_at: 100,
        updated_at: Some(200),
        launched_at: Some(150),
        terminated_at: Some(300),
        deleted: true,
        deleted_at: Some(301),
    }
}

fn write(store: &dyn CellStore, ops: Vec<CellOp>) -> Vec<CellOutcome> {
    store.write(&ops).unwrap_or_else(|e| panic!("write {ops:?} failed: {e}"))
}

fn write_one(store: &dyn CellStore, op: CellOp) -> CellOutcome {
    write(store, vec![op]).remove(0)
}

fn get(store: &dyn CellStore, uuid: Uuid) -> Option<Instance> {
    store.instance(&uuid).expect("read instance")
}

fn list(store: &dyn CellStore, filter: InstanceFilter, sort: Vec<SortKey>) -> Vec<Instance> {
    let query = InstanceQuery { filter, sort, marker: None, limit: usize::MAX, brief: false };
    store.list_instances(&query).unwrap_or_else(|e| panic!("list {query:?}: {e}"))
}

fn uuids(rows: &[Instance]) -> Vec<Uuid> {
    rows.iter().map(|r| r.uuid).collect()
}

fn key(key: &str, ascending: bool) -> SortKey {
    SortKey { key: key.to_owned(), ascending }
}

/// Run the whole cell suite against an empty cell store. Panics (with a
/// message) on the first violation.
pub fn cell_suite(store: &dyn CellStore) {
    store.ping().expect("ping");
    assert!(["sqlite", "postgres"].contains(&store.backend_name()));
    round_trip(store);
    conditional_updates(store);
    batched_updates(store);
    soft_delete_and_purge(store);
    listings(store);
    services_and_nodes(store);
    actions_and_faults(store);
    tasks_and_counts(store);
    batches(store);
    boot_batches(store);
}

fn round_trip(store: &dyn CellStore) {
    let a = full(Uuid::new_v4());
    let b = minimal(Uuid::new_v4(), "min", 5);
    assert_eq!(
        write(store, vec![CellOp::PutInstance(a.clone()), CellOp::PutInstance(b.clone())]),
        vec![CellOutcome::Done, CellOutcome::Done]
    );
    assert_eq!(get(store, a.uuid).as_ref(), Some(&a), "every field round-trips");
    assert_eq!(get(store, b.uuid).as_ref(), Some(&b), "empty optional fields round-trip");
    assert_eq!(get(store, Uuid::new_v4()), None);
    let mut got = store.instances(&[a.uuid, Uuid::new_v4(), b.uuid]).expect("instances");
    got.sort_by_key(|i| i.uuid);
    let mut want = vec![a.clone(), b.clone()];
    want.sort_by_key(|i| i.uuid);
    assert_eq!(got, want, "instances() returns the existing ones");
    assert!(store.instances(&[]).expect("no uuids").is_empty());

    // PutInstance replaces the row and its tags.
    let mut a2 = a.clone();
    a2.spec.tags = vec!["t3".into()];
    a2.vm_state = "stopped".into();
    a2.host = None;
    assert_eq!(write_one(store, CellOp::PutInstance(a2.clone())), CellOutcome::Done);
    assert_eq!(get(store, a.uuid), Some(a2.clone()));
    let by_tag = |tag: &str| {
        let f = InstanceFilter { tags: vec![tag.into()], deleted: Some(true), ..Default::default() };
        uuids(&list(store, f, vec![]))
    };
    assert_eq!(by_tag("t3"), vec![a.uuid], "new tags are filterable");
    assert!(by_tag("t1").is_empty(), "old tags are gone");

    // InsertInstance does not overwrite.
    let mut clash = b.clone();
    clash.vm_state = "error".into();
    assert_eq!(write_one(store, CellOp::InsertInstance(clash)), CellOutcome::Mismatch);
    assert_eq!(get(store, b.uuid), Some(b.clone()), "a refused insert changes nothing");
    let c = minimal(Uuid::new_v4(), "inserted", 6);
    assert_eq!(write_one(store, CellOp::InsertInstance(c.clone())), CellOutcome::Done);
    assert_eq!(get(store, c.uuid), Some(c.clone()));

    purge_all(store, &[a.uuid, b.uuid, c.uuid]);
}

fn purge_all(store: &dyn CellStore, uuids: &[Uuid]) {
    let ops: Vec<CellOp> = uuids.iter().map(|u| CellOp::PurgeInstance(*u)).collect();
    let outcomes = write(store, ops);
    assert!(outcomes.iter().all(|o| *o == CellOutcome::Done), "purging existing rows: {outcomes:?}");
    assert!(store.instances(uuids).expect("instances").is_empty());
}

/// Several updates in one batch (PostgreSQL reads their rows in one
/// statement): each sees the rows as the ops before it left them.
fn batched_updates(store: &dyn CellStore) {
    let (a, b) = (minimal(Uuid::new_v4(), "batch-a", 10), minimal(Uuid::new_v4(), "batch-b", 10));
    write(store, vec![CellOp::PutInstance(a.clone()), CellOp::PutInstance(b.clone())]);
    let spawning = InstanceUpdate { task_state: Some(Some("spawning".into())), updated_at: 11, ..Default::default() };
    let active = InstanceUpdate {
        vm_state: Some("active".into()),
        task_state: Some(None),
        updated_at: 12,
        ..Default::default()
    };
    let from = |task: &str| Expect { task_states: vec![Some(task.into())], ..Default::default() };
    let ops = vec![
        CellOp::UpdateInstance { uuid: a.uuid, expect: from("scheduling"), update: spawning.clone() },
        CellOp::UpdateInstance { uuid: b.uuid, expect: from("spawning"), update: active.clone() },
        CellOp::UpdateInstance { uuid: Uuid::new_v4(), expect: Expect::default(), update: active.clone() },
        CellOp::UpdateInstance { uuid: a.uuid, expect: from("spawning"), update: active.clone() },
        CellOp::UpdateInstance { uuid: b.uuid, expect: from("scheduling"), update: spawning },
    ];
    assert_eq!(
        write(store, ops),
        vec![CellOutcome::Done, CellOutcome::Mismatch, CellOutcome::Missing, CellOutcome::Done, CellOutcome::Done]
    );
    let (a_now, b_now) = (get(store, a.uuid).expect("a"), get(store, b.uuid).expect("b"));
    assert_eq!((a_now.vm_state.as_str(), a_now.task_state.as_deref(), a_now.updated_at), ("active", None, Some(12)));
    assert_eq!((b_now.vm_state.as_str(), b_now.task_state.as_deref()), ("building", Some("spawning")));
    write(store, vec![CellOp::PurgeInstance(a.uuid), CellOp::PurgeInstance(b.uuid)]);
}

fn conditional_updates(store: &dyn CellStore) {
    let row = minimal(Uuid::new_v4(), "cond", 10);
    write(store, vec![CellOp::PutInstance(row.clone())]);
    let update = |expect: Expect, update: InstanceUpdate| CellOp::UpdateInstance { uuid: row.uuid, expect, update };
    let touch = InstanceUpdate { vm_state: Some("active".into()), updated_at: 11, ..Default::default() };

    assert_eq!(
        write_one(
            store,
            CellOp::UpdateInstance { uuid: Uuid::new_v4(), expect: Expect::default(), update: touch.clone() }
        ),
        CellOutcome::Missing
    );
    for expect in [
        Expect { vm_states: vec!["active".into()], ..Default::default() },
        Expect { task_states: vec![None], ..Default::default() },
        Expect { task_states: vec![Some("spawning".into()), None], ..Default::default() },
        Expect { host: Some(Some("elsewhere".into())), ..Default::default() },
        // A read-modify-write of metadata or tags that something else
        // changed since its read.
        Expect { metadata: Some([("k".to_owned(), "v".to_owned())].into()), ..Default::default() },
        Expect { tags: Some(vec!["t".into()]), ..Default::default() },
        Expect { security_groups: Some(vec!["none-such".into()]), ..Default::default() },
    ] {
        assert_eq!(write_one(store, update(expect.clone(), touch.clone())), CellOutcome::Mismatch, "{expect:?}");
        assert_eq!(get(store, row.uuid), Some(row.clone()), "a mismatch changes nothing ({expect:?})");
    }

    // Every field of an update, with matching expectations.
    let mut metadata = BTreeMap::new();
    metadata.insert("m".to_owned(), "1".to_owned());
    let rebuilt_image = Uuid::from_u128(0xbeef);
    let full_update = InstanceUpdate {
        vm_state: Some("active".into()),
        task_state: Some(None),
        power_state: Some(1),
        host: Some(Some("h-up".into())),
        node: Some(Some("n-up".into())),
        availability_zone: Some(Some("az-up".into())),
        launched_at: Some(Some(12)),
        terminated_at: Some(Some(13)),
        lock: Some((true, Some("owner".into()), Some("mine".into()))),
        progress: Some(100),
        display_name: Some("renamed".into()),
        display_description: Some(Some("described".into())),
        metadata: Some(metadata.clone()),
        tags: Some(vec!["x".into(), "y".into()]),
        deleted_at: None,
        flavor: None,
        access_ip_v4: Some(Some("10.9.8.7".into())),
        access_ip_v6: Some(Some("2001:db8::7".into())),
        auto_disk_config: Some(true),
        image: Some((Some(rebuilt_image), [("hw_rng".to_owned(), "1".to_owned())].into())),
        key_pair: Some((Some("kp".into()), Some("ssh-ed25519 AAAA".into()))),
        user_data: Some(Some("aGk=".into())),
        hostname: Some("host-up".into()),
        security_groups: Some(vec!["sg".into()]),
        rescue_image: Some(Some(Uuid::from_u128(0xcafe))),
        updated_at: 14,
    };
    let expect = Expect {
        vm_states: vec!["building".into(), "error".into()],
        task_states: vec![None, Some("scheduling".into())],
        not_deleted: true,
        host: Some(row.host.clone()),
        metadata: Some(row.spec.metadata.clone()),
        tags: Some(row.spec.tags.clone()),
        security_groups: Some(row.spec.security_groups.clone()),
    };
    assert_eq!(write_one(store, update(expect, full_update)), CellOutcome::Done);
    let mut want = row.clone();
    want.vm_state = "active".into();
    want.task_state = None;
    want.power_state = 1;
    want.host = Some("h-up".into());
    want.node = Some("n-up".into());
    want.availability_zone = Some("az-up".into());
    want.launched_at = Some(12);
    want.terminated_at = Some(13);
    want.locked = true;
    want.locked_by = Some("owner".into());
    want.locked_reason = Some("mine".into());
    want.progress = 100;
    want.spec.display_name = "renamed".into();
    want.spec.display_description = Some("described".into());
    want.spec.metadata = metadata;
    want.spec.tags = vec!["x".into(), "y".into()];
    want.spec.access_ip_v4 = Some("10.9.8.7".into());
    want.spec.access_ip_v6 = Some("2001:db8::7".into());
    want.spec.auto_disk_config = true;
    want.spec.image_ref = Some(rebuilt_image);
    want.spec.image_properties = [("hw_rng".to_owned(), "1".to_owned())].into();
    want.spec.key_name = Some("kp".into());
    want.spec.key_data = Some("ssh-ed25519 AAAA".into());
    want.spec.user_data = Some("aGk=".into());
    want.spec.hostname = "host-up".into();
    want.spec.security_groups = vec!["sg".into()];
    want.spec.rescue_image = Some(Uuid::from_u128(0xcafe));
    want.updated_at = Some(14);
    assert_eq!(get(store, row.uuid), Some(want.clone()), "every updated field is stored");

    // The columns duplicating spec fields follow the update.
    let exact = |column: &str, value: &str| {
        let mut f = InstanceFilter::default();
        f.exact.insert(column.into(), value.into());
        uuids(&list(store, f, vec![]))
    };
    assert_eq!(exact("display_name", "renamed"), vec![row.uuid]);
    assert!(exact("display_name", "cond").is_empty());
    assert_eq!(exact("display_description", "described"), vec![row.uuid]);
    assert_eq!(exact("locked_by", "owner"), vec![row.uuid]);
    let tagged =
        |tag: &str| uuids(&list(store, InstanceFilter { tags: vec![tag.into()], ..Default::default() }, vec![]));
    assert_eq!(tagged("y"), vec![row.uuid]);
    let host = list(store, InstanceFilter { host: Some("h-up".into()), ..Default::default() }, vec![]);
    assert_eq!(uuids(&host), vec![row.uuid]);

    // Clearing: Some(None) clears, None leaves alone.
    let clear = InstanceUpdate {
        host: Some(None),
        display_description: Some(None),
        lock: Some((false, None, None)),
        tags: Some(vec![]),
        updated_at: 15,
        ..Default::default()
    };
    assert_eq!(write_one(store, update(Expect::default(), clear)), CellOutcome::Done);
    want.host = None;
    want.spec.display_description = None;
    want.locked = false;
    want.locked_by = None;
    want.locked_reason = None;
    want.spec.tags = vec![];
    want.updated_at = Some(15);
    assert_eq!(get(store, row.uuid), Some(want.clone()));
    assert!(tagged("y").is_empty(), "tags replaced by an update are gone");
    purge_all(store, &[row.uuid]);
}

fn soft_delete_and_purge(store: &dyn CellStore) {
    let row = minimal(Uuid::new_v4(), "doomed", 20);
    let other = minimal(Uuid::new_v4(), "other", 21);
    write(store, vec![CellOp::PutInstance(row.clone()), CellOp::PutInstance(other.clone())]);
    let delete = InstanceUpdate {
        vm_state: Some("deleted".into()),
        task_state: Some(None),
        deleted_at: Some(30),
        updated_at: 30,
        ..Default::default()
    };
    let expect = Expect { not_deleted: true, ..Default::default() };
    let op = CellOp::UpdateInstance { uuid: row.uuid, expect: expect.clone(), update: delete.clone() };
    assert_eq!(write_one(store, op.clone()), CellOutcome::Done);
    let stored = get(store, row.uuid).expect("soft-deleted rows stay readable");
    assert!(stored.deleted && stored.deleted_at == Some(30) && stored.vm_state == "deleted");
    assert_eq!(write_one(store, op), CellOutcome::Mismatch, "not_deleted refuses a deleted row");
    assert_eq!(uuids(&list(store, InstanceFilter::default(), vec![])), vec![other.uuid]);
    assert_eq!(
        uuids(&list(store, InstanceFilter { deleted: Some(true), ..Default::default() }, vec![])),
        vec![row.uuid]
    );
    let since = list(store, InstanceFilter { changes_since: Some(25), ..Default::default() }, vec![]);
    assert_eq!(uuids(&since), vec![row.uuid], "changes-since includes deleted rows");

    // Purge removes the row, its tags, actions (with events) and faults.
    let tagged = InstanceUpdate { tags: Some(vec!["gone".into()]), updated_at: 31, ..Default::default() };
    write(
        store,
        vec![
            CellOp::UpdateInstance { uuid: row.uuid, expect: Expect::default(), update: tagged },
            CellOp::StartAction(action(row.uuid, "req-p", "create", 20, vec![event("ev", 20)])),
            CellOp::AddFault(fault(row.uuid, 500, 21)),
        ],
    );
    assert_eq!(store.instance_actions(&row.uuid).expect("actions").len(), 1);
    assert_eq!(write_one(store, CellOp::PurgeInstance(row.uuid)), CellOutcome::Done);
    assert_eq!(get(store, row.uuid), None);
    assert!(store.instance_actions(&row.uuid).expect("actions").is_empty());
    assert!(store.faults(&[row.uuid]).expect("faults").is_empty());
    let f = InstanceFilter { tags_any: vec!["gone".into()], deleted: Some(true), ..Default::default() };
    assert!(list(store, f, vec![]).is_empty());
    assert_eq!(write_one(store, CellOp::PurgeInstance(row.uuid)), CellOutcome::Missing);
    // A re-created row with the purged uuid starts clean.
    write(store, vec![CellOp::PutInstance(row.clone())]);
    assert!(store.instance_actions(&row.uuid).expect("actions").is_empty());
    purge_all(store, &[row.uuid, other.uuid]);
}

fn action(instance: Uuid, request_id: &str, name: &str, at: i64, events: Vec<ActionEvent>) -> InstanceAction {
    InstanceAction {
        instance_uuid: instance,
        action: name.to_owned(),
        request_id: request_id.to_owned(),
        user_id: "user".into(),
        project_id: "proj".into(),
        start_time: at,
        message: None,
        updated_at: Some(at),
        events,
    }
}

fn event(name: &str, at: i64) -> ActionEvent {
    ActionEvent {
        event: name.to_owned(),
        start_time: at,
        finish_time: None,
        result: None,
        traceback: None,
        host: Some("host-1".into()),
        details: None,
    }
}

fn fault(instance: Uuid, code: i64, at: i64) -> Fault {
    Fault {
        instance_uuid: instance,
        code,
        message: format!("fault {code} at {at}"),
        details: "trace".into(),
        host: if code == 500 { Some("host-1".into()) } else { None },
        created_at: at,
    }
}

// ---------------------------------------------------------------------------
// Listings against the oracle.

const NAMES: &[&str] = &["web-1", "web-2", "web-10", "Web", "db", "db-b1", "ünï", "zeta", ""];

fn random_instance(rng: &mut Rng) -> Instance {
    let name = rng.pick::<&str>(NAMES);
    let mut spec = minimal_spec(name);
    spec.display_description = rng.maybe(&["", "a", "B", "é"]);
    spec.hostname = (*rng.pick(&["h-a", "h-b", "H-c"])).to_owned();
    spec.image_ref = if rng.chance(30) { None } else { Some(Uuid::from_u128(rng.below(3) as u128 + 1)) };
    spec.flavor = flavor(rng.below(3) as i64 + 1);
    spec.key_name = rng.maybe(&["k1", "k2"]);
    spec.reservation_id = (*rng.pick(&["r-1", "r-2", "r-3"])).to_owned();
    spec.launch_index = rng.below(3) as i64;
    spec.config_drive = (*rng.pick(&["", "True"])).to_owned();
    spec.access_ip_v4 = rng.maybe(&["10.0.0.1", "10.0.0.2"]);
    spec.access_ip_v6 = rng.maybe(&["::1", "fe80::1"]);
    spec.tags = ["a", "b", "c", "d"].iter().filter(|_| rng.chance(35)).map(|t| (*t).to_owned()).collect();
    let deleted = rng.chance(12);
    let locked = rng.chance(25);
    Instance {
        uuid: rng.uuid(),
        project_id: (*rng.pick(&["p1", "p2", "p3"])).to_owned(),
        user_id: (*rng.pick(&["u1", "u2"])).to_owned(),
        host: rng.maybe(&["h1", "h2", "h3", ""]),
        node: rng.maybe(&["n1", "n2"]),
        availability_zone: rng.maybe(&["az1", "az2"]),
        vm_state: (*rng.pick(&["active", "stopped", "error", "building"])).to_owned(),
        task_state: rng.maybe(&["spawning", "deleting", "rebooting"]),
        power_state: rng.below(4) as i64,
        locked,
        locked_by: if locked { rng.maybe(&["admin", "owner"]) } else { None },
        locked_reason: if locked { rng.maybe(&["why"]) } else { None },
        progress: *rng.pick(&[0, 50, 100]),
        spec,
        // Few distinct creation times: many ties broken by uuid.
        created_at: 1000 + rng.below(8) as i64,
        updated_at: if rng.chance(20) { None } else { Some(1000 + rng.below(20) as i64) },
        launched_at: if rng.chance(40) { None } else { Some(-5 + rng.below(10) as i64) },
        terminated_at: if rng.chance(70) { None } else { Some(2000 + rng.below(3) as i64) },
        deleted,
        deleted_at: if deleted { Some(3000) } else { None },
    }
}

fn exact_value(row: &Instance, column: &str) -> Option<String> {
    match column {
        "key_name" => row.spec.key_name.clone(),
        "hostname" => Some(row.spec.hostname.clone()),
        "config_drive" => Some(row.spec.config_drive.clone()),
        "access_ip_v4" => row.spec.access_ip_v4.clone(),
        "access_ip_v6" => row.spec.access_ip_v6.clone(),
        "user_id" => Some(row.user_id.clone()),
        "display_name" => Some(row.spec.display_name.clone()),
        "locked_by" => row.locked_by.clone(),
        other => panic!("suite has no oracle for exact column {other}"),
    }
}

/// The [`InstanceFilter`] docs as a predicate.
fn matches(f: &InstanceFilter, row: &Instance) -> bool {
    let eq = |want: &Option<String>, have: Option<&str>| want.as_deref().is_none_or(|w| have == Some(w));
    let deleted_ok = match f.deleted {
        Some(true) => row.deleted,
        _ => f.changes_since.is_some() || !row.deleted,
    };
    let has = |t: &String| row.spec.tags.contains(t);
    deleted_ok
        && eq(&f.project_id, Some(&row.project_id))
        && eq(&f.user_id, Some(&row.user_id))
        && eq(&f.host, row.host.as_deref())
        && eq(&f.node, row.node.as_deref())
        && eq(&f.availability_zone, row.availability_zone.as_deref())
        && eq(&f.image_ref, row.spec.image_ref.map(|u| u.to_string()).as_deref())
        && eq(&f.reservation_id, Some(&row.spec.reservation_id))
        && f.flavor_id.is_none_or(|id| id == row.spec.flavor.id)
        && f.name_regex
            .as_ref()
            .is_none_or(|p| regex::Regex::new(p).map(|re| re.is_match(&row.spec.display_name)).unwrap_or(false))
        && f.vm_states.as_ref().is_none_or(|s| s.contains(&row.vm_state))
        && f.task_states.as_ref().is_none_or(|s| match &row.task_state {
            None => s.is_empty(),
            Some(t) => s.contains(t),
        })
        && f.changes_since.is_none_or(|t| row.updated_at.is_some_and(|u| u >= t))
        && f.changes_before.is_none_or(|t| row.updated_at.is_some_and(|u| u <= t))
        && f.uuids.as_ref().is_none_or(|u| u.contains(&row.uuid))
        && f.locked.is_none_or(|l| l == row.locked)
        && f.tags.iter().all(has)
        && (f.tags_any.is_empty() || f.tags_any.iter().any(has))
        && (f.not_tags.is_empty() || !f.not_tags.iter().all(has))
        && !f.not_tags_any.iter().any(has)
        && f.exact.iter().all(|(c, v)| exact_value(row, c).as_deref() == Some(v.as_str()))
}

fn expected(rows: &[Instance], filter: &InstanceFilter, sort: &[SortKey]) -> Vec<Uuid> {
    let mut want: Vec<&Instance> = rows.iter().filter(|r| matches(filter, r)).collect();
    want.sort_by(|a, b| compare_instances(a, b, sort));
    want.iter().map(|r| r.uuid).collect()
}

/// Every page of `limit` rows, each started after the previous page's
/// last row, concatenated.
/// Each page is read twice, full and brief: the brief rows are the same
/// rows with the same sort values and names.
fn paged(store: &dyn CellStore, filter: &InstanceFilter, sort: &[SortKey], limit: usize) -> Vec<Uuid> {
    let mut out = Vec::new();
    let mut marker: Option<Marker> = None;
    loop {
        let query =
            InstanceQuery { filter: filter.clone(), sort: sort.to_vec(), marker: marker.clone(), limit, brief: false };
        let page = store.list_instances(&query).unwrap_or_else(|e| panic!("page {query:?}: {e}"));
        let brief = store
            .list_instances(&InstanceQuery { brief: true, ..query.clone() })
            .unwrap_or_else(|e| panic!("brief page {query:?}: {e}"));
        assert_eq!(uuids(&brief), uuids(&page), "a brief page lists the same rows");
        for (b, f) in brief.iter().zip(&page) {
            assert_eq!(b.spec.display_name, f.spec.display_name);
            for k in SORT_KEYS {
                assert_eq!(b.sort_value(k), f.sort_value(k), "sort key {k} of a brief row");
            }
        }
        assert!(page.len() <= limit, "a page holds at most `limit` rows");
        out.extend(uuids(&page));
        match page.last() {
            Some(last) if page.len() == limit => {
                marker =
                    Some(Marker { values: sort.iter().map(|k| last.sort_value(&k.key)).collect(), uuid: last.uuid })
            }
            _ => return out,
        }
    }
}

fn filters(rows: &[Instance]) -> Vec<InstanceFilter> {
    let d = InstanceFilter::default;
    let exact = |c: &str, v: &str| {
        let mut f = d();
        f.exact.insert(c.into(), v.into());
        f
    };
    let some_uuids: Vec<Uuid> = rows.iter().step_by(7).map(|r| r.uuid).collect();
    vec![
        d(),
        InstanceFilter { project_id: Some("p1".into()), ..d() },
        InstanceFilter { user_id: Some("u2".into()), ..d() },
        InstanceFilter { project_id: Some("p2".into()), user_id: Some("u1".into()), ..d() },
        InstanceFilter { host: Some("h1".into()), ..d() },
        InstanceFilter { host: Some(String::new()), ..d() },
        InstanceFilter { node: Some("n2".into()), ..d() },
        InstanceFilter { availability_zone: Some("az1".into()), ..d() },
        InstanceFilter { image_ref: Some(Uuid::from_u128(2).to_string()), ..d() },
        InstanceFilter { flavor_id: Some(2), ..d() },
        InstanceFilter { reservation_id: Some("r-3".into()), ..d() },
        InstanceFilter { vm_states: Some(vec!["active".into(), "error".into()]), ..d() },
        InstanceFilter { vm_states: Some(vec![]), ..d() },
        InstanceFilter { task_states: Some(vec![]), ..d() },
        InstanceFilter { task_states: Some(vec!["spawning".into(), "deleting".into()]), ..d() },
        InstanceFilter { vm_states: Some(vec!["active".into()]), task_states: Some(vec![]), ..d() },
        InstanceFilter { changes_since: Some(1010), ..d() },
        InstanceFilter { changes_before: Some(1005), ..d() },
        InstanceFilter { changes_since: Some(1003), changes_before: Some(1012), ..d() },
        InstanceFilter { changes_since: Some(1010), deleted: Some(false), ..d() },
        InstanceFilter { deleted: Some(true), ..d() },
        InstanceFilter { deleted: Some(false), ..d() },
        InstanceFilter { uuids: Some(some_uuids), ..d() },
        InstanceFilter { uuids: Some(vec![]), ..d() },
        InstanceFilter { locked: Some(true), ..d() },
        InstanceFilter { locked: Some(false), ..d() },
        InstanceFilter { tags: vec!["a".into()], ..d() },
        InstanceFilter { tags: vec!["a".into(), "b".into()], ..d() },
        InstanceFilter { tags_any: vec!["a".into(), "c".into()], ..d() },
        InstanceFilter { not_tags: vec!["a".into(), "b".into()], ..d() },
        InstanceFilter { not_tags: vec!["d".into()], ..d() },
        InstanceFilter { not_tags_any: vec!["b".into(), "c".into()], ..d() },
        InstanceFilter {
            tags: vec!["a".into()],
            not_tags_any: vec!["d".into()],
            tags_any: vec!["b".into(), "c".into()],
            ..d()
        },
        InstanceFilter { name_regex: Some("web".into()), ..d() },
        InstanceFilter { name_regex: Some("^web-1".into()), ..d() },
        InstanceFilter { name_regex: Some("b-?[12]$".into()), ..d() },
        InstanceFilter { name_regex: Some("ï".into()), ..d() },
        InstanceFilter { name_regex: Some("(".into()), ..d() },
        InstanceFilter { name_regex: Some("e".into()), project_id: Some("p3".into()), ..d() },
        exact("key_name", "k1"),
        exact("hostname", "H-c"),
        exact("config_drive", "True"),
        exact("access_ip_v4", "10.0.0.2"),
        exact("access_ip_v6", "::1"),
        exact("user_id", "u1"),
        exact("display_name", "web-10"),
        exact("locked_by", "admin"),
        InstanceFilter {
            project_id: Some("p1".into()),
            vm_states: Some(vec!["active".into(), "stopped".into()]),
            locked: Some(false),
            tags_any: vec!["a".into(), "b".into()],
            ..d()
        },
    ]
}

fn listings(store: &dyn CellStore) {
    let mut rng = Rng(0x5eed_ce11_u64.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let rows: Vec<Instance> = (0..300).map(|_| random_instance(&mut rng)).collect();
    for chunk in rows.chunks(100) {
        let outcomes = write(store, chunk.iter().cloned().map(CellOp::PutInstance).collect());
        assert!(outcomes.iter().all(|o| *o == CellOutcome::Done));
    }

    // limit 0 returns nothing.
    let zero = InstanceQuery { filter: InstanceFilter::default(), sort: vec![], marker: None, limit: 0, brief: false };
    assert!(store.list_instances(&zero).expect("limit 0").is_empty());

    // Every sort key, both directions, over all rows (deleted ones too,
    // through changes-since) and over the default (not deleted) rows.
    let everything = InstanceFilter { changes_since: Some(i64::MIN + 1), ..Default::default() };
    for k in SORT_KEYS {
        for ascending in [true, false] {
            let sort = vec![key(k, ascending)];
            let got = uuids(&list(store, everything.clone(), sort.clone()));
            assert_eq!(got, expected(&rows, &everything, &sort), "sort by {k} ascending={ascending}");
            let got = uuids(&list(store, InstanceFilter::default(), sort.clone()));
            assert_eq!(got, expected(&rows, &InstanceFilter::default(), &sort), "sort by {k} ascending={ascending}");
        }
    }
    // No keys: uuid ascending.
    assert_eq!(
        uuids(&list(store, InstanceFilter::default(), vec![])),
        expected(&rows, &InstanceFilter::default(), &[])
    );

    // Multi-key sorts with mixed directions.
    let mut sorts: Vec<Vec<SortKey>> = vec![
        vec![key("created_at", false)],
        vec![key("created_at", false), key("display_name", true)],
        vec![key("host", true), key("launched_at", false), key("task_state", true)],
        vec![key("display_description", false), key("updated_at", true)],
        vec![key("vm_state", true), key("locked", false), key("image_ref", false), key("key_name", true)],
    ];
    for _ in 0..12 {
        let n = 1 + rng.below(3);
        sorts.push((0..n).map(|_| key(rng.pick::<&str>(SORT_KEYS), rng.chance(50))).collect());
    }

    for filter in filters(&rows) {
        for sort in sorts.iter().take(3) {
            let want = expected(&rows, &filter, sort);
            assert_eq!(uuids(&list(store, filter.clone(), sort.clone())), want, "filter {filter:?} sort {sort:?}");
        }
        // Limits apply after filtering (also when a regex is applied in chunks).
        let sort = vec![key("created_at", false)];
        let want = expected(&rows, &filter, &sort);
        let query = InstanceQuery { filter: filter.clone(), sort, marker: None, limit: 5, brief: false };
        let got = uuids(&store.list_instances(&query).expect("limited"));
        assert_eq!(got, want.iter().take(5).copied().collect::<Vec<_>>(), "limit 5 with {filter:?}");
    }

    // Paging with markers concatenates to exactly the full order.
    let regex = InstanceFilter { name_regex: Some("w|d".into()), ..Default::default() };
    let deleted = InstanceFilter { deleted: Some(true), ..Default::default() };
    let project = InstanceFilter { project_id: Some("p2".into()), ..Default::default() };
    for sort in &sorts {
        for filter in [&InstanceFilter::default(), &regex, &deleted, &project] {
            let want = expected(&rows, filter, sort);
            let got = paged(store, filter, sort, 7);
            assert_eq!(got.len(), want.len(), "paging {filter:?} by {sort:?}: no duplicate, no gap");
            assert_eq!(got, want, "paging {filter:?} by {sort:?}");
        }
    }
    for k in SORT_KEYS {
        let sort = vec![key(k, rng.chance(50))];
        assert_eq!(
            paged(store, &InstanceFilter::default(), &sort, 7),
            expected(&rows, &InstanceFilter::default(), &sort)
        );
    }
    // Paging with a regex that matches few rows (chunked scans cross pages).
    let rare = InstanceFilter { name_regex: Some("^zeta$".into()), ..Default::default() };
    let sort = vec![key("updated_at", true)];
    assert_eq!(paged(store, &rare, &sort, 2), expected(&rows, &rare, &sort));

    // A marker past the end returns nothing; a marker of a row that no
    // longer exists still pages from its position.
    let sort = vec![key("created_at", true)];
    let full = expected(&rows, &InstanceFilter::default(), &sort);
    let pos = full.len() / 2;
    let at = rows.iter().find(|r| r.uuid == full[pos]).expect("row");
    let marker = Marker { values: vec![at.sort_value("created_at")], uuid: at.uuid };
    let query = InstanceQuery {
        filter: InstanceFilter::default(),
        sort: sort.clone(),
        marker: Some(marker),
        limit: 1000,
        brief: false,
    };
    write(store, vec![CellOp::PurgeInstance(at.uuid)]);
    assert_eq!(uuids(&store.list_instances(&query).expect("after gone marker")), full[pos + 1..].to_vec());
    write(store, vec![CellOp::PutInstance(at.clone())]);

    // A bad exact column is an error.
    let mut bad = InstanceFilter::default();
    bad.exact.insert("spec".into(), "x".into());
    let query = InstanceQuery { filter: bad, sort: vec![], marker: None, limit: 10, brief: false };
    assert!(store.list_instances(&query).is_err(), "unknown exact column");

    purge_all(store, &uuids(&rows));
}

// ---------------------------------------------------------------------------
// Services, compute nodes, actions, faults.

fn service(host: &str, binary: &str, at: i64) -> Service {
    Service {
        id: 0,
        uuid: Uuid::new_v4(),
        host: host.to_owned(),
        binary: binary.to_owned(),
        disabled: false,
        disabled_reason: None,
        forced_down: false,
        last_seen_up: Some(at),
        created_at: at,
        updated_at: Some(at),
    }
}

fn node(host: &str, uuid: Uuid, vcpus: i64, at: i64) -> ComputeNode {
    ComputeNode {
        id: 0,
        uuid,
        host: host.to_owned(),
        hypervisor_hostname: format!("{host}.local"),
        hypervisor_type: "fake".into(),
        hypervisor_version: 1000,
        host_ip: "192.0.2.1".into(),
        vcpus,
        memory_mb: 4096,
        local_gb: 100,
        cpu_info: "{}".into(),
        created_at: at,
        updated_at: Some(at),
    }
}

fn id_of(outcome: &CellOutcome) -> i64 {
    match outcome {
        CellOutcome::Id(id) => *id,
        other => panic!("expected an id, got {other:?}"),
    }
}

fn services_and_nodes(store: &dyn CellStore) {
    assert!(store.services().expect("services").is_empty());
    let s1 = service("h1", "nova-compute", 10);
    let s2 = service("h2", "nova-compute", 10);
    let s3 = service("h1", "nova-conductor", 10);
    let out = write(
        store,
        vec![CellOp::EnsureService(s1.clone()), CellOp::EnsureService(s2.clone()), CellOp::EnsureService(s3.clone())],
    );
    let ids: Vec<i64> = out.iter().map(id_of).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "distinct ids {ids:?}");
    let by_id = |id: i64| store.services().expect("services").into_iter().find(|s| s.id == id).expect("service");
    assert_eq!(by_id(ids[0]), Service { id: ids[0], ..s1.clone() }, "every field round-trips");

    // Operator flags; EnsureService keeps them and the original uuid.
    let flags = CellOp::UpdateService {
        id: ids[0],
        disabled: Some(true),
        disabled_reason: Some(Some("maintenance".into())),
        forced_down: Some(true),
        updated_at: 11,
    };
    assert_eq!(write_one(store, flags), CellOutcome::Done);
    let mut again = service("h1", "nova-compute", 20);
    again.disabled = false;
    again.forced_down = false;
    assert_eq!(write_one(store, CellOp::EnsureService(again)), CellOutcome::Id(ids[0]), "stable id");
    let got = by_id(ids[0]);
    assert_eq!(got.uuid, s1.uuid, "the uuid is kept");
    assert!(got.disabled && got.forced_down && got.disabled_reason.as_deref() == Some("maintenance"), "{got:?}");
    assert_eq!((got.last_seen_up, got.updated_at, got.created_at), (Some(20), Some(20), 10));
    // None leaves a flag, Some(None) clears the reason.
    let partial = CellOp::UpdateService {
        id: ids[0],
        disabled: None,
        disabled_reason: Some(None),
        forced_down: Some(false),
        updated_at: 21,
    };
    assert_eq!(write_one(store, partial), CellOutcome::Done);
    let got = by_id(ids[0]);
    assert!(got.disabled && !got.forced_down && got.disabled_reason.is_none() && got.updated_at == Some(21));
    let missing = CellOp::UpdateService {
        id: 987_654,
        disabled: Some(true),
        disabled_reason: None,
        forced_down: None,
        updated_at: 1,
    };
    assert_eq!(write_one(store, missing), CellOutcome::Missing);

    // Heartbeats touch only the named hosts' nova-compute services.
    assert_eq!(
        write_one(store, CellOp::Heartbeat { hosts: vec!["h1".into(), "nowhere".into()], at: 50 }),
        CellOutcome::Done
    );
    assert_eq!(by_id(ids[0]).last_seen_up, Some(50));
    assert_eq!(by_id(ids[1]).last_seen_up, Some(10), "other hosts are not touched");
    assert_eq!(by_id(ids[2]).last_seen_up, Some(10), "other binaries are not touched");
    assert_eq!(write_one(store, CellOp::Heartbeat { hosts: vec![], at: 60 }), CellOutcome::Done);

    // Compute nodes: upsert by uuid with a stable id.
    let (u1, u2) = (Uuid::new_v4(), Uuid::new_v4());
    let n1 = node("h1", u1, 8, 10);
    let out =
        write(store, vec![CellOp::EnsureComputeNode(n1.clone()), CellOp::EnsureComputeNode(node("h2", u2, 4, 10))]);
    let (n1_id, n2_id) = (id_of(&out[0]), id_of(&out[1]));
    assert_ne!(n1_id, n2_id);
    let nodes = store.compute_nodes().expect("nodes");
    assert_eq!(nodes.iter().find(|n| n.uuid == u1), Some(&ComputeNode { id: n1_id, ..n1.clone() }));
    let mut bigger = node("h1", u1, 16, 30);
    bigger.created_at = 30;
    assert_eq!(write_one(store, CellOp::EnsureComputeNode(bigger)), CellOutcome::Id(n1_id));
    let got = store.compute_nodes().expect("nodes").into_iter().find(|n| n.uuid == u1).expect("node");
    assert_eq!((got.vcpus, got.updated_at, got.created_at), (16, Some(30), 10), "updated, creation time kept");

    // Deleting a service takes its host's compute nodes with it.
    assert_eq!(write_one(store, CellOp::DeleteService(ids[0])), CellOutcome::Done);
    assert_eq!(write_one(store, CellOp::DeleteService(ids[0])), CellOutcome::Missing);
    let left: Vec<i64> = store.services().expect("services").iter().map(|s| s.id).collect();
    assert_eq!(left, vec![ids[1], ids[2]]);
    let nodes: Vec<Uuid> = store.compute_nodes().expect("nodes").iter().map(|n| n.uuid).collect();
    assert_eq!(nodes, vec![u2], "h1's node went with its service");
    // A re-registered host gets a new id, never a reused one.
    let back = id_of(&write_one(store, CellOp::EnsureService(service("h1", "nova-compute", 70))));
    assert!(!ids.contains(&back), "ids are not reused: {back} in {ids:?}");
    let explicit = Service { id: 5000, ..service("h9", "nova-compute", 80) };
    assert_eq!(write_one(store, CellOp::EnsureService(explicit)), CellOutcome::Id(5000), "explicit ids on insert");
    let next = id_of(&write_one(store, CellOp::EnsureService(service("h10", "nova-compute", 90))));
    assert!(next > 5000, "ids continue after an explicit one: {next}");
}

fn actions_and_faults(store: &dyn CellStore) {
    let (x, y) = (Uuid::new_v4(), Uuid::new_v4());
    write(store, vec![CellOp::PutInstance(minimal(x, "x", 1)), CellOp::PutInstance(minimal(y, "y", 1))]);
    let create = action(x, "req-1", "create", 100, vec![event("schedule", 100)]);
    assert_eq!(write_one(store, CellOp::StartAction(create.clone())), CellOutcome::Done);
    let dup = action(x, "req-1", "delete", 101, vec![event("other", 101)]);
    assert_eq!(write_one(store, CellOp::StartAction(dup)), CellOutcome::Done, "starting twice is a no-op");
    assert_eq!(store.instance_actions(&x).expect("actions"), vec![create.clone()]);

    let ops = vec![
        CellOp::FinishEvent {
            instance: x,
            request_id: "req-1".into(),
            event: "schedule".into(),
            result: "Success".into(),
            traceback: None,
            at: 105,
        },
        CellOp::StartEvent {
            instance: x,
            request_id: "req-1".into(),
            event: "build".into(),
            host: Some("h2".into()),
            at: 106,
        },
        CellOp::StartEvent {
            instance: x,
            request_id: "req-unknown".into(),
            event: "build".into(),
            host: None,
            at: 106,
        },
        CellOp::StartAction(action(x, "req-2", "stop", 200, vec![])),
    ];
    assert_eq!(write(store, ops), vec![CellOutcome::Done, CellOutcome::Done, CellOutcome::Missing, CellOutcome::Done]);
    let actions = store.instance_actions(&x).expect("actions");
    assert_eq!(
        actions.iter().map(|a| a.request_id.as_str()).collect::<Vec<_>>(),
        vec!["req-1", "req-2"],
        "oldest first"
    );
    let events = &actions[0].events;
    assert_eq!(events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), vec!["schedule", "build"], "start order");
    assert_eq!((events[0].finish_time, events[0].result.as_deref()), (Some(105), Some("Success")));
    assert_eq!(events[1].host.as_deref(), Some("h2"));
    assert_eq!(actions[0].message, None);

    let failed = CellOp::FinishEvent {
        instance: x,
        request_id: "req-1".into(),
        event: "build".into(),
        result: "Error".into(),
        traceback: Some("Traceback: boom".into()),
        at: 110,
    };
    assert_eq!(write_one(store, failed), CellOutcome::Done);
    let actions = store.instance_actions(&x).expect("actions");
    let build = &actions[0].events[1];
    assert_eq!(
        (build.finish_time, build.result.as_deref(), build.traceback.as_deref()),
        (Some(110), Some("Error"), Some("Traceback: boom"))
    );
    assert_eq!(actions[0].message.as_deref(), Some("Error"), "a failed event marks its action");
    assert_eq!(actions[1].message, None);
    let unknown = CellOp::FinishEvent {
        instance: x,
        request_id: "req-2".into(),
        event: "nope".into(),
        result: "Success".into(),
        traceback: None,
        at: 111,
    };
    assert_eq!(write_one(store, unknown), CellOutcome::Missing);
    assert!(store.instance_actions(&y).expect("actions").is_empty());

    // Faults: the latest per instance.
    let ops = vec![
        CellOp::AddFault(fault(x, 500, 10)),
        CellOp::AddFault(fault(x, 400, 30)),
        CellOp::AddFault(fault(x, 409, 20)),
        CellOp::AddFault(fault(y, 500, 5)),
    ];
    write(store, ops);
    let mut got = store.faults(&[x, y, Uuid::new_v4()]).expect("faults");
    got.sort_by_key(|f| f.instance_uuid);
    let mut want = vec![fault(x, 400, 30), fault(y, 500, 5)];
    want.sort_by_key(|f| f.instance_uuid);
    assert_eq!(got, want);
    assert!(store.faults(&[]).expect("no uuids").is_empty());
    purge_all(store, &[x, y]);
}

fn tasks_and_counts(store: &dyn CellStore) {
    let mut rows = Vec::new();
    for (i, (task, host, deleted)) in [
        (Some("spawning"), Some("ha"), false),
        (Some("spawning"), Some("ha"), true),
        (Some("deleting"), Some("hb"), false),
        (None, Some("ha"), false),
        (Some("rebooting"), None, false),
        (None, None, false),
        (None, Some("hc"), true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut row = minimal(Uuid::new_v4(), &format!("t{i}"), i as i64);
        row.task_state = task.map(str::to_owned);
        row.host = host.map(str::to_owned);
        row.deleted = deleted;
        row.deleted_at = deleted.then_some(9);
        rows.push(row);
    }
    write(store, rows.iter().cloned().map(CellOp::PutInstance).collect());
    let mut got = uuids(&store.instances_with_tasks(&["spawning", "deleting"]).expect("tasks"));
    got.sort();
    let mut want = vec![rows[0].uuid, rows[2].uuid];
    want.sort();
    assert_eq!(got, want, "not deleted, task state in the list");
    assert!(store.instances_with_tasks(&[]).expect("no states").is_empty());
    let mut counts = store.instance_counts_by_host().expect("counts");
    counts.sort();
    assert_eq!(counts, vec![("ha".to_owned(), 2), ("hb".to_owned(), 1)]);
    purge_all(store, &uuids(&rows));
    assert!(store.instance_counts_by_host().expect("counts").is_empty());
}

fn batches(store: &dyn CellStore) {
    let existing = minimal(Uuid::new_v4(), "existing", 1);
    write(store, vec![CellOp::PutInstance(existing.clone())]);
    let (a, b) = (minimal(Uuid::new_v4(), "a", 2), minimal(Uuid::new_v4(), "b", 3));
    let out = write(
        store,
        vec![
            CellOp::PutInstance(a.clone()),
            CellOp::InsertInstance(existing.clone()),
            CellOp::UpdateInstance {
                uuid: existing.uuid,
                expect: Expect { vm_states: vec!["active".into()], ..Default::default() },
                update: InstanceUpdate { progress: Some(99), updated_at: 5, ..Default::default() },
            },
            CellOp::UpdateInstance {
                uuid: Uuid::new_v4(),
                expect: Expect::default(),
                update: InstanceUpdate::default(),
            },
            CellOp::PutInstance(b.clone()),
        ],
    );
    assert_eq!(
        out,
        vec![CellOutcome::Done, CellOutcome::Mismatch, CellOutcome::Mismatch, CellOutcome::Missing, CellOutcome::Done]
    );
    assert_eq!(get(store, a.uuid), Some(a.clone()), "a batch with a mismatch commits its other ops");
    assert_eq!(get(store, b.uuid), Some(b.clone()));
    assert_eq!(get(store, existing.uuid), Some(existing.clone()));

    // A database error fails the whole batch: nothing of it is committed.
    let first = service("hx", "nova-compute", 1);
    write(store, vec![CellOp::EnsureService(first.clone())]);
    let c = minimal(Uuid::new_v4(), "c", 4);
    let clash = Service { uuid: first.uuid, ..service("hy", "nova-compute", 2) };
    let result = store.write(&[CellOp::PutInstance(c.clone()), CellOp::EnsureService(clash)]);
    assert!(result.is_err(), "a duplicate service uuid is a database error: {result:?}");
    assert_eq!(get(store, c.uuid), None, "a failed batch is rolled back whole");
    assert!(store.services().expect("services").iter().all(|s| s.host != "hy"));
    purge_all(store, &[existing.uuid, a.uuid, b.uuid]);
}

/// The batches a conductor pass writes (rows and `create` actions, then
/// the hand-out), with clashes, mismatches and missing rows mixed in:
/// PostgreSQL runs each kind of op in one statement, and every op must
/// get the outcome it gets alone, with the same rows left behind.
fn boot_batches(store: &dyn CellStore) {
    let (a, b, e) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut unfinished_first = event("x", 1);
    let mut finished = event("x", 2);
    finished.finish_time = Some(3);
    finished.result = Some("Success".into());
    unfinished_first.host = None;
    let e_action = action(e, "req-e", "create", 1, vec![unfinished_first, finished]);
    write(store, vec![CellOp::PutInstance(minimal(e, "e", 1)), CellOp::StartAction(e_action.clone())]);

    let (row_a, row_b) = (minimal(a, "a", 100), minimal(b, "b", 100));
    let mut scheduled = event("schedule", 100);
    scheduled.details = Some("first".into());
    let a_action = action(a, "req-a", "create", 100, vec![scheduled, event("extra", 101)]);
    let b_action = action(b, "req-b", "create", 100, vec![event("schedule", 100)]);
    let out = write(
        store,
        vec![
            CellOp::InsertInstance(row_a.clone()),
            CellOp::StartAction(a_action.clone()),
            CellOp::InsertInstance(minimal(e, "e-again", 5)),
            CellOp::StartAction(action(e, "req-e", "delete", 5, vec![event("other", 5)])),
            CellOp::AddFault(fault(e, 500, 5)),
            CellOp::InsertInstance(row_b.clone()),
            CellOp::StartAction(b_action.clone()),
        ],
    );
    use CellOutcome::{Done, Mismatch, Missing};
    assert_eq!(out, vec![Done, Done, Mismatch, Done, Done, Done, Done]);
    assert_eq!(get(store, a), Some(row_a.clone()));
    assert_eq!(get(store, b), Some(row_b.clone()));
    assert_eq!(
        get(store, e).map(|r| r.spec.display_name),
        Some("e".to_owned()),
        "an insert over a row changes nothing"
    );
    assert_eq!(store.instance_actions(&a).expect("actions"), vec![a_action.clone()], "events in start order");
    assert_eq!(store.instance_actions(&e).expect("actions"), vec![e_action], "an existing action is left as it is");

    let from = |task: &str| Expect { task_states: vec![Some(task.into())], ..Default::default() };
    let spawning = InstanceUpdate {
        task_state: Some(Some("spawning".into())),
        host: Some(Some("h1".into())),
        updated_at: 110,
        ..Default::default()
    };
    let active = InstanceUpdate {
        vm_state: Some("active".into()),
        task_state: Some(None),
        updated_at: 120,
        ..Default::default()
    };
    let finish = |instance: Uuid, request: &str, name: &str, result: &str, at: i64| CellOp::FinishEvent {
        instance,
        request_id: request.into(),
        event: name.into(),
        result: result.into(),
        traceback: (result == "Error").then(|| "boom".to_owned()),
        at,
    };
    let start = |instance: Uuid, request: &str, at: i64| CellOp::StartEvent {
        instance,
        request_id: request.into(),
        event: "build".into(),
        host: Some("h1".into()),
        at,
    };
    let out = write(
        store,
        vec![
            CellOp::UpdateInstance { uuid: a, expect: from("scheduling"), update: spawning.clone() },
            finish(a, "req-a", "schedule", "Success", 110),
            start(a, "req-a", 110),
            CellOp::UpdateInstance { uuid: b, expect: from("spawning"), update: spawning.clone() },
            finish(b, "req-b", "nope", "Success", 110),
            start(b, "req-unknown", 110),
            finish(e, "req-e", "x", "Success", 110),
            CellOp::UpdateInstance { uuid: Uuid::new_v4(), expect: Expect::default(), update: active.clone() },
            CellOp::UpdateInstance { uuid: a, expect: from("spawning"), update: active },
            finish(a, "req-a", "build", "Error", 120),
            CellOp::Heartbeat { hosts: vec!["nobody".into()], at: 120 },
        ],
    );
    assert_eq!(out, vec![Done, Done, Done, Mismatch, Missing, Missing, Done, Missing, Done, Done, Done]);
    let a_now = get(store, a).expect("a");
    assert_eq!(
        (a_now.vm_state.as_str(), a_now.task_state.as_deref(), a_now.host.as_deref(), a_now.updated_at),
        ("active", None, Some("h1"), Some(120)),
        "two updates of one row in one batch apply in order"
    );
    assert_eq!(get(store, b), Some(row_b), "a mismatch changes nothing");
    let actions = store.instance_actions(&a).expect("actions");
    let events: Vec<_> = actions[0]
        .events
        .iter()
        .map(|ev| (ev.event.as_str(), ev.finish_time, ev.result.as_deref(), ev.host.as_deref()))
        .collect();
    assert_eq!(
        events,
        vec![
            ("schedule", Some(110), Some("Success"), Some("host-1")),
            ("extra", None, None, Some("host-1")),
            ("build", Some(120), Some("Error"), Some("h1")),
        ]
    );
    assert_eq!((actions[0].message.as_deref(), actions[0].updated_at), (Some("Error"), Some(120)));
    let b_actions = store.instance_actions(&b).expect("actions");
    assert_eq!((b_actions[0].events.len(), b_actions[0].updated_at), (1, Some(100)), "nothing started or finished");
    let e_events = &store.instance_actions(&e).expect("actions")[0].events;
    assert_eq!(
        e_events.iter().map(|ev| ev.finish_time).collect::<Vec<_>>(),
        vec![Some(110), Some(3)],
        "the unfinished event of that name is finished"
    );
    purge_all(store, &[a, b, e]);
}
