//! Every example policy's component passes `minisgl-host plugin check`: 1,500
//! seeded synthetic calls each (varied sizes, tight budgets, large ids), every
//! decision accepted by the host's validation, no trap or timeout.

use std::path::PathBuf;
use std::process::Command;

fn check(file: &str, kind: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    let plugin = dir.join("wasm32-wasip2/plugin").join(file);
    assert!(
        plugin.is_file(),
        "{} is missing: run scripts/build-plugins.sh first",
        plugin.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_minisgl-host"))
        .args([
            "plugin", "check", "--kind", kind, "--cases", "1500", "--seed", "21",
        ])
        .args(["--plugin-deadline-ms", "1000"])
        .arg(&plugin)
        .env("MINISGL_PLUGIN_CACHE_DIR", dir.join("plugin-cache"))
        .output()
        .expect("run minisgl-host");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("ok: 1500"),
        "{file}:\n{text}"
    );
}

#[test]
fn example_schedulers_pass_the_hosts_validation() {
    for name in ["lpm", "dfs_weight", "priority", "sjf", "sarathi", "vtc"] {
        check(&format!("minisgl_example_{name}.wasm"), "scheduler");
    }
}

#[test]
fn example_evictors_pass_the_hosts_validation() {
    for name in ["lfu", "slru"] {
        check(&format!("minisgl_example_{name}.wasm"), "evictor");
    }
}
