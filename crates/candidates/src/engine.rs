//! The search itself: per-group matching, merging per anchor, summaries.
//!
//! Providers are addressed by their position in creation order (`u32`), which
//! also makes every iteration — and so the output order — deterministic.

use std::collections::{HashMap, HashSet};

use berth_model::{Provider, State};
use uuid::Uuid;

use crate::{
    AllocationRequest, Candidates, CandidatesError, GroupPolicy, ProviderSummary, Request, RequestGroup,
    SummaryResource, SHARING_TRAIT,
};

const NONE: u32 = u32::MAX;

/// Dense view of the providers for one search.
struct Index<'a> {
    provs: Vec<&'a Provider>,
    root: Vec<u32>,
    parent: Vec<u32>,
    by_uuid: HashMap<Uuid, u32>,
    has_trees: bool,
    sharing: Vec<bool>,
    any_sharing: bool,
    /// Aggregate -> roots of the providers in it (built on first use).
    agg_roots: Option<HashMap<Uuid, Vec<u32>>>,
}

impl<'a> Index<'a> {
    fn build(state: &'a State) -> Self {
        let provs: Vec<&Provider> = state.providers_in_order().collect();
        let mut by_uuid = HashMap::with_capacity(provs.len());
        for (i, p) in provs.iter().enumerate() {
            by_uuid.insert(p.uuid(), i as u32);
        }
        let mut root = Vec::with_capacity(provs.len());
        let mut parent = Vec::with_capacity(provs.len());
        let mut sharing = Vec::with_capacity(provs.len());
        let mut has_trees = false;
        let mut any_sharing = false;
        for (i, p) in provs.iter().enumerate() {
            let r = if p.row.root == p.row.uuid {
                i as u32
            } else {
                by_uuid.get(&p.row.root).copied().unwrap_or(i as u32)
            };
            root.push(r);
            let par = match p.row.parent {
                Some(u) => {
                    has_trees = true;
                    by_uuid.get(&u).copied().unwrap_or(NONE)
                }
                None => NONE,
            };
            parent.push(par);
            let s = p.traits.contains(SHARING_TRAIT);
            any_sharing |= s;
            sharing.push(s);
        }
        Index { provs, root, parent, by_uuid, has_trees, sharing, any_sharing, agg_roots: None }
    }

    fn len(&self) -> usize {
        self.provs.len()
    }

