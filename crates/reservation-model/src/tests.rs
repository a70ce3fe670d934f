//! Admission, updates and events on a small world.

use std::collections::BTreeMap;

use berth_compute_model::lease::{
    Booking, Demand, EventStatus, EventType, HostAllocation, Lease, LeaseStatus, ReservableHost, ReservationKind,
};
use berth_compute_model::ComputeChange as C;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use berth_model::Uuid;

use super::*;
use crate::admission::{Admission, Overlay};

const H: i64 = 3600;

fn world_with_hosts(n: usize, vcpus: i64) -> World {
    let mut world = World::default();
    for i in 0..n {
        let enrol = HostEnrolment {
            service_name: format!("h{i}"),
            hypervisor_hostname: format!("h{i}"),
            vcpus,
            memory_mb: 16384,
            local_gb: 100,
            availability_zone: String::new(),
            extra: BTreeMap::from([("gpu".to_string(), if i % 2 == 0 { "true" } else { "false" }.to_string())]),
            trust_id: "t".into(),
        };
        let (set, _) = plan_enrol_host(&world, enrol, 0).unwrap();
        world.apply(&set);
    }
    world
}

fn ids() -> impl FnMut() -> Uuid {
    let mut n = 0u128;
    move || {
        n += 1;
        Uuid::from_u128(n + (std::process::id() as u128) * 1_000_000_000 + rand_base())
    }
}

fn rand_base() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (NEXT.fetch_add(1, Ordering::SeqCst) as u128) << 64
}

fn hosts(min: i64, max: i64) -> ReservationRequest {
    ReservationRequest {
        kind: ReservationKind::Host {
            min,
            max,
            hypervisor_properties: String::new(),
            resource_properties: String::new(),
            before_end: "default".into(),
        },
        hypervisor_query: None,
        resource_query: None,
    }
}

fn slots(amount: i64, vcpus: i64, affinity: Option<bool>) -> ReservationRequest {
    ReservationRequest {
        kind: ReservationKind::Instance {
            vcpus,
            memory_mb: 1024,
            disk_gb: 10,
            amount,
            affinity,
            resource_properties: String::new(),
            source_flavor: None,
        },
        hypervisor_query: None,
        resource_query: None,
    }
}

fn lease(start: i64, end: i64, reservations: Vec<ReservationRequest>) -> LeaseRequest {
    LeaseRequest {
        name: "l".into(),
        user_id: "u".into(),
        project_id: "p".into(),
        start,
        end,
        before_end: None,
        reservations,
    }
}

fn admit(world: &mut World, request: &LeaseRequest) -> std::result::Result<Lease, ComputeError> {
    let mut next = ids();
    let (set, lease) = plan_create_lease(world, request, &mut next, 0)?;
    world.apply(&set);
    Ok(lease)
}

fn no_parse(s: &str) -> Result<Option<Query>> {
    assert!(s.is_empty());
    Ok(None)
}

#[test]
fn last_host_is_booked_once_and_touching_windows_are_admitted() {
    let mut world = world_with_hosts(1, 8);
    admit(&mut world, &lease(10 * H, 11 * H, vec![hosts(1, 1)])).unwrap();
    let err = admit(&mut world, &lease(10 * H + 1800, 12 * H, vec![hosts(1, 1)])).unwrap_err();
    assert_eq!(err, ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));
    assert_eq!(world.compute.leases.leases.len(), 1, "a refused lease writes nothing");
    admit(&mut world, &lease(11 * H, 12 * H, vec![hosts(1, 1)])).expect("end of A = start of B");
    admit(&mut world, &lease(9 * H, 10 * H, vec![hosts(1, 1)])).expect("end of B = start of A");
}

#[test]
fn min_max_takes_what_is_free() {
    let mut world = world_with_hosts(3, 8);
    let a = admit(&mut world, &lease(0, H, vec![hosts(1, 2)])).unwrap();
    assert_eq!(a.reservations[0].allocations.len(), 2);
    let b = admit(&mut world, &lease(0, H, vec![hosts(1, 5)])).unwrap();
    assert_eq!(b.reservations[0].allocations.len(), 1);
    assert!(admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).is_err());
}

#[test]
fn slots_are_counted_per_slot() {
    // 8-vCPU host; 2 × 4-vCPU slots fill it; a third overlapping slot does not fit.
    let mut world = world_with_hosts(1, 8);
    admit(&mut world, &lease(0, 2 * H, vec![slots(2, 4, None)])).unwrap();
    assert!(admit(&mut world, &lease(H, 3 * H, vec![slots(1, 4, None)])).is_err());
    assert!(admit(&mut world, &lease(H, 3 * H, vec![slots(1, 4, Some(true))])).is_err());
    assert!(admit(&mut world, &lease(H, 3 * H, vec![slots(1, 4, Some(false))])).is_err());
    // After the window it fits again.
    admit(&mut world, &lease(2 * H, 3 * H, vec![slots(2, 4, None)])).unwrap();
}

#[test]
fn peak_not_sum_inside_the_window() {
    // Three non-overlapping 4-vCPU reservations inside [0, 6h) on an
    // 8-vCPU host leave exactly one 4-vCPU slot for the whole window.
    let mut world = world_with_hosts(1, 8);
    for i in 0..3 {
        admit(&mut world, &lease(2 * i * H, 2 * (i + 1) * H, vec![slots(1, 4, None)])).unwrap();
    }
    admit(&mut world, &lease(0, 6 * H, vec![slots(1, 4, None)])).expect("peak 4 + 4 = 8");
    assert!(admit(&mut world, &lease(0, 6 * H, vec![slots(1, 4, None)])).is_err());
}

#[test]
fn affinity_decides_the_spread() {
    let mut world = world_with_hosts(2, 8);
    assert!(admit(&mut world, &lease(0, H, vec![slots(3, 4, Some(true))])).is_err(), "3 × 4 on one 8-vCPU host");
    let l = admit(&mut world, &lease(0, H, vec![slots(2, 4, Some(false))])).unwrap();
    assert_eq!(l.reservations[0].allocations.len(), 2);
    assert!(admit(&mut world, &lease(0, H, vec![slots(2, 4, Some(false))])).is_ok());
    assert!(admit(&mut world, &lease(0, H, vec![slots(1, 1, None)])).is_err());
}

#[test]
fn whole_host_and_slots_exclude_each_other() {
    let mut world = world_with_hosts(1, 8);
    admit(&mut world, &lease(0, H, vec![slots(1, 1, None)])).unwrap();
    assert!(admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).is_err());
    admit(&mut world, &lease(H, 2 * H, vec![hosts(1, 1)])).unwrap();
    assert!(admit(&mut world, &lease(H, 2 * H, vec![slots(1, 1, None)])).is_err());
}

#[test]
fn properties_filter_hosts() {
    let mut world = world_with_hosts(4, 8);
    let mut req = hosts(1, 4);
    req.resource_query = Some(Query::Cmp { op: Op::Eq, key: "gpu".into(), value: "true".into() });
    let l = admit(&mut world, &lease(0, H, vec![req])).unwrap();
    assert_eq!(l.reservations[0].allocations.iter().map(|a| a.host_id).collect::<Vec<_>>(), vec![1, 3]);
    let mut big = hosts(1, 1);
    big.hypervisor_query = Some(Query::Cmp { op: Op::Ge, key: "vcpus".into(), value: "16".into() });
    assert!(admit(&mut world, &lease(0, H, vec![big])).is_err(), "numeric comparison: 8 < 16");
}

