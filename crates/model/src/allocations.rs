//! Planning allocation writes: replace the allocations of one or several
//! consumers atomically (`PUT /allocations/{c}`, `POST /allocations`), delete
//! a consumer's allocations, and the reshaper (inventories and allocations
//! of many providers and consumers in one change set).
//!
//! The rules are upstream's (`objects/allocation.py::_set_allocations`,
//! `_check_capacity_exceeded`, `handlers/util.py::ensure_consumer`):
//! - a consumer's current allocations are removed before the new ones are
//!   checked, so usage is computed excluding the consumers being written;
//! - each written (provider, class) must be in the provider's inventory,
//!   the amount within `min_unit..=max_unit` and a multiple of `step_size`,
//!   and usage after the write must fit `(total - reserved) * ratio`;
//! - an over-capacity write is still accepted when it does not make the
//!   provider's usage of that class larger than it was ("does not worsen");
//! - every provider receiving allocations (or losing them through an
//!   emptied consumer) gets its generation bumped, every written consumer
//!   too; consumers left without allocations are deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::{AllocationMap, Change, ChangeSet, ConsumerRow, Inventory, ModelError, Result, State, Timestamp};

/// Which consumer generation a write expects (microversion 1.28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGeneration {
    /// Before 1.28: no check.
    Unchecked,
    /// `consumer_generation: null`: the consumer must not exist yet.
    New,
    /// The consumer must exist at this generation.
    Is(i64),
}

/// The new allocations of one consumer, as a request states them.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerAllocations {
    /// The consumer.
    pub consumer: Uuid,
    /// Owning project (the incomplete-consumer id before 1.8).
    pub project_id: String,
    /// Owning user (the incomplete-consumer id before 1.8).
    pub user_id: String,
    /// Expected consumer generation.
    pub generation: ConsumerGeneration,
    /// Consumer type (1.38); `None` keeps the current one.
    pub consumer_type: Option<String>,
    /// All allocations of the consumer after the write; empty means
    /// "remove them all".
    pub allocations: AllocationMap,
}

/// The requested inventories of one provider in a reshape.
#[derive(Debug, Clone, PartialEq)]
pub struct ReshapeInventories {
    /// The provider.
    pub provider: Uuid,
    /// The provider generation the client saw.
    pub generation: i64,
    /// All inventories of the provider after the reshape.
    pub inventories: BTreeMap<String, Inventory>,
}

/// Why planning the allocation write failed, before the handler adds its
/// operation-specific prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationError {
    /// Consumer generation mismatch (409 `placement.concurrent_update`).
    ConsumerConflict(String),
    /// An allocation names a provider that does not exist (400).
    ProviderMissing(String),
    /// An allocation names a resource class that does not exist (400,
    /// upstream's `NotFound`).
    ClassNotFound(String),
    /// The inventory cannot hold the allocation: missing class, unit
    /// constraints or capacity (409, upstream's `InvalidInventory`).
    InvalidInventory(String),
}

fn consumer_conflict(expected: Option<i64>, got: ConsumerGeneration) -> AllocationError {
    let expected = expected.map_or_else(|| "null".to_owned(), |g| g.to_string());
    let got = match got {
        ConsumerGeneration::Is(g) => g.to_string(),
        _ => "None".to_owned(),
    };
    AllocationError::ConsumerConflict(format!("consumer generation conflict - expected {expected} but got {got}"))
}

/// `ensure_consumer`'s generation check for every consumer, in request order.
pub fn check_consumer_generations(state: &State, requests: &[ConsumerAllocations]) -> Result<(), AllocationError> {
    for request in requests {
        let current = state.consumers.get(&request.consumer).map(|c| c.row.generation);
        match (request.generation, current) {
            (ConsumerGeneration::Unchecked, _) => {}
            (ConsumerGeneration::New, None) => {}
            (ConsumerGeneration::Is(g), Some(c)) if g == c => {}
            (got, current) => return Err(consumer_conflict(current, got)),
        }
    }
    Ok(())
}

