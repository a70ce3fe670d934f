//! Bad input gets a 4xx in placement's error format and changes nothing.

use serde_json::json;

use crate::support::{assert_error, provider_with_inventory, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = TestServer::start("bad-input").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "victim", "VCPU", 4).await;
    let before_list = client.get("/resource_providers").await.body;
    let before_inv = client.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
    let inv_path = format!("/resource_providers/{uuid}/inventories");
    let json_ct = [("content-type", "application/json"), ("openstack-api-version", "placement latest")];

    // Malformed JSON.
    let r = client.raw("POST", "/resource_providers", &json_ct, b"{\"name\": ".to_vec()).await;
    assert_error(&r, 400, "malformed json");
    let r = client.raw("PUT", &inv_path, &json_ct, b"[1, 2".to_vec()).await;
    assert_error(&r, 400, "malformed json on inventories");
    // Wrong types.
    let r = client.post("/resource_providers", &json!({"name": 12})).await;
    assert_error(&r, 400, "name is a number");
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": "one", "inventories": {"VCPU": {"total": 1}}}))
        .await;
    assert_error(&r, 400, "generation is a string");
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": 1, "inventories": {"VCPU": {"total": "lots"}}}))
        .await;
    assert_error(&r, 400, "total is a string");
    // Unknown fields.
    let r = client.post("/resource_providers", &json!({"name": "x", "colour": "blue"})).await;
    assert_error(&r, 400, "unknown field");
    // Invalid UUIDs.
    let r = client.post("/resource_providers", &json!({"name": "y", "uuid": "not-a-uuid"})).await;
    assert_error(&r, 400, "bad uuid in body");
    let r = client.get("/resource_providers?uuid=not-a-uuid").await;
    assert_error(&r, 400, "bad uuid in query");
    let r = client
        .put(
            "/allocations/not-a-uuid",
            &json!({"allocations": {uuid.clone(): {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
                    "consumer_generation": null, "consumer_type": "INSTANCE"}),
        )
        .await;
    assert!(r.status == 400 || r.status == 404, "bad consumer uuid: {:?}", r);
    // Bad microversion headers.
    let r = client.raw("GET", "/resource_providers", &[("openstack-api-version", "placement 1.999")], vec![]).await;
    assert_error(&r, 406, "too new microversion");
    let r = client.raw("GET", "/resource_providers", &[("openstack-api-version", "placement one.two")], vec![]).await;
    assert_error(&r, 400, "garbage microversion");
    // Bad query strings.
    let r = client.get("/resource_providers?resources=VCPU:-1").await;
    assert_error(&r, 400, "negative resource amount");
    let r = client.get("/resource_providers?member_of=in:").await;
    assert_error(&r, 400, "empty member_of");
    // Oversized body (the default limit is 10 MiB).
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(11 * 1024 * 1024));
    let r = client.raw("POST", "/resource_providers", &json_ct, huge.into_bytes()).await;
    assert_error(&r, 413, "oversized body");
    // Capacity and generation violations are 409, not 500.
    let r = client
        .put(&inv_path, &json!({"resource_provider_generation": 99, "inventories": {"VCPU": {"total": 1}}}))
        .await;
    assert_error(&r, 409, "stale generation");

    let after_list = client.get("/resource_providers").await.body;
    let after_inv = client.get(&format!("/resource_providers/{uuid}/inventories")).await.body;
    assert_eq!(before_list, after_list, "bad input changed the provider list");
    assert_eq!(before_inv, after_inv, "bad input changed inventories");
}

