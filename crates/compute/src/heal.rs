//! Reconciliation between placement and the compute API (the heal): run
//! by the sweep every `heal_every_ticks` ticks and by `POST
//! /admin/v1/heal`.
//!
//! It finds
//! - **orphans**: `INSTANCE` consumers with allocations but no instance
//!   mapping and no build request whose uuid one of berth's cells holds
//!   as an instance row, soft-deleted included (a server berth created
//!   and whose mapping is gone; any other `INSTANCE` consumer is another
//!   client's, e.g. a real Nova's, and is never touched), and `MIGRATION`
//!   consumers no open migration names;
//! - **instances** (`active` or `stopped`, no task, on a host, in a cell)
//!   whose allocation is missing, or differs from what their flavor asks
//!   for on their host.
//!
//! It fixes what is unambiguous, each fix one planned write that
//! re-checks on the caught-up state ([`berth_compute_model::heal`]):
//! orphaned `INSTANCE` consumers are deleted, and an instance without
//! allocations gets its flavor's on its host when they fit (as `nova-manage
//! placement heal_allocations`). Everything else is reported: logged,
//! counted and returned. Only what was last written more than
//! `heal_grace_secs` ago is acted on or reported, so work in flight (a
//! build between its claim and its cell update, a move holding a
//! `MIGRATION` consumer, a delete between its placement and cell writes)
//! is left alone; the re-checks in the write cover a change after the
//! scan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_compute_model::cell::{migration_status, vm_state, MigrationFilter};
use berth_compute_model::heal::{consumer_kind, plan_heal_allocation, plan_remove_orphan, ConsumerKind, Healed};
use berth_compute_model::{CELL0_UUID, CONSUMER_TYPE_MIGRATION};
use uuid::Uuid;

use crate::control::{read, write};
use crate::Compute;

/// Migration statuses whose `MIGRATION` consumer may hold resources.
const OPEN_MIGRATIONS: &[&str] = &[
    migration_status::PRE_MIGRATING,
    migration_status::MIGRATING,
    migration_status::POST_MIGRATING,
    migration_status::FINISHED,
    migration_status::CONFIRMING,
    migration_status::REVERTING,
    migration_status::ACCEPTED,
    migration_status::QUEUED,
    migration_status::PREPARING,
    migration_status::RUNNING,
];

/// Instances per cell read.
const CHUNK: usize = 200;

/// One thing the heal found and did not fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `orphan_migration`, `orphan_instance`, `missing_allocation`,
    /// `allocation_differs`, `unknown_node`, `no_request_spec`,
    /// `cell_unreachable`.
    pub kind: &'static str,
    /// The consumer or instance (the cell for `cell_unreachable`).
    pub uuid: Uuid,
    /// What is wrong, for an operator.
    pub detail: String,
}

/// What one heal run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealReport {
    /// Orphaned `INSTANCE` consumers whose allocations were deleted (or
    /// would be, in a dry run).
    pub orphans_removed: Vec<Uuid>,
    /// Instances given their flavor's allocations (or that would be).
    pub allocations_created: Vec<Uuid>,
    /// Findings left to an operator.
    pub unresolved: Vec<Finding>,
    /// Nothing was written.
    pub dry_run: bool,
}

/// An orphan candidate seen by the scan.
struct Orphan {
    consumer: Uuid,
    generation: i64,
    kind: ConsumerKind,
}

