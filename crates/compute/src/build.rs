//! A boot's steps that the push conductor ([`crate::conductor`]) and pull
//! mode ([`crate::pull`]) share: the job ([`BootJob`]) and its build
//! requests read from the control state (`load`), one scheduler round
//! (`schedule_round`), the instances' rows written into their chosen
//! cells (`row_ops`, `write_cells`), claimed builds handed to their hosts
//! (`finish_claims`), boots no host takes buried in cell0 (`bury`), and a
//! failed build given up (`failed_build_ops`), with the instance action
//! events they record. It uses neither of the two: each drives a boot
//! through these steps in its own order.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::cell::{task_state, vm_state, ActionEvent, Fault, Instance, InstanceAction};
use berth_compute_model::plan::{plan_bury, plan_forget_instance, Claimed, InstanceChoices};
use berth_compute_model::{BuildRequest, RequestSpec, CELL0_UUID};
use berth_scheduler::{schedule, ScheduleRequest};
use berth_store::{CellOp, CellOutcome, Expect, InstanceUpdate};
use uuid::Uuid;

use crate::control::{read, write};
use crate::hub::Task;
use crate::inflight::Ticket;
use crate::Compute;

/// The conductor's event of an instance's create action.
pub const EVENT_SCHEDULE: &str = "conductor_schedule_and_build_instances";
/// The agent's event of an instance's create action.
pub const EVENT_BUILD: &str = "compute__do_build_and_run_instance";

/// One accepted boot request.
#[derive(Debug, Clone)]
pub struct BootJob {
    /// Its instances, in launch order.
    pub instances: Vec<Uuid>,
    /// The API request id (the create action's id).
    pub request_id: String,
}

fn create_action(build: &BuildRequest, request_id: &str, now: i64, events: Vec<ActionEvent>) -> InstanceAction {
    InstanceAction {
        instance_uuid: build.instance_uuid,
        action: "create".to_owned(),
        request_id: request_id.to_owned(),
        user_id: build.user_id.clone(),
        project_id: build.project_id.clone(),
        start_time: build.created_at,
        message: None,
        updated_at: Some(now),
        events,
    }
}

/// The update that hands an instance to `node` for building: host, node,
/// the host's zone and `spawning` (claim and reschedule alike).
pub(crate) fn spawning_on(compute: &Compute, node: &berth_compute_model::ComputeNodeRef, now: i64) -> InstanceUpdate {
    InstanceUpdate { task_state: Some(Some(task_state::SPAWNING.to_owned())), ..placed_on(compute, node, now) }
}

/// The action events of a build handed to `host`: scheduling finished,
/// the build started.
pub(crate) fn handed_out_events(instance: Uuid, request_id: &str, host: &str, now: i64) -> [CellOp; 2] {
    [
        CellOp::FinishEvent {
            instance,
            request_id: request_id.to_owned(),
            event: EVENT_SCHEDULE.to_owned(),
            result: "Success".to_owned(),
            traceback: None,
            at: now,
        },
        CellOp::StartEvent {
            instance,
            request_id: request_id.to_owned(),
            event: EVENT_BUILD.to_owned(),
            host: Some(host.to_owned()),
            at: now,
        },
    ]
}

/// The row update that puts an instance on `node`: host, node and the
/// host's availability zone.
pub(crate) fn placed_on(compute: &Compute, node: &berth_compute_model::ComputeNodeRef, now: i64) -> InstanceUpdate {
    let zone = read(&*compute.control, |w| {
        w.compute.availability_zone_of_host(&node.host, &compute.config.scheduler.default_availability_zone)
    });
    InstanceUpdate {
        host: Some(Some(node.host.clone())),
        node: Some(Some(node.node.clone())),
        availability_zone: Some(Some(zone)),
        updated_at: now,
        ..InstanceUpdate::default()
    }
}

fn event(name: &str, at: i64) -> ActionEvent {
    ActionEvent {
        event: name.to_owned(),
        start_time: at,
        finish_time: None,
        result: None,
        traceback: None,
        host: None,
        details: None,
    }
}

/// A boot with what it needs to be scheduled, read from the control
/// state.
pub(crate) struct Loaded {
    pub(crate) job: BootJob,
    /// Its build requests still there, in launch order.
    pub(crate) builds: Vec<BuildRequest>,
    pub(crate) spec: RequestSpec,
}

