//! Scheduler pipeline tests on small worlds built from change sets.

use std::collections::{BTreeMap, HashSet};

use berth_compute_model::plan::{plan_add_aggregate_host, plan_create_aggregate};
use berth_compute_model::{
    CellMapping, ComputeChange, ComputeNodeRef, Flavor, GroupPolicy, HostMapping, RequestSpec, ServerGroup, World,
    WorldChangeSet,
};
use berth_model::{Change, ChangeSet, Inventory, ProviderRow};
use uuid::Uuid;

use super::*;

struct Health {
    down: HashSet<String>,
    failures: HashMap<String, i64>,
}

impl HostHealth for Health {
    fn is_up(&self, host: &str) -> bool {
        !self.down.contains(host)
    }
    fn is_disabled(&self, _host: &str) -> bool {
        false
    }
    fn failed_builds(&self, host: &str) -> i64 {
        self.failures.get(host).copied().unwrap_or(0)
    }
}

fn healthy() -> Health {
    Health { down: HashSet::new(), failures: HashMap::new() }
}

fn inv(total: i64) -> Inventory {
    Inventory { total, reserved: 0, min_unit: 1, max_unit: total, step_size: 1, allocation_ratio: 1.0 }
}

struct Cloud {
    world: World,
    cell: Uuid,
    roots: Vec<Uuid>,
}

impl Cloud {
    /// `rams[i]` MiB and 8 VCPU per host `h{i}`, all mapped to one cell.
    fn new(rams: &[i64]) -> Self {
        let mut world = World::with_standard_data(0);
        let cell = Uuid::new_v4();
        let mut set = WorldChangeSet::new();
        set.compute(ComputeChange::PutCell(CellMapping {
            uuid: cell,
            name: "cell1".into(),
            database_connection: String::new(),
            disabled: false,
        }));
        world.apply(&set);
        let mut cloud = Cloud { world, cell, roots: Vec::new() };
        for ram in rams {
            cloud.add_host(*ram, true);
        }
        cloud
    }

    fn add_host(&mut self, ram: i64, mapped: bool) -> Uuid {
        let cell = self.cell;
        self.add_host_in(ram, mapped, cell, true)
    }

