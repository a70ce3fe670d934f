//! `berth bench`: load generators over real HTTP.

/// Options of `berth bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchOpts {
    /// Placement endpoint to drive.
    #[arg(long, default_value = "http://127.0.0.1:8778")]
    url: String,
}

pub(crate) fn run(opts: BenchOpts) -> anyhow::Result<()> {
    anyhow::bail!("bench against {} is not built yet", opts.url)
}
