//! Operator options of GET /allocation_candidates over HTTP:
//! `--max-allocation-candidates` caps the candidates (breadth-first across
//! hosts) and `--randomize-allocation-candidates` samples them.

use std::collections::BTreeSet;

use crate::support::{provider_with_inventory, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_and_randomize() {
    let server = TestServer::start_with_args(
        "cand-opts",
        &["--max-allocation-candidates", "3", "--randomize-allocation-candidates"],
    )
    .await;
    let client = server.client();
    let mut hosts = BTreeSet::new();
    for n in 0..6 {
        hosts.insert(provider_with_inventory(&client, &format!("host{n}"), "VCPU", 4).await);
    }
    let mut samples = BTreeSet::new();
    for _ in 0..12 {
        let r = client.get("/allocation_candidates?resources=VCPU:1").await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let chosen: BTreeSet<String> = r.body["allocation_requests"]
            .as_array()
            .expect("allocation_requests")
            .iter()
            .flat_map(|a| a["allocations"].as_object().expect("allocations").keys().cloned())
            .collect();
        assert_eq!(chosen.len(), 3, "the cap allows exactly 3 candidates, each on its own host: {:?}", r.body);
        assert!(chosen.is_subset(&hosts));
        let summaries: BTreeSet<String> =
            r.body["provider_summaries"].as_object().expect("summaries").keys().cloned().collect();
        assert_eq!(summaries, chosen, "summaries cover exactly the returned candidates");
        samples.insert(chosen);
    }
    assert!(samples.len() > 1, "randomized sampling must not always pick the same hosts");
    let hosts_seen: BTreeSet<&String> = samples.iter().flatten().collect();
    assert!(hosts_seen.len() > 3, "over 12 requests the capped samples must reach beyond the first 3 hosts");
    // A cap that cut viable candidates is never silent.
    let capped = server.metric("berth_allocation_candidates_capped_total").await;
    assert_eq!(capped, 12, "every capped answer is counted");
}
