//! Group commit under injected commit failures: the in-memory snapshot
//! and the database must agree after every outcome, and a failed commit
//! takes back exactly the writes of its batch (and those planned on top).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use berth_core::App;
use berth_model::{Change, ChangeSet, State};
use berth_store::{CatchUp, Loaded, PlanFn, Seq, Store, StoreError};
use berth_store_sqlite::SqliteStore;

/// A real SQLite store whose every `fail_every`-th commit fails (fault
/// injection at the commit point, not a stand-in for the database).
struct FaultyStore {
    inner: SqliteStore,
    commits: AtomicUsize,
    fail_every: usize,
    /// Panic (after running the plan) in every n-th write instead.
    panic_every: usize,
}

impl Store for FaultyStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        self.inner.load()
    }
    fn write(&self, seen: Seq, plan: &mut PlanFn<'_>) -> Result<Option<Seq>, StoreError> {
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        if self.panic_every > 0 && n.is_multiple_of(self.panic_every) {
            let _ = plan(Vec::new(), &mut |_| Ok(()));
            panic!("store bug");
        }
        if self.fail_every > 0 && n.is_multiple_of(self.fail_every) {
            // Alternate: fail before the plan runs (connection lost at
            // BEGIN), or let it run and fail the commit.
            if (n / self.fail_every).is_multiple_of(2) {
                let _ = plan(Vec::new(), &mut |_| Ok(()));
            }
            return Err(StoreError::Unavailable("injected commit failure".into()));
        }
        self.inner.write(seen, plan)
    }
    fn changes_since(&self, seen: Seq) -> Result<CatchUp, StoreError> {
        self.inner.changes_since(seen)
    }
    fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping()
    }
    fn backend_name(&self) -> &'static str {
        "faulty-sqlite"
    }
}

fn summary(state: &State) -> Vec<String> {
    let mut out: Vec<String> = state.traits.keys().filter(|t| t.starts_with("CUSTOM_")).cloned().collect();
    out.sort();
    out
}

fn app(dir: &std::path::Path, fail_every: usize) -> (Arc<App>, Arc<FaultyStore>) {
    app_with(dir, fail_every, 0)
}

fn app_with(dir: &std::path::Path, fail_every: usize, panic_every: usize) -> (Arc<App>, Arc<FaultyStore>) {
    let store = Arc::new(FaultyStore {
        inner: SqliteStore::open_path(&dir.join("db.sqlite")).expect("open"),
        commits: AtomicUsize::new(0),
        fail_every,
        panic_every,
    });
    (Arc::new(App::new(store.clone()).expect("app")), store)
}

fn add_trait(app: &App, name: String) -> Result<(), StoreError> {
    app.write(|world| {
        let state = &world.placement;
        let mut set = ChangeSet::new();
        if !state.traits.contains_key(&name) {
            set.push(Change::PutTrait { id: state.max_trait_id + 1, name: name.clone(), created_at: 1 });
        }
        Ok((set.into(), ()))
    })
}

/// A fresh, empty directory for one test.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// Checks that memory and the database hold the same custom traits and
/// returns how many there are.
fn durable_traits(app: &App, store: &FaultyStore) -> usize {
    let in_memory = summary(&app.read().placement);
    let in_database = summary(&store.inner.load().expect("load").state.placement);
    assert_eq!(in_memory, in_database, "memory and database disagree");
    in_database.len()
}

/// Runs `threads` writer threads of `per_thread` writes each
/// (`op(app, thread, i)`); every error must satisfy `expected`. Returns
/// how many writes succeeded and how many failed.
fn run_writers(
    app: &Arc<App>,
    threads: usize,
    per_thread: usize,
    op: fn(&App, usize, usize) -> Result<(), StoreError>,
    expected: fn(&StoreError) -> bool,
) -> (usize, usize) {
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (app, ok, failed) = (app.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    match op(&app, t, i) {
                        Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                        Err(err) => {
                            assert!(expected(&err), "{err:?}");
                            failed.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst))
}

#[test]
fn group_commit_survives_injected_failures() {
    let dir = fresh_dir("group-commit");
    // The start-up sync is commit #1; fail every 7th commit after that.
    let (app, store) = app(&dir, 7);
    let (ok, failed) = run_writers(
        &app,
        8,
        60,
        |app, t, i| add_trait(app, format!("CUSTOM_T{t}_{i}")),
        |err| matches!(err, StoreError::Unavailable(_)),
    );
    assert!(failed > 0, "the fault injection must have hit some batches");
    assert!(ok > 0);
    assert_eq!(durable_traits(&app, &store), ok, "exactly the acknowledged writes are durable");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan that panics fails only its own write: concurrent writers in the
/// same batches commit, later writes still go through, and memory agrees
/// with the database.
#[test]
fn a_panicking_plan_fails_only_its_writer() {
    let dir = fresh_dir("plan-panic");
    let (app, store) = app(&dir, 0);
    let (ok, panicked) = run_writers(
        &app,
        6,
        40,
        |app, t, i| {
            if (t + i) % 5 == 0 {
                app.write(|_| -> Result<(berth_compute_model::WorldChangeSet, ()), StoreError> {
                    panic!("planning bug")
                })
            } else {
                add_trait(app, format!("CUSTOM_P{t}_{i}"))
            }
        },
        |err| matches!(err, StoreError::Internal(_)),
    );
    assert_eq!(panicked, 48, "every panicking plan is its writer's error");
    assert_eq!(ok, 192);
    add_trait(&app, "CUSTOM_AFTER".into()).expect("writes go on after panics");
    assert_eq!(durable_traits(&app, &store), 193);
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store that panics inside a write fails that batch's writers (their
/// plans ran on the leader's thread; their changes are taken back), and
/// the writes after it go on: nothing is left queued or half applied.
#[test]
fn a_panicking_store_fails_its_batch_and_writes_go_on() {
    let dir = fresh_dir("store-panic");
    let (app, store) = app_with(&dir, 0, 5);
    let (ok, failed) = run_writers(
        &app,
        6,
        40,
        |app, t, i| add_trait(app, format!("CUSTOM_S{t}_{i}")),
        |err| matches!(err, StoreError::Internal(_)),
    );
    assert!(failed > 0, "some batches must have hit the panic");
    assert_eq!(ok + failed, 240, "every writer got an answer");
    assert_eq!(durable_traits(&app, &store), ok, "exactly the acknowledged writes are durable");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}
