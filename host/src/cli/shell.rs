//! `shell` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ShellArgs {}

pub fn run(_args: ShellArgs) -> anyhow::Result<()> {
    anyhow::bail!("`shell` is not implemented yet")
}