pub(crate) fn load(compute: &Compute, job: BootJob) -> Option<Loaded> {
    let (builds, spec) = read(&*compute.control, |w| {
        let builds: Vec<BuildRequest> =
            job.instances.iter().filter_map(|i| w.compute.build_requests.get(i).filter(|b| !b.held).cloned()).collect();
        let spec = builds.first().and_then(|b| w.compute.request_specs.get(&b.instance_uuid).cloned());
        (builds, spec)
    });
    spec.map(|spec| Loaded { job, builds, spec })
}

/// One scheduler run's answer: each instance's choices, the cell of its
/// first choice, and the ticket of those choices in flight.
type Round<'c> = (Vec<InstanceChoices>, Vec<Option<Uuid>>, Ticket<'c>);

/// One scheduler run (counted) for `instances` of `spec`: each
/// instance's choices, the cell of its first choice, and the ticket that
/// keeps the first choices counted as in flight for the scheduler runs
/// after this one ([`crate::inflight`]) until it is dropped, once the
/// claim committed or failed.
pub(crate) fn schedule_round<'c>(
    compute: &'c Compute,
    spec: &RequestSpec,
    instances: &[Uuid],
    now: i64,
) -> Result<Round<'c>, berth_scheduler::NoValidHost> {
    schedule_round_ignoring(compute, spec, instances, &[], now)
}

/// [`schedule_round`] with `ignore_hosts` filtered out (the hosts a
/// requeued build failed on).
pub(crate) fn schedule_round_ignoring<'c>(
    compute: &'c Compute,
    spec: &RequestSpec,
    instances: &[Uuid],
    ignore_hosts: &[String],
    now: i64,
) -> Result<Round<'c>, berth_scheduler::NoValidHost> {
    let seed = compute.next_seed();
    compute.metrics.scheduler_runs.fetch_add(1, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let round = compute.in_flight.decide(|in_flight| {
        read(&*compute.control, |w| {
            // A claim already committed is in this snapshot: count it once.
            let pending: Vec<berth_model::AllocationMap> = in_flight
                .iter()
                .filter(|(instance, _)| w.placement.consumers.get(instance).is_none_or(|c| c.allocations.is_empty()))
                .map(|(_, allocations)| allocations.clone())
                .collect();
            let request = ScheduleRequest {
                in_flight: &pending,
                ignore_hosts,
                now,
                ..ScheduleRequest::new(spec, instances, seed)
            };
            schedule(w, &request, &compute.health.at(now), &compute.config.scheduler).map(|(choices, _)| {
                let cells = choices
                    .iter()
                    .map(|c| c.choices.first().and_then(|h| w.compute.compute_nodes.get(&h.root)).map(|n| n.cell))
                    .collect();
                (choices, cells)
            })
        })
    });
    compute.metrics.timings.scheduler.observe(started.elapsed());
    round
}

/// The ops writing the instances' rows (scheduling, no host) into their
/// chosen cells, moving any row written by an earlier round to another
/// cell; `inserted` records where each row now is.
pub(crate) fn row_ops(
    job: &BootJob,
    builds: &[BuildRequest],
    choices: &[InstanceChoices],
    cells: &[Option<Uuid>],
    inserted: &mut HashMap<Uuid, Uuid>,
    now: i64,
    ops: &mut HashMap<Uuid, Vec<CellOp>>,
) {
    for (choice, cell) in choices.iter().zip(cells) {
        let Some(cell) = cell else { continue };
        let Some(build) = builds.iter().find(|b| b.instance_uuid == choice.instance) else { continue };
        match inserted.get(&choice.instance) {
            Some(current) if current == cell => continue,
            Some(other) => ops.entry(*other).or_default().push(CellOp::PurgeInstance(choice.instance)),
            None => {}
        }
        let row = Instance::from_spec(
            build.instance_uuid,
            &build.project_id,
            &build.user_id,
            build.spec.clone(),
            build.created_at,
            vm_state::BUILDING,
            Some(task_state::SCHEDULING),
        );
        let entry = ops.entry(*cell).or_default();
        entry.push(CellOp::InsertInstance(row));
        entry.push(CellOp::StartAction(create_action(build, &job.request_id, now, vec![event(EVENT_SCHEDULE, now)])));
        inserted.insert(choice.instance, *cell);
    }
}

