//! `berth import placement --verify URL`: ask the old Placement and berth
//! the same questions over HTTP and print every difference. For each
//! provider: the provider, its inventories, usages, traits, aggregates
//! and allocations; for each consumer found there: its allocations; and
//! allocation candidates for each flavor given (`--candidates`, or the
//! flavors of Nova's API database with `--nova-db`). Exits non-zero when
//! anything differs.

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
        let (new_status, new) = self.get(&self.new, path).await?;
        let (old_c, new_c) = (canon(old.clone()), canon(new));
        if old_status != new_status || old_c != new_c {
            let line = format!(
                "GET {path}: old Placement {old_status} {} | berth {new_status} {}",
                short(&old_c),
                short(&new_c)
            );
            return Ok((Some(line), old));
        }
        Ok((None, old))
    }
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
    // Providers, then the consumers their allocations name.
    let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for uuid in old_uuids.intersection(&new_uuids) {
        let (ctx, semaphore, uuid) = (ctx.clone(), semaphore.clone(), uuid.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            let mut lines = Vec::new();
            let mut consumers = Vec::new();
            for suffix in ["/inventories", "/usages", "/traits", "/aggregates", "/allocations"] {
                let (line, old) = ctx.compare(&format!("/resource_providers/{uuid}{suffix}"), same).await?;
                lines.extend(line);
                if suffix == "/allocations" {
                    if let Some(map) = old["allocations"].as_object() {
                        consumers.extend(map.keys().cloned());
                    }
                }
            }
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

/// The `resources` of every flavor in Nova's API database, as Nova's
/// scheduler asks for them (`resources_from_flavor`: disk is root plus
/// ephemeral plus swap rounded up to GiB; a flavor's `resources:*` extra
/// specs replace the standard amounts).
fn nova_flavors(url: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = crate::import_source::connect(url)?;
    let rows = conn
        .text_rows("SELECT id, vcpus, memory_mb, root_gb, ephemeral_gb, swap FROM flavors ORDER BY id")
        .map_err(|err| anyhow::anyhow!("reading flavors from Nova's database: {err}"))?;
    let specs = conn
        .text_rows("SELECT flavor_id, spec_key, spec_value FROM flavor_extra_specs WHERE spec_key LIKE 'resources%'")
        .map_err(|err| anyhow::anyhow!("reading flavor extra specs from Nova's database: {err}"))?;
    let num = |row: &[Option<String>], idx: usize| -> i64 {
        row.get(idx).cloned().flatten().and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let mut out = Vec::new();
    for row in rows {
        let id = row.first().cloned().flatten().unwrap_or_default();
        let swap_gb = (num(&row, 5) + 1023) / 1024;
        let mut resources: Vec<(String, i64)> = vec![
            ("VCPU".to_owned(), num(&row, 1)),
            ("MEMORY_MB".to_owned(), num(&row, 2)),
            ("DISK_GB".to_owned(), num(&row, 3) + num(&row, 4) + swap_gb),
        ];
        for spec in specs.iter().filter(|spec| spec.first().cloned().flatten().as_deref() == Some(id.as_str())) {
            let key = spec.get(1).cloned().flatten().unwrap_or_default();
            // Granular groups (`resources1:`) need their own query: skipped.
            let Some(class) = key.strip_prefix("resources:") else { continue };
            let amount = num(spec, 2);
            resources.retain(|(name, _)| name != class);
            resources.push((class.to_owned(), amount));
        }
        let text: Vec<String> = resources
            .iter()
            .filter(|(_, amount)| *amount > 0)
            .map(|(name, amount)| format!("{name}:{amount}"))
            .collect();
        if !text.is_empty() {
            out.push(text.join(","));
        }
    }
    out.dedup();
    Ok(out)
}
