//! The store conformance suite against PostgreSQL. Needs
//! `TEST_DATABASE_URL` (scripts/test.sh starts a throwaway server and sets
//! it); each run uses a fresh schema.

fn database_url() -> Option<String> {
    std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty())
}

fn fresh(url: &str, tag: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{url}{sep}schema=suite_{tag}_{}_{nanos}", std::process::id())
}

#[test]
fn postgres() {
    let Some(url) = database_url() else {
        eprintln!("TEST_DATABASE_URL not set: PostgreSQL store suite not run (scripts/test.sh sets it)");
        return;
    };
    let store = berth_store_postgres::PostgresStore::connect(&fresh(&url, "main")).expect("connect");
    berth_store::testing::store_suite(&store);
}

/// Two stores on one database: a write through one is seen by the other's
/// change feed, and a write planned inside the transaction is handed the
/// other's changes first.
#[test]
fn two_processes_share_one_database() {
    let Some(url) = database_url() else { return };
    let url = fresh(&url, "two");
    let a = berth_store_postgres::PostgresStore::connect(&url).expect("connect a");
    let b = berth_store_postgres::PostgresStore::connect(&url).expect("connect b");
    use berth_model::{Change, ChangeSet};
    use berth_store::Store;
    let mut set = ChangeSet::new();
    set.push(Change::PutTrait { id: 1, name: "CUSTOM_A".into(), created_at: 1 });
    let set: berth_compute_model::WorldChangeSet = set.into();
    let seq_a = berth_store::write_one(&a, 0, set.clone()).expect("write a").expect("committed");
    let feed = b.changes_since(0).expect("feed");
    assert_eq!(feed, vec![(seq_a, set)]);
    let mut handed = Vec::new();
    let mut set_b = ChangeSet::new();
    set_b.push(Change::PutTrait { id: 2, name: "CUSTOM_B".into(), created_at: 2 });
    let set_b: berth_compute_model::WorldChangeSet = set_b.into();
    let seq_b = b
        .write(0, &mut |catch_up, write| {
            handed = catch_up.iter().map(|(seq, _)| *seq).collect();
            write(&set_b).expect("write b's change");
            Some(set_b.clone())
        })
        .expect("write b")
        .expect("committed");
    assert_eq!(handed, vec![seq_a], "b must be handed a's change before planning");
    assert!(seq_b > seq_a);
}

/// Pruned feed entries are reported as a gap to a caller that has not
/// seen them, and a fresh load covers them.
#[test]
fn pruned_feed_reports_a_gap() {
    let Some(url) = database_url() else { return };
    let url = fresh(&url, "prune");
    use berth_model::{Change, ChangeSet};
    use berth_store::{Store, StoreError};
    let store = berth_store_postgres::PostgresStore::connect(&url)
        .expect("connect")
        .with_feed_retention(std::time::Duration::ZERO);
    let mut set = ChangeSet::new();
    set.push(Change::PutTrait { id: 1, name: "CUSTOM_OLD".into(), created_at: 1 });
    let seq = berth_store::write_one(&store, 0, set.into()).expect("write").expect("committed");
    assert!(store.changes_since(0).expect("feed before pruning").len() == 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(store.prune_feed().expect("prune"), 1);
    assert!(
        matches!(store.changes_since(0), Err(StoreError::FeedGap(0))),
        "a caller behind the pruned range must reload"
    );
    assert!(store.changes_since(seq).expect("caller at the horizon").is_empty());
    let loaded = store.load().expect("load");
    assert!(loaded.seq >= seq, "a load reflects the pruned changes");
    assert!(loaded.state.placement.traits.contains_key("CUSTOM_OLD"));
}

/// Peers' hints: what one process hands over reaches the listeners of the
/// others on the same schema, not its own, nor those on another schema.
#[test]
fn peers_hear_each_others_hints_only() {
    use berth_store::Store;
    use std::sync::mpsc;
    use std::time::Duration;
    let Some(url) = database_url() else { return };
    let (here, elsewhere) = (fresh(&url, "peers"), fresh(&url, "peers_other"));
    let a = berth_store_postgres::PostgresStore::connect(&here).expect("connect a");
    let b = berth_store_postgres::PostgresStore::connect(&here).expect("connect b");
    let c = berth_store_postgres::PostgresStore::connect(&elsewhere).expect("connect c");
    let listen = |store: &berth_store_postgres::PostgresStore| {
        let (tx, rx) = mpsc::channel::<String>();
        let tx = std::sync::Mutex::new(tx);
        assert!(store.listen_peers(Box::new(move |payload| {
            let _ = tx.lock().expect("sender").send(payload.to_owned());
        })));
        rx
    };
    let (heard_a, heard_b, heard_c) = (listen(&a), listen(&b), listen(&c));
    // The listeners connect on their own threads: hand hints over until
    // b hears one (the first may go out before it listens).
    let mut first = None;
    for _ in 0..100 {
        a.notify_peers("ready").expect("notify");
        if let Ok(payload) = heard_b.recv_timeout(Duration::from_millis(100)) {
            first = Some(payload);
            break;
        }
    }
    assert_eq!(first.as_deref(), Some("ready"));
    while heard_b.recv_timeout(Duration::from_millis(200)).is_ok() {}
    let hint = "0f7c a b\nline two with spaces";
    a.notify_peers(hint).expect("notify");
    assert_eq!(heard_b.recv_timeout(Duration::from_secs(5)).as_deref(), Ok(hint));
    b.notify_peers("from b").expect("notify");
    // a hears b's hint, never its own.
    let mut heard = Vec::new();
    while let Ok(payload) = heard_a.recv_timeout(Duration::from_millis(500)) {
        heard.push(payload);
    }
    assert_eq!(heard, vec!["from b".to_owned()]);
    assert!(heard_c.recv_timeout(Duration::from_millis(200)).is_err(), "another schema's listener heard a hint");
}