#[test]
fn updates_never_conflict_with_themselves_and_overcommit_is_refused() {
    let mut world = world_with_hosts(1, 8);
    let a = admit(&mut world, &lease(10 * H, 12 * H, vec![slots(2, 4, None)])).unwrap();
    admit(&mut world, &lease(12 * H, 14 * H, vec![slots(2, 4, None)])).unwrap();
    let before = world.compute.leases.leases.get(&a.id).cloned().unwrap();
    // Extending into the other lease's window would overcommit.
    let grow = LeaseUpdate { end: Some(13 * H), ..Default::default() };
    assert!(plan_update_lease(&world, a.id, &grow, &no_parse, &mut Uuid::new_v4, 0).is_err());
    assert_eq!(world.compute.leases.leases.get(&a.id), Some(&before), "nothing changed");
    // Shrinking the amount and the window on a full host always succeeds.
    let rid = a.reservations[0].id;
    let shrink = LeaseUpdate {
        end: Some(11 * H),
        reservations: vec![ReservationUpdate { id: rid, amount: Some(1), ..Default::default() }],
        ..Default::default()
    };
    let (set, after) = plan_update_lease(&world, a.id, &shrink, &no_parse, &mut Uuid::new_v4, 0).unwrap();
    world.apply(&set);
    assert_eq!(after.reservations[0].allocations, vec![HostAllocation { host_id: 1, slots: 1 }]);
    assert_eq!(after.event(EventType::EndLease).unwrap().time, 11 * H);
    assert_eq!(after.event(EventType::BeforeEndLease).unwrap().time, 10 * H);
}

#[test]
fn active_leases_keep_their_hosts_and_amount_only_grows() {
    let mut world = world_with_hosts(2, 8);
    let a = admit(&mut world, &lease(0, 10 * H, vec![slots(1, 4, None)])).unwrap();
    let (lease, event, _, _) = due_events(&world, 0)[0];
    let set = plan_event_begin(&world, lease, event, 0).unwrap().unwrap();
    world.apply(&set);
    let set = plan_event_finish(&world, lease, event, false, 0).unwrap().unwrap();
    world.apply(&set);
    assert_eq!(world.compute.leases.leases[&a.id].status, LeaseStatus::Active);
    let rid = a.reservations[0].id;
    let shrink = LeaseUpdate {
        reservations: vec![ReservationUpdate { id: rid, amount: Some(0), ..Default::default() }],
        ..Default::default()
    };
    assert!(plan_update_lease(&world, a.id, &shrink, &no_parse, &mut Uuid::new_v4, H).is_err());
    let moved = LeaseUpdate { start: Some(H), ..Default::default() };
    assert_eq!(
        plan_update_lease(&world, a.id, &moved, &no_parse, &mut Uuid::new_v4, H).unwrap_err(),
        ComputeError::Invalid("Cannot modify the start date of already started leases".into())
    );
    let grow = LeaseUpdate {
        reservations: vec![ReservationUpdate { id: rid, amount: Some(3), ..Default::default() }],
        ..Default::default()
    };
    let (_, grown) = plan_update_lease(&world, a.id, &grow, &no_parse, &mut Uuid::new_v4, H).unwrap();
    assert_eq!(grown.reservations[0].allocations[0], HostAllocation { host_id: 1, slots: 2 }, "kept first");
}

#[test]
fn due_events_run_ends_before_starts_and_starts_wait_for_ends() {
    let mut world = world_with_hosts(1, 8);
    let a = admit(&mut world, &lease(0, 10 * H, vec![hosts(1, 1)])).unwrap();
    let b = admit(&mut world, &lease(10 * H, 20 * H, vec![hosts(1, 1)])).unwrap();
    let due: Vec<(Uuid, EventType)> = due_events(&world, 10 * H).into_iter().map(|(l, _, k, _)| (l, k)).collect();
    let pos = |l: Uuid, k: EventType| due.iter().position(|x| *x == (l, k)).unwrap();
    assert!(pos(a.id, EventType::EndLease) < pos(b.id, EventType::StartLease));
    assert_eq!(start_blocked_by(&world, &world.compute.leases.leases[&b.id]), Some(a.id));
    let end = a.event(EventType::EndLease).unwrap().id;
    world.apply(&plan_event_finish(&world, a.id, end, false, 10 * H).unwrap().unwrap());
    assert_eq!(start_blocked_by(&world, &world.compute.leases.leases[&b.id]), None);
    assert!(plan_event_finish(&world, a.id, end, false, 10 * H).unwrap().is_none(), "exactly once");
}

#[test]
fn instance_slots_that_share_a_host_start_on_time() {
    // I1 holds a slot from 10h to 20h; I2 a slot on the same host from
    // 11h to 12h (they fit together): I2 starts at 11h, while I1 is still
    // active. I3 comes after I1 on that host and still waits for its end.
    let mut world = world_with_hosts(1, 8);
    let i1 = admit(&mut world, &lease(10 * H, 20 * H, vec![slots(1, 1, None)])).unwrap();
    let i2 = admit(&mut world, &lease(11 * H, 12 * H, vec![slots(1, 1, None)])).unwrap();
    let i3 = admit(&mut world, &lease(20 * H, 21 * H, vec![slots(1, 1, None)])).unwrap();
    assert_eq!(i2.reservations[0].allocations, i1.reservations[0].allocations, "one host");
    run_event(&mut world, i1.id, EventType::StartLease);
    let now = |w: &World, id: Uuid| w.compute.leases.leases[&id].clone();
    assert_eq!(event_blocked_by(&world, &now(&world, i2.id), EventType::StartLease), None);
    run_event(&mut world, i2.id, EventType::StartLease);
    run_event(&mut world, i2.id, EventType::BeforeEndLease);
    assert_eq!(event_blocked_by(&world, &now(&world, i2.id), EventType::EndLease), None);
    run_event(&mut world, i2.id, EventType::EndLease);
    assert_eq!(world.compute.leases.leases[&i2.id].status, LeaseStatus::Terminated);
    assert_eq!(world.compute.leases.leases[&i1.id].status, LeaseStatus::Active);
    // Whole-host or not, a lease after another on the host waits for its end.
    assert_eq!(event_blocked_by(&world, &now(&world, i3.id), EventType::StartLease), Some(i1.id));
    run_event(&mut world, i1.id, EventType::BeforeEndLease);
    run_event(&mut world, i1.id, EventType::EndLease);
    assert_eq!(event_blocked_by(&world, &now(&world, i3.id), EventType::StartLease), None);
}

