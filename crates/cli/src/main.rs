//! The `berth` binary: one subcommand per module. Only this crate reads
//! arguments, the environment and files. It composes the other crates and
//! must not hold domain logic of its own (plans, policies, wire formats
//! belong to the crates below it).

mod agent;
mod cell_cmd;
mod compute_wiring;
mod config;
mod connections;
mod credential_cmd;
mod dashboard;
mod import_cmd;
mod import_source;
mod import_verify;
mod keystone;
mod logging;
mod paths;
mod router;
mod serve;
mod services;
mod transport;

use clap::{Parser, Subcommand};

/// berth: cloud capacity control plane (OpenStack Placement compatible).
#[derive(Debug, Parser)]
#[command(name = "berth", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server: placement, compute, image, agent and admin APIs.
    Serve(Box<serve::ServeOpts>),
    /// Run database migrations and exit.
    Migrate(serve::MigrateOpts),
    /// Run benchmarks against a berth (and optionally the real placement).
    Bench(berth_bench::BenchOpts),
    /// Run fake compute hosts (a hypervisor agent) against a berth.
    Agent(Box<agent::AgentCmd>),
    /// Manage cells: create, list, disable/enable, discover hosts.
    Cell(cell_cmd::CellOpts),
    /// Import another service's data: `berth import placement --from URL`
    /// (an OpenStack Placement's database), `--verify URL` to compare.
    Import(import_cmd::ImportOpts),
}

/// Keep glibc from handing memory back to the kernel after every large
/// response. Its dynamic thresholds start at 128 KiB: a buffer of a few
/// hundred KiB (a candidates answer) was then mmapped, or the arena's top
/// trimmed, and faulted in again on the next request — 50,000 page faults
/// a second and a third of the throughput at 1,000 providers. Fixed
/// thresholds (glibc's dynamic maximum): blocks under 32 MiB come from
/// the heap, and an arena keeps
/// up to 64 MiB of free top. `MALLOC_MMAP_THRESHOLD_` /
/// `MALLOC_TRIM_THRESHOLD_` in the environment still win.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    let set = |var: &str| std::env::var_os(var).is_some();
    // SAFETY: mallopt only changes allocator parameters; it is called
    // before any other thread exists.
    unsafe {
        if !set("MALLOC_MMAP_THRESHOLD_") {
            mallopt(M_MMAP_THRESHOLD, 32 << 20);
        }
        if !set("MALLOC_TRIM_THRESHOLD_") {
            mallopt(M_TRIM_THRESHOLD, 64 << 20);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

fn main() -> std::process::ExitCode {
    tune_malloc();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(opts) => serve::run(*opts),
        Command::Migrate(opts) => serve::migrate(opts),
        Command::Bench(opts) => bench_binaries().and_then(|binaries| berth_bench::run(opts, &binaries)),
        Command::Agent(cmd) => agent::dispatch(*cmd),
        Command::Cell(opts) => cell_cmd::run(opts),
        Command::Import(opts) => import_cmd::run(opts),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("berth: error: {err:#}");
            std::process::ExitCode::from(1)
        }
    }
}

/// The executables `berth bench` starts: this binary plays the agents and
/// serves, unless `BERTH_BENCH_SERVER=PATH` names another berth to serve
/// with (before / after comparisons with the same load generator).
fn bench_binaries() -> anyhow::Result<berth_bench::Binaries> {
    let this = std::env::current_exe()?;
    let server = match std::env::var_os("BERTH_BENCH_SERVER") {
        Some(path) if !path.is_empty() => std::path::PathBuf::from(path),
        _ => this.clone(),
    };
    Ok(berth_bench::Binaries { server, agent: this })
}

#[cfg(test)]
mod tests {
    #[test]
    fn verify_cli() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
