//! Key pairs: create (the name unique per user and the `key_pairs` quota
//! checked in the same write), delete. A key pair belongs to a user, not a
//! project.

use super::Result;
use crate::state::ComputeChange as C;
use crate::{quota, ComputeError, KeyPair, World, WorldChangeSet};

/// Create a key pair for `user`, charged to `project`'s `key_pairs`
/// limit for that user; its `id` is assigned here. `key_pair` is `Err`
/// when its key material was refused. Checked in Nova's order: the quota
/// (403, `KeypairLimitExceeded`), then the key (400, `InvalidKeypair`),
/// then the name the user may already have (409, `KeyPairExists`).
/// Returns the key pair as stored.
pub fn plan_create_key_pair(
    world: &World,
    project: &str,
    user: &str,
    key_pair: std::result::Result<KeyPair, ComputeError>,
) -> Result<(WorldChangeSet, KeyPair)> {
    quota::check_key_pairs(world, project, user)?;
    let mut key_pair = key_pair?;
    let key = (key_pair.user_id.clone(), key_pair.name.clone());
    if world.compute.key_pairs.contains_key(&key) {
        return Err(ComputeError::Conflict(format!("Key pair '{}' already exists.", key_pair.name)));
    }
    key_pair.id = world.compute.max_key_pair_id + 1;
    let mut set = WorldChangeSet::new();
    set.compute(C::PutKeyPair(key_pair.clone()));
    Ok((set, key_pair))
}

/// Delete `user`'s key pair `name` (404 with Nova's text when absent).
pub fn plan_delete_key_pair(world: &World, user: &str, name: &str) -> Result<WorldChangeSet> {
    if !world.compute.key_pairs.contains_key(&(user.to_owned(), name.to_owned())) {
        return Err(not_found(user, name));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteKeyPair(user.to_owned(), name.to_owned()));
    Ok(set)
}

/// Nova's `KeypairNotFound`.
pub fn not_found(user: &str, name: &str) -> ComputeError {
    ComputeError::NotFound(format!("Keypair {name} not found for user {user}"))
}