#[test]
fn a_prolonged_lease_arms_its_before_end_again() {
    // Blazar's `_update_before_end_event`, as the real Blazar 18 answers.
    let mut world = world_with_hosts(1, 8);
    let before_end = |w: &World, id: Uuid| w.compute.leases.leases[&id].event(EventType::BeforeEndLease).cloned();
    let update = |w: &mut World, id: Uuid, u: LeaseUpdate, now: Timestamp| {
        let (set, _) = plan_update_lease(w, id, &u, &no_parse, &mut Uuid::new_v4, now).unwrap();
        w.apply(&set);
    };
    // A: 10h–12h, warned at 11h; prolonged to 14h at 11h10: UNDONE at 13h,
    // a new occurrence (new id), due then and not before.
    let a = admit(&mut world, &lease(10 * H, 12 * H, vec![slots(1, 1, None)])).unwrap();
    run_event(&mut world, a.id, EventType::StartLease);
    run_event(&mut world, a.id, EventType::BeforeEndLease);
    let warned = before_end(&world, a.id).unwrap();
    assert_eq!((warned.time, warned.status), (11 * H, EventStatus::Done));
    update(&mut world, a.id, LeaseUpdate { end: Some(14 * H), ..Default::default() }, 11 * H + 600);
    let armed = before_end(&world, a.id).unwrap();
    assert_eq!((armed.time, armed.status), (13 * H, EventStatus::Undone));
    assert_ne!(armed.id, warned.id);
    let due = |w: &World, now: Timestamp| due_events(w, now).into_iter().map(|(_, e, ..)| e).collect::<Vec<_>>();
    assert!(!due(&world, 13 * H - 1).contains(&armed.id));
    assert!(due(&world, 13 * H).contains(&armed.id));
    // The end waits for the new warning.
    let a_now = world.compute.leases.leases[&a.id].clone();
    assert_eq!(event_blocked_by(&world, &a_now, EventType::EndLease), Some(a.id));

    // B: before_end_date 10h30 given at creation; the prolong keeps its
    // distance to the end (1h30), not the default hour.
    let mut request = lease(10 * H, 12 * H, vec![slots(1, 1, None)]);
    request.before_end = Some(10 * H + 1800);
    let b = admit(&mut world, &request).unwrap();
    run_event(&mut world, b.id, EventType::StartLease);
    run_event(&mut world, b.id, EventType::BeforeEndLease);
    update(&mut world, b.id, LeaseUpdate { end: Some(14 * H), ..Default::default() }, 11 * H);
    let armed = before_end(&world, b.id).unwrap();
    assert_eq!((armed.time, armed.status), (12 * H + 1800, EventStatus::Undone));

    // C: a before_end_date given with the prolong, already past: armed
    // for that time, so it runs at once.
    let c = admit(&mut world, &lease(10 * H, 12 * H, vec![slots(1, 1, None)])).unwrap();
    run_event(&mut world, c.id, EventType::StartLease);
    run_event(&mut world, c.id, EventType::BeforeEndLease);
    let prolong = LeaseUpdate { end: Some(14 * H), before_end: Some(11 * H + 300), ..Default::default() };
    update(&mut world, c.id, prolong, 11 * H + 600);
    let armed = before_end(&world, c.id).unwrap();
    assert_eq!((armed.time, armed.status), (11 * H + 300, EventStatus::Undone));
    assert!(due(&world, 11 * H + 600).contains(&armed.id));

    // D: any update but a rename arms it again, at the same time when the
    // end does not move (Blazar warns again).
    let d = admit(&mut world, &lease(10 * H, 16 * H, vec![slots(1, 1, None)])).unwrap();
    run_event(&mut world, d.id, EventType::StartLease);
    run_event(&mut world, d.id, EventType::BeforeEndLease);
    let rid = d.reservations[0].id;
    let grow = LeaseUpdate {
        reservations: vec![ReservationUpdate { id: rid, amount: Some(2), ..Default::default() }],
        ..Default::default()
    };
    update(&mut world, d.id, grow, 15 * H);
    let armed = before_end(&world, d.id).unwrap();
    assert_eq!((armed.time, armed.status), (15 * H, EventStatus::Undone));
    let renamed = LeaseUpdate { name: Some("n".into()), ..Default::default() };
    run_event(&mut world, d.id, EventType::BeforeEndLease);
    update(&mut world, d.id, renamed, 15 * H);
    assert_eq!(before_end(&world, d.id).unwrap().status, EventStatus::Done, "a rename does not");

    // In progress: it only moves (Blazar: the time, not the status).
    update(&mut world, d.id, LeaseUpdate { end: Some(17 * H), ..Default::default() }, 15 * H);
    let running = before_end(&world, d.id).unwrap();
    assert_eq!((running.time, running.status), (16 * H, EventStatus::Undone));
    world.apply(&plan_event_begin(&world, d.id, running.id, 16 * H).unwrap().unwrap());
    update(&mut world, d.id, LeaseUpdate { end: Some(18 * H), ..Default::default() }, 16 * H);
    let moved = before_end(&world, d.id).unwrap();
    assert_eq!((moved.id, moved.time, moved.status), (running.id, 17 * H, EventStatus::InProgress));

    // E: not run yet and shortened past it: moved back, still UNDONE (due).
    let e = admit(&mut world, &lease(10 * H, 14 * H, vec![slots(1, 1, None)])).unwrap();
    run_event(&mut world, e.id, EventType::StartLease);
    update(&mut world, e.id, LeaseUpdate { end: Some(11 * H + 1800), ..Default::default() }, 11 * H);
    let moved = before_end(&world, e.id).unwrap();
    assert_eq!((moved.time, moved.status), (10 * H + 1800, EventStatus::Undone));

    // F (issue 36, the side-by-side case): warned at its start (a short
    // lease), then its end brought in to the start just after: armed
    // again at the start, due at once, and the end waits for it.
    let f = admit(&mut world, &lease(20 * H, 20 * H + 1800, vec![slots(1, 1, None)])).unwrap();
    run_event(&mut world, f.id, EventType::StartLease);
    run_event(&mut world, f.id, EventType::BeforeEndLease);
    assert_eq!(before_end(&world, f.id).unwrap().status, EventStatus::Done);
    update(&mut world, f.id, LeaseUpdate { end: Some(20 * H), ..Default::default() }, 20 * H + 5);
    let armed = before_end(&world, f.id).unwrap();
    assert_eq!((armed.time, armed.status), (20 * H, EventStatus::Undone));
    assert!(due(&world, 20 * H + 5).contains(&armed.id));
    let f_now = world.compute.leases.leases[&f.id].clone();
    assert_eq!(event_blocked_by(&world, &f_now, EventType::EndLease), Some(f.id));
}

#[test]
fn healing_replaces_a_lost_host_or_degrades() {
    let mut world = world_with_hosts(2, 8);
    let a = admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).unwrap();
    let held = a.reservations[0].allocations[0].host_id;
    world.apply(&plan_set_host_reservable(&world, held, false, 0).unwrap());
    let set = plan_heal_host(&world, a.id, held, &no_parse, &mut Uuid::new_v4, 0).unwrap().unwrap();
    world.apply(&set);
    let healed = &world.compute.leases.leases[&a.id];
    assert!(healed.reservations[0].resources_changed);
    let now_held = healed.reservations[0].allocations[0].host_id;
    assert_ne!(now_held, held);
    world.apply(&plan_set_host_reservable(&world, now_held, false, 0).unwrap());
    let set = plan_heal_host(&world, a.id, now_held, &no_parse, &mut Uuid::new_v4, 0).unwrap().unwrap();
    world.apply(&set);
    let degraded = &world.compute.leases.leases[&a.id];
    assert!(degraded.degraded && degraded.reservations[0].missing_resources);
}

#[test]
fn a_lease_whose_end_is_due_is_not_healed() {
    // Its end deletes the servers on the hosts it holds: taking a host
    // away first would leave them running.
    let mut world = world_with_hosts(2, 8);
    let a = admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).unwrap();
    let held = a.reservations[0].allocations[0].host_id;
    world.apply(&plan_set_host_reservable(&world, held, false, H).unwrap());
    assert!(plan_heal_host(&world, a.id, held, &no_parse, &mut Uuid::new_v4, H).unwrap().is_none());
    assert!(plan_heal_host(&world, a.id, held, &no_parse, &mut Uuid::new_v4, H - 1).unwrap().is_some());
}

#[test]
fn the_scheduler_rule() {
    let mut world = world_with_hosts(1, 8);
    assert!(host_allows(&world, "other", None));
    assert!(!host_allows(&world, "h0", None), "free pool");
    let a = admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).unwrap();
    let rid = a.reservations[0].id;
    assert!(!host_allows(&world, "h0", Some(rid)), "not started");
    let start = a.event(EventType::StartLease).unwrap().id;
    world.apply(&plan_event_begin(&world, a.id, start, 0).unwrap().unwrap());
    world.apply(&plan_event_finish(&world, a.id, start, false, 0).unwrap().unwrap());
    assert!(host_allows(&world, "h0", Some(rid)));
    assert!(!host_allows(&world, "other", Some(rid)));
}

/// Give host `h{i}` a compute node (root provider named `h{i}`) with the
/// inventory it was enrolled with, if it was.
fn with_node(world: &mut World, i: usize) -> Uuid {
    let node = bare_node(world, i);
    if let Some(host) = world.compute.leases.host_of_service(&format!("h{i}")).cloned() {
        set_inventory(world, node, host.vcpus, host.memory_mb, host.local_gb);
    }
    node
}

