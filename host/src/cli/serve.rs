//! `serve` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("`serve` is not implemented yet")
}
