//! Reserved servers (Climate's `RESERVED` servers): a boot with the hints
//! `reserved=True` and `lease_params` is admitted together with a lease of
//! one `virtual:instance` reservation shaped like the boot's flavor, in the
//! boot's admission write. Its build requests are *held* (never scheduled)
//! and carry the scheduler hint `reservation=<id>` in their request specs.
//!
//! - [`slot_request`] and [`plan_admit_reserved`]: the lease of a boot;
//! - [`plan_release_reserved`]: at the lease start (in the write that
//!   finishes the start event, so the lease is `ACTIVE` and the servers
//!   released together), each held build request is released and its
//!   request spec takes the reservation's flavor, so the claim consumes
//!   `CUSTOM_RESERVATION_<ID>` on a held host;
//! - [`reserved_to_build`]: the released build requests of a lease, for
//!   the runtime to queue (again after a crash: queueing twice is safe);
//! - [`plan_drop_held`]: deleting a held server shrinks its lease by one
//!   slot, or deletes it with the last one, in the delete's write.
//!
//! The lease end deletes the built servers like any server booted for the
//! reservation (their request specs name it).

use std::collections::{BTreeMap, BTreeSet};

use berth_compute_model::lease::{LeaseStatus, ReservationKind};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Flavor, Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use crate::{plan_create_lease, plan_delete_lease, plan_update_lease, LeaseRequest, ReservationRequest, Result};

/// The scheduler hint naming the reservation a boot uses.
pub const RESERVATION_HINT: &str = "reservation";

/// One `virtual:instance` reservation of `amount` slots shaped like
/// `flavor` (vCPUs, RAM, and root + ephemeral + swap disk), no affinity.
pub fn slot_request(flavor: &Flavor, amount: i64) -> ReservationRequest {
    ReservationRequest {
        kind: ReservationKind::Instance {
            vcpus: flavor.vcpus,
            memory_mb: flavor.memory_mb,
            disk_gb: flavor.disk_gb(),
            amount,
            affinity: None,
            resource_properties: String::new(),
            source_flavor: None,
        },
        hypervisor_query: None,
        resource_query: None,
    }
}