/// The orphan candidates of type `INSTANCE` whose uuid is an instance
/// row (soft-deleted included) in one of berth's cells: servers berth's
/// own compute created. Only those are ever removed; a cell that cannot be
/// read confirms none of its own (they wait for a later run).
async fn instances_known_to_cells(
    compute: &Arc<Compute>,
    cells: &[berth_compute_model::CellMapping],
    orphans: &[Orphan],
) -> HashSet<Uuid> {
    let candidates: Vec<Uuid> =
        orphans.iter().filter(|o| o.kind == ConsumerKind::OrphanInstance).map(|o| o.consumer).collect();
    let mut ours = HashSet::new();
    if candidates.is_empty() {
        return ours;
    }
    for cell in cells {
        let Ok(handle) = compute.cells.get(cell) else { continue };
        for chunk in candidates.chunks(CHUNK) {
            let chunk = chunk.to_vec();
            match compute.cells.read(&handle, move |s| s.instances(&chunk)).await {
                Ok(rows) => ours.extend(rows.into_iter().map(|row| row.uuid)),
                Err(err) => {
                    tracing::warn!(cell = %cell.name, error = %err, "heal: cell unreadable; its orphans wait");
                    break;
                }
            }
        }
    }
    ours
}

/// Run the heal once (`dry_run`: find and report, write nothing).
pub async fn heal(compute: &Arc<Compute>, dry_run: bool) -> HealReport {
    let now = compute.now();
    let cutoff = now - compute.config.heal_grace_secs;
    let mut report = HealReport { dry_run, ..HealReport::default() };

    // 1. Orphans, from one snapshot.
    let orphans: Vec<Orphan> = read(&*compute.control, |w| {
        let mut out: Vec<Orphan> = w
            .placement
            .consumers
            .iter()
            .filter(|(_, c)| c.row.updated_at <= cutoff)
            .filter_map(|(uuid, c)| match consumer_kind(w, uuid) {
                kind @ (ConsumerKind::OrphanInstance | ConsumerKind::Migration) => {
                    Some(Orphan { consumer: *uuid, generation: c.row.generation, kind })
                }
                ConsumerKind::Known | ConsumerKind::Foreign => None,
            })
            .collect();
        out.sort_by_key(|o| o.consumer);
        out
    });
    let all_cells = compute.cell_mappings();
    let ours = instances_known_to_cells(compute, &all_cells, &orphans).await;
    let cells: Vec<_> = all_cells.into_iter().filter(|c| c.uuid != CELL0_UUID).collect();
    let mut open_migrations: Option<HashSet<Uuid>> = None;
    let mut closed_migrations: Vec<(Uuid, i64)> = Vec::new();
    for orphan in orphans {
        match orphan.kind {
            ConsumerKind::OrphanInstance if !ours.contains(&orphan.consumer) => {
                // No cell of berth's has ever held this instance: another
                // client's consumer (a real Nova using this placement).
                tracing::debug!(consumer = %orphan.consumer, "heal: INSTANCE consumer berth never created left alone");
            }
            ConsumerKind::OrphanInstance => {
                let fixed = if dry_run {
                    true
                } else {
                    let (consumer, generation) = (orphan.consumer, orphan.generation);
                    match write(&*compute.control, |w| Ok(plan_remove_orphan(w, &consumer, generation, cutoff))) {
                        Ok(Healed::Done) => true,
                        Ok(Healed::Skipped(why)) => {
                            tracing::debug!(consumer = %orphan.consumer, why, "heal: orphan left alone");
                            false
                        }
                        Err(err) => {
                            report.unresolved.push(Finding {
                                kind: "orphan_instance",
                                uuid: orphan.consumer,
                                detail: format!(
                                    "allocations of a consumer with no server; removing them failed: {err}"
                                ),
                            });
                            false
                        }
                    }
                };
                if fixed {
                    tracing::info!(consumer = %orphan.consumer, dry_run, "heal: orphaned INSTANCE allocations removed");
                    report.orphans_removed.push(orphan.consumer);
                }
            }
            ConsumerKind::Migration => {
                if open_migrations.is_none() {
                    open_migrations = Some(read_open_migrations(compute, &cells, &mut report).await);
                }
                if !open_migrations.as_ref().is_some_and(|open| open.contains(&orphan.consumer)) {
                    closed_migrations.push((orphan.consumer, orphan.generation));
                }
            }
            ConsumerKind::Known | ConsumerKind::Foreign => {}
        }
    }
    // The consumers came from this process's snapshot, which may lag
    // another process's confirm (consumer deleted, then the migration
    // closed in the cell, read fresh above). Look again on the caught-up
    // state (an empty write plans on it): only a consumer still there,
    // unchanged, is an orphan.
    if !closed_migrations.is_empty() {
        let still: Vec<Uuid> = write(&*compute.control, |w| {
            let still = closed_migrations
                .iter()
                .filter(|(uuid, generation)| {
                    w.placement.consumers.get(uuid).is_some_and(|c| c.row.generation == *generation)
                })
                .map(|(uuid, _)| *uuid)
                .collect();
            Ok((berth_compute_model::WorldChangeSet::new(), still))
        })
        .unwrap_or_else(|_| closed_migrations.iter().map(|(uuid, _)| *uuid).collect());
        for consumer in still {
            report.unresolved.push(Finding {
                kind: "orphan_migration",
                uuid: consumer,
                detail: format!(
                    "{CONSUMER_TYPE_MIGRATION} consumer with allocations and no open migration (not removed: a \
                     move may still need them)"
                ),
            });
        }
    }

    // 2. Instances, cell by cell, from their mappings.
    for mapping in &cells {
        let uuids: Vec<Uuid> = read(&*compute.control, |w| {
            let mut uuids: Vec<Uuid> = w
                .compute
                .instance_mappings
                .values()
                .filter(|m| m.cell == Some(mapping.uuid) && !m.queued_for_delete)
                .map(|m| m.instance_uuid)
                .collect();
            uuids.sort();
            uuids
        });
        let Ok(handle) = compute.cells.get(mapping) else {
            report.unresolved.push(Finding {
                kind: "cell_unreachable",
                uuid: mapping.uuid,
                detail: format!("cell {} could not be opened; its instances were not checked", mapping.name),
            });
            continue;
        };
        // An evacuated instance holds its source and its destination until
        // the source's host comes back and destroys its copy.
        let evacuating = evacuations_awaiting_source(compute, &handle).await;
        for chunk in uuids.chunks(CHUNK) {
            let chunk = chunk.to_vec();
            let rows = match compute.cells.read(&handle, move |s| s.instances(&chunk)).await {
                Ok(rows) => rows,
                Err(err) => {
                    report.unresolved.push(Finding {
                        kind: "cell_unreachable",
                        uuid: mapping.uuid,
                        detail: format!("reading instances of cell {}: {err}", mapping.name),
                    });
                    break;
                }
            };
            let mut suspects = Vec::new();
            for row in rows {
                let settled = !row.deleted
                    && row.task_state.is_none()
                    && (row.vm_state == vm_state::ACTIVE || row.vm_state == vm_state::STOPPED)
                    && row.updated_at.unwrap_or(row.created_at) <= cutoff;
                let (Some(host), Some(node_name)) = (row.host.as_deref(), row.node.as_deref()) else { continue };
                if !settled || evacuating.contains(&row.uuid) {
                    continue;
                }
                match judge(compute, row.uuid, host, node_name, cutoff) {
                    Verdict::Fine => {}
                    verdict => suspects.push((row, verdict)),
                }
            }
            if suspects.is_empty() {
                continue;
            }
            // The row was read before placement: read it again. One that
            // changed meanwhile is in flight (every operation writes the
            // row before it moves allocations), and is left alone.
            let ids: Vec<Uuid> = suspects.iter().map(|(row, _)| row.uuid).collect();
            let Ok(again) = compute.cells.read(&handle, move |s| s.instances(&ids)).await else { continue };
            let again: HashMap<Uuid, _> = again.into_iter().map(|row| (row.uuid, row)).collect();
            for (row, verdict) in suspects {
                let unchanged = again.get(&row.uuid).is_some_and(|now| {
                    (now.updated_at, &now.task_state, &now.vm_state, &now.host, &now.node, now.deleted)
                        == (row.updated_at, &row.task_state, &row.vm_state, &row.host, &row.node, row.deleted)
                });
                if unchanged {
                    let host = row.host.as_deref().unwrap_or_default();
                    act(compute, &mut report, row.uuid, mapping.uuid, host, verdict, dry_run);
                }
            }
        }
    }

    let m = &compute.metrics;
    if !dry_run {
        m.heal_orphans_removed.fetch_add(report.orphans_removed.len() as u64, Ordering::Relaxed);
        m.heal_allocations_created.fetch_add(report.allocations_created.len() as u64, Ordering::Relaxed);
    }
    m.heal_unresolved.fetch_add(report.unresolved.len() as u64, Ordering::Relaxed);
    m.heal_runs.fetch_add(1, Ordering::Relaxed);
    for finding in &report.unresolved {
        tracing::warn!(kind = finding.kind, uuid = %finding.uuid, detail = %finding.detail, "heal: unresolved");
    }
    report
}

