//! Failure isolation in group commit: when the database refuses one
//! writer's change, only that request fails; the writers batched with it
//! get their 2xx and their writes are durable. And input no backend can
//! store (NUL) is refused at the API the same way on both backends.

use serde_json::{json, Value};

use crate::support::{assert_error, Client, TestServer};

/// Make the server's database refuse providers named `refused-…` with a
/// trigger: a genuine per-change failure inside the real transaction.
fn install_refusal(server: &TestServer) {
    match &server.database {
        None => {
            let conn = rusqlite::Connection::open(server.dir.join("berth.sqlite")).expect("open berth.sqlite");
            conn.busy_timeout(std::time::Duration::from_secs(10)).expect("busy timeout");
            conn.execute_batch(
                "CREATE TRIGGER berth_test_refuse BEFORE INSERT ON resource_providers
                 WHEN NEW.name LIKE 'refused-%'
                 BEGIN SELECT RAISE(ABORT, 'injected refusal'); END;",
            )
            .expect("create trigger");
        }
        Some(url) => {
            let (base, query) = url.split_once('?').expect("test database URL has a schema");
            let schema =
                query.split('&').find_map(|pair| pair.strip_prefix("schema=")).expect("schema parameter").to_owned();
            let base = base.to_owned();
            // The sync client runs off the async runtime's threads.
            std::thread::spawn(move || {
                let mut client = postgres::Client::connect(&base, postgres::NoTls).expect("connect");
                client
                    .batch_execute(&format!(
                        "CREATE FUNCTION {schema}.berth_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                         BEGIN
                           IF NEW.name LIKE 'refused-%' THEN
                             RAISE EXCEPTION 'injected refusal' USING ERRCODE = 'check_violation';
                           END IF;
                           RETURN NEW;
                         END $$;
                         CREATE TRIGGER berth_test_refuse BEFORE INSERT ON {schema}.resource_providers
                         FOR EACH ROW EXECUTE FUNCTION {schema}.berth_test_refuse();"
                    ))
                    .expect("create trigger");
            })
            .join()
            .expect("trigger thread");
        }
    }
}

async fn provider_names(client: &Client) -> Vec<String> {
    let reply = client.get("/resource_providers").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let mut names: Vec<String> = reply.body["resource_providers"]
        .as_array()
        .expect("providers")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_owned())
        .collect();
    names.sort();
    names
}

/// `rounds` rounds of 30 valid concurrent creates plus one `bad` body;
/// returns the statuses of (valid, bad) requests.
async fn rounds_with_one_bad(
    client: &Client,
    rounds: usize,
    tag: &str,
    bad: impl Fn(usize) -> Value,
) -> (Vec<u16>, Vec<u16>) {
    let mut valid = Vec::new();
    let mut refused = Vec::new();
    for round in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..31 {
            let client = client.clone();
            let body = if i == 15 { bad(round) } else { json!({"name": format!("{tag}-{round}-{i}")}) };
            tasks.spawn(async move { (i, client.post("/resource_providers", &body).await) });
        }
        while let Some(done) = tasks.join_next().await {
            let (i, reply) = done.expect("task");
            if i == 15 {
                assert!(reply.body["errors"][0]["detail"].is_string(), "error body: {:?}", reply.body);
                refused.push(reply.status);
            } else {
                assert_eq!(reply.status, 200, "innocent create {tag}-{round}-{i}: {:?}", reply.body);
                valid.push(reply.status);
            }
        }
    }
    (valid, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_refused_write_fails_alone() {
    let server = TestServer::start("isolation").await;
    install_refusal(&server);
    let client = server.client();

    // The database refuses one change per round (the trigger).
    let (valid, refused) =
        rounds_with_one_bad(&client, 20, "ok", |round| json!({"name": format!("refused-{round}")})).await;
    assert_eq!(valid.len(), 600);
    assert!(refused.iter().all(|s| *s == 400), "refused writes: {refused:?}");
    // The API refuses NUL before any backend sees it.
    let (valid, refused) =
        rounds_with_one_bad(&client, 5, "nul", |round| json!({"name": format!("a\u{0}b{round}")})).await;
    assert_eq!(valid.len(), 150);
    assert!(refused.iter().all(|s| *s == 400), "NUL writes: {refused:?}");

    let expected: Vec<String> = {
        let mut names: Vec<String> = (0..20)
            .flat_map(|r| (0..31).filter(|i| *i != 15).map(move |i| format!("ok-{r}-{i}")))
            .chain((0..5).flat_map(|r| (0..31).filter(|i| *i != 15).map(move |i| format!("nul-{r}-{i}"))))
            .collect();
        names.sort();
        names
    };
    assert_eq!(provider_names(&client).await, expected, "what this process serves");
    // Durable: a fresh process loads exactly the innocent writes.
    let server = server.restart_after_kill9().await;
    assert_eq!(provider_names(&server.client()).await, expected, "what the database holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_is_refused_in_every_free_text_field() {
    let server = TestServer::start("nul").await;
    let client = server.client();
    let client_latest = server.client();
    let before = provider_names(&client).await;
    let r = client.post("/resource_providers", &json!({"name": "a\u{0}b"})).await;
    assert_error(&r, 400, "NUL in a provider name");
    assert!(r.body["errors"][0]["detail"].as_str().unwrap_or("").contains("NUL"), "{:?}", r.body);
    let r = client.put("/traits/CUSTOM_A%00B", &json!(null)).await;
    assert!(r.status == 400 || r.status == 404, "NUL in a trait name: {} {:?}", r.status, r.body);
    let r = client.post("/resource_classes", &json!({"name": "CUSTOM_A\u{0}"})).await;
    assert_error(&r, 400, "NUL in a resource class name");
    let rp = client_latest.post("/resource_providers", &json!({"name": "host"})).await;
    assert_eq!(rp.status, 200, "{:?}", rp.body);
    let rp_uuid = rp.body["uuid"].as_str().expect("uuid").to_owned();
    let r = client
        .put(
            &format!("/resource_providers/{rp_uuid}/inventories"),
            &json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let consumer = uuid::Uuid::new_v4();
    for (project, user) in [("p\u{0}", "u"), ("p", "u\u{0}")] {
        let r = client_latest
            .put(
                &format!("/allocations/{consumer}"),
                &json!({
                    "allocations": {rp_uuid.clone(): {"resources": {"VCPU": 1}}},
                    "project_id": project, "user_id": user, "consumer_generation": null,
                    "consumer_type": "INSTANCE",
                }),
            )
            .await;
        assert_error(&r, 400, "NUL in a project or user id");
    }
    let r = client_latest
        .put(
            &format!("/allocations/{consumer}"),
            &json!({
                "allocations": {rp_uuid.clone(): {"resources": {"VCPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "A\u{0}",
            }),
        )
        .await;
    assert_error(&r, 400, "NUL in a consumer type");
    // A literal backslash followed by "u0000" is an ordinary string.
    let r = client.post("/resource_providers", &json!({"name": "back\\u0000slash"})).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mut after = before.clone();
    after.push("back\\u0000slash".into());
    after.push("host".into());
    after.sort();
    assert_eq!(provider_names(&client).await, after);
    let r = client.get(&format!("/allocations/{consumer}")).await;
    assert_eq!(r.body["allocations"], json!({}), "no allocation was written");
}
