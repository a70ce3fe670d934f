//! Brute-force reference for the allocation-candidate engine and a property
//! test comparing the two on thousands of small random provider forests,
//! plus focused scenario tests (sharing, nested, granular, errors).
//!
//! The reference enumerates, for every anchor root, every assignment of
//! providers to every requested resource of every group, and filters the
//! complete assignments with all of upstream's rules at once — no staging,
//! no pruning — so it shares no structure with the engine.

use std::collections::{BTreeMap, BTreeSet};

use berth_candidates::{
    find, find_exhaustive, Candidates, CandidatesError, GroupPolicy, Request, RequestGroup, SHARING_TRAIT,
};
use berth_model::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, Provider, ProviderRow, State, Uuid};

// ---------------------------------------------------------------- helpers

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(0x1000_0000_0000_4000_8000_0000_0000_0000 + n)
}

fn agg(n: u128) -> Uuid {
    Uuid::from_u128(0xa000_0000_0000_4000_8000_0000_0000_0000 + n)
}

const RCS: [&str; 3] = ["VCPU", "MEMORY_MB", "DISK_GB"];
const TRAITS: [&str; 3] = ["CUSTOM_A", "CUSTOM_B", "CUSTOM_C"];

/// Description of one provider for building a State.
#[derive(Clone, Default)]
struct Spec {
    parent: Option<usize>,
    inventories: Vec<(&'static str, Inventory)>,
    used: Vec<(&'static str, i64)>,
    traits: Vec<&'static str>,
    aggs: Vec<u128>,
}

fn inv(total: i64) -> Inventory {
    Inventory { total, reserved: 0, min_unit: 1, max_unit: total, step_size: 1, allocation_ratio: 1.0 }
}

fn build(specs: &[Spec]) -> State {
    let mut state = State::with_standard_data(0);
    let mut set = ChangeSet::new();
    for (i, name) in TRAITS.iter().enumerate() {
        set.push(Change::PutTrait { id: 100_000 + i as i64, name: (*name).to_owned(), created_at: 0 });
    }
    let mut roots: Vec<Uuid> = Vec::new();
    let mut allocations = AllocationMap::new();
    for (i, spec) in specs.iter().enumerate() {
        let id = uuid(i as u128);
        let root = match spec.parent {
            Some(p) => roots[p],
            None => id,
        };
        roots.push(root);
        set.push(Change::PutProvider {
            row: ProviderRow {
                id: i as i64 + 1,
                uuid: id,
                name: format!("rp{i}"),
                generation: 0,
                parent: spec.parent.map(|p| uuid(p as u128)),
                root,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        set.push(Change::SetInventories {
            provider: id,
            inventories: spec.inventories.iter().map(|(rc, inv)| ((*rc).to_owned(), inv.clone())).collect(),
        });
        set.push(Change::SetProviderTraits {
            provider: id,
            traits: spec.traits.iter().map(|t| (*t).to_owned()).collect(),
        });
        set.push(Change::SetProviderAggregates {
            provider: id,
            aggregates: spec.aggs.iter().map(|a| agg(*a)).collect(),
        });
        if !spec.used.is_empty() {
            allocations.insert(id, spec.used.iter().map(|(rc, n)| ((*rc).to_owned(), *n)).collect());
        }
    }
    if !allocations.is_empty() {
        set.push(Change::PutConsumer {
            row: ConsumerRow {
                uuid: uuid(9999),
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 0,
                consumer_type: None,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
            allocations,
        });
    }
    state.apply(&set);
    state
}

fn group(suffix: &str, resources: &[(&str, i64)]) -> RequestGroup {
    RequestGroup {
        suffix: suffix.to_owned(),
        resources: resources.iter().map(|(rc, n)| ((*rc).to_owned(), *n)).collect(),
        ..Default::default()
    }
}

fn request(groups: Vec<RequestGroup>) -> Request {
    Request { groups, nested_aware: true, ..Default::default() }
}

/// One way a group can be satisfied: (resources placed, providers used).
type GroupOption = (Vec<(usize, String, i64)>, BTreeSet<usize>);

/// Canonical form of one allocation request: sorted allocations and mappings.
type Canon = (Vec<(Uuid, String, i64)>, Vec<(String, Vec<Uuid>)>);

fn canon_engine(c: &Candidates) -> (Vec<Canon>, BTreeSet<Uuid>) {
    let mut out: Vec<Canon> = c
        .allocation_requests
        .iter()
        .map(|ar| {
            let mut allocs: Vec<(Uuid, String, i64)> = ar
                .allocations
                .iter()
                .flat_map(|(rp, res)| res.iter().map(move |(rc, n)| (*rp, rc.to_string(), *n)))
                .collect();
            allocs.sort();
            let mut mappings: Vec<(String, Vec<Uuid>)> =
                ar.mappings.iter().map(|(s, rps)| (s.to_string(), rps.to_vec())).collect();
            mappings.sort();
            (allocs, mappings)
        })
        .collect();
    out.sort();
    (out, c.provider_summaries.iter().map(|s| s.uuid).collect())
}

// ------------------------------------------------------------- reference

struct Ref<'a> {
    provs: Vec<&'a Provider>,
}

impl<'a> Ref<'a> {
    fn pos(&self, u: Uuid) -> Option<usize> {
        self.provs.iter().position(|p| p.uuid() == u)
    }
    fn root(&self, i: usize) -> usize {
        self.pos(self.provs[i].row.root).unwrap_or(i)
    }
    fn has_trees(&self) -> bool {
        self.provs.iter().any(|p| p.row.parent.is_some())
    }
    fn sharing(&self, i: usize) -> bool {
        self.provs[i].traits.contains(SHARING_TRAIT)
    }
    fn anchors_of(&self, i: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for (j, q) in self.provs.iter().enumerate() {
            if q.aggregates.iter().any(|a| self.provs[i].aggregates.contains(a)) {
                out.insert(self.root(j));
            }
        }
        out
    }
    fn cap_ok(&self, i: usize, rc: &str, amount: i64) -> bool {
        let p = self.provs[i];
        let Some(inv) = p.inventories.get(rc) else {
            return false;
        };
        let cap = ((inv.total - inv.reserved) as f64 * inv.allocation_ratio) as i64;
        p.used(rc) + amount <= cap && amount >= inv.min_unit && amount <= inv.max_unit && amount % inv.step_size == 0
    }
    fn in_aggs(&self, i: usize, member_of: &[Vec<Uuid>]) -> bool {
        member_of.iter().all(|any| any.iter().any(|a| self.provs[i].aggregates.contains(a)))
    }
    fn in_any(&self, i: usize, aggs: &[Uuid]) -> bool {
        aggs.iter().any(|a| self.provs[i].aggregates.contains(a))
    }
    fn traits_of(&self, i: usize) -> &BTreeSet<String> {
        &self.provs[i].traits
    }
    fn is_anc_or_self(&self, anc: usize, mut i: usize) -> bool {
        loop {
            if i == anc {
                return true;
            }
            match self.provs[i].row.parent.and_then(|u| self.pos(u)) {
                Some(p) => i = p,
                None => return false,
            }
        }
    }

    /// Every way group `g` can be satisfied for anchor `a`: (resources, providers).
    fn options(&self, g: &RequestGroup, a: usize, multi: bool) -> Vec<GroupOption> {
        let n = self.provs.len();
        let tree = g.in_tree.map(|u| self.root(self.pos(u).expect("checked")));
        let mut out = Vec::new();
        if !multi {
            for p in 0..n {
                let anchored = self.root(p) == a || (self.sharing(p) && self.anchors_of(p).contains(&a));
                if !anchored {
                    continue;
                }
                let res_ok = if g.resources.is_empty() {
                    !g.required_traits.is_empty() || !g.member_of.is_empty()
                } else {
                    g.resources.iter().all(|(rc, amt)| self.cap_ok(p, rc, *amt))
                        && tree.is_none_or(|t| self.root(p) == t)
                };
                let t = self.traits_of(p);
                let filt = g.required_traits.iter().all(|any| any.iter().any(|x| t.contains(x)))
                    && self.in_aggs(p, &g.member_of)
                    && !self.in_any(p, &g.forbidden_aggregates)
                    && !g.forbidden_traits.iter().any(|x| t.contains(x));
                if res_ok && filt {
                    let res = g.resources.iter().map(|(rc, amt)| (p, rc.clone(), *amt)).collect();
                    out.push((res, BTreeSet::from([p])));
                }
            }
            return out;
        }
        let any_sharing = (0..n).any(|i| self.sharing(i));
        let k = g.resources.len();
        let total = n.pow(k as u32);
        'assign: for code in 0..total {
            let mut c = code;
            let mut choice = Vec::with_capacity(k);
            for _ in 0..k {
                choice.push(c % n);
                c /= n;
            }
            for ((rc, amt), p) in g.resources.iter().zip(&choice) {
                let p = *p;
                if !self.cap_ok(p, rc, *amt) || tree.is_some_and(|t| self.root(p) != t) {
                    continue 'assign;
                }
                let via_tree = self.root(p) == a;
                let via_share = any_sharing
                    && tree.is_none()
                    && self.sharing(p)
                    && (g.member_of.is_empty() || self.in_aggs(p, &g.member_of))
                    && self.anchors_of(p).contains(&a);
                if !(via_tree || via_share) {
                    continue 'assign;
                }
                if !(g.member_of.is_empty() || self.in_aggs(p, &g.member_of) || self.in_aggs(a, &g.member_of)) {
                    continue 'assign;
                }
                if self.in_any(p, &g.forbidden_aggregates) || self.in_any(a, &g.forbidden_aggregates) {
                    continue 'assign;
                }
                if g.forbidden_traits.iter().any(|x| self.traits_of(p).contains(x)) {
                    continue 'assign;
                }
            }
            let ok = g
                .required_traits
                .iter()
                .all(|any| any.iter().any(|x| choice.iter().any(|p| self.traits_of(*p).contains(x))));
            if !ok {
                continue;
            }
            let res = g.resources.iter().zip(&choice).map(|((rc, amt), p)| (*p, rc.clone(), *amt)).collect();
            out.push((res, choice.iter().copied().collect()));
        }
        out
    }
}

/// Reference answer (no limit / randomisation): canonical requests and summary uuids.
fn reference(state: &State, req: &Request) -> Result<(Vec<Canon>, BTreeSet<Uuid>), CandidatesError> {
    let r = Ref { provs: state.providers_in_order().collect() };
    let n = r.provs.len();
    let empty = Ok((Vec::new(), BTreeSet::new()));
    for t in req.root_required.iter().chain(&req.root_forbidden) {
        if !state.traits.contains_key(t) {
            return Err(CandidatesError::TraitNotFound(t.clone()));
        }
    }
    for g in &req.groups {
        for (rc, _) in &g.resources {
            if !state.resource_classes.contains_key(rc) {
                return Err(CandidatesError::ResourceClassNotFound(rc.clone()));
            }
        }
        if !g.member_of.is_empty() && !(0..n).any(|i| r.in_aggs(i, &g.member_of)) {
            return empty;
        }
        for t in g.required_traits.iter().flatten().chain(&g.forbidden_traits) {
            if !state.traits.contains_key(t) {
                return Err(CandidatesError::TraitNotFound(t.clone()));
            }
        }
        if let Some(u) = g.in_tree {
            if r.pos(u).is_none() {
                return empty;
            }
        }
    }
    let has_trees = r.has_trees();
    let any_sharing = (0..n).any(|i| r.sharing(i));
    let mut found: BTreeSet<Canon> = BTreeSet::new();
    let mut found_res: Vec<Vec<usize>> = Vec::new();
    for a in 0..n {
        if r.provs[a].row.parent.is_some() {
            continue;
        }
        if !req.root_required.iter().all(|t| r.traits_of(a).contains(t))
            || req.root_forbidden.iter().any(|t| r.traits_of(a).contains(t))
        {
            continue;
        }
        let opts: Vec<_> =
            req.groups.iter().map(|g| r.options(g, a, !g.use_same_provider() && (has_trees || any_sharing))).collect();
        let total: usize = opts.iter().map(|o| o.len()).product();
        'combo: for code in 0..total {
            let mut c = code;
            let mut pick = Vec::new();
            for o in &opts {
                pick.push(&o[c % o.len()]);
                c /= o.len();
            }
            if req.group_policy == Some(GroupPolicy::Isolate) {
                let gran: Vec<usize> = req
                    .groups
                    .iter()
                    .zip(&pick)
                    .filter(|(g, _)| g.use_same_provider())
                    .map(|(_, p)| *p.1.iter().next().expect("one provider"))
                    .collect();
                let distinct: BTreeSet<usize> = gran.iter().copied().collect();
                if distinct.len() != gran.len() {
                    continue;
                }
            }
            for st in &req.same_subtrees {
                let rps: BTreeSet<usize> = req
                    .groups
                    .iter()
                    .zip(&pick)
                    .filter(|(g, _)| st.contains(&g.suffix))
                    .flat_map(|(_, p)| p.1.iter().copied())
                    .collect();
                if rps.len() > 1 && !rps.iter().any(|top| rps.iter().all(|x| r.is_anc_or_self(*top, *x))) {
                    continue 'combo;
                }
            }
            let mut sums: BTreeMap<(usize, String), i64> = BTreeMap::new();
            for p in &pick {
                for (rp, rc, amt) in &p.0 {
                    *sums.entry((*rp, rc.clone())).or_default() += amt;
                }
            }
            for ((rp, rc), amt) in &sums {
                let p = r.provs[*rp];
                let inv = &p.inventories[rc];
                let cap = ((inv.total - inv.reserved) as f64 * inv.allocation_ratio) as i64;
                if p.used(rc) + amt > cap || *amt > inv.max_unit {
                    continue 'combo;
                }
            }
            if !req.nested_aware && has_trees {
                let rps: BTreeSet<usize> = sums.keys().map(|(rp, _)| *rp).collect();
                let roots: BTreeSet<usize> = rps.iter().map(|rp| r.root(*rp)).collect();
                if rps.len() != roots.len() {
                    continue;
                }
            }
            let allocs: Vec<(Uuid, String, i64)> =
                sums.iter().map(|((rp, rc), amt)| (r.provs[*rp].uuid(), rc.clone(), *amt)).collect();
            let mut allocs = allocs;
            allocs.sort();
            let mut mappings: Vec<(String, Vec<Uuid>)> = req
                .groups
                .iter()
                .zip(&pick)
                .map(|(g, p)| {
                    let mut v: Vec<Uuid> = p.1.iter().map(|i| r.provs[*i].uuid()).collect();
                    v.sort();
                    (g.suffix.clone(), v)
                })
                .collect();
            mappings.sort();
            if found.insert((allocs, mappings)) {
                found_res.push(sums.keys().map(|(rp, _)| *rp).collect());
            }
        }
    }
    let used: BTreeSet<usize> = found_res.iter().flatten().copied().collect();
    let summaries: BTreeSet<Uuid> = if !req.nested_aware && has_trees {
        used.iter().map(|i| r.provs[*i].uuid()).collect()
    } else {
        let roots: BTreeSet<usize> = used.iter().map(|i| r.root(*i)).collect();
        (0..n).filter(|i| roots.contains(&r.root(*i))).map(|i| r.provs[i].uuid()).collect()
    };
    Ok((found.into_iter().collect(), summaries))
}

// ------------------------------------------------------------ generators

fn random_forest(rng: &mut Rng) -> Vec<Spec> {
    let mut specs = Vec::new();
    let trees = rng.range(1, 4);
    for _ in 0..trees {
        let root = specs.len();
        let size = rng.range(1, 4) as usize;
        for k in 0..size {
            let parent = if k == 0 { None } else { Some(root + rng.below(k as u64) as usize) };
            let mut spec = Spec { parent, ..Default::default() };
            for rc in RCS {
                if rng.chance(60) {
                    let total = rng.range(1, 6);
                    let inv = Inventory {
                        total,
                        reserved: rng.range(0, 1),
                        min_unit: if rng.chance(85) { 1 } else { 2 },
                        max_unit: rng.range(2, 6),
                        step_size: if rng.chance(80) { 1 } else { 2 },
                        allocation_ratio: [1.0, 1.5, 2.0][rng.below(3) as usize],
                    };
                    spec.inventories.push((rc, inv));
                    if rng.chance(20) {
                        spec.used.push((rc, rng.range(1, 3)));
                    }
                }
            }
            for t in TRAITS {
                if rng.chance(30) {
                    spec.traits.push(t);
                }
            }
            if rng.chance(15) {
                spec.traits.push(SHARING_TRAIT);
            }
            for a in 0..2 {
                if rng.chance(30) {
                    spec.aggs.push(a);
                }
            }
            specs.push(spec);
        }
    }
    specs
}

fn random_group(rng: &mut Rng, suffix: &str, n_provs: usize) -> RequestGroup {
    let mut g = RequestGroup { suffix: suffix.to_owned(), ..Default::default() };
    let resourceless = !suffix.is_empty() && rng.chance(10);
    if !resourceless {
        let k = rng.range(1, 2) as usize;
        let first = rng.below(3) as usize;
        for j in 0..k {
            g.resources.push((RCS[(first + j) % 3].to_owned(), rng.range(1, 2)));
        }
    }
    if rng.chance(30) || resourceless {
        let first = rng.below(3) as usize;
        let any: Vec<String> = (0..rng.range(1, 2) as usize).map(|j| TRAITS[(first + j) % 3].to_owned()).collect();
        g.required_traits.push(any);
    }
    if rng.chance(20) {
        g.forbidden_traits.push(TRAITS[rng.below(3) as usize].to_owned());
    }
    if rng.chance(20) {
        let any: Vec<Uuid> = if rng.chance(50) { vec![agg(0), agg(1)] } else { vec![agg(rng.below(2) as u128)] };
        g.member_of.push(any);
    }
    if rng.chance(10) {
        g.forbidden_aggregates.push(agg(rng.below(2) as u128));
    }
    if rng.chance(10) {
        g.in_tree = Some(uuid(rng.below(n_provs as u64) as u128));
    }
    g
}

fn random_request(rng: &mut Rng, n_provs: usize) -> Request {
    let mut groups = Vec::new();
    let unsuffixed = rng.chance(75);
    if unsuffixed {
        groups.push(random_group(rng, "", n_provs));
    }
    let granular = rng.range(if unsuffixed { 0 } else { 1 }, 3);
    for j in 0..granular {
        groups.push(random_group(rng, &format!("_{j}"), n_provs));
    }
    let mut req = request(groups);
    req.group_policy = match rng.below(3) {
        0 => None,
        1 => Some(GroupPolicy::None),
        _ => Some(GroupPolicy::Isolate),
    };
    if granular >= 2 && rng.chance(40) {
        req.same_subtrees.push((0..granular).filter(|_| rng.chance(80)).map(|j| format!("_{j}")).collect());
    }
    if rng.chance(15) {
        let t = TRAITS[rng.below(3) as usize].to_owned();
        if rng.chance(50) {
            req.root_required.push(t);
        } else {
            req.root_forbidden.push(t);
        }
    }
    req.nested_aware = rng.chance(80);
    if rng.chance(10) {
        req.limit = Some(rng.range(1, 3) as usize);
    }
    req
}

// ----------------------------------------------------------------- tests

#[test]
fn engine_matches_reference_on_random_forests() {
    let mut rng = Rng(0x5eed);
    let mut nonempty = 0;
    for case in 0..4000 {
        let specs = random_forest(&mut rng);
        let state = build(&specs);
        let req = random_request(&mut rng, specs.len());
        let expected = reference(&state, &req);
        let got = find(&state, &req);
        match (expected, got) {
            (Err(e), Err(g)) => assert_eq!(e, g, "case {case}"),
            (Ok((exp, exp_sums)), Ok(got)) => {
                let (got_c, got_sums) = canon_engine(&got);
                if let Some(limit) = req.limit {
                    assert_eq!(got_c.len(), exp.len().min(limit), "case {case}: limited count");
                    for c in &got_c {
                        assert!(exp.contains(c), "case {case}: limited result not in reference");
                    }
                    let roots: BTreeSet<Uuid> = got
                        .allocation_requests
                        .iter()
                        .flat_map(|ar| ar.allocations.iter().map(|(rp, _)| state.providers[rp].row.root))
                        .collect();
                    for s in &got.provider_summaries {
                        assert!(roots.contains(&s.root) && exp_sums.contains(&s.uuid), "case {case}: summary");
                    }
                } else {
                    assert_eq!(got_c, exp, "case {case}: allocation requests differ for {req:#?}");
                    assert_eq!(got_sums, exp_sums, "case {case}: summaries differ");
                }
                if !got_c.is_empty() {
                    nonempty += 1;
                }
            }
            (e, g) => panic!("case {case}: reference {e:?} vs engine {g:?}"),
        };
    }
    // The generator must exercise real matches, not only empty answers.
    assert!(nonempty > 800, "only {nonempty} non-empty cases");
}

/// The tree-at-a-time early stop (limit, no sharing) must give exactly the
/// exhaustive search's answer: same requests, same order, same summaries.
#[test]
fn early_stop_matches_exhaustive_search_exactly() {
    let mut rng = Rng(0xe4_1157);
    let mut limited_nonempty_unshared = 0;
    for case in 0..4000 {
        let specs = random_forest(&mut rng);
        let state = build(&specs);
        let mut req = random_request(&mut rng, specs.len());
        if rng.chance(70) {
            req.limit = Some(rng.range(1, 4) as usize);
        }
        let fast = find(&state, &req);
        let full = find_exhaustive(&state, &req);
        assert_eq!(fast, full, "case {case}: {req:#?}");
        let shared = state.providers.values().any(|p| p.traits.contains(SHARING_TRAIT));
        if req.limit.is_some() && !shared && fast.is_ok_and(|c| !c.allocation_requests.is_empty()) {
            limited_nonempty_unshared += 1;
        }
    }
    assert!(limited_nonempty_unshared > 300, "only {limited_nonempty_unshared} limited non-empty unshared cases");
}

#[test]
fn deterministic_and_randomized_with_seed() {
    let specs: Vec<Spec> = (0..6).map(|_| Spec { inventories: vec![("VCPU", inv(4))], ..Default::default() }).collect();
    let state = build(&specs);
    let req = request(vec![group("", &[("VCPU", 1)])]);
    let a = find(&state, &req).unwrap();
    let b = find(&state, &req).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.allocation_requests.len(), 6);
    // Creation order when not randomised.
    let firsts: Vec<Uuid> = a.allocation_requests.iter().map(|ar| ar.allocations[0].0).collect();
    assert_eq!(firsts, (0..6).map(uuid).collect::<Vec<_>>());
    let mut r = req.clone();
    r.randomize_seed = Some(7);
    let c = find(&state, &r).unwrap();
    assert_eq!(canon_engine(&c), canon_engine(&a));
    drop(c);
    r.limit = Some(2);
    let d = find(&state, &r).unwrap();
    assert_eq!(d.allocation_requests.len(), 2);
    assert_eq!(d.provider_summaries.len(), 2);
}

#[test]
fn sharing_provider_serves_anchors_in_its_aggregate() {
    // cn0, cn1 in agg0 with VCPU; ss2 shares DISK_GB via agg0; cn3 not in agg.
    let mut ss = Spec { inventories: vec![("DISK_GB", inv(100))], aggs: vec![0], ..Default::default() };
    ss.traits.push(SHARING_TRAIT);
    let cn = |aggs: Vec<u128>| Spec { inventories: vec![("VCPU", inv(8))], aggs, ..Default::default() };
    let state = build(&[cn(vec![0]), cn(vec![0]), ss, cn(vec![])]);
    let req = request(vec![group("", &[("VCPU", 1), ("DISK_GB", 10)])]);
    let got = find(&state, &req).unwrap();
    assert_eq!(got.allocation_requests.len(), 2);
    for ar in &got.allocation_requests {
        assert_eq!(ar.allocations.len(), 2);
        assert_eq!(ar.mappings[0].1.len(), 2);
    }
    let sums: BTreeSet<Uuid> = got.provider_summaries.iter().map(|s| s.uuid).collect();
    assert_eq!(sums, BTreeSet::from([uuid(0), uuid(1), uuid(2)]));
    // DISK only: the sharing provider is returned once (de-duplicated anchors).
    let disk_req = request(vec![group("", &[("DISK_GB", 10)])]);
    let only_disk = find(&state, &disk_req).unwrap();
    assert_eq!(only_disk.allocation_requests.len(), 1);
    assert_eq!(only_disk.provider_summaries.len(), 1);
}

#[test]
fn nested_tree_spreads_unsuffixed_group_and_old_versions_exclude_it() {
    // cn0 (VCPU) with children numa1 (MEMORY_MB) and numa2 (MEMORY_MB).
    let cn = Spec { inventories: vec![("VCPU", inv(8))], ..Default::default() };
    let numa = Spec { parent: Some(0), inventories: vec![("MEMORY_MB", inv(1024))], ..Default::default() };
    let state = build(&[cn, numa.clone(), numa]);
    let mut req = request(vec![group("", &[("VCPU", 1), ("MEMORY_MB", 512)])]);
    let got = find(&state, &req).unwrap();
    assert_eq!(got.allocation_requests.len(), 2);
    assert_eq!(got.provider_summaries.len(), 3);
    assert_eq!(got.provider_summaries[1].parent, Some(uuid(0)));
    assert_eq!(got.provider_summaries[1].root, uuid(0));
    drop(got);
    req.nested_aware = false;
    let old = find(&state, &req).unwrap();
    assert!(old.allocation_requests.is_empty());
    assert!(old.provider_summaries.is_empty());
}

#[test]
fn granular_isolate_and_same_subtree() {
    // cn0 with two PFs (children) each with SRIOV_NET_VF:2.
    let cn = Spec { inventories: vec![("VCPU", inv(8))], ..Default::default() };
    let pf = Spec { parent: Some(0), inventories: vec![("SRIOV_NET_VF", inv(2))], ..Default::default() };
    let state = build(&[cn, pf.clone(), pf]);
    let mut req = request(vec![group("1", &[("SRIOV_NET_VF", 1)]), group("2", &[("SRIOV_NET_VF", 1)])]);
    req.group_policy = Some(GroupPolicy::None);
    assert_eq!(find(&state, &req).unwrap().allocation_requests.len(), 4);
    req.group_policy = Some(GroupPolicy::Isolate);
    let iso = find(&state, &req).unwrap();
    assert_eq!(iso.allocation_requests.len(), 2);
    for ar in &iso.allocation_requests {
        assert_eq!(ar.mappings.len(), 2);
        assert_ne!(ar.mappings[0].1, ar.mappings[1].1);
    }
    drop(iso);
    // Both VFs under one PF only (same_subtree of siblings fails).
    req.group_policy = Some(GroupPolicy::None);
    req.same_subtrees = vec![vec!["1".into(), "2".into()]];
    let same = find(&state, &req).unwrap();
    assert_eq!(same.allocation_requests.len(), 2);
    for ar in &same.allocation_requests {
        assert_eq!(ar.allocations.len(), 1);
        assert_eq!(ar.allocations[0].1[..], [("SRIOV_NET_VF", 2)]);
    }
}

#[test]
fn consolidated_amount_must_fit() {
    let state = build(&[Spec { inventories: vec![("VCPU", inv(3))], ..Default::default() }]);
    let mut req = request(vec![group("", &[("VCPU", 2)]), group("1", &[("VCPU", 2)])]);
    req.group_policy = Some(GroupPolicy::None);
    assert!(find(&state, &req).unwrap().allocation_requests.is_empty());
    req.groups[1].resources[0].1 = 1;
    let got = find(&state, &req).unwrap();
    assert_eq!(got.allocation_requests.len(), 1);
    assert_eq!(got.allocation_requests[0].allocations[0].1[..], [("VCPU", 3)]);
}

#[test]
fn errors_name_the_unknown_class_or_trait() {
    let state = build(&[Spec { inventories: vec![("VCPU", inv(3))], ..Default::default() }]);
    let req = request(vec![group("", &[("CUSTOM_NOPE", 1)])]);
    assert_eq!(find(&state, &req), Err(CandidatesError::ResourceClassNotFound("CUSTOM_NOPE".into())));
    let mut req = request(vec![group("", &[("VCPU", 1)])]);
    req.groups[0].required_traits = vec![vec!["CUSTOM_MISSING".into()]];
    assert_eq!(find(&state, &req).unwrap_err().to_string(), "No such trait(s): CUSTOM_MISSING.");
    // A group that matches nothing stops the search before later groups are validated.
    let mut req = request(vec![group("", &[("VCPU", 100)]), group("1", &[("CUSTOM_NOPE", 1)])]);
    req.group_policy = Some(GroupPolicy::None);
    assert_eq!(find(&state, &req), Ok(Candidates::default()));
}

// ------------------------------------------- max_candidates and randomize

/// Root provider of each allocation request (no sharing: one tree each).
fn roots_of(state: &State, c: &Candidates) -> Vec<Uuid> {
    c.allocation_requests.iter().map(|ar| state.providers[&ar.mappings[0].1[0]].row.root).collect()
}

/// Three trees, each a compute node with four PFs of 2 VFs: two isolated
/// VF groups give 12 candidates per tree.
fn wide_trees() -> (State, Request) {
    let mut specs = Vec::new();
    for _ in 0..3 {
        let root = specs.len();
        specs.push(Spec { inventories: vec![("VCPU", inv(8))], ..Default::default() });
        for _ in 0..4 {
            specs.push(Spec { parent: Some(root), inventories: vec![("SRIOV_NET_VF", inv(2))], ..Default::default() });
        }
    }
    let mut req = request(vec![group("1", &[("SRIOV_NET_VF", 1)]), group("2", &[("SRIOV_NET_VF", 1)])]);
    req.group_policy = Some(GroupPolicy::Isolate);
    (build(&specs), req)
}

#[test]
fn cap_goes_breadth_first_across_trees() {
    let (state, req) = wide_trees();
    // The requests outlive every answer that borrows from them.
    let req5 = Request { max_candidates: Some(5), ..req.clone() };
    let req2 = Request { max_candidates: Some(2), ..req.clone() };
    let req1000 = Request { max_candidates: Some(1000), ..req.clone() };
    let req_limit = Request { max_candidates: Some(5), limit: Some(4), ..req.clone() };
    let full = find(&state, &req).unwrap();
    assert_eq!(full.allocation_requests.len(), 36);
    // Uncapped order is depth-first: the first 12 are all from tree 0.
    assert!(roots_of(&state, &full)[..12].iter().all(|r| *r == uuid(0)));
    let (t0, t1, t2) = (uuid(0), uuid(5), uuid(10));
    let capped = find(&state, &req5).unwrap();
    assert_eq!(roots_of(&state, &capped), vec![t0, t1, t2, t0, t1], "round-robin in anchor order");
    let (full_c, _) = canon_engine(&full);
    for c in canon_engine(&capped).0 {
        assert!(full_c.contains(&c));
    }
    // Each tree's candidates come in its own depth-first order.
    assert_eq!(capped.allocation_requests[0], full.allocation_requests[0]);
    assert_eq!(capped.allocation_requests[3], full.allocation_requests[1]);
    assert_eq!(capped.allocation_requests[1], full.allocation_requests[12]);
    assert_eq!(find(&state, &req5).unwrap(), capped, "deterministic");
    assert_eq!(capped.provider_summaries.len(), 15, "three whole trees");
    // A cap below the number of trees: summaries only of the trees returned.
    let two = find(&state, &req2).unwrap();
    assert_eq!(roots_of(&state, &two), vec![t0, t1]);
    let sums: BTreeSet<Uuid> = two.provider_summaries.iter().map(|s| s.root).collect();
    assert_eq!(sums, BTreeSet::from([t0, t1]));
    // A cap above the total returns everything (in breadth-first order).
    let all = find(&state, &req1000).unwrap();
    assert_eq!(canon_engine(&all), canon_engine(&full));
    let roots = roots_of(&state, &all);
    assert_eq!(roots[..6], [t0, t1, t2, t0, t1, t2]);
    // limit cuts the capped (breadth-first) set: its prefix.
    let limited = find(&state, &req_limit).unwrap();
    assert_eq!(limited.allocation_requests[..], capped.allocation_requests[..4]);
}

#[test]
fn cap_on_flat_providers_stops_at_the_cap() {
    let specs: Vec<Spec> = (0..6).map(|_| Spec { inventories: vec![("VCPU", inv(4))], ..Default::default() }).collect();
    let state = build(&specs);
    let mut req = request(vec![group("", &[("VCPU", 1)])]);
    req.max_candidates = Some(4);
    req.limit = Some(10);
    let got = find(&state, &req).unwrap();
    let firsts: Vec<Uuid> = got.allocation_requests.iter().map(|ar| ar.allocations[0].0).collect();
    assert_eq!(firsts, (0..4).map(uuid).collect::<Vec<_>>());
    assert_eq!(got.provider_summaries.len(), 4);
}

#[test]
fn randomize_keeps_the_set_and_changes_the_order() {
    let (state, req) = wide_trees();
    let plain = find(&state, &req).unwrap();
    let mut orders = BTreeSet::new();
    for seed in 0..8 {
        let seeded = Request { randomize_seed: Some(seed), ..req.clone() };
        let shuffled = find(&state, &seeded).unwrap();
        assert_eq!(canon_engine(&shuffled), canon_engine(&plain), "seed {seed}: same set");
        assert_eq!(find(&state, &seeded).unwrap(), shuffled, "seed {seed}: reproducible");
        orders.insert(format!("{:?}", shuffled.allocation_requests));
    }
    assert!(orders.len() >= 7, "seeds give different orders ({} distinct)", orders.len());
    // With a cap, randomize samples the capped set.
    let capped_req = Request { max_candidates: Some(3), ..req.clone() };
    let capped = canon_engine(&find(&state, &capped_req).unwrap()).0;
    for seed in 0..8 {
        let seeded = Request { randomize_seed: Some(seed), ..capped_req.clone() };
        assert_eq!(canon_engine(&find(&state, &seeded).unwrap()).0, capped, "seed {seed}: shuffle of the capped set");
        let sampled = Request { limit: Some(2), ..seeded.clone() };
        let sample = find(&state, &sampled).unwrap();
        assert_eq!(sample.allocation_requests.len(), 2);
        for c in canon_engine(&sample).0 {
            assert!(capped.contains(&c), "seed {seed}: sample from the capped set");
        }
    }
}

/// On random forests: the capped answer has min(cap, total) distinct
/// candidates from the full answer; without sharing providers it is
/// balanced across trees (no tree gets k+2 while a tree with more to give
/// has k); `limit` takes its prefix; summaries cover exactly its trees.
#[test]
fn cap_properties_on_random_forests() {
    let mut rng = Rng(0xca9);
    let mut capped_below_total = 0;
    for case in 0..4000 {
        let specs = random_forest(&mut rng);
        let state = build(&specs);
        let mut req = random_request(&mut rng, specs.len());
        req.limit = None;
        let Ok(full) = find(&state, &req) else { continue };
        let cap = rng.range(1, 5) as usize;
        let capped_req = Request { max_candidates: Some(cap), ..req.clone() };
        let limit = rng.range(1, 4) as usize;
        let limited_req = Request { limit: Some(limit), ..capped_req.clone() };
        let capped = find(&state, &capped_req).unwrap();
        let total = full.allocation_requests.len();
        assert_eq!(capped.allocation_requests.len(), total.min(cap), "case {case}: count");
        capped_below_total += usize::from(cap < total);
        let (full_c, full_sums) = canon_engine(&full);
        let (capped_c, capped_sums) = canon_engine(&capped);
        let distinct: BTreeSet<&Canon> = capped_c.iter().collect();
        assert_eq!(distinct.len(), capped_c.len(), "case {case}: duplicates");
        for c in &capped_c {
            assert!(full_c.contains(c), "case {case}: capped result not in the full answer");
        }
        let used: BTreeSet<Uuid> =
            capped.allocation_requests.iter().flat_map(|ar| ar.allocations.iter().map(|(rp, _)| *rp)).collect();
        let used_roots: BTreeSet<Uuid> = used.iter().map(|rp| state.providers[rp].row.root).collect();
        for s in &capped.provider_summaries {
            assert!(used_roots.contains(&s.root) && full_sums.contains(&s.uuid), "case {case}: summary");
        }
        assert!(used.iter().all(|rp| capped_sums.contains(rp)), "case {case}: used provider not summarised");
        let shared = state.providers.values().any(|p| p.traits.contains(SHARING_TRAIT));
        if !shared {
            let count = |c: &Candidates| {
                let mut m: BTreeMap<Uuid, usize> = BTreeMap::new();
                for r in roots_of(&state, c) {
                    *m.entry(r).or_default() += 1;
                }
                m
            };
            let (n, c) = (count(&full), count(&capped));
            let got = |r: &Uuid| c.get(r).copied().unwrap_or(0);
            for (r, nr) in &n {
                if got(r) < *nr {
                    for s in n.keys() {
                        assert!(got(s) <= got(r) + 1, "case {case}: tree {s} has {} while {r} has {}", got(s), got(r));
                    }
                }
            }
            if c.values().any(|k| *k >= 2) {
                assert!(n.keys().all(|r| got(r) >= 1), "case {case}: a tree missing before a second candidate");
            }
        }
        let limited = find(&state, &limited_req).unwrap();
        let k = limit.min(capped.allocation_requests.len());
        assert_eq!(limited.allocation_requests[..], capped.allocation_requests[..k], "case {case}: limit prefix");
        assert_eq!(limited, find_exhaustive(&state, &limited_req).unwrap(), "case {case}: exhaustive");
    }
    assert!(capped_below_total > 300, "only {capped_below_total} cases where the cap bit");
}
