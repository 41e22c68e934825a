//! CI (no GPU): every kernel family compiles with NVRTC for sm_90.
//!
//! NVRTC comes from the pinned pip wheels (`nvidia-cuda-nvrtc==13.0.88`, put in
//! `target/nvrtc` by `scripts/setup.sh`) with its lib folder on
//! `LD_LIBRARY_PATH` (`scripts/test.sh` sets it), or from a CUDA toolkit. A
//! missing NVRTC fails these tests: they must not pass without their subject.

use minisgl::backend::cuda::{libs, nvrtc};

fn require_nvrtc() {
    if let Err(e) = libs::require_nvrtc() {
        panic!(
            "NVRTC is unavailable ({e}); run scripts/test.sh, or scripts/setup.sh and \
             LD_LIBRARY_PATH=$PWD/target/nvrtc/nvidia/cu13/lib cargo test --release --test kernels_nvrtc"
        );
    }
}

#[test]
fn every_kernel_family_compiles_for_sm90() {
    require_nvrtc();
    let mut failures = Vec::new();
    for &(family, src) in nvrtc::FAMILIES {
        // Hopper-only families build for sm_90a, the rest for sm_90.
        let arch = nvrtc::family_arch(family, "sm_90").expect("every family applies to sm_90");
        match nvrtc::compile(family, src, &arch) {
            Ok(cubin) => assert!(
                cubin.len() > 256,
                "{family}: suspiciously small CUBIN ({} bytes)",
                cubin.len()
            ),
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "kernels failed to compile:\n{}",
        failures.join("\n")
    );
}

/// The section names of the kernels in a CUBIN (`.text.<name>`).
fn cubin_kernels(cubin: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    for part in cubin.split(|&b| b == 0) {
        if let Some(name) = part.strip_prefix(b".text.") {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_loader_lists_exactly_the_kernels_each_family_defines() {
    // A kernel missing from the list is unusable at run time ("not available
    // on this device"); a listed name that is not compiled fails device open.
    require_nvrtc();
    for &(family, src) in nvrtc::FAMILIES {
        let arch = nvrtc::family_arch(family, "sm_90").expect("every family applies to sm_90");
        let cubin = nvrtc::compile(family, src, &arch).expect("compiles");
        let defined = cubin_kernels(&cubin);
        let mut listed = minisgl::backend::cuda::device::kernel_names(family);
        listed.sort();
        assert_eq!(
            listed, defined,
            "family {family}: loader list vs compiled kernels"
        );
    }
}

#[test]
fn a_broken_kernel_is_reported_with_its_log() {
    require_nvrtc();
    let err = nvrtc::compile(
        "broken",
        "extern \"C\" __global__ void k() { undefined_symbol(); }",
        "sm_90",
    )
    .expect_err("a kernel calling an undefined function must not compile");
    let msg = err.to_string();
    assert!(
        msg.contains("undefined_symbol") && msg.contains("broken"),
        "unhelpful error: {msg}"
    );
}

#[test]
fn cache_key_tracks_source_and_arch() {
    let (fam, src) = nvrtc::FAMILIES[0];
    let a = nvrtc::cache_key(fam, src, "sm_90");
    assert_ne!(a, nvrtc::cache_key(fam, src, "sm_80"));
    assert_ne!(
        a,
        nvrtc::cache_key(fam, &format!("{src}\n// changed"), "sm_90")
    );
    assert_eq!(a, nvrtc::cache_key(fam, src, "sm_90"));
}

#[test]
fn no_driver_is_a_clean_error_not_a_panic() {
    // Hide the driver (whether or not this machine has one): the binary
    // must refuse CUDA with advice, not panic inside cudarc.
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/models/llama_gqa_tied"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_minisgl-host"))
        .args(["generate", "--device", "cuda", "--model", model])
        .args(["--prompt-ids", "1,2,3", "--max-new-tokens", "1"])
        .env("MINISGL_CUDA_DRIVER_LIB", "/nonexistent/libcuda.so.1")
        .output()
        .expect("the host binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "CUDA without a driver must fail");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert!(
        stderr.contains("use --device cpu") && stderr.contains("/nonexistent/libcuda.so.1"),
        "unhelpful error: {stderr}"
    );
}
