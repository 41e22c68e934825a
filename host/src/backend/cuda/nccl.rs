//! NCCL for tensor parallelism: one communicator per GPU, all made by one
//! `ncclCommInitAll` in this process, and the one collective the model
//! needs, an in-place bf16 sum all-reduce on a rank's stream.
//!
//! The library is opened at run time, like the other CUDA libraries
//! ([`super::libs`]), with the handful of entry points used here resolved
//! by hand rather than through cudarc's NCCL bindings: cudarc looks for
//! `libnccl.so` and `libnccl.so.<CUDA major>`, while the library's soname is
//! `libnccl.so.2` (the PyPI wheel `nvidia-nccl-cu13` ships only that name),
//! so the bindings would not find the copy that is actually installed.
//!
//! Failure: a rank that fails in the middle of a step leaves its peers'
//! all-reduce kernels spinning on the GPU, waiting for data that never comes;
//! only `ncclCommAbort` frees them. But most step errors (bad input,
//! validation) happen on every rank at the same point before any collective,
//! and aborting then would throw the communicators away for nothing. So
//! [`NcclRank::abort`] starts a grace period: if the runner has not called
//! [`Group::recover`] when it ends (every rank answered), the communicators
//! are aborted, the spinning kernels exit, and the group is dead for good
//! (recorded CUDA graphs hold the old communicators, so a new group would
//! mean a new runner).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::error::CudaError;
use crate::backend::comm::{DeferredAbort, Group};
use crate::backend::BackendError;

/// How long ranks that did not fail get to answer after one did, before
/// their collectives are aborted. A healthy step of the largest model takes
/// well under a second.
const ABORT_GRACE: Duration = Duration::from_secs(10);

/// `ncclBfloat16` in `ncclDataType_t` (stable since NCCL 2.10).
const NCCL_BFLOAT16: c_int = 9;
/// `ncclSum` in `ncclRedOp_t`.
const NCCL_SUM: c_int = 0;

type Comm = *mut c_void;
type NcclResult = c_int;

/// The entry points used, resolved once.
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> NcclResult,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        *mut c_void,
    ) -> NcclResult,
    destroy: unsafe extern "C" fn(Comm) -> NcclResult,
    abort: unsafe extern "C" fn(Comm) -> NcclResult,
    error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
    _lib: libloading::Library,
}

/// Folders of the PyPI wheel's copy, where Python puts it.
fn wheel_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for root in ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"] {
        let Ok(rd) = std::fs::read_dir(root) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("python3") {
                for sub in ["dist-packages", "site-packages"] {
                    dirs.push(e.path().join(sub).join("nvidia/nccl/lib"));
                }
            }
        }
    }
    dirs
}

fn open_library() -> Result<libloading::Library, String> {
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os("MINISGL_NCCL_LIB") {
        // SAFETY: loading NCCL runs its initialisers and nothing else.
        return unsafe { libloading::Library::new(&p) }
            .map_err(|e| format!("{} (MINISGL_NCCL_LIB): {e}", p.to_string_lossy()));
    }
    for n in ["libnccl.so.2", "libnccl.so"] {
        // SAFETY: as above.
        if let Ok(l) = unsafe { libloading::Library::new(n) } {
            return Ok(l);
        }
        tried.push(n.to_string());
    }
    for d in wheel_dirs() {
        let p = d.join("libnccl.so.2");
        if p.exists() {
            // SAFETY: as above.
            match unsafe { libloading::Library::new(&p) } {
                Ok(l) => return Ok(l),
                Err(e) => tried.push(format!("{} ({e})", p.display())),
            }
        }
    }
    Err(format!(
        "NCCL not found (tried {}; looked on LD_LIBRARY_PATH, the system cache and Python's \
         nvidia/nccl/lib folders): `pip install nvidia-nccl-cu13` and put its lib folder on \
         LD_LIBRARY_PATH, or set MINISGL_NCCL_LIB to libnccl.so.2",
        tried.join(", ")
    ))
}

fn api() -> Result<&'static Api, CudaError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        let lib = open_library()?;
        // SAFETY: each symbol is read with the signature nccl.h gives it.
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get($name)
                        .map_err(|e| format!("NCCL lacks {}: {e}", stringify!($name)))?
                };
            }
            Ok(Api {
                get_version: sym!(b"ncclGetVersion\0"),
                init_all: sym!(b"ncclCommInitAll\0"),
                all_reduce: sym!(b"ncclAllReduce\0"),
                destroy: sym!(b"ncclCommDestroy\0"),
                abort: sym!(b"ncclCommAbort\0"),
                error_string: sym!(b"ncclGetErrorString\0"),
                last_error: lib.get(b"ncclGetLastError\0").ok().map(|s| *s),
                _lib: lib,
            })
        }
    })
    .as_ref()
    .map_err(|m| CudaError::Missing(m.clone()))
}

/// The library's version as NCCL numbers it (2.27.3 → 22703), or why it
/// cannot be used.
pub fn version() -> Result<i32, CudaError> {
    let a = api()?;
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    check(a, unsafe { (a.get_version)(&mut v) }, std::ptr::null_mut())?;
    Ok(v)
}

