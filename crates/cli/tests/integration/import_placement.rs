//! `berth import placement` (issue 40): a Placement database on MariaDB and
//! on PostgreSQL, made with upstream's schema (`fixtures/placement_schema.sql`)
//! and filled with SQL (`fixtures/placement_data.sql`), imported into berth
//! (SQLite, or PostgreSQL when `TEST_DATABASE_URL` is set) and checked over
//! berth's API: trees, generations, inventories, consumer types,
//! allocations; a second import that changes nothing; `--verify` between
//! two berths; the `--merge` refusal; the unknown schema version.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{fresh_dir, test_database, TestServer};

const SCHEMA: &str = include_str!("fixtures/placement_schema.sql");
const DATA: &str = include_str!("fixtures/placement_data.sql");

/// The statements of a fixture file, comments dropped.
fn statements(text: &str) -> Vec<String> {
    let code: String = text.lines().filter(|line| !line.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    code.split(";\n").map(str::trim).filter(|s| !s.is_empty()).map(|s| s.trim_end_matches(';').to_owned()).collect()
}

/// A throwaway Placement database.
enum Source {
    Mysql { admin: String, name: String },
    Postgres { admin: String, name: String },
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), std::time::Duration::from_millis(500)).is_ok()
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}_{}_{n}", std::process::id())
}

impl Source {
    /// An identifier quoted as this database quotes it.
    fn quote(&self, name: &str) -> String {
        match self {
            Source::Mysql { .. } => format!("`{name}`"),
            Source::Postgres { .. } => format!("\"{name}\""),
        }
    }

    /// MariaDB at `BERTH_TEST_MYSQL_URL` (default root@127.0.0.1:3306);
    /// None, with the reason printed, only when that is unset and nothing
    /// listens on 3306.
    fn mysql() -> Option<Source> {
        let admin = match std::env::var("BERTH_TEST_MYSQL_URL").ok().filter(|u| !u.is_empty()) {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None if listening(3306) => "mysql://root@127.0.0.1:3306".to_owned(),
            None => {
                eprintln!(
                    "SKIPPED: the MariaDB import test needs MariaDB: BERTH_TEST_MYSQL_URL is unset and nothing listens on 127.0.0.1:3306"
                );
                return None;
            }
        };
        Some(Source::Mysql { admin, name: unique("berth_import") })
    }

    /// PostgreSQL at `BERTH_TEST_PG_SOURCE_URL` (default
    /// postgres@127.0.0.1:5432), same rule.
    fn postgres() -> Option<Source> {
        let admin = match std::env::var("BERTH_TEST_PG_SOURCE_URL").ok().filter(|u| !u.is_empty()) {
            Some(url) => url,
            None if listening(5432) => "postgres://postgres@127.0.0.1:5432/postgres".to_owned(),
            None => {
                eprintln!(
                    "SKIPPED: the PostgreSQL import test needs PostgreSQL: BERTH_TEST_PG_SOURCE_URL is unset and nothing listens on 127.0.0.1:5432"
                );
                return None;
            }
        };
        Some(Source::Postgres { admin, name: unique("berth_import") })
    }

    fn url(&self) -> String {
        match self {
            Source::Mysql { admin, name } => format!("{admin}/{name}"),
            Source::Postgres { admin, name } => {
                let base = admin.rsplit_once('/').map_or(admin.as_str(), |(base, _)| base);
                format!("{base}/{name}")
            }
        }
    }

