//! Kernel sources (embedded from `kernels/`) and their NVRTC compilation to a
//! CUBIN for one architecture, cached on disk. Needs libnvrtc only, no GPU: CI
//! compiles every family for `sm_90` through [`compile`].

use std::ffi::{CStr, CString};
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::error::CudaError;
use super::libs;

/// The shared headers a family may include, pasted in place of their `#include` line:
/// `common.cuh` (every family), `hopper.cuh` (the sm_90a families' wgmma, mbarrier
/// and TMA helpers) and `rope.cuh` (q/k norm and rotation: rope and layer_chain).
const HEADERS: &[(&str, &str)] = &[
    (
        "#include \"common.cuh\"",
        include_str!("../../../../kernels/common.cuh"),
    ),
    (
        "#include \"hopper.cuh\"",
        include_str!("../../../../kernels/hopper.cuh"),
    ),
    (
        "#include \"rope.cuh\"",
        include_str!("../../../../kernels/rope.cuh"),
    ),
];

/// Every kernel family: (name, source). Each is compiled as its own program so
/// that one that fails to build for a device costs only its own ops.
pub const FAMILIES: &[(&str, &str)] = &[
    (
        "embedding",
        include_str!("../../../../kernels/embedding.cu"),
    ),
    ("norm", include_str!("../../../../kernels/norm.cu")),
    ("rope", include_str!("../../../../kernels/rope.cu")),
    (
        "activation",
        include_str!("../../../../kernels/activation.cu"),
    ),
    ("kv_store", include_str!("../../../../kernels/kv_store.cu")),
    ("tensor", include_str!("../../../../kernels/tensor.cu")),
    (
        "attention_simple",
        include_str!("../../../../kernels/attention_simple.cu"),
    ),
    (
        "attention_decode",
        include_str!("../../../../kernels/attention_decode.cu"),
    ),
    (
        "attention_prefill",
        include_str!("../../../../kernels/attention_prefill.cu"),
    ),
    ("sampling", include_str!("../../../../kernels/sampling.cu")),
    ("gemv", include_str!("../../../../kernels/gemv.cu")),
    (
        "attention_prefill_sm90",
        include_str!("../../../../kernels/attention_prefill_sm90.cu"),
    ),
    // The default prefill kernel on sm_90 (the one above is its fallback).
    (
        "attention_prefill_ws_sm90",
        include_str!("../../../../kernels/attention_prefill_ws_sm90.cu"),
    ),
    // A decoder layer's products at one decode row in one launch (sm_90a: mbarriers).
    (
        "layer_chain_sm90",
        include_str!("../../../../kernels/layer_chain_sm90.cu"),
    ),
];

/// The architecture `family` is compiled for on a device of `device_arch`, or
/// `None` where it does not apply. Hopper-only families (wgmma) need the
/// arch-specific `sm_90a` target and exist only on sm_90 devices; a newer
/// device runs the portable kernels instead.
pub fn family_arch(family: &str, device_arch: &str) -> Option<String> {
    if family.ends_with("_sm90") {
        (device_arch == "sm_90").then(|| "sm_90a".to_string())
    } else {
        Some(device_arch.to_string())
    }
}

/// Options passed to NVRTC besides the architecture (part of the cache key).
const OPTIONS: &[&str] = &["-std=c++17", "--fmad=true"];

/// Environment variable with extra preprocessor definitions for every kernel family,
/// e.g. `P_KV_WARPS=1` or `P_KSTAGES=3 P_VSTAGES=2`: the kernels' build switches,
/// for measuring a variant inside the engine (attn_bench's `--variants` do the same
/// outside it). Part of the cache key.
pub const DEFINES_ENV: &str = "MINISGL_KERNEL_DEFINES";

