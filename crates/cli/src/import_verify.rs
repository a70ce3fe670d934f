//! `berth import placement --verify URL`: ask the old Placement and berth
//! the same questions over HTTP and print every difference. For each
//! provider: the provider, its inventories, usages, traits, aggregates
//! and allocations; for each consumer found there: its allocations; and
//! allocation candidates for each flavor given (`--candidates`, or the
//! flavors of Nova's API database with `--nova-db`). Exits non-zero when
//! anything differs.
//!
//! The old Placement sets the pace, so it is asked three questions per
//! provider (inventories, aggregates, allocations) and one per consumer;
//! berth is asked all five per provider. Two of berth's answers are held
//! against what the old Placement's other answers say, which is what
//! upstream computes them from: a provider's traits against one listing
//! per trait in use (`GET /traits?associated=true`, then
//! `GET /resource_providers?required=T` for each), and its usages against
//! its allocations summed per class of its inventory (upstream's usage
//! query: every class with inventory, 0 when nothing is allocated).

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;

/// The `--verify` options of `berth import placement`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyOpts {
    /// The old Placement's endpoint (as in the keystone catalog), e.g.
    /// `http://controller:8778`.
    #[arg(long, value_name = "URL")]
    verify: Option<String>,
    /// berth's Placement endpoint.
    #[arg(long, value_name = "URL", requires = "verify")]
    berth: Option<String>,
    /// Token for the old Placement (noauth2: `admin`; keystone: an admin
    /// token).
    #[arg(long, env = "OS_TOKEN", default_value = "admin")]
    token: String,
    /// Token for berth (default: the same as --token).
    #[arg(long)]
    berth_token: Option<String>,
    /// A flavor to ask allocation candidates for, as `resources`
    /// (`VCPU:2,MEMORY_MB:2048,DISK_GB:20`) or a whole query string
    /// (`resources=VCPU:1&required=HW_CPU_X86_AVX2`). Repeatable.
    #[arg(long = "candidates", value_name = "QUERY")]
    candidates: Vec<String>,
    /// Nova's API database (`mysql://…/nova_api` or `postgresql://…`):
    /// ask allocation candidates for every flavor in it.
    #[arg(long, value_name = "URL")]
    nova_db: Option<String>,
    /// Requests in flight per Placement.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

const MICROVERSION: &str = "placement 1.39";

struct Side {
    name: &'static str,
    http: reqwest::Client,
    base: String,
    token: String,
}

struct Ctx {
    old: Side,
    new: Side,
}

impl Ctx {
    async fn get(&self, side: &Side, path: &str) -> anyhow::Result<(u16, Value)> {
        // A server that drops a reused keep-alive connection (uWSGI's
        // --http-socket does) fails the request without an answer: ask
        // again on a new connection.
        let mut attempt = 0;
        let response = loop {
            let sent = side
                .http
                .get(format!("{}{path}", side.base))
                .header("X-Auth-Token", &side.token)
                .header("OpenStack-API-Version", MICROVERSION)
                .header("Accept", "application/json")
                .send()
                .await;
            match sent {
                Ok(response) => break response,
                Err(err) if attempt < 5 && (err.is_connect() || err.is_request()) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                }
                Err(err) => return Err(err).with_context(|| format!("GET {path} from {}", side.name)),
            }
        };
        let status = response.status().as_u16();
        let body = response.bytes().await?;
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok((status, normalise(value)))
    }

    /// Both answers to `path`, normalised; a difference is returned as a
    /// printable line.
    async fn compare(&self, path: &str, canon: fn(Value) -> Value) -> anyhow::Result<(Option<String>, Value)> {
        let (old_status, old) = self.get(&self.old, path).await?;
        let line = self.compare_with(path, "old Placement", old_status, &old, canon).await?;
        Ok((line, old))
    }

    /// berth's answer to `path` against `expected` (what the old Placement
    /// answered, or what its other answers say; `label` names which).
    async fn compare_with(
        &self,
        path: &str,
        label: &str,
        old_status: u16,
        expected: &Value,
        canon: fn(Value) -> Value,
    ) -> anyhow::Result<Option<String>> {
        let (new_status, new) = self.get(&self.new, path).await?;
        let (old_c, new_c) = (canon(expected.clone()), canon(new));
        if old_status != new_status || old_c != new_c {
            return Ok(Some(format!(
                "GET {path}: {label} {old_status} {} | berth {new_status} {}",
                short(&old_c),
                short(&new_c)
            )));
        }
        Ok(None)
    }
}

