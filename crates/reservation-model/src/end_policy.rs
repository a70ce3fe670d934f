//! End-of-lease policies (berth's extension `on_end`, the Climate
//! proposal's three choices): `delete` (Blazar's behaviour: the servers go,
//! the hosts return to the pool), `recycle` (the servers stay; each held
//! host still carrying servers stays out of the pool until its last server
//! is gone, or until `grace` seconds after the end, when its servers are
//! deleted) and `release` (the servers stay; each held host still carrying
//! servers leaves the pool for general scheduling, and the pool is refilled
//! from free general hosts in the same write).
//!
//! A recycling host is recorded on its reservation (`recycling`,
//! `recycle_until`), so it lives in the lease's control row, and
//! `LeaseTables::put_lease` books it, whole, over `[end, recycle_until)`:
//! admission never hands it to another lease while it is busy, and the
//! free count is right at every moment. A lease admitted earlier on such a
//! host for a later window (or on a released host) is healed in the same
//! write as the end: moved to another free matching host, else degraded
//! ([`plan_end_policy`]).

use std::collections::BTreeSet;

use berth_model::Uuid;

use berth_compute_model::lease::{
    Booking, EndPolicy, EventType, Lease, PowerState, ReservableHost, ReservationKind, ReservationStatus,
};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};

use crate::{finish_lease, heal_lease, hypervisor_field, resources, HostEnrolment, ParseQuery, Result};

/// A lease's end policy as asked (`on_end`, `grace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndChoice {
    /// What happens at the end.
    pub on_end: EndPolicy,
    /// Seconds of grace after the end (`recycle` only).
    pub grace: Option<i64>,
}

/// Refused: `on_end` other than `delete` for a lease with instance
/// reservations (their slots share hosts with other leases' slots; only
/// whole hosts can be recycled or released).
pub const HOSTS_ONLY: &str = "on_end 'recycle' and 'release' apply to physical:host reservations only";

/// Check an end policy against a lease's reservation kinds (400 when it
/// does not fit).
pub fn check_choice_for<'a>(kinds: impl Iterator<Item = &'a ReservationKind>, choice: EndChoice) -> Result<()> {
    if let Some(g) = choice.grace {
        if g < 0 {
            return Err(ComputeError::Invalid("Malformed parameter grace (an integer >= 0 is expected)".into()));
        }
        if choice.on_end != EndPolicy::Recycle {
            return Err(ComputeError::Invalid(format!(
                "grace is only allowed with on_end 'recycle' (on_end is '{}')",
                choice.on_end.as_str()
            )));
        }
    }
    let mut kinds = kinds;
    if choice.on_end != EndPolicy::Delete && kinds.any(|k| matches!(k, ReservationKind::Instance { .. })) {
        return Err(ComputeError::Invalid(HOSTS_ONLY.into()));
    }
    Ok(())
}

/// [`check_choice_for`] for an existing lease.
pub fn check_end_choice(lease: &Lease, choice: EndChoice) -> Result<()> {
    check_choice_for(lease.reservations.iter().map(|r| &r.kind), choice)
}

/// The servers (INSTANCE consumers) on an enrolled host, sorted.
pub fn host_servers(world: &World, host: &ReservableHost) -> Vec<Uuid> {
    crate::lending::instances_on_host(world, &host.service_name)
}

/// The held hosts of a lease's whole-host reservations that carry servers.
fn busy_hosts(world: &World, lease: &Lease) -> Vec<(usize, i64)> {
    let tables = &world.compute.leases;
    let mut out = Vec::new();
    for (idx, r) in lease.reservations.iter().enumerate() {
        if !matches!(r.kind, ReservationKind::Host { .. }) {
            continue;
        }
        for a in &r.allocations {
            if tables.hosts.get(&a.host_id).is_some_and(|h| !host_servers(world, h).is_empty()) {
                out.push((idx, a.host_id));
            }
        }
    }
    out
}

/// At a `recycle` end: each whole-host reservation records its held hosts
/// still carrying servers, until `end + grace` (none: until they are
/// empty).
pub(crate) fn recycle_at_end(world: &World, lease: &mut Lease) {
    let busy = busy_hosts(world, lease);
    let until = lease.grace.map(|g| lease.end.saturating_add(g));
    for (idx, r) in lease.reservations.iter_mut().enumerate() {
        r.recycling = busy.iter().filter(|(i, _)| *i == idx).map(|(_, h)| *h).collect();
        r.recycle_until = if r.recycling.is_empty() { None } else { until };
    }
}

