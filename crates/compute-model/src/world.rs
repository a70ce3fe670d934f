//! `World`: everything the control database holds — placement's state and
//! the compute control tables — and `WorldChangeSet`, the unit every
//! control write commits. One write may touch both halves (a boot's claim
//! allocates in placement and moves its build request into a cell in the
//! same transaction).

use berth_model::{AllocationMap, Change, ChangeSet, State};

use crate::state::Counted;
use crate::{ComputeChange, ComputeState, RowKey, CONSUMER_TYPE_INSTANCE};

/// The control database's whole state.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Placement: providers, inventories, consumers, allocations, ...
    pub placement: State,
    /// Compute control tables.
    pub compute: ComputeState,
}

/// One change to either half.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "change sets are short-lived lists; boxing would cost an allocation per change"
)]
pub enum WorldChange {
    /// A placement change.
    Placement(Change),
    /// A compute change.
    Compute(ComputeChange),
}

/// An ordered list of changes committed atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorldChangeSet {
    /// The changes, in application order.
    pub changes: Vec<WorldChange>,
}

impl WorldChangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Append a compute change.
    pub fn compute(&mut self, change: ComputeChange) {
        self.changes.push(WorldChange::Compute(change));
    }

    /// Append placement changes.
    pub fn placement(&mut self, set: ChangeSet) {
        self.changes.extend(set.changes.into_iter().map(WorldChange::Placement));
    }

    /// Append another set.
    pub fn extend(&mut self, other: WorldChangeSet) {
        self.changes.extend(other.changes);
    }

    /// The placement changes, in order.
    pub fn placement_changes(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter_map(|c| match c {
            WorldChange::Placement(p) => Some(p),
            WorldChange::Compute(_) => None,
        })
    }
}

impl From<ChangeSet> for WorldChangeSet {
    fn from(set: ChangeSet) -> Self {
        let mut out = WorldChangeSet::new();
        out.placement(set);
        out
    }
}

/// cores (VCPU + PCPU) and RAM of an allocation map.
fn counted_of(allocations: &AllocationMap) -> Counted {
    let mut out = Counted::default();
    for amounts in allocations.values() {
        for (class, amount) in amounts {
            match class.as_str() {
                "VCPU" | "PCPU" => out.cores += amount,
                "MEMORY_MB" => out.ram += amount,
                _ => {}
            }
        }
    }
    out
}

impl World {
    /// A world holding only placement's standard traits and classes.
    pub fn with_standard_data(now: crate::Timestamp) -> Self {
        World { placement: State::with_standard_data(now), compute: ComputeState::default() }
    }

    /// Apply a committed (or about to be committed) change set. The one
    /// mutation path of the control state.
    pub fn apply(&mut self, set: &WorldChangeSet) {
        for change in &set.changes {
            match change {
                WorldChange::Placement(change) => self.apply_placement(change),
                WorldChange::Compute(change) => self.compute.apply_one(change),
            }
        }
    }

    /// Apply placement changes given as a placement change set.
    pub fn apply_placement_set(&mut self, set: &ChangeSet) {
        for change in &set.changes {
            self.apply_placement(change);
        }
    }

    fn apply_placement(&mut self, change: &Change) {
        // Keep the quota index of INSTANCE consumers current: take the
        // consumer's old contribution out before, put the new one in after.
        let consumer = match change {
            Change::PutConsumer { row, .. } => Some(row.uuid),
            Change::DeleteConsumer { uuid, .. } => Some(*uuid),
            _ => None,
        };
        if let Some(uuid) = consumer {
            self.account_consumer(&uuid, -1);
        }
        self.placement.apply(&ChangeSet { changes: vec![change.clone()] });
        if let Some(uuid) = consumer {
            self.account_consumer(&uuid, 1);
        }
    }

    fn account_consumer(&mut self, uuid: &uuid::Uuid, sign: i64) {
        let Some(consumer) = self.placement.consumers.get(uuid) else { return };
        if consumer.row.consumer_type.as_deref() != Some(CONSUMER_TYPE_INSTANCE) {
            return;
        }
        let counted = counted_of(&consumer.allocations);
        let (project, user) = (consumer.row.project_id.clone(), consumer.row.user_id.clone());
        self.compute.account_placed(&project, &user, counted, sign);
    }