/// `_resource_providers_by_uuid`: every provider named must exist.
fn check_providers_exist(state: &State, requests: &[ConsumerAllocations]) -> Result<(), AllocationError> {
    for request in requests {
        for provider in request.allocations.keys() {
            if state.provider(provider).is_none() {
                return Err(AllocationError::ProviderMissing(format!(
                    "Allocation for resource provider '{provider}' that does not exist."
                )));
            }
        }
    }
    Ok(())
}

/// One allocation row as upstream's `_set_allocations` sees it; `used == 0`
/// marks the rows of a consumer whose allocations are being wiped.
struct Row<'a> {
    provider: Uuid,
    class: &'a str,
    used: i64,
}

/// The result of [`replace_all`]: changes to consumers, and the providers
/// whose generation the write bumps.
struct Replaced {
    consumer_changes: Vec<Change>,
    touched_providers: BTreeSet<Uuid>,
}

/// Upstream's `replace_all`/`_set_allocations` against `inventories_of`
/// (the providers' inventories at that moment; the reshaper passes interim
/// ones). Consumer generations and provider existence must have been
/// checked already.
fn replace_all<'s>(
    state: &'s State,
    requests: &'s [ConsumerAllocations],
    inventories_of: &dyn Fn(&Uuid) -> Option<&'s BTreeMap<String, Inventory>>,
    now: Timestamp,
) -> Result<Replaced, AllocationError> {
    // The allocation rows of the write, in request order.
    let mut rows: Vec<Row<'s>> = Vec::new();
    for request in requests {
        if request.allocations.is_empty() {
            if let Some(existing) = state.consumers.get(&request.consumer) {
                for (provider, amounts) in &existing.allocations {
                    for class in amounts.keys() {
                        rows.push(Row { provider: *provider, class, used: 0 });
                    }
                }
            }
        } else {
            for (provider, amounts) in &request.allocations {
                for (class, amount) in amounts {
                    rows.push(Row { provider: *provider, class, used: *amount });
                }
            }
        }
    }

    // Resource classes must exist (upstream looks every one up first).
    let mut class_ids: BTreeMap<i64, &str> = BTreeMap::new();
    for row in &rows {
        match state.resource_classes.get(row.class) {
            Some(rc) => {
                class_ids.insert(rc.id, row.class);
            }
            None => return Err(AllocationError::ClassNotFound(format!("No such resource class {}.", row.class))),
        }
    }

    // Usage before the write, and usage once the written consumers'
    // allocations are removed.
    let written: BTreeSet<Uuid> = requests.iter().map(|r| r.consumer).collect();
    let mut prev_usage: HashMap<(Uuid, &str), i64> = HashMap::new();
    let mut base_usage: HashMap<(Uuid, &str), i64> = HashMap::new();
    for row in &rows {
        let key = (row.provider, row.class);
        if prev_usage.contains_key(&key) {
            continue;
        }
        let Some(provider) = state.provider(&row.provider) else { continue };
        let mut total: i64 = 0;
        let mut others: i64 = 0;
        let mut any = false;
        for consumer_uuid in &provider.consumers {
            let Some(consumer) = state.consumers.get(consumer_uuid) else { continue };
            let Some(amount) = consumer.allocations.get(&row.provider).and_then(|a| a.get(row.class)) else {
                continue;
            };
            any = true;
            total = total.saturating_add(*amount);
            if !written.contains(consumer_uuid) {
                others = others.saturating_add(*amount);
            }
        }
        if any {
            prev_usage.insert(key, total);
        }
        base_usage.insert(key, others);
    }

    // Every provider must have inventory of at least one of the classes.
    let providers: BTreeSet<Uuid> = rows.iter().map(|r| r.provider).collect();
    let missing: Vec<String> = providers
        .iter()
        .filter(|p| {
            let invs = inventories_of(p);
            !class_ids.values().any(|class| invs.is_some_and(|i| i.contains_key(*class)))
        })
        .map(|p| p.to_string())
        .collect();
    if !missing.is_empty() {
        let classes: Vec<&str> = class_ids.values().copied().collect();
        return Err(AllocationError::InvalidInventory(format!(
            "Inventory for '{}' on resource provider '{}' invalid.",
            classes.join(", "),
            missing.join(", ")
        )));
    }

    let mut sums: HashMap<(Uuid, &str), i64> = HashMap::new();
    for row in &rows {
        let key = (row.provider, row.class);
        let sum = sums.entry(key).or_insert(0);
        *sum = sum.saturating_add(row.used);
        let needed_all = *sum;
        if row.used == 0 {
            continue;
        }
        let Some(inventory) = inventories_of(&row.provider).and_then(|i| i.get(row.class)) else {
            return Err(AllocationError::InvalidInventory(format!(
                "Inventory for '{}' on resource provider '{}' invalid.",
                row.class, row.provider
            )));
        };
        check_allocation(
            inventory,
            row.used,
            needed_all,
            base_usage.get(&key).copied().unwrap_or(0),
            prev_usage.get(&key).copied(),
        )
        .map_err(|violation| AllocationError::InvalidInventory(violation.message(row.class, &row.provider)))?;
    }

    // Consumers: bump (or create at 1), delete those left empty.
    let mut consumer_changes = Vec::new();
    let mut seen = BTreeSet::new();
    for request in requests {
        if !seen.insert(request.consumer) {
            continue;
        }
        let existing = state.consumers.get(&request.consumer);
        if request.allocations.is_empty() {
            match existing {
                Some(existing) if !existing.allocations.is_empty() => {
                    consumer_changes.push(Change::DeleteConsumer {
                        uuid: request.consumer,
                        expected_generation: existing.row.generation,
                    });
                }
                // Upstream's ensure_consumer creates the consumer record
                // (generation 0) before finding nothing to write, and
                // updates an existing empty one's owner without a bump.
                Some(existing) => {
                    let mut row = existing.row.clone();
                    row.project_id = request.project_id.clone();
                    row.user_id = request.user_id.clone();
                    if request.consumer_type.is_some() {
                        row.consumer_type = request.consumer_type.clone();
                    }
                    if row != existing.row {
                        row.updated_at = now;
                        consumer_changes.push(Change::PutConsumer {
                            row,
                            expected_generation: Some(existing.row.generation),
                            allocations: AllocationMap::new(),
                        });
                    }
                }
                None => consumer_changes.push(Change::PutConsumer {
                    row: ConsumerRow {
                        uuid: request.consumer,
                        project_id: request.project_id.clone(),
                        user_id: request.user_id.clone(),
                        generation: 0,
                        consumer_type: request.consumer_type.clone(),
                        created_at: now,
                        updated_at: now,
                    },
                    expected_generation: None,
                    allocations: AllocationMap::new(),
                }),
            }
            continue;
        }
        let row = match existing {
            Some(existing) => ConsumerRow {
                uuid: request.consumer,
                project_id: request.project_id.clone(),
                user_id: request.user_id.clone(),
                generation: existing.row.generation + 1,
                consumer_type: request.consumer_type.clone().or_else(|| existing.row.consumer_type.clone()),
                created_at: existing.row.created_at,
                updated_at: now,
            },
            None => ConsumerRow {
                uuid: request.consumer,
                project_id: request.project_id.clone(),
                user_id: request.user_id.clone(),
                generation: 1,
                consumer_type: request.consumer_type.clone(),
                created_at: now,
                updated_at: now,
            },
        };
        consumer_changes.push(Change::PutConsumer {
            row,
            expected_generation: existing.map(|c| c.row.generation),
            allocations: request.allocations.clone(),
        });
    }
    Ok(Replaced { consumer_changes, touched_providers: providers })
}

