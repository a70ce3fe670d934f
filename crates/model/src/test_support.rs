//! Shared fixtures for the model's unit tests.

use crate::{Change, ChangeSet, ProviderRow, State, Uuid};

/// Add a root provider named `name` with internal id `id` to `state`.
pub(crate) fn add_root_provider(state: &mut State, id: i64, uuid: Uuid, name: &str) {
    let row = ProviderRow {
        id,
        uuid,
        name: name.into(),
        generation: 0,
        parent: None,
        root: uuid,
        created_at: 0,
        updated_at: 0,
    };
    let mut set = ChangeSet::new();
    set.push(Change::PutProvider { row, expected_generation: None });
    state.apply(&set);
}