/// Upstream finds providers by comparing the text with the stored,
/// canonical uuid: another spelling (bare hex, braces, `urn:uuid:`, upper
/// case) names no provider in a path or a body, is refused by the query
/// strings' format checker, and matches nothing in `member_of`/`in_tree`.
/// A new provider's own `uuid` may be spelt any way and is stored
/// canonically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_uuid_spellings_name_nothing_as_upstream() {
    let server = TestServer::start("uuid-spellings").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "rp", "VCPU", 8).await;
    let bare = uuid.replace('-', "");
    let spellings = [bare.clone(), format!("{{{uuid}}}"), format!("urn:uuid:{uuid}"), uuid.to_uppercase()];
    let aggregate = "3f0c4b4e-8f4e-4b59-9d1b-2b6f0c1d2e3f";
    let put = client
        .put(
            &format!("/resource_providers/{uuid}/aggregates"),
            &json!({"aggregates": [format!("urn:uuid:{aggregate}")], "resource_provider_generation": 1}),
        )
        .await;
    assert_eq!(put.status, 200, "any uuid-like aggregate spelling is accepted: {:?}", put.body);
    let put = client
        .put(
            &format!("/resource_providers/{uuid}/traits"),
            &json!({"traits": ["HW_CPU_X86_AVX"], "resource_provider_generation": 2}),
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);

    for other in &spellings {
        for sub in ["traits", "aggregates"] {
            let r = client.get(&format!("/resource_providers/{other}/{sub}")).await;
            assert_error(&r, 404, &format!("GET {sub} of {other}"));
        }
        let r = client.call("DELETE", &format!("/resource_providers/{other}/traits"), None).await;
        assert_error(&r, 404, &format!("DELETE traits of {other}"));
        let r = client
            .put(
                &format!("/resource_providers/{other}/aggregates"),
                &json!({"aggregates": [], "resource_provider_generation": 3}),
            )
            .await;
        assert_error(&r, 404, &format!("PUT aggregates of {other}"));
        let r = client
            .post("/resource_providers", &json!({"name": format!("child {other}"), "parent_provider_uuid": other}))
            .await;
        assert_error(&r, 400, &format!("parent {other}"));
        assert!(r.body.to_string().contains("parent provider UUID does not exist"), "{:?}", r.body);
        // The list form of allocations (before 1.12) names the provider in the body.
        let mut old = client.clone();
        old.version = "1.8".into();
        let r = old
            .put(
                &format!("/allocations/{}", uuid::Uuid::new_v4()),
                &json!({"allocations": [{"resource_provider": {"uuid": other}, "resources": {"VCPU": 1}}],
                        "project_id": "p", "user_id": "u"}),
            )
            .await;
        assert_error(&r, 400, &format!("allocation on {other}"));
        assert!(r.body.to_string().contains("that does not exist"), "{:?}", r.body);
        // Not a provider in member_of / in_tree either.
        let r = client.get(&format!("/allocation_candidates?resources=VCPU:1&in_tree={other}")).await;
        assert_eq!((r.status, &r.body["allocation_requests"]), (200, &json!([])), "in_tree={other}");
    }
    // Dict-form allocation keys (1.12+) in upper case pass the key pattern
    // but name no provider; the consumer generation is checked first.
    let upper = uuid.to_uppercase();
    let consumer = uuid::Uuid::new_v4();
    let body = |generation: serde_json::Value| {
        json!({"allocations": {upper.clone(): {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
               "consumer_generation": generation, "consumer_type": "INSTANCE"})
    };
    let r = client.put(&format!("/allocations/{consumer}"), &body(json!(5))).await;
    assert_error(&r, 409, "stale consumer generation comes first");
    let r = client.put(&format!("/allocations/{consumer}"), &body(json!(null))).await;
    assert_error(&r, 400, "upper-case provider key");
    assert!(r.body.to_string().contains(&format!("Allocation for resource provider '{upper}' that does not exist.")));
    let r = client.post("/allocations", &json!({consumer.to_string(): body(json!(5))})).await;
    assert_error(&r, 409, "POST: stale consumer generation comes first");
    let r = client.post("/allocations", &json!({consumer.to_string(): body(json!(null))})).await;
    assert_error(&r, 400, "POST: upper-case provider key");
    let r = client.get(&format!("/allocations/{consumer}")).await;
    assert_eq!(r.body["allocations"], json!({}), "nothing was allocated");

    for other in [bare.clone(), format!("{{{aggregate}}}"), aggregate.to_uppercase()] {
        let r = client.get(&format!("/resource_providers?member_of={other}")).await;
        assert_eq!((r.status, &r.body["resource_providers"]), (200, &json!([])), "member_of={other}");
        let r = client.get(&format!("/allocation_candidates?resources=VCPU:1&member_of={other}")).await;
        assert_eq!((r.status, &r.body["allocation_requests"]), (200, &json!([])), "member_of={other}");
    }
    // The query strings' checker wants the dashed form.
    for param in ["uuid", "in_tree"] {
        let r = client.get(&format!("/resource_providers?{param}={bare}")).await;
        assert_error(&r, 400, &format!("{param}={bare}"));
        assert!(r.body.to_string().contains("is not a 'uuid'"), "{:?}", r.body);
        let r = client.get(&format!("/resource_providers?{param}={}", uuid.to_uppercase())).await;
        assert_eq!((r.status, &r.body["resource_providers"]), (200, &json!([])), "{param} in upper case");
    }
    // The canonical spelling still finds everything, untouched.
    let r = client.get(&format!("/resource_providers/{uuid}/traits")).await;
    assert_eq!(r.body["traits"], json!(["HW_CPU_X86_AVX"]));
    let r = client.get(&format!("/resource_providers/{uuid}/aggregates")).await;
    assert_eq!(r.body["aggregates"], json!([aggregate]));
    let r = client.get(&format!("/resource_providers?member_of={aggregate}")).await;
    assert_eq!(r.body["resource_providers"].as_array().map(Vec::len), Some(1));
    let r = client.get(&format!("/allocation_candidates?resources=VCPU:1&in_tree={uuid}")).await;
    assert_eq!(r.body["allocation_requests"].as_array().map(Vec::len), Some(1));
    let r = client.get("/resource_providers").await;
    assert_eq!(r.body["resource_providers"].as_array().map(Vec::len), Some(1), "no child was created");

    // A new provider's own uuid: any spelling, stored canonically.
    let new = uuid::Uuid::new_v4();
    let r = client.post("/resource_providers", &json!({"name": "braced", "uuid": format!("{{{new}}}")})).await;
    assert_eq!((r.status, r.body["uuid"].as_str()), (200, Some(new.to_string().as_str())), "{:?}", r.body);
}

/// A query string that is not UTF-8 is a 400 wherever upstream validates
/// the query (webob's decode error, in Python's words).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_strings_that_are_not_utf8_are_refused() {
    let server = TestServer::start("query-utf8").await;
    let client = server.client();
    for path in [
        "/resource_providers?name=%C3%28",
        "/allocation_candidates?resources=VCPU:1&name=%C3%28",
        "/traits?name=%C3%28",
    ] {
        let r = client.get(path).await;
        assert_error(&r, 400, path);
        let detail = r.body["errors"][0]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(
                "Invalid query string parameters: 'utf-8' codec can't decode byte 0xc3 in position 0: invalid continuation byte"
            ),
            "{path}: {detail}"
        );
    }
}

