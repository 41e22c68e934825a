//! CI (no GPU): the layer chain's opt-in builds (`MINISGL_KERNEL_DEFINES`) still compile
//! with NVRTC for sm_90a, and each is a different build from the default, so that a
//! define the kernel no longer reads cannot pass unnoticed. Its own test binary: the
//! defines come from the process environment, which other tests must not see.
//!
//! `LC_REDUCE_PAIRS=0` is the per-row reduction the paired one replaced (the default
//! since part 116 timed it, docs/results/gpu-2026-12-06-xch.md), `LC_ATT_STAGED=0` the
//! attention's register loads that the K/V tiles staged in the idle weight ring replaced
//! (the default since part 125, docs/results/gpu-2026-12-06-long.md), `LC_TRACE=1` the
//! phase trace that `gpu-check --chain-only` prints.

use minisgl::backend::cuda::{libs, nvrtc};

#[test]
fn the_chain_opt_in_builds_compile_and_differ_from_the_default() {
    if let Err(e) = libs::require_nvrtc() {
        panic!(
            "NVRTC is unavailable ({e}); run scripts/test.sh, or scripts/setup.sh and \
             LD_LIBRARY_PATH=$PWD/target/nvrtc/nvidia/cu13/lib cargo test --release --test kernels_nvrtc_defines"
        );
    }
    let (family, src) = *nvrtc::FAMILIES
        .iter()
        .find(|(f, _)| *f == "layer_chain_sm90")
        .expect("the layer chain is a kernel family");
    let arch = nvrtc::family_arch(family, "sm_90").expect("the chain applies to sm_90");
    let build = |defines: &str| {
        std::env::set_var(nvrtc::DEFINES_ENV, defines);
        let cubin = nvrtc::compile(family, src, &arch)
            .unwrap_or_else(|e| panic!("{family} with {defines:?}: {e}"));
        std::env::remove_var(nvrtc::DEFINES_ENV);
        cubin
    };
    let default = build("");
    assert_eq!(
        build("LC_REDUCE_PAIRS=1"),
        default,
        "the paired reduction is the default build"
    );
    assert_eq!(
        build("LC_ATT_STAGED=1"),
        default,
        "the staged attention tiles are the default build"
    );
    for defines in ["LC_REDUCE_PAIRS=0", "LC_ATT_STAGED=0", "LC_TRACE=1"] {
        let cubin = build(defines);
        assert!(cubin.len() > 256, "{defines}: {} bytes", cubin.len());
        assert_ne!(cubin, default, "{defines} built the default kernels");
    }
}
