//! `plugin` subcommands (work in progress).

#[derive(clap::Subcommand, Debug)]
pub enum PluginCommand {}

pub fn run(cmd: PluginCommand) -> anyhow::Result<()> {
    match cmd {}
}
