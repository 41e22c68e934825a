//! Finding the CUDA libraries without ever letting the loader panic.
//!
//! cudarc opens libraries by bare name (`libcuda.so.1`, `libnvrtc.so.13`, ...) and
//! panics when one is missing. Before any cudarc call we (1) try the bare name, which
//! honours `LD_LIBRARY_PATH` and the system cache, then (2) look in the standard CUDA
//! install folders and pre-load the file by absolute path (once loaded, the dynamic
//! loader resolves cudarc's later bare-name open to the same object by its soname).
//! Absence becomes a [`CudaError::Missing`] with an actionable message.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::error::CudaError;

/// Folders searched after `LD_LIBRARY_PATH` and the system cache.
fn standard_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Ok(v) = std::env::var(var) {
            dirs.push(PathBuf::from(&v).join("lib64"));
            dirs.push(PathBuf::from(&v).join("targets/x86_64-linux/lib"));
            dirs.push(PathBuf::from(&v).join("lib"));
        }
    }
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda-13.0/targets/x86_64-linux/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

fn load_one(names: &[&str]) -> Result<(), String> {
    for n in names {
        // SAFETY: loading a CUDA library runs its initialisers, which is what cudarc
        // would do anyway; the handle is leaked so the library stays resident.
        if let Ok(lib) = unsafe { libloading::Library::new(*n) } {
            std::mem::forget(lib);
            return Ok(());
        }
    }
    let mut tried = Vec::new();
    for d in standard_dirs() {
        for n in names {
            let p = d.join(n);
            if p.exists() {
                // NVRTC opens its builtins library by bare name at compile time:
                // pre-load it from the same folder too.
                if n.starts_with("libnvrtc.") {
                    if let Ok(rd) = std::fs::read_dir(&d) {
                        for e in rd.flatten() {
                            let f = e.file_name().to_string_lossy().into_owned();
                            if f.starts_with("libnvrtc-builtins.so") && !f.contains(".alt.") {
                                // SAFETY: as below.
                                if let Ok(b) = unsafe { libloading::Library::new(e.path()) } {
                                    std::mem::forget(b);
                                }
                            }
                        }
                    }
                }
                // SAFETY: as above.
                if let Ok(lib) = unsafe { libloading::Library::new(&p) } {
                    std::mem::forget(lib);
                    return Ok(());
                }
            }
            tried.push(p.display().to_string());
        }
    }
    Err(format!(
        "{} (looked on LD_LIBRARY_PATH, the system cache and {} standard paths)",
        names[0],
        tried.len()
    ))
}

/// Loads one library by absolute path (`MINISGL_CUDA_DRIVER_LIB` names the
/// driver this way, e.g. a forward-compatibility libcuda, or a missing file
/// to force the no-driver path).
fn load_path(path: &std::path::Path) -> Result<(), String> {
    // SAFETY: as in `load_one`.
    match unsafe { libloading::Library::new(path) } {
        Ok(lib) => {
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(format!("{} (MINISGL_CUDA_DRIVER_LIB): {e}", path.display())),
    }
}

/// Which CUDA pieces are usable in this process.
#[derive(Clone, Debug)]
pub struct Libs {
    pub driver: Result<(), String>,
    pub nvrtc: Result<(), String>,
    pub cublas: Result<(), String>,
}

/// Probe (once) and pre-load the libraries.
pub fn probe() -> &'static Libs {
    static LIBS: OnceLock<Libs> = OnceLock::new();
    LIBS.get_or_init(|| {
        let driver = match std::env::var_os("MINISGL_CUDA_DRIVER_LIB") {
            Some(path) => load_path(std::path::Path::new(&path)),
            None => load_one(&["libcuda.so.1", "libcuda.so"]),
        };
        let nvrtc = load_one(&["libnvrtc.so.13", "libnvrtc.so"]);
        let cublas = load_one(&["libcublasLt.so.13", "libcublasLt.so"])
            .and_then(|_| load_one(&["libcublas.so.13", "libcublas.so"]));
        // SAFETY: only asks the dynamic loader whether the library can be opened.
        let driver = driver.and_then(|_| {
            if unsafe { cudarc::driver::sys::is_culib_present() } {
                Ok(())
            } else {
                Err("libcuda".into())
            }
        });
        let nvrtc = nvrtc.and_then(|_| {
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                Ok(())
            } else {
                Err("libnvrtc".into())
            }
        });
        Libs {
            driver,
            nvrtc,
            cublas,
        }
    })
}

/// Error unless NVRTC can be used (no GPU needed).
pub fn require_nvrtc() -> Result<(), CudaError> {
    probe().nvrtc.clone().map_err(|m| {
        CudaError::Missing(format!(
            "NVRTC not found: {m}; install the CUDA toolkit or `pip install nvidia-cuda-nvrtc==13.0.88` and put its lib folder on LD_LIBRARY_PATH"
        ))
    })
}

/// Error unless the driver, NVRTC and cuBLAS can all be used.
pub fn require_all() -> Result<(), CudaError> {
    let l = probe();
    if let Err(m) = &l.driver {
        return Err(CudaError::Missing(format!(
            "no CUDA driver found ({m}); use --device cpu"
        )));
    }
    require_nvrtc()?;
    if let Err(m) = &l.cublas {
        return Err(CudaError::Missing(format!(
            "cuBLAS not found: {m}; install the CUDA 13 toolkit or add its lib folder to LD_LIBRARY_PATH"
        )));
    }
    Ok(())
}
