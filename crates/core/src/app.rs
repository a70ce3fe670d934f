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

/// Group-commit state (see [`App::write`]).
#[derive(Debug, Default)]
struct Batches {
    state: Mutex<SharedState>,
    /// Batch outcomes and leadership (every waiter re-checks).
    changed: std::sync::Condvar,
    /// A planning turn: one writer of the open batch may plan now.
    turn: std::sync::Condvar,
    /// The leader: a change set is pending, or nobody is left to plan.
    leader: std::sync::Condvar,
}

impl Batches {
    /// Something other than a planning turn changed: wake everyone.
    fn wake_all(&self) {
        self.changed.notify_all();
        self.turn.notify_all();
    }
}

#[derive(Debug, Default)]
struct SharedState {
    /// The batch writers register for.
    open_batch: u64,
    /// A leader is running a batch (from registration to outcome).
    leader_active: bool,
    /// The open batch's transaction has caught up: its writers may plan.
    window_open: bool,
    /// Writers registered for the open batch that have not planned yet.
    waiting: usize,
    /// Change sets written into the open batch, and their undo sets.
    changes: WorldChangeSet,
    undo: Vec<WorldChangeSet>,
    /// The change set planned last, waiting for the leader to write it
    /// (nobody else plans until it is written or refused).
    pending: Option<Member>,
    /// The leader is writing a member's change set.
    in_flight: bool,
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

/// One writer's planned change set, applied to the snapshot, waiting to
/// be written.
#[derive(Debug)]
struct Member {
    ticket: u64,
    changes: WorldChangeSet,
    undo: WorldChangeSet,
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
                turn: std::sync::Condvar::new(),
                leader: std::sync::Condvar::new(),
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
    pub fn write<T, E: From<StoreError>>(
        &self,
        plan: impl FnOnce(&World) -> Result<(WorldChangeSet, T), E>,
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
    /// Every writer registers for the open batch. The first one becomes its
    /// leader and runs one store transaction. Inside it, the leader applies
    /// the other processes' changes (catch-up) and then opens a planning
    /// window. Every writer registered for the batch, the leader included,
    /// now plans in turn against the caught-up snapshot and applies its
    /// change set at once, with an undo set; the leader writes it into the
    /// transaction (under a savepoint) before the next writer plans on top
    /// of it. Once nobody is left to plan, the leader closes the window and
    /// commits all the change sets in the one transaction (one fsync, one
    /// feed entry).
    ///
    /// Failure isolation: if the database refuses one writer's change set
    /// for its own sake (a value it cannot hold, a constraint), only that
    /// set is rolled back (savepoint and snapshot) and only that writer
    /// gets the error; since nobody has planned on top of it yet, the
    /// others are unaffected and committed. If the transaction as a whole
    /// fails (connection lost, commit failed), every writer's change set
    /// is undone in memory and every writer gets the error. The catch-up
    /// stays applied, since it was committed by others. Writers that
    /// register while a batch is committing wait for the next batch, whose
    /// leader is one of them.
    fn write_batched<T, E: From<StoreError>>(
        &self,
        plan: impl FnOnce(&World) -> Result<(WorldChangeSet, T), E>,
    ) -> Result<T, E> {
        let lock = lock_shared;
        let shared = &self.batches;
        let mut st = lock(&shared.state);
        let my_batch = st.open_batch;
        let my_ticket = st.next_ticket;
        st.next_ticket += 1;
        st.waiting += 1;
        let mut plan = Some(plan);
        let mut out: Option<T> = None;
        let mut my_error: Option<E> = None;
        loop {
            if st.done_through >= my_batch {
                break;
            }
            if st.window_open && st.open_batch == my_batch && plan.is_some() && st.pending.is_none() && !st.in_flight {
                self.plan_into_batch(&mut st, my_ticket, &mut plan, &mut out, &mut my_error);
                // The leader writes it (or, if nothing was planned, hands
                // the turn on).
                shared.leader.notify_one();
                continue;
            }
            if !st.leader_active && st.open_batch == my_batch {
                // Lead this batch.
                st.leader_active = true;
                drop(st);
                let mut seen = self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let start_seq = *seen;
                let mut caught_up_to = start_seq;
                let mut window_used = false;
                let result = self.store.write(start_seq, &mut |catch_up, write| {
                    if !catch_up.is_empty() {
                        let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                        for (seq, set) in catch_up {
                            state.apply(&set);
                            caught_up_to = seq;
                        }
                    }
                    window_used = true;
                    let mut st = lock(&shared.state);
                    st.window_open = true;
                    if plan.is_some() {
                        self.plan_into_batch(&mut st, my_ticket, &mut plan, &mut out, &mut my_error);
                    }
                    loop {
                        if let Some(member) = st.pending.take() {
                            st.in_flight = true;
                            drop(st);
                            let written = write(&member.changes);
                            st = lock(&shared.state);
                            st.in_flight = false;
                            match written {
                                Ok(()) => {
                                    st.changes.changes.extend(member.changes.changes);
                                    st.undo.push(member.undo);
                                }
                                Err(err) => {
                                    // Refused (or the transaction is lost):
                                    // take it back. It was planned last, so
                                    // nothing rests on it.
                                    self.state
                                        .write()
                                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                                        .apply(&member.undo);
                                    st.refused.insert(member.ticket, err);
                                }
                            }
                            continue;
                        }
                        if st.waiting == 0 {
                            break;
                        }
                        // Nothing pending: the next writer's turn. One
                        // wake-up per turn, not a stampede.
                        shared.turn.notify_one();
                        st = shared.leader.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
                    }
                    st.window_open = false;
                    st.open_batch += 1;
                    let changes = std::mem::take(&mut st.changes);
                    (!changes.is_empty()).then_some(changes)
                });
                *seen = caught_up_to;
                self.seen_hint.store(caught_up_to, std::sync::atomic::Ordering::Release);
                if !window_used && matches!(result, Err(berth_store::StoreError::FeedGap(_))) {
                    // The feed was pruned past this process: nobody has
                    // planned yet, so reload the snapshot and run the batch
                    // again (a new leader picks it up).
                    let reloaded = self.reload_locked(&mut seen);
                    drop(seen);
                    st = lock(&shared.state);
                    st.leader_active = false;
                    if let Err(err) = reloaded {
                        st.open_batch += 1;
                        st.waiting = 0;
                        st.failed.insert(my_batch, err);
                        st.done_through = my_batch;
                    }
                    shared.wake_all();
                    continue;
                }
                st = lock(&shared.state);
                if !window_used {
                    // The transaction failed before it could catch up: the
                    // batch never opened and none of its registered writers
                    // planned. They all get the error.
                    st.open_batch += 1;
                    st.waiting = 0;
                }
                let undo = std::mem::take(&mut st.undo);
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
                        st.failed.insert(my_batch, err);
                    }
                }
                drop(seen);
                st.done_through = my_batch;
                st.leader_active = false;
                let keep_from = my_batch.saturating_sub(1024);
                st.failed.retain(|id, _| *id >= keep_from);
                shared.wake_all();
                continue;
            }
            // Waiting for a planning turn in the open batch, or for
            // anything else (outcome, leadership).
            let condvar = if st.open_batch == my_batch && plan.is_some() && st.leader_active {
                &shared.turn
            } else {
                &shared.changed
            };
            st = condvar.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if let Some(err) = my_error {
            return Err(err);
        }
        if let Some(err) = st.refused.remove(&my_ticket) {
            return Err(E::from(err));
        }
        if let Some(err) = st.failed.get(&my_batch) {
            return Err(E::from(err.clone()));
        }
        drop(st);
        out.ok_or_else(|| E::from(StoreError::Internal("a writer's plan never ran".into())))
    }

    /// One writer plans into the open batch (the window is open, so
    /// the snapshot has caught up) and applies its change set at once; it
    /// is left pending for the leader to write.
    ///
    /// A plan that panics becomes that writer's error: the batch goes on
    /// (a panicking leader would otherwise leave the batch open forever,
    /// with its other writers' changes applied but never committed).
    fn plan_into_batch<T, E: From<StoreError>>(
        &self,
        st: &mut SharedState,
        ticket: u64,
        plan: &mut Option<impl FnOnce(&World) -> Result<(WorldChangeSet, T), E>>,
        out: &mut Option<T>,
        my_error: &mut Option<E>,
    ) {
        st.waiting -= 1;
        let Some(plan) = plan.take() else { return };
        let state = self.read();
        let planned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| plan(&state)))
            .unwrap_or_else(|_| Err(E::from(StoreError::Internal("a write plan panicked".into()))));
        match planned {
            Ok((changes, value)) => {
                if !changes.is_empty() {
                    let undo = state.undo_for(&changes);
                    drop(state);
                    self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()).apply(&changes);
                    st.pending = Some(Member { ticket, changes, undo });
                }
                *out = Some(value);
            }
            Err(err) => *my_error = Some(err),
        }
    }
}
