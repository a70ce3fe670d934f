//! Planning inventory writes: replace all, add one, update one, delete one,
//! delete all. Every successful write bumps the provider generation.
//!
//! The messages are upstream's, including the handler prefix ("Unable to
//! update inventory for resource provider ...: ..."), because the prefix
//! depends on the operation and clients match on it.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::{Change, ChangeSet, Inventory, ModelError, Provider, Result, State, Timestamp};

/// Which capacity rule applies: before 1.26 `reserved` must be smaller than
/// `total`; from 1.26 it may equal it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedRule {
    /// `reserved < total` (capacity must be positive).
    LessThanTotal,
    /// `reserved <= total` (capacity may be zero), microversion 1.26.
    UpToTotal,
}

/// The defaults upstream fills in for fields a request leaves out.
pub fn inventory_with_defaults(
    total: i64,
    reserved: Option<i64>,
    min_unit: Option<i64>,
    max_unit: Option<i64>,
    step_size: Option<i64>,
    allocation_ratio: Option<f64>,
) -> Inventory {
    Inventory {
        total,
        reserved: reserved.unwrap_or(0),
        min_unit: min_unit.unwrap_or(1),
        max_unit: max_unit.unwrap_or(i64::from(i32::MAX)),
        step_size: step_size.unwrap_or(1),
        allocation_ratio: allocation_ratio.unwrap_or(1.0),
    }
}

/// Upstream's `InvalidInventoryCapacity` text, or `None` when the inventory
/// has acceptable capacity under `rule`.
fn capacity_problem(rule: ReservedRule, provider: &Uuid, class: &str, inventory: &Inventory) -> Option<String> {
    let capacity = inventory.capacity();
    match rule {
        ReservedRule::LessThanTotal if capacity <= 0 => Some(format!(
            "Invalid inventory for '{class}' on resource provider '{provider}'. The reserved value is greater than or equal to total."
        )),
        ReservedRule::UpToTotal if capacity < 0 => Some(format!(
            "Invalid inventory for '{class}' on resource provider '{provider}'. The reserved value is greater than total."
        )),
        _ => None,
    }
}

fn provider<'a>(state: &'a State, uuid: &Uuid) -> Result<&'a Provider> {
    state.provider(uuid).ok_or_else(|| ModelError::NotFound(format!("No resource provider with uuid {uuid} found")))
}

/// The provider, which the caller expects at `generation`.
fn provider_at<'a>(state: &'a State, uuid: &Uuid, generation: i64) -> Result<&'a Provider> {
    let provider = provider(state, uuid)?;
    if generation != provider.row.generation {
        return Err(ModelError::GenerationConflict("resource provider generation conflict".into()));
    }
    Ok(provider)
}

/// Resource classes of `classes` that have allocations on `provider`, in
/// resource class id order, joined as upstream prints them.
fn classes_in_use<'a>(state: &State, provider: &Provider, classes: impl Iterator<Item = &'a String>) -> Option<String> {
    let mut used: Vec<(i64, &str)> = classes
        .filter(|class| provider.used(class) > 0)
        .map(|class| (state.resource_classes.get(class.as_str()).map_or(i64::MAX, |rc| rc.id), class.as_str()))
        .collect();
    if used.is_empty() {
        return None;
    }
    used.sort();
    Some(used.iter().map(|(_, class)| *class).collect::<Vec<_>>().join(", "))
}

fn in_use_message(classes: &str, provider: &Uuid) -> String {
    format!("Inventory for '{classes}' on resource provider '{provider}' in use.")
}

/// The change set that stores `inventories` and bumps the generation.
fn commit(provider: &Provider, inventories: BTreeMap<String, Inventory>, now: Timestamp) -> (ChangeSet, i64) {
    let mut row = provider.row.clone();
    row.generation += 1;
    row.updated_at = now;
    let generation = row.generation;
    let mut set = ChangeSet::new();
    set.push(Change::SetInventories { provider: row.uuid, inventories });
    set.push(Change::PutProvider { row, expected_generation: Some(provider.row.generation) });
    (set, generation)
}