/// What upstream's `GET /resource_providers/{uuid}/usages` answers, from
/// the provider's inventories and allocations: every class with
/// inventory, its allocations summed (0 when none).
fn usages_from(inventories: &Value, allocations: &Value) -> Value {
    let mut usages = serde_json::Map::new();
    if let Some(classes) = inventories["inventories"].as_object() {
        for class in classes.keys() {
            let used: i64 = allocations["allocations"]
                .as_object()
                .map(|consumers| {
                    consumers.values().filter_map(|consumer| consumer["resources"][class.as_str()].as_i64()).sum()
                })
                .unwrap_or(0);
            usages.insert(class.clone(), Value::from(used));
        }
    }
    serde_json::json!({
        "resource_provider_generation": allocations["resource_provider_generation"],
        "usages": usages,
    })
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 400 {
        format!("{}…", &text[..text.char_indices().take_while(|(i, _)| *i < 400).last().map_or(0, |(i, _)| i)])
    } else {
        text
    }
}

/// Drop what legitimately differs between two deployments (`links`
/// carry each service's own URL prefix) and sort the lists whose order
/// the API leaves open (traits, aggregates).
fn normalise(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter().filter(|(key, _)| key != "links").map(|(key, value)| (key, normalise(value))).collect(),
        ),
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(normalise).collect();
            if items.iter().all(Value::is_string) {
                items.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
            Value::Array(items)
        }
        other => other,
    }
}

fn same(value: Value) -> Value {
    value
}

/// Allocation candidates: the requests as a sorted list (their order is
/// the service's own), the summaries as they are.
fn candidates_canon(value: Value) -> Value {
    let Value::Object(mut map) = value else { return value };
    if let Some(Value::Array(requests)) = map.get_mut("allocation_requests") {
        requests.sort_by_key(|request| request.to_string());
    }
    Value::Object(map)
}

pub(crate) fn run(opts: &VerifyOpts) -> anyhow::Result<()> {
    let old_url = opts.verify.clone().context("--verify URL is required")?;
    let berth_url = opts.berth.clone().context("--berth URL (berth's Placement endpoint) is required with --verify")?;
    let mut flavors = opts.candidates.clone();
    if let Some(url) = &opts.nova_db {
        flavors.extend(nova_flavors(url)?);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // Connections are kept for berth; the old Placement gets a new one
    // per request (uWSGI's --http-socket drops reused ones).
    let ctx = Arc::new(Ctx {
        old: Side {
            name: "the old Placement",
            http: reqwest::Client::builder().pool_max_idle_per_host(0).build()?,
            base: old_url.trim_end_matches('/').to_owned(),
            token: opts.token.clone(),
        },
        new: Side {
            name: "berth",
            http: reqwest::Client::builder().pool_max_idle_per_host(opts.concurrency).build()?,
            base: berth_url.trim_end_matches('/').to_owned(),
            token: opts.berth_token.clone().unwrap_or_else(|| opts.token.clone()),
        },
    });
    let concurrency = opts.concurrency.max(1);
    let (differences, counts) = runtime.block_on(verify_all(ctx, flavors, concurrency))?;
    for line in &differences {
        println_out(line);
    }
    eprintln!(
        "berth: verify: {} providers, {} consumers, {} candidate queries compared; {} differences",
        counts.0,
        counts.1,
        counts.2,
        differences.len()
    );
    if differences.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{} differences between the old Placement and berth", differences.len())
    }
}

#[expect(clippy::print_stdout, reason = "the differences are the command's output")]
fn println_out(line: &str) {
    println!("{line}");
}

