//! `bench_online` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchOnlineArgs {}

pub fn run(_args: BenchOnlineArgs) -> anyhow::Result<()> {
    anyhow::bail!("`bench_online` is not implemented yet")
}