/// Defines that change a kernel's launch geometry (threads, tile rows, stages), which
/// the host computes on its own (`device::dynamic_smem`, the launches' block sizes):
/// built with another value, a kernel would run past the shared memory it was given.
/// attn_bench derives the geometry from its variants, so it can try these.
const GEOMETRY_DEFINES: &[&str] = &[
    "P_BQ",
    "P_BK",
    "P_THREADS",
    "P_QSLOTS",
    "P_KSTAGES",
    "P_VSTAGES",
    "H_BK",
    "H_STAGES",
    "DM_BK",
    "DM_PAD",
    "TG_BM",
    "TG_BK",
    "TG_STAGES",
    "TG_THREADS",
];

/// `-D` options from a [`DEFINES_ENV`] value: `NAME` or `NAME=VALUE` entries
/// separated by spaces or commas; names are C identifiers, values numbers or
/// identifiers.
pub fn parse_defines(value: &str) -> Result<Vec<String>, String> {
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, val) = e.split_once('=').unwrap_or((e, "1"));
            let val_ok = !val.is_empty()
                && val
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
            if GEOMETRY_DEFINES.contains(&name) {
                Err(format!(
                    "{DEFINES_ENV}: entry {e:?} of {value:?} changes a launch's geometry, \
                     which the host computes for the default build; not settable here"
                ))
            } else if ident(name) && val_ok {
                Ok(format!("-D{name}={val}"))
            } else {
                Err(format!(
                    "{DEFINES_ENV}: entry {e:?} of {value:?} is not NAME or NAME=VALUE"
                ))
            }
        })
        .collect()
}

/// Every NVRTC option but the architecture: [`OPTIONS`] and the [`DEFINES_ENV`] ones.
fn options() -> Result<Vec<String>, CudaError> {
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    if let Ok(v) = std::env::var(DEFINES_ENV) {
        opts.extend(parse_defines(&v).map_err(CudaError::Unsupported)?);
    }
    Ok(opts)
}

