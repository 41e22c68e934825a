//! Command line: `minisgl-host [serve flags]` serves (the default action);
//! subcommands do the rest. Each subcommand lives in its own file with its own
//! flags; this file only parses and dispatches.

mod bench_floor;
mod bench_offline;
mod bench_online;
mod bench_plugins;
mod bench_steps;
mod compare;
mod generate;
mod gpu_check;
mod plugin_harness;
mod profile;
pub mod serve;
pub mod settings;
mod shell;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "minisgl-host",
    version,
    about = "LLM inference engine where policy is a Wasm plugin",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Serving flags, used when no subcommand is given.
    #[command(flatten)]
    pub serve: serve::ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the OpenAI-compatible API (the default action).
    Serve(serve::ServeArgs),
    /// Chat with the model in the terminal.
    Shell(shell::ShellArgs),
    /// Generate from one prompt, for quick checks.
    Generate(generate::GenerateArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Test, diff and time a policy plugin without a model.
    #[command(subcommand)]
    Plugin(plugin_harness::PluginCommand),
    /// Check the CUDA backend on this machine's GPU against the CPU backend.
    GpuCheck(gpu_check::GpuCheckArgs),
    /// Replay one workload against several policy sets (simulated or real)
    /// and write a table and plots.
    Compare(Box<compare::CompareArgs>),
    /// Measure step times on a device and write a cost-model profile for
    /// `compare --backend sim`.
    Profile(profile::ProfileArgs),
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Offline throughput (Mini-SGLang / nano-vllm workload).
    Offline(bench_offline::BenchOfflineArgs),
    /// Replay arrival times against a running server; TTFT/TPOT percentiles.
    Online(bench_online::BenchOnlineArgs),
    /// Call cost of each plugin kind, Wasm vs native.
    Plugins(bench_plugins::BenchPluginsArgs),
}

/// Parse arguments and run.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => serve_or_shell(cli.serve),
        Some(Command::Serve(args)) => serve_or_shell(args),
        Some(Command::Shell(args)) => shell::run(args),
        Some(Command::Generate(args)) => generate::run(args),
        Some(Command::Bench(BenchCommand::Offline(args))) => bench_offline::run(args),
        Some(Command::Bench(BenchCommand::Online(args))) => bench_online::run(args),
        Some(Command::Bench(BenchCommand::Plugins(args))) => bench_plugins::run(args),
        Some(Command::Plugin(cmd)) => plugin_harness::run(cmd),
        Some(Command::GpuCheck(args)) => gpu_check::run(args),
        Some(Command::Compare(args)) => compare::run(*args),
        Some(Command::Profile(args)) => profile::run(args),
    }
}

/// `--shell` turns the serving flags into a terminal chat.
fn serve_or_shell(args: serve::ServeArgs) -> anyhow::Result<()> {
    if args.shell && !args.print_config {
        let cfg = args.resolve()?;
        return shell::run_with(&cfg, &shell::ChatOptions::default());
    }
    serve::run(args)
}

/// Logs to stderr; `RUST_LOG` overrides the `info` default. Colour only on a
/// terminal: redirected logs (files, CI) stay plain text.
pub fn init_logging() {
    init_logging_at("info");
}

/// For tools whose output is their report: only warnings (deprecated
/// setting spellings among them) unless `RUST_LOG` asks for more.
pub fn init_warnings() {
    init_logging_at("warn");
}

fn init_logging_at(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
