//! Derived indexes for the allocation-candidate search, kept current by
//! [`State::apply`](crate::State::apply), so that a search visits only
//! plausible providers instead of every provider:
//!
//! - [`SearchIndex`]: provider ids (creation order) by trait, by aggregate
//!   and by resource class with at least one unit free. Updated
//!   incrementally for the providers a change touches (a claim re-indexes
//!   only the providers it allocates against).
//! - [`Topology`]: providers by position in creation order, with their
//!   roots, parents, tree membership and sharing flags. Built on first use
//!   after a change of shape (a provider created, deleted or re-parented, a
//!   provider starting or stopping to share) and then reused by every
//!   search until the next such change: claims, inventory, trait and
//!   aggregate updates leave it alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use uuid::Uuid;

use crate::Provider;

/// No provider (parent of a root).
pub const NO_POSITION: u32 = u32::MAX;

/// Provider ids by trait, aggregate and class with room.
#[derive(Debug, Clone, Default)]
pub struct SearchIndex {
    /// Providers having each trait.
    pub with_trait: HashMap<String, BTreeSet<i64>>,
    /// Providers in each aggregate.
    pub in_aggregate: HashMap<Uuid, BTreeSet<i64>>,
    /// Providers with at least one unit of each resource class free
    /// (`capacity - used >= 1`): a provider outside the set cannot take
    /// any positive amount of that class.
    pub with_room: HashMap<String, BTreeSet<i64>>,
}

fn add<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, BTreeSet<i64>>, key: &K, id: i64) {
    match map.get_mut(key) {
        Some(set) => {
            set.insert(id);
        }
        None => {
            map.insert(key.clone(), BTreeSet::from([id]));
        }
    }
}

