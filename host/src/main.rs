fn main() -> anyhow::Result<()> {
    minisgl::cli::main()
}
