//! Resource classes: listing, lookup and the planned writes behind
//! `POST /resource_classes`, `PUT /resource_classes/{name}` (rename up to
//! 1.6, idempotent create from 1.7) and `DELETE /resource_classes/{name}`.
//!
//! Standard classes (ids below [`CUSTOM_RESOURCE_CLASS_BASE_ID`]) can never
//! be renamed or deleted; custom classes get ids from that base upwards.

use crate::{Change, ChangeSet, ModelError, ResourceClass, Result, State, Timestamp, CUSTOM_RESOURCE_CLASS_BASE_ID};

/// Prefix every custom resource class name carries.
pub const CUSTOM_PREFIX: &str = "CUSTOM_";

/// True when `rc` is a standard (built-in) class.
pub fn is_standard(rc: &ResourceClass) -> bool {
    rc.id < CUSTOM_RESOURCE_CLASS_BASE_ID
}

/// True when `name` is a syntactically valid custom class name
/// (`^CUSTOM_[A-Z0-9_]+$`, at most 255 characters).
pub fn is_valid_custom_name(name: &str) -> bool {
    name.len() <= 255
        && name.strip_prefix(CUSTOM_PREFIX).is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
}

/// All resource classes in id order (standard first, then custom in
/// creation order), as upstream lists them.
pub fn list(state: &State) -> Vec<&ResourceClass> {
    let mut all: Vec<&ResourceClass> = state.resource_classes.values().collect();
    all.sort_by_key(|rc| rc.id);
    all
}

/// The class called `name`, or upstream's 404.
pub fn get<'a>(state: &'a State, name: &str) -> Result<&'a ResourceClass> {
    state.resource_classes.get(name).ok_or_else(|| ModelError::NotFound(format!("No such resource class {name}.")))
}

/// The time a class was last changed, `None` for standard classes (which
/// upstream reports as "now").
pub fn last_modified(rc: &ResourceClass) -> Option<Timestamp> {
    if is_standard(rc) {
        None
    } else {
        Some(rc.updated_at.unwrap_or(rc.created_at))
    }
}

/// The id the next custom class gets: one above every class (and every
/// id ever handed out), and at least `CUSTOM_RESOURCE_CLASS_BASE_ID`.
pub fn next_id(state: &State) -> i64 {
    let highest = state
        .resource_classes
        .values()
        .map(|rc| rc.id)
        .chain(std::iter::once(state.max_resource_class_id))
        .max()
        .unwrap_or(0);
    (highest + 1).max(CUSTOM_RESOURCE_CLASS_BASE_ID)
}

fn new_class(state: &State, name: &str, now: Timestamp) -> Result<(ChangeSet, ResourceClass)> {
    if !is_valid_custom_name(name) {
        return Err(ModelError::Invalid(format!(
            "Resource class name {name} is invalid: it must start with {CUSTOM_PREFIX} and use only A-Z, 0-9 and _."
        )));
    }
    let rc = ResourceClass { id: next_id(state), name: name.to_owned(), created_at: now, updated_at: None };
    let mut set = ChangeSet::new();
    set.push(Change::PutResourceClass { id: rc.id, name: rc.name.clone(), created_at: now, updated_at: None });
    Ok((set, rc))
}

/// Plan `POST /resource_classes`: create a custom class; 409 when the name
/// is taken.
pub fn plan_create(state: &State, name: &str, now: Timestamp) -> Result<(ChangeSet, ResourceClass)> {
    if state.resource_classes.contains_key(name) {
        return Err(ModelError::Conflict(format!("Conflicting resource class already exists: {name}")));
    }
    new_class(state, name, now)
}

/// Plan `PUT /resource_classes/{name}` from 1.7: create the class unless it
/// exists. Returns the class and whether it was created (201) or already
/// there (204, empty change set).
pub fn plan_ensure(state: &State, name: &str, now: Timestamp) -> Result<(ChangeSet, (ResourceClass, bool))> {
    if let Some(rc) = state.resource_classes.get(name) {
        return Ok((ChangeSet::new(), (rc.clone(), false)));
    }
    let (set, rc) = new_class(state, name, now)?;
    Ok((set, (rc, true)))
}

