//! Timing of the engine alone on the `berth bench candidates` shapes
//! (`cargo run --release -p berth-candidates --example perf`).

use std::time::Instant;

use berth_candidates::{find, GroupPolicy, Request, RequestGroup};
use berth_model::{Change, ChangeSet, Inventory, ProviderRow, State, Uuid};

fn inv(total: i64, reserved: i64, min: i64, max: i64, step: i64, ratio: f64) -> Inventory {
    Inventory { total, reserved, min_unit: min, max_unit: max, step_size: step, allocation_ratio: ratio }
}

struct Builder {
    set: ChangeSet,
    next: i64,
}

impl Builder {
    fn provider(
        &mut self,
        parent: Option<(Uuid, Uuid)>,
        invs: Vec<(&str, Inventory)>,
        traits: &[&str],
        aggs: &[Uuid],
    ) -> Uuid {
        self.next += 1;
        let uuid = Uuid::from_u128(0x7000_0000_0000_4000_8000_0000_0000_0000 + self.next as u128);
        let root = parent.map_or(uuid, |(_, r)| r);
        self.set.push(Change::PutProvider {
            row: ProviderRow {
                id: self.next,
                uuid,
                name: format!("p{}", self.next),
                generation: 0,
                parent: parent.map(|(p, _)| p),
                root,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        self.set.push(Change::SetInventories {
            provider: uuid,
            inventories: invs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        });
        self.set.push(Change::SetProviderTraits {
            provider: uuid,
            traits: traits.iter().map(|t| (*t).to_owned()).collect(),
        });
        self.set.push(Change::SetProviderAggregates { provider: uuid, aggregates: aggs.iter().copied().collect() });
        uuid
    }
}

fn group(suffix: &str, res: &[(&str, i64)], required: &[&str]) -> RequestGroup {
    RequestGroup {
        suffix: suffix.into(),
        resources: res.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        required_traits: required.iter().map(|t| vec![(*t).to_owned()]).collect(),
        ..Default::default()
    }
}

#[allow(clippy::print_stdout)]
fn time(label: &str, state: &State, req: &Request, n: usize) {
    let mut samples = Vec::new();
    let mut count = 0;
    for _ in 0..n {
        let t = Instant::now();
        let c = find(state, req).expect("ok");
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
        count = c.allocation_requests.len();
    }
    samples.sort_by(|a, b| a.partial_cmp(b).expect("num"));
    println!(
        "{label}: {count} candidates, median {:.3} ms, p99 {:.3} ms",
        samples[n / 2],
        samples[(n * 99 / 100).min(n - 1)]
    );
}

fn flat(n: usize) -> (State, Request) {
    let mut b = Builder { set: ChangeSet::new(), next: 0 };
    let agg = Uuid::from_u128(42);
    for _ in 0..n {
        b.provider(
            None,
            vec![
                ("VCPU", inv(32, 0, 1, 32, 1, 16.0)),
                ("MEMORY_MB", inv(131072, 0, 1, 131072, 1, 1.5)),
                ("DISK_GB", inv(2048, 0, 1, 2048, 1, 1.0)),
            ],
            &["HW_CPU_X86_AVX2"],
            &[agg],
        );
    }
    let mut state = State::with_standard_data(0);
    state.apply(&b.set);
    let mut g = group("", &[("VCPU", 1), ("DISK_GB", 10), ("MEMORY_MB", 256)], &["HW_CPU_X86_AVX2"]);
    g.member_of = vec![vec![agg]];
    (state, Request { groups: vec![g], nested_aware: true, ..Default::default() })
}

fn nested(n: usize) -> (State, Request) {
    let mut b = Builder { set: ChangeSet::new(), next: 0 };
    b.set.push(Change::PutTrait { id: 100_000, name: "CUSTOM_FOO".into(), created_at: 0 });
    for _ in 0..n {
        let root =
            b.provider(None, vec![("DISK_GB", inv(20480, 0, 1, 20480, 1, 1.0))], &["COMPUTE_VOLUME_MULTI_ATTACH"], &[]);
        let numa0 = b.provider(
            Some((root, root)),
            vec![("VCPU", inv(4, 2, 1, 4, 1, 1.0)), ("MEMORY_MB", inv(2048, 0, 512, 2048, 256, 1.0))],
            &["HW_NUMA_ROOT"],
            &[],
        );
        b.provider(Some((numa0, root)), vec![("FPGA", inv(1, 0, 1, 1, 1, 1.0))], &[], &[]);
        b.provider(Some((numa0, root)), vec![("VGPU", inv(8, 0, 1, 8, 1, 1.0))], &[], &[]);
        let numa1 = b.provider(
            Some((root, root)),
            vec![("VCPU", inv(4, 0, 1, 4, 1, 1.0)), ("MEMORY_MB", inv(2048, 0, 256, 1024, 1, 1.0))],
            &["HW_NUMA_ROOT", "CUSTOM_FOO"],
            &[],
        );
        b.provider(Some((numa1, root)), vec![("FPGA", inv(1, 0, 1, 1, 1, 1.0))], &[], &[]);
        b.provider(Some((numa1, root)), vec![("FPGA", inv(1, 0, 1, 1, 1, 1.0))], &[], &[]);
    }
    let mut state = State::with_standard_data(0);
    state.apply(&b.set);
    let req = Request {
        groups: vec![
            group("", &[("DISK_GB", 10)], &["COMPUTE_VOLUME_MULTI_ATTACH"]),
            group("_COMPUTE", &[("VCPU", 1), ("MEMORY_MB", 256)], &["CUSTOM_FOO"]),
            group("_FPGA", &[("FPGA", 1)], &[]),
        ],
        group_policy: Some(GroupPolicy::None),
        same_subtrees: vec![vec!["_COMPUTE".into(), "_FPGA".into()]],
        nested_aware: true,
        ..Default::default()
    };
    (state, req)
}

#[allow(clippy::print_stdout)]
fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    if only == "nested" {
        let (state, mut req) = nested(1000);
        time("nested 1000x7", &state, &req, 1000);
        req.limit = Some(1);
        time("nested 1000x7 limit=1", &state, &req, 1000);
        req.limit = None;
        req.max_candidates = Some(100);
        time("nested 1000x7 max_candidates=100", &state, &req, 1000);
        req.max_candidates = Some(1500);
        time("nested 1000x7 max_candidates=1500", &state, &req, 200);
        req.max_candidates = Some(100_000);
        time("nested 1000x7 max_candidates=100000", &state, &req, 200);
        return;
    }
    if only == "flat100k" {
        let (state, mut req) = flat(100_000);
        time("flat 100000", &state, &req, 50);
        req.limit = Some(1);
        time("flat 100000 limit=1", &state, &req, 50);
        return;
    }
    let (state, req) = flat(1000);
    time("flat 1000", &state, &req, 200);
    let (state, mut req) = nested(1000);
    time("nested 1000x7", &state, &req, 100);
    req.limit = Some(1);
    time("nested 1000x7 limit=1", &state, &req, 100);
    let (state, mut req) = flat(100_000);
    time("flat 100000", &state, &req, 20);
    req.limit = Some(1);
    time("flat 100000 limit=1", &state, &req, 20);
}