fn remove<K: std::hash::Hash + Eq>(map: &mut HashMap<K, BTreeSet<i64>>, key: &K, id: i64) {
    if let Some(set) = map.get_mut(key) {
        set.remove(&id);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// Classes of `p` with at least one unit free.
pub fn classes_with_room(p: &Provider) -> impl Iterator<Item = &String> {
    p.inventories.iter().filter(|(class, inv)| inv.capacity() - p.used(class) >= 1).map(|(class, _)| class)
}

impl SearchIndex {
    /// Add `p`'s traits.
    pub(crate) fn add_traits(&mut self, p: &Provider) {
        for t in &p.traits {
            add(&mut self.with_trait, t, p.row.id);
        }
    }

    /// Remove `p`'s traits.
    pub(crate) fn remove_traits(&mut self, p: &Provider) {
        for t in &p.traits {
            remove(&mut self.with_trait, t, p.row.id);
        }
    }

    /// Add `p`'s aggregates.
    pub(crate) fn add_aggregates(&mut self, p: &Provider) {
        for a in &p.aggregates {
            add(&mut self.in_aggregate, a, p.row.id);
        }
    }

    /// Remove `p`'s aggregates.
    pub(crate) fn remove_aggregates(&mut self, p: &Provider) {
        for a in &p.aggregates {
            remove(&mut self.in_aggregate, a, p.row.id);
        }
    }

    /// Add `p`'s classes with room.
    pub(crate) fn add_room(&mut self, p: &Provider) {
        for class in classes_with_room(p) {
            add(&mut self.with_room, class, p.row.id);
        }
    }

    /// Remove `p` from every class's room set it could be in.
    pub(crate) fn remove_room(&mut self, p: &Provider) {
        for class in p.inventories.keys() {
            remove(&mut self.with_room, class, p.row.id);
        }
    }

    /// Remove every entry of `p`.
    pub(crate) fn remove_provider(&mut self, p: &Provider) {
        self.remove_traits(p);
        self.remove_aggregates(p);
        self.remove_room(p);
    }
}

/// Providers by position in creation order, with their tree shape.
#[derive(Debug, Default)]
pub struct Topology {
    /// Provider uuid at each position.
    pub uuids: Vec<Uuid>,
    /// Provider id at each position (ascending).
    pub ids: Vec<i64>,
    /// Position by provider id ([`NO_POSITION`] for none), when ids are
    /// dense enough for a table (few deleted providers); else empty and
    /// lookups binary-search `ids`.
    pub id_pos: Vec<u32>,
    /// Root position of each position.
    pub root: Vec<u32>,
    /// Parent position ([`NO_POSITION`] for roots).
    pub parent: Vec<u32>,
    /// Sharing providers (trait `MISC_SHARES_VIA_AGGREGATE`).
    pub sharing: Vec<bool>,
    /// Some provider has a parent.
    pub has_trees: bool,
    /// Some provider shares.
    pub any_sharing: bool,
    /// Members of the tree rooted at position `r` are
    /// `tree_order[tree_starts[r]..tree_starts[r + 1]]`, ascending.
    pub tree_order: Vec<u32>,
    /// See `tree_order`.
    pub tree_starts: Vec<u32>,
}

impl Topology {
    /// Position of the provider with internal id `id`.
    pub fn position_of_id(&self, id: i64) -> Option<u32> {
        if !self.id_pos.is_empty() {
            return usize::try_from(id).ok().and_then(|i| self.id_pos.get(i)).copied().filter(|p| *p != NO_POSITION);
        }
        self.ids.binary_search(&id).ok().map(|p| p as u32)
    }

    /// Number of providers.
    pub fn len(&self) -> usize {
        self.uuids.len()
    }

    /// No providers at all.
    pub fn is_empty(&self) -> bool {
        self.uuids.is_empty()
    }

    /// Members of the tree rooted at position `root` (empty when `root` is
    /// not a root), ascending.
    pub fn tree(&self, root: u32) -> &[u32] {
        let r = root as usize;
        &self.tree_order[self.tree_starts[r] as usize..self.tree_starts[r + 1] as usize]
    }

    pub(crate) fn build(state: &crate::State) -> Self {
        let n = state.provider_order.len();
        let mut topo = Topology {
            uuids: Vec::with_capacity(n),
            ids: Vec::with_capacity(n),
            root: Vec::with_capacity(n),
            parent: Vec::with_capacity(n),
            sharing: Vec::with_capacity(n),
            ..Topology::default()
        };
        for (id, uuid) in &state.provider_order {
            topo.ids.push(*id);
            topo.uuids.push(*uuid);
        }
        if let (Some(&lo), Some(&hi)) = (topo.ids.first(), topo.ids.last()) {
            if lo >= 0 && (hi as u64) < 4 * n as u64 + 1024 {
                let mut id_pos = vec![NO_POSITION; hi as usize + 1];
                for (pos, id) in topo.ids.iter().enumerate() {
                    id_pos[*id as usize] = pos as u32;
                }
                topo.id_pos = id_pos;
            }
        }
        let pos_of = |uuid: &Uuid| -> Option<u32> {
            let id = state.providers.get(uuid)?.row.id;
            topo.ids.binary_search(&id).ok().map(|p| p as u32)
        };
        let mut root = Vec::with_capacity(n);
        let mut parent = Vec::with_capacity(n);
        let mut sharing = Vec::with_capacity(n);
        let mut has_trees = false;
        for (i, uuid) in topo.uuids.iter().enumerate() {
            let Some(p) = state.providers.get(uuid) else {
                root.push(i as u32);
                parent.push(NO_POSITION);
                sharing.push(false);
                continue;
            };
            root.push(if p.row.root == p.row.uuid { i as u32 } else { pos_of(&p.row.root).unwrap_or(i as u32) });
            parent.push(match p.row.parent {
                Some(u) => {
                    has_trees = true;
                    pos_of(&u).unwrap_or(NO_POSITION)
                }
                None => NO_POSITION,
            });
            sharing.push(!state.sharing_providers.is_empty() && state.sharing_providers.contains(uuid));
        }
        topo.any_sharing = sharing.iter().any(|s| *s);
        topo.has_trees = has_trees;
        topo.root = root;
        topo.parent = parent;
        topo.sharing = sharing;
        let mut starts = vec![0u32; n + 1];
        for &r in &topo.root {
            starts[r as usize + 1] += 1;
        }
        for r in 0..n {
            starts[r + 1] += starts[r];
        }
        let mut fill: Vec<u32> = starts[..n].to_vec();
        let mut order = vec![0u32; n];
        for (i, &r) in topo.root.iter().enumerate() {
            order[fill[r as usize] as usize] = i as u32;
            fill[r as usize] += 1;
        }
        topo.tree_order = order;
        topo.tree_starts = starts;
        topo
    }
}

/// The cached [`Topology`] of a state (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct TopologyCache(OnceLock<Arc<Topology>>);

impl TopologyCache {
    /// The topology, built now if the shape changed since the last build.
    pub fn get<'s>(&'s self, state: &crate::State) -> &'s Topology {
        self.0.get_or_init(|| Arc::new(Topology::build(state)))
    }

    /// Forget the topology (the shape changed).
    pub(crate) fn invalidate(&mut self) {
        self.0 = OnceLock::new();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ProviderRow, State};

    /// The index as a fresh build from the providers would be.
    fn rebuilt(state: &State) -> SearchIndex {
        let mut index = SearchIndex::default();
        for p in state.providers.values() {
            index.add_traits(p);
            index.add_aggregates(p);
            index.add_room(p);
        }
        index
    }

    fn assert_current(state: &State, step: &str) {
        let fresh = rebuilt(state);
        assert_eq!(state.search.with_trait, fresh.with_trait, "traits after {step}");
        assert_eq!(state.search.in_aggregate, fresh.in_aggregate, "aggregates after {step}");
        assert_eq!(state.search.with_room, fresh.with_room, "room after {step}");
        let cached = state.topology();
        let built = Topology::build(state);
        assert_eq!(
            (&cached.uuids, &cached.root, &cached.parent, &cached.sharing, &cached.tree_order),
            (&built.uuids, &built.root, &built.parent, &built.sharing, &built.tree_order),
            "topology after {step}"
        );
    }

    fn inv(total: i64) -> Inventory {
        Inventory { total, reserved: 0, min_unit: 1, max_unit: total, step_size: 1, allocation_ratio: 1.0 }
    }

    fn provider(id: i64, uuid: Uuid, parent: Option<Uuid>, root: Uuid) -> Change {
        let row =
            ProviderRow { id, uuid, name: format!("p{id}"), generation: 0, parent, root, created_at: 1, updated_at: 1 };
        Change::PutProvider { row, expected_generation: None }
    }

    fn claim(consumer: Uuid, on: &[(Uuid, &str, i64)]) -> Change {
        let mut allocations = AllocationMap::new();
        for (p, class, amount) in on {
            allocations.entry(*p).or_default().insert((*class).to_owned(), *amount);
        }
        let row = ConsumerRow {
            uuid: consumer,
            project_id: "p".into(),
            user_id: "u".into(),
            generation: 0,
            consumer_type: None,
            created_at: 1,
            updated_at: 1,
        };
        Change::PutConsumer { row, expected_generation: None, allocations }
    }

    #[test]
    fn indexes_follow_every_kind_of_change() {
        let mut state = State::with_standard_data(1);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let agg = Uuid::new_v4();
        let steps: Vec<(&str, Vec<Change>)> = vec![
            ("providers", vec![provider(1, a, None, a), provider(2, b, None, b), provider(3, c, Some(a), a)]),
            (
                "inventories",
                vec![
                    Change::SetInventories { provider: a, inventories: BTreeMap::from([("VCPU".into(), inv(2))]) },
                    Change::SetInventories {
                        provider: b,
                        inventories: BTreeMap::from([("VCPU".into(), inv(1)), ("DISK_GB".into(), inv(10))]),
                    },
                ],
            ),
            (
                "traits and aggregates",
                vec![
                    Change::SetProviderTraits { provider: a, traits: BTreeSet::from(["HW_CPU_X86_AVX2".into()]) },
                    Change::SetProviderAggregates { provider: b, aggregates: BTreeSet::from([agg]) },
                    Change::SetProviderAggregates { provider: c, aggregates: BTreeSet::from([agg]) },
                ],
            ),
            ("a claim that fills b's VCPU", vec![claim(Uuid::from_u128(7), &[(b, "VCPU", 1), (b, "DISK_GB", 3)])]),
            ("a claim on a", vec![claim(Uuid::from_u128(8), &[(a, "VCPU", 1)])]),
            ("b's claim moves to a", vec![claim(Uuid::from_u128(7), &[(a, "VCPU", 1)])]),
            (
                "c starts sharing",
                vec![Change::SetProviderTraits {
                    provider: c,
                    traits: BTreeSet::from(["MISC_SHARES_VIA_AGGREGATE".into()]),
                }],
            ),
            ("a consumer deleted", vec![Change::DeleteConsumer { uuid: Uuid::from_u128(8), expected_generation: 0 }]),
            ("c re-parented to b", vec![provider(3, c, Some(b), b)]),
            ("b's inventory shrinks", vec![Change::SetInventories { provider: b, inventories: BTreeMap::new() }]),
            ("a provider deleted", vec![Change::DeleteProvider { uuid: c, expected_generation: 0 }]),
        ];
        for (step, changes) in steps {
            let mut set = ChangeSet::new();
            for change in changes {
                set.push(change);
            }
            state.apply(&set);
            assert_current(&state, step);
        }
        // a: 2 VCPU, 1 held by consumer 7 (8 was deleted); b has no inventory.
        assert_eq!(state.search.with_room.get("VCPU"), Some(&BTreeSet::from([1])));
        assert_eq!(state.topology().len(), 2);
    }
}
