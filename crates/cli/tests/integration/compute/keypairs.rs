//! `os-keypairs` as Nova 34 serves it: import and generation across
//! microversions, fingerprints checked against `ssh-keygen -l -E md5` and
//! `openssl x509 -fingerprint -sha1`, admins acting for other users
//! (2.10), paging (2.35), the `key_pairs` quota and name uniqueness
//! decided in the create's one write (so concurrent creates of one name
//! admit exactly one, across processes on PostgreSQL), rows that survive
//! a restart, and a boot with `key_name`: shown on the server, and its
//! public key handed to the agent with the build task.

use serde_json::{json, Value};

use super::support::{wait_status, Cloud, Hosts, Nova};

fn pg() -> bool {
    std::env::var("TEST_DATABASE_URL").is_ok_and(|u| !u.is_empty())
}

/// Tempest's `test_keypair_create_with_pub_key` key; fingerprint from
/// `ssh-keygen -l -E md5`.
const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCsNe3/1ILNCqFyfYWDeTKLD6jEXC2OQHLmietMWW+/vdaZq7KZEwO0jhglaFjU1mpqq4Gz5RX156sCTNM9vRbwKAxfsdF9laBYVsex3m3Wmui3uYrKyumsoJn2g9GNnG1PI1mrVjZ61i0GY3khna+wzlTpCCmy5HNlrmbj3XLqBUpipTOXmsnr4sChzC53KCd8LXuwc1i/CZPvF+3XipvAgFSE53pCtLOeB1kYMOBaiUPLQTWXR3JpckqFIQwhIH0zoHlJvZE8hh90XcPojYN56tI0OlrGqojbediJYD0rUsJu4weZpbn8vilb3JuDY+jwssnSA8wzBx3A/8y9Pp1B nova@ubuntu";
const RSA_MD5: &str = "61:5f:fe:c7:e0:fd:d7:4a:2b:52:6e:a6:f5:bf:da:27";

/// Keys made with `ssh-keygen -t ed25519` and `-t ecdsa -b 256/384/521`,
/// with the fingerprints `ssh-keygen -l -E md5` printed for them.
const SSH_KEYS: &[(&str, &str)] = &[
    (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBieUUS8Ig4rsQkCiNR62QXjgraDjV4cTPo1044yaD0A test@berth",
        "10:b0:6c:f2:e4:9c:cd:89:75:ee:e3:2b:98:c9:2b:49",
    ),
    (
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMHueI0lMUQlLGJFfktvOJSHnqPoTrRpb1ngy9fta8ioqhGXP7agQbJYZ1VMX9HdiKjX3+4v7oy+zfd/92iywaw= test@berth",
        "64:3a:3a:f4:db:e8:00:e2:53:e9:42:5f:08:8e:28:c5",
    ),
    (
        "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBExuOEtCiAX1+oAhfsmuAD3HuIh4Fnpo9W/v23rIHPJkd3NIP5Ka5O9ZtfDSyJBkTXqL5fXpIgw+8N0XH6O82Q6PtADzWNCuTXbhpaRxWY+1M0VqAP+NvPFZIxQi78oBNA== test@berth",
        "8d:9c:cd:70:63:e1:d6:f0:71:a9:23:60:f2:a7:97:3f",
    ),
    (
        "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBAFNsPWEan9b1Dhp/XdhufsWIojHBBmwtlZTEELvHRfCm1YtFnD6RsmNKRZSjd8C6k18u48LRqj9QdDPrwWE0/5zaAE1Sd4vH2/VBB+Cg/JCVOjTS14SEukYChEDpD5v+Jve+/6+rb9+td9jmlN7ArNwPXr2PthGHwItkNT/pReFGLim8w== test@berth",
        "4d:67:08:d7:a3:f4:cf:b6:26:b2:1c:f0:a7:52:84:db",
    ),
];

