//! Loading another Placement's data into berth (`berth import
//! placement`): the [`Dump`] a reader took from the old database goes in
//! through [`App::write`], one planned write per batch, each planned by
//! [`berth_model::import`] against the state as it is when the batch
//! commits (inside the write transaction, after catching up with other
//! processes, so never against stale data). A batch that is refused stops the import with what was already
//! committed kept, and a re-run writes only what is still missing.

use berth_model::import::{self, Dump, Written};
use berth_model::ModelError;
use berth_store::StoreError;

use crate::App;

/// How an import went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// What the writes changed, per kind (all zero: nothing to do).
    pub written: Written,
    /// Planned writes committed.
    pub writes: usize,
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// berth already holds placement data and merging was not asked for.
    #[error(
        "berth's store already holds placement data (providers, consumers or custom classes and traits); \
         import into an empty store, or pass --merge to bring the old Placement's rows over it"
    )]
    NotEmpty,
    /// A plan refused the data.
    #[error("the import was refused: {0}")]
    Refused(#[from] ModelError),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// How many rows go into one planned write.
#[derive(Debug, Clone, Copy)]
pub struct BatchSizes {
    /// Providers per write.
    pub providers: usize,
    /// Consumers per write.
    pub consumers: usize,
}

type PlanResult = berth_model::Result<(berth_model::ChangeSet, Written)>;

/// Import `dump` into `app`'s store. Refuses a store that holds data
/// unless `merge`.
pub fn import_placement(app: &App, dump: &Dump, merge: bool, sizes: BatchSizes) -> Result<ImportReport, ImportError> {
    if !merge && import::holds_data(&app.read().placement) {
        // A re-run of an import that already committed is no merge: it
        // finds exactly the source's rows, writes nothing and says so.
        if !already_imported(app, dump) {
            return Err(ImportError::NotEmpty);
        }
    }
    let mut report = ImportReport::default();
    let mut write = |plan: &(dyn Fn(&berth_model::State) -> PlanResult + Sync)| {
        let written = app.write(|world| {
            let (set, written) = plan(&world.placement).map_err(ImportError::Refused)?;
            Ok::<_, ImportError>((set.into(), written))
        })?;
        if !written.is_empty() {
            report.writes += 1;
        }
        report.written.add(written);
        Ok::<_, ImportError>(())
    };
    write(&|state| import::plan_import_classes_and_traits(state, dump))?;
    for batch in dump.providers.chunks(sizes.providers.max(1)) {
        write(&|state| import::plan_import_providers(state, batch))?;
    }
    for batch in dump.consumers.chunks(sizes.consumers.max(1)) {
        write(&|state| import::plan_import_consumers(state, batch))?;
    }
    Ok(report)
}

/// Does the state hold this dump already, and nothing besides it?
fn already_imported(app: &App, dump: &Dump) -> bool {
    let world = app.read();
    let state = &world.placement;
    let plans_nothing = import::plan_import_classes_and_traits(state, dump).is_ok_and(|(set, _)| set.is_empty())
        && import::plan_import_providers(state, &dump.providers).is_ok_and(|(set, _)| set.is_empty())
        && import::plan_import_consumers(state, &dump.consumers).is_ok_and(|(set, _)| set.is_empty());
    plans_nothing && state.providers.len() == dump.providers.len() && state.consumers.len() == dump.consumers.len()
}
