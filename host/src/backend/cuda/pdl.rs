//! Programmatic dependent launch (Hopper and later): a kernel may start while the
//! one before it on the stream is finishing, so its launch, its blocks' start-up and
//! (for the skinny products) its first weight loads overlap the previous kernel's tail.
//! At one decode row a step is some two hundred short kernels, each paying that
//! start-up in full when launches serialise.
//!
//! Only kernels written for it get the attribute: each calls `pdl_wait()` (kernels/
//! common.cuh) in every block before it reads what earlier kernels wrote or writes
//! anything, and `pdl_trigger()` so that the next one can start early in turn.

use std::ffi::c_void;

use cudarc::driver::{sys, CudaFunction, LaunchConfig};

use super::{Arg, CudaBackend};
use crate::backend::BackendError;

/// Whether `kernel` is written for programmatic dependent launch (see the module docs).
pub(crate) fn pdl_kernel(kernel: &str) -> bool {
    kernel.starts_with("gemv_")
        || kernel.starts_with("qkv_rope_store_")
        || kernel.starts_with("attn_decode_mma_hd")
        || kernel == "attn_decode_combine"
}

impl CudaBackend {
    /// Launch `f` with the programmatic-stream-serialisation attribute.
    pub(crate) fn launch_pdl(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> Result<(), BackendError> {
        // SAFETY: a zeroed union is a valid bit pattern; the one field set is an int.
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        self.launch_attrs(f, cfg, args, &mut [attr])
    }

    /// Launch `f` on the stream with launch attributes (`cuLaunchKernelEx`): PDL, or a
    /// cluster shape.
    pub(crate) fn launch_attrs(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        args: &[Arg],
        attrs: &mut [sys::CUlaunchAttribute],
    ) -> Result<(), BackendError> {
        // The driver reads each argument through a pointer to its value (`args`
        // outlives the call).
        let mut params: Vec<*mut c_void> = args
            .iter()
            .map(|a| match a {
                Arg::U64(v) => v as *const u64 as *mut c_void,
                Arg::I32(v) => v as *const i32 as *mut c_void,
                Arg::F32(v) => v as *const f32 as *mut c_void,
                Arg::I64(v) => v as *const i64 as *mut c_void,
                Arg::Map(v) => v as *const _ as *mut c_void,
            })
            .collect();
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.dev.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        self.dev.ctx.bind_to_thread()?;
        // SAFETY: `params` points at values that outlive the call, one per kernel
        // parameter as its .cu file documents (the callers in ops/ push exactly those);
        // `lc` and `attrs` live across the call.
        unsafe {
            sys::cuLaunchKernelEx(
                &lc,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        Ok(())
    }
}
