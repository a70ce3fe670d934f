//! `berth import placement`: adopt berth under a running Nova. `--from
//! URL` reads the old Placement's database (MariaDB/MySQL or PostgreSQL)
//! and loads it into berth's store, one planned write per batch
//! ([`berth_core::import`]); `--verify URL` compares what the old
//! Placement and berth answer over HTTP ([`crate::import_verify`]).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use berth_store::placement_source::read_placement;

/// `berth import …`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImportOpts {
    #[command(subcommand)]
    what: ImportWhat,
}

#[derive(Debug, clap::Subcommand)]
enum ImportWhat {
    /// Import an OpenStack Placement's database (--from), or compare an
    /// old Placement with berth over HTTP (--verify).
    Placement(PlacementOpts),
}

/// `berth import placement`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["from", "verify"])))]
pub(crate) struct PlacementOpts {
    /// The old Placement's database: `mysql://user:pass@host/placement`
    /// (MariaDB/MySQL) or `postgresql://user@host/placement`. Only read.
    #[arg(long)]
    from: Option<String>,
    /// Bring the rows over a berth store that already holds placement data
    /// (the source's rows win under the same uuid).
    #[arg(long)]
    merge: bool,
    /// Providers per planned write.
    #[arg(long, default_value_t = 1000)]
    provider_batch: usize,
    /// Consumers per planned write.
    #[arg(long, default_value_t = 5000)]
    consumer_batch: usize,
    /// Directory of berth's embedded SQLite database (as `berth serve`).
    #[arg(long, env = "BERTH_DATA_DIR", default_value = "berth-data")]
    data_dir: PathBuf,
    /// berth's database URL (`postgres://…`, `sqlite://PATH`), as `berth serve`.
    #[arg(long, env = "BERTH_DATABASE")]
    database: Option<String>,
    #[command(flatten)]
    verify: crate::import_verify::VerifyOpts,
}

pub(crate) fn run(opts: ImportOpts) -> anyhow::Result<()> {
    let ImportWhat::Placement(opts) = opts.what;
    match &opts.from {
        Some(url) => import(url, &opts),
        None => crate::import_verify::run(&opts.verify),
    }
}

fn import(url: &str, opts: &PlacementOpts) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut source = crate::import_source::connect(url)?;
    let dump =
        read_placement(source.as_mut()).with_context(|| format!("reading {}", crate::import_source::redact(url)))?;
    drop(source);
    let read_secs = started.elapsed().as_secs_f64();
    let store = crate::serve::open_store(opts.database.as_deref(), &opts.data_dir, None)?;
    let app = Arc::new(berth_core::App::new(store)?);
    let sizes = berth_core::import::BatchSizes { providers: opts.provider_batch, consumers: opts.consumer_batch };
    let report = berth_core::import::import_placement(&app, &dump, opts.merge, sizes)?;
    let c = &dump.counts;
    let w = &report.written;
    let n_classes_custom = dump.resource_classes.iter().filter(|(_, name, _)| name.starts_with("CUSTOM_")).count();
    let n_traits_custom = dump.traits.iter().filter(|(name, _)| name.starts_with("CUSTOM_")).count();
    let n_with_parent = dump.providers.iter().filter(|p| p.parent.is_some()).count();
    let n_typed = dump.consumers.iter().filter(|c| c.row.consumer_type.is_some()).count();
    let lines = [
        format!("resource classes (custom): {n_classes_custom} read, {} written", w.resource_classes),
        format!("traits: {} read ({n_traits_custom} custom), {} new to berth", dump.traits.len(), w.traits),
        format!(
            "providers: {} read ({n_with_parent} with a parent), {} rows written",
            dump.providers.len(),
            w.providers
        ),
        format!("inventories: {} read; {} providers' inventories written", c.inventories, w.inventories),
        format!("provider traits: {} providers' traits written", w.provider_traits),
        format!("aggregates: {} read; {} providers' aggregates written", c.aggregates, w.provider_aggregates),
        format!("projects: {} read; users: {} read; consumer types: {} read", c.projects, c.users, c.consumer_types),
        format!(
            "consumers: {} read ({n_typed} with a consumer type, {} without allocations skipped), {} written",
            dump.consumers.len() + c.empty_consumers,
            c.empty_consumers,
            w.consumers
        ),
        format!("allocations: {} read", c.allocations),
    ];
    for line in lines {
        eprintln!("berth: import: {line}");
    }
    let rss = peak_rss_kib().map(|kib| format!(", peak RSS {} MiB", kib / 1024)).unwrap_or_default();
    if report.written.is_empty() {
        eprintln!("berth: import: nothing to change: berth already holds this Placement's data");
    } else {
        eprintln!("berth: import: {} planned writes committed", report.writes);
    }
    eprintln!(
        "berth: import: done in {:.1} s (reading the old database {read_secs:.1} s){rss}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// This process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