/// A certificate from `openssl req -x509 -newkey rsa:1024 -subj
/// /CN=alice`; fingerprint from `openssl x509 -fingerprint -sha1`
/// (lowercased, as Nova prints it).
const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIB/DCCAWWgAwIBAgIUfi4eqVhe15SiBpr+1KAZL12ViswwDQYJKoZIhvcNAQEL
BQAwEDEOMAwGA1UEAwwFYWxpY2UwHhcNMjYxMTI5MDAyNTI1WhcNMzYxMTI2MDAy
NTI1WjAQMQ4wDAYDVQQDDAVhbGljZTCBnzANBgkqhkiG9w0BAQEFAAOBjQAwgYkC
gYEA6IafMoKMXYnWlprn4h1MoOJwEeBP/7tH2ZfNcpVn5J3MLItMXqN74j/y9Psk
FXsIojIKG/NP+bv3y9vcjzB4GM+gyS5Za+ZbKtoAMaksvZE4uPgUEh1bbHnjEF5a
ULXxCkJFcwvcggSThLTes8dFwPC6UPWOd747kSOs2/156I0CAwEAAaNTMFEwHQYD
VR0OBBYEFGEaF+Ib3s7NgdZ6Ucw15zYOgOo8MB8GA1UdIwQYMBaAFGEaF+Ib3s7N
gdZ6Ucw15zYOgOo8MA8GA1UdEwEB/wQFMAMBAf8wDQYJKoZIhvcNAQELBQADgYEA
AGG5hrCI/0BfDiCbI3m/i6aE+bJaCAecV0VCdImByjsZM9XrY6LBM4ZQ21CMg8KJ
gdV3ANlwKzVQMbam+T141RDKYu+zGUTZV0KFi6LmXSR1yCbTQuoBTKlZSTp11EoB
kHgTgtUbefs1Dr5RbzdRRCSZRHHq7C7A/fNEQ37PR1Q=
-----END CERTIFICATE-----
";
const CERT_SHA1: &str = "84:c9:db:4b:bc:21:d3:ce:f7:d7:fb:6d:15:c9:b2:c3:d2:83:1e:b6";

fn message(answer: &super::support::Answer, fault: &str) -> String {
    answer.body[fault]["message"].as_str().unwrap_or_default().to_owned()
}

fn keys_of(list: &Value) -> Vec<String> {
    list["keypairs"]
        .as_array()
        .expect("keypairs")
        .iter()
        .map(|k| k["keypair"]["name"].as_str().expect("name").to_owned())
        .collect()
}

