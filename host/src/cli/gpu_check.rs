//! `gpu_check` subcommand (work in progress).

#[derive(clap::Args, Debug, Clone, Default)]
pub struct GpuCheckArgs {}

pub fn run(_args: GpuCheckArgs) -> anyhow::Result<()> {
    anyhow::bail!("`gpu_check` is not implemented yet")
}