    /// Roots of every tree with a provider in one of `sp`'s aggregates
    /// (upstream `anchors_for_sharing_providers`), deduplicated and sorted.
    fn anchors_of(&mut self, sp: u32) -> Vec<u32> {
        if self.agg_roots.is_none() {
            let mut map: HashMap<Uuid, Vec<u32>> = HashMap::new();
            for (i, p) in self.provs.iter().enumerate() {
                for agg in &p.aggregates {
                    map.entry(*agg).or_default().push(self.root[i]);
                }
            }
            self.agg_roots = Some(map);
        }
        let map = self.agg_roots.as_ref().expect("built above");
        let mut out = Vec::new();
        for agg in &self.provs[sp as usize].aggregates {
            if let Some(roots) = map.get(agg) {
                out.extend_from_slice(roots);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Is `anc` the provider `p` itself or one of its ancestors?
    fn is_ancestor_or_self(&self, anc: u32, mut p: u32) -> bool {
        let mut guard = 0;
        while p != NONE && guard <= self.provs.len() {
            if p == anc {
                return true;
            }
            p = self.parent[p as usize];
            guard += 1;
        }
        false
    }
}

/// One group's allocation request, anchored at a root.
#[derive(Debug, Clone)]
struct GAreq {
    anchor: u32,
    /// (provider, request-wide resource class id, amount)
    res: Vec<(u32, u16, i64)>,
    /// Providers satisfying the group (sorted, unique).
    rps: Vec<u32>,
}

fn has_capacity(p: &Provider, rc: &str, amount: i64) -> bool {
    match p.inventories.get(rc) {
        Some(inv) => {
            p.used(rc).saturating_add(amount) <= inv.capacity()
                && inv.min_unit <= amount
                && inv.max_unit >= amount
                && inv.step_size > 0
                && amount % inv.step_size == 0
        }
        None => false,
    }
}

fn has_required(p: &Provider, required: &[Vec<String>]) -> bool {
    required.iter().all(|any| any.iter().any(|t| p.traits.contains(t)))
}

fn has_any(p: &Provider, traits: &[String]) -> bool {
    traits.iter().any(|t| p.traits.contains(t))
}

/// Outcome of matching one group: `None` means "no provider can ever
/// match" (upstream's ResourceProviderNotFound), which empties the answer.
type GroupResult = Result<Option<Vec<GAreq>>, CandidatesError>;

struct Search<'a, 'r> {
    state: &'a State,
    idx: Index<'a>,
    req: &'r Request,
    /// Request-wide resource class names (ids are positions).
    rc_names: Vec<&'r str>,
    /// Roots allowed as anchors (root_required), if filtered.
    anchor_ok: Option<Vec<bool>>,
}

impl<'a, 'r> Search<'a, 'r> {
    fn rc_id(&mut self, name: &'r str) -> u16 {
        if let Some(pos) = self.rc_names.iter().position(|n| *n == name) {
            return pos as u16;
        }
        self.rc_names.push(name);
        (self.rc_names.len() - 1) as u16
    }

    fn anchor_allowed(&self, anchor: u32) -> bool {
        self.anchor_ok.as_ref().map_or(true, |ok| ok[anchor as usize])
    }

    fn check_traits_exist<'t>(&self, names: impl IntoIterator<Item = &'t String>) -> Result<(), CandidatesError> {
        for name in names {
            if !self.state.traits.contains_key(name) {
                return Err(CandidatesError::TraitNotFound(name.clone()));
            }
        }
        Ok(())
    }

    /// Providers with all of `aggs_all` (each inner list: any of).
    fn in_aggregates(&self, aggs_all: &[Vec<Uuid>]) -> Vec<bool> {
        self.idx
            .provs
            .iter()
            .map(|p| aggs_all.iter().all(|any| any.iter().any(|a| p.aggregates.contains(a))))
            .collect()
    }

    fn in_any_aggregate(&self, aggs: &[Uuid]) -> Vec<bool> {
        self.idx.provs.iter().map(|p| aggs.iter().any(|a| p.aggregates.contains(a))).collect()
    }

    fn root_filter(&mut self) -> Result<bool, CandidatesError> {
        let req = self.req;
        if req.root_required.is_empty() && req.root_forbidden.is_empty() {
            return Ok(true);
        }
        self.check_traits_exist(&req.root_required)?;
        self.check_traits_exist(&req.root_forbidden)?;
        let ok: Vec<bool> = self
            .idx
            .provs
            .iter()
            .map(|p| {
                p.row.parent.is_none()
                    && req.root_required.iter().all(|t| p.traits.contains(t))
                    && !has_any(p, &req.root_forbidden)
            })
            .collect();
        let any = ok.iter().any(|b| *b);
        self.anchor_ok = Some(ok);
        Ok(any)
    }

    fn tree_members(&self, root: u32) -> Vec<u32> {
        (0..self.idx.len() as u32).filter(|i| self.idx.root[*i as usize] == root).collect()
    }

    fn group(&mut self, group: &'r RequestGroup) -> GroupResult {
        // Resource classes must exist.
        let mut rcs: Vec<(u16, &'r str, i64)> = Vec::with_capacity(group.resources.len());
        for (name, amount) in &group.resources {
            if !self.state.resource_classes.contains_key(name) {
                return Err(CandidatesError::ResourceClassNotFound(name.clone()));
            }
            let id = self.rc_id(name);
            rcs.push((id, name.as_str(), *amount));
        }
        let in_aggs = if group.member_of.is_empty() {
            None
        } else {
            let v = self.in_aggregates(&group.member_of);
            if !v.iter().any(|b| *b) {
                return Ok(None);
            }
            Some(v)
        };
        for any in &group.required_traits {
            self.check_traits_exist(any)?;
        }
        self.check_traits_exist(&group.forbidden_traits)?;
        let tree_root = match group.in_tree {
            None => None,
            Some(uuid) => match self.idx.by_uuid.get(&uuid) {
                Some(i) => Some(self.idx.root[*i as usize]),
                None => return Ok(None),
            },
        };
        // Providers with capacity for each class (restricted to the tree).
        let scope: Vec<u32> = match tree_root {
            Some(root) => self.tree_members(root),
            None => (0..self.idx.len() as u32).collect(),
        };
        let mut with_resource: Vec<Vec<u32>> = Vec::with_capacity(rcs.len());
        for (_, name, amount) in &rcs {
            let list: Vec<u32> =
                scope.iter().copied().filter(|i| has_capacity(self.idx.provs[*i as usize], name, *amount)).collect();
            if list.is_empty() {
                return Ok(None);
            }
            with_resource.push(list);
        }
        let bad_aggs = if group.forbidden_aggregates.is_empty() {
            None
        } else {
            Some(self.in_any_aggregate(&group.forbidden_aggregates))
        };
        let areqs = if !group.use_same_provider() && (self.idx.any_sharing || self.idx.has_trees) {
            self.multiple_providers(group, &rcs, &with_resource, in_aggs.as_deref(), bad_aggs.as_deref(), tree_root)
        } else {
            self.single_provider(group, &rcs, &with_resource, in_aggs.as_deref(), bad_aggs.as_deref())
        };
        Ok(Some(areqs))
    }

    /// Upstream `get_provider_ids_matching` + `_alloc_candidates_single_provider`.
    fn single_provider(
        &mut self,
        group: &RequestGroup,
        rcs: &[(u16, &str, i64)],
        with_resource: &[Vec<u32>],
        in_aggs: Option<&[bool]>,
        bad_aggs: Option<&[bool]>,
    ) -> Vec<GAreq> {
        let filters_ok = |i: u32, p: &Provider| -> bool {
            (group.required_traits.is_empty() || has_required(p, &group.required_traits))
                && in_aggs.map_or(true, |v| v[i as usize])
                && !bad_aggs.map_or(false, |v| v[i as usize])
                && !has_any(p, &group.forbidden_traits)
        };
        let matching: Vec<u32> = if let Some(first) = with_resource.first() {
            first
                .iter()
                .copied()
                .filter(|i| {
                    let p = self.idx.provs[*i as usize];
                    rcs[1..].iter().all(|(_, name, amount)| has_capacity(p, name, *amount)) && filters_ok(*i, p)
                })
                .collect()
        } else if group.required_traits.is_empty() && group.member_of.is_empty() {
            // Upstream quirk: a resourceless group without required traits or
            // member_of filters matches nothing.
            Vec::new()
        } else {
            (0..self.idx.len() as u32).filter(|i| filters_ok(*i, self.idx.provs[*i as usize])).collect()
        };
        let mut out = Vec::with_capacity(matching.len());
        for rp in matching {
            let res: Vec<(u32, u16, i64)> = rcs.iter().map(|(id, _, amount)| (rp, *id, *amount)).collect();
            let own_root = self.idx.root[rp as usize];
            if self.anchor_allowed(own_root) {
                out.push(GAreq { anchor: own_root, res: res.clone(), rps: vec![rp] });
            }
            if self.idx.sharing[rp as usize] {
                for anchor in self.idx.anchors_of(rp) {
                    if anchor == own_root || !self.anchor_allowed(anchor) {
                        continue;
                    }
                    out.push(GAreq { anchor, res: res.clone(), rps: vec![rp] });
                }
            }
        }
        out
    }

    /// Upstream `get_trees_matching_all` + `_alloc_candidates_multiple_providers`.
    fn multiple_providers(
        &mut self,
        group: &RequestGroup,
        rcs: &[(u16, &str, i64)],
        with_resource: &[Vec<u32>],
        in_aggs: Option<&[bool]>,
        bad_aggs: Option<&[bool]>,
        tree_root: Option<u32>,
    ) -> Vec<GAreq> {
        // Per requested class: (provider, anchor) pairs.
        let mut per_rc: Vec<Vec<(u32, u32)>> = Vec::with_capacity(rcs.len());
        for list in with_resource {
            let mut pairs: Vec<(u32, u32)> = list.iter().map(|rp| (*rp, self.idx.root[*rp as usize])).collect();
            if self.idx.any_sharing && tree_root.is_none() {
                let sps: Vec<u32> = list
                    .iter()
                    .copied()
                    .filter(|rp| self.idx.sharing[*rp as usize] && in_aggs.map_or(true, |v| v[*rp as usize]))
                    .collect();
                for sp in sps {
                    for anchor in self.idx.anchors_of(sp) {
                        pairs.push((sp, anchor));
                    }
                }
            }
            pairs.sort_unstable_by_key(|(rp, anchor)| (*anchor, *rp));
            pairs.dedup();
            if self.anchor_ok.is_some() {
                pairs.retain(|(_, anchor)| self.anchor_allowed(*anchor));
            }
            if let Some(v) = in_aggs {
                pairs.retain(|(rp, anchor)| v[*rp as usize] || v[*anchor as usize]);
            }
            if let Some(v) = bad_aggs {
                pairs.retain(|(rp, anchor)| !(v[*rp as usize] || v[*anchor as usize]));
            }
            if pairs.is_empty() {
                return Vec::new();
            }
            per_rc.push(pairs);
        }
        // Anchors present for every class.
        let mut anchors: Vec<u32> = per_rc[0].iter().map(|(_, a)| *a).collect();
        anchors.dedup();
        for pairs in &per_rc[1..] {
            let mut other: Vec<u32> = pairs.iter().map(|(_, a)| *a).collect();
            other.dedup();
            anchors.retain(|a| other.binary_search(a).is_ok());
        }
        let mut out = Vec::new();
        let mut choice: Vec<u32> = vec![0; rcs.len()];
        for anchor in anchors {
            let lists: Vec<&[(u32, u32)]> = per_rc
                .iter()
                .map(|pairs| {
                    let start = pairs.partition_point(|(_, a)| *a < anchor);
                    let end = pairs.partition_point(|(_, a)| *a <= anchor);
                    &pairs[start..end]
                })
                .collect();
            self.product(group, rcs, anchor, &lists, 0, &mut choice, &mut out);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        group: &RequestGroup,
        rcs: &[(u16, &str, i64)],
        anchor: u32,
        lists: &[&[(u32, u32)]],
        depth: usize,
        choice: &mut Vec<u32>,
        out: &mut Vec<GAreq>,
    ) {
        if depth == lists.len() {
            // Forbidden traits on any provider used; required traits collectively.
            let provs = &self.idx.provs;
            if choice.iter().any(|rp| has_any(provs[*rp as usize], &group.forbidden_traits)) {
                return;
            }
            let ok = group
                .required_traits
                .iter()
                .all(|any| any.iter().any(|t| choice.iter().any(|rp| provs[*rp as usize].traits.contains(t))));
            if !ok {
                return;
            }
            let res = rcs.iter().zip(choice.iter()).map(|((id, _, amount), rp)| (*rp, *id, *amount)).collect();
            let mut rps = choice.clone();
            rps.sort_unstable();
            rps.dedup();
            out.push(GAreq { anchor, res, rps });
            return;
        }
        for (rp, _) in lists[depth] {
            // Forbidden traits prune early.
            if has_any(self.idx.provs[*rp as usize], &group.forbidden_traits) {
                continue;
            }
            choice[depth] = *rp;
            self.product(group, rcs, anchor, lists, depth + 1, choice, out);
        }
    }
}

/// State of the cross-group combination for one anchor.
struct Merge<'s, 'a, 'r> {
    search: &'s Search<'a, 'r>,
    lists: Vec<Vec<&'s GAreq>>,
    granular: Vec<bool>,
    isolate: bool,
    /// same_subtree constraints as group positions.
    subtrees: Vec<Vec<usize>>,
    chosen: Vec<usize>,
    /// Consolidated amounts ((provider, class id), amount), in first-use order.
    amounts: Vec<((u32, u16), i64)>,
    seen: HashSet<(Vec<(u32, u16, i64)>, Vec<Vec<u32>>)>,
    results: Vec<(Vec<(u32, u16, i64)>, Vec<Vec<u32>>)>,
}

impl<'s, 'a, 'r> Merge<'s, 'a, 'r> {
    fn fits(&self, rp: u32, rc: u16, amount: i64) -> bool {
        let p = self.search.idx.provs[rp as usize];
        let name = self.search.rc_names[rc as usize];
        match p.inventories.get(name) {
            Some(inv) => p.used(name).saturating_add(amount) <= inv.capacity() && amount <= inv.max_unit,
            None => false,
        }
    }

    fn walk(&mut self, g: usize) {
        if g == self.lists.len() {
            self.leaf();
            return;
        }
        for k in 0..self.lists[g].len() {
            let areq = self.lists[g][k];
            if self.isolate && self.granular[g] {
                let rp = areq.rps[0];
                let clash = (0..g).any(|h| self.granular[h] && self.lists[h][self.chosen[h]].rps[0] == rp);
                if clash {
                    continue;
                }
            }
            let mark = self.amounts.len();
            let mut touched: Vec<(usize, i64)> = Vec::new();
            let mut ok = true;
            for (rp, rc, amount) in &areq.res {
                let key = (*rp, *rc);
                let pos = match self.amounts.iter().position(|(k, _)| *k == key) {
                    Some(pos) => {
                        touched.push((pos, *amount));
                        self.amounts[pos].1 += amount;
                        pos
                    }
                    None => {
                        self.amounts.push((key, *amount));
                        self.amounts.len() - 1
                    }
                };
                if !self.fits(*rp, *rc, self.amounts[pos].1) {
                    ok = false;
                    break;
                }
            }
            if ok {
                self.chosen[g] = k;
                self.walk(g + 1);
            }
            for (pos, amount) in touched {
                if pos < mark {
                    self.amounts[pos].1 -= amount;
                }
            }
            self.amounts.truncate(mark);
        }
    }

    fn leaf(&mut self) {
        let idx = &self.search.idx;
        for positions in &self.subtrees {
            let mut rps: Vec<u32> = positions
                .iter()
                .flat_map(|g| self.lists[*g][self.chosen[*g]].rps.iter().copied())
                .collect();
            rps.sort_unstable();
            rps.dedup();
            if rps.len() > 1 && !rps.iter().any(|top| rps.iter().all(|rp| idx.is_ancestor_or_self(*top, *rp))) {
                return;
            }
        }
        let res: Vec<(u32, u16, i64)> = self.amounts.iter().map(|((rp, rc), amount)| (*rp, *rc, *amount)).collect();
        let mappings: Vec<Vec<u32>> = (0..self.lists.len()).map(|g| self.lists[g][self.chosen[g]].rps.clone()).collect();
        let mut key_res = res.clone();
        key_res.sort_unstable();
        if self.seen.insert((key_res, mappings.clone())) {
            self.results.push((res, mappings));
        }
    }
}

/// Tiny deterministic PRNG (SplitMix64) for `randomize_allocation_candidates`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Find the allocation candidates for `req` in `state`.
///
/// Errors only for unknown resource classes or traits (checked in upstream's
/// order: root traits, then per group in request order, stopping at the
/// first group that cannot match).
pub fn find(state: &State, req: &Request) -> Result<Candidates, CandidatesError> {
    let mut search = Search { state, idx: Index::build(state), req, rc_names: Vec::new(), anchor_ok: None };
    if !search.root_filter()? {
        return Ok(Candidates::default());
    }
    let mut per_group: Vec<Vec<GAreq>> = Vec::with_capacity(req.groups.len());
    for group in &req.groups {
        match search.group(group)? {
            Some(areqs) if !areqs.is_empty() => per_group.push(areqs),
            _ => return Ok(Candidates::default()),
        }
    }
    if per_group.is_empty() {
        return Ok(Candidates::default());
    }

    // Combine one allocation request per group for each anchor.
    let mut by_anchor: HashMap<u32, Vec<Vec<&GAreq>>> = HashMap::new();
    for (g, areqs) in per_group.iter().enumerate() {
        for areq in areqs {
            by_anchor.entry(areq.anchor).or_insert_with(|| vec![Vec::new(); per_group.len()])[g].push(areq);
        }
    }
    let mut anchors: Vec<u32> = by_anchor.keys().copied().collect();
    anchors.sort_unstable();
    let subtrees: Vec<Vec<usize>> = req
        .same_subtrees
        .iter()
        .map(|suffixes| {
            suffixes.iter().filter_map(|s| req.groups.iter().position(|g| &g.suffix == s)).collect()
        })
        .collect();
    let mut merge = Merge {
        search: &search,
        lists: Vec::new(),
        granular: req.groups.iter().map(|g| g.use_same_provider()).collect(),
        isolate: req.group_policy == Some(GroupPolicy::Isolate),
        subtrees,
        chosen: vec![0; per_group.len()],
        amounts: Vec::new(),
        seen: HashSet::new(),
        results: Vec::new(),
    };
    for anchor in anchors {
        let lists = by_anchor.remove(&anchor).unwrap_or_default();
        if lists.iter().any(|l| l.is_empty()) {
            continue;
        }
        merge.lists = lists;
        merge.walk(0);
    }
    let mut results = std::mem::take(&mut merge.results);
    drop(merge);
    let idx = &search.idx;

    // Before 1.29, candidates may not use two providers of one tree.
    let exclude_nested = !req.nested_aware && idx.has_trees;
    if exclude_nested {
        results.retain(|(res, _)| {
            let mut rps: Vec<u32> = res.iter().map(|r| r.0).collect();
            rps.sort_unstable();
            rps.dedup();
            let mut roots: Vec<u32> = rps.iter().map(|rp| idx.root[*rp as usize]).collect();
            roots.sort_unstable();
            roots.dedup();
            rps.len() == roots.len()
        });
    }
    // Providers summarised: whole trees of the providers used (only the
    // providers used, before 1.29 with trees around).
    let mut in_summary = vec![false; idx.len()];
    let mut used_roots = vec![false; idx.len()];
    for (res, _) in &results {
        for (rp, _, _) in res {
            in_summary[*rp as usize] = true;
            used_roots[idx.root[*rp as usize] as usize] = true;
        }
    }
    if !exclude_nested {
        for i in 0..idx.len() {
            in_summary[i] = used_roots[idx.root[i] as usize];
        }
    }
    match (req.limit, req.randomize_seed) {
        (Some(limit), seed) if limit < results.len() => {
            if let Some(seed) = seed {
                let mut rng = Rng(seed);
                for i in 0..limit {
                    let j = i + rng.below(results.len() - i);
                    results.swap(i, j);
                }
            }
            results.truncate(limit);
            let mut kept_roots = vec![false; idx.len()];
            for (res, _) in &results {
                for (rp, _, _) in res {
                    kept_roots[idx.root[*rp as usize] as usize] = true;
                }
            }
            for i in 0..idx.len() {
                in_summary[i] = in_summary[i] && kept_roots[idx.root[i] as usize];
            }
        }
        (_, Some(seed)) => {
            let mut rng = Rng(seed);
            for i in (1..results.len()).rev() {
                let j = rng.below(i + 1);
                results.swap(i, j);
            }
        }
        _ => {}
    }

    let uuid_of = |i: u32| idx.provs[i as usize].uuid();
    let allocation_requests = results
        .into_iter()
        .map(|(res, mappings)| {
            let mut allocations: Vec<(Uuid, Vec<(String, i64)>)> = Vec::new();
            let mut order: Vec<u32> = Vec::new();
            for (rp, rc, amount) in res {
                let pos = match order.iter().position(|r| *r == rp) {
                    Some(pos) => pos,
                    None => {
                        order.push(rp);
                        allocations.push((uuid_of(rp), Vec::new()));
                        order.len() - 1
                    }
                };
                allocations[pos].1.push((search.rc_names[rc as usize].to_owned(), amount));
            }
            let mappings = req
                .groups
                .iter()
                .zip(mappings)
                .map(|(g, rps)| {
                    let mut uuids: Vec<Uuid> = rps.into_iter().map(uuid_of).collect();
                    uuids.sort_unstable();
                    (g.suffix.clone(), uuids)
                })
                .collect();
            AllocationRequest { allocations, mappings }
        })
        .collect();
    let provider_summaries = (0..idx.len())
        .filter(|i| in_summary[*i])
        .map(|i| {
            let p = idx.provs[i];
            ProviderSummary {
                uuid: p.uuid(),
                parent: p.row.parent,
                root: p.row.root,
                resources: p
                    .inventories
                    .iter()
                    .map(|(rc, inv)| SummaryResource {
                        resource_class: rc.clone(),
                        capacity: inv.capacity(),
                        used: p.used(rc),
                    })
                    .collect(),
                traits: {
                    // Upstream lists a provider's traits in trait id order.
                    let mut traits: Vec<(i64, String)> = p
                        .traits
                        .iter()
                        .map(|t| (state.traits.get(t).map_or(i64::MAX, |tr| tr.id), t.clone()))
                        .collect();
                    traits.sort();
                    traits.into_iter().map(|(_, t)| t).collect()
                },
            }
        })
        .collect();
    Ok(Candidates { allocation_requests, provider_summaries })
}