/// What a non-`delete` end did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndOutcome {
    /// Hosts left recycling.
    pub recycling: Vec<i64>,
    /// Hosts released to general scheduling (un-enrolled).
    pub released: Vec<i64>,
    /// Hosts enrolled to refill the pool (ids).
    pub refilled: Vec<i64>,
    /// Leases healed off a recycling or released host.
    pub healed: Vec<Uuid>,
}

/// Finish a lease's end event under its end policy, in one write: the
/// lease TERMINATED ([`crate::plan_event_finish`]) with its recycling
/// hosts recorded (`recycle`), or its busy hosts un-enrolled and as many
/// free matching general hosts enrolled in their place (`release`:
/// `candidates` are the general hosts the caller found up, as enrolment
/// reads them; each is checked here for no allocation and the
/// reservation's `hypervisor_properties`, and takes the released host's
/// extra capabilities, so the pool keeps its shape). Leases booked later
/// on a recycling or released host are healed in the same write (another
/// free matching host, a replacement included, else degraded). `None`:
/// the event is finished already.
pub fn plan_end_policy(
    world: &World,
    lease_id: Uuid,
    event_id: Uuid,
    candidates: &[HostEnrolment],
    parse: ParseQuery<'_>,
    ids: &mut dyn FnMut() -> Uuid,
    now: Timestamp,
) -> Result<Option<(WorldChangeSet, EndOutcome)>> {
    let Some(ended) = finish_lease(world, lease_id, event_id, false, now) else { return Ok(None) };
    let tables = &world.compute.leases;
    let is_end = ended.event(EventType::EndLease).is_some_and(|e| e.id == event_id);
    let mut set = WorldChangeSet::new();
    let mut outcome = EndOutcome::default();
    // Hosts now out of the pool, each from `from` to `until`.
    let mut blocked: Vec<(i64, Timestamp, Timestamp)> = Vec::new();
    let mut added: Vec<ReservableHost> = Vec::new();
    if is_end {
        match ended.on_end {
            EndPolicy::Delete => {}
            EndPolicy::Recycle => {
                for r in &ended.reservations {
                    for h in &r.recycling {
                        outcome.recycling.push(*h);
                        blocked.push((*h, ended.end, r.recycle_until.unwrap_or(Timestamp::MAX)));
                    }
                }
            }
            EndPolicy::Release => {
                let mut next_id = tables.max_host_id;
                let mut taken: BTreeSet<String> = BTreeSet::new();
                for (idx, host_id) in busy_hosts(world, &ended) {
                    let Some(host) = tables.hosts.get(&host_id) else { continue };
                    if outcome.released.contains(&host_id) {
                        continue;
                    }
                    outcome.released.push(host_id);
                    blocked.push((host_id, ended.end, Timestamp::MAX));
                    // Its servers become ordinary ones: without the ended
                    // reservation's hint, a later move is not refused by
                    // the pool rule.
                    for server in crate::lending::instances_on_host(world, &host.service_name) {
                        let Some(spec) = world.compute.request_specs.get(&server) else { continue };
                        let hinted = spec.hints.get("reservation").and_then(|v| v.first());
                        if hinted.is_some_and(|rid| ended.reservations.iter().any(|r| r.id.to_string() == *rid)) {
                            let mut spec = spec.clone();
                            spec.hints.remove("reservation");
                            set.compute(C::PutRequestSpec(spec));
                        }
                    }
                    set.compute(C::DeleteReservableHost(host_id));
                    let hyp = match &ended.reservations[idx].kind {
                        ReservationKind::Host { hypervisor_properties, .. } => parse(hypervisor_properties)?,
                        ReservationKind::Instance { .. } => None,
                    };
                    let replacement = candidates.iter().find(|c| {
                        !taken.contains(&c.service_name)
                            && !tables.host_by_service.contains_key(&c.service_name)
                            && world.compute.nodes_by_host.contains_key(&c.service_name)
                            && crate::lending::consumers_on_host(world, &c.service_name).is_empty()
                            && hyp.as_ref().is_none_or(|q| {
                                let probe = enrolled_row(0, c, host, now);
                                q.matches(&|k| hypervisor_field(&probe, k))
                            })
                    });
                    if let Some(c) = replacement {
                        next_id += 1;
                        taken.insert(c.service_name.clone());
                        let row = enrolled_row(next_id, c, host, now);
                        outcome.refilled.push(row.id);
                        set.compute(C::PutReservableHost(row.clone()));
                        added.push(row);
                    }
                }
            }
        }
    }
    set.compute(C::PutLease(ended.clone()));
    // Leases booked later on a blocked host move off it.
    let exclude: Vec<i64> = blocked.iter().map(|b| b.0).collect();
    let mut victims: BTreeSet<Uuid> = BTreeSet::new();
    for (host, from, until) in &blocked {
        victims.extend(tables.overlapping(*host, *from, *until, Some(lease_id)).map(|b| b.lease));
    }
    let mut extra: Vec<(i64, Booking)> = Vec::new();
    for victim in victims {
        let Some(original) = tables.leases.get(&victim) else { continue };
        let Some((lease, _)) = heal_lease(world, original, &exclude, &exclude, false, &added, &extra, parse, now)?
        else {
            continue;
        };
        for r in lease.reservations.iter().filter(|r| r.status != ReservationStatus::Deleted) {
            for a in &r.allocations {
                extra.push((
                    a.host_id,
                    Booking {
                        lease: victim,
                        reservation: r.id,
                        start: lease.start,
                        end: lease.end,
                        demand: r.demand(),
                        slots: a.slots,
                    },
                ));
            }
        }
        outcome.healed.push(victim);
        set.compute(C::PutLease(lease.clone()));
        resources::sync(world, Some(original), Some(&lease), ids, now, &mut set)?;
    }
    Ok(Some((set, outcome)))
}

