//! The layer rule of `docs/architecture.md`: a module of `host/src` only
//! names modules on lower floors (or its own). Doc comments may point
//! anywhere; code may not. Reads the sources, so a new upward `use` fails
//! here with the file, the line and both layers.

use std::path::{Path, PathBuf};

/// Floors, lowest first. A module may use its own floor's other modules
/// only where listed in `SIDEWAYS`.
const FLOORS: &[&[&str]] = &[
    &["batch"],
    &["request", "metrics", "backend", "plugin"],
    &["model", "kv", "config", "workload"],
    &["scheduler"],
    &["engine"],
    &["server", "sim"],
    &["cli"],
];

/// Same-floor imports that are part of the design.
const SIDEWAYS: &[(&str, &str)] = &[];

fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

fn src_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("host/src is readable") {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `host/src` belongs to.
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src_dir()).expect("under host/src");
    let first = rel.components().next().expect("non-empty path");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// Every `crate::name` in a line of code (comments skipped).
fn crate_refs(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut refs = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            refs.push(name);
        }
        rest = after;
    }
    refs
}

#[test]
fn imports_only_point_down() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut unknown = Vec::new();
    let mut upward = Vec::new();
    for file in &files {
        let from = module_of(file);
        if from == "lib" || from == "main" {
            continue;
        }
        let Some(from_floor) = floor(&from) else {
            unknown.push(format!("{}: module `{from}` has no floor", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            for to in crate_refs(line) {
                if to == from {
                    continue;
                }
                let Some(to_floor) = floor(&to) else {
                    unknown.push(format!(
                        "{}:{}: `crate::{to}` has no floor",
                        file.display(),
                        n + 1
                    ));
                    continue;
                };
                let sideways_ok = SIDEWAYS.contains(&(from.as_str(), to.as_str()));
                if to_floor > from_floor || (to_floor == from_floor && !sideways_ok) {
                    upward.push(format!(
                        "{}:{}: {from} (floor {from_floor}) uses {to} (floor {to_floor}): {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "add these modules to FLOORS (and to docs/architecture.md):\n{}",
        unknown.join("\n")
    );
    assert!(
        upward.is_empty(),
        "imports that point up or sideways:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_rule_sees_an_upward_import() {
    // The scanner itself: a use of a higher floor is found, a comment is not.
    assert_eq!(crate_refs("use crate::engine::Event;"), vec!["engine"]);
    assert_eq!(
        crate_refs("let x = crate::kv::pool::f(crate::backend::X);"),
        vec!["kv", "backend"]
    );
    assert!(crate_refs("// see crate::server").is_empty());
    assert!(floor("scheduler") > floor("kv"));
    assert!(floor("cli") > floor("server"));
}
