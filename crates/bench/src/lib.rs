//! berth-bench: the load generators behind `berth bench`, over real HTTP
//! on loopback.
//!
//! This crate owns the benchmarks' options (a clap [`BenchOpts`] the
//! binary embeds as its `bench` subcommand), the clients that drive a
//! berth (and the real Placement), the processes they start and the
//! figures they print. Each benchmark is a module with its options and
//! `run`; what they share (processes, the admin client, percentiles,
//! metrics, the seeded random numbers) lives in [`common`], which uses no
//! benchmark module.
//!
//! What it must not do: depend on the binary crate (`berth`) or be a
//! dependency of any crate but it (checked by the tidy test), start a
//! server in-process, or read the environment for its own configuration.
//! Which executables serve and play agents is passed in ([`Binaries`]);
//! the benchmarks start them as separate processes, so they measure what
//! a deployment runs.

mod auth;
mod boot;
mod candidates;
mod common;
mod dashboard;
mod energy;
mod guests;
mod leases;
mod soak;
mod write;

pub use common::Binaries;

/// Options of `berth bench`.
#[derive(Debug, clap::Args)]
pub struct BenchOpts {
    #[command(subcommand)]
    which: BenchKind,
}

#[derive(Debug, clap::Subcommand)]
enum BenchKind {
    /// Create providers with inventories, traits and aggregates (4 requests each).
    Write(write::WriteOpts),
    /// GET /allocation_candidates latency, throughput and claims on the
    /// upstream perfload shapes.
    Candidates(candidates::CandidatesOpts),
    /// Boots through the compute API until ACTIVE, with agent processes.
    Boot(boot::BootOpts),
    /// Reservations: lease admission, availability queries and lease events.
    Leases(leases::LeasesOpts),
    /// The server lifecycle under churn and agent crashes (`kill -9`),
    /// then an audit: drift, orphans, over-capacity, the heal's findings.
    Soak(soak::SoakOpts),
    /// GET /compute/v2.1/servers with Keystone auth vs noauth2, and
    /// Keystone calls per distinct token.
    Auth(auth::AuthOpts),
    /// The operator dashboard's data endpoints at scale (hosts, servers,
    /// leases), optionally kept up for the browser measurement.
    Dashboard(dashboard::DashboardOpts),
    /// Power management of the reservation pool over a year: energy vs
    /// always-on for berth's policy, a Slurm-like and a Watcher-like one
    /// (a simulation over the server's pure policy code).
    Energy(energy::EnergyOpts),
    /// Real guests through `berth agent --driver libvirt` on this
    /// machine: time to ACTIVE and to the guest's marker with a cold and
    /// a warm image cache, agent CPU and RSS and QEMU memory per guest.
    Guests(guests::GuestsOpts),
}

/// Runs the benchmark `opts` names on a runtime of its own, starting
/// servers and agents from `binaries`.
pub fn run(opts: BenchOpts, binaries: &Binaries) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match opts.which {
        BenchKind::Write(w) => runtime.block_on(write::run(w, binaries)),
        BenchKind::Candidates(c) => runtime.block_on(candidates::run(c, binaries)),
        BenchKind::Boot(b) => runtime.block_on(boot::run(b, binaries)),
        BenchKind::Leases(l) => runtime.block_on(leases::run(l, binaries)),
        BenchKind::Soak(s) => runtime.block_on(soak::run(s, binaries)),
        BenchKind::Auth(a) => runtime.block_on(auth::run(a, binaries)),
        BenchKind::Dashboard(d) => runtime.block_on(dashboard::run(d, binaries)),
        BenchKind::Energy(e) => energy::run(e),
        BenchKind::Guests(g) => runtime.block_on(guests::run(g, binaries)),
    }
}