    /// Run statements in the database (`create`: create it first).
    async fn exec(&self, sqls: Vec<String>, create: bool) {
        match self {
            Source::Mysql { admin, name } => {
                use berth_store_mysql::mysql_async::prelude::Queryable;
                if create {
                    let mut conn = berth_store_mysql::mysql_async::Conn::from_url(format!("{admin}/"))
                        .await
                        .expect("connect to MariaDB");
                    conn.query_drop(format!("CREATE DATABASE {name}")).await.expect("create database");
                    conn.disconnect().await.expect("disconnect");
                }
                let mut conn =
                    berth_store_mysql::mysql_async::Conn::from_url(self.url()).await.expect("connect to the database");
                for sql in sqls {
                    conn.query_drop(&sql).await.unwrap_or_else(|err| panic!("{sql}: {err}"));
                }
                conn.disconnect().await.expect("disconnect");
            }
            Source::Postgres { admin, name } => {
                let (admin, name, url) = (admin.clone(), name.clone(), self.url());
                tokio::task::spawn_blocking(move || {
                    if create {
                        let mut client = postgres::Client::connect(&admin, postgres::NoTls).expect("connect");
                        client.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
                    }
                    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
                    for sql in sqls {
                        let sql = sql.replace("DATETIME", "TIMESTAMP");
                        client.batch_execute(&sql).unwrap_or_else(|err| panic!("{sql}: {err}"));
                    }
                })
                .await
                .expect("postgres statements");
            }
        }
    }

    async fn create(&self) {
        let mut sqls = statements(SCHEMA);
        sqls.extend(statements(DATA));
        self.exec(sqls, true).await;
    }

    async fn drop_database(&self) {
        match self {
            Source::Mysql { admin, name } => {
                use berth_store_mysql::mysql_async::prelude::Queryable;
                if let Ok(mut conn) = berth_store_mysql::mysql_async::Conn::from_url(format!("{admin}/")).await {
                    let _ = conn.query_drop(format!("DROP DATABASE IF EXISTS {name}")).await;
                    let _ = conn.disconnect().await;
                }
            }
            Source::Postgres { admin, name } => {
                let (admin, name) = (admin.clone(), name.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    if let Ok(mut client) = postgres::Client::connect(&admin, postgres::NoTls) {
                        let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
                    }
                })
                .await;
            }
        }
    }
}

/// Run `berth import placement ARGS` into the store at `dir`/`database`.
fn berth_import(dir: &std::path::Path, database: &Option<String>, args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command.args(["import", "placement"]).args(args).arg("--data-dir").arg(dir);
    if let Some(url) = database {
        command.args(["--database", url]);
    }
    let Output { status, stdout, stderr } = command.output().expect("run berth import");
    (status.success(), String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned())
}

const CN1: &str = "00000000-0000-4000-8000-000000000001";
const PF0: &str = "00000000-0000-4000-8000-000000000003";
const CN2_NUMA: &str = "00000000-0000-4000-8000-000000000004";
const CN2: &str = "00000000-0000-4000-8000-000000000005";
const SHARED: &str = "00000000-0000-4000-8000-000000000006";

