//! The `berth` binary: one subcommand per module. Only this crate reads
//! arguments, the environment and files.

mod agent;
mod bench;
mod bench_auth;
mod bench_boot;
mod bench_candidates;
mod bench_leases;
mod bench_soak;
mod cell_cmd;
mod compute_wiring;
mod config;
mod credential_cmd;
mod keystone;
mod logging;
mod router;
mod serve;
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
    Serve(serve::ServeOpts),
    /// Run database migrations and exit.
    Migrate(serve::MigrateOpts),
    /// Run benchmarks against a berth (and optionally the real placement).
    Bench(bench::BenchOpts),
    /// Run fake compute hosts (a hypervisor agent) against a berth.
    Agent(agent::AgentCmd),
    /// Manage cells: create, list, disable/enable, discover hosts.
    Cell(cell_cmd::CellOpts),
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
        Command::Serve(opts) => serve::run(opts),
        Command::Migrate(opts) => serve::migrate(opts),
        Command::Bench(opts) => bench::run(opts),
        Command::Agent(cmd) => agent::dispatch(cmd),
        Command::Cell(opts) => cell_cmd::run(opts),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("berth: error: {err:#}");
            std::process::ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn verify_cli() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