    /// A host `h{i}` in `cell`, with local disk or without (`DISK_GB`
    /// then only from a sharing provider).
    fn add_host_in(&mut self, ram: i64, mapped: bool, cell: Uuid, disk: bool) -> Uuid {
        let idx = self.roots.len();
        let uuid = Uuid::new_v4();
        let host = format!("h{idx}");
        let mut placement = ChangeSet::new();
        placement.push(Change::PutProvider {
            row: ProviderRow {
                id: idx as i64 + 1,
                uuid,
                name: host.clone(),
                generation: 0,
                parent: None,
                root: uuid,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        placement.push(Change::SetInventories {
            provider: uuid,
            inventories: [("VCPU".to_owned(), inv(8)), ("MEMORY_MB".to_owned(), inv(ram))]
                .into_iter()
                .chain(disk.then(|| ("DISK_GB".to_owned(), inv(100))))
                .collect(),
        });
        let mut set = WorldChangeSet::from(placement);
        if mapped {
            set.compute(ComputeChange::PutHostMapping(HostMapping { host: host.clone(), cell, owner: None }));
        }
        set.compute(ComputeChange::PutComputeNode(ComputeNodeRef { uuid, host: host.clone(), node: host, cell }));
        self.world.apply(&set);
        self.roots.push(uuid);
        uuid
    }

    fn group(&mut self, policy: GroupPolicy) -> Uuid {
        let uuid = Uuid::new_v4();
        let mut set = WorldChangeSet::new();
        set.compute(ComputeChange::PutServerGroup(ServerGroup {
            uuid,
            name: "g".into(),
            project_id: "p".into(),
            user_id: "u".into(),
            policy,
            max_server_per_host: None,
            members: vec![],
            created_at: 0,
        }));
        self.world.apply(&set);
        uuid
    }
}

fn spec(ram: i64) -> RequestSpec {
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
            memory_mb: ram,
            vcpus: 1,
            root_gb: 1,
            ephemeral_gb: 0,
            swap: 0,
            rxtx_factor: 1.0,
            vcpu_weight: None,
            disabled: false,
            is_public: true,
            description: None,
            extra_specs: BTreeMap::new(),
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

fn run(
    cloud: &Cloud,
    spec: &RequestSpec,
    n: usize,
    health: &Health,
    config: &Config,
) -> Result<Vec<InstanceChoices>, NoValidHost> {
    let instances: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let request = ScheduleRequest::new(spec, &instances, 7);
    schedule(&cloud.world, &request, health, config).map(|(choices, _)| choices)
}

#[test]
fn ram_weigher_prefers_the_freest_host_with_alternates() {
    let cloud = Cloud::new(&[1024, 4096, 2048]);
    let choices = run(&cloud, &spec(512), 1, &healthy(), &Config::default()).expect("placed");
    let roots: Vec<Uuid> = choices[0].choices.iter().map(|c| c.root).collect();
    assert_eq!(roots, vec![cloud.roots[1], cloud.roots[2], cloud.roots[0]], "selection then max_attempts-1 alternates");
}

#[test]
fn multi_create_consumes_capacity_as_it_goes() {
    let cloud = Cloud::new(&[1024, 1024]);
    let choices = run(&cloud, &spec(1024), 2, &healthy(), &Config::default()).expect("placed");
    assert_ne!(choices[0].choices[0].root, choices[1].choices[0].root, "the last slot of a host is not planned twice");
    assert!(run(&cloud, &spec(1024), 3, &healthy(), &Config::default()).is_err(), "all or nothing");
}

#[test]
fn anti_affinity_spreads_and_fails_when_hosts_run_out() {
    let mut cloud = Cloud::new(&[8192, 8192, 8192]);
    let group = cloud.group(GroupPolicy::AntiAffinity);
    let mut s = spec(256);
    s.group = Some(group);
    let choices = run(&cloud, &s, 3, &healthy(), &Config::default()).expect("placed");
    let hosts: HashSet<Uuid> = choices.iter().map(|c| c.choices[0].root).collect();
    assert_eq!(hosts.len(), 3);
    assert!(run(&cloud, &s, 4, &healthy(), &Config::default()).is_err());
}

#[test]
fn affinity_keeps_a_request_together() {
    let mut cloud = Cloud::new(&[8192, 8192, 8192]);
    let group = cloud.group(GroupPolicy::Affinity);
    let mut s = spec(256);
    s.group = Some(group);
    let choices = run(&cloud, &s, 3, &healthy(), &Config::default()).expect("placed");
    let hosts: HashSet<Uuid> = choices.iter().map(|c| c.choices[0].root).collect();
    assert_eq!(hosts.len(), 1);
}

#[test]
fn down_unmapped_and_disabled_hosts_are_never_chosen() {
    let mut cloud = Cloud::new(&[1024, 1024]);
    let unmapped = cloud.add_host(65536, false);
    let health = Health { down: ["h0".to_owned()].into(), failures: HashMap::new() };
    let choices = run(&cloud, &spec(512), 1, &health, &Config::default()).expect("placed");
    let roots: Vec<Uuid> = choices[0].choices.iter().map(|c| c.root).collect();
    assert_eq!(roots, vec![cloud.roots[1]], "h0 is down and h2 has no host mapping");
    assert!(!roots.contains(&unmapped));
    // COMPUTE_STATUS_DISABLED on h1 excludes it in placement itself.
    let mut set = ChangeSet::new();
    set.push(Change::SetProviderTraits {
        provider: cloud.roots[1],
        traits: [berth_compute_model::COMPUTE_STATUS_DISABLED.to_owned()].into(),
    });
    cloud.world.apply(&set.into());
    assert!(run(&cloud, &spec(512), 1, &health, &Config::default()).is_err());
}

#[test]
fn build_failures_push_a_host_down_the_ranking() {
    let cloud = Cloud::new(&[4096, 2048]);
    let health = Health { down: HashSet::new(), failures: [("h0".to_owned(), 1)].into() };
    let choices = run(&cloud, &spec(512), 1, &health, &Config::default()).expect("placed");
    assert_eq!(choices[0].choices[0].root, cloud.roots[1]);
}

#[test]
fn availability_zone_maps_to_aggregates() {
    let mut cloud = Cloud::new(&[4096, 1024]);
    let (set, agg) = plan_create_aggregate(&cloud.world, "a1", Some("az1"), Uuid::new_v4(), 0).expect("agg");
    cloud.world.apply(&set);
    let (set, _) = plan_add_aggregate_host(&cloud.world, agg.id, "h1", 0).expect("add");
    cloud.world.apply(&set);
    let mut s = spec(512);
    s.availability_zone = Some("az1".into());
    let choices = run(&cloud, &s, 1, &healthy(), &Config::default()).expect("placed");
    assert_eq!(choices[0].choices.iter().map(|c| c.root).collect::<Vec<_>>(), vec![cloud.roots[1]]);
    s.availability_zone = Some("nova".into());
    let choices = run(&cloud, &s, 1, &healthy(), &Config::default()).expect("placed");
    assert_eq!(choices[0].choices.iter().map(|c| c.root).collect::<Vec<_>>(), vec![cloud.roots[0]]);
}

#[test]
fn host_subset_size_spreads_identical_requests() {
    let cloud = Cloud::new(&[4096, 4096, 4096, 4096]);
    let config = Config { host_subset_size: 4, ..Config::default() };
    let mut picked = HashSet::new();
    for seed in 0..40 {
        let instances = [Uuid::new_v4()];
        let s512 = spec(512);
        let request = ScheduleRequest::new(&s512, &instances, seed);
        let (choices, _) = schedule(&cloud.world, &request, &healthy(), &config).expect("placed");
        picked.insert(choices[0].choices[0].root);
    }
    assert_eq!(picked.len(), 4, "every one of the equally good hosts gets picked by some seed");
}

/// With fewer placement results than hosts, each request looks at a
/// window starting at a host drawn from its seed: different seeds see
/// different hosts, and every host can be chosen.
#[test]
fn limited_results_sample_a_moving_window() {
    let cloud = Cloud::new(&[4096; 20]);
    let config = Config { max_placement_results: 3, max_attempts: 3, ..Config::default() };
    let (mut chosen, mut selected) = (HashSet::new(), HashSet::new());
    for seed in 0..200u64 {
        let instances = [Uuid::new_v4()];
        let s512 = spec(512);
        let request = ScheduleRequest::new(&s512, &instances, seed);
        let (choices, stats) = schedule(&cloud.world, &request, &healthy(), &config).expect("placed");
        assert_eq!(stats.candidates, 3, "the limit holds");
        assert_eq!(choices[0].choices.len(), 3, "selection and alternates come from the window");
        chosen.extend(choices[0].choices.iter().map(|c| c.root));
        selected.insert(choices[0].choices[0].root);
    }
    assert_eq!(chosen.len(), 20, "every host is reachable through some window");
    assert!(selected.len() >= 15, "selections spread over the cloud: {}", selected.len());
}

/// A `DISK_GB` pool shared (`MISC_SHARES_VIA_AGGREGATE`) with `hosts`
/// through one placement aggregate; returns its uuid.
fn share_disk(cloud: &mut Cloud, hosts: &[Uuid]) -> Uuid {
    let (pool, aggregate) = (Uuid::new_v4(), Uuid::new_v4());
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider {
        row: ProviderRow {
            id: 10_000,
            uuid: pool,
            name: "ceph".into(),
            generation: 0,
            parent: None,
            root: pool,
            created_at: 0,
            updated_at: 0,
        },
        expected_generation: None,
    });
    set.push(Change::SetInventories { provider: pool, inventories: [("DISK_GB".to_owned(), inv(1000))].into() });
    set.push(Change::SetProviderTraits { provider: pool, traits: ["MISC_SHARES_VIA_AGGREGATE".to_owned()].into() });
    for provider in hosts.iter().chain([&pool]) {
        set.push(Change::SetProviderAggregates { provider: *provider, aggregates: [aggregate].into() });
    }
    cloud.world.apply(&set.into());
    pool
}

/// Hosts without local disk take `DISK_GB` from a sharing provider: the
/// host of a candidate is the compute node, never the pool, although the
/// pool's `DISK_GB` comes first in the candidate.
#[test]
fn a_shared_disk_pool_is_never_the_host() {
    let mut cloud = Cloud::new(&[]);
    let cell = cloud.cell;
    let hosts = [cloud.add_host_in(4096, true, cell, false), cloud.add_host_in(2048, true, cell, false)];
    let pool = share_disk(&mut cloud, &hosts);
    let choices = run(&cloud, &spec(512), 1, &healthy(), &Config::default()).expect("placed on a diskless host");
    let choice = &choices[0].choices;
    assert_eq!(choice.iter().map(|c| c.root).collect::<Vec<_>>(), hosts.to_vec(), "both hosts, the freest first");
    let first = &choice[0].allocations;
    assert_eq!(first[&pool]["DISK_GB"], 1, "the disk comes from the pool: {first:?}");
    assert_eq!(first[&hosts[0]]["MEMORY_MB"], 512);
    assert_eq!(host_root(&cloud.world, first.keys()), Some(hosts[0]));
}

/// An instance that takes from a sharing provider takes it for every
/// host whose candidates use it: the next instance of the same run sees
/// the pool as taken on the other host too, not only on the one chosen.
#[test]
fn a_shared_pool_taken_by_one_instance_is_taken_for_every_host() {
    let mut cloud = Cloud::new(&[]);
    let cell = cloud.cell;
    let hosts = [cloud.add_host_in(4096, true, cell, false), cloud.add_host_in(2048, true, cell, false)];
    let pool = share_disk(&mut cloud, &hosts);
    let mut set = ChangeSet::new();
    set.push(Change::SetInventories { provider: pool, inventories: [("DISK_GB".to_owned(), inv(1))].into() });
    cloud.world.apply(&set.into());
    let one = run(&cloud, &spec(512), 1, &healthy(), &Config::default()).expect("one root disk fits the pool");
    assert_eq!(one[0].choices[0].root, hosts[0]);
    let two = run(&cloud, &spec(512), 2, &healthy(), &Config::default());
    assert!(two.is_err(), "the pool holds one root disk, whichever host the second instance would go to: {two:?}");
}

/// A move names the instance's cell: hosts of other cells are never
/// considered, even when they would win the weighing.
#[test]
fn a_request_pinned_to_a_cell_stays_in_it() {
    let mut cloud = Cloud::new(&[1024]);
    let other = Uuid::new_v4();
    let mut set = WorldChangeSet::new();
    set.compute(ComputeChange::PutCell(CellMapping {
        uuid: other,
        name: "cell2".into(),
        database_connection: String::new(),
        disabled: false,
    }));
    cloud.world.apply(&set);
    let big = cloud.add_host_in(65536, true, other, true);
    let instances = [Uuid::new_v4()];
    let s512 = spec(512);
    let (choices, _) =
        schedule(&cloud.world, &ScheduleRequest::new(&s512, &instances, 1), &healthy(), &Config::default())
            .expect("placed");
    assert_eq!(choices[0].choices[0].root, big, "unpinned, the big host of the other cell wins");
    let request = ScheduleRequest { cell: Some(cloud.cell), ..ScheduleRequest::new(&s512, &instances, 1) };
    let (choices, _) = schedule(&cloud.world, &request, &healthy(), &Config::default()).expect("placed");
    assert_eq!(choices[0].choices.iter().map(|c| c.root).collect::<Vec<_>>(), vec![cloud.roots[0]]);
    let request = ScheduleRequest { cell: Some(Uuid::new_v4()), ..ScheduleRequest::new(&s512, &instances, 1) };
    assert!(schedule(&cloud.world, &request, &healthy(), &Config::default()).is_err(), "no host in that cell");
}

/// The alternates are the next best hosts of the selected host's cell,
/// however far down the ranking they lie.
#[test]
fn alternates_from_the_selected_cell_are_found_past_the_best_few() {
    let mut cloud = Cloud::new(&[60_000, 1000, 2000, 3000, 4000, 5000]);
    let other = Uuid::new_v4();
    let mut set = WorldChangeSet::new();
    set.compute(ComputeChange::PutCell(CellMapping {
        uuid: other,
        name: "cell2".into(),
        database_connection: String::new(),
        disabled: false,
    }));
    cloud.world.apply(&set);
    for ram in 50_000..50_050 {
        cloud.add_host_in(ram, true, other, true);
    }
    let choices = run(&cloud, &spec(512), 1, &healthy(), &Config::default()).expect("placed");
    let roots: Vec<Uuid> = choices[0].choices.iter().map(|c| c.root).collect();
    assert_eq!(roots, vec![cloud.roots[0], cloud.roots[5], cloud.roots[4]], "best host, then its cell's next best");
}

/// Selections whose claims are in flight count as taken: the next
/// decision weighs the host without them and picks another, and a host
/// they fill is not proposed at all.
#[test]
fn claims_in_flight_count_as_taken() {
    let cloud = Cloud::new(&[4096, 4000]);
    let instances = [Uuid::new_v4()];
    let s512 = spec(512);
    let pick = |in_flight: &[AllocationMap]| {
        let request = ScheduleRequest { in_flight, ..ScheduleRequest::new(&s512, &instances, 3) };
        schedule(&cloud.world, &request, &healthy(), &Config::default()).map(|(c, _)| c[0].choices[0].root)
    };
    assert_eq!(pick(&[]), Ok(cloud.roots[0]), "the freest host");
    let on_h0 = |ram: i64| {
        let mut map = AllocationMap::new();
        map.entry(cloud.roots[0]).or_default().extend([("VCPU".to_owned(), 1), ("MEMORY_MB".to_owned(), ram)]);
        map
    };
    assert_eq!(pick(&[on_h0(512)]), Ok(cloud.roots[1]), "h0 less free while a claim on it is in flight");
    let full = [on_h0(4096)];
    let request = ScheduleRequest { in_flight: &full, ..ScheduleRequest::new(&s512, &instances, 3) };
    let (choices, _) = schedule(&cloud.world, &request, &healthy(), &Config::default()).expect("placed");
    assert_eq!(choices[0].choices.iter().map(|c| c.root).collect::<Vec<_>>(), vec![cloud.roots[1]], "h0 is full");
}

/// The hosts for which one instance forced to the host schedules.
fn forced_one_by_one(cloud: &Cloud, spec: &RequestSpec, health: &Health, config: &Config) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for root in &cloud.roots {
        let host = cloud.world.compute.compute_nodes[root].host.clone();
        let mut forced = spec.clone();
        forced.force_host = Some(host.clone());
        let instances = [Uuid::new_v4()];
        if schedule(&cloud.world, &ScheduleRequest::new(&forced, &instances, 1), health, config).is_ok() {
            out.push(host);
        }
    }
    out.sort();
    out
}

#[test]
fn eligible_hosts_are_the_hosts_a_forced_run_accepts_past_the_result_limit() {
    // 20 hosts of 4 GiB, one of 1 GiB, one unmapped, one down.
    let mut cloud = Cloud::new(&[4096; 20]);
    cloud.add_host(1024, true);
    cloud.add_host(65536, false);
    let health = Health { down: ["h3".to_owned()].into(), failures: HashMap::new() };
    // A limit of 3 placement results must not hide the other hosts.
    let config = Config { max_placement_results: 3, ..Config::default() };
    for ram in [512, 2048, 8192] {
        let expected = forced_one_by_one(&cloud, &spec(ram), &health, &config);
        let got = eligible_hosts(&cloud.world, &spec(ram), &health, 0, &config).unwrap_or_default();
        assert_eq!(got, expected, "{ram} MiB");
    }
    let small = eligible_hosts(&cloud.world, &spec(512), &health, 0, &config).expect("hosts");
    assert_eq!(small.len(), 20, "21 mapped hosts, h3 down: {small:?}");
    assert!(!small.contains(&"h3".to_owned()) && !small.contains(&"h21".to_owned()));
    let big = eligible_hosts(&cloud.world, &spec(2048), &health, 0, &config).expect("hosts");
    assert_eq!(big.len(), 19, "the 1 GiB host h20 is out too: {big:?}");
    assert!(eligible_hosts(&cloud.world, &spec(8192), &health, 0, &config).unwrap_or_default().is_empty());
}
