//! `generate` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct GenerateArgs {}

pub fn run(_args: GenerateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`generate` is not implemented yet")
}