/// Give host `h{i}` a compute node that has reported no inventory yet.
fn bare_node(world: &mut World, i: usize) -> Uuid {
    let node = Uuid::from_u128(0xC0DE_0000 + i as u128);
    let (set, _) =
        berth_model::providers::plan_create_provider(&world.placement, node, &format!("h{i}"), None, 0).unwrap();
    world.apply_placement_set(&set);
    let mut set = WorldChangeSet::new();
    set.compute(C::PutComputeNode(berth_compute_model::ComputeNodeRef {
        uuid: node,
        host: format!("h{i}"),
        node: format!("h{i}"),
        cell: Uuid::from_u128(1),
    }));
    world.apply(&set);
    node
}

fn run_event(world: &mut World, lease: Uuid, kind: EventType) {
    let event = world.compute.leases.leases[&lease].event(kind).unwrap().id;
    let set = plan_event_begin(world, lease, event, 0).unwrap().unwrap();
    world.apply(&set);
    let mut next = ids();
    if let Some(set) = resources::plan_sync_lease_resources(world, lease, &mut next, 0).unwrap() {
        world.apply(&set);
    }
    let set = plan_event_finish(world, lease, event, false, 0).unwrap().unwrap();
    world.apply(&set);
}

#[test]
fn instance_reservation_resources_follow_the_lease() {
    let mut world = world_with_hosts(2, 8);
    let node = with_node(&mut world, 0);
    with_node(&mut world, 1);
    let a = admit(&mut world, &lease(0, H, vec![slots(2, 4, Some(true))])).unwrap();
    let rid = a.reservations[0].id;
    let class = resources::reservation_class(rid);
    let held = a.reservations[0].allocations[0].host_id;
    let held_node = if held == 1 { node } else { Uuid::from_u128(0xC0DE_0001) };
    let held_name = world.placement.provider(&held_node).unwrap().row.name.clone();

    // Created with the lease: the private flavor and the class, no inventory.
    let flavor = &world.compute.flavors[&rid.to_string()];
    assert!(!flavor.is_public && flavor.projects.is_empty());
    assert_eq!(flavor.extra_specs[&format!("resources:{class}")], "1");
    assert!(world.placement.resource_classes.contains_key(&class));
    assert!(!world.placement.provider_names.contains_key(&format!("blazar_{held_name}")));

    // Started: inventory of 2 on a child of the held node; access granted.
    run_event(&mut world, a.id, EventType::StartLease);
    let child = world.placement.provider_names[&format!("blazar_{held_name}")];
    let provider = world.placement.provider(&child).unwrap();
    assert_eq!(provider.row.parent, Some(held_node));
    assert_eq!(provider.inventories[&class].total, 2);
    assert!(world.compute.flavors[&rid.to_string()].projects.contains("p"));
    let mut next = ids();
    assert!(resources::plan_sync_lease_resources(&world, a.id, &mut next, 0).unwrap().is_none(), "idempotent");

    // A server holding a slot: the end cannot take the inventory away.
    let consumer = Uuid::from_u128(0xBEEF);
    let mut allocations = berth_model::AllocationMap::new();
    allocations.insert(child, [(class.clone(), 1)].into_iter().collect());
    world.apply_placement_set(&berth_model::ChangeSet {
        changes: vec![berth_model::Change::PutConsumer {
            row: berth_model::ConsumerRow {
                uuid: consumer,
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 0,
                consumer_type: None,
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
            allocations,
        }],
    });
    let end = world.compute.leases.leases[&a.id].event(EventType::EndLease).unwrap().id;
    let set = plan_event_begin(&world, a.id, end, 0).unwrap().unwrap();
    world.apply(&set);
    let err = resources::plan_sync_lease_resources(&world, a.id, &mut next, 0).unwrap_err();
    assert!(matches!(err, ComputeError::Conflict(_)), "{err:?}");

    // Once it is gone, everything goes in one write.
    world.apply_placement_set(&berth_model::ChangeSet {
        changes: vec![berth_model::Change::DeleteConsumer { uuid: consumer, expected_generation: 0 }],
    });
    let set = resources::plan_sync_lease_resources(&world, a.id, &mut next, 0).unwrap().unwrap();
    world.apply(&set);
    assert!(!world.placement.provider(&child).unwrap().inventories.contains_key(&class));
    assert!(!world.compute.flavors.contains_key(&rid.to_string()));
    assert!(!world.placement.resource_classes.contains_key(&class));
}

/// Set the VCPU, MEMORY_MB and DISK_GB inventory of a provider.
fn set_inventory(world: &mut World, provider: Uuid, vcpus: i64, memory_mb: i64, disk_gb: i64) {
    use berth_model::inventories::inventory_with_defaults;
    let inventories = [("VCPU", vcpus), ("MEMORY_MB", memory_mb), ("DISK_GB", disk_gb)]
        .into_iter()
        .map(|(class, total)| (class.to_string(), inventory_with_defaults(total, None, None, None, None, None)))
        .collect();
    world.apply_placement_set(&berth_model::ChangeSet {
        changes: vec![berth_model::Change::SetInventories { provider, inventories }],
    });
}

#[test]
fn capacity_follows_the_inventory_of_a_host_enrolled_before_its_first_report() {
    // The node's provider exists but has not reported inventory yet: the
    // host is enrolled with 0 of everything.
    let mut world = World::default();
    let node = bare_node(&mut world, 0);
    let enrol = HostEnrolment {
        service_name: "h0".into(),
        hypervisor_hostname: "h0".into(),
        vcpus: 0,
        memory_mb: 0,
        local_gb: 0,
        availability_zone: String::new(),
        extra: BTreeMap::new(),
        trust_id: "t".into(),
    };
    let (set, host) = plan_enrol_host(&world, enrol, 0).unwrap();
    world.apply(&set);
    assert_eq!(capacity::host_capacity(&world, &host), capacity::Capacity::default());
    let err = admit(&mut world, &lease(0, H, vec![slots(1, 1, None)])).unwrap_err();
    assert_eq!(err, ComputeError::Conflict(NOT_ENOUGH_HOSTS.into()));

    // The first report: 8 vCPUs, 16 GiB, 100 GiB. Admission reads it.
    set_inventory(&mut world, node, 8, 16384, 100);
    let host = world.compute.leases.hosts[&host.id].clone();
    assert_eq!(
        capacity::host_capacity(&world, &host),
        capacity::Capacity { vcpus: 8, memory_mb: 16384, local_gb: 100 }
    );
    let a = admit(&mut world, &lease(0, H, vec![slots(2, 4, None)])).expect("8 vCPUs now");
    assert_eq!(a.reservations[0].allocations, vec![HostAllocation { host_id: host.id, slots: 2 }]);
    assert!(admit(&mut world, &lease(0, H, vec![slots(1, 1, None)])).is_err(), "and no more");
    let mut wants_8 = slots(1, 1, None);
    wants_8.hypervisor_query = Some(Query::Cmp { op: Op::Ge, key: "vcpus".into(), value: "8".into() });
    admit(&mut world, &lease(H, 2 * H, vec![wants_8.clone()])).expect("$vcpus follows too");
    let steps = capacity::host_timeline(&world, host.id, 0, H);
    assert_eq!(steps[0].usage.free(capacity::host_capacity(&world, &host)), (0, 16384 - 2048, 80));

    // A smaller report shrinks what later admissions see.
    set_inventory(&mut world, node, 4, 16384, 100);
    assert!(admit(&mut world, &lease(2 * H, 3 * H, vec![wants_8])).is_err());
    admit(&mut world, &lease(2 * H, 3 * H, vec![slots(2, 2, None)])).expect("4 vCPUs");
    assert!(admit(&mut world, &lease(2 * H, 3 * H, vec![slots(1, 1, None)])).is_err());
}

#[test]
fn a_lease_s_own_events_run_in_order() {
    let mut world = world_with_hosts(1, 8);
    let a = admit(&mut world, &lease(0, H, vec![hosts(1, 1)])).unwrap();
    let b = admit(&mut world, &lease(H, 2 * H, vec![hosts(1, 1)])).unwrap();
    // Everything is overdue at 3h: B's start waits for A's end, and B's
    // end waits for B's start.
    let b_now = world.compute.leases.leases[&b.id].clone();
    assert_eq!(event_blocked_by(&world, &b_now, EventType::StartLease), Some(a.id));
    assert_eq!(event_blocked_by(&world, &b_now, EventType::EndLease), Some(b.id));
    assert_eq!(event_blocked_by(&world, &b_now, EventType::BeforeEndLease), Some(b.id));
    let a_now = world.compute.leases.leases[&a.id].clone();
    assert_eq!(event_blocked_by(&world, &a_now, EventType::StartLease), None);
    run_event(&mut world, a.id, EventType::StartLease);
    run_event(&mut world, a.id, EventType::BeforeEndLease);
    run_event(&mut world, a.id, EventType::EndLease);
    let b_now = world.compute.leases.leases[&b.id].clone();
    assert_eq!(event_blocked_by(&world, &b_now, EventType::StartLease), None, "A has ended");
    run_event(&mut world, b.id, EventType::StartLease);
    let b_now = world.compute.leases.leases[&b.id].clone();
    assert_eq!(event_blocked_by(&world, &b_now, EventType::EndLease), Some(b.id), "before_end first");
    run_event(&mut world, b.id, EventType::BeforeEndLease);
    let b_now = world.compute.leases.leases[&b.id].clone();
    assert_eq!(event_blocked_by(&world, &b_now, EventType::EndLease), None);
}

#[test]
fn capacity_over_time_is_the_booked_steps() {
    let mut world = world_with_hosts(1, 8);
    admit(&mut world, &lease(H, 3 * H, vec![slots(1, 4, None)])).unwrap();
    admit(&mut world, &lease(2 * H, 4 * H, vec![slots(1, 2, None)])).unwrap();
    admit(&mut world, &lease(5 * H, 6 * H, vec![hosts(1, 1)])).unwrap();
    let steps = capacity::host_timeline(&world, 1, 0, 8 * H);
    let shape: Vec<(i64, i64, i64, bool)> =
        steps.iter().map(|s| (s.start / H, s.end / H, s.usage.vcpus, s.usage.whole_host)).collect();
    assert_eq!(
        shape,
        [
            (0, 1, 0, false),
            (1, 2, 4, false),
            (2, 3, 6, false),
            (3, 4, 2, false),
            (4, 5, 0, false),
            (5, 6, 0, true),
            (6, 8, 0, false)
        ]
    );
    let host = capacity::host_capacity(&world, &world.compute.leases.hosts[&1]);
    assert_eq!(steps[2].usage.free(host).0, 2);
    assert_eq!(steps[5].usage.free(host), (0, 0, 0));
    assert_eq!(capacity::host_timeline(&world, 1, 6 * H, 7 * H).len(), 1, "an unbooked window is one step");
}

/// The fast paths (sorted per-host bookings, the peak sweep, the
/// earliest-window sweep) against brute force on random bookings: every
/// instant of a small time range is looked at.
mod against_brute_force {
    use proptest::prelude::*;

    use super::*;
    use berth_compute_model::lease::HostBookings;

    /// `(start, length, whole host, vcpus, slots)`.
    type Spec = (i64, i64, bool, i64, i64);

    fn spec() -> impl Strategy<Value = Spec> {
        (0i64..120, 1i64..40, prop::bool::weighted(0.3), 1i64..4, 1i64..3)
    }

    fn booking(n: usize, (start, len, whole, vcpus, slots): Spec) -> Booking {
        Booking {
            lease: Uuid::from_u128(n as u128 + 1),
            reservation: Uuid::from_u128(n as u128 + 1000),
            start,
            end: start + len,
            demand: if whole {
                Demand::WholeHost
            } else {
                Demand::Slot { vcpus, memory_mb: 1024 * vcpus, disk_gb: 10 }
            },
            slots,
        }
    }

    /// Hosts of 8 vCPUs, 16 GiB, 100 GB with the bookings spread over them.
    fn world_with(n_hosts: usize, specs: &[(usize, Spec)]) -> World {
        let mut world = world_with_hosts(n_hosts, 8);
        let ids: Vec<i64> = world.compute.leases.hosts.keys().copied().collect();
        for (n, (host, spec)) in specs.iter().enumerate() {
            let id = ids[host % ids.len()];
            world.compute.leases.bookings.entry(id).or_default().insert(booking(n, *spec));
        }
        world
    }

    fn probe(world: &World, start: i64, end: i64) -> Admission<'_> {
        Admission { world, lease: Uuid::nil(), start, end, overlay: Overlay::default(), exclude: &[], added: &[] }
    }

    /// Free slots by looking at every instant of the window.
    fn brute_free_slots(world: &World, host: &ReservableHost, start: i64, end: i64, need: (i64, i64, i64)) -> i64 {
        let list: Vec<&Booking> = world.compute.leases.bookings.get(&host.id).into_iter().flatten().collect();
        let mut peak = (0, 0, 0);
        for t in start..end {
            let mut used = (0, 0, 0);
            for b in list.iter().filter(|b| b.start <= t && t < b.end) {
                match b.demand {
                    Demand::WholeHost => return 0,
                    Demand::Slot { vcpus, memory_mb, disk_gb } => {
                        used = (used.0 + vcpus * b.slots, used.1 + memory_mb * b.slots, used.2 + disk_gb * b.slots)
                    }
                }
            }
            peak = (peak.0.max(used.0), peak.1.max(used.1), peak.2.max(used.2));
        }
        let fit = |cap: i64, used: i64, per: i64| ((cap - used) / per).max(0);
        fit(host.vcpus, peak.0, need.0).min(fit(host.memory_mb, peak.1, need.1)).min(fit(host.local_gb, peak.2, need.2))
    }

    fn request() -> impl Strategy<Value = ReservationRequest> {
        prop_oneof![
            (1i64..4, 0i64..2).prop_map(|(min, more)| hosts(min, min + more)),
            (1i64..6, 1i64..4, prop_oneof![Just(None), Just(Some(true)), Just(Some(false))])
                .prop_map(|(amount, vcpus, affinity)| slots(amount, vcpus, affinity)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn overlapping_is_a_filter(specs in prop::collection::vec(spec(), 0..30), start in 0i64..170, len in 1i64..60) {
            let mut list = HostBookings::default();
            let all: Vec<Booking> = specs.iter().enumerate().map(|(n, s)| booking(n, *s)).collect();
            for b in &all {
                list.insert(*b);
            }
            // Removing a lease keeps the rest (and the running maximum end) right.
            if let Some(gone) = all.first() {
                list.remove_lease(gone.lease);
            }
            let mut fast: Vec<Booking> = list.overlapping(start, start + len).copied().collect();
            let mut slow: Vec<Booking> =
                all.iter().skip(1).filter(|b| b.overlaps(start, start + len)).copied().collect();
            let key = |b: &Booking| (b.start, b.end, b.lease);
            fast.sort_by_key(key);
            slow.sort_by_key(key);
            prop_assert_eq!(fast, slow);
        }

        #[test]
        fn free_slots_is_capacity_minus_the_peak(
            specs in prop::collection::vec((Just(0usize), spec()), 0..20),
            start in 0i64..150,
            len in 1i64..60,
            vcpus in 1i64..4,
        ) {
            let world = world_with(1, &specs);
            let host = world.compute.leases.hosts.values().next().unwrap();
            let need = (vcpus, 1024, 10);
            prop_assert_eq!(
                probe(&world, start, start + len).free_slots(host, need),
                brute_free_slots(&world, host, start, start + len, need)
            );
        }

        #[test]
        fn earliest_window_is_the_first_admissible_instant(
            n_hosts in 1usize..5,
            specs in prop::collection::vec((0usize..5, spec()), 0..25),
            request in request(),
            duration in 1i64..50,
            from in 0i64..100,
            reach in 0i64..120,
        ) {
            let world = world_with(n_hosts, &specs);
            let horizon = from + reach;
            let brute = (from..=horizon).find_map(|start| {
                let mut admission = probe(&world, start, start + duration);
                admission.allocate(Uuid::nil(), &request, &[], false).ok().map(|a| (start, a))
            });
            prop_assert_eq!(earliest_window(&world, &request, duration, from, horizon), brute);
        }
    }
}

#[test]
fn the_pending_event_index_follows_every_change() {
    // What `due_events` did before the index: scan every lease.
    fn scan(world: &World, now: Timestamp) -> Vec<(Uuid, Uuid, EventType, Timestamp)> {
        let mut out: Vec<_> = world
            .compute
            .leases
            .leases
            .values()
            .filter(|l| !matches!(l.status, LeaseStatus::Terminated | LeaseStatus::Error))
            .flat_map(|l| {
                l.events
                    .iter()
                    .filter(move |e| matches!(e.status, EventStatus::Undone | EventStatus::InProgress) && e.time <= now)
                    .map(move |e| (l.id, e.id, e.event_type, e.time))
            })
            .collect();
        out.sort_by_key(|(lease, _, kind, time)| (*time, *kind, *lease));
        out
    }
    let mut world = world_with_hosts(3, 8);
    let a = admit(&mut world, &lease(0, 2 * H, vec![hosts(1, 1)])).unwrap();
    let b = admit(&mut world, &lease(2 * H, 4 * H, vec![hosts(1, 1)])).unwrap();
    let c = admit(&mut world, &lease(H, 3 * H, vec![slots(2, 2, None)])).unwrap();
    let check = |world: &World| {
        for now in [0, H, 2 * H, 3 * H, 4 * H, 10 * H] {
            assert_eq!(due_events(world, now), scan(world, now), "at {now}");
        }
    };
    check(&world);
    let start = a.event(EventType::StartLease).unwrap().id;
    world.apply(&plan_event_begin(&world, a.id, start, 0).unwrap().unwrap());
    check(&world);
    world.apply(&plan_event_finish(&world, a.id, start, false, 0).unwrap().unwrap());
    check(&world);
    let update = LeaseUpdate { end: Some(5 * H), ..LeaseUpdate::default() };
    let (set, _) = plan_update_lease(&world, b.id, &update, &no_parse, &mut Uuid::new_v4, 0).unwrap();
    world.apply(&set);
    check(&world);
    let end = a.event(EventType::EndLease).unwrap().id;
    world.apply(&plan_event_begin(&world, a.id, end, 2 * H).unwrap().unwrap());
    world.apply(&plan_event_finish(&world, a.id, end, false, 2 * H).unwrap().unwrap());
    check(&world);
    world.apply(&plan_delete_lease(&world, c.id).unwrap());
    check(&world);
    assert!(due_events(&world, 10 * H).iter().all(|(lease, ..)| *lease == b.id));
}

// ---------------------------------------------------------------- end policies

use berth_compute_model::lease::EndPolicy;
use end_policy::{EndChoice, PoolState};

fn recycle(grace: Option<i64>) -> EndChoice {
    EndChoice { on_end: EndPolicy::Recycle, grace }
}

fn admit_ending(world: &mut World, request: &LeaseRequest, choice: EndChoice) -> Result<Lease> {
    let mut next = ids();
    let (set, lease) = plan_create_lease_ending(world, request, choice, &mut next, 0)?;
    world.apply(&set);
    Ok(lease)
}

/// An INSTANCE consumer (a server) on a node.
fn put_server(world: &mut World, node: Uuid, server: Uuid) {
    let mut allocations = berth_model::AllocationMap::new();
    allocations.insert(node, [("VCPU".to_string(), 1)].into_iter().collect());
    world.apply_placement_set(&berth_model::ChangeSet {
        changes: vec![berth_model::Change::PutConsumer {
            row: berth_model::ConsumerRow {
                uuid: server,
                project_id: "p".into(),
                user_id: "u".into(),
                generation: 0,
                consumer_type: Some(berth_compute_model::CONSUMER_TYPE_INSTANCE.into()),
                created_at: 0,
                updated_at: 0,
            },
            expected_generation: None,
            allocations,
        }],
    });
}

fn delete_server(world: &mut World, server: Uuid) {
    world.apply_placement_set(&berth_model::ChangeSet {
        changes: vec![berth_model::Change::DeleteConsumer { uuid: server, expected_generation: 0 }],
    });
}

/// Run a lease's end under its policy at `now` (begin, then
/// `plan_end_policy` with `candidates`).
fn end_with_policy(world: &mut World, lease: Uuid, candidates: &[HostEnrolment], now: i64) -> end_policy::EndOutcome {
    let event = world.compute.leases.leases[&lease].event(EventType::EndLease).unwrap().id;
    world.apply(&plan_event_begin(world, lease, event, now).unwrap().unwrap());
    let mut next = ids();
    let (set, outcome) =
        end_policy::plan_end_policy(world, lease, event, candidates, &no_parse, &mut next, now).unwrap().unwrap();
    world.apply(&set);
    assert!(
        end_policy::plan_end_policy(world, lease, event, candidates, &no_parse, &mut next, now).unwrap().is_none(),
        "finishing twice writes nothing"
    );
    outcome
}

fn held_host(lease: &Lease) -> i64 {
    lease.reservations[0].allocations[0].host_id
}

fn node_of_host(world: &World, host_id: i64) -> Uuid {
    let name = &world.compute.leases.hosts[&host_id].service_name;
    world.compute.nodes_by_host[name][0]
}

#[test]
fn end_choices_are_checked_and_stored() {
    let mut world = world_with_hosts(2, 8);
    let bad = [
        EndChoice { on_end: EndPolicy::Delete, grace: Some(60) },
        EndChoice { on_end: EndPolicy::Release, grace: Some(60) },
        recycle(Some(-1)),
    ];
    for choice in bad {
        let err = admit_ending(&mut world, &lease(0, H, vec![hosts(1, 1)]), choice).unwrap_err();
        assert!(matches!(err, ComputeError::Invalid(_)), "{choice:?}: {err:?}");
    }
    let err = admit_ending(&mut world, &lease(0, H, vec![slots(1, 1, None)]), recycle(None)).unwrap_err();
    assert_eq!(err, ComputeError::Invalid(end_policy::HOSTS_ONLY.into()));
    assert!(world.compute.leases.leases.is_empty(), "nothing written");
    let a = admit_ending(&mut world, &lease(0, H, vec![hosts(1, 1)]), recycle(Some(600))).unwrap();
    assert_eq!((a.on_end, a.grace), (EndPolicy::Recycle, Some(600)));
    // An update sets both; a grace with another policy is refused.
    let parse = |_: &str| Ok(None);
    let to_release =
        LeaseUpdate { end_choice: Some(EndChoice { on_end: EndPolicy::Release, grace: None }), ..Default::default() };
    let (set, updated) = plan_update_lease(&world, a.id, &to_release, &parse, &mut ids(), 0).unwrap();
    world.apply(&set);
    assert_eq!((updated.on_end, updated.grace), (EndPolicy::Release, None));
    let bad =
        LeaseUpdate { end_choice: Some(EndChoice { on_end: EndPolicy::Delete, grace: Some(1) }), ..Default::default() };
    assert!(matches!(plan_update_lease(&world, a.id, &bad, &parse, &mut ids(), 0), Err(ComputeError::Invalid(_))));
}

#[test]
fn recycle_keeps_a_busy_host_out_of_the_pool_until_its_grace_or_its_last_server() {
    let mut world = world_with_hosts(2, 8);
    with_node(&mut world, 0);
    with_node(&mut world, 1);
    let a = admit_ending(&mut world, &lease(0, H, vec![hosts(2, 2)]), recycle(Some(600))).unwrap();
    run_event(&mut world, a.id, EventType::StartLease);
    let (busy, idle) = (1, 2);
    let server = Uuid::from_u128(0x5E);
    {
        let node = node_of_host(&world, busy);
        put_server(&mut world, node, server);
    }
    run_event(&mut world, a.id, EventType::BeforeEndLease);
    let outcome = end_with_policy(&mut world, a.id, &[], H);
    assert_eq!(outcome.recycling, vec![busy]);
    let ended = &world.compute.leases.leases[&a.id];
    assert_eq!(ended.status, LeaseStatus::Terminated);
    assert_eq!(
        (ended.reservations[0].recycling.clone(), ended.reservations[0].recycle_until),
        (vec![busy], Some(H + 600))
    );
    assert_eq!(end_policy::pool_state(&world, busy, H, None), PoolState::Recycling);
    assert_eq!(end_policy::pool_state(&world, idle, H, None), PoolState::Free);
    assert_eq!(end_policy::recycling_host_count(&world), 1);
    // During the grace, only the idle host can be leased.
    assert!(admit(&mut world, &lease(H, H + 300, vec![hosts(2, 2)])).is_err());
    let b = admit(&mut world, &lease(H, H + 300, vec![hosts(1, 1)])).unwrap();
    assert_eq!(held_host(&b), idle);
    // The grace ends in a delete of the servers still there.
    assert!(end_policy::grace_over_servers(&world, a.id, H + 599).is_empty());
    assert_eq!(end_policy::grace_over_servers(&world, a.id, H + 600), vec![server]);
    // A lease starting after the grace on that host waits for them to go.
    let c = admit(&mut world, &lease(H + 600, 2 * H, vec![hosts(2, 2)])).unwrap();
    assert_eq!(start_blocked_by(&world, &world.compute.leases.leases[&c.id]), Some(a.id));
    assert!(end_policy::plan_drop_recycled(&world, a.id, H + 600).is_none(), "still busy");
    delete_server(&mut world, server);
    world.apply(&end_policy::plan_drop_recycled(&world, a.id, H + 600).unwrap());
    assert!(world.compute.leases.leases[&a.id].reservations[0].recycling.is_empty());
    assert_eq!(
        end_policy::pool_state(&world, busy, H + 600, None),
        PoolState::Reserved,
        "rejoined the pool, held by the next lease"
    );
    assert_eq!(end_policy::recycling_host_count(&world), 0);
    // Only `b` (on the other host, its end not run) holds `c` back now.
    assert_eq!(start_blocked_by(&world, &world.compute.leases.leases[&c.id]), Some(b.id));
}

#[test]
fn recycle_without_grace_moves_a_later_lease_off_the_busy_host_or_degrades_it() {
    for n_hosts in [2, 1] {
        let mut world = world_with_hosts(n_hosts, 8);
        (0..n_hosts).for_each(|i| {
            with_node(&mut world, i);
        });
        let a = admit_ending(&mut world, &lease(0, H, vec![hosts(1, 1)]), recycle(None)).unwrap();
        let later = admit(&mut world, &lease(5 * H, 6 * H, vec![hosts(1, 1)])).unwrap();
        assert_eq!(held_host(&later), held_host(&a), "booked on the same host");
        run_event(&mut world, a.id, EventType::StartLease);
        run_event(&mut world, a.id, EventType::BeforeEndLease);
        {
            let node = node_of_host(&world, held_host(&a));
            put_server(&mut world, node, Uuid::from_u128(0x5E));
        }
        let outcome = end_with_policy(&mut world, a.id, &[], H);
        assert_eq!(outcome.healed, vec![later.id]);
        // No grace: never due; deleting the lease deletes them first.
        assert!(end_policy::grace_over_servers(&world, a.id, i64::MAX).is_empty());
        assert_eq!(end_policy::recycling_servers(&world, a.id), vec![Uuid::from_u128(0x5E)]);
        let moved = &world.compute.leases.leases[&later.id];
        if n_hosts == 2 {
            assert_ne!(held_host(moved), held_host(&a));
            assert!(moved.reservations[0].resources_changed && !moved.degraded);
        } else {
            assert!(moved.degraded && moved.reservations[0].missing_resources);
            assert!(moved.reservations[0].allocations.is_empty());
        }
        // Without grace the host stays booked for ever (until empty).
        assert!(admit(&mut world, &lease(100 * H, 101 * H, vec![hosts(n_hosts as i64, n_hosts as i64)])).is_err());
    }
}

#[test]
fn recycle_of_empty_hosts_and_delete_change_nothing() {
    let mut world = world_with_hosts(1, 8);
    with_node(&mut world, 0);
    let a = admit_ending(&mut world, &lease(0, H, vec![hosts(1, 1)]), recycle(None)).unwrap();
    run_event(&mut world, a.id, EventType::StartLease);
    run_event(&mut world, a.id, EventType::BeforeEndLease);
    let outcome = end_with_policy(&mut world, a.id, &[], H);
    assert!(outcome.recycling.is_empty(), "no server: the host rejoins at once");
    assert!(admit(&mut world, &lease(H, 2 * H, vec![hosts(1, 1)])).is_ok());
}

#[test]
fn release_hands_busy_hosts_to_general_scheduling_and_refills_the_pool() {
    let mut world = world_with_hosts(2, 8);
    for i in 0..4 {
        with_node(&mut world, i);
    }
    // h3 carries a server: not a candidate.
    {
        let node = node_of_host_name(&world, "h3");
        put_server(&mut world, node, Uuid::from_u128(0x33));
    }
    let release = EndChoice { on_end: EndPolicy::Release, grace: None };
    let a = admit_ending(&mut world, &lease(0, H, vec![hosts(1, 1)]), release).unwrap();
    let later = admit(&mut world, &lease(5 * H, 6 * H, vec![hosts(2, 2)])).unwrap();
    run_event(&mut world, a.id, EventType::StartLease);
    run_event(&mut world, a.id, EventType::BeforeEndLease);
    let busy = held_host(&a);
    let busy_name = world.compute.leases.hosts[&busy].service_name.clone();
    {
        let node = node_of_host(&world, busy);
        put_server(&mut world, node, Uuid::from_u128(0x5E));
    }
    let candidates = end_policy::refill_candidates(&world, &|_| true, &mut || "t".into());
    assert_eq!(candidates.iter().map(|c| c.service_name.as_str()).collect::<Vec<_>>(), vec!["h2"]);
    let outcome = end_with_policy(&mut world, a.id, &candidates, H);
    assert_eq!(outcome.released, vec![busy]);
    assert_eq!(outcome.refilled.len(), 1);
    let tables = &world.compute.leases;
    assert!(tables.host_of_service(&busy_name).is_none(), "un-enrolled: general scheduling takes it");
    assert!(host_allows(&world, &busy_name, None));
    let refill = tables.host_of_service("h2").unwrap();
    assert_eq!(tables.hosts.len(), 2, "the pool keeps its size");
    assert_eq!(refill.extra, world_with_hosts(2, 8).compute.leases.hosts[&busy].extra, "shaped like the released host");
    // The later lease moved to the replacement.
    let moved = &tables.leases[&later.id];
    assert_eq!(outcome.healed, vec![later.id]);
    assert!(moved.reservations[0].allocations.iter().any(|a| a.host_id == refill.id));
    assert!(!moved.degraded);
}

fn node_of_host_name(world: &World, name: &str) -> Uuid {
    world.compute.nodes_by_host[name][0]
}

#[test]
fn a_pool_host_is_lent_until_a_lease_comes_within_the_lead() {
    let mut world = world_with_hosts(2, 8);
    let lead = Some(H);
    let tables = |w: &World| w.compute.leases.clone();
    // No lease: both pool hosts are lent with lending on, neither without.
    assert!(tables(&world).host_allows("h0", None, 0, lead));
    assert!(!tables(&world).host_allows("h0", None, 0, None), "no lending: the pool is Blazar's");
    // A lease of h0 from 10 h: lent until 9 h, reclaimed from 9 h on.
    let l = admit(&mut world, &lease(10 * H, 11 * H, vec![hosts(1, 1)])).unwrap();
    let held = l.reservations[0].allocations[0].host_id;
    let name = world.compute.leases.hosts[&held].service_name.clone();
    let other = if name == "h0" { "h1" } else { "h0" };
    let t = tables(&world);
    assert!(t.host_allows(&name, None, 9 * H - 1, lead), "lent until the lead");
    assert!(!t.host_allows(&name, None, 9 * H, lead), "reclaimed within the lead");
    assert!(!t.host_allows(&name, None, 10 * H + 1, lead), "held while the lease lasts");
    assert!(t.host_allows(&name, None, 11 * H, lead), "lent again after the end");
    assert!(t.host_allows(other, None, 10 * H, lead), "the other host stays lent");
    assert_eq!(lending::lent_hosts(&world, 9 * H, lead), 1);
    assert_eq!(lending::lent_hosts(&world, 0, lead), 2);
    assert_eq!(lending::lent_hosts(&world, 0, None), 0);
    // No servers on the hosts: nothing to drain, nothing busy at the start.
    assert!(lending::drain_targets(&world, 9 * H, H).is_empty());
    let started = lending::plan_start_on_free_hosts(&world, l.id, &no_parse, &mut ids(), 10 * H).unwrap();
    assert!(started.is_none(), "empty hosts start as admitted");
}

/// A reserved boot of `n` servers as the admission write leaves it: the
/// lease, and the held build requests whose request specs name its slot
/// reservation.
fn reserved_boot(world: &mut World, flavor: &berth_compute_model::Flavor, n: usize) -> (Uuid, Vec<Uuid>) {
    use berth_compute_model::{BuildRequest, InstanceSpec, RequestSpec};
    let request = lease(10 * H, 20 * H, vec![reserved::slot_request(flavor, n as i64)]);
    let (mut set, hints) = reserved::plan_admit_reserved(world, &request, &mut ids(), 0).unwrap();
    let instances: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    for (idx, instance) in instances.iter().enumerate() {
        let spec = InstanceSpec {
            flavor: flavor.clone(),
            reservation_id: "r-1".into(),
            launch_index: idx as i64,
            ..Default::default()
        };
        set.compute(C::PutBuildRequest(BuildRequest {
            instance_uuid: *instance,
            project_id: "p".into(),
            user_id: "u".into(),
            spec,
            created_at: 0,
            held: true,
        }));
        set.compute(C::PutRequestSpec(RequestSpec {
            key_data: None,
            move_token: None,
            instance_uuid: *instance,
            project_id: "p".into(),
            user_id: "u".into(),
            flavor: flavor.clone(),
            image: None,
            num_instances: n as i64,
            availability_zone: None,
            force_host: None,
            force_node: None,
            group: None,
            same_host: Vec::new(),
            different_host: Vec::new(),
            hints: hints.clone(),
            reservation_id: "r-1".into(),
            retry: Default::default(),
        }));
    }
    world.apply(&set);
    let lease_id = world.compute.leases.leases.values().find(|l| l.start == 10 * H).unwrap().id;
    (lease_id, instances)
}

#[test]
fn reserved_servers_hold_slots_until_released_and_give_them_back_when_deleted() {
    let mut world = world_with_hosts(1, 4);
    let flavor = berth_compute_model::Flavor {
        flavorid: "f".into(),
        vcpus: 2,
        memory_mb: 1024,
        root_gb: 10,
        ..Default::default()
    };
    let (lease_id, servers) = reserved_boot(&mut world, &flavor, 2);
    let booked = &world.compute.leases.leases[&lease_id];
    let rid = booked.reservations[0].id;
    assert!(matches!(booked.reservations[0].kind, ReservationKind::Instance { vcpus: 2, amount: 2, disk_gb: 10, .. }));
    assert_eq!(reserved::held_of_lease(&world, lease_id), {
        let mut s = servers.clone();
        s.sort();
        s
    });
    // The host's 4 vCPUs are both slots: a third reserved boot is refused.
    let more = lease(12 * H, 14 * H, vec![reserved::slot_request(&flavor, 1)]);
    assert_eq!(
        reserved::plan_admit_reserved(&world, &more, &mut ids(), 0).unwrap_err(),
        ComputeError::Conflict(NOT_ENOUGH_HOSTS.into())
    );

    // Deleting one held server gives its slot back; the lease keeps one.
    let set = reserved::plan_drop_held(&world, &servers[0], &mut ids(), 0).unwrap();
    world.apply(&set);
    world.apply(&berth_compute_model::plan::plan_delete_build_request(&world, &servers[0]).0);
    let ReservationKind::Instance { amount, .. } = world.compute.leases.leases[&lease_id].reservations[0].kind else {
        unreachable!()
    };
    assert_eq!(amount, 1);
    assert!(reserved::plan_admit_reserved(&world, &more, &mut ids(), 0).is_ok(), "the slot is free again");

    // The start releases the other with the reservation's flavor, once.
    assert!(reserved::reserved_to_build(&world, lease_id).is_empty(), "nothing to build while held");
    let release = reserved::plan_release_reserved(&world, lease_id);
    world.apply(&release);
    let build = &world.compute.build_requests[&servers[1]];
    assert!(!build.held);
    assert_eq!(build.spec.flavor.flavorid, "f", "the server keeps its own flavor");
    assert_eq!(world.compute.request_specs[&servers[1]].flavor.flavorid, rid.to_string(), "claimed on the slot");
    assert!(reserved::plan_release_reserved(&world, lease_id).is_empty(), "a redone start releases nothing");
    assert_eq!(reserved::reserved_to_build(&world, lease_id), vec![vec![servers[1]]]);

    // A pending lease with one held server is deleted with it.
    let (lease_left, flavor_left) = {
        let mut world2 = world_with_hosts(1, 4);
        let (l, s) = reserved_boot(&mut world2, &flavor, 1);
        let set = reserved::plan_drop_held(&world2, &s[0], &mut ids(), 0).unwrap();
        world2.apply(&set);
        (world2.compute.leases.leases.contains_key(&l), !world2.compute.flavors.is_empty())
    };
    assert!(!lease_left, "the lease went with its last held server");
    assert!(!flavor_left, "and so did its flavor");
}

/// Issue 36: a window with start == end (Blazar accepts one through an
/// update) holds its instant: it cannot be moved onto a host booked then,
/// not even at the start of that booking, and it keeps a later lease whose
/// window contains or starts at it off the host; windows touching it at
/// their end still fit (half-open, as everywhere).
#[test]
fn a_zero_length_window_holds_its_instant() {
    let mut world = world_with_hosts(1, 8);
    admit(&mut world, &lease(5 * H, 6 * H, vec![hosts(1, 1)])).unwrap();
    let zero = admit(&mut world, &lease(4 * H, 4 * H + 600, vec![hosts(1, 1)])).unwrap();
    let update = |w: &mut World, start: Timestamp, end: Timestamp| {
        let u = LeaseUpdate { start: Some(start), end: Some(end), ..Default::default() };
        let (set, _) = plan_update_lease(w, zero.id, &u, &no_parse, &mut Uuid::new_v4, 0)?;
        w.apply(&set);
        Ok::<_, ComputeError>(())
    };
    update(&mut world, 4 * H, 4 * H).expect("shrunk to its start");
    let busy = ComputeError::Conflict(NOT_ENOUGH_HOSTS.into());
    assert_eq!(update(&mut world, 5 * H, 5 * H), Err(busy.clone()), "the other lease's first instant");
    assert_eq!(update(&mut world, 5 * H + 1800, 5 * H + 1800), Err(busy.clone()), "inside the other lease");
    assert_eq!(world.compute.leases.leases[&zero.id].start, 4 * H, "a refused move changes nothing");
    update(&mut world, 6 * H, 6 * H).expect("the other lease's end is free");
    assert_eq!(admit(&mut world, &lease(5 * H + 1800, 7 * H, vec![hosts(1, 1)])), Err(busy.clone()), "contains it");
    assert_eq!(admit(&mut world, &lease(6 * H, 7 * H, vec![hosts(1, 1)])), Err(busy), "starts at it");
    admit(&mut world, &lease(6 * H + 1, 7 * H, vec![hosts(1, 1)])).expect("after its instant");
}