/// A microversion that parses but is out of range is a 406 (placement reads
/// `X.Y` with Python's `int()`, Nova with its regex; both take huge numbers),
/// a malformed one a 400; `latest` is case-sensitive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microversions_out_of_range_are_406() {
    let server = TestServer::start("microversions").await;
    let client = server.client();
    let placement = |v: &str| format!("placement {v}");
    for (version, status) in
        [("1.-2", 406), ("99999999999999999999.1", 406), ("-1.2", 406), ("LATEST", 400), ("1.2.3", 400), ("1", 400)]
    {
        let r =
            client.raw("GET", "/resource_providers", &[("openstack-api-version", &placement(version))], vec![]).await;
        assert_error(&r, status, version);
        let detail = r.body["errors"][0]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("Invalid microversion: "), "{version}: {detail}");
    }
    let r = client.raw("GET", "/resource_providers", &[("openstack-api-version", "placement 1.+2")], vec![]).await;
    assert_eq!(r.status, 200, "int() reads a sign: {:?}", r.body);

    // Nova: the same numbers through its own syntax and error body.
    for (version, status, fault) in [
        ("99999999999999999999.1", 406, "computeFault"),
        ("2.-1", 400, "badRequest"),
        ("02.1", 400, "badRequest"),
        ("Latest", 400, "badRequest"),
    ] {
        let header = format!("compute {version}");
        let r = client.raw("GET", "/compute/v2.1/flavors", &[("openstack-api-version", &header)], vec![]).await;
        assert_eq!(
            (r.status, r.body[fault]["code"].as_u64()),
            (status, Some(u64::from(status))),
            "compute {version}: {:?}",
            r.body
        );
    }
    let r = client.raw("GET", "/compute/v2.1/flavors", &[("openstack-api-version", "compute 2.53")], vec![]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
}

