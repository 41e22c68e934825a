//! The `minisgl-host` binary: the command line and the development tools
//! (benchmarks, the plugin harness, the GPU check, policy comparison), in
//! `cli/`. They use the library `minisgl` through its public API only, as
//! any embedder would; nothing here is part of that API.

mod cli;

fn main() -> anyhow::Result<()> {
    cli::main()
}
