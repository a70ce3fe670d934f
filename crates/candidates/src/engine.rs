//! The search itself: per-group matching, merging per anchor, summaries.
//!
//! Providers are addressed by their position in creation order (`u32`), which
//! also makes every iteration — and so the output order — deterministic.
//! Hot paths avoid hashing and per-candidate allocation: provider lookups go
//! through the creation-order id list, capacity headroom is captured once per
//! (provider, class) when a group is matched, and duplicates are only hunted
//! when sharing providers make them possible.

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use berth_model::search_index::Topology;
use berth_model::{Inventory, Provider, State};
use smallvec::{smallvec, SmallVec};
use uuid::Uuid;

use crate::{
    AllocationRequest, Answer, Candidates, CandidatesError, GroupPolicy, PackedRequest, ProviderSummary, Request,
    RequestGroup, SummaryResource,
};

const NONE: u32 = berth_model::search_index::NO_POSITION;

/// Dense view of the providers for one search: the state's cached
/// [`Topology`] (positions in creation order, roots, parents, sharing), and
/// providers looked up by position. Nothing here is O(providers) per
/// request unless a search really visits every provider (then
/// [`Index::all`] builds the position -> provider table once).
struct Index<'a> {
    state: &'a State,
    topo: &'a Topology,
    /// Every provider by position, when a search needs them all.
    all: OnceCell<Vec<&'a Provider>>,
    root: &'a [u32],
    parent: &'a [u32],
    has_trees: bool,
    sharing: &'a [bool],
    any_sharing: bool,
}

impl<'a> Index<'a> {
    fn build(state: &'a State) -> Self {
        let topo = state.topology();
        Index {
            state,
            topo,
            all: OnceCell::new(),
            root: &topo.root,
            parent: &topo.parent,
            has_trees: topo.has_trees,
            sharing: &topo.sharing,
            any_sharing: topo.any_sharing,
        }
    }