/// Why one allocation does not fit an inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// Outside `min_unit..=max_unit` or not a multiple of `step_size`.
    Constraints,
    /// Usage would exceed capacity (and be worse than before).
    Capacity,
}

impl Violation {
    /// Upstream's exception text.
    pub fn message(self, class: &str, provider: &Uuid) -> String {
        let why = match self {
            Violation::Constraints => "would violate inventory constraints",
            Violation::Capacity => "would exceed the capacity",
        };
        format!(
            "Unable to create allocation for '{class}' on resource provider '{provider}'. The requested amount {why}."
        )
    }
}

/// Upstream's per-allocation check. `amount` is this allocation,
/// `needed_all` the running total the write puts on the (provider, class),
/// `used` the usage of other consumers, `prev_used` the usage before the
/// write (`None` when there was none).
pub fn check_allocation(
    inventory: &Inventory,
    amount: i64,
    needed_all: i64,
    used: i64,
    prev_used: Option<i64>,
) -> Result<(), Violation> {
    if amount < inventory.min_unit
        || amount > inventory.max_unit
        || inventory.step_size <= 0
        || amount % inventory.step_size != 0
    {
        return Err(Violation::Constraints);
    }
    let capacity = (inventory.total - inventory.reserved) as f64 * inventory.allocation_ratio;
    let after = used.saturating_add(needed_all);
    let exceeds = capacity < used.saturating_add(amount) as f64 || capacity < after as f64;
    if exceeds && prev_used.is_none_or(|prev| after > prev) {
        return Err(Violation::Capacity);
    }
    Ok(())
}