/// A pool row for `enrolment`, shaped like `like` (its extra capabilities
/// and zone when the enrolment has none).
fn enrolled_row(id: i64, enrolment: &HostEnrolment, like: &ReservableHost, now: Timestamp) -> ReservableHost {
    let mut extra = like.extra.clone();
    extra.extend(enrolment.extra.clone());
    ReservableHost {
        id,
        hypervisor_hostname: enrolment.hypervisor_hostname.clone(),
        service_name: enrolment.service_name.clone(),
        vcpus: enrolment.vcpus,
        memory_mb: enrolment.memory_mb,
        local_gb: enrolment.local_gb,
        hypervisor_type: like.hypervisor_type.clone(),
        hypervisor_version: like.hypervisor_version,
        cpu_info: like.cpu_info.clone(),
        availability_zone: enrolment.availability_zone.clone(),
        trust_id: enrolment.trust_id.clone(),
        reservable: true,
        extra,
        power: Default::default(),
        created_at: now,
        updated_at: None,
    }
}

/// Leases with recycling hosts, by id.
pub fn recycling_leases(world: &World) -> Vec<Uuid> {
    world
        .compute
        .leases
        .leases
        .values()
        .filter(|l| l.reservations.iter().any(|r| !r.recycling.is_empty()))
        .map(|l| l.id)
        .collect()
}

/// How many pool hosts are recycling.
pub fn recycling_host_count(world: &World) -> usize {
    let mut hosts: BTreeSet<i64> = BTreeSet::new();
    for l in world.compute.leases.leases.values() {
        for r in &l.reservations {
            hosts.extend(r.recycling.iter().copied());
        }
    }
    hosts.len()
}

/// Drop from a lease's recycling hosts those that carry no server any
/// more (they rejoin the pool) or left the pool; one write, `None` when
/// nothing changes.
pub fn plan_drop_recycled(world: &World, lease_id: Uuid, now: Timestamp) -> Option<WorldChangeSet> {
    let tables = &world.compute.leases;
    let old = tables.leases.get(&lease_id)?;
    let mut lease = old.clone();
    for r in &mut lease.reservations {
        r.recycling.retain(|h| tables.hosts.get(h).is_some_and(|host| !host_servers(world, host).is_empty()));
        if r.recycling.is_empty() {
            r.recycle_until = None;
        }
    }
    if lease == *old {
        return None;
    }
    for (r, o) in lease.reservations.iter_mut().zip(&old.reservations) {
        if r.recycling != o.recycling {
            r.updated_at = Some(now);
        }
    }
    lease.updated_at = Some(now);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutLease(lease));
    Some(set)
}

/// The servers to delete because a lease's recycling grace is over (on
/// its recycling hosts whose `recycle_until` has passed).
pub fn grace_over_servers(world: &World, lease_id: Uuid, now: Timestamp) -> Vec<Uuid> {
    servers_recycling(world, lease_id, &|until| until.is_some_and(|t| t <= now))
}

/// The servers on all of a lease's recycling hosts (what deleting the
/// lease deletes first).
pub fn recycling_servers(world: &World, lease_id: Uuid) -> Vec<Uuid> {
    servers_recycling(world, lease_id, &|_| true)
}

fn servers_recycling(world: &World, lease_id: Uuid, due: &dyn Fn(Option<Timestamp>) -> bool) -> Vec<Uuid> {
    let tables = &world.compute.leases;
    let Some(lease) = tables.leases.get(&lease_id) else { return Vec::new() };
    let mut out: BTreeSet<Uuid> = BTreeSet::new();
    for r in lease.reservations.iter().filter(|r| due(r.recycle_until)) {
        for h in r.recycling.iter().filter_map(|h| tables.hosts.get(h)) {
            out.extend(host_servers(world, h));
        }
    }
    out.into_iter().collect()
}