    /// The provider at position `i`.
    fn prov(&self, i: u32) -> &'a Provider {
        match self.all.get() {
            Some(all) => all[i as usize],
            None => &self.state.providers[&self.topo.uuids[i as usize]],
        }
    }

    /// Every provider by position (built on first use: one pass over the
    /// provider table).
    fn all(&self) -> &[&'a Provider] {
        self.all.get_or_init(|| {
            let state = self.state;
            let mut slots: Vec<Option<&'a Provider>> = vec![None; self.topo.len()];
            for p in state.providers.values() {
                if let Some(pos) = self.topo.position_of_id(p.row.id) {
                    slots[pos as usize] = Some(p);
                }
            }
            slots.into_iter().map(|p| p.expect("every position has a provider")).collect()
        })
    }

    /// Position of a provider by uuid.
    fn pos(&self, uuid: &Uuid) -> Option<u32> {
        self.topo.position_of_id(self.state.providers.get(uuid)?.row.id)
    }

    fn len(&self) -> usize {
        self.topo.len()
    }

    /// Positions of the providers with these ids (ascending ids give
    /// ascending positions).
    fn positions<'s>(&'s self, ids: impl Iterator<Item = &'s i64> + 's) -> impl Iterator<Item = u32> + 's {
        ids.filter_map(|id| self.topo.position_of_id(*id))
    }

    /// Roots of every tree with a provider in one of `sp`'s aggregates
    /// (upstream `anchors_for_sharing_providers`), deduplicated and sorted.
    fn anchors_of(&self, sp: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for agg in &self.prov(sp).aggregates {
            if let Some(members) = self.state.search.in_aggregate.get(agg) {
                out.extend(self.positions(members.iter()).map(|p| self.root[p as usize]));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Is `anc` the provider `p` itself or one of its ancestors?
    fn is_ancestor_or_self(&self, anc: u32, mut p: u32) -> bool {
        let mut guard = 0;
        while p != NONE && guard <= self.len() {
            if p == anc {
                return true;
            }
            p = self.parent[p as usize];
            guard += 1;
        }
        false
    }
}

/// One requested amount placed on one provider, with the provider's
/// headroom for that class captured at match time.
#[derive(Debug, Clone, Copy)]
struct Res {
    rp: u32,
    rc: u16,
    amount: i64,
    /// capacity - used
    room: i64,
    max_unit: i64,
}

/// One group's allocation request, anchored at a root.
#[derive(Debug, Clone)]
struct GAreq {
    anchor: u32,
    res: ResList,
    /// Providers satisfying the group (sorted, unique).
    rps: Rps,
}

/// A group request's amounts: inline up to three classes (a flavor's
/// VCPU, MEMORY_MB and DISK_GB), so the common candidate allocates
/// nothing for them.
type ResList = SmallVec<[Res; 3]>;
/// A group request's providers: one, inline, in the common case.
type Rps = SmallVec<[u32; 1]>;

/// Headroom (capacity - used, max_unit) when `amount` of `rc` fits on `p`
/// (upstream's capacity clause: used + amount <= capacity, min/max unit,
/// step size).
fn fit(p: &Provider, rc: &str, amount: i64) -> Option<(i64, i64)> {
    fits(p.inventories.get(rc)?, p.used(rc), amount)
}

/// The capacity clause for one inventory with `used` allocated.
fn fits(inv: &Inventory, used: i64, amount: i64) -> Option<(i64, i64)> {
    let room = inv.capacity().saturating_sub(used);
    (amount <= room
        && inv.min_unit <= amount
        && inv.max_unit >= amount
        && inv.step_size > 0
        && amount % inv.step_size == 0)
        .then_some((room, inv.max_unit))
}

/// [`fit`] for every requested class of a group at once. A provider's
/// inventories and usages are both ordered by class name, so one merge
/// walk over each replaces two map lookups per class (each a few string
/// comparisons through pointers: the main cost of a scan over 10,000
/// providers). `by_name` holds positions in `rcs` in class-name order;
/// `rooms[k]` receives the headroom of `rcs[k]`.
fn fit_all(p: &Provider, rcs: &[Rc<'_>], by_name: &[usize], rooms: &mut [(i64, i64)]) -> bool {
    use std::cmp::Ordering;
    let mut inventories = p.inventories.iter().peekable();
    let mut usages = p.usages.iter().peekable();
    for &k in by_name {
        let (_, name, amount) = rcs[k];
        let inv = loop {
            let Some((class, inv)) = inventories.peek() else { return false };
            match cmp_names(class, name) {
                Ordering::Less => {
                    inventories.next();
                }
                Ordering::Equal => break *inv,
                Ordering::Greater => return false,
            }
        };
        let used = loop {
            let Some((class, used)) = usages.peek() else { break 0 };
            match cmp_names(class, name) {
                Ordering::Less => {
                    usages.next();
                }
                Ordering::Equal => break **used,
                Ordering::Greater => break 0,
            }
        };
        match fits(inv, used, amount) {
            Some(room) => rooms[k] = room,
            None => return false,
        }
    }
    true
}

/// `a.cmp(b)` for class names, deciding on the first byte when it
/// differs (the common case between a provider's few classes: `DISK_GB`,
/// `MEMORY_MB`, `VCPU`) without a call to `memcmp`.
#[inline]
fn cmp_names(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// Positions of `rcs` ordered by class name (for [`fit_all`]).
fn by_name(rcs: &[Rc<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rcs.len()).collect();
    order.sort_by_key(|k| rcs[*k].1);
    order
}

/// In all of `aggs_all` (each inner list: any of); true when empty.
fn in_all_aggregates(p: &Provider, aggs_all: &[Vec<Uuid>]) -> bool {
    aggs_all.iter().all(|any| any.iter().any(|a| p.aggregates.contains(a)))
}

/// In any of `aggs`; false when empty.
fn in_any_aggregate(p: &Provider, aggs: &[Uuid]) -> bool {
    aggs.iter().any(|a| p.aggregates.contains(a))
}

fn has_required(p: &Provider, required: &[Vec<String>]) -> bool {
    required.iter().all(|any| any.iter().any(|t| p.traits.contains(t)))
}

fn has_any(p: &Provider, traits: &[String]) -> bool {
    traits.iter().any(|t| p.traits.contains(t))
}

/// A group validated, with its provider-independent filters.
struct Prepared<'a> {
    rcs: Vec<Rc<'a>>,
    /// Providers in the required aggregates (`member_of`), if any.
    in_aggs: Option<Vec<bool>>,
    /// Providers in a forbidden aggregate, if any.
    bad_aggs: Option<Vec<bool>>,
    /// `in_tree` as a root position.
    tree_root: Option<u32>,
}

/// Outcome of preparing one group: `None` means "no provider can ever
/// match" (upstream's ResourceProviderNotFound), which empties the answer.
type GroupResult<'a> = Result<Option<Prepared<'a>>, CandidatesError>;

/// A requested class: (request-wide id, name, amount).
type Rc<'a> = (u16, &'a str, i64);

struct Search<'a> {
    state: &'a State,
    idx: Index<'a>,
    req: &'a Request,
    /// Request-wide resource class names (ids are positions), borrowed from the state.
    rc_names: Vec<&'a str>,
    /// Anchors must pass `root_required`/`root_forbidden` (checked per
    /// anchor as the search reaches it: a limited search never looks at
    /// most of a large cloud).
    root_filtered: bool,
    /// With one group, no sharing and a limit (no randomisation), every
    /// single-provider match is a final answer: stop after this many.
    stop_after: usize,
}

impl<'a> Search<'a> {
    fn rc_id(&mut self, name: &'a str) -> u16 {
        if let Some(pos) = self.rc_names.iter().position(|n| *n == name) {
            return pos as u16;
        }
        self.rc_names.push(name);
        (self.rc_names.len() - 1) as u16
    }

    fn anchor_allowed(&self, anchor: u32) -> bool {
        !self.root_filtered || self.root_passes(self.idx.prov(anchor))
    }

    fn root_passes(&self, p: &Provider) -> bool {
        p.row.parent.is_none()
            && self.req.root_required.iter().all(|t| p.traits.contains(t))
            && !has_any(p, &self.req.root_forbidden)
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
        self.idx.all().iter().map(|p| in_all_aggregates(p, aggs_all)).collect()
    }

    fn in_any_aggregate(&self, aggs: &[Uuid]) -> Vec<bool> {
        self.idx.all().iter().map(|p| in_any_aggregate(p, aggs)).collect()
    }

    fn root_filter(&mut self) -> Result<bool, CandidatesError> {
        let req = self.req;
        if req.root_required.is_empty() && req.root_forbidden.is_empty() {
            return Ok(true);
        }
        self.check_traits_exist(&req.root_required)?;
        self.check_traits_exist(&req.root_forbidden)?;
        self.root_filtered = true;
        Ok(self.state.providers.values().any(|p| self.root_passes(p)))
    }

    /// Validate a group (unknown classes / traits) and compute its
    /// provider-independent filters; `None` when nothing can ever match.
    fn prepare(&mut self, group: &'a RequestGroup) -> GroupResult<'a> {
        // Resource classes must exist.
        let mut rcs: Vec<Rc<'a>> = Vec::with_capacity(group.resources.len());
        for (name, amount) in &group.resources {
            let Some((name, _)) = self.state.resource_classes.get_key_value(name) else {
                return Err(CandidatesError::ResourceClassNotFound(name.clone()));
            };
            let id = self.rc_id(name);
            rcs.push((id, name.as_str(), *amount));
        }
        // The multiple-provider path tests aggregates of anchors as well as
        // providers: precompute them. The single-provider path tests each
        // provider it reaches (cheaper when a limit stops the scan early).
        let multi = !group.use_same_provider() && (self.idx.any_sharing || self.idx.has_trees);
        let in_aggs = if group.member_of.is_empty() {
            None
        } else if multi {
            let v = self.in_aggregates(&group.member_of);
            if !v.iter().any(|b| *b) {
                return Ok(None);
            }
            Some(v)
        } else {
            if !self.any_in_all_aggregates(&group.member_of) {
                return Ok(None);
            }
            None
        };
        for any in &group.required_traits {
            self.check_traits_exist(any)?;
        }
        self.check_traits_exist(&group.forbidden_traits)?;
        let tree_root = match group.in_tree {
            None => None,
            Some(uuid) => match self.idx.pos(&uuid) {
                Some(i) => Some(self.idx.root[i as usize]),
                None => return Ok(None),
            },
        };
        let bad_aggs = if group.forbidden_aggregates.is_empty() || !multi {
            None
        } else {
            Some(self.in_any_aggregate(&group.forbidden_aggregates))
        };
        Ok(Some(Prepared { rcs, in_aggs, bad_aggs, tree_root }))
    }

    /// Is some provider in all of `aggs_all` (each inner list: any of)?
    /// Looks only at the members of the smallest inner list.
    fn any_in_all_aggregates(&self, aggs_all: &[Vec<Uuid>]) -> bool {
        let index = &self.state.search.in_aggregate;
        let members = |any: &Vec<Uuid>| any.iter().filter_map(|a| index.get(a)).map(BTreeSet::len).sum::<usize>();
        let Some(smallest) = aggs_all.iter().min_by_key(|any| members(any)) else { return true };
        smallest.iter().filter_map(|a| index.get(a)).flatten().any(|id| {
            self.idx.topo.position_of_id(*id).is_some_and(|pos| in_all_aggregates(self.idx.prov(pos), aggs_all))
        })
    }

    /// Match a prepared group against the providers `provs` (ascending
    /// positions), appending its allocation requests to `out`.
    fn scan(&mut self, group: &RequestGroup, p: &Prepared<'a>, provs: &[u32], out: &mut Vec<GAreq>) {
        if self.multi(group) {
            self.multiple_providers(group, p, provs, out)
        } else {
            // A class nobody can provide empties the answer exactly as an
            // empty match does, so the single-provider path needs no
            // per-class pre-check.
            self.single_provider(group, p, provs.iter().copied(), out)
        }
    }

    /// Does `group` take the multiple-provider path?
    fn multi(&self, group: &RequestGroup) -> bool {
        !group.use_same_provider() && (self.idx.any_sharing || self.idx.has_trees)
    }

    /// Match a prepared group against every provider, in search order from
    /// position `start`. The single-provider path visits only the members
    /// of the smallest index set every match must be in.
    fn scan_all(&mut self, group: &RequestGroup, p: &Prepared<'a>, start: u32, out: &mut Vec<GAreq>) {
        let n = self.idx.len() as u32;
        if self.multi(group) {
            let all: Vec<u32> = (0..n).map(|i| (start + i) % n.max(1)).collect();
            self.multiple_providers(group, p, &all, out);
            return;
        }
        let search = &*self;
        let start_id = search.idx.topo.ids.get(start as usize).copied().unwrap_or(i64::MIN);
        let rotated_set = |set: &'a BTreeSet<i64>| {
            let idx = &search.idx;
            set.range(start_id..).chain(set.range(..start_id)).filter_map(move |id| idx.topo.position_of_id(*id))
        };
        let driving = search.driving_set(group, p);
        // A scan that may visit a good part of the cloud reads providers
        // from a position table (one pass over the providers) rather than
        // by a hash lookup each.
        let visits = match driving {
            Driving::Set(set) => set.len(),
            Driving::Tree(members) => members.len(),
            Driving::All => n as usize,
        }
        .min(search.stop_after);
        if visits.saturating_mul(8) >= n as usize && visits >= 64 {
            search.idx.all();
        }
        match driving {
            Driving::Set(set) => search.single_provider(group, p, rotated_set(set), out),
            Driving::Tree(members) => {
                let rotated = members.iter().filter(|m| **m >= start).chain(members.iter().filter(|m| **m < start));
                search.single_provider(group, p, rotated.copied(), out)
            }
            Driving::All => search.single_provider(group, p, (0..n).map(|i| (start + i) % n.max(1)), out),
        }
    }

    /// The smallest set of providers every single-provider match of
    /// `group` must be in: those with room for a requested class, with a
    /// required trait, in a required aggregate, or in the `in_tree` tree.
    fn driving_set(&self, group: &RequestGroup, p: &Prepared<'a>) -> Driving<'a> {
        static EMPTY: BTreeSet<i64> = BTreeSet::new();
        let search = &self.state.search;
        let mut sets: Vec<&'a BTreeSet<i64>> = Vec::new();
        for (_, name, amount) in &p.rcs {
            if *amount >= 1 {
                sets.push(search.with_room.get(*name).unwrap_or(&EMPTY));
            }
        }
        for any in &group.required_traits {
            if let [only] = &any[..] {
                sets.push(search.with_trait.get(only).unwrap_or(&EMPTY));
            }
        }
        for any in &group.member_of {
            if let [only] = &any[..] {
                sets.push(search.in_aggregate.get(only).unwrap_or(&EMPTY));
            }
        }
        let best = sets.into_iter().min_by_key(|set| set.len());
        let tree = match p.tree_root {
            Some(root) if !p.rcs.is_empty() => Some(self.idx.topo.tree(root)),
            _ => None,
        };
        match (best, tree) {
            (Some(set), Some(tree)) if tree.len() < set.len() => Driving::Tree(tree),
            (None, Some(tree)) => Driving::Tree(tree),
            (Some(set), _) => Driving::Set(set),
            (None, None) => Driving::All,
        }
    }

    /// Upstream `get_provider_ids_matching` + `_alloc_candidates_single_provider`.
    fn single_provider(
        &self,
        group: &RequestGroup,
        p: &Prepared<'a>,
        provs: impl Iterator<Item = u32>,
        out: &mut Vec<GAreq>,
    ) {
        let (rcs, in_aggs, bad_aggs, tree_root) =
            (&p.rcs[..], p.in_aggs.as_deref(), p.bad_aggs.as_deref(), p.tree_root);
        if rcs.is_empty() && group.required_traits.is_empty() && group.member_of.is_empty() {
            // Upstream quirk: a resourceless group without required traits or
            // member_of filters matches nothing.
            return;
        }
        let base = out.len();
        let mut res: Vec<Res> = Vec::with_capacity(rcs.len());
        let order = by_name(rcs);
        let mut rooms: Vec<(i64, i64)> = vec![(0, 0); rcs.len()];
        for i in provs {
            if out.len() - base >= self.stop_after {
                break;
            }
            let p = self.idx.prov(i);
            // in_tree restricts providers of resources (not resourceless groups).
            if !rcs.is_empty() && tree_root.is_some_and(|t| self.idx.root[i as usize] != t) {
                continue;
            }
            let fits_all = fit_all(p, rcs, &order, &mut rooms);
            if fits_all {
                res.clear();
                res.extend(rcs.iter().zip(&rooms).map(|(&(rc, _, amount), &(room, max_unit))| Res {
                    rp: i,
                    rc,
                    amount,
                    room,
                    max_unit,
                }));
            }
            if !fits_all
                || !in_aggs.map_or_else(|| in_all_aggregates(p, &group.member_of), |v| v[i as usize])
                || bad_aggs.map_or_else(|| in_any_aggregate(p, &group.forbidden_aggregates), |v| v[i as usize])
                || !has_required(p, &group.required_traits)
                || has_any(p, &group.forbidden_traits)
            {
                continue;
            }
            let own_root = self.idx.root[i as usize];
            if self.anchor_allowed(own_root) {
                out.push(GAreq { anchor: own_root, res: ResList::from_slice(&res), rps: smallvec![i] });
            }
            if self.idx.sharing[i as usize] {
                for anchor in self.idx.anchors_of(i) {
                    if anchor == own_root || !self.anchor_allowed(anchor) {
                        continue;
                    }
                    out.push(GAreq { anchor, res: ResList::from_slice(&res), rps: smallvec![i] });
                }
            }
        }
    }

    /// Upstream `get_trees_matching_all` + `_alloc_candidates_multiple_providers`.
    fn multiple_providers(&mut self, group: &RequestGroup, p: &Prepared<'a>, provs: &[u32], out: &mut Vec<GAreq>) {
        let (rcs, in_aggs, bad_aggs, tree_root) =
            (&p.rcs[..], p.in_aggs.as_deref(), p.bad_aggs.as_deref(), p.tree_root);
        let all = self.idx.all();
        // Per requested class: (anchor, provider, headroom) entries.
        let mut per_rc: Vec<Vec<(u32, u32, i64, i64)>> = Vec::with_capacity(rcs.len());
        for (_, name, amount) in rcs {
            let mut pairs: Vec<(u32, u32, i64, i64)> = Vec::new();
            let mut sps: Vec<(u32, i64, i64)> = Vec::new();
            for &i in provs {
                if tree_root.is_some_and(|t| self.idx.root[i as usize] != t) {
                    continue;
                }
                if let Some((room, max_unit)) = fit(all[i as usize], name, *amount) {
                    pairs.push((self.idx.root[i as usize], i, room, max_unit));
                    if self.idx.sharing[i as usize] && in_aggs.is_none_or(|v| v[i as usize]) {
                        sps.push((i, room, max_unit));
                    }
                }
            }
            if pairs.is_empty() {
                return;
            }
            if tree_root.is_none() {
                for (sp, room, max_unit) in sps {
                    for anchor in self.idx.anchors_of(sp) {
                        pairs.push((anchor, sp, room, max_unit));
                    }
                }
            }
            pairs.sort_unstable();
            pairs.dedup();
            if self.root_filtered {
                pairs.retain(|(anchor, ..)| self.anchor_allowed(*anchor));
            }
            if let Some(v) = in_aggs {
                pairs.retain(|(anchor, rp, ..)| v[*rp as usize] || v[*anchor as usize]);
            }
            if let Some(v) = bad_aggs {
                pairs.retain(|(anchor, rp, ..)| !(v[*rp as usize] || v[*anchor as usize]));
            }
            if pairs.is_empty() {
                return;
            }
            per_rc.push(pairs);
        }
        // Anchors present for every class.
        let mut anchors: Vec<u32> = per_rc[0].iter().map(|e| e.0).collect();
        anchors.dedup();
        for pairs in &per_rc[1..] {
            let mut other: Vec<u32> = pairs.iter().map(|e| e.0).collect();
            other.dedup();
            anchors.retain(|a| other.binary_search(a).is_ok());
        }
        let mut choice: Vec<Res> = Vec::with_capacity(rcs.len());
        for anchor in anchors {
            let lists: Vec<&[(u32, u32, i64, i64)]> = per_rc
                .iter()
                .map(|pairs| {
                    let start = pairs.partition_point(|e| e.0 < anchor);
                    let end = pairs.partition_point(|e| e.0 <= anchor);
                    &pairs[start..end]
                })
                .collect();
            self.product(group, rcs, anchor, &lists, &mut choice, out);
        }
    }

    fn product(
        &self,
        group: &RequestGroup,
        rcs: &[Rc<'a>],
        anchor: u32,
        lists: &[&[(u32, u32, i64, i64)]],
        choice: &mut Vec<Res>,
        out: &mut Vec<GAreq>,
    ) {
        let depth = choice.len();
        if depth == lists.len() {
            // Required traits are satisfied collectively by the providers used.
            let provs = self.idx.all();
            let ok = group
                .required_traits
                .iter()
                .all(|any| any.iter().any(|t| choice.iter().any(|r| provs[r.rp as usize].traits.contains(t))));
            if ok {
                let mut rps: Rps = choice.iter().map(|r| r.rp).collect();
                rps.sort_unstable();
                rps.dedup();
                out.push(GAreq { anchor, res: ResList::from_slice(choice), rps });
            }
            return;
        }
        let (id, _, amount) = rcs[depth];
        for &(_, rp, room, max_unit) in lists[depth] {
            // Forbidden traits: no provider used may have one.
            if has_any(self.idx.prov(rp), &group.forbidden_traits) {
                continue;
            }
            choice.push(Res { rp, rc: id, amount, room, max_unit });
            self.product(group, rcs, anchor, lists, choice, out);
            choice.pop();
        }
    }
}

/// Where the single-provider path looks (see [`Search::driving_set`]).
#[derive(Clone, Copy)]
enum Driving<'a> {
    /// Provider ids (creation order).
    Set(&'a BTreeSet<i64>),
    /// Tree members (positions, ascending).
    Tree(&'a [u32]),
    /// Every provider.
    All,
}

/// One merged candidate: consolidated amounts and the chosen group requests.
struct Found {
    /// (provider, class id, amount) in first-use order.
    res: SmallVec<[(u32, u16, i64); 3]>,
    /// Index of the chosen request in each group's list.
    chosen: SmallVec<[u32; 2]>,
}

/// The cross-group combination.
struct Merge<'s, 'a> {
    search: &'s Search<'a>,
    groups: &'s [Vec<GAreq>],
    /// Per group, the range of its (anchor-sorted) requests for the current anchor.
    ranges: Vec<(u32, u32)>,
    granular: &'s [bool],
    isolate: bool,
    exclude_nested: bool,
    dedupe: bool,
    /// same_subtree constraints as group positions.
    subtrees: &'s [Vec<usize>],
    chosen: Vec<u32>,
    /// Consolidated ((provider, class id), amount, room, max_unit), in first-use order.
    amounts: Vec<((u32, u16), i64, i64, i64)>,
    seen: HashMap<u64, Vec<usize>>,
    found: Vec<Found>,
    /// Stop after this many (limit without randomisation).
    stop_at: usize,
}

impl<'s, 'a> Merge<'s, 'a> {
    fn done(&self) -> bool {
        self.found.len() >= self.stop_at
    }

    fn walk(&mut self, g: usize) {
        if g == self.groups.len() {
            self.leaf();
            return;
        }
        let (start, end) = self.ranges[g];
        for k in start..end {
            if self.done() {
                return;
            }
            let areq = &self.groups[g][k as usize];
            if self.isolate && self.granular[g] {
                let rp = areq.rps[0];
                let clash = (0..g).any(|h| self.granular[h] && self.groups[h][self.chosen[h] as usize].rps[0] == rp);
                if clash {
                    continue;
                }
            }
            let mark = self.amounts.len();
            let mut touched: Vec<(usize, i64)> = Vec::new();
            let mut ok = true;
            for r in &areq.res {
                let key = (r.rp, r.rc);
                let pos = match self.amounts[..mark].iter().position(|e| e.0 == key) {
                    Some(pos) => {
                        self.amounts[pos].1 += r.amount;
                        touched.push((pos, r.amount));
                        pos
                    }
                    None => {
                        self.amounts.push((key, r.amount, r.room, r.max_unit));
                        self.amounts.len() - 1
                    }
                };
                let (_, total, room, max_unit) = self.amounts[pos];
                if total > room || total > max_unit {
                    ok = false;
                    break;
                }
            }
            if ok {
                self.chosen[g] = k;
                self.walk(g + 1);
            }
            for (pos, amount) in touched {
                self.amounts[pos].1 -= amount;
            }
            self.amounts.truncate(mark);
        }
    }

    fn rps_of(&self, g: usize) -> &[u32] {
        &self.groups[g][self.chosen[g] as usize].rps
    }

    fn leaf(&mut self) {
        let idx = &self.search.idx;
        for positions in self.subtrees {
            let mut rps: Vec<u32> = positions.iter().flat_map(|g| self.rps_of(*g).iter().copied()).collect();
            rps.sort_unstable();
            rps.dedup();
            if rps.len() > 1 && !rps.iter().any(|top| rps.iter().all(|rp| idx.is_ancestor_or_self(*top, *rp))) {
                return;
            }
        }
        if self.exclude_nested {
            // Before 1.29: no two providers of one tree.
            let mut rps: Vec<u32> = self.amounts.iter().map(|e| e.0 .0).collect();
            rps.sort_unstable();
            rps.dedup();
            let mut roots: Vec<u32> = rps.iter().map(|rp| idx.root[*rp as usize]).collect();
            roots.sort_unstable();
            roots.dedup();
            if rps.len() != roots.len() {
                return;
            }
        }
        if self.dedupe {
            let mut sorted: Vec<(u32, u16, i64)> = self.amounts.iter().map(|e| (e.0 .0, e.0 .1, e.1)).collect();
            sorted.sort_unstable();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            sorted.hash(&mut h);
            for g in 0..self.groups.len() {
                self.rps_of(g).hash(&mut h);
            }
            let key = h.finish();
            if let Some(prev) = self.seen.get(&key) {
                for &f in prev {
                    let other = &self.found[f];
                    let mut other_sorted = other.res.clone();
                    other_sorted.sort_unstable();
                    let same_maps = (0..self.groups.len())
                        .all(|g| self.groups[g][other.chosen[g] as usize].rps[..] == *self.rps_of(g));
                    if other_sorted[..] == sorted[..] && same_maps {
                        return;
                    }
                }
            }
            self.seen.entry(key).or_default().push(self.found.len());
        }
        self.found.push(Found {
            res: self.amounts.iter().map(|e| (e.0 .0, e.0 .1, e.1)).collect(),
            chosen: SmallVec::from_slice(&self.chosen),
        });
    }
}

fn new_merge<'s, 'a>(
    search: &'s Search<'a>,
    groups: &'s [Vec<GAreq>],
    (granular, subtrees): (&'s [bool], &'s [Vec<usize>]),
    (isolate, exclude_nested, stop_at): (bool, bool, usize),
    found: Vec<Found>,
) -> Merge<'s, 'a> {
    Merge {
        search,
        groups,
        ranges: vec![(0, 0); groups.len()],
        granular,
        isolate,
        exclude_nested,
        dedupe: search.idx.any_sharing,
        subtrees,
        chosen: vec![0; groups.len()],
        amounts: Vec::new(),
        seen: HashMap::new(),
        found,
        stop_at,
    }
}

/// Per anchor, the range of each group's (anchor-sorted) requests, for
/// the anchors every group has requests at, in anchor order.
fn anchor_ranges(per_group: &[Vec<GAreq>]) -> Vec<Vec<(u32, u32)>> {
    let first = &per_group[0];
    let mut out = Vec::new();
    let mut k = 0;
    'anchors: while k < first.len() {
        let anchor = first[k].anchor;
        let mut end = k;
        while end < first.len() && first[end].anchor == anchor {
            end += 1;
        }
        let mut ranges = Vec::with_capacity(per_group.len());
        ranges.push((k as u32, end as u32));
        k = end;
        for areqs in &per_group[1..] {
            let start = areqs.partition_point(|a| a.anchor < anchor);
            let stop = areqs.partition_point(|a| a.anchor <= anchor);
            if start == stop {
                continue 'anchors;
            }
            ranges.push((start as u32, stop as u32));
        }
        out.push(ranges);
    }
    out
}

/// A candidate's identity: sorted (provider, class, amount) and each
/// group's providers.
type DedupeKey<'g> = (SmallVec<[(u32, u16, i64); 3]>, Vec<&'g [u32]>);

/// Breadth-first generation under `max_candidates` (upstream's
/// `allocation_candidates_generation_strategy = breadth-first`): the
/// candidates of every anchor, taken round-robin — the first candidate of
/// each anchor in anchor order, then the second of each, ... — until
/// `target`. Unlike upstream, whose rounds draw raw combinations that the
/// group-policy / capacity filters may then reject, a round here takes one
/// *accepted* candidate per anchor, so no tree with a candidate is left out
/// while another has two.
///
/// Each anchor's walk is depth-first and deterministic, so its first `q`
/// candidates are a prefix of its first `2q`: anchors are walked with a
/// per-anchor quota that at least doubles (more when `target` needs it)
/// until the rounds fill `target` or every anchor is exhausted (total work
/// at most about twice the final walks). The
/// first pass (quota 1) stops once `target` anchors gave a candidate.
/// Duplicates across anchors (sharing providers) are dropped as they are
/// met, so the first copy in round-robin order is the one kept.
fn breadth_first(
    search: &Search<'_>,
    per_group: &[Vec<GAreq>],
    shape: (&[bool], &[Vec<usize>]),
    (isolate, exclude_nested): (bool, bool),
    target: usize,
    seed: Option<u64>,
) -> Vec<Found> {
    let mut anchors = anchor_ranges(per_group);
    // Randomised: visit the anchors in a random order, so the anchors that
    // make it under the cap are a uniform sample rather than the oldest.
    if let Some(seed) = seed {
        let mut rng = Rng(seed ^ 0x5EED_CA95);
        for i in (1..anchors.len()).rev() {
            let j = rng.below(i + 1);
            anchors.swap(i, j);
        }
    }
    let n = anchors.len();
    let mut lists: Vec<Vec<Found>> = (0..n).map(|_| Vec::new()).collect();
    // The quota each anchor was last walked with (0: not walked yet).
    let mut walked = vec![0usize; n];
    let exhausted = |walked: &[usize], lists: &[Vec<Found>], a: usize| walked[a] > 0 && lists[a].len() < walked[a];
    let mut quota = 1usize;
    loop {
        let mut firsts = 0;
        for a in 0..n {
            if walked[a] >= quota || exhausted(&walked, &lists, a) {
                continue;
            }
            let mut merge = new_merge(search, per_group, shape, (isolate, exclude_nested, quota), Vec::new());
            merge.ranges.copy_from_slice(&anchors[a]);
            merge.walk(0);
            lists[a] = std::mem::take(&mut merge.found);
            walked[a] = quota;
            if quota == 1 {
                firsts += usize::from(!lists[a].is_empty());
                if firsts >= target {
                    break;
                }
            }
        }
        // Round-robin over what is known; stop at the first anchor that
        // may have more than it was walked for.
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let mut seen: std::collections::HashSet<DedupeKey<'_>> = Default::default();
        let mut complete = true;
        'rounds: for r in 0.. {
            let mut any = false;
            for a in 0..n {
                if let Some(f) = lists[a].get(r) {
                    any = true;
                    if search.idx.any_sharing {
                        let mut res = f.res.clone();
                        res.sort_unstable();
                        let maps: Vec<&[u32]> =
                            f.chosen.iter().enumerate().map(|(g, k)| &per_group[g][*k as usize].rps[..]).collect();
                        if !seen.insert((res, maps)) {
                            continue;
                        }
                    }
                    picked.push((a, r));
                    if picked.len() >= target {
                        break 'rounds;
                    }
                } else if !exhausted(&walked, &lists, a) {
                    complete = false;
                    break 'rounds;
                }
            }
            if !any {
                break;
            }
        }
        if complete || picked.len() >= target {
            return picked
                .into_iter()
                .map(|(a, r)| {
                    std::mem::replace(&mut lists[a][r], Found { res: SmallVec::new(), chosen: SmallVec::new() })
                })
                .collect();
        }
        // Double, or more when the rounds so far show each unexhausted
        // anchor must give more than that to fill `target`.
        let active = (0..n).filter(|a| !exhausted(&walked, &lists, *a)).count().max(1);
        let short = target.saturating_sub(picked.len()).div_ceil(active);
        quota = quota.saturating_mul(2).max(quota.saturating_add(short));
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
pub fn find<'a>(state: &'a State, req: &'a Request) -> Result<Candidates<'a>, CandidatesError> {
    Ok(find_packed(state, req)?.to_candidates())
}

/// [`find`] without the conversion into [`Candidates`]: the answer in
/// positional form, for a caller that writes it straight out (the API's
/// JSON writer) rather than building 10,000 candidates to read them once.
pub fn find_packed<'a>(state: &'a State, req: &'a Request) -> Result<Answer<'a>, CandidatesError> {
    find_with(state, req, true)
}

/// [`find`] without the tree-at-a-time early stop: every group is matched
/// against every provider before combining. Same answer; kept as the
/// reference the optimised path is tested against.
#[doc(hidden)]
pub fn find_exhaustive<'a>(state: &'a State, req: &'a Request) -> Result<Candidates<'a>, CandidatesError> {
    Ok(find_with(state, req, false)?.to_candidates())
}

fn find_with<'a>(state: &'a State, req: &'a Request, lazy_ok: bool) -> Result<Answer<'a>, CandidatesError> {
    let idx = Index::build(state);
    // How many candidates to generate: the cap, and the limit unless the
    // result is randomised (which samples the whole, possibly capped, set).
    let cap = req.max_candidates;
    let wanted = match (req.limit, req.randomize_seed) {
        (Some(limit), None) => limit,
        _ => usize::MAX,
    }
    .min(cap.unwrap_or(usize::MAX));
    // One group without sharing: every single-provider match is a final
    // answer in anchor order, so the scan may stop early. With a cap on trees
    // that order is depth-first, not breadth-first: no early stop then.
    // With a cap and randomisation the capped set must be a sample of all
    // viable anchors, not the first ones found: no early stop then either.
    let sample_under_cap = cap.is_some() && req.randomize_seed.is_some();
    let stop_after =
        if req.groups.len() == 1 && !idx.any_sharing && (cap.is_none() || !idx.has_trees) && !sample_under_cap {
            wanted
        } else {
            usize::MAX
        };
    // Tree at a time: with a limit (no randomisation) and no sharing
    // providers every candidate is anchored at its own tree, so trees can be
    // matched and combined one by one in anchor order, stopping at the limit.
    // (One single-provider group already stops early through `stop_after`,
    // whose provider-order cut this path would not reproduce.)
    let lazy = lazy_ok
        && cap.is_none()
        && req.randomize_seed.is_none()
        && req.limit.is_some()
        && !idx.any_sharing
        && (req.groups.len() > 1 || (idx.has_trees && req.groups.iter().all(|g| !g.use_same_provider())));
    let mut search = Search { state, idx, req, rc_names: Vec::new(), root_filtered: false, stop_after };
    if !search.root_filter()? {
        return Ok(Answer::empty(state));
    }
    let mut prepared: Vec<Prepared<'a>> = Vec::with_capacity(req.groups.len());
    let mut per_group: Vec<Vec<GAreq>> = Vec::with_capacity(req.groups.len());
    if lazy {
        for (k, group) in req.groups.iter().enumerate() {
            match search.prepare(group) {
                Ok(Some(p)) => prepared.push(p),
                Ok(None) => return Ok(Answer::empty(state)),
                Err(e) if k == 0 => return Err(e),
                // Whether this error is reported depends on whether an
                // earlier group matches anything at all: ask the full search.
                Err(_) => return find_with(state, req, false),
            }
        }
        per_group.resize_with(req.groups.len(), Vec::new);
    } else {
        let n = search.idx.len() as u32;
        let start = req.rotate.map_or(0, |r| (r % u64::from(n.max(1))) as u32);
        for group in &req.groups {
            let Some(p) = search.prepare(group)? else {
                return Ok(Answer::empty(state));
            };
            let mut areqs = Vec::new();
            search.scan_all(group, &p, start, &mut areqs);
            if areqs.is_empty() {
                return Ok(Answer::empty(state));
            }
            per_group.push(areqs);
        }
        for areqs in &mut per_group {
            areqs.sort_by_key(|a| a.anchor);
        }
    }
    if per_group.is_empty() {
        return Ok(Answer::empty(state));
    }

    // Combine one allocation request per group for each anchor.
    let exclude_nested = !req.nested_aware && search.idx.has_trees;
    let subtrees: Vec<Vec<usize>> = req
        .same_subtrees
        .iter()
        .map(|suffixes| suffixes.iter().filter_map(|s| req.groups.iter().position(|g| &g.suffix == s)).collect())
        .collect();
    let granular: Vec<bool> = req.groups.iter().map(|g| g.use_same_provider()).collect();
    let stop_at = wanted;
    let isolate = req.group_policy == Some(GroupPolicy::Isolate);
    let shape = (&granular[..], &subtrees[..]);
    let flags = (isolate, exclude_nested, stop_at);
    let mut found: Vec<Found> = Vec::new();
    if lazy {
        let topo = search.idx.topo;
        let mut marks: Vec<usize> = vec![0; per_group.len()];
        let n = search.idx.len();
        let start = req.rotate.map_or(0, |r| (r % n.max(1) as u64) as usize);
        for step in 0..n {
            let anchor = (start + step) % n;
            let members = topo.tree(anchor as u32);
            if members.is_empty() || !search.anchor_allowed(anchor as u32) {
                continue;
            }
            for (mark, areqs) in marks.iter_mut().zip(&per_group) {
                *mark = areqs.len();
            }
            let mut matched = true;
            for (g, group) in req.groups.iter().enumerate() {
                search.scan(group, &prepared[g], members, &mut per_group[g]);
                if per_group[g].len() == marks[g] {
                    matched = false;
                    break;
                }
            }
            let before = found.len();
            if matched {
                let mut merge = new_merge(&search, &per_group, shape, flags, std::mem::take(&mut found));
                for (g, areqs) in per_group.iter().enumerate() {
                    merge.ranges[g] = (marks[g] as u32, areqs.len() as u32);
                }
                merge.walk(0);
                found = std::mem::take(&mut merge.found);
            }
            if found.len() == before {
                // Nothing from this tree: forget its group matches.
                for (mark, areqs) in marks.iter().zip(&mut per_group) {
                    areqs.truncate(*mark);
                }
            }
            if found.len() >= stop_at {
                break;
            }
        }
    } else if cap.is_some() {
        found = breadth_first(&search, &per_group, shape, (isolate, exclude_nested), wanted, req.randomize_seed);
    } else {
        let mut merge = new_merge(&search, &per_group, shape, flags, Vec::new());
        let first = &per_group[0];
        let mut k = 0;
        'anchors: while k < first.len() && !merge.done() {
            let anchor = first[k].anchor;
            let mut end = k;
            while end < first.len() && first[end].anchor == anchor {
                end += 1;
            }
            merge.ranges[0] = (k as u32, end as u32);
            k = end;
            for (g, areqs) in per_group.iter().enumerate().skip(1) {
                let start = areqs.partition_point(|a| a.anchor < anchor);
                let stop = areqs.partition_point(|a| a.anchor <= anchor);
                if start == stop {
                    continue 'anchors;
                }
                merge.ranges[g] = (start as u32, stop as u32);
            }
            merge.walk(0);
        }
        found = std::mem::take(&mut merge.found);
    }
    let idx = &search.idx;
    // The cap was reached: viable candidates beyond it were not generated.
    let capped = cap.is_some_and(|c| found.len() >= c);

    // Providers summarised: whole trees of the providers used (only the
    // providers used, before 1.29 with trees around), of the candidates
    // kept. Positions, ascending; the cost follows the answer, not the
    // cloud.
    let mut used: Vec<u32> = found.iter().flat_map(|f| f.res.iter().map(|r| r.0)).collect();
    used.sort_unstable();
    used.dedup();
    let mut in_summary: Vec<u32> = if exclude_nested {
        used
    } else {
        let mut roots: Vec<u32> = used.iter().map(|rp| idx.root[*rp as usize]).collect();
        roots.sort_unstable();
        roots.dedup();
        let mut members: Vec<u32> = roots.iter().flat_map(|r| idx.topo.tree(*r).iter().copied()).collect();
        members.sort_unstable();
        members
    };
    match (req.limit, req.randomize_seed) {
        (Some(limit), seed) if limit < found.len() => {
            if let Some(seed) = seed {
                let mut rng = Rng(seed);
                for i in 0..limit {
                    let j = i + rng.below(found.len() - i);
                    found.swap(i, j);
                }
            }
            found.truncate(limit);
            let mut kept_roots: Vec<u32> =
                found.iter().flat_map(|f| f.res.iter().map(|r| idx.root[r.0 as usize])).collect();
            kept_roots.sort_unstable();
            kept_roots.dedup();
            in_summary.retain(|i| kept_roots.binary_search(&idx.root[*i as usize]).is_ok());
        }
        (_, Some(seed)) => {
            let mut rng = Rng(seed);
            for i in (1..found.len()).rev() {
                let j = rng.below(i + 1);
                found.swap(i, j);
            }
        }
        _ => {}
    }

    let uuids = &idx.topo.uuids[..];
    let requests = found
        .into_iter()
        .map(|f| {
            let mappings = f
                .chosen
                .iter()
                .zip(&per_group)
                .map(|(chosen, areqs)| {
                    let mut rps: crate::Positions = SmallVec::from_slice(&areqs[*chosen as usize].rps);
                    if rps.len() > 1 {
                        rps.sort_unstable_by_key(|rp| uuids[*rp as usize]);
                    }
                    rps
                })
                .collect();
            PackedRequest { amounts: f.res, mappings }
        })
        .collect();
    if req.skip_summaries {
        in_summary.clear();
    }
    Ok(Answer {
        state,
        uuids,
        classes: search.rc_names,
        suffixes: req.groups.iter().map(|g| g.suffix.as_str()).collect(),
        requests,
        summarised: in_summary.into_iter().map(|i| idx.prov(i)).collect(),
        capped,
    })
}

impl<'a> Answer<'a> {
    /// No candidates.
    fn empty(state: &'a State) -> Self {
        Answer {
            state,
            uuids: &[],
            classes: Vec::new(),
            suffixes: Vec::new(),
            requests: Vec::new(),
            summarised: Vec::new(),
            capped: false,
        }
    }

    /// The answer as [`Candidates`] (allocations grouped per provider in
    /// first-use order, uuids in place of positions, summaries built).
    pub fn to_candidates(&self) -> Candidates<'a> {
        let uuids = self.uuids;
        let allocation_requests = self
            .requests
            .iter()
            .map(|r| {
                let mut allocations: SmallVec<[(Uuid, crate::Amounts<'a>); 1]> = SmallVec::new();
                let mut order: SmallVec<[u32; 4]> = SmallVec::new();
                for &(rp, rc, amount) in &r.amounts {
                    let pos = match order.iter().position(|r| *r == rp) {
                        Some(pos) => pos,
                        None => {
                            order.push(rp);
                            allocations.push((uuids[rp as usize], SmallVec::new()));
                            order.len() - 1
                        }
                    };
                    allocations[pos].1.push((self.classes[rc as usize], amount));
                }
                let mappings = self
                    .suffixes
                    .iter()
                    .zip(&r.mappings)
                    .map(|(suffix, rps)| (*suffix, rps.iter().map(|rp| uuids[*rp as usize]).collect()))
                    .collect();
                AllocationRequest { allocations, mappings }
            })
            .collect();
        Candidates { allocation_requests, provider_summaries: self.summaries().collect(), capped: self.capped }
    }

    /// The summaries of [`Answer::summarised`], built one at a time.
    pub fn summaries(&self) -> impl Iterator<Item = ProviderSummary<'a>> + '_ {
        self.summarised.iter().map(|p| summary(self.state, p))
    }
}

/// The summary of one provider.
fn summary<'a>(state: &'a State, p: &'a Provider) -> ProviderSummary<'a> {
    // Upstream lists a provider's traits in trait id order (one
    // trait needs no lookup of its id). Plain loops rather than collects:
    // this runs once per summarised provider (10,000 in a large answer).
    let mut traits: SmallVec<[&str; 4]> = SmallVec::new();
    if p.traits.len() <= 1 {
        for t in &p.traits {
            traits.push(t.as_str());
        }
    } else {
        let mut by_id: Vec<(i64, &str)> =
            p.traits.iter().map(|t| (state.traits.get(t).map_or(i64::MAX, |tr| tr.id), t.as_str())).collect();
        by_id.sort_unstable();
        traits.extend(by_id.into_iter().map(|(_, t)| t));
    }
    let mut resources: SmallVec<[SummaryResource<'a>; 3]> = SmallVec::new();
    if p.usages.is_empty() {
        for (rc, inv) in &p.inventories {
            resources.push(SummaryResource { resource_class: rc.as_str(), capacity: inv.capacity(), used: 0 });
        }
    } else {
        // Inventories and usages are both ordered by class name: one
        // merge walk instead of a usage lookup per class.
        let mut usages = p.usages.iter().peekable();
        for (rc, inv) in &p.inventories {
            let used = loop {
                let Some((class, used)) = usages.peek() else { break 0 };
                match cmp_names(class, rc) {
                    std::cmp::Ordering::Less => {
                        usages.next();
                    }
                    std::cmp::Ordering::Equal => break **used,
                    std::cmp::Ordering::Greater => break 0,
                }
            };
            resources.push(SummaryResource { resource_class: rc.as_str(), capacity: inv.capacity(), used });
        }
    }
    ProviderSummary { uuid: p.uuid(), parent: p.row.parent, root: p.row.root, resources, traits }
}