async fn verify_all(
    ctx: Arc<Ctx>,
    flavors: Vec<String>,
    concurrency: usize,
) -> anyhow::Result<(Vec<String>, (usize, usize, usize))> {
    let mut differences = Vec::new();
    let (_, old_list) = ctx.get(&ctx.old, "/resource_providers").await?;
    let (_, new_list) = ctx.get(&ctx.new, "/resource_providers").await?;
    let uuids = |list: &Value| -> BTreeSet<String> {
        list["resource_providers"]
            .as_array()
            .map(|items| items.iter().filter_map(|p| p["uuid"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let (old_uuids, new_uuids) = (uuids(&old_list), uuids(&new_list));
    for only in old_uuids.difference(&new_uuids) {
        differences.push(format!("provider {only}: only in the old Placement"));
    }
    for only in new_uuids.difference(&old_uuids) {
        differences.push(format!("provider {only}: only in berth"));
    }
    // The providers themselves (name, generation, parent, root) from the
    // two lists; then what hangs off each.
    let entries = |list: &Value| -> std::collections::HashMap<String, Value> {
        list["resource_providers"]
            .as_array()
            .map(|items| items.iter().filter_map(|p| Some((p["uuid"].as_str()?.to_owned(), p.clone()))).collect())
            .unwrap_or_default()
    };
    let (old_entries, new_entries) = (entries(&old_list), entries(&new_list));
    for uuid in old_uuids.intersection(&new_uuids) {
        if old_entries.get(uuid) != new_entries.get(uuid) {
            differences.push(format!(
                "GET /resource_providers/{uuid}: old Placement {} | berth {}",
                short(&old_entries[uuid]),
                short(&new_entries[uuid])
            ));
        }
    }
    // Every provider's traits, from the old Placement's listings: one per
    // trait that some provider has.
    let (status, associated) = ctx.get(&ctx.old, "/traits?associated=true").await?;
    anyhow::ensure!(status == 200, "GET /traits?associated=true from the old Placement: {status} {associated}");
    let mut traits: std::collections::HashMap<String, BTreeSet<String>> = std::collections::HashMap::new();
    for name in associated["traits"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        let (status, list) = ctx.get(&ctx.old, &format!("/resource_providers?required={name}")).await?;
        anyhow::ensure!(status == 200, "GET /resource_providers?required={name} from the old Placement: {status}");
        for uuid in uuids(&list) {
            traits.entry(uuid).or_default().insert(name.to_owned());
        }
    }
    let traits = Arc::new(traits);
    let old_entries = Arc::new(old_entries);
    // Providers, then the consumers their allocations name.
    let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for uuid in old_uuids.intersection(&new_uuids) {
        let (ctx, semaphore, uuid) = (ctx.clone(), semaphore.clone(), uuid.clone());
        let (traits, old_entries) = (traits.clone(), old_entries.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            let mut lines = Vec::new();
            let base = format!("/resource_providers/{uuid}");
            let (line, inventories) = ctx.compare(&format!("{base}/inventories"), same).await?;
            lines.extend(line);
            let (line, _) = ctx.compare(&format!("{base}/aggregates"), same).await?;
            lines.extend(line);
            let (line, allocations) = ctx.compare(&format!("{base}/allocations"), same).await?;
            lines.extend(line);
            let usages = usages_from(&inventories, &allocations);
            let label = "old Placement (its inventories and allocations)";
            lines.extend(ctx.compare_with(&format!("{base}/usages"), label, 200, &usages, same).await?);
            let names: Vec<&String> = traits.get(&uuid).into_iter().flatten().collect();
            let expected = serde_json::json!({
                "resource_provider_generation": old_entries[&uuid]["generation"],
                "traits": names,
            });
            let label = "old Placement (its trait listings)";
            lines.extend(ctx.compare_with(&format!("{base}/traits"), label, 200, &expected, same).await?);
            let consumers: Vec<String> =
                allocations["allocations"].as_object().map(|map| map.keys().cloned().collect()).unwrap_or_default();
            Ok::<_, anyhow::Error>((lines, consumers))
        });
    }
    let mut consumers = BTreeSet::new();
    while let Some(joined) = tasks.join_next().await {
        let (lines, found) = joined??;
        differences.extend(lines);
        consumers.extend(found);
    }
    for consumer in &consumers {
        let (ctx, semaphore, consumer) = (ctx.clone(), semaphore.clone(), consumer.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            let (line, _) = ctx.compare(&format!("/allocations/{consumer}"), same).await?;
            Ok((line.into_iter().collect(), Vec::new()))
        });
    }
    while let Some(joined) = tasks.join_next().await {
        differences.extend(joined??.0);
    }
    for flavor in &flavors {
        let query = if flavor.contains('=') { flavor.clone() } else { format!("resources={flavor}") };
        let (line, _) = ctx.compare(&format!("/allocation_candidates?{query}"), candidates_canon).await?;
        differences.extend(line);
    }
    differences.sort();
    Ok((differences, (old_uuids.len(), consumers.len(), flavors.len())))
}

/// The allocation-candidates query of every flavor in Nova's API database,
/// as Nova's scheduler builds it (`ResourceRequest.from_request_spec`):
/// see [`flavor_query`].
fn nova_flavors(url: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = crate::import_source::connect(url)?;
    let rows = conn
        .text_rows("SELECT id, vcpus, memory_mb, root_gb, ephemeral_gb, swap FROM flavors ORDER BY id")
        .map_err(|err| anyhow::anyhow!("reading flavors from Nova's database: {err}"))?;
    let specs = conn
        .text_rows(
            // `key` is a reserved word in MySQL, but not after a qualifier:
            // the same text for both databases.
            "SELECT s.flavor_id, s.key, s.value FROM flavor_extra_specs s \
             WHERE s.key LIKE 'resources%' OR s.key LIKE 'trait%' OR s.key = 'group_policy'",
        )
        .map_err(|err| anyhow::anyhow!("reading flavor extra specs from Nova's database: {err}"))?;
    let text = |row: &[Option<String>], idx: usize| row.get(idx).cloned().flatten().unwrap_or_default();
    let num = |row: &[Option<String>], idx: usize| -> i64 { text(row, idx).parse().unwrap_or(0) };
    let mut out = Vec::new();
    for row in rows {
        let id = text(&row, 0);
        let flavor = Flavor {
            vcpus: num(&row, 1),
            memory_mb: num(&row, 2),
            disk_gb: num(&row, 3) + num(&row, 4) + (num(&row, 5) + 1023) / 1024,
        };
        let extra: Vec<(String, String)> =
            specs.iter().filter(|spec| text(spec, 0) == id).map(|spec| (text(spec, 1), text(spec, 2))).collect();
        out.extend(flavor_query(&flavor, &extra));
    }
    out.dedup();
    Ok(out)
}

/// A flavor's standard amounts (disk: root + ephemeral + swap rounded up
/// to GiB).
struct Flavor {
    vcpus: i64,
    memory_mb: i64,
    disk_gb: i64,
}

/// The query Nova's scheduler sends for a flavor with these extra specs:
/// `resources[$S]:CLASS=N` and `trait[$S]:NAME=required|forbidden` in the
/// group of suffix `$S` (none: the unsuffixed group), `group_policy`;
/// then VCPU, MEMORY_MB and DISK_GB from the flavor in the unsuffixed
/// group for each class no group asks for (VCPU also not when PCPU is
/// asked for); zero amounts and empty groups dropped. Not translated (the
/// query then lacks them): CPU pinning, PCI, vTPM, memory encryption and
/// the other `hw:` specs, image properties, and Nova's prefilters
/// (`member_of` of aggregates, availability zones). None when no group is
/// left.
fn flavor_query(flavor: &Flavor, extra: &[(String, String)]) -> Option<String> {
    use std::collections::BTreeMap;
    #[derive(Default)]
    struct Group {
        resources: BTreeMap<String, i64>,
        required: BTreeSet<String>,
        forbidden: BTreeSet<String>,
    }
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut policy = None;
    for (key, value) in extra {
        if key == "group_policy" {
            if value == "none" || value == "isolate" {
                policy = Some(value.clone());
            }
            continue;
        }
        let Some((head, name)) = key.split_once(':') else { continue };
        let (prefix, suffix) = if let Some(suffix) = head.strip_prefix("resources") {
            ("resources", suffix)
        } else if let Some(suffix) = head.strip_prefix("trait") {
            ("trait", suffix)
        } else {
            continue;
        };
        if suffix.len() > 64 || !suffix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            continue;
        }
        let group = groups.entry(suffix.to_owned()).or_default();
        if prefix == "resources" {
            if let Ok(amount) = value.trim().parse::<i64>() {
                if amount >= 0 {
                    group.resources.insert(name.to_owned(), amount);
                }
            }
        } else if value == "required" {
            group.required.insert(name.to_owned());
        } else if value == "forbidden" {
            group.forbidden.insert(name.to_owned());
        }
    }
    let asked = |class: &str| groups.values().any(|group| group.resources.contains_key(class));
    let mut standard = Vec::new();
    if !asked("VCPU") && !asked("PCPU") {
        standard.push(("VCPU", flavor.vcpus));
    }
    if !asked("MEMORY_MB") {
        standard.push(("MEMORY_MB", flavor.memory_mb));
    }
    if !asked("DISK_GB") && flavor.disk_gb > 0 {
        standard.push(("DISK_GB", flavor.disk_gb));
    }
    let unsuffixed = groups.entry(String::new()).or_default();
    for (class, amount) in standard {
        unsuffixed.resources.insert(class.to_owned(), amount);
    }
    let mut params: Vec<(String, String)> = Vec::new();
    for (suffix, group) in &mut groups {
        group.resources.retain(|_, amount| *amount > 0);
        if group.resources.is_empty() && group.required.is_empty() && group.forbidden.is_empty() {
            continue;
        }
        let resources: Vec<String> = group.resources.iter().map(|(class, n)| format!("{class}:{n}")).collect();
        params.push((format!("resources{suffix}"), resources.join(",")));
        let traits: Vec<String> =
            group.required.iter().cloned().chain(group.forbidden.iter().map(|name| format!("!{name}"))).collect();
        if !traits.is_empty() {
            params.push((format!("required{suffix}"), traits.join(",")));
        }
    }
    if params.is_empty() {
        return None;
    }
    if let Some(policy) = policy {
        params.push(("group_policy".to_owned(), policy));
    }
    params.sort();
    Some(params.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join("&"))
}

#[cfg(test)]
mod tests {
    use super::{flavor_query, Flavor};

    fn specs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    const SMALL: Flavor = Flavor { vcpus: 2, memory_mb: 2048, disk_gb: 20 };

    #[test]
    fn a_plain_flavor_asks_for_its_standard_amounts() {
        let query = flavor_query(&SMALL, &[]);
        assert_eq!(query.as_deref(), Some("resources=DISK_GB:20,MEMORY_MB:2048,VCPU:2"));
        let no_disk = Flavor { disk_gb: 0, ..SMALL };
        assert_eq!(flavor_query(&no_disk, &[]).as_deref(), Some("resources=MEMORY_MB:2048,VCPU:2"));
    }

    #[test]
    fn unsuffixed_specs_replace_or_add_to_the_standard_amounts() {
        let extra = specs(&[
            ("resources:VCPU", "0"),
            ("resources:PCPU", "2"),
            ("resources:CUSTOM_GOLD", "1"),
            ("trait:HW_CPU_X86_AVX2", "required"),
            ("trait:CUSTOM_SLOW", "forbidden"),
            ("trait:CUSTOM_MAYBE", "preferred"),
            ("quota:cpu_shares", "100"),
        ]);
        assert_eq!(
            flavor_query(&SMALL, &extra).as_deref(),
            Some("required=HW_CPU_X86_AVX2,!CUSTOM_SLOW&resources=CUSTOM_GOLD:1,DISK_GB:20,MEMORY_MB:2048,PCPU:2")
        );
    }

    #[test]
    fn granular_groups_take_their_classes_from_the_unsuffixed_group() {
        // As Nova's ResourceRequest: a class some group asks for is not
        // added from the flavor; VCPU:0 in the unsuffixed group drops it.
        let extra = specs(&[
            ("resources1:VCPU", "1"),
            ("resources1:MEMORY_MB", "1024"),
            ("trait1:CUSTOM_RACK_A", "required"),
            ("resources2:VCPU", "1"),
            ("resources_ACCEL:CUSTOM_FPGA", "1"),
            ("trait_ACCEL:CUSTOM_FAST", "forbidden"),
            ("group_policy", "isolate"),
            ("resources3:VCPU", "0"),
        ]);
        assert_eq!(
            flavor_query(&SMALL, &extra).as_deref(),
            Some(
                "group_policy=isolate&required1=CUSTOM_RACK_A&required_ACCEL=!CUSTOM_FAST&resources=DISK_GB:20\
                 &resources1=MEMORY_MB:1024,VCPU:1&resources2=VCPU:1&resources_ACCEL=CUSTOM_FPGA:1"
            )
        );
        // An invalid policy is ignored (Nova warns); a trait-only group stays.
        let extra = specs(&[("group_policy", "sometimes"), ("trait1:CUSTOM_FAST", "required")]);
        assert_eq!(
            flavor_query(&SMALL, &extra).as_deref(),
            Some("required1=CUSTOM_FAST&resources=DISK_GB:20,MEMORY_MB:2048,VCPU:2&resources1=")
        );
    }
}
