//! A report channel for kernels that detect their own deadlock. A kernel that waits
//! on a barrier past its limit writes what it waited on into host memory mapped into
//! the device and traps (see `attention_prefill_ws_sm90.cu`). After the trap the
//! context is lost and device memory can no longer be read, so the report lives in
//! pinned host memory, and a thread here prints it as soon as it appears, whatever
//! the engine does with the launch error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cudarc::driver::{sys, CudaContext, PinnedHostSlice};

use crate::backend::cuda::error::CudaError;

/// Ints in a report: flag, block, warp, barrier index, parity, work item.
const WORDS: usize = 6;

pub struct Watchdog {
    /// Where the kernel writes (a device address of `host`).
    device_ptr: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    // Freed after the thread has stopped reading it (Drop below).
    _host: PinnedHostSlice<i32>,
}

/// The host address, passed to the polling thread as an integer (raw pointers are
/// not Send); the allocation outlives the thread.
struct HostAddr(usize);

impl Watchdog {
    pub fn new(ctx: &Arc<CudaContext>, kernel: &'static str) -> Result<Watchdog, CudaError> {
        // SAFETY: zeroed below before any kernel can see it.
        let host = unsafe {
            ctx.alloc_pinned_with_flags::<i32>(
                WORDS,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )?
        };
        // No work was recorded on the slice's event, so this does not wait.
        let p = host.as_ptr()? as *mut i32;
        for i in 0..WORDS {
            // SAFETY: `p` points at WORDS i32 of pinned memory owned by `host`.
            unsafe { p.add(i).write_volatile(0) };
        }
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `p` was allocated by cuMemHostAlloc with DEVICEMAP in this context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, p.cast(), 0) }.result()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, flag) = (HostAddr(p as usize), stop.clone());
        let thread = std::thread::Builder::new()
            .name("kernel-watchdog".into())
            .spawn(move || {
                let addr = addr;
                let p = addr.0 as *const i32;
                while !flag.load(Ordering::Relaxed) {
                    // SAFETY: the allocation is alive until this thread is joined.
                    let w: [i32; WORDS] =
                        std::array::from_fn(|i| unsafe { p.add(i).read_volatile() });
                    if w[0] != 0 {
                        tracing::error!(
                            "{kernel}: block {} warp {} waited past its limit on barrier {} (parity {}) at work item {}; the kernel trapped",
                            w[1], w[2], w[3], w[4], w[5]
                        );
                        eprintln!(
                            "{kernel} deadlock report: block {} warp {} barrier {} parity {} item {}",
                            w[1], w[2], w[3], w[4], w[5]
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .map_err(|e| CudaError::Unsupported(format!("kernel watchdog thread: {e}")))?;
        Ok(Watchdog {
            device_ptr,
            stop,
            thread: Some(thread),
            _host: host,
        })
    }

    /// The address kernels write their report to.
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
