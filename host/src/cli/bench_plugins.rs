//! `bench_plugins` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchPluginsArgs {}

pub fn run(_args: BenchPluginsArgs) -> anyhow::Result<()> {
    anyhow::bail!("`bench_plugins` is not implemented yet")
}
