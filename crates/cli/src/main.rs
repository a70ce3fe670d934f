//! The `berth` binary: one subcommand per module. Only this crate reads
//! arguments, the environment and files.

mod agent;
mod bench;
mod bench_boot;
mod bench_candidates;
mod cell_cmd;
mod compute_wiring;
mod config;
mod logging;
mod router;
mod serve;

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
    Agent(agent::AgentOpts),
    /// Manage cells: create, list, disable/enable, discover hosts.
    Cell(cell_cmd::CellOpts),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(opts) => serve::run(opts),
        Command::Migrate(opts) => serve::migrate(opts),
        Command::Bench(opts) => bench::run(opts),
        Command::Agent(opts) => agent::run(opts),
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