/// Plan `PUT /resource_classes/{name}` at 1.2–1.6: rename a custom class.
/// Inventories and allocations follow the class (upstream keys them by id),
/// without changing any generation, as upstream.
pub fn plan_rename(state: &State, name: &str, new_name: &str, now: Timestamp) -> Result<(ChangeSet, ResourceClass)> {
    let rc = get(state, name)?;
    if is_standard(rc) {
        return Err(ModelError::Invalid(format!("Cannot update standard resource class {name}")));
    }
    if new_name == name {
        return Ok((ChangeSet::new(), rc.clone()));
    }
    if state.resource_classes.contains_key(new_name) {
        return Err(ModelError::Conflict(format!("Resource class already exists: {new_name}")));
    }
    if !is_valid_custom_name(new_name) {
        return Err(ModelError::Invalid(format!("Resource class name {new_name} is invalid.")));
    }
    let renamed =
        ResourceClass { id: rc.id, name: new_name.to_owned(), created_at: rc.created_at, updated_at: Some(now) };
    let mut set = ChangeSet::new();
    set.push(Change::DeleteResourceClass { name: name.to_owned() });
    set.push(Change::PutResourceClass {
        id: renamed.id,
        name: renamed.name.clone(),
        created_at: renamed.created_at,
        updated_at: renamed.updated_at,
    });
    let mut providers: Vec<_> = state.providers.values().filter(|p| p.inventories.contains_key(name)).collect();
    providers.sort_by_key(|p| p.row.id);
    for provider in providers {
        let mut inventories = provider.inventories.clone();
        if let Some(inv) = inventories.remove(name) {
            inventories.insert(new_name.to_owned(), inv);
        }
        set.push(Change::SetInventories { provider: provider.uuid(), inventories });
    }
    let mut consumers: Vec<_> =
        state.consumers.values().filter(|c| c.allocations.values().any(|amounts| amounts.contains_key(name))).collect();
    consumers.sort_by_key(|c| c.row.uuid);
    for consumer in consumers {
        let mut allocations = consumer.allocations.clone();
        for amounts in allocations.values_mut() {
            // Renamed in place: the written order stays.
            *amounts = std::mem::take(amounts)
                .into_iter()
                .map(|(class, amount)| if class == name { (new_name.to_owned(), amount) } else { (class, amount) })
                .collect();
        }
        set.push(Change::PutConsumer {
            row: consumer.row.clone(),
            expected_generation: Some(consumer.row.generation),
            allocations,
        });
    }
    Ok((set, renamed))
}