/// Plan replacing the allocations of the consumers in `requests` (one for
/// `PUT /allocations/{c}`, several for `POST /allocations`). Returns the
/// change set; errors are [`AllocationError`] so each handler can word them.
pub fn plan_replace_allocations(
    state: &State,
    requests: &[ConsumerAllocations],
    now: Timestamp,
) -> Result<ChangeSet, AllocationError> {
    check_consumer_generations(state, requests)?;
    check_providers_exist(state, requests)?;
    let inventories_of = |uuid: &Uuid| state.provider(uuid).map(|p| &p.inventories);
    let replaced = replace_all(state, requests, &inventories_of, now)?;
    let mut set = ChangeSet::new();
    for uuid in &replaced.touched_providers {
        if let Some(provider) = state.provider(uuid) {
            let mut row = provider.row.clone();
            row.generation += 1;
            row.updated_at = now;
            set.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
        }
    }
    for change in replaced.consumer_changes {
        set.push(change);
    }
    Ok(set)
}

/// Plan `DELETE /allocations/{consumer}`: remove every allocation of the
/// consumer and the consumer itself. Provider generations are not bumped
/// (as upstream's `delete_all`).
pub fn plan_delete_allocations(state: &State, consumer: Uuid) -> Result<ChangeSet> {
    match state.consumers.get(&consumer) {
        Some(existing) if !existing.allocations.is_empty() => {
            let mut set = ChangeSet::new();
            set.push(Change::DeleteConsumer { uuid: consumer, expected_generation: existing.row.generation });
            Ok(set)
        }
        _ => Err(ModelError::NotFound(format!("No allocations for consumer '{consumer}'"))),
    }
}