    /// The change set that, applied after `set`, restores every row `set`
    /// touches to its state in `self` (which must be the state `set` is
    /// about to be applied to).
    pub fn undo_for(&self, set: &WorldChangeSet) -> WorldChangeSet {
        let placement = ChangeSet { changes: set.placement_changes().cloned().collect() };
        let mut undo = WorldChangeSet::new();
        let mut seen: Vec<RowKey> = Vec::new();
        for change in &set.changes {
            if let WorldChange::Compute(change) = change {
                let key = change.key();
                if seen.contains(&key) {
                    continue;
                }
                let restore = self.compute.row(&key).unwrap_or_else(|| ComputeState::delete_of(&key));
                undo.compute(restore);
                seen.push(key);
            }
        }
        if !placement.is_empty() {
            undo.placement(self.placement.undo_for(&placement));
        }
        undo
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use berth_model::{ConsumerRow, Inventory, ProviderRow, Uuid};

    use super::*;
    use crate::{BuildRequest, Flavor, InstanceMapping, InstanceSpec};

    pub(crate) fn flavor(vcpus: i64, ram: i64) -> Flavor {
        Flavor {
            id: 1,
            flavorid: "f1".into(),
            name: "small".into(),
            memory_mb: ram,
            vcpus,
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
        }
    }

    fn spec(vcpus: i64, ram: i64) -> InstanceSpec {
        InstanceSpec {
            display_name: "vm".into(),
            display_description: None,
            hostname: "vm".into(),
            image_ref: None,
            image_properties: BTreeMap::new(),
            flavor: flavor(vcpus, ram),
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

    fn fingerprint(world: &World) -> String {
        let c = &world.compute;
        let mut mappings: Vec<_> = c.instance_mappings.values().map(|m| format!("{m:?}")).collect();
        mappings.sort();
        let mut brs: Vec<_> = c.build_requests.keys().map(|u| u.to_string()).collect();
        brs.sort();
        format!(
            "{mappings:?} {brs:?} {:?} {:?} {:?} {}",
            c.counted("p", None),
            c.counted("p", Some("u")),
            c.instance_count("p", None),
            world.placement.consumers.len()
        )
    }

    /// Quota counting follows mappings, build requests and INSTANCE
    /// allocations through apply and undo.
    #[test]
    fn counts_follow_changes_and_undo() {
        let mut world = World::with_standard_data(0);
        let rp = Uuid::new_v4();
        let mut setup = ChangeSet::new();
        setup.push(Change::PutProvider {
            row: ProviderRow {
                id: 1,
                uuid: rp,
                name: "h1".into(),
                generation: 0,
                parent: None,
                root: rp,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
        });
        let inv = Inventory { total: 64, reserved: 0, min_unit: 1, max_unit: 64, step_size: 1, allocation_ratio: 1.0 };
        setup.push(Change::SetInventories {
            provider: rp,
            inventories: [("VCPU".to_owned(), inv.clone()), ("MEMORY_MB".to_owned(), inv)].into(),
        });
        world.apply(&setup.into());

        let instance = Uuid::new_v4();
        let mut boot = WorldChangeSet::new();
        boot.compute(ComputeChange::PutInstanceMapping(InstanceMapping {
            instance_uuid: instance,
            cell: None,
            project_id: "p".into(),
            user_id: "u".into(),
            queued_for_delete: false,
            created_at: 1,
        }));
        boot.compute(ComputeChange::PutBuildRequest(BuildRequest {
            instance_uuid: instance,
            project_id: "p".into(),
            user_id: "u".into(),
            spec: spec(2, 8),
            created_at: 1,
            held: false,
        }));
        let before = fingerprint(&world);
        let undo = world.undo_for(&boot);
        world.apply(&boot);
        assert_eq!(world.compute.instance_count("p", None), 1);
        assert_eq!(world.compute.counted("p", Some("u")), Counted { cores: 2, ram: 8 });
        let after_boot = fingerprint(&world);

        // The claim: build request gone, allocation made, mapping kept.
        let mut claim = WorldChangeSet::new();
        claim.compute(ComputeChange::DeleteBuildRequest(instance));
        let mut allocations = AllocationMap::new();
        allocations.entry(rp).or_default().insert("VCPU".into(), 2);
        allocations.entry(rp).or_default().insert("MEMORY_MB".into(), 8);
        claim.changes.push(WorldChange::Placement(Change::PutConsumer {
            row: ConsumerRow {
                uuid: instance,
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 1,
                consumer_type: Some(CONSUMER_TYPE_INSTANCE.into()),
                created_at: 1,
                updated_at: 1,
            },
            expected_generation: None,
            allocations,
        }));
        let undo_claim = world.undo_for(&claim);
        world.apply(&claim);
        assert_eq!(world.compute.counted("p", None), Counted { cores: 2, ram: 8 }, "placed, not pending");
        assert!(world.compute.build_requests.is_empty());
        world.apply(&undo_claim);
        assert_eq!(fingerprint(&world), after_boot);
        world.apply(&undo);
        assert_eq!(fingerprint(&world), before);
        assert_eq!(world.compute.counted("p", None), Counted::default());
    }
}
