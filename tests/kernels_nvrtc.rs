//! CI (no GPU): every kernel family compiles with NVRTC for sm_90.
//!
//! NVRTC comes from the pinned pip wheels (`nvidia-cuda-nvrtc==13.0.88`) with its
//! lib folder on `LD_LIBRARY_PATH` (or from a CUDA toolkit). Under `CI=true` a
//! missing NVRTC fails the test; elsewhere the test prints a notice and passes.

use minisgl::backend::cuda::{libs, nvrtc};

fn nvrtc_available() -> bool {
    match libs::require_nvrtc() {
        Ok(()) => true,
        Err(e) => {
            let ci = std::env::var("CI")
                .map(|v| v == "true" || v == "1")
                .unwrap_or(false);
            assert!(!ci, "CI=true but NVRTC is unavailable: {e}");
            eprintln!("NOTICE: skipping the NVRTC kernel compile check: {e}");
            false
        }
    }
}

#[test]
fn every_kernel_family_compiles_for_sm90() {
    if !nvrtc_available() {
        return;
    }
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

#[test]
fn a_broken_kernel_is_reported_with_its_log() {
    if !nvrtc_available() {
        return;
    }
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
    use minisgl::backend::cuda::{CudaBackend, CudaOptions};
    if libs::probe().driver.is_ok() {
        eprintln!("NOTICE: a CUDA driver is present; the no-driver path is not exercised here");
        return;
    }
    let err = CudaBackend::new(&CudaOptions::default())
        .err()
        .expect("opening CUDA without a driver must fail");
    assert!(
        err.to_string().contains("use --device cpu"),
        "unhelpful error: {err}"
    );
}