fn check(a: &Api, r: NcclResult, comm: Comm) -> Result<(), CudaError> {
    if r == 0 {
        return Ok(());
    }
    // SAFETY: NCCL returns static, NUL-terminated strings.
    let what = unsafe { CStr::from_ptr((a.error_string)(r)) }.to_string_lossy();
    let detail = match (a.last_error, comm.is_null()) {
        (Some(f), false) => {
            // SAFETY: as above; the communicator is live.
            let s = unsafe { CStr::from_ptr(f(comm)) }.to_string_lossy();
            if s.is_empty() {
                String::new()
            } else {
                format!(" ({s})")
            }
        }
        _ => String::new(),
    };
    Err(CudaError::Driver(format!("NCCL: {what}{detail}")))
}

struct Shared {
    api: &'static Api,
    comms: Vec<Comm>,
    ordinals: Vec<usize>,
    grace: Arc<DeferredAbort>,
    /// The communicators were aborted (read on every all-reduce).
    dead: AtomicBool,
}

// SAFETY: a communicator is used for collectives by its own rank's thread
// only; `ncclCommAbort`, the one call made from another thread, is meant to
// be (it is how NCCL unblocks a hung collective).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.dead.load(Ordering::Acquire) {
            return; // aborted: already freed
        }
        for &c in &self.comms {
            // SAFETY: every rank's backend (and its recorded graphs) is gone
            // by now: they hold the Arc this is the last of.
            unsafe { (self.api.destroy)(c) };
        }
    }
}

impl Shared {
    fn abort_comms(&self) {
        self.dead.store(true, Ordering::Release);
        for &c in &self.comms {
            // SAFETY: frees the communicator and makes its in-flight kernels
            // return; nothing uses it afterwards (`dead` is checked first).
            unsafe { (self.api.abort)(c) };
        }
    }
}

/// One rank of an NCCL group: what its backend reduces through, and the
/// group's abort/recover handle for the tensor-parallel runner.
#[derive(Clone)]
pub struct NcclRank {
    shared: Arc<Shared>,
    rank: usize,
}

impl fmt::Debug for NcclRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NcclRank {{ rank: {}, world: {}, device: {} }}",
            self.rank,
            self.shared.comms.len(),
            self.shared.ordinals[self.rank]
        )
    }
}

/// A group of one communicator per device of `ordinals`; rank `i` runs on
/// device `ordinals[i]`.
pub fn init_group(ordinals: &[usize]) -> Result<Vec<NcclRank>, CudaError> {
    if ordinals.is_empty() {
        return Err(CudaError::Unsupported(
            "an NCCL group needs a device".into(),
        ));
    }
    let a = api()?;
    let devs: Vec<c_int> = ordinals.iter().map(|&o| o as c_int).collect();
    let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); devs.len()];
    // SAFETY: `comms` has room for one handle per device.
    check(
        a,
        unsafe { (a.init_all)(comms.as_mut_ptr(), devs.len() as c_int, devs.as_ptr()) },
        std::ptr::null_mut(),
    )?;
    let shared = Arc::new(Shared {
        api: a,
        comms,
        ordinals: ordinals.to_vec(),
        grace: Arc::new(DeferredAbort::default()),
        dead: AtomicBool::new(false),
    });
    Ok((0..ordinals.len())
        .map(|rank| NcclRank {
            shared: shared.clone(),
            rank,
        })
        .collect())
}

impl NcclRank {
    /// The device this rank runs on.
    pub fn ordinal(&self) -> usize {
        self.shared.ordinals[self.rank]
    }

    /// Enqueue on `stream`: the `n` bf16 values at device address `ptr`
    /// become their sum over every rank (identical on all of them: NCCL
    /// reduces each chunk on one rank and copies the result to the rest).
    /// Every rank must enqueue the same sequence of calls with the same `n`.
    pub fn all_reduce_bf16(
        &self,
        ptr: u64,
        n: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<(), BackendError> {
        if self.shared.dead.load(Ordering::Acquire) {
            let why = self.shared.grace.fired().unwrap_or_default();
            return Err(BackendError::Aborted(format!(
                "the NCCL group was aborted: {why}"
            )));
        }
        let (a, comm) = (self.shared.api, self.shared.comms[self.rank]);
        let p = ptr as *mut c_void;
        let stream = stream.cu_stream() as *mut c_void;
        // SAFETY: `ptr` holds `n` bf16 values on this rank's device and stays
        // alive until the stream has run the reduction (the caller's tensor
        // lives across the step); in place is allowed by NCCL.
        let r = unsafe { (a.all_reduce)(p, p, n, NCCL_BFLOAT16, NCCL_SUM, comm, stream) };
        check(a, r, comm).map_err(BackendError::from)
    }
}

impl Group for NcclRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.shared.comms.len()
    }

    fn abort(&self, reason: &str) {
        let shared = self.shared.clone();
        self.shared.grace.arm(
            format!("rank {} failed: {reason}", self.rank),
            ABORT_GRACE,
            move |reason| {
                tracing::error!(
                    "tensor-parallel ranks did not answer within {ABORT_GRACE:?} of a \
                     failure ({reason}); aborting the NCCL communicators"
                );
                shared.abort_comms();
            },
        );
    }

    fn recover(&self) -> Result<(), BackendError> {
        self.shared.grace.cancel().map_err(|why| {
            BackendError::Aborted(format!(
                "the NCCL group was aborted and cannot be rebuilt under recorded graphs: {why}"
            ))
        })
    }
}