/// A pool host's state now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolState {
    /// No lease holds it now.
    Free,
    /// A lease's window holds it now.
    Reserved,
    /// An ended `recycle` lease's servers still run on it.
    Recycling,
    /// Free, and lent to ordinary boots (pool lending: no lease needs it
    /// within the lead).
    Lent,
    /// Free, but a lease needs it within the lending lead: it takes no
    /// more ordinary boots and its ordinary servers are moved away.
    Reclaimed,
}

impl PoolState {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolState::Free => "free",
            PoolState::Reserved => "reserved",
            PoolState::Recycling => "recycling",
            PoolState::Lent => "lent",
            PoolState::Reclaimed => "reclaimed",
        }
    }
}

/// A pool host's state at `now`: recycling while an ended lease still
/// lists it (its grace may be over, its servers being deleted), reserved
/// while a lease's window holds it.
pub fn pool_state(world: &World, host_id: i64, now: Timestamp, lend_lead: Option<Timestamp>) -> PoolState {
    let tables = &world.compute.leases;
    let mut state = PoolState::Free;
    for b in tables.bookings.get(&host_id).into_iter().flatten() {
        let Some(lease) = tables.leases.get(&b.lease) else { continue };
        if lease.is_over() {
            return PoolState::Recycling;
        }
        if b.overlaps(now, now.saturating_add(1)) {
            state = PoolState::Reserved;
        }
    }
    match (state, lend_lead) {
        // A host switched off (power management) lends nothing.
        (PoolState::Free, Some(_)) if tables.lent(host_id, now, lend_lead) => {
            let on = tables.hosts.get(&host_id).is_none_or(|h| h.power.state == PowerState::On);
            if on {
                PoolState::Lent
            } else {
                PoolState::Free
            }
        }
        (PoolState::Free, Some(_)) => PoolState::Reclaimed,
        _ => state,
    }
}

/// The enrolment fields of a compute node (by node or service host name)
/// that carries no server: what `POST /os-hosts` enrols and what a
/// `release` end refills the pool with. `NotFound` for an unknown name,
/// `Conflict` (naming the servers) for a host that carries any.
pub fn node_enrolment(
    world: &World,
    name: &str,
    extra: std::collections::BTreeMap<String, String>,
    trust_id: String,
) -> Result<HostEnrolment> {
    let not_found = || ComputeError::NotFound(format!("Host '{name}' not found!"));
    let node = world
        .compute
        .compute_nodes
        .values()
        .filter(|n| n.node == name || n.host == name)
        .min_by_key(|n| (n.node != name, n.uuid))
        .ok_or_else(not_found)?;
    let state = &world.placement;
    let root = state.provider(&node.uuid).ok_or_else(not_found)?;
    // The whole tree: a host with servers anywhere in it is not free.
    let mut stack = vec![root];
    let mut servers: Vec<String> = Vec::new();
    while let Some(p) = stack.pop() {
        servers.extend(p.consumers.iter().map(Uuid::to_string));
        stack.extend(p.children.iter().filter_map(|c| state.provider(c)));
    }
    if !servers.is_empty() {
        servers.sort();
        servers.dedup();
        return Err(ComputeError::Conflict(format!("Servers [{}] found for host {name}", servers.join(", "))));
    }
    let total = |class: &str| root.inventories.get(class).map_or(0, |i| i.total - i.reserved);
    let zone = world
        .compute
        .aggregates
        .values()
        .find(|a| a.hosts.contains(&node.host) && a.availability_zone().is_some())
        .and_then(|a| a.availability_zone().map(str::to_owned))
        .unwrap_or_default();
    Ok(HostEnrolment {
        service_name: node.host.clone(),
        hypervisor_hostname: node.node.clone(),
        vcpus: total("VCPU") + total("PCPU"),
        memory_mb: total("MEMORY_MB"),
        local_gb: total("DISK_GB"),
        availability_zone: zone,
        extra,
        trust_id,
    })
}

/// The general (not enrolled) compute hosts that could refill the pool,
/// for `up` service hosts: free ones, as [`node_enrolment`] reads them, in
/// service-host order.
pub fn refill_candidates(
    world: &World,
    up: &dyn Fn(&str) -> bool,
    trust_id: &mut dyn FnMut() -> String,
) -> Vec<HostEnrolment> {
    let tables = &world.compute.leases;
    let hosts: BTreeSet<&str> = world
        .compute
        .compute_nodes
        .values()
        .map(|n| n.host.as_str())
        .filter(|h| !tables.host_by_service.contains_key(*h) && up(h))
        .collect();
    hosts.into_iter().filter_map(|h| node_enrolment(world, h, Default::default(), trust_id()).ok()).collect()
}
