//! Which agent identity speaks for a host: hosts bound to the identity
//! that registers them ([`plan_bind_hosts`], [`plan_unbind_host`],
//! [`check_host_owner`]) and per-host agent credentials (issued, revoked,
//! matched).

use uuid::Uuid;

use super::Result;
use crate::state::ComputeChange as C;
use crate::{credential_host, credential_identity, AgentCredential, ComputeError, HostMapping, World, WorldChangeSet};

/// Bind `hosts` to the agent identity `owner` in `cell` before an agent
/// registers them: a host bound to another identity is refused (403), a
/// host mapped to another cell too (409); an unbound or unknown host is
/// mapped and bound. Checked and written in one planned write, so two
/// identities racing for a new host cannot both win.
pub fn plan_bind_hosts(world: &World, hosts: &[String], cell: Uuid, owner: &str) -> Result<WorldChangeSet> {
    if !world.compute.cells.contains_key(&cell) {
        return Err(ComputeError::NotFound(format!("Cell {cell} could not be found.")));
    }
    check_host_owner(world, owner, hosts.iter().map(String::as_str))?;
    let mut set = WorldChangeSet::new();
    for host in hosts {
        if let Some(m) = world.compute.host_mappings.get(host) {
            if m.cell != cell {
                return Err(ComputeError::Conflict(format!("Host {host} is already mapped to another cell.")));
            }
            if m.owner.as_deref() == Some(owner) {
                continue;
            }
        }
        set.compute(C::PutHostMapping(HostMapping { host: host.clone(), cell, owner: Some(owner.to_owned()) }));
    }
    Ok(set)
}

/// Unbind a host from its agent identity (admin): the next registration
/// binds it to whoever registers it.
pub fn plan_unbind_host(world: &World, host: &str) -> Result<WorldChangeSet> {
    let mapping = world
        .compute
        .host_mappings
        .get(host)
        .ok_or_else(|| ComputeError::NotFound(format!("Compute host {host} could not be found.")))?;
    let mut set = WorldChangeSet::new();
    if mapping.owner.is_some() {
        set.compute(C::PutHostMapping(HostMapping { owner: None, ..mapping.clone() }));
    }
    Ok(set)
}

/// Refuse (403) when any of `hosts` is bound to an identity other than
/// `caller`: the identity of its mapping, or its agent credential's once
/// one was issued (even before the host registered). A credential's
/// identity speaks only for its own host. Unknown and unbound hosts pass.
pub fn check_host_owner<'a>(world: &World, caller: &str, hosts: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for host in hosts {
        if let Some(own) = credential_host(caller) {
            if own != host {
                return Err(ComputeError::Forbidden(format!(
                    "The agent credential of host {own} cannot speak for host {host}."
                )));
            }
        }
        // Compared without building the identity or copying the owner: an
        // agent's long poll checks all its hosts (thousands) each time.
        let bound_elsewhere = if world.compute.agent_credentials.contains_key(host) {
            credential_host(caller) != Some(host)
        } else {
            world.compute.host_mappings.get(host).and_then(|m| m.owner.as_deref()).is_some_and(|owner| owner != caller)
        };
        if bound_elsewhere {
            return Err(ComputeError::Forbidden(format!("Host {host} is bound to another agent identity.")));
        }
    }
    Ok(())
}

/// The longest host name an agent credential is issued for (Nova's
/// `services.host` column).
const MAX_HOST_NAME: usize = 255;

/// Issue (or rotate) `host`'s agent credential: only the digest of its
/// secret is kept. A mapped host is bound to the credential's identity at
/// once, so from this write on only the credential speaks for it.
pub fn plan_issue_agent_credential(world: &World, host: &str, digest: &str, now: i64) -> Result<WorldChangeSet> {
    if host.is_empty()
        || host.len() > MAX_HOST_NAME
        || host.contains(':')
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ComputeError::Invalid(format!(
            "Invalid host name: 1 to {MAX_HOST_NAME} characters, no ':', spaces or control characters."
        )));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::PutAgentCredential(AgentCredential {
        host: host.to_owned(),
        digest: digest.to_owned(),
        created_at: now,
    }));
    if let Some(mapping) = world.compute.host_mappings.get(host) {
        let identity = credential_identity(host);
        if mapping.owner.as_deref() != Some(identity.as_str()) {
            set.compute(C::PutHostMapping(HostMapping { owner: Some(identity), ..mapping.clone() }));
        }
    }
    Ok(set)
}

/// Revoke `host`'s agent credential; a host bound to it is unbound (the
/// next registration binds it to whoever registers it).
pub fn plan_revoke_agent_credential(world: &World, host: &str) -> Result<WorldChangeSet> {
    if !world.compute.agent_credentials.contains_key(host) {
        return Err(ComputeError::NotFound(format!("Host {host} has no agent credential.")));
    }
    let mut set = WorldChangeSet::new();
    set.compute(C::DeleteAgentCredential(host.to_owned()));
    if let Some(mapping) = world.compute.host_mappings.get(host) {
        if mapping.owner.as_deref() == Some(credential_identity(host).as_str()) {
            set.compute(C::PutHostMapping(HostMapping { owner: None, ..mapping.clone() }));
        }
    }
    Ok(set)
}

/// Whether `digest` (of a presented secret) is `host`'s credential.
/// Compared in constant time.
pub fn agent_credential_matches(world: &World, host: &str, digest: &str) -> bool {
    world.compute.agent_credentials.get(host).is_some_and(|c| {
        c.digest.len() == digest.len()
            && c.digest.bytes().zip(digest.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    })
}
