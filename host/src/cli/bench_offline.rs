//! `bench_offline` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchOfflineArgs {}

pub fn run(_args: BenchOfflineArgs) -> anyhow::Result<()> {
    anyhow::bail!("`bench_offline` is not implemented yet")
}