/// What the heal makes of one settled instance.
enum Verdict {
    Fine,
    Finding(&'static str, String),
    Missing { node: Uuid, allocations: berth_model::AllocationMap },
}

/// Compare one settled instance's allocations with its flavor on its
/// host. A consumer written within the grace is in flight: fine.
fn judge(compute: &Arc<Compute>, instance: Uuid, host: &str, node_name: &str, cutoff: i64) -> Verdict {
    read(&*compute.control, |w| {
        let node = w
            .compute
            .nodes_by_host
            .get(host)
            .into_iter()
            .flatten()
            .filter_map(|uuid| w.compute.compute_nodes.get(uuid))
            .find(|n| n.node == node_name);
        let Some(node) = node else {
            return Verdict::Finding("unknown_node", format!("on host {host} node {node_name}, which is not mapped"));
        };
        let Some(spec) = w.compute.request_specs.get(&instance) else {
            return Verdict::Finding("no_request_spec", "no request spec: its flavor is unknown".to_owned());
        };
        let expected = match berth_scheduler::heal::flavor_amounts(w, spec) {
            Ok(expected) => expected,
            Err(err) => return Verdict::Finding("no_request_spec", format!("its flavor cannot be read: {}", err.0)),
        };
        let consumer = w.placement.consumers.get(&instance);
        if consumer.is_some_and(|c| c.row.updated_at > cutoff) {
            return Verdict::Fine;
        }
        let held = consumer.filter(|c| !c.allocations.is_empty());
        let Some(held) = held else {
            return match berth_scheduler::heal::allocation_on(w, spec, node.uuid) {
                Ok(Some(allocations)) => Verdict::Missing { node: node.uuid, allocations },
                Ok(None) => Verdict::Finding(
                    "missing_allocation",
                    format!("no allocations, and {host} has no room for its flavor ({expected:?})"),
                ),
                Err(err) => Verdict::Finding("missing_allocation", format!("no allocations: {}", err.0)),
            };
        };
        let mut sums: BTreeMap<String, i64> = BTreeMap::new();
        let mut elsewhere = Vec::new();
        for (provider, amounts) in &held.allocations {
            let root = w.placement.provider(provider).map(|p| p.row.root);
            // A sharing provider's share (a disk pool) belongs with the host.
            if root != Some(node.uuid) && !w.placement.sharing_providers.contains(provider) {
                elsewhere.push(*provider);
            }
            for (class, amount) in amounts {
                *sums.entry(class.clone()).or_insert(0) += amount;
            }
        }
        if sums != expected || !elsewhere.is_empty() {
            return Verdict::Finding(
                "allocation_differs",
                format!(
                    "holds {sums:?}{} where its flavor asks for {expected:?} on {host}",
                    if elsewhere.is_empty() { String::new() } else { format!(" (on other trees: {elsewhere:?})") }
                ),
            );
        }
        Verdict::Fine
    })
}

/// Report a finding, or heal a missing allocation.
fn act(
    compute: &Arc<Compute>,
    report: &mut HealReport,
    instance: Uuid,
    cell: Uuid,
    host: &str,
    verdict: Verdict,
    dry_run: bool,
) {
    match verdict {
        Verdict::Fine => {}
        Verdict::Finding(kind, detail) => report.unresolved.push(Finding { kind, uuid: instance, detail }),
        Verdict::Missing { node, allocations } => {
            if dry_run {
                report.allocations_created.push(instance);
                return;
            }
            let now = compute.now();
            match write(&*compute.control, |w| Ok(plan_heal_allocation(w, &instance, &cell, &node, &allocations, now)))
            {
                Ok(Healed::Done) => {
                    tracing::info!(%instance, host, "heal: missing allocations created from the flavor");
                    report.allocations_created.push(instance);
                }
                Ok(Healed::Skipped(why)) => {
                    tracing::debug!(%instance, why, "heal: allocation not created");
                    if why.starts_with("does not fit") {
                        report.unresolved.push(Finding { kind: "missing_allocation", uuid: instance, detail: why });
                    }
                }
                Err(err) => report.unresolved.push(Finding {
                    kind: "missing_allocation",
                    uuid: instance,
                    detail: format!("creating its allocations failed: {err}"),
                }),
            }
        }
    }
}

/// Instances of a cell whose evacuation is done but whose source has not
/// yet destroyed its copy (migration `done`): they hold both hosts.
async fn evacuations_awaiting_source(compute: &Arc<Compute>, handle: &Arc<crate::cells::Cell>) -> HashSet<Uuid> {
    let filter = MigrationFilter {
        status: Some(migration_status::DONE.to_owned()),
        migration_type: Some(crate::action::MIGRATION_TYPE_EVACUATION.to_owned()),
        ..Default::default()
    };
    match compute.cells.read(handle, move |s| s.migrations(&filter)).await {
        Ok(rows) => rows.into_iter().map(|m| m.instance_uuid).collect(),
        Err(_) => HashSet::new(),
    }
}

/// The uuids of every open migration in the cells (an unreachable cell is
/// reported and its migrations count as open: nothing is concluded).
async fn read_open_migrations(
    compute: &Arc<Compute>,
    cells: &[berth_compute_model::CellMapping],
    report: &mut HealReport,
) -> HashSet<Uuid> {
    let mut open = HashSet::new();
    let mut blind: HashMap<Uuid, String> = HashMap::new();
    for mapping in cells {
        let Ok(handle) = compute.cells.get(mapping) else {
            blind.insert(mapping.uuid, mapping.name.clone());
            continue;
        };
        for status in OPEN_MIGRATIONS {
            let filter = MigrationFilter { status: Some((*status).to_owned()), ..Default::default() };
            match compute.cells.read(&handle, move |s| s.migrations(&filter)).await {
                Ok(rows) => open.extend(rows.into_iter().map(|m| m.uuid)),
                Err(_) => {
                    blind.insert(mapping.uuid, mapping.name.clone());
                }
            }
        }
    }
    if !blind.is_empty() {
        // Without every cell's migrations no MIGRATION consumer can be
        // called an orphan: treat them all as open this time.
        let all: Vec<Uuid> = read(&*compute.control, |w| {
            w.placement
                .consumers
                .iter()
                .filter(|(_, c)| c.row.consumer_type.as_deref() == Some(CONSUMER_TYPE_MIGRATION))
                .map(|(u, _)| *u)
                .collect()
        });
        open.extend(all);
        for (uuid, name) in blind {
            report.unresolved.push(Finding {
                kind: "cell_unreachable",
                uuid,
                detail: format!("migrations of cell {name} could not be read"),
            });
        }
    }
    open
}
