//! The store conformance suite against SQLite.

#[test]
fn sqlite() {
    let dir = std::env::temp_dir().join(format!("berth-store-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = berth_store_sqlite::SqliteStore::open_dir(&dir).expect("open");
    berth_store::testing::store_suite(&store);
    // The directory lock keeps a second process (here: a second open) out.
    assert!(berth_store_sqlite::SqliteStore::open_dir(&dir).is_err(), "second open must be refused");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