/// Commit each cell's ops (one write per cell).
pub(crate) async fn write_cells(compute: &Arc<Compute>, ops: HashMap<Uuid, Vec<CellOp>>) -> anyhow::Result<()> {
    for (cell_id, ops) in ops {
        let mapping = compute.cell(&cell_id).ok_or_else(|| anyhow::anyhow!("cell {cell_id} vanished"))?;
        compute.cells.get(&mapping)?.write(ops).await?;
    }
    Ok(())
}

/// Hand claimed boots to their hosts: each row gets its host and
/// `spawning` (one write per cell for all the boots), then each agent its
/// build (`push_to_hub`; otherwise the caller hands it over, and the hub
/// only notes it as handed out). Returns the instances handed out.
pub(crate) async fn finish_claims(
    compute: &Arc<Compute>,
    boots: Vec<(&BootJob, &Claimed, &HashMap<Uuid, Uuid>)>,
    push_to_hub: bool,
) -> Vec<Uuid> {
    let mut handed: Vec<Uuid> = Vec::new();
    let now = compute.now();
    // Per cell: (instance, host, request id, op).
    let mut ops: HashMap<Uuid, Vec<(Uuid, String, &str, CellOp)>> = HashMap::new();
    for (job, claimed, _) in &boots {
        compute.metrics.instances_claimed.fetch_add(claimed.placed.len() as u64, Ordering::Relaxed);
        let request_id = job.request_id.as_str();
        for (instance, node) in &claimed.placed {
            let update = spawning_on(compute, node, now);
            let expect = Expect {
                task_states: vec![Some(task_state::SCHEDULING.to_owned())],
                not_deleted: true,
                ..Expect::default()
            };
            let entry = ops.entry(node.cell).or_default();
            entry.push((
                *instance,
                node.host.clone(),
                request_id,
                CellOp::UpdateInstance { uuid: *instance, expect, update },
            ));
            for op in handed_out_events(*instance, request_id, &node.host, now) {
                entry.push((*instance, String::new(), request_id, op));
            }
        }
    }
    for (cell_id, entries) in ops {
        let Some(mapping) = compute.cell(&cell_id) else { continue };
        let cell = match compute.cells.get(&mapping) {
            Ok(cell) => cell,
            Err(err) => {
                tracing::error!(error = %err, "cell unavailable after a claim; the sweep will hand the builds out");
                continue;
            }
        };
        let cell_ops: Vec<CellOp> = entries.iter().map(|(_, _, _, op)| op.clone()).collect();
        match cell.write(cell_ops).await {
            Ok(outcomes) => {
                for ((instance, host, request_id, op), outcome) in entries.iter().zip(outcomes) {
                    if !matches!(op, CellOp::UpdateInstance { .. }) {
                        continue;
                    }
                    if outcome == CellOutcome::Done {
                        handed.push(*instance);
                        if let Some(task) = Task::new(*instance, host, task_state::SPAWNING) {
                            compute.remember_build_request_id(*instance, request_id);
                            if push_to_hub {
                                compute.hub.push(task);
                            } else {
                                compute.hub.mark_handed_out(&task);
                            }
                        }
                    } else {
                        // Deleted while being claimed (whoever deleted the
                        // row may not have seen the allocation yet), or
                        // already handed out by the sweep's
                        // `finish_lost_claim` when this write was slow: the
                        // row is then there, and its claim must stay.
                        let id = *instance;
                        let rows = compute.cells.read(&cell, move |s| s.instances(&[id])).await;
                        let handed_out = rows.is_ok_and(|rows| rows.iter().any(|r| !r.deleted && r.host.is_some()));
                        if !handed_out {
                            let _ = write(&*compute.control, |w| Ok((plan_forget_instance(w, instance), ())));
                        }
                    }
                }
            }
            Err(err) => tracing::error!(error = %err, "updating claimed instances failed; the sweep will retry"),
        }
    }
    // Instances deleted before the claim: drop rows nobody maps to.
    for (_, claimed, inserted) in &boots {
        for instance in &claimed.gone {
            let Some(cell_id) = inserted.get(instance) else { continue };
            let mapped_here = read(&*compute.control, |w| {
                w.compute.instance_mappings.get(instance).is_some_and(|m| m.cell == Some(*cell_id))
            });
            if !mapped_here {
                if let Some(mapping) = compute.cell(cell_id) {
                    if let Ok(cell) = compute.cells.get(&mapping) {
                        let _ = cell.write(vec![CellOp::PurgeInstance(*instance)]).await;
                    }
                }
            }
        }
    }
    handed
}