/// `resource_provider_generation` is validated as an integer, so `3.0` is
/// one; a number beyond 64 bits is no provider's generation (409), on
/// traits and aggregates as on inventories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generations_are_compared_as_numbers() {
    let server = TestServer::start("float-generations").await;
    let client = server.client();
    let uuid = provider_with_inventory(&client, "rp", "VCPU", 8).await;
    let headers = [("content-type", "application/json"), ("openstack-api-version", "placement latest")];
    let traits = format!("/resource_providers/{uuid}/traits");
    let aggregates = format!("/resource_providers/{uuid}/aggregates");
    for huge in ["18446744073709551616", "9223372036854775808", "1e30"] {
        let body = format!("{{\"traits\": [], \"resource_provider_generation\": {huge}}}");
        let r = client.raw("PUT", &traits, &headers, body.into_bytes()).await;
        assert_error(&r, 409, &format!("traits at {huge}"));
        assert_eq!(r.body["errors"][0]["code"], "placement.concurrent_update");
        let body = format!("{{\"aggregates\": [], \"resource_provider_generation\": {huge}}}");
        let r = client.raw("PUT", &aggregates, &headers, body.into_bytes()).await;
        assert_error(&r, 409, &format!("aggregates at {huge}"));
    }
    let r =
        client.raw("PUT", &traits, &headers, b"{\"traits\": [], \"resource_provider_generation\": 1.0}".to_vec()).await;
    assert_eq!((r.status, &r.body["resource_provider_generation"]), (200, &json!(1)), "{:?}", r.body);
    let r = client
        .raw("PUT", &aggregates, &headers, b"{\"aggregates\": [], \"resource_provider_generation\": 1e0}".to_vec())
        .await;
    assert_eq!((r.status, &r.body["resource_provider_generation"]), (200, &json!(2)), "{:?}", r.body);
}

/// One HTTP/1.1 request over a plain socket (clients refuse such URIs
/// themselves): the status and the JSON body.
async fn raw_http(base_url: &str, target: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base_url.trim_start_matches("http://").trim_end_matches('/');
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!("GET {target} HTTP/1.1\r\nhost: {addr}\r\nx-auth-token: admin\r\nconnection: close\r\n\r\n");
    // The server may answer and close before it has read everything.
    let _ = socket.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

/// A request URI longer than hyper reads (65534 bytes) is a 414 with the
/// error body of the API the path belongs to, as every other error: hyper
/// answers it itself, with no body, before any API sees the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_too_long_has_the_api_error_body() {
    let server = TestServer::start("uri-too-long").await;
    let client = server.client();
    let base = client.base_url();
    for size in [70_000, 1_000_000] {
        let long = "a".repeat(size);
        let (status, body) = raw_http(&base, &format!("/resource_providers?name={long}")).await;
        let reply = crate::support::Reply { status, body };
        assert_error(&reply, 414, &format!("placement, {size} bytes"));
        assert_eq!(reply.body["errors"][0]["title"], "Request-URI Too Long");
    }
    let long = "a".repeat(70_000);
    let (status, body) = raw_http(&base, &format!("/compute/v2.1/flavors?name={long}")).await;
    assert_eq!((status, &body["computeFault"]["code"]), (414, &json!(414)), "compute: {body:?}");
    // Other requests are served as usual.
    let (status, body) = raw_http(&base, "/resource_providers").await;
    assert_eq!((status, &body["resource_providers"]), (200, &json!([])));
}
