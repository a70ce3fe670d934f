//! Planning resource provider writes: create, update (rename, parent
//! changes with upstream's 1.14 and 1.37 rules) and delete.
//!
//! Messages follow upstream placement's handlers word for word, because
//! clients and upstream's tests match on them.

use uuid::Uuid;

use crate::{Change, ChangeSet, ModelError, ProviderRow, Result, State, Timestamp};

fn not_found(uuid: &Uuid) -> ModelError {
    ModelError::NotFound(format!("No resource provider with uuid {uuid} found"))
}

/// Plan the creation of a provider named `name` with identifier `uuid`
/// under `parent` (if any). Returns the new row.
///
/// Parent problems are reported before duplicates, as upstream checks the
/// parent before inserting the row.
pub fn plan_create_provider(
    state: &State,
    uuid: Uuid,
    name: &str,
    parent: Option<Uuid>,
    now: Timestamp,
) -> Result<(ChangeSet, ProviderRow)> {
    let action_error = |reason: &str| {
        ModelError::Invalid(format!(
            "Unable to create resource provider \"{name}\", {uuid}: Object action create failed because: {reason}"
        ))
    };
    if name.is_empty() {
        return Err(action_error("name is required"));
    }
    let root = match parent {
        None => uuid,
        Some(parent_uuid) if parent_uuid == uuid => {
            return Err(action_error(
                "parent provider UUID cannot be same as UUID. Please set parent provider UUID to None if there is no parent.",
            ))
        }
        Some(parent_uuid) => match state.provider(&parent_uuid) {
            Some(parent_provider) => parent_provider.row.root,
            None => return Err(action_error("parent provider UUID does not exist.")),
        },
    };
    let mut duplicates = Vec::new();
    if state.providers.contains_key(&uuid) {
        duplicates.push(format!("uuid: {uuid}"));
    }
    if state.provider_names.contains_key(name) {
        duplicates.push(format!("name: {name}"));
    }
    if !duplicates.is_empty() {
        return Err(ModelError::DuplicateName(format!(
            "Conflicting resource provider {} already exists.",
            duplicates.join(", ")
        )));
    }
    let row = ProviderRow {
        id: state.max_provider_id + 1,
        uuid,
        name: name.to_owned(),
        generation: 0,
        parent,
        root,
        created_at: now,
        updated_at: now,
    };
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider { row: row.clone(), expected_generation: None });
    Ok((set, row))
}

/// Plan an update of provider `uuid`: set its name and, when `parent` is
/// `Some`, its parent (`Some(None)` asks to un-parent). Before 1.37
/// (`allow_reparenting == false`) a provider that has a parent can neither
/// move to another parent nor become a root. The descendants of a provider
/// that changes tree get the new root. The generation is not bumped, as
/// upstream does not bump it for a rename or a move.
pub fn plan_update_provider(
    state: &State,
    uuid: Uuid,
    name: &str,
    parent: Option<Option<Uuid>>,
    allow_reparenting: bool,
    now: Timestamp,
) -> Result<(ChangeSet, ProviderRow)> {
    let provider = state.provider(&uuid).ok_or_else(|| not_found(&uuid))?;
    let save_error = |action: &str, reason: &str| {
        ModelError::Invalid(format!(
            "Unable to save resource provider {uuid}: Object action {action} failed because: {reason}"
        ))
    };
    let current_parent = provider.row.parent;
    let new_parent = parent.unwrap_or(current_parent);
    let mut new_root = provider.row.root;
    let mut moves_subtree = false;
    match new_parent {
        Some(parent_uuid) => {
            let parent_provider = state
                .provider(&parent_uuid)
                .ok_or_else(|| save_error("create", "parent provider UUID does not exist."))?;
            if current_parent.is_some_and(|p| p != parent_uuid) && !allow_reparenting {
                return Err(save_error("update", "re-parenting a provider is not currently allowed."));
            }
            if parent_uuid == uuid || state.descendants(&uuid).contains(&parent_uuid) {
                return Err(save_error("update", "creating loop in the provider tree is not allowed."));
            }
            new_root = parent_provider.row.root;
            moves_subtree = true;
        }
        None => {
            if current_parent.is_some() {
                if !allow_reparenting {
                    return Err(save_error("update", "un-parenting a provider is not currently allowed."));
                }
                new_root = uuid;
                moves_subtree = true;
            }
        }
    }
    if name != provider.row.name && state.provider_names.contains_key(name) {
        return Err(ModelError::DuplicateName(format!("Conflicting resource provider {name} already exists.")));
    }
    let changed = name != provider.row.name || new_parent != current_parent;
    let mut row = provider.row.clone();
    row.name = name.to_owned();
    row.parent = new_parent;
    row.root = new_root;
    if changed {
        row.updated_at = now;
    }
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider { row: row.clone(), expected_generation: Some(provider.row.generation) });
    if moves_subtree {
        for descendant_uuid in state.descendants(&uuid) {
            if let Some(descendant) = state.provider(&descendant_uuid) {
                if descendant.row.root != new_root {
                    let mut descendant_row = descendant.row.clone();
                    descendant_row.root = new_root;
                    descendant_row.updated_at = now;
                    set.push(Change::PutProvider {
                        row: descendant_row,
                        expected_generation: Some(descendant.row.generation),
                    });
                }
            }
        }
    }
    Ok((set, row))
}