/// Put boots nobody could place into cell0 in ERROR, with a fault and a
/// failed `create` action, then drop their build requests and the rows
/// earlier rounds wrote, in one control write for all of `builds` (a
/// gang goes whole). Returns how many were buried.
pub(crate) async fn bury(
    compute: &Arc<Compute>,
    job: &BootJob,
    builds: &[BuildRequest],
    inserted: &HashMap<Uuid, Uuid>,
    reason: &str,
) -> usize {
    let now = compute.now();
    // Rows written in scheduling rounds go.
    let mut purge: HashMap<Uuid, Vec<CellOp>> = HashMap::new();
    for (instance, cell) in inserted {
        purge.entry(*cell).or_default().push(CellOp::PurgeInstance(*instance));
    }
    for (cell_id, ops) in purge {
        if let Some(mapping) = compute.cell(&cell_id) {
            if let Ok(cell) = compute.cells.get(&mapping) {
                let _ = cell.write(ops).await;
            }
        }
    }
    let Some(cell0) = compute.cell(&CELL0_UUID) else {
        tracing::error!("no cell0 mapping: cannot bury unschedulable instances");
        return 0;
    };
    let cell0 = match compute.cells.get(&cell0) {
        Ok(cell) => cell,
        Err(err) => {
            tracing::error!(error = %err, "cell0 unavailable: boot stays pending");
            return 0;
        }
    };
    let message = "No valid host was found. There are not enough hosts available.".to_owned();
    let mut ops = Vec::new();
    for build in builds {
        let mut row = Instance::from_spec(
            build.instance_uuid,
            &build.project_id,
            &build.user_id,
            build.spec.clone(),
            build.created_at,
            vm_state::ERROR,
            None,
        );
        row.updated_at = Some(now);
        ops.push(CellOp::InsertInstance(row));
        ops.push(CellOp::AddFault(Fault {
            instance_uuid: build.instance_uuid,
            code: 500,
            message: message.clone(),
            details: reason.to_owned(),
            host: None,
            created_at: now,
        }));
        let mut schedule_event = event(EVENT_SCHEDULE, now);
        schedule_event.finish_time = Some(now);
        schedule_event.result = Some("Error".to_owned());
        schedule_event.traceback = Some(reason.to_owned());
        let mut action = create_action(build, &job.request_id, now, vec![schedule_event]);
        action.message = Some("Error".to_owned());
        ops.push(CellOp::StartAction(action));
    }
    if let Err(err) = cell0.write(ops).await {
        tracing::error!(error = %err, "writing buried instances to cell0 failed; boot stays pending");
        return 0;
    }
    let instances: Vec<Uuid> = builds.iter().map(|b| b.instance_uuid).collect();
    match write(&*compute.control, |w| {
        let (set, buried) = plan_bury(w, &instances);
        Ok((set, buried))
    }) {
        Ok(buried) => {
            compute.metrics.instances_buried.fetch_add(buried.len() as u64, Ordering::Relaxed);
            let gone: Vec<CellOp> =
                instances.iter().filter(|i| !buried.contains(i)).map(|i| CellOp::PurgeInstance(*i)).collect();
            let _ = cell0.write(gone).await;
            buried.len()
        }
        Err(err) => {
            tracing::error!(error = %err, "burying instances failed; boot stays pending");
            0
        }
    }
}

/// The cell writes that give up a build whose row is `scheduling` on
/// `failed_host`: the row goes to ERROR without host or node, with a
/// fault (code 500, `message` and `details`), only while it is still in
/// that state (a delete in between wins).
pub(crate) fn failed_build_ops(
    instance: Uuid,
    failed_host: Option<String>,
    message: String,
    details: String,
    now: i64,
) -> Vec<CellOp> {
    let expect = Expect {
        task_states: vec![Some(task_state::SCHEDULING.to_owned())],
        not_deleted: true,
        host: Some(failed_host.clone()),
        ..Expect::default()
    };
    let update = InstanceUpdate {
        vm_state: Some(vm_state::ERROR.to_owned()),
        task_state: Some(None),
        host: Some(None),
        node: Some(None),
        updated_at: now,
        ..InstanceUpdate::default()
    };
    vec![
        CellOp::UpdateInstance { uuid: instance, expect, update },
        CellOp::AddFault(Fault {
            instance_uuid: instance,
            code: 500,
            message,
            details,
            host: failed_host,
            created_at: now,
        }),
    ]
}