/// Plan `PUT /resource_providers/{uuid}/inventories`: replace all
/// inventories of the provider. Removing a class that has allocations is
/// refused; shrinking capacity below usage is allowed (upstream only logs
/// a warning). Returns the new provider generation.
pub fn plan_set_inventories(
    state: &State,
    uuid: Uuid,
    generation: i64,
    inventories: BTreeMap<String, Inventory>,
    rule: ReservedRule,
    now: Timestamp,
) -> Result<(ChangeSet, i64)> {
    let provider = provider_at(state, &uuid, generation)?;
    for (class, inventory) in &inventories {
        if let Some(problem) = capacity_problem(rule, &uuid, class, inventory) {
            return Err(ModelError::Invalid(format!(
                "Unable to update inventory for resource provider {uuid}: {problem}"
            )));
        }
    }
    if let Some(class) = inventories.keys().find(|class| !state.resource_classes.contains_key(class.as_str())) {
        return Err(ModelError::Invalid(format!(
            "Unknown resource class in inventory for resource provider {uuid}: No such resource class {class}."
        )));
    }
    let removed = provider.inventories.keys().filter(|class| !inventories.contains_key(class.as_str()));
    if let Some(classes) = classes_in_use(state, provider, removed) {
        return Err(ModelError::InventoryInUse(format!("update conflict: {}", in_use_message(&classes, &uuid))));
    }
    Ok(commit(provider, inventories, now))
}

/// Plan `POST /resource_providers/{uuid}/inventories`: add the inventory
/// of one class the provider does not have yet. Returns the new provider
/// generation.
pub fn plan_create_inventory(
    state: &State,
    uuid: Uuid,
    class: &str,
    inventory: Inventory,
    rule: ReservedRule,
    now: Timestamp,
) -> Result<(ChangeSet, i64)> {
    let provider = provider(state, &uuid)?;
    let unable =
        |why: String| ModelError::Invalid(format!("Unable to create inventory for resource provider {uuid}: {why}"));
    if let Some(problem) = capacity_problem(rule, &uuid, class, &inventory) {
        return Err(unable(problem));
    }
    if !state.resource_classes.contains_key(class) {
        return Err(unable(format!("No such resource class {class}.")));
    }
    if provider.inventories.contains_key(class) {
        return Err(ModelError::GenerationConflict(format!(
            "Update conflict: Inventory for '{class}' on resource provider '{uuid}' already exists."
        )));
    }
    let mut inventories = provider.inventories.clone();
    inventories.insert(class.to_owned(), inventory);
    Ok(commit(provider, inventories, now))
}

/// Plan `PUT /resource_providers/{uuid}/inventories/{class}`: replace the
/// inventory of one class the provider already has. Returns the new
/// provider generation.
pub fn plan_update_inventory(
    state: &State,
    uuid: Uuid,
    class: &str,
    generation: i64,
    inventory: Inventory,
    rule: ReservedRule,
    now: Timestamp,
) -> Result<(ChangeSet, i64)> {
    let provider = provider_at(state, &uuid, generation)?;
    if let Some(problem) = capacity_problem(rule, &uuid, class, &inventory) {
        return Err(ModelError::Invalid(format!("Unable to update inventory for resource provider {uuid}: {problem}")));
    }
    if !state.resource_classes.contains_key(class) {
        // Upstream lets the resource class lookup's NotFound escape: 404.
        return Err(ModelError::NotFound(format!("No such resource class {class}.")));
    }
    if !provider.inventories.contains_key(class) {
        return Err(ModelError::Invalid(format!(
            "No inventory record with resource class for resource provider {uuid}: No inventory of class {class} found."
        )));
    }
    let mut inventories = provider.inventories.clone();
    inventories.insert(class.to_owned(), inventory);
    Ok(commit(provider, inventories, now))
}

/// Plan `DELETE /resource_providers/{uuid}/inventories/{class}`. Refused
/// while the class has allocations on the provider (upstream reports that
/// as a concurrent-update conflict).
pub fn plan_delete_inventory(state: &State, uuid: Uuid, class: &str, now: Timestamp) -> Result<ChangeSet> {
    let provider = provider(state, &uuid)?;
    let not_found =
        |why: String| ModelError::NotFound(format!("No inventory of class {class} found for delete: {why}"));
    if !state.resource_classes.contains_key(class) {
        return Err(not_found(format!("No such resource class {class}.")));
    }
    if let Some(classes) = classes_in_use(state, provider, std::iter::once(&class.to_owned())) {
        return Err(ModelError::GenerationConflict(format!(
            "Unable to delete inventory of class {class}: {}",
            in_use_message(&classes, &uuid)
        )));
    }
    if !provider.inventories.contains_key(class) {
        return Err(not_found(format!("No inventory of class {class} found for delete")));
    }
    let mut inventories = provider.inventories.clone();
    inventories.remove(class);
    Ok(commit(provider, inventories, now).0)
}

