//! Glance metadef namespaces: create or replace (the image API computes
//! the namespace's next state inside the write, against the one stored),
//! and delete (a protected namespace is refused with 403, as Glance).

use super::Result;
use crate::state::ComputeChange as C;
use crate::{ComputeError, MetadefNamespace, World, WorldChangeSet};

/// Create or replace a namespace; a rename (`previous` differs from the
/// new name) removes the old row in the same write and is refused (409)
/// when the new name is taken.
pub fn plan_put_metadef_namespace(
    world: &World,
    previous: Option<&str>,
    namespace: MetadefNamespace,
) -> Result<WorldChangeSet> {
    let renamed = previous.filter(|p| *p != namespace.namespace);
    let taken = world.compute.metadef_namespaces.contains_key(&namespace.namespace);
    if taken && (previous.is_none() || renamed.is_some()) {
        return Err(ComputeError::Conflict(format!(
            "The metadata definition namespace={} already exists.",
            namespace.namespace
        )));
    }
    let mut set = WorldChangeSet::new();
    if let Some(old) = renamed {
        set.compute(C::DeleteMetadefNamespace(old.to_owned()));
    }
    set.compute(C::PutMetadefNamespace(namespace));
    Ok(set)
}

/// Delete a namespace (and all in it); a protected one is refused (403).
pub fn plan_delete_metadef_namespace(world: &World, name: &str) -> Result<WorldChangeSet> {
    let namespace = world
        .compute
        .metadef_namespaces
        .get(name)
        .ok_or_else(|| ComputeError::NotFound(format!("Metadata definition namespace={name} was not found.")))?;
    if namespace.protected {
        return Err(ComputeError::Forbidden(format!(
            "Metadata definition namespace {name} is protected and cannot be deleted."
        )));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteMetadefNamespace(name.to_owned()));
    Ok(set)
}
