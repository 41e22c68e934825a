//! `minisgl-wit-c bindgen WIT_DIR WORLD OUT_DIR`: write wit-bindgen's C glue for
//! one world (`WORLD.h`, `WORLD.c`, `WORLD_component_type.o`).
//!
//! `minisgl-wit-c component CORE_WASM OUT_WASM`: wrap a core module (linked from
//! C with the `*_component_type.o` object, which carries the world's type in a
//! custom section) into a component, validating it.
//!
//! The same two steps as `wit-bindgen c` and `wasm-tools component new`, through
//! the crates those CLIs are built on; building this binary takes a fraction of
//! the time `cargo install` of both CLIs does.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bindgen") if args.len() == 4 => {
            bindgen(Path::new(&args[1]), &args[2], Path::new(&args[3]))
        }
        Some("component") if args.len() == 3 => {
            component(Path::new(&args[1]), Path::new(&args[2]))
        }
        _ => bail!(
            "usage: minisgl-wit-c bindgen WIT_DIR WORLD OUT_DIR | component CORE_WASM OUT_WASM (got {args:?})"
        ),
    }
}

fn bindgen(wit: &Path, world: &str, out: &Path) -> Result<()> {
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("parsing WIT folder {}", wit.display()))?;
    let world_id = resolve
        .select_world(&[pkg], Some(world))
        .with_context(|| format!("selecting world {world:?}"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world_id, &mut files)
        .context("generating C bindings")?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in files.iter() {
        let path: PathBuf = out.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

fn component(core: &Path, out: &Path) -> Result<()> {
    let module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    let bytes = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .context("reading the component type embedded in the core module")?
        .encode()
        .context("encoding the component")?;
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    println!("{} ({} bytes)", out.display(), bytes.len());
    Ok(())
}
