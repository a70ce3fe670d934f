//! The cell store conformance suite against PostgreSQL. Needs
//! `TEST_DATABASE_URL` (scripts/test.sh starts a throwaway server and sets
//! it); each run uses a fresh schema.

use berth_store::CellStore;

fn database_url() -> Option<String> {
    std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty())
}

fn fresh(url: &str, tag: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{url}{sep}schema=cell_{tag}_{}_{nanos}", std::process::id())
}

#[test]
fn postgres_cell() {
    let Some(url) = database_url() else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL cell suite not run (scripts/test.sh sets it)");
        return;
    };
    let url = fresh(&url, "suite");
    let store = berth_store_postgres::PostgresCellStore::connect(&url).expect("connect");
    berth_store::testing::cell_suite(&store);
    // A second store on the same schema runs no migration again and sees
    // the first one's writes.
    let other = berth_store_postgres::PostgresCellStore::connect(&url).expect("connect again");
    assert_eq!(other.services().expect("services"), store.services().expect("services"));
    assert_eq!(other.migrate().expect("migrate"), 0);
}

/// An unreachable server is `Unavailable` (a 503), within the connect
/// timeout.
#[test]
fn unreachable_server_is_unavailable() {
    if database_url().is_none() {
        return;
    }
    let started = std::time::Instant::now();
    let result = berth_store_postgres::PostgresCellStore::connect("postgres://postgres@127.0.0.1:1/postgres");
    assert!(matches!(result, Err(berth_store::StoreError::Unavailable(_))), "{result:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
