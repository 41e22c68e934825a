//! The layer rule of `docs/architecture.md`: a module of the library only
//! names modules on lower floors (or its own), and the binary's tools
//! (`main.rs`, `cli/`) sit outside the library, using it as `minisgl::`.
//! Doc comments may point anywhere; code may not. Reads the sources, so a
//! new upward `use` fails here with the file, the line and both layers.

use std::path::{Path, PathBuf};

/// Floors, lowest first. A module may use its own floor's other modules
/// only where listed in `SIDEWAYS`.
const FLOORS: &[&[&str]] = &[
    &["batch", "env"],
    &["request", "metrics", "backend", "plugin"],
    &["model", "kv", "config", "workload"],
    &["scheduler"],
    &["engine"],
    &["server", "sim"],
];

/// The binary target's tree: its root and the command line with every
/// development tool. Not a floor: the library does not declare these
/// modules and cannot name them, and they reach the library only through
/// its public API (`minisgl::…`), as an embedder would.
const BINARY: &[&str] = &["main", "cli"];

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
        if from == "lib" || BINARY.contains(&from.as_str()) {
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
                if BINARY.contains(&to.as_str()) {
                    upward.push(format!(
                        "{}:{}: the library's {from} uses the binary's {to}: {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
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

/// The `mod` items a crate root declares (`mod x;`, `pub mod x;`).
fn declared_modules(root: &str) -> Vec<String> {
    let text = std::fs::read_to_string(src_dir().join(root)).expect("readable crate root");
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn the_tools_are_the_binarys() {
    // The library declares exactly its floors: a new top-level module needs
    // one, and the tools cannot come back into the library's public API.
    let mut lib = declared_modules("lib.rs");
    lib.sort();
    let mut floors: Vec<String> = FLOORS.concat().iter().map(|m| m.to_string()).collect();
    floors.sort();
    assert_eq!(
        lib, floors,
        "lib.rs must declare exactly the modules of FLOORS (tools go in cli/, the binary's)"
    );
    assert_eq!(declared_modules("main.rs"), vec!["cli"]);

    // The binary names its own tree as `crate::` and the library as
    // `minisgl::`; a `crate::` path to a library module would mean the
    // library's sources were compiled into the binary a second time.
    let mut files = Vec::new();
    rust_files(&src_dir().join("cli"), &mut files);
    files.push(src_dir().join("main.rs"));
    files.sort();
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            for to in crate_refs(line) {
                if !BINARY.contains(&to.as_str()) {
                    wrong.push(format!(
                        "{}:{}: `crate::{to}` (the binary uses the library as `minisgl::{to}`)",
                        file.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
    assert!(floor("cli").is_none() && BINARY.contains(&"cli"));
}