/// Plan deleting provider `uuid` with its inventories, traits and
/// aggregate associations. Refused while it has children or allocations.
pub fn plan_delete_provider(state: &State, uuid: Uuid) -> Result<ChangeSet> {
    let provider = state
        .provider(&uuid)
        .ok_or_else(|| ModelError::NotFound(format!("No resource provider with uuid {uuid} found for delete")))?;
    if !provider.children.is_empty() {
        return Err(ModelError::CannotDeleteParent(format!(
            "Unable to delete parent resource provider {uuid}: It has child resource providers."
        )));
    }
    if !provider.consumers.is_empty() {
        return Err(ModelError::ProviderInUse(format!(
            "Unable to delete resource provider {uuid}: Resource provider has allocations."
        )));
    }
    let mut set = ChangeSet::new();
    set.push(Change::DeleteProvider { uuid, expected_generation: provider.row.generation });
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn create(state: &mut State, uuid: Uuid, name: &str, parent: Option<Uuid>) {
        let (set, _) = plan_create_provider(state, uuid, name, parent, 10).expect("create");
        state.apply(&set);
    }

    #[test]
    fn create_sets_root_from_parent_and_rejects_duplicates() {
        let mut state = State::default();
        create(&mut state, u(1), "root", None);
        create(&mut state, u(2), "child", Some(u(1)));
        create(&mut state, u(3), "grandchild", Some(u(2)));
        assert_eq!(state.provider(&u(3)).map(|p| p.row.root), Some(u(1)));
        let err = plan_create_provider(&state, u(1), "root", None, 11).unwrap_err();
        assert_eq!(
            err,
            ModelError::DuplicateName(format!(
                "Conflicting resource provider uuid: {}, name: root already exists.",
                u(1)
            ))
        );
        let err = plan_create_provider(&state, u(9), "x", Some(u(8)), 11).unwrap_err();
        assert!(err.to_string().ends_with("parent provider UUID does not exist."), "{err}");
        let err = plan_create_provider(&state, u(9), "x", Some(u(9)), 11).unwrap_err();
        assert!(err.to_string().contains("cannot be same as UUID"), "{err}");
    }

    #[test]
    fn reparenting_rules_and_loops() {
        let mut state = State::default();
        create(&mut state, u(1), "a", None);
        create(&mut state, u(2), "b", Some(u(1)));
        create(&mut state, u(3), "c", Some(u(2)));
        create(&mut state, u(4), "d", None);
        // Before 1.37 moving or un-parenting is refused.
        let err = plan_update_provider(&state, u(2), "b", Some(Some(u(4))), false, 20).unwrap_err();
        assert!(err.to_string().contains("re-parenting a provider is not currently allowed."), "{err}");
        let err = plan_update_provider(&state, u(2), "b", Some(None), false, 20).unwrap_err();
        assert!(err.to_string().contains("un-parenting a provider is not currently allowed."), "{err}");
        // A root may always get a parent; a loop never.
        let err = plan_update_provider(&state, u(1), "a", Some(Some(u(3))), true, 20).unwrap_err();
        assert!(err.to_string().contains("creating loop"), "{err}");
        // 1.37: move b (with c) under d; both get d as root.
        let (set, row) = plan_update_provider(&state, u(2), "b", Some(Some(u(4))), true, 20).expect("move");
        state.apply(&set);
        assert_eq!(row.root, u(4));
        assert_eq!(state.provider(&u(3)).map(|p| p.row.root), Some(u(4)));
        assert!(state.provider(&u(1)).is_some_and(|p| p.children.is_empty()));
        // Un-parent b: b and c become their own tree.
        let (set, _) = plan_update_provider(&state, u(2), "b", Some(None), true, 21).expect("unparent");
        state.apply(&set);
        assert_eq!(state.provider(&u(3)).map(|p| p.row.root), Some(u(2)));
    }

    #[test]
    fn rename_conflict_and_delete_rules() {
        let mut state = State::default();
        create(&mut state, u(1), "a", None);
        create(&mut state, u(2), "b", Some(u(1)));
        let err = plan_update_provider(&state, u(2), "a", None, true, 20).unwrap_err();
        assert_eq!(err, ModelError::DuplicateName("Conflicting resource provider a already exists.".into()));
        assert!(matches!(plan_delete_provider(&state, u(1)), Err(ModelError::CannotDeleteParent(_))));
        assert!(matches!(plan_delete_provider(&state, u(7)), Err(ModelError::NotFound(_))));
        let set = plan_delete_provider(&state, u(2)).expect("delete child");
        state.apply(&set);
        assert!(plan_delete_provider(&state, u(1)).is_ok());
    }
}
