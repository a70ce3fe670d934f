//! The in-memory snapshot and the single write path.

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use berth_compute_model::{World, WorldChangeSet};
use berth_model::Timestamp;
use berth_store::{Seq, Store, StoreError};

use crate::metrics::CoreMetrics;

/// The control state of one process: the snapshot, the store, the write
/// path.
pub struct App {
    state: RwLock<World>,
    /// Serialises writers and change-feed catch-up; holds the last change
    /// sequence number applied to `state`.
    writer: Mutex<Seq>,
    /// Serialises read barriers ([`App::sync`]); holds when the last
    /// completed one began.
    barrier: Mutex<Option<std::time::Instant>>,
    /// A copy of the writer's sequence number, readable without waiting
    /// for a commit. Never ahead of the snapshot (set after it changes);
    /// when behind, a barrier merely catches up for nothing.
    seen_hint: std::sync::atomic::AtomicI64,
    store: Arc<dyn Store>,
    /// Store and change-feed counters.
    pub metrics: CoreMetrics,
    batches: Batches,
}

fn lock_shared(m: &Mutex<SharedState>) -> std::sync::MutexGuard<'_, SharedState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Group-commit state (see [`App::write_batched`]).
#[derive(Default)]
struct Batches {
    state: Mutex<SharedState>,
    /// Batch outcomes and leadership (every waiter re-checks).
    changed: std::sync::Condvar,
}

/// A writer's plan as its batch's leader runs it: it leaves the writer's
/// value or the plan's own refusal in the writer's slot and returns the
/// change set to write (`None` when the plan refused).
type Job = BorrowingJob<'static>;

/// A [`Job`] as its writer builds it, borrowing from the writer's stack.
type BorrowingJob<'a> = Box<dyn FnOnce(&World) -> Option<WorldChangeSet> + Send + 'a>;

#[derive(Default)]
struct SharedState {
    /// The batch writers register for.
    open_batch: u64,
    /// A leader is running a batch (from registration to outcome).
    leader_active: bool,
    /// The open batch's plans the leader has not taken yet, in the order
    /// their writers came, with their tickets.
    queue: Vec<(u64, Job)>,
    /// Writers whose change set the database refused, with the error.
    refused: std::collections::HashMap<u64, StoreError>,
    /// The next writer's ticket.
    next_ticket: u64,
    /// Every batch up to this one has its outcome decided.
    done_through: u64,
    /// Batches that failed, with the error their writers get.
    failed: std::collections::BTreeMap<u64, StoreError>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("store", &self.store.backend_name()).finish_non_exhaustive()
    }
}