/// Admit the lease of a reserved boot (`request` with its one slot
/// reservation): the change set and the hints every request spec of the
/// boot gets (`reservation=<id>`). Refused (`Conflict`: not enough hosts)
/// like any lease.
pub fn plan_admit_reserved(
    world: &World,
    request: &LeaseRequest,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<(WorldChangeSet, BTreeMap<String, Vec<String>>)> {
    let (set, lease) = plan_create_lease(world, request, ids, now)?;
    let reservation = lease
        .reservations
        .first()
        .ok_or_else(|| ComputeError::Invalid("a reserved server needs one instance reservation".into()))?;
    let hints = BTreeMap::from([(RESERVATION_HINT.to_owned(), vec![reservation.id.to_string()])]);
    Ok((set, hints))
}

/// The reservation a boot's request spec names.
fn reservation_of(world: &World, instance: &Uuid) -> Option<Uuid> {
    let spec = world.compute.request_specs.get(instance)?;
    spec.hints.get(RESERVATION_HINT)?.first().and_then(|r| Uuid::parse_str(r).ok())
}

/// Build requests (held or not) whose request specs name one of `reservations`.
fn builds_for(world: &World, reservations: &BTreeSet<Uuid>, held: bool) -> Vec<Uuid> {
    let mut out: Vec<Uuid> = world
        .compute
        .build_requests
        .values()
        .filter(|b| b.held == held)
        .filter(|b| reservation_of(world, &b.instance_uuid).is_some_and(|r| reservations.contains(&r)))
        .map(|b| b.instance_uuid)
        .collect();
    out.sort();
    out
}

fn slot_reservations(world: &World, lease_id: Uuid) -> BTreeSet<Uuid> {
    world
        .compute
        .leases
        .leases
        .get(&lease_id)
        .map(|l| {
            l.reservations.iter().filter(|r| matches!(r.kind, ReservationKind::Instance { .. })).map(|r| r.id).collect()
        })
        .unwrap_or_default()
}

/// Release the held build requests of a lease's instance reservations: not
/// held any more, and their request specs take the reservation's flavor
/// (`reservation:<id>`, whose `CUSTOM_RESERVATION_<ID>` only the held
/// hosts have). Empty when none is held (so it is idempotent).
pub fn plan_release_reserved(world: &World, lease_id: Uuid) -> WorldChangeSet {
    let mut set = WorldChangeSet::new();
    for instance in builds_for(world, &slot_reservations(world, lease_id), true) {
        let Some(build) = world.compute.build_requests.get(&instance) else { continue };
        let mut build = build.clone();
        build.held = false;
        set.compute(C::PutBuildRequest(build));
        let flavor = reservation_of(world, &instance).and_then(|r| world.compute.flavors.get(&r.to_string()));
        if let (Some(spec), Some(flavor)) = (world.compute.request_specs.get(&instance), flavor) {
            let mut spec = spec.clone();
            spec.flavor = flavor.clone();
            set.compute(C::PutRequestSpec(spec));
        }
    }
    set
}

/// The released (not held) build requests of a lease's instance
/// reservations, one list per boot request (Nova's `reservation_id`), in
/// launch order: what the runtime queues for the conductor.
pub fn reserved_to_build(world: &World, lease_id: Uuid) -> Vec<Vec<Uuid>> {
    let mut boots: BTreeMap<String, Vec<(i64, Uuid)>> = BTreeMap::new();
    for instance in builds_for(world, &slot_reservations(world, lease_id), false) {
        if let Some(build) = world.compute.build_requests.get(&instance) {
            boots.entry(build.spec.reservation_id.clone()).or_default().push((build.spec.launch_index, instance));
        }
    }
    boots
        .into_values()
        .map(|mut list| {
            list.sort();
            list.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// The held build requests of a lease (its reserved servers not built yet).
pub fn held_of_lease(world: &World, lease_id: Uuid) -> Vec<Uuid> {
    builds_for(world, &slot_reservations(world, lease_id), true)
}

/// Refuse a lease update that would leave its `RESERVED` servers without
/// their slots: an instance reservation holding N held servers cannot go
/// below N slots (deleting `RESERVED` servers shrinks it), nor change the
/// slot shape its servers were admitted with. Growing it is allowed (the
/// extra slots serve boots with the reservation's flavor).
pub fn check_update(world: &World, update: &crate::LeaseUpdate) -> Result<()> {
    for change in &update.reservations {
        let held = builds_for(world, &BTreeSet::from([change.id]), true).len() as i64;
        if held == 0 {
            continue;
        }
        if change.amount.is_some_and(|amount| amount < held) {
            return Err(ComputeError::Invalid(format!(
                "Reservation {} holds {held} RESERVED servers: its amount cannot go below {held} \
                 (delete RESERVED servers to shrink it)",
                change.id
            )));
        }
        if change.vcpus.is_some() || change.memory_mb.is_some() || change.disk_gb.is_some() {
            return Err(ComputeError::Invalid(format!(
                "Reservation {} holds {held} RESERVED servers: its vcpus, memory_mb and disk_gb follow their flavor",
                change.id
            )));
        }
    }
    Ok(())
}

/// The lease change that goes with deleting the held build request of
/// `instance`: its lease loses a slot, or is deleted with its last held
/// server. Nothing for a lease that has started or is gone (the lease
/// then lives on as the user left it).
pub fn plan_drop_held(
    world: &World,
    instance: &Uuid,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<WorldChangeSet> {
    let Some(rid) = reservation_of(world, instance) else { return Ok(WorldChangeSet::new()) };
    let Some((lease, _)) = world.compute.leases.reservation(rid) else { return Ok(WorldChangeSet::new()) };
    if lease.status != LeaseStatus::Pending {
        return Ok(WorldChangeSet::new());
    }
    let others = builds_for(world, &BTreeSet::from([rid]), true).into_iter().filter(|i| i != instance).count() as i64;
    // Deleting a server is never refused for its lease's sake: a lease
    // that cannot shrink (its window passed while it waited to start, say)
    // is left as it is, and its start or end events tidy it up.
    if others == 0 {
        return Ok(plan_delete_lease(world, lease.id).unwrap_or_default());
    }
    let update = crate::LeaseUpdate {
        reservations: vec![crate::ReservationUpdate { id: rid, amount: Some(others), ..Default::default() }],
        ..Default::default()
    };
    // The slot reservation has no query to parse.
    Ok(plan_update_lease(world, lease.id, &update, &|_| Ok(None), ids, now).map(|(set, _)| set).unwrap_or_default())
}