/// Plan `DELETE /resource_classes/{name}`: 404 when unknown, 400 for a
/// standard class, 409 while any inventory (or allocation) uses it.
pub fn plan_delete(state: &State, name: &str) -> Result<(ChangeSet, ())> {
    let rc = get(state, name)?;
    if is_standard(rc) {
        return Err(ModelError::Invalid(format!(
            "Error in delete resource class: Cannot delete standard resource class {name}."
        )));
    }
    let in_use = state.providers.values().any(|p| p.inventories.contains_key(name) || p.used(name) > 0);
    if in_use {
        return Err(ModelError::Conflict(format!(
            "Error in delete resource class: Cannot delete resource class {name}. Class is in use in inventory."
        )));
    }
    let mut set = ChangeSet::new();
    set.push(Change::DeleteResourceClass { name: name.to_owned() });
    Ok((set, ()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Inventory, ProviderRow, Uuid};

    fn apply(state: &mut State, set: ChangeSet) {
        state.apply(&set);
    }

    fn provider_with_inventory(state: &mut State, class: &str) -> Uuid {
        let uuid = Uuid::from_u128(7);
        let row = ProviderRow {
            id: 1,
            uuid,
            name: "rp".into(),
            generation: 0,
            parent: None,
            root: uuid,
            created_at: 0,
            updated_at: 0,
        };
        let inv = Inventory { total: 5, reserved: 0, min_unit: 1, max_unit: 5, step_size: 1, allocation_ratio: 1.0 };
        let mut set = ChangeSet::new();
        set.push(Change::PutProvider { row, expected_generation: None });
        set.push(Change::SetInventories { provider: uuid, inventories: [(class.to_owned(), inv)].into() });
        state.apply(&set);
        uuid
    }

    #[test]
    fn custom_ids_start_at_base_and_increase() {
        let mut state = State::with_standard_data(1);
        let (set, rc) = plan_create(&state, "CUSTOM_A", 5).unwrap();
        assert_eq!(rc.id, CUSTOM_RESOURCE_CLASS_BASE_ID);
        apply(&mut state, set);
        let (_, rc2) = plan_create(&state, "CUSTOM_B", 5).unwrap();
        assert_eq!(rc2.id, CUSTOM_RESOURCE_CLASS_BASE_ID + 1);
        assert!(
            matches!(plan_create(&state, "CUSTOM_A", 5), Err(ModelError::Conflict(m)) if m.contains("Conflicting resource class already exists: CUSTOM_A"))
        );
        assert!(matches!(plan_create(&state, "VCPU", 5), Err(ModelError::Conflict(_))));
        assert!(matches!(plan_create(&state, "BAD", 5), Err(ModelError::Invalid(_))));
    }

    #[test]
    fn list_is_in_id_order() {
        let mut state = State::with_standard_data(1);
        let (set, _) = plan_create(&state, "CUSTOM_AAA", 5).unwrap();
        apply(&mut state, set);
        let names: Vec<_> = list(&state).iter().map(|rc| rc.name.clone()).collect();
        assert_eq!(names.first().map(String::as_str), Some("VCPU"));
        assert_eq!(names.last().map(String::as_str), Some("CUSTOM_AAA"));
    }

    #[test]
    fn ensure_is_idempotent() {
        let mut state = State::with_standard_data(1);
        let (set, (_, created)) = plan_ensure(&state, "CUSTOM_COW", 5).unwrap();
        assert!(created);
        apply(&mut state, set);
        let (set, (_, created)) = plan_ensure(&state, "CUSTOM_COW", 6).unwrap();
        assert!(!created);
        assert!(set.is_empty());
    }

    #[test]
    fn rename_rules_and_references_follow() {
        let mut state = State::with_standard_data(1);
        for name in ["CUSTOM_A", "CUSTOM_B"] {
            let (set, _) = plan_create(&state, name, 5).unwrap();
            apply(&mut state, set);
        }
        let rp = provider_with_inventory(&mut state, "CUSTOM_A");
        assert!(
            matches!(plan_rename(&state, "VCPU", "CUSTOM_X", 9), Err(ModelError::Invalid(m)) if m == "Cannot update standard resource class VCPU")
        );
        assert!(
            matches!(plan_rename(&state, "CUSTOM_A", "CUSTOM_B", 9), Err(ModelError::Conflict(m)) if m.contains("Resource class already exists: CUSTOM_B"))
        );
        assert!(matches!(plan_rename(&state, "CUSTOM_NOPE", "CUSTOM_C", 9), Err(ModelError::NotFound(_))));
        let (set, rc) = plan_rename(&state, "CUSTOM_A", "CUSTOM_C", 9).unwrap();
        assert_eq!(rc.updated_at, Some(9));
        apply(&mut state, set);
        assert!(!state.resource_classes.contains_key("CUSTOM_A"));
        assert_eq!(state.resource_classes["CUSTOM_C"].id, CUSTOM_RESOURCE_CLASS_BASE_ID);
        assert!(state.providers[&rp].inventories.contains_key("CUSTOM_C"));
        assert_eq!(state.providers[&rp].row.generation, 0);
    }

    #[test]
    fn delete_rules() {
        let mut state = State::with_standard_data(1);
        let (set, _) = plan_create(&state, "CUSTOM_GOLD", 5).unwrap();
        apply(&mut state, set);
        assert!(
            matches!(plan_delete(&state, "VCPU"), Err(ModelError::Invalid(m)) if m.contains("Cannot delete standard resource class VCPU"))
        );
        assert!(matches!(plan_delete(&state, "CUSTOM_NOPE"), Err(ModelError::NotFound(_))));
        provider_with_inventory(&mut state, "CUSTOM_GOLD");
        assert!(
            matches!(plan_delete(&state, "CUSTOM_GOLD"), Err(ModelError::Conflict(m)) if m.contains("Class is in use in inventory"))
        );
        let mut fresh = State::with_standard_data(1);
        let (set, _) = plan_create(&fresh, "CUSTOM_GOLD", 5).unwrap();
        apply(&mut fresh, set);
        let (set, ()) = plan_delete(&fresh, "CUSTOM_GOLD").unwrap();
        apply(&mut fresh, set);
        assert!(!fresh.resource_classes.contains_key("CUSTOM_GOLD"));
    }

    #[test]
    fn custom_name_syntax() {
        assert!(is_valid_custom_name("CUSTOM_A_1"));
        assert!(!is_valid_custom_name("CUSTOM_"));
        assert!(!is_valid_custom_name("CUSTOM_a"));
        assert!(!is_valid_custom_name("VCPU"));
        assert!(!is_valid_custom_name(&format!("CUSTOM_{}", "A".repeat(250))));
    }
}