/// The full translation unit of a family: each shared header ([`HEADERS`]) pasted in
/// place of its `#include` line.
pub fn translation_unit(src: &str) -> String {
    let mut out =
        String::with_capacity(HEADERS.iter().map(|h| h.1.len()).sum::<usize>() + src.len() + 64);
    for line in src.lines() {
        if let Some((_, text)) = HEADERS.iter().find(|(inc, _)| line.trim() == *inc) {
            out.push_str(text);
            out.push('\n');
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn nvrtc_version() -> (i32, i32) {
    let (mut a, mut b) = (0, 0);
    if libs::probe().nvrtc.is_err() {
        return (a, b);
    }
    // SAFETY: plain out-parameters; the library was checked present.
    unsafe {
        let _ = cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b);
    }
    (a, b)
}

/// Compile `src` of `family` to a CUBIN for `arch` (e.g. "sm_90"). No cache.
pub fn compile(family: &'static str, src: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    use cudarc::nvrtc::{result, sys};
    libs::require_nvrtc()?;
    let tu = CString::new(translation_unit(src)).map_err(|_| CudaError::Compile {
        family,
        arch: arch.into(),
        log: "source contains a NUL byte".into(),
    })?;
    let name = CString::new(format!("{family}.cu")).unwrap_or_default();
    let prog = result::create_program(&tu, Some(&name)).map_err(|e| CudaError::Compile {
        family,
        arch: arch.into(),
        log: format!("create program: {e:?}"),
    })?;
    let mut opts = options()?;
    opts.push(format!("--gpu-architecture={arch}"));
    // SAFETY: `prog` was just created and is destroyed exactly once below.
    let res = unsafe { result::compile_program(prog, &opts) };
    let out = match res {
        Err(e) => {
            // SAFETY: `prog` is live; the log is NUL-terminated by NVRTC.
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| {
                    unsafe { CStr::from_ptr(l.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            Err(CudaError::Compile {
                family,
                arch: arch.into(),
                log: format!("{e:?}: {log}"),
            })
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; buffer sized by NVRTC.
            unsafe {
                let r = sys::nvrtcGetCUBINSize(prog, &mut size);
                if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                    Err(CudaError::Compile {
                        family,
                        arch: arch.into(),
                        log: format!("no CUBIN ({r:?}); is `{arch}` a real architecture?"),
                    })
                } else {
                    let mut buf = vec![0u8; size];
                    let r = sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _);
                    if r != sys::nvrtcResult::NVRTC_SUCCESS {
                        Err(CudaError::Compile {
                            family,
                            arch: arch.into(),
                            log: format!("get CUBIN: {r:?}"),
                        })
                    } else {
                        Ok(buf)
                    }
                }
            }
        }
    };
    // SAFETY: destroyed once.
    unsafe {
        let _ = result::destroy_program(prog);
    }
    out
}

/// Where compiled kernels are cached: `$MINISGL_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/minisgl/kernels`, else `~/.cache/minisgl/kernels`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("MINISGL_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("minisgl/kernels"));
    }
    std::env::var("HOME")
        .ok()
        .map(|h| PathBuf::from(h).join(".cache/minisgl/kernels"))
}

/// Cache key: source hash + architecture + options + NVRTC version.
pub fn cache_key(family: &str, src: &str, arch: &str) -> String {
    let mut h = Sha256::new();
    h.update(translation_unit(src).as_bytes());
    h.update(arch.as_bytes());
    for o in OPTIONS {
        h.update(o.as_bytes());
    }
    if let Ok(v) = std::env::var(DEFINES_ENV) {
        h.update(format!("defines {v}").as_bytes());
    }
    h.update(format!("{:?}", nvrtc_version()).as_bytes());
    let d = h.finalize();
    format!("{family}-{arch}-{}", hex::encode(&d[..12]))
}

/// [`compile`] through the on-disk cache. Returns the CUBIN and whether it was a hit.
pub fn compile_cached(
    family: &'static str,
    src: &str,
    arch: &str,
) -> Result<(Vec<u8>, bool), CudaError> {
    libs::require_nvrtc()?;
    options()?; // a bad DEFINES_ENV is an error on a cache hit too
    let key = cache_key(family, src, arch);
    let dir = cache_dir();
    if let Some(d) = &dir {
        if let Ok(b) = std::fs::read(d.join(format!("{key}.cubin"))) {
            if !b.is_empty() {
                return Ok((b, true));
            }
        }
    }
    let bin = compile(family, src, arch)?;
    if let Some(d) = &dir {
        // A cache that cannot be written only costs a recompile next time.
        if std::fs::create_dir_all(d).is_ok() {
            let tmp = d.join(format!("{key}.tmp{}", std::process::id()));
            if std::fs::write(&tmp, &bin).is_ok() {
                let _ = std::fs::rename(&tmp, d.join(format!("{key}.cubin")));
            }
        }
    }
    Ok((bin, false))
}

#[cfg(test)]
mod tests {
    use super::parse_defines;

    #[test]
    fn defines_parse_and_bad_entries_name_themselves() {
        assert_eq!(
            parse_defines("P_KV_WARPS=1, P_DIAG  X_1=-2").unwrap(),
            ["-DP_KV_WARPS=1", "-DP_DIAG=1", "-DX_1=-2"]
        );
        assert!(parse_defines("").unwrap().is_empty());
        for bad in ["1X=2", "A=", "A=$(rm)", "A B=\"x\""] {
            let e = parse_defines(bad).unwrap_err();
            assert!(e.contains("MINISGL_KERNEL_DEFINES"), "{e}");
        }
        let e = parse_defines("OK=1,A;B=2").unwrap_err();
        assert!(e.contains("\"A;B=2\""), "{e}");
        let e = parse_defines("P_DIAG=1 P_VSTAGES=4").unwrap_err();
        assert!(
            e.contains("\"P_VSTAGES=4\"") && e.contains("geometry"),
            "{e}"
        );
        // The Hopper GEMM's stages size its shared memory on the host too; its wait
        // limit does not.
        assert!(parse_defines("TG_STAGES=4").is_err());
        assert_eq!(
            parse_defines("TG_WAIT_NS=1000").unwrap(),
            ["-DTG_WAIT_NS=1000"]
        );
    }
}
