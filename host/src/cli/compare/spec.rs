//! `--policy NAME=SPEC`: a named policy set.
//!
//! SPEC is `SCHEDULER[,EVICTOR[,SAMPLER]]`; each part is `native` (the
//! built-in FCFS / LRU / default sampler), a component path (`.wasm` or
//! `.cwasm`), or a short name looked up in the plugin directory as
//! `minisgl_example_<name>.wasm` or `<name>.wasm` (so `lpm` finds the
//! example LPM scheduler built by `scripts/build-plugins.sh`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use minisgl::plugin::{PluginConfig, PluginSet};

/// A parsed `--policy`.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    pub name: String,
    /// Scheduler, evictor, sampler; `None` = native.
    pub parts: [Option<PathBuf>; 3],
    /// The SPEC as given (for the report).
    pub spec: String,
}

fn resolve(part: &str, dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let part = part.trim();
    if part.is_empty() || part == "native" {
        return Ok(None);
    }
    let as_path = PathBuf::from(part);
    if part.contains('/') || part.ends_with(".wasm") || part.ends_with(".cwasm") {
        if !as_path.exists() {
            bail!("plugin {part:?} does not exist");
        }
        return Ok(Some(as_path));
    }
    let stem = part.replace('-', "_");
    for cand in [
        dir.join(format!("minisgl_example_{stem}.wasm")),
        dir.join(format!("{stem}.wasm")),
    ] {
        if cand.exists() {
            return Ok(Some(cand));
        }
    }
    bail!(
        "no plugin {part:?} in {} (looked for minisgl_example_{stem}.wasm and {stem}.wasm; \
         build them with scripts/build-plugins.sh or give a path)",
        dir.display()
    )
}

/// Parses `NAME=SCHEDULER[,EVICTOR[,SAMPLER]]`.
pub fn parse(s: &str, plugin_dir: &Path) -> anyhow::Result<PolicySpec> {
    let (name, spec) = s
        .split_once('=')
        .with_context(|| format!("--policy must be NAME=SPEC, got {s:?}"))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!("--policy name must be letters, digits, '-', '_' or '.', got {name:?}");
    }
    let items: Vec<&str> = spec.split(',').collect();
    if items.len() > 3 {
        bail!(
            "--policy {name}: SPEC is SCHEDULER[,EVICTOR[,SAMPLER]], got {} parts",
            items.len()
        );
    }
    let mut parts: [Option<PathBuf>; 3] = Default::default();
    for (i, it) in items.iter().enumerate() {
        parts[i] = resolve(it, plugin_dir).with_context(|| format!("--policy {name}"))?;
    }
    Ok(PolicySpec {
        name: name.to_string(),
        parts,
        spec: spec.to_string(),
    })
}

impl PolicySpec {
    /// Loads the components (native parts stay built in).
    pub fn load(&self) -> anyhow::Result<PluginSet> {
        let [scheduler, evictor, sampler] = self.parts.clone();
        let cfg = PluginConfig {
            scheduler,
            evictor,
            sampler,
            ..PluginConfig::default()
        };
        PluginSet::load(&cfg).with_context(|| format!("loading policy set {}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("minisgl_example_lpm.wasm"), b"").unwrap();
        let p = parse("a=lpm,native", dir.path()).unwrap();
        assert_eq!(p.name, "a");
        assert!(p.parts[0]
            .as_ref()
            .unwrap()
            .ends_with("minisgl_example_lpm.wasm"));
        assert_eq!(p.parts[1], None);
        assert_eq!(
            parse("fcfs=native", dir.path()).unwrap().parts,
            [None, None, None]
        );
        let e = parse("x=nope", dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("nope"), "{e:#}");
        assert!(parse("noequals", dir.path()).is_err());
        assert!(parse("a=native,native,native,native", dir.path()).is_err());
    }
}