/// Plan `POST /reshaper` (1.30): replace the inventories of the providers in
/// `inventories` and the allocations of the consumers in `allocations` in
/// one change set. Allocations are checked against the union of old and
/// new inventories (upstream's interim inventory); classes removed from an
/// inventory must have no allocations left afterwards.
pub fn plan_reshape(
    state: &State,
    inventories: &[ReshapeInventories],
    allocations: &[ConsumerAllocations],
    now: Timestamp,
) -> Result<ChangeSet> {
    let mut bumps: BTreeMap<Uuid, i64> = BTreeMap::new();
    for requested in inventories {
        let uuid = requested.provider;
        let Some(provider) = state.provider(&uuid) else {
            return Err(ModelError::ProviderNotFound(format!(
                "Resource provider {uuid} in inventories not found: No resource provider with uuid {uuid} found"
            )));
        };
        if requested.generation != provider.row.generation {
            return Err(ModelError::GenerationConflict(format!(
                "resource provider generation conflict for provider {uuid}: actual: {}, given: {}",
                provider.row.generation, requested.generation
            )));
        }
    }
    let reshape_error = |err: AllocationError| match err {
        AllocationError::ConsumerConflict(m) => ModelError::GenerationConflict(m),
        AllocationError::ProviderMissing(m) => ModelError::Invalid(m),
        AllocationError::ClassNotFound(m) => ModelError::Invalid(format!("malformed reshaper data: {m}")),
        AllocationError::InvalidInventory(m) => ModelError::Conflict(format!("Unable to allocate inventory: {m}")),
    };
    check_consumer_generations(state, allocations).map_err(reshape_error)?;
    check_providers_exist(state, allocations).map_err(reshape_error)?;

    // Interim inventories: old ones overridden by the new ones.
    let mut interim: HashMap<Uuid, BTreeMap<String, Inventory>> = HashMap::new();
    for requested in inventories {
        if requested.inventories.is_empty() {
            continue;
        }
        if let Some(class) = requested.inventories.keys().find(|c| !state.resource_classes.contains_key(c.as_str())) {
            return Err(ModelError::Invalid(format!("malformed reshaper data: No such resource class {class}.")));
        }
        let mut merged = state.provider(&requested.provider).map(|p| p.inventories.clone()).unwrap_or_default();
        for (class, inventory) in &requested.inventories {
            merged.insert(class.clone(), inventory.clone());
        }
        interim.insert(requested.provider, merged);
        *bumps.entry(requested.provider).or_insert(0) += 1;
    }
    let inventories_of = |uuid: &Uuid| interim.get(uuid).or_else(|| state.provider(uuid).map(|p| &p.inventories));
    let replaced = if allocations.is_empty() {
        Replaced { consumer_changes: Vec::new(), touched_providers: BTreeSet::new() }
    } else {
        replace_all(state, allocations, &inventories_of, now).map_err(reshape_error)?
    };
    for uuid in &replaced.touched_providers {
        *bumps.entry(*uuid).or_insert(0) += 1;
    }

    // Usage after the allocation replacement, for the in-use check.
    let mut after = state.clone();
    let mut consumer_set = ChangeSet::new();
    for change in &replaced.consumer_changes {
        consumer_set.push(change.clone());
    }
    after.apply(&consumer_set);

    let mut set = ChangeSet::new();
    for requested in inventories {
        let uuid = requested.provider;
        let Some(provider) = after.provider(&uuid) else { continue };
        let mut in_use: Vec<(i64, &str)> = provider
            .inventories
            .keys()
            .filter(|class| !requested.inventories.contains_key(class.as_str()) && provider.used(class) > 0)
            .map(|class| (state.resource_classes.get(class.as_str()).map_or(i64::MAX, |rc| rc.id), class.as_str()))
            .collect();
        if !in_use.is_empty() {
            in_use.sort();
            let classes: Vec<&str> = in_use.iter().map(|(_, c)| *c).collect();
            return Err(ModelError::InventoryInUse(format!(
                "update conflict: Inventory for '{}' on resource provider '{uuid}' in use.",
                classes.join(", ")
            )));
        }
        if let Some(class) = requested.inventories.keys().find(|c| !state.resource_classes.contains_key(c.as_str())) {
            return Err(ModelError::Invalid(format!("malformed reshaper data: No such resource class {class}.")));
        }
        set.push(Change::SetInventories { provider: uuid, inventories: requested.inventories.clone() });
        *bumps.entry(uuid).or_insert(0) += 1;
    }
    for (uuid, n) in &bumps {
        if let Some(provider) = state.provider(uuid) {
            let mut row = provider.row.clone();
            row.generation += n;
            row.updated_at = now;
            set.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
        }
    }
    for change in replaced.consumer_changes {
        set.push(change);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventories::inventory_with_defaults;
    use crate::providers::plan_create_provider;

    fn inv(total: i64) -> Inventory {
        inventory_with_defaults(total, None, None, None, None, None)
    }

    fn setup(inventories: &[(&str, Inventory)]) -> (State, Uuid) {
        let mut state = State::with_standard_data(1);
        let uuid = Uuid::from_u128(1);
        let (set, _) = plan_create_provider(&state, uuid, "rp", None, 1).expect("create");
        state.apply(&set);
        let mut set = ChangeSet::new();
        set.push(Change::SetInventories {
            provider: uuid,
            inventories: inventories.iter().map(|(c, i)| ((*c).to_owned(), i.clone())).collect(),
        });
        state.apply(&set);
        (state, uuid)
    }

    fn request(
        consumer: u128,
        provider: Uuid,
        class: &str,
        amount: i64,
        generation: ConsumerGeneration,
    ) -> ConsumerAllocations {
        let mut allocations = AllocationMap::new();
        if amount > 0 {
            allocations.entry(provider).or_default().insert(class.to_owned(), amount);
        }
        ConsumerAllocations {
            consumer: Uuid::from_u128(consumer),
            project_id: "p".into(),
            user_id: "u".into(),
            generation,
            consumer_type: None,
            allocations,
        }
    }

    fn write(state: &mut State, requests: &[ConsumerAllocations]) -> Result<(), AllocationError> {
        let set = plan_replace_allocations(state, requests, 2)?;
        state.apply(&set);
        Ok(())
    }

    #[test]
    fn capacity_counts_others_but_not_own_allocations() {
        let (mut state, rp) = setup(&[("VCPU", inv(4))]);
        write(&mut state, &[request(10, rp, "VCPU", 3, ConsumerGeneration::Unchecked)]).expect("fits");
        // Replacing our own 3 with 4 fits; another consumer's 2 does not.
        write(&mut state, &[request(10, rp, "VCPU", 4, ConsumerGeneration::Unchecked)]).expect("own replaced");
        let err = write(&mut state, &[request(11, rp, "VCPU", 1, ConsumerGeneration::Unchecked)]).unwrap_err();
        assert!(
            matches!(err, AllocationError::InvalidInventory(ref m) if m.contains("exceed the capacity")),
            "{err:?}"
        );
        assert_eq!(state.provider(&rp).map(|p| p.used("VCPU")), Some(4));
    }

    #[test]
    fn two_consumers_in_one_write_are_summed() {
        let (state, rp) = setup(&[("VCPU", inv(4))]);
        let err = plan_replace_allocations(
            &state,
            &[request(10, rp, "VCPU", 3, ConsumerGeneration::New), request(11, rp, "VCPU", 2, ConsumerGeneration::New)],
            2,
        )
        .unwrap_err();
        assert!(matches!(err, AllocationError::InvalidInventory(_)));
    }

    #[test]
    fn over_capacity_write_allowed_when_not_worse() {
        let (mut state, rp) = setup(&[("VCPU", inv(8))]);
        write(&mut state, &[request(10, rp, "VCPU", 6, ConsumerGeneration::Unchecked)]).expect("fits");
        // Shrink the inventory below usage (allowed by inventory writes).
        let mut set = ChangeSet::new();
        set.push(Change::SetInventories { provider: rp, inventories: BTreeMap::from([("VCPU".to_owned(), inv(4))]) });
        state.apply(&set);
        // Reducing the overage is fine, equal too; growing it is not.
        write(&mut state, &[request(10, rp, "VCPU", 5, ConsumerGeneration::Unchecked)]).expect("better");
        write(&mut state, &[request(10, rp, "VCPU", 5, ConsumerGeneration::Unchecked)]).expect("same");
        let err = write(&mut state, &[request(10, rp, "VCPU", 6, ConsumerGeneration::Unchecked)]).unwrap_err();
        assert!(matches!(err, AllocationError::InvalidInventory(_)));
        // A new consumer on an over-capacity provider is refused.
        let err = write(&mut state, &[request(11, rp, "VCPU", 1, ConsumerGeneration::Unchecked)]).unwrap_err();
        assert!(matches!(err, AllocationError::InvalidInventory(_)));
    }

    #[test]
    fn unit_constraints() {
        let disk = inventory_with_defaults(100, None, Some(10), Some(50), Some(10), None);
        assert_eq!(check_allocation(&disk, 5, 5, 0, None), Err(Violation::Constraints));
        assert_eq!(check_allocation(&disk, 60, 60, 0, None), Err(Violation::Constraints));
        assert_eq!(check_allocation(&disk, 25, 25, 0, None), Err(Violation::Constraints));
        assert_eq!(check_allocation(&disk, 50, 50, 0, None), Ok(()));
        assert_eq!(check_allocation(&disk, 50, 50, 60, None), Err(Violation::Capacity));
        assert_eq!(check_allocation(&disk, 50, 50, 60, Some(110)), Ok(()));
        let ratio = inventory_with_defaults(4, Some(1), None, None, None, Some(1.5));
        assert_eq!(check_allocation(&ratio, 4, 4, 0, None), Ok(()));
        assert_eq!(check_allocation(&ratio, 5, 5, 0, None), Err(Violation::Capacity));
        // Absurd amounts saturate instead of overflowing.
        let huge = inventory_with_defaults(4, None, None, Some(i64::MAX), None, None);
        assert_eq!(check_allocation(&huge, i64::MAX, i64::MAX, 3, Some(3)), Err(Violation::Capacity));
    }

    #[test]
    fn missing_class_and_unknown_class() {
        let (state, rp) = setup(&[("VCPU", inv(4))]);
        let err = plan_replace_allocations(&state, &[request(10, rp, "DISK_GB", 1, ConsumerGeneration::Unchecked)], 2)
            .unwrap_err();
        assert!(matches!(err, AllocationError::InvalidInventory(ref m) if m.contains("'DISK_GB'")), "{err:?}");
        let err = plan_replace_allocations(&state, &[request(10, rp, "COWS", 1, ConsumerGeneration::Unchecked)], 2)
            .unwrap_err();
        assert_eq!(err, AllocationError::ClassNotFound("No such resource class COWS.".into()));
        let other = Uuid::from_u128(99);
        let err = plan_replace_allocations(&state, &[request(10, other, "VCPU", 1, ConsumerGeneration::Unchecked)], 2)
            .unwrap_err();
        assert!(matches!(err, AllocationError::ProviderMissing(_)));
    }

    #[test]
    fn generations_of_consumers_and_providers() {
        let (mut state, rp) = setup(&[("VCPU", inv(4))]);
        let gen = |s: &State| s.provider(&rp).map(|p| p.row.generation);
        let before = gen(&state);
        write(&mut state, &[request(10, rp, "VCPU", 1, ConsumerGeneration::New)]).expect("new");
        assert_eq!(state.consumers.get(&Uuid::from_u128(10)).map(|c| c.row.generation), Some(1));
        assert_eq!(gen(&state), before.map(|g| g + 1));
        let err = write(&mut state, &[request(10, rp, "VCPU", 2, ConsumerGeneration::New)]).unwrap_err();
        assert_eq!(
            err,
            AllocationError::ConsumerConflict("consumer generation conflict - expected 1 but got None".into())
        );
        let err = write(&mut state, &[request(10, rp, "VCPU", 2, ConsumerGeneration::Is(0))]).unwrap_err();
        assert!(matches!(err, AllocationError::ConsumerConflict(_)));
        let err = write(&mut state, &[request(11, rp, "VCPU", 2, ConsumerGeneration::Is(5))]).unwrap_err();
        assert_eq!(
            err,
            AllocationError::ConsumerConflict("consumer generation conflict - expected null but got 5".into())
        );
        write(&mut state, &[request(10, rp, "VCPU", 2, ConsumerGeneration::Is(1))]).expect("matching");
        assert_eq!(state.consumers.get(&Uuid::from_u128(10)).map(|c| c.row.generation), Some(2));
        // Emptying the allocations deletes the consumer and bumps the provider.
        let g = gen(&state);
        write(&mut state, &[request(10, rp, "VCPU", 0, ConsumerGeneration::Is(2))]).expect("empty");
        assert!(!state.consumers.contains_key(&Uuid::from_u128(10)));
        assert_eq!(gen(&state), g.map(|g| g + 1));
        assert_eq!(state.provider(&rp).map(|p| p.used("VCPU")), Some(0));
    }

    #[test]
    fn empty_write_for_new_consumer_records_it_at_generation_zero() {
        let (mut state, rp) = setup(&[("VCPU", inv(4))]);
        write(&mut state, &[request(10, rp, "VCPU", 0, ConsumerGeneration::New)]).expect("empty new");
        assert_eq!(state.consumers.get(&Uuid::from_u128(10)).map(|c| c.row.generation), Some(0));
        // As upstream, it now exists: null is stale, 0 is current.
        let err = write(&mut state, &[request(10, rp, "VCPU", 1, ConsumerGeneration::New)]).unwrap_err();
        assert!(matches!(err, AllocationError::ConsumerConflict(_)));
        write(&mut state, &[request(10, rp, "VCPU", 1, ConsumerGeneration::Is(0))]).expect("gen 0");
        assert_eq!(state.consumers.get(&Uuid::from_u128(10)).map(|c| c.row.generation), Some(1));
        assert!(matches!(plan_delete_allocations(&state, Uuid::from_u128(11)), Err(ModelError::NotFound(_))));
    }

    #[test]
    fn delete_requires_allocations() {
        let (mut state, rp) = setup(&[("VCPU", inv(4))]);
        assert!(matches!(plan_delete_allocations(&state, Uuid::from_u128(10)), Err(ModelError::NotFound(_))));
        write(&mut state, &[request(10, rp, "VCPU", 1, ConsumerGeneration::New)]).expect("new");
        let set = plan_delete_allocations(&state, Uuid::from_u128(10)).expect("delete");
        state.apply(&set);
        assert!(state.consumers.is_empty());
    }

    #[test]
    fn reshape_moves_inventory_and_allocations() {
        let (mut state, rp) = setup(&[("VCPU", inv(4)), ("DISK_GB", inv(100))]);
        write(&mut state, &[request(10, rp, "VCPU", 3, ConsumerGeneration::New)]).expect("alloc");
        let child = Uuid::from_u128(2);
        let (set, _) = plan_create_provider(&state, child, "child", Some(rp), 3).expect("child");
        state.apply(&set);
        let rp_gen = state.provider(&rp).map_or(0, |p| p.row.generation);
        let inventories = vec![
            ReshapeInventories {
                provider: rp,
                generation: rp_gen,
                inventories: BTreeMap::from([("DISK_GB".to_owned(), inv(100))]),
            },
            ReshapeInventories {
                provider: child,
                generation: 0,
                inventories: BTreeMap::from([("VCPU".to_owned(), inv(4))]),
            },
        ];
        // Without moving the allocation the VCPU inventory is in use.
        let err = plan_reshape(&state, &inventories, &[], 4).unwrap_err();
        assert!(matches!(err, ModelError::InventoryInUse(_)), "{err:?}");
        let mv = request(10, child, "VCPU", 3, ConsumerGeneration::Is(1));
        let set = plan_reshape(&state, &inventories, std::slice::from_ref(&mv), 4).expect("reshape");
        state.apply(&set);
        assert_eq!(state.provider(&rp).map(|p| (p.row.generation, p.used("VCPU"))), Some((rp_gen + 2, 0)));
        assert_eq!(state.provider(&child).map(|p| (p.row.generation, p.used("VCPU"))), Some((3, 3)));
        // Stale provider generation.
        let err = plan_reshape(&state, &inventories, &[], 5).unwrap_err();
        assert!(matches!(err, ModelError::GenerationConflict(ref m) if m.contains("given: ")), "{err:?}");
    }
}