/// Plan `DELETE /resource_providers/{uuid}/inventories` (1.5): remove all
/// inventories; refused when any class has allocations.
pub fn plan_delete_all_inventories(state: &State, uuid: Uuid, now: Timestamp) -> Result<ChangeSet> {
    let provider = provider(state, &uuid)?;
    if let Some(classes) = classes_in_use(state, provider, provider.inventories.keys()) {
        return Err(ModelError::InventoryInUse(in_use_message(&classes, &uuid)));
    }
    Ok(commit(provider, BTreeMap::new(), now).0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::plan_create_provider;
    use crate::{AllocationMap, ConsumerRow};

    fn setup() -> (State, Uuid) {
        let mut state = State::with_standard_data(1);
        let uuid = Uuid::from_u128(1);
        let (set, _) = plan_create_provider(&state, uuid, "rp", None, 1).expect("create");
        state.apply(&set);
        (state, uuid)
    }

    fn inv(total: i64, reserved: i64) -> Inventory {
        inventory_with_defaults(total, Some(reserved), None, None, None, None)
    }

    fn allocate(state: &mut State, provider: Uuid, class: &str, amount: i64) {
        let mut allocations = AllocationMap::new();
        allocations.entry(provider).or_default().insert(class.to_owned(), amount);
        let row = ConsumerRow {
            uuid: Uuid::from_u128(1000 + state.consumers.len() as u128),
            project_id: "p".into(),
            user_id: "u".into(),
            generation: 0,
            consumer_type: None,
            created_at: 1,
            updated_at: 1,
        };
        let mut set = ChangeSet::new();
        set.push(Change::PutConsumer { row, expected_generation: None, allocations });
        state.apply(&set);
    }

    #[test]
    fn reserved_rules_depend_on_microversion() {
        let (state, uuid) = setup();
        let err = plan_create_inventory(&state, uuid, "VCPU", inv(4, 4), ReservedRule::LessThanTotal, 2).unwrap_err();
        assert!(err.to_string().contains("greater than or equal to total"), "{err}");
        assert!(plan_create_inventory(&state, uuid, "VCPU", inv(4, 4), ReservedRule::UpToTotal, 2).is_ok());
        let err = plan_create_inventory(&state, uuid, "VCPU", inv(4, 5), ReservedRule::UpToTotal, 2).unwrap_err();
        assert!(err.to_string().ends_with("The reserved value is greater than total."), "{err}");
    }

    #[test]
    fn set_bumps_generation_and_checks_it() {
        let (mut state, uuid) = setup();
        let invs = BTreeMap::from([("VCPU".to_owned(), inv(4, 0))]);
        let (set, generation) =
            plan_set_inventories(&state, uuid, 0, invs.clone(), ReservedRule::LessThanTotal, 2).expect("set");
        state.apply(&set);
        assert_eq!(generation, 1);
        assert_eq!(state.provider(&uuid).map(|p| p.row.generation), Some(1));
        let err = plan_set_inventories(&state, uuid, 0, invs, ReservedRule::LessThanTotal, 3).unwrap_err();
        assert!(matches!(err, ModelError::GenerationConflict(_)));
        let bad = BTreeMap::from([("NOPE".to_owned(), inv(4, 0))]);
        let err = plan_set_inventories(&state, uuid, 1, bad, ReservedRule::LessThanTotal, 3).unwrap_err();
        assert!(err.to_string().contains("No such resource class NOPE."), "{err}");
    }

    #[test]
    fn classes_in_use_cannot_be_removed_but_can_shrink() {
        let (mut state, uuid) = setup();
        let invs = BTreeMap::from([("VCPU".to_owned(), inv(4, 0)), ("DISK_GB".to_owned(), inv(10, 0))]);
        let (set, _) = plan_set_inventories(&state, uuid, 0, invs, ReservedRule::LessThanTotal, 2).expect("set");
        state.apply(&set);
        allocate(&mut state, uuid, "VCPU", 3);
        allocate(&mut state, uuid, "DISK_GB", 3);
        let err = plan_delete_all_inventories(&state, uuid, 3).unwrap_err();
        assert_eq!(
            err,
            ModelError::InventoryInUse(format!("Inventory for 'VCPU, DISK_GB' on resource provider '{uuid}' in use."))
        );
        let err = plan_delete_inventory(&state, uuid, "VCPU", 3).unwrap_err();
        assert!(matches!(err, ModelError::GenerationConflict(_)));
        // Shrinking below usage only warns upstream.
        assert!(plan_update_inventory(&state, uuid, "VCPU", 1, inv(2, 0), ReservedRule::LessThanTotal, 3).is_ok());
        let err =
            plan_update_inventory(&state, uuid, "MEMORY_MB", 1, inv(2, 0), ReservedRule::LessThanTotal, 3).unwrap_err();
        assert!(err.to_string().contains("No inventory of class MEMORY_MB found."), "{err}");
    }
}