async fn check_import(source: Source, tag: &str) {
    source.create().await;
    let url = source.url();
    let (dir, database) = (fresh_dir(tag), test_database(tag));
    let (ok, _, log) = berth_import(&dir, &database, &["--from", &url]);
    assert!(ok, "import failed: {log}");
    assert!(log.contains("providers: 6 read (3 with a parent), 6 rows written"), "{log}");
    assert!(
        log.contains("consumers: 4 read (2 with a consumer type, 1 without allocations skipped), 3 written"),
        "{log}"
    );
    assert!(log.contains("allocations: 7 read"), "{log}");
    assert!(log.contains("resource classes (custom): 2 read, 2 written"), "{log}");

    // Idempotent: the same data again changes nothing, and says so.
    let (ok, _, log) = berth_import(&dir, &database, &["--from", &url]);
    assert!(ok, "second import failed: {log}");
    assert!(log.contains("nothing to change"), "{log}");
    assert!(log.contains("6 read (3 with a parent), 0 rows written"), "{log}");

    let server = TestServer::start_with_args_in(dir.clone(), database.clone(), &[]).await;
    let mut client = server.client();
    client.version = "1.39".into();
    let provider = client.get(&format!("/resource_providers/{CN1}")).await;
    assert_eq!(provider.status, 200, "{:?}", provider.body);
    assert_eq!((provider.body["generation"].as_i64(), provider.body["name"].as_str()), (Some(7), Some("cn1")));
    let pf = client.get(&format!("/resource_providers/{PF0}")).await.body;
    assert_eq!(pf["parent_provider_uuid"], "00000000-0000-4000-8000-000000000002");
    assert_eq!((pf["root_provider_uuid"].as_str(), pf["generation"].as_i64()), (Some(CN1), Some(4)));
    // The child that had a smaller id than its parent.
    let child = client.get(&format!("/resource_providers/{CN2_NUMA}")).await.body;
    assert_eq!((child["parent_provider_uuid"].as_str(), child["root_provider_uuid"].as_str()), (Some(CN2), Some(CN2)));
    let inventories = client.get(&format!("/resource_providers/{CN1}/inventories")).await.body;
    assert_eq!(inventories["resource_provider_generation"], 7);
    assert_eq!(inventories["inventories"]["VCPU"]["allocation_ratio"], 0.9);
    assert_eq!(inventories["inventories"]["MEMORY_MB"]["reserved"], 512);
    let usages = client.get(&format!("/resource_providers/{CN1}/usages")).await.body;
    assert_eq!((usages["usages"]["VCPU"].as_i64(), usages["usages"]["MEMORY_MB"].as_i64()), (Some(2), Some(512)));
    let traits = client.get(&format!("/resource_providers/{SHARED}/traits")).await.body;
    assert_eq!(traits["traits"], serde_json::json!(["MISC_SHARES_VIA_AGGREGATE"]));
    let aggregates = client.get(&format!("/resource_providers/{CN2}/aggregates")).await.body;
    let mut found: Vec<&str> =
        aggregates["aggregates"].as_array().expect("list").iter().filter_map(Value::as_str).collect();
    found.sort();
    assert_eq!(found, ["aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002"]);
    let custom = client.get("/traits?name=startswith:CUSTOM_").await.body;
    assert_eq!(custom["traits"], serde_json::json!(["CUSTOM_FAST"]));
    assert_eq!(client.get("/resource_classes/CUSTOM_GOLD").await.status, 200);
    let c1 = client.get("/allocations/cccccccc-0000-4000-8000-000000000001").await.body;
    assert_eq!((c1["consumer_generation"].as_i64(), c1["consumer_type"].as_str()), (Some(3), Some("INSTANCE")));
    assert_eq!((c1["project_id"].as_str(), c1["user_id"].as_str()), (Some("proj-a"), Some("user-a")));
    assert_eq!(c1["allocations"][SHARED]["resources"]["DISK_GB"], 20);
    let c2 = client.get("/allocations/cccccccc-0000-4000-8000-000000000002").await.body;
    assert_eq!((c2["consumer_generation"].as_i64(), c2["consumer_type"].as_str()), (Some(1), Some("MIGRATION")));
    // A consumer written before 1.38 has no type: "unknown", as upstream says.
    let c3 = client.get("/allocations/cccccccc-0000-4000-8000-000000000003").await.body;
    assert_eq!((c3["consumer_generation"].as_i64(), c3["consumer_type"].as_str()), (Some(0), Some("unknown")));
    let skipped = client.get("/allocations/cccccccc-0000-4000-8000-000000000004").await.body;
    assert_eq!(skipped["allocations"], serde_json::json!({}));
    // The sharing provider serves the trees of its aggregate.
    let candidates = client.get("/allocation_candidates?resources=VCPU:1,DISK_GB:10").await.body;
    let n_shared = candidates["allocation_requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter(|request| request["allocations"].get(SHARED).is_some())
        .count();
    assert_eq!(n_shared, 2, "cn1 and cn2 each with the shared disk: {candidates}");
    // A claim on the imported capacity: cn1 has (16 - 0) * 0.9 = 14 VCPU, 2 used.
    let claim = |amount: i64| serde_json::json!({"allocations": {CN1: {"resources": {"VCPU": amount}}}, "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
    assert_eq!(client.put("/allocations/dddddddd-0000-4000-8000-000000000001", &claim(13)).await.status, 409);
    assert_eq!(client.put("/allocations/dddddddd-0000-4000-8000-000000000001", &claim(12)).await.status, 204);

    // --verify: a second berth imported from the same source answers the
    // same (berth 1 has the extra consumer: its provider differs).
    let (dir2, database2) = (fresh_dir(&format!("{tag}-2")), test_database(&format!("{tag}-2")));
    let (ok, _, log) = berth_import(&dir2, &database2, &["--from", &url]);
    assert!(ok, "{log}");
    let server2 = TestServer::start_with_args_in(dir2.clone(), database2.clone(), &[]).await;
    // Nova's flavors (here in the same database): one with a disk, one
    // whose extra spec asks for a custom class.
    source
        .exec(
            vec![
                "CREATE TABLE flavors (id INTEGER NOT NULL PRIMARY KEY, vcpus INTEGER, memory_mb INTEGER, \
                 root_gb INTEGER, ephemeral_gb INTEGER, swap INTEGER)"
                    .to_owned(),
                // Nova's columns: `key` and `value` (`key` is reserved in MySQL).
                format!(
                    "CREATE TABLE flavor_extra_specs (id INTEGER NOT NULL PRIMARY KEY, flavor_id INTEGER, \
                     {} VARCHAR(255) NOT NULL, value VARCHAR(255))",
                    source.quote("key")
                ),
                "INSERT INTO flavors VALUES (1, 1, 512, 10, 0, 0), (2, 2, 1024, 0, 0, 0), (3, 2, 1024, 0, 0, 0)"
                    .to_owned(),
                // Flavor 3 asks in granular groups: VCPU in group 1 with a
                // trait, memory in group 2, the groups isolated.
                "INSERT INTO flavor_extra_specs VALUES (1, 2, 'resources:CUSTOM_GOLD', '1'), \
                 (2, 3, 'resources1:VCPU', '1'), (3, 3, 'trait1:HW_CPU_X86_AVX2', 'required'), \
                 (4, 3, 'resources2:MEMORY_MB', '512'), (5, 3, 'group_policy', 'isolate')"
                    .to_owned(),
            ],
            false,
        )
        .await;
    let verify = |a: &TestServer, b: &TestServer| {
        berth_import(
            &dir,
            &database,
            &["--verify", &a.base, "--berth", &b.base, "--candidates", "VCPU:1,DISK_GB:10", "--nova-db", &url],
        )
    };
    let (ok, out, log) = verify(&server2, &server2);
    assert!(ok && out.is_empty(), "{out}{log}");
    assert!(log.contains("6 providers, 3 consumers, 4 candidate queries compared; 0 differences"), "{log}");
    let (ok, out, log) = verify(&server2, &server);
    assert!(!ok, "{log}");
    assert!(out.contains(&format!("GET /resource_providers/{CN1}/usages")), "{out}");
    assert!(log.contains("differences between the old Placement and berth"), "{log}");
    drop(server2);
    drop(server);

    // A store with data needs --merge for rows the source gained since.
    source
        .exec(
            vec!["INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id) \
                  VALUES (7, '00000000-0000-4000-8000-000000000007', 'cn3', 0, 7)"
                .to_owned()],
            false,
        )
        .await;
    let (ok, _, log) = berth_import(&dir2, &database2, &["--from", &url]);
    assert!(!ok && log.contains("pass --merge"), "{log}");
    let (ok, _, log) = berth_import(&dir2, &database2, &["--from", &url, "--merge"]);
    assert!(ok && log.contains("providers: 7 read (3 with a parent), 1 rows written"), "{log}");

    // A schema berth does not know is refused before anything is read.
    source.exec(vec!["UPDATE alembic_version SET version_num = '0123456789ab'".to_owned()], false).await;
    let (dir3, database3) = (fresh_dir(&format!("{tag}-3")), test_database(&format!("{tag}-3")));
    let (ok, _, log) = berth_import(&dir3, &database3, &["--from", &url]);
    assert!(!ok, "{log}");
    assert!(log.contains("unknown Placement schema version \"0123456789ab\""), "{log}");
    source.drop_database().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn import_placement_from_mariadb() {
    if let Some(source) = Source::mysql() {
        check_import(source, "import-mysql").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn import_placement_from_postgres() {
    if let Some(source) = Source::postgres() {
        check_import(source, "import-pg").await;
    }
}