/// Run blocking store work: on a multi-threaded runtime, tell tokio so it can
/// move other tasks off this worker; elsewhere (tests, start-up) just run it.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Current wall-clock time in Unix seconds.
pub fn now() -> Timestamp {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl App {
    /// Load the state from `store` (adding any missing standard traits and
    /// resource classes) and build the app.
    pub fn new(store: Arc<dyn Store>) -> anyhow::Result<Self> {
        let loaded = store.load()?;
        let app = Self {
            state: RwLock::new(loaded.state),
            writer: Mutex::new(loaded.seq),
            barrier: Mutex::new(None),
            seen_hint: std::sync::atomic::AtomicI64::new(loaded.seq),
            store,
            metrics: Default::default(),
            batches: Batches {
                state: Mutex::new(SharedState { open_batch: 1, ..SharedState::default() }),
                changed: std::sync::Condvar::new(),
            },
        };
        // Upstream syncs standard traits and classes at start-up; several
        // processes may race here, which the plan-inside-transaction
        // protocol makes harmless (the loser sees the winner's rows).
        app.write(|world| Ok::<_, StoreError>((world.placement.standard_data_changes(now()).into(), ())))
            .map_err(|e| anyhow::anyhow!("syncing standard traits and classes: {e}"))?;
        Ok(app)
    }

    /// Is the database reachable?
    pub fn ping(&self) -> Result<(), berth_store::StoreError> {
        blocking(|| self.store.ping())
    }

    /// The store backing this app.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Bring the snapshot up to date with changes other processes committed
    /// (the change feed). Returns how many change sets were applied.
    pub fn catch_up(&self) -> Result<usize, berth_store::StoreError> {
        blocking(|| self.catch_up_now())
    }

    /// A read barrier: afterwards the snapshot holds every write that any
    /// process had committed when the call began. Called before each API
    /// request, it gives what clients of a stateless service over one
    /// database expect: a request sees every write that completed before
    /// it arrived, whichever process made it (create a flavor through one
    /// process, boot with it through another). Barriers run one at a
    /// time; a caller that waited out a whole barrier which began after it
    /// arrived is served by that one, so a burst of requests costs one
    /// query per wave, not one each. Nothing to do on a database no other
    /// process writes (SQLite). When the feed cannot be read the request
    /// goes on with the snapshot as it is (a failed catch-up is counted
    /// in the feed errors).
    pub fn sync(&self) {
        if !self.store.shared() {
            return;
        }
        let arrived = std::time::Instant::now();
        blocking(|| {
            let mut last = self.barrier.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if last.is_some_and(|began| began >= arrived) {
                return;
            }
            let began = std::time::Instant::now();
            // One indexed MAX: usually nothing is newer than the snapshot
            // and neither the feed nor the writer lock is touched.
            let behind = match self.store.feed_head() {
                Ok(head) => head > self.seen_hint.load(std::sync::atomic::Ordering::Acquire),
                Err(_) => true,
            };
            let caught_up = if behind { self.catch_up_now().map(|_| ()) } else { Ok(()) };
            match caught_up {
                Ok(()) => *last = Some(began),
                Err(err) => tracing::debug!(error = %err, "read barrier: change feed not read"),
            }
        });
    }

    fn catch_up_now(&self) -> Result<usize, berth_store::StoreError> {
        let mut seen = self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let changes = match self.store.changes_since(*seen) {
            Ok(changes) => changes,
            Err(berth_store::StoreError::FeedGap(_)) => {
                self.reload_locked(&mut seen)?;
                return Ok(0);
            }
            Err(err) => {
                self.metrics.feed_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(err);
            }
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        self.metrics.feed_last_poll_ms.store(now_ms, std::sync::atomic::Ordering::Relaxed);
        let n = changes.len();
        self.metrics.feed_applied.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        if n > 0 {
            let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            for (seq, set) in changes {
                state.apply(&set);
                *seen = seq;
            }
        }
        self.seen_hint.store(*seen, std::sync::atomic::Ordering::Release);
        Ok(n)
    }

    /// Read access to the current snapshot.
    pub fn read(&self) -> RwLockReadGuard<'_, World> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The one write path: plan a change set against the current state,
    /// commit it durably, and apply it to the snapshot so this process reads
    /// its own write. Writes are group-committed: see [`App::write_batched`].
    /// A plan refuses with its own error type `E`; a failed commit comes
    /// back as `E::from(StoreError)`.
    pub fn write<T: Send, E: From<StoreError> + Send>(
        &self,
        plan: impl FnOnce(&World) -> Result<(WorldChangeSet, T), E> + Send,
    ) -> Result<T, E> {
        blocking(|| self.write_batched(plan))
    }

    /// Replace the snapshot with a fresh load (the change feed no longer
    /// covers what this process missed). Called with the writer lock held.
    fn reload_locked(&self, seen: &mut Seq) -> Result<(), berth_store::StoreError> {
        let loaded = self.store.load()?;
        *self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded.state;
        *seen = loaded.seq;
        self.seen_hint.store(loaded.seq, std::sync::atomic::Ordering::Release);
        self.metrics.feed_reloads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(seq = loaded.seq, "change feed pruned past this process's position: snapshot reloaded");
        Ok(())
    }

    /// Group commit, for every store (an embedded database simply never
    /// hands back changes of other processes to catch up on).
    ///
    /// Every writer queues its plan for the open batch. The first one
    /// becomes its leader and runs one store transaction. Inside it, the
    /// leader applies the other processes' changes (catch-up) and then
    /// runs the queued plans itself, in the order their writers came,
    /// each against the snapshot with the plans before it applied: each
    /// change set is applied at once, with an undo set, and written into
    /// the transaction (under a savepoint) before the next plan runs.
    /// Writers that queue meanwhile join the batch. Once the queue is
    /// empty, the leader closes the batch and commits all the change sets
    /// in the one transaction (one fsync, one feed entry); then every
    /// writer of the batch wakes once to take its outcome. A writer hands
    /// its plan over instead of planning in a turn of its own: a turn cost
    /// two thread wake-ups per writer, and on busy cores each waited for
    /// a core while the transaction stayed open.
    ///
    /// Failure isolation: if the database refuses one writer's change set
    /// for its own sake (a value it cannot hold, a constraint), only that
    /// set is rolled back (savepoint and snapshot) and only that writer
    /// gets the error; since no plan has run on top of it yet, the
    /// others are unaffected and committed. If the transaction as a whole
    /// fails (connection lost, commit failed), every writer's change set
    /// is undone in memory and every writer gets the error. The catch-up
    /// stays applied, since it was committed by others. A plan that
    /// panics is that writer's error alone. Writers that queue while a
    /// batch is committing wait for the next batch, whose leader is one
    /// of them.
    fn write_batched<T: Send, E: From<StoreError> + Send>(
        &self,
        plan: impl FnOnce(&World) -> Result<(WorldChangeSet, T), E> + Send,
    ) -> Result<T, E> {
        let shared = &self.batches;
        let mut slot: Option<Result<T, E>> = None;
        let out = &mut slot;
        let job: BorrowingJob<'_> = Box::new(move |world| match plan(world) {
            Ok((changes, value)) => {
                *out = Some(Ok(value));
                Some(changes)
            }
            Err(err) => {
                *out = Some(Err(err));
                None
            }
        });
        // SAFETY: the job borrows `slot` and whatever `plan` borrows, all
        // of which outlive this call. It is only ever run or dropped by
        // this batch's leader before the batch is marked done (`lead`
        // empties the queue, by running it or by dropping what a failed
        // transaction never ran, before it sets `done_through`), and this
        // call does not return before `done_through` reaches its batch.
        // The mutex orders the leader's writes to `slot` before the read
        // below. Only the lifetime changes: the layouts are the same.
        let job: Job = unsafe { std::mem::transmute::<BorrowingJob<'_>, Job>(job) };
        let mut st = lock_shared(&shared.state);
        let my_batch = st.open_batch;
        let my_ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push((my_ticket, job));
        while st.done_through < my_batch {
            if !st.leader_active && st.open_batch == my_batch {
                st.leader_active = true;
                drop(st);
                self.lead(my_batch);
                st = lock_shared(&shared.state);
                continue;
            }
            st = shared.changed.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let refused = st.refused.remove(&my_ticket);
        let failed = st.failed.get(&my_batch).cloned();
        drop(st);
        match (slot, refused, failed) {
            (Some(Err(err)), _, _) => Err(err),
            (_, Some(err), _) | (_, None, Some(err)) => Err(E::from(err)),
            (Some(Ok(value)), None, None) => Ok(value),
            (None, None, None) => Err(E::from(StoreError::Internal("a write plan panicked".into()))),
        }
    }

    /// Lead batch `batch`: one store transaction that runs the queued
    /// plans (see [`App::write_batched`]), then the batch's outcome.
    fn lead(&self, batch: u64) {
        let shared = &self.batches;
        let mut seen = self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let start_seq = *seen;
        let mut caught_up_to = start_seq;
        let mut window_used = false;
        let mut undo: Vec<WorldChangeSet> = Vec::new();
        let mut refused: Vec<(u64, StoreError)> = Vec::new();
        // A store that panics fails the batch like any error: the plans
        // left in the queue must be dropped before their writers wake.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.store.write(start_seq, &mut |catch_up, write| {
                if !catch_up.is_empty() {
                    let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                    for (seq, set) in catch_up {
                        state.apply(&set);
                        caught_up_to = seq;
                    }
                }
                window_used = true;
                let mut written = WorldChangeSet::default();
                loop {
                    let jobs = {
                        let mut st = lock_shared(&shared.state);
                        if st.queue.is_empty() {
                            // Closed: later writers go to the next batch.
                            st.open_batch += 1;
                            break;
                        }
                        std::mem::take(&mut st.queue)
                    };
                    for (ticket, job) in jobs {
                        let state = self.read();
                        let planned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&state)));
                        let Ok(Some(changes)) = planned else { continue };
                        if changes.is_empty() {
                            continue;
                        }
                        let member_undo = state.undo_for(&changes);
                        drop(state);
                        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()).apply(&changes);
                        match write(&changes) {
                            Ok(()) => {
                                written.changes.extend(changes.changes);
                                undo.push(member_undo);
                            }
                            Err(err) => {
                                // Refused (or the transaction is lost): take
                                // it back. It was applied last, so nothing
                                // rests on it.
                                self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()).apply(&member_undo);
                                refused.push((ticket, err));
                            }
                        }
                    }
                }
                (!written.is_empty()).then_some(written)
            })
        }))
        .unwrap_or_else(|_| Err(StoreError::Internal("the store panicked in a write".into())));
        *seen = caught_up_to;
        self.seen_hint.store(caught_up_to, std::sync::atomic::Ordering::Release);
        if !window_used && matches!(result, Err(berth_store::StoreError::FeedGap(_))) {
            // The feed was pruned past this process: no plan has run yet,
            // so reload the snapshot and run the batch again (a new leader
            // picks it up, its queue intact).
            let reloaded = self.reload_locked(&mut seen);
            drop(seen);
            let mut st = lock_shared(&shared.state);
            st.leader_active = false;
            if let Err(err) = reloaded {
                st.open_batch += 1;
                st.queue.clear();
                st.failed.insert(batch, err);
                st.done_through = batch;
            }
            shared.changed.notify_all();
            return;
        }
        let mut st = lock_shared(&shared.state);
        let mut result = result;
        if st.open_batch == batch {
            // The batch never closed: the transaction failed before its
            // plans ran, or while they ran (or the store never ran them).
            // The plans still queued never ran; their writers get the
            // error, and the plans are dropped here, before they wake.
            st.open_batch += 1;
            st.queue.clear();
            if result.is_ok() {
                result = Err(StoreError::Internal("the store did not run the batch".into()));
            }
        }
        match result {
            Ok(Some(seq)) => {
                *seen = seen.max(seq);
                self.seen_hint.store(*seen, std::sync::atomic::Ordering::Release);
            }
            Ok(None) => {}
            Err(err) => {
                if matches!(err, berth_store::StoreError::Unavailable(_)) {
                    self.metrics.store_unavailable.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                for set in undo.iter().rev() {
                    state.apply(set);
                }
                drop(state);
                st.failed.insert(batch, err);
            }
        }
        drop(seen);
        st.refused.extend(refused);
        st.done_through = batch;
        st.leader_active = false;
        let keep_from = batch.saturating_sub(1024);
        st.failed.retain(|id, _| *id >= keep_from);
        shared.changed.notify_all();
    }
}
