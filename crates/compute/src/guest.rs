//! What an agent needs to make a task's guest, read by the control plane
//! and sent with the task (nova-compute gets the instance, its flavor and
//! image meta with the RPC cast; it never reads the compute API with an
//! admin identity, and neither does a berth agent).

use std::collections::HashMap;

use berth_compute_model::cell::{Instance, Migration, MigrationFilter};
use berth_compute_model::Flavor;
use uuid::Uuid;

use crate::control::read;
use crate::hub::{Task, TaskKind};
use crate::Compute;

/// A task's guest as the control plane knows it.
#[derive(Debug, Clone)]
pub struct GuestFacts {
    /// The instance row (name, hostname, image and its properties at
    /// boot, metadata, key, user data).
    pub instance: Instance,
    /// The flavor the guest runs with after this task: a move's new
    /// flavor on its destination, the row's otherwise.
    pub flavor: Flavor,
    /// The instance's newest migration (moves only).
    pub migration: Option<Migration>,
    /// The move's source host's IP (where its destination fetches the
    /// disk).
    pub source_ip: Option<String>,
}

/// Does an agent need the guest's facts for a task of this kind?
pub fn needs_guest(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::Build
            | TaskKind::Rebuild
            | TaskKind::Unshelve
            | TaskKind::Rescue
            | TaskKind::Reboot
            | TaskKind::ResizeMigrate
            | TaskKind::ResizeFinish
            | TaskKind::ResizeConfirm
            | TaskKind::ResizeRevert
            | TaskKind::LiveMigrationPrepare
            | TaskKind::LiveMigrate
    )
}

fn is_move(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::ResizeMigrate
            | TaskKind::ResizeFinish
            | TaskKind::ResizeConfirm
            | TaskKind::ResizeRevert
            | TaskKind::LiveMigrationPrepare
            | TaskKind::LiveMigrate
    )
}

impl Compute {
    /// The guests of `tasks` that need them ([`needs_guest`]): one read
    /// of instances per cell, and a move's migration. An instance that
    /// cannot be read (gone, a cell not answering) has none: its task goes
    /// without (the agent's driver refuses what it cannot make).
    pub async fn guest_facts(&self, tasks: &[Task]) -> HashMap<Uuid, GuestFacts> {
        let wanted: Vec<&Task> = tasks.iter().filter(|t| needs_guest(t.kind)).collect();
        let mut out = HashMap::new();
        if wanted.is_empty() {
            return out;
        }
        let cells: HashMap<Uuid, Option<Uuid>> = read(&*self.control, |w| {
            wanted
                .iter()
                .map(|t| (t.instance, w.compute.instance_mappings.get(&t.instance).and_then(|m| m.cell)))
                .collect()
        });
        let mut by_cell: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        for (instance, cell) in cells {
            if let Some(cell) = cell {
                by_cell.entry(cell).or_default().push(instance);
            }
        }
        for (cell, ids) in by_cell {
            let Some(handle) = self.cell(&cell).and_then(|m| self.cells.get(&m).ok()) else { continue };
            let Ok(rows) = self.cells.read(&handle, move |s| s.instances(&ids)).await else { continue };
            for instance in rows.into_iter().filter(|i| !i.deleted) {
                let uuid = instance.uuid;
                let kind = wanted.iter().find(|t| t.instance == uuid).map(|t| t.kind);
                let mut facts =
                    GuestFacts { flavor: instance.flavor().clone(), instance, migration: None, source_ip: None };
                if kind.is_some_and(is_move) {
                    let filter = MigrationFilter { instance_uuid: Some(uuid), ..Default::default() };
                    let newest = self
                        .cells
                        .read(&handle, move |s| s.migrations(&filter))
                        .await
                        .ok()
                        .and_then(|rows| rows.into_iter().max_by_key(|m| (m.created_at, m.id)));
                    if let Some(migration) = newest {
                        if kind == Some(TaskKind::ResizeFinish) {
                            facts.flavor = migration.new_flavor.clone();
                            if let Some(source) = &migration.source_compute {
                                facts.source_ip = self.host_ip(&handle, source).await;
                            }
                        }
                        facts.migration = Some(migration);
                    }
                }
                out.insert(uuid, facts);
            }
        }
        out
    }
}