#[tokio::test]
async fn create_import_list_show_delete_across_microversions() {
    let cloud = Cloud::start("keypairs-versions", &[]).await;
    let alice = cloud.nova("alice:proj");

    // 2.1: generated (200, a private key, no type), listed, shown, 202.
    let v21 = alice.at("2.1");
    let created = v21.post("/os-keypairs", &json!({"keypair": {"name": "gen"}})).await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let kp = &created.body["keypair"];
    let keys: Vec<&str> = kp.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["private_key", "name", "public_key", "fingerprint", "user_id"]);
    assert!(kp["private_key"].as_str().unwrap().starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
    let public_key = kp["public_key"].as_str().unwrap().to_owned();
    assert!(public_key.starts_with("ssh-ed25519 ") && public_key.ends_with(" Generated-by-Nova"), "{public_key}");
    assert_eq!(kp["user_id"], "alice");
    // The server's fingerprint of the generated key is the one it gives
    // the same key imported.
    let again = v21.post("/os-keypairs", &json!({"keypair": {"name": "gen-again", "public_key": public_key}})).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body["keypair"]["fingerprint"], kp["fingerprint"]);
    assert!(again.body["keypair"].get("private_key").is_none());

    let shown = v21.get("/os-keypairs/gen").await;
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let s = &shown.body["keypair"];
    let keys: Vec<&str> = s.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["name", "public_key", "fingerprint", "user_id", "created_at", "deleted", "deleted_at", "id", "updated_at"]
    );
    assert_eq!((s["deleted"].clone(), s["deleted_at"].clone()), (json!(false), Value::Null));
    assert!(s["id"].as_i64().is_some_and(|id| id > 0));
    let listed = v21.get("/os-keypairs").await;
    assert_eq!(keys_of(&listed.body), ["gen", "gen-again"]);
    assert!(listed.body["keypairs"][0]["keypair"].get("type").is_none());
    assert!(listed.body.get("keypairs_links").is_none());
    assert_eq!(v21.delete("/os-keypairs/gen-again").await.status, 202);

    // 2.2: imported keys of every kind, with `type`, 201; delete 204.
    let v22 = alice.at("2.2");
    let rsa = v22.post("/os-keypairs", &json!({"keypair": {"name": "rsa", "public_key": RSA}})).await;
    assert_eq!(rsa.status, 201, "{:?}", rsa.body);
    assert_eq!(rsa.body["keypair"]["type"], "ssh");
    assert_eq!(rsa.body["keypair"]["fingerprint"], RSA_MD5);
    assert!(rsa.body["keypair"].get("private_key").is_none());
    for (idx, (key, md5)) in SSH_KEYS.iter().enumerate() {
        let name = format!("ssh-{idx}");
        let answer = v22.post("/os-keypairs", &json!({"keypair": {"name": name, "public_key": key}})).await;
        assert_eq!(answer.status, 201, "{key}: {:?}", answer.body);
        assert_eq!(answer.body["keypair"]["fingerprint"], *md5, "{key}");
    }
    let cert =
        v22.post("/os-keypairs", &json!({"keypair": {"name": "cert", "type": "x509", "public_key": CERT}})).await;
    assert_eq!(cert.status, 201, "{:?}", cert.body);
    assert_eq!(
        (cert.body["keypair"]["type"].clone(), cert.body["keypair"]["fingerprint"].clone()),
        (json!("x509"), json!(CERT_SHA1))
    );
    // An x509 pair generated (below 2.92): a certificate and a private key.
    let gen_cert = v22.post("/os-keypairs", &json!({"keypair": {"name": "gen-cert", "type": "x509"}})).await;
    assert_eq!(gen_cert.status, 201, "{:?}", gen_cert.body);
    let certificate = gen_cert.body["keypair"]["public_key"].as_str().unwrap().to_owned();
    assert!(certificate.starts_with("-----BEGIN CERTIFICATE-----\n"), "{certificate}");
    assert!(gen_cert.body["keypair"]["private_key"].as_str().is_some_and(|k| !k.is_empty()));
    let reimported = v22
        .post("/os-keypairs", &json!({"keypair": {"name": "cert-again", "type": "x509", "public_key": certificate}}))
        .await;
    assert_eq!(reimported.body["keypair"]["fingerprint"], gen_cert.body["keypair"]["fingerprint"]);
    let shown = v22.get("/os-keypairs/cert").await;
    assert_eq!(shown.body["keypair"]["type"], "x509");
    let listed = v22.get("/os-keypairs").await;
    assert_eq!(
        keys_of(&listed.body),
        ["cert", "cert-again", "gen", "gen-cert", "rsa", "ssh-0", "ssh-1", "ssh-2", "ssh-3"],
        "by name"
    );
    assert_eq!(listed.body["keypairs"][0]["keypair"]["type"], "x509");

    // Refusals, in Nova's words.
    let dup = v22.post("/os-keypairs", &json!({"keypair": {"name": "rsa", "public_key": RSA}})).await;
    assert_eq!((dup.status, message(&dup, "conflictingRequest")), (409, "Key pair 'rsa' already exists.".to_owned()));
    for bad in ["ssh-rsa JUNK nova@ubuntu", " ", &format!("ssh-rsa {} openstack@ubuntu", "A".repeat(2048))] {
        let answer = v22.post("/os-keypairs", &json!({"keypair": {"name": "bad", "public_key": bad}})).await;
        assert_eq!(
            (answer.status, message(&answer, "badRequest")),
            (400, "Keypair data is invalid: failed to generate fingerprint".to_owned()),
            "{bad}"
        );
    }
    let bad_cert =
        v22.post("/os-keypairs", &json!({"keypair": {"name": "bad", "type": "x509", "public_key": RSA}})).await;
    assert_eq!(bad_cert.status, 400);
    assert!(
        message(&bad_cert, "badRequest").starts_with("Keypair data is invalid: failed to generate X509 fingerprint.")
    );
    for name in ["", "key_/.\\@:", &"k".repeat(256), " lead"] {
        let answer = v22.post("/os-keypairs", &json!({"keypair": {"name": name}})).await;
        assert_eq!(answer.status, 400, "{name:?}: {:?}", answer.body);
        assert!(message(&answer, "badRequest").starts_with("Invalid input for field/attribute"), "{:?}", answer.body);
    }
    let typed_21 = v21.post("/os-keypairs", &json!({"keypair": {"name": "t", "type": "ssh"}})).await;
    assert_eq!(typed_21.status, 400, "no type before 2.2: {:?}", typed_21.body);
    let missing = v22.get("/os-keypairs/nope").await;
    assert_eq!(
        (missing.status, message(&missing, "itemNotFound")),
        (404, "Keypair nope not found for user alice".to_owned())
    );
    assert_eq!(v22.delete("/os-keypairs/nope").await.status, 404);
    assert_eq!(v22.delete("/os-keypairs/gen").await.status, 204);
    assert_eq!(v22.get("/os-keypairs/gen").await.status, 404);

    // 2.92: a public key is required; names may hold `@` and `.`.
    let v292 = alice.at("2.92");
    let generated = v292.post("/os-keypairs", &json!({"keypair": {"name": "g92"}})).await;
    assert_eq!(generated.status, 400, "{:?}", generated.body);
    let dotted = v292.post("/os-keypairs", &json!({"keypair": {"name": "me@host.x", "public_key": RSA}})).await;
    assert_eq!(dotted.status, 201, "{:?}", dotted.body);
    let dotted_91 =
        alice.at("2.91").post("/os-keypairs", &json!({"keypair": {"name": "me@host.y", "public_key": RSA}})).await;
    assert_eq!(dotted_91.status, 400, "{:?}", dotted_91.body);
    // 2.75: unknown query parameters are refused; before, ignored.
    assert_eq!(alice.at("2.74").get("/os-keypairs?foo=1").await.status, 200);
    let strict = alice.at("2.75").get("/os-keypairs?foo=1").await;
    assert_eq!(strict.status, 400, "{:?}", strict.body);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn key_pairs_belong_to_users_and_admins_act_for_them() {
    let mut cloud = Cloud::start("keypairs-users", &[]).await;
    let admin = cloud.nova("admin:proj").at("2.10");
    let alice = cloud.nova("alice:proj").at("2.10");
    let bob = cloud.nova("bob:proj").at("2.10");
    // The same name for two users of one project.
    for nova in [&alice, &bob] {
        let answer = nova.post("/os-keypairs", &json!({"keypair": {"name": "k", "public_key": RSA}})).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
    }
    // An admin creates, shows, lists and deletes for another user.
    let for_bob = admin
        .post("/os-keypairs", &json!({"keypair": {"name": "by-admin", "user_id": "bob", "public_key": RSA}}))
        .await;
    assert_eq!(for_bob.status, 201, "{:?}", for_bob.body);
    assert_eq!(for_bob.body["keypair"]["user_id"], "bob");
    assert_eq!(keys_of(&bob.get("/os-keypairs").await.body), ["by-admin", "k"]);
    assert_eq!(keys_of(&admin.get("/os-keypairs?user_id=bob").await.body), ["by-admin", "k"]);
    assert_eq!(keys_of(&admin.get("/os-keypairs").await.body), Vec::<String>::new(), "the admin's own");
    assert_eq!(admin.get("/os-keypairs/by-admin?user_id=bob").await.body["keypair"]["user_id"], "bob");
    // Others may not.
    let refused =
        alice.post("/os-keypairs", &json!({"keypair": {"name": "x", "user_id": "bob", "public_key": RSA}})).await;
    assert_eq!(
        (refused.status, message(&refused, "forbidden")),
        (403, "Policy doesn't allow os_compute_api:os-keypairs:create to be performed.".to_owned())
    );
    for path in ["/os-keypairs?user_id=bob", "/os-keypairs/k?user_id=bob"] {
        assert_eq!(alice.get(path).await.status, 403, "{path}");
    }
    assert_eq!(alice.delete("/os-keypairs/k?user_id=bob").await.status, 403);
    // Before 2.10 there is no `user_id`: in a body it is refused, in a
    // query ignored (the caller's own).
    let v29 = cloud.nova("admin:proj").at("2.9");
    let old = v29.post("/os-keypairs", &json!({"keypair": {"name": "x", "user_id": "bob", "public_key": RSA}})).await;
    assert_eq!(old.status, 400, "{:?}", old.body);
    assert_eq!(v29.get("/os-keypairs/k?user_id=bob").await.status, 404);
    assert_eq!(admin.delete("/os-keypairs/by-admin?user_id=bob").await.status, 204);
    assert_eq!(keys_of(&bob.get("/os-keypairs").await.body), ["k"]);

    // Key pairs live in the control database: a restart keeps them.
    let before = alice.get("/os-keypairs/k").await.body;
    cloud.restart().await;
    let alice = cloud.nova("alice:proj").at("2.10");
    assert_eq!(alice.get("/os-keypairs/k").await.body, before);
    assert_eq!(keys_of(&cloud.nova("bob:proj").get("/os-keypairs").await.body), ["k"]);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn listing_pages_by_name_from_2_35() {
    let cloud = Cloud::start("keypairs-paging", &[]).await;
    let alice = cloud.nova("alice:proj").at("2.35");
    for name in ["e", "a", "d", "c", "b"] {
        let answer = alice.post("/os-keypairs", &json!({"keypair": {"name": name, "public_key": RSA}})).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
    }
    let page = alice.get("/os-keypairs?limit=2").await;
    assert_eq!(page.status, 200, "{:?}", page.body);
    assert_eq!(keys_of(&page.body), ["a", "b"]);
    let next = page.body["keypairs_links"][0]["href"].as_str().expect("next link").to_owned();
    assert_eq!(page.body["keypairs_links"][0]["rel"], "next");
    assert!(next.ends_with("/os-keypairs?limit=2&marker=b"), "{next}");
    assert_eq!(keys_of(&alice.get("/os-keypairs?limit=2&marker=b").await.body), ["c", "d"]);
    let last = alice.get("/os-keypairs?limit=2&marker=d").await;
    assert_eq!(keys_of(&last.body), ["e"]);
    assert!(last.body.get("keypairs_links").is_none(), "not a full page");
    let bad = alice.get("/os-keypairs?marker=zz").await;
    assert_eq!((bad.status, message(&bad, "badRequest")), (400, "Marker zz could not be found.".to_owned()));
    assert_eq!(alice.get("/os-keypairs?limit=-1").await.status, 400);
    // Before 2.35 the parameters mean nothing.
    assert_eq!(keys_of(&alice.at("2.34").get("/os-keypairs?limit=2&marker=zz").await.body).len(), 5);
    cloud.check_invariants().await;
}

#[tokio::test]
async fn the_key_pairs_quota_is_per_user() {
    let cloud = Cloud::start("keypairs-quota", &[]).await;
    let admin = cloud.nova("admin");
    let set = admin.put("/os-quota-sets/proj", &json!({"quota_set": {"key_pairs": 2}})).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(set.body["quota_set"]["key_pairs"], 2);
    assert_eq!(admin.get("/os-quota-sets/proj").await.body["quota_set"]["key_pairs"], 2);
    let alice = cloud.nova("alice:proj");
    for name in ["k1", "k2"] {
        assert_eq!(
            alice.post("/os-keypairs", &json!({"keypair": {"name": name, "public_key": RSA}})).await.status,
            201
        );
    }
    let third = alice.post("/os-keypairs", &json!({"keypair": {"name": "k3", "public_key": RSA}})).await;
    assert_eq!((third.status, message(&third, "forbidden")), (403, "Quota exceeded, too many key pairs.".to_owned()));
    // As in Nova the quota is checked before the key and the name.
    let generated = alice.at("2.1").post("/os-keypairs", &json!({"keypair": {"name": "k3"}})).await;
    assert_eq!(generated.status, 403);
    let bad_key = alice.post("/os-keypairs", &json!({"keypair": {"name": "k1", "public_key": "junk"}})).await;
    assert_eq!(bad_key.status, 403, "{:?}", bad_key.body);
    // Per user: bob has his own two.
    let bob = cloud.nova("bob:proj");
    for name in ["k1", "k2"] {
        assert_eq!(bob.post("/os-keypairs", &json!({"keypair": {"name": name, "public_key": RSA}})).await.status, 201);
    }
    // A user's own limit applies to them; deleting frees a slot.
    let user_limit = admin.put("/os-quota-sets/proj?user_id=bob", &json!({"quota_set": {"key_pairs": 1}})).await;
    assert_eq!(user_limit.status, 200, "{:?}", user_limit.body);
    assert_eq!(admin.get("/os-quota-sets/proj?user_id=bob").await.body["quota_set"]["key_pairs"], 1);
    assert_eq!(bob.delete("/os-keypairs/k1").await.status, 204);
    let still = bob.post("/os-keypairs", &json!({"keypair": {"name": "k3", "public_key": RSA}})).await;
    assert_eq!(still.status, 403, "bob holds 1 of 1");
    assert_eq!(alice.delete("/os-keypairs/k2").await.status, 204);
    assert_eq!(alice.post("/os-keypairs", &json!({"keypair": {"name": "k3", "public_key": RSA}})).await.status, 201);
    // The limits document shows it.
    assert_eq!(alice.get("/limits").await.body["limits"]["absolute"]["maxTotalKeypairs"], 2);
    cloud.check_invariants().await;
}

/// Clients on every process (two on PostgreSQL).
async fn clients(cloud: &mut Cloud, token: &str) -> Vec<Nova> {
    if pg() {
        cloud.add_process(&[]).await;
    }
    let mut clients = vec![cloud.nova(token)];
    for sibling in &cloud.siblings {
        clients.push(Nova::new(&sibling.base, token));
    }
    clients
}

#[tokio::test]
async fn concurrent_creates_of_one_name_admit_exactly_one() {
    let mut cloud = Cloud::start("keypairs-race", &[]).await;
    let clients = clients(&mut cloud, "alice:proj").await;
    for round in 0..3 {
        let name = format!("race{round}");
        let mut creates = Vec::new();
        for i in 0..24 {
            let nova = clients[i % clients.len()].clone();
            let body = if i % 2 == 0 {
                json!({"keypair": {"name": name, "public_key": RSA}})
            } else {
                json!({"keypair": {"name": name, "public_key": SSH_KEYS[0].0}})
            };
            creates.push(tokio::spawn(async move { nova.post("/os-keypairs", &body).await }));
        }
        let (mut won, mut lost) = (Vec::new(), 0);
        for create in creates {
            let answer = create.await.expect("join");
            match answer.status {
                201 => won.push(answer.body["keypair"]["fingerprint"].clone()),
                409 => {
                    assert_eq!(message(&answer, "conflictingRequest"), format!("Key pair '{name}' already exists."));
                    lost += 1;
                }
                other => panic!("unexpected {other}: {:?}", answer.body),
            }
        }
        assert_eq!((won.len(), lost), (1, 23), "round {round}");
        // Every process shows the winner's key.
        for nova in &clients {
            assert_eq!(nova.get(&format!("/os-keypairs/{name}")).await.body["keypair"]["fingerprint"], won[0]);
        }
    }
    // The quota at the edge: 20 different names against a limit of 5.
    let set = cloud.nova("admin").put("/os-quota-sets/proj", &json!({"quota_set": {"key_pairs": 8}})).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    let mut creates = Vec::new();
    for i in 0..20 {
        let nova = clients[i % clients.len()].clone();
        let body = json!({"keypair": {"name": format!("q{i}"), "public_key": RSA}});
        creates.push(tokio::spawn(async move { nova.post("/os-keypairs", &body).await.status }));
    }
    let mut statuses = Vec::new();
    for create in creates {
        statuses.push(create.await.expect("join"));
    }
    let created = statuses.iter().filter(|s| **s == 201).count();
    let refused = statuses.iter().filter(|s| **s == 403).count();
    assert_eq!((created, refused), (5, 15), "3 held + 5 = the limit of 8: {statuses:?}");
    assert_eq!(keys_of(&clients[0].get("/os-keypairs").await.body).len(), 8);
    cloud.check_invariants().await;
}

const GHOST: &str = "kghost0";

/// Register `GHOST`, whose work nobody takes but this test, with a
/// compute node provider and inventory, as an agent would.
async fn ghost_host(cloud: &Cloud) {
    let client = cloud.server.client();
    let reply = client
        .post(
            "/agent/v1/register",
            &json!({"agent": "kghost", "hosts": [{"host": GHOST, "vcpus": 8, "memory_mb": 8192, "local_gb": 100}]}),
        )
        .await;
    assert_eq!(reply.status, 200, "register: {:?}", reply.body);
    let node = reply.body["hosts"][0]["node_uuid"].as_str().expect("node uuid").to_owned();
    let created = client.post("/resource_providers", &json!({"name": GHOST, "uuid": node})).await;
    assert!(matches!(created.status, 200 | 201), "provider: {:?}", created.body);
    let inventories = json!({"resource_provider_generation": 0, "inventories": {
        "VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}, "DISK_GB": {"total": 100}}});
    let put = client.put(&format!("/resource_providers/{node}/inventories"), &inventories).await;
    assert_eq!(put.status, 200, "inventories: {:?}", put.body);
}

#[tokio::test]
async fn a_boot_with_key_name_shows_it_and_hands_the_key_to_the_agent() {
    let cloud = Cloud::start("keypairs-boot", &[]).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    let alice = cloud.nova("alice:proj");
    let bob = cloud.nova("bob:proj");
    let imported = alice.post("/os-keypairs", &json!({"keypair": {"name": "mine", "public_key": SSH_KEYS[0].0}})).await;
    assert_eq!(imported.status, 201, "{:?}", imported.body);
    assert_eq!(bob.post("/os-keypairs", &json!({"keypair": {"name": "bobs", "public_key": RSA}})).await.status, 201);

    // Unknown names, and another user's key pair, are Nova's 400.
    for key_name in ["nokey", "bobs"] {
        let refused = alice.boot("x", &flavor, &image, json!({"key_name": key_name})).await;
        assert_eq!(
            (refused.status, message(&refused, "badRequest")),
            (400, "Invalid key_name provided.".to_owned()),
            "{key_name}"
        );
    }

    // Booted on a host whose tasks this test takes: the build task
    // carries the public key.
    ghost_host(&cloud).await;
    let booted = alice.boot("vm", &flavor, &image, json!({"key_name": "mine"})).await;
    assert_eq!(booted.status, 202, "{:?}", booted.body);
    let id = booted.body["server"]["id"].as_str().expect("id").to_owned();
    let work = cloud.server.client();
    let mut build = Value::Null;
    for _ in 0..30 {
        let polled = work.get("/agent/v1/work?agent=kghost&wait=1").await;
        assert_eq!(polled.status, 200, "{:?}", polled.body);
        if let Some(task) =
            polled.body["tasks"].as_array().and_then(|t| t.iter().find(|t| t["instance"] == id.as_str()))
        {
            build = task.clone();
            break;
        }
    }
    assert_eq!(build["kind"], "build", "{build}");
    assert_eq!(build["key_data"], SSH_KEYS[0].0);
    let event = json!({"events": [{"instance": id, "host": GHOST, "kind": "spawned", "task": build["id"]}]});
    assert_eq!(work.post("/agent/v1/events", &event).await.status, 200);
    let server = wait_status(&alice, &id, "ACTIVE").await;
    assert_eq!(server["key_name"], "mine");
    // Deleting the key pair later changes nothing on the server (its key
    // was copied, as Nova's key_data).
    assert_eq!(alice.delete("/os-keypairs/mine").await.status, 204);
    assert_eq!(alice.get(&format!("/servers/{id}")).await.body["server"]["key_name"], "mine");

    cloud.check_invariants().await;
}

#[tokio::test]
async fn a_server_booted_with_a_key_pair_goes_active_and_shows_its_name() {
    let mut cloud = Cloud::start("keypairs-active", &[]).await;
    cloud.add_agent(Hosts::new("kp", 1, &[])).await;
    let admin = cloud.nova("admin");
    let flavor = admin.flavor("f", 1, 64, 1).await;
    let image = admin.image("img", json!({})).await;
    let alice = cloud.nova("alice:proj");
    assert_eq!(alice.post("/os-keypairs", &json!({"keypair": {"name": "mine", "public_key": RSA}})).await.status, 201);
    let plain = alice.boot_id("plain", &flavor, &image).await;
    let booted = alice.boot("vm", &flavor, &image, json!({"key_name": "mine", "min_count": 2})).await;
    assert_eq!(booted.status, 202, "{:?}", booted.body);
    let servers = admin.wait_all_settled().await;
    assert_eq!(servers.len(), 3);
    for server in &servers {
        assert_eq!(server["status"], "ACTIVE", "{server}");
        let want = if server["id"] == plain.as_str() { Value::Null } else { json!("mine") };
        assert_eq!(server["key_name"], want, "{server}");
    }
    cloud.check_invariants().await;
}
