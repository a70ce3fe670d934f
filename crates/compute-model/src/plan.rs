//! Planning functions for control writes: each takes the current
//! [`World`](crate::World) and returns the
//! [`WorldChangeSet`](crate::WorldChangeSet) to commit, or refuses.
//! They run inside the write path, one at a time against a caught-up
//! snapshot, so what they check is what gets committed.
//!
//! The boot path is three plans:
//!
//! 1. [`plan_admit_boot`] (API): quota admission, then build requests,
//!    request specs, instance mappings and group membership, in one write;
//! 2. [`plan_claim`] (conductor): placement allocations for every instance
//!    of the request (all or nothing), the server group's hard policy
//!    re-checked against current allocations, mappings moved to the chosen
//!    cell and build requests removed, in one write;
//! 3. [`plan_bury`] (conductor, when no host fits): mappings moved to cell0,
//!    build requests removed.
//!
//! A build that fails on its host is moved to the next alternate the claim
//! kept in the request spec by [`plan_reschedule`] (allocations replaced,
//! attempt counted, in one write), or its allocations go when no attempt
//! is left.
//!
//! Deleting goes through [`plan_delete_build_request`] (not yet in a cell)
//! or [`plan_forget_instance`] (removed from its cell).
//!
//! One file per family of writes, under `plan/`: `admission`, `claims`
//! (and burying in cell0), `reschedule` (push mode) and `requeue` (pull
//! mode), `deletes`; then `flavors`, `images`, `snapshots` (of servers), `key_pairs`, `server_groups`, `quotas`,
//! `aggregates`, `cells` (and host discovery) and `agents` (which identity
//! speaks for a host). Everything is re-exported here: callers write
//! `plan::plan_claim`.

use crate::ComputeError;

mod admission;
mod agents;
mod aggregates;
mod cells;
mod claims;
mod deletes;
mod flavors;
mod images;
mod key_pairs;
mod metadefs;
mod quotas;
mod requeue;
mod reschedule;
mod server_groups;
mod snapshots;

pub use admission::{hold_boot, plan_admit_boot, BootAdmission};
pub use agents::{
    agent_credential_matches, check_host_owner, plan_bind_hosts, plan_issue_agent_credential,
    plan_revoke_agent_credential, plan_unbind_host,
};
pub use aggregates::{
    plan_add_aggregate_host, plan_create_aggregate, plan_delete_aggregate, plan_remove_aggregate_host,
    plan_set_aggregate_metadata, plan_update_aggregate,
};
pub use cells::{plan_map_host, plan_put_cell};
pub use claims::{plan_bury, plan_claim, plan_claim_boots, ClaimFailure, Claimed, InstanceChoices};
pub use deletes::{plan_delete_build_request, plan_forget_deleted, plan_forget_instance, plan_queue_for_delete};
pub use flavors::{plan_create_flavor, plan_delete_flavor, plan_edit_flavor, NewFlavor};
pub use images::{
    plan_abort_image_upload, plan_begin_image_upload, plan_delete_image, plan_finish_image_upload, plan_image_status,
    plan_put_image,
};
pub use key_pairs::{not_found as key_pair_not_found, plan_create_key_pair, plan_delete_key_pair};
pub use metadefs::{plan_delete_metadef_namespace, plan_put_metadef_namespace};
pub use quotas::{plan_delete_quotas, plan_set_quota_class, plan_set_quotas};
pub use requeue::{plan_claim_requeued, plan_expire_requeued, plan_requeue, requeue_waiting, RequeueClaim};
pub use reschedule::{plan_reschedule, Exhausted, Rescheduled};
pub use server_groups::{plan_create_server_group, plan_delete_server_group};
pub use snapshots::{
    pending_snapshot_ids, plan_rotate_backups, plan_snapshot_image, snapshot_image_of, SnapshotImage, SnapshotKind,
};

type Result<T> = std::result::Result<T, ComputeError>;

#[cfg(test)]
pub(crate) mod tests;
