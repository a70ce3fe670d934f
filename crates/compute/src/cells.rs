//! Handles on the cell databases.
//!
//! Each cell gets one [`Cell`]: its store, a writer thread that
//! group-commits the ops of concurrent callers in one transaction (and, if
//! that transaction fails, retries each caller's ops alone, so one bad
//! write does not fail its neighbours), and a bound on concurrent reads.
//! Reads run on blocking threads under a per-cell deadline: a cell whose
//! database does not answer in time is reported as down to the caller,
//! which skips it (or shows stubs), and the other cells keep serving.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use berth_compute_model::CellMapping;
use berth_store::{CellOp, CellOutcome, CellStore, StoreError};
use uuid::Uuid;

/// Opens the store of a cell mapping (the binary knows the backends).
pub type CellOpener = Arc<dyn Fn(&CellMapping) -> Result<Arc<dyn CellStore>, StoreError> + Send + Sync>;

/// Why a cell could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// No such cell mapping.
    #[error("cell {0} is not known")]
    Unknown(Uuid),
    /// The cell did not answer within the deadline.
    #[error("cell {0} did not answer in time")]
    Timeout(Uuid),
    /// The cell's store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Reply = tokio::sync::oneshot::Sender<Result<Vec<CellOutcome>, StoreError>>;

#[derive(Default)]
struct Queue {
    pending: Vec<(Vec<CellOp>, Reply)>,
    closed: bool,
}

/// One cell: mapping, store, batching writer, read limiter.
pub struct Cell {
    /// The cell mapping it was opened from.
    pub mapping: CellMapping,
    store: Arc<dyn CellStore>,
    queue: Arc<(Mutex<Queue>, Condvar)>,
    reads: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell").field("name", &self.mapping.name).finish_non_exhaustive()
    }
}

/// Concurrent blocking reads per cell: beyond this, a stuck database
/// cannot tie up more threads; callers time out instead.
const READS_PER_CELL: usize = 16;
/// Largest batch one cell transaction takes.
const MAX_BATCH_OPS: usize = 4096;

impl Cell {
    fn open(mapping: CellMapping, store: Arc<dyn CellStore>) -> Arc<Self> {
        let queue: Arc<(Mutex<Queue>, Condvar)> = Arc::default();
        let cell = Arc::new(Cell {
            mapping,
            store: store.clone(),
            queue: queue.clone(),
            reads: Arc::new(tokio::sync::Semaphore::new(READS_PER_CELL)),
        });
        let name = format!("berth-cell-{}", cell.mapping.name);
        let spawned = std::thread::Builder::new().name(name).spawn(move || writer_loop(&*store, &queue));
        if let Err(err) = spawned {
            tracing::error!(error = %err, "cannot start a cell writer thread");
        }
        cell
    }

    /// The underlying store (blocking calls; prefer [`Cells::read`]).
    pub fn store(&self) -> &Arc<dyn CellStore> {
        &self.store
    }

    /// Commit `ops` (batched with concurrent callers); one outcome per op.
    pub async fn write(&self, ops: Vec<CellOp>) -> Result<Vec<CellOutcome>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let (lock, cv) = &*self.queue;
            let mut queue = lock.lock().unwrap_or_else(|p| p.into_inner());
            if queue.closed {
                return Err(StoreError::Unavailable("cell writer stopped".into()));
            }
            queue.pending.push((ops, tx));
            cv.notify_one();
        }
        rx.await.unwrap_or_else(|_| Err(StoreError::Internal("cell writer dropped a batch".into())))
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        let (lock, cv) = &*self.queue;
        lock.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        cv.notify_all();
    }
}

fn writer_loop(store: &dyn CellStore, queue: &(Mutex<Queue>, Condvar)) {
    let (lock, cv) = queue;
    loop {
        let batch = {
            let mut q = lock.lock().unwrap_or_else(|p| p.into_inner());
            while q.pending.is_empty() && !q.closed {
                q = cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            if q.pending.is_empty() && q.closed {
                return;
            }
            let mut taken = Vec::new();
            let mut n_ops = 0;
            while let Some(next) = q.pending.first() {
                if !taken.is_empty() && n_ops + next.0.len() > MAX_BATCH_OPS {
                    break;
                }
                n_ops += next.0.len();
                taken.push(q.pending.remove(0));
            }
            taken
        };
        let all: Vec<CellOp> = batch.iter().flat_map(|(ops, _)| ops.iter().cloned()).collect();
        match store.write(&all) {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for (ops, reply) in batch {
                    let mine: Vec<CellOutcome> = outcomes.by_ref().take(ops.len()).collect();
                    let _ = reply.send(Ok(mine));
                }
            }
            Err(err) if batch.len() == 1 || matches!(err, StoreError::Unavailable(_)) => {
                // One writer, or the database itself is gone: everyone
                // in the batch gets the error.
                for (_, reply) in batch {
                    let _ = reply.send(Err(err.clone()));
                }
            }
            Err(_) => {
                // Something in the batch was refused: isolate it by
                // committing each writer's ops on their own.
                for (ops, reply) in batch {
                    let _ = reply.send(store.write(&ops));
                }
            }
        }
    }
}

/// Run blocking work: inside a multi-threaded tokio runtime, let tokio
/// move other tasks off this worker first.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Every cell this process has opened.
pub struct Cells {
    opener: CellOpener,
    open: RwLock<HashMap<Uuid, Arc<Cell>>>,
    /// Per-cell deadline for reads.
    pub deadline: Duration,
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl Cells {
    /// A registry opening cells with `opener`.
    pub fn new(opener: CellOpener, deadline: Duration) -> Self {
        Cells { opener, open: RwLock::new(HashMap::new()), deadline }
    }

    /// The handle of `mapping`'s cell, opening it on first use (or when
    /// its database connection changed).
    pub fn get(&self, mapping: &CellMapping) -> Result<Arc<Cell>, StoreError> {
        if let Some(cell) = self.open.read().unwrap_or_else(|p| p.into_inner()).get(&mapping.uuid) {
            if cell.mapping.database_connection == mapping.database_connection {
                return Ok(cell.clone());
            }
        }
        // One opener at a time: concurrent first uses share one handle.
        let mut open = self.open.write().unwrap_or_else(|p| p.into_inner());
        if let Some(cell) = open.get(&mapping.uuid) {
            if cell.mapping.database_connection == mapping.database_connection {
                return Ok(cell.clone());
            }
        }
        // Store clients block (the PostgreSQL one runs its own runtime):
        // tell tokio when opening from async code.
        let store = blocking(|| (self.opener)(mapping))?;
        let cell = Cell::open(mapping.clone(), store);
        if let Some(old) = open.insert(mapping.uuid, cell.clone()) {
            // A blocking client must not be dropped on a runtime thread.
            let _ = std::thread::Builder::new().name("berth-cell-close".into()).spawn(move || drop(old));
        }
        Ok(cell)
    }

    /// Run a blocking read on `cell` within the deadline.
    pub async fn read<T: Send + 'static>(
        &self,
        cell: &Arc<Cell>,
        f: impl FnOnce(&dyn CellStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, CellError> {
        let id = cell.mapping.uuid;
        let deadline = tokio::time::Instant::now() + self.deadline;
        let permit = match tokio::time::timeout_at(deadline, cell.reads.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Err(CellError::Timeout(id)),
        };
        let store = cell.store.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&*store)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(result)) => result.map_err(CellError::Store),
            Ok(Err(_)) => Err(CellError::Store(StoreError::Internal("cell read panicked".into()))),
            Err(_) => Err(CellError::Timeout(id)),
        }
    }
}
