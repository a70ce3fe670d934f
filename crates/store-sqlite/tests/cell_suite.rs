//! The cell store conformance suite against SQLite.

#[test]
fn sqlite_cell() {
    let dir = std::env::temp_dir().join(format!("berth-cell-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("cell1.sqlite");
    let store = berth_store_sqlite::SqliteCellStore::open(&path).expect("open");
    berth_store::testing::cell_suite(&store);
    drop(store);
    // Reopening runs no migration twice and keeps the data.
    let store = berth_store_sqlite::SqliteCellStore::open(&path).expect("reopen");
    use berth_store::CellStore;
    assert!(!store.services().expect("services").is_empty());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
