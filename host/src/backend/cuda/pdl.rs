//! Launches with attributes (`cuLaunchKernelEx`): thread-block clusters (the
//! cluster-merged decode) and programmatic dependent launch.
//!
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

/// The largest thread-block cluster (x only, up to 16) of `f` with `smem` bytes of
/// dynamic shared memory a block that the driver can place at least once; 0 if none.
/// Sizes past 8 need the non-portable opt-in, asked for here (Hopper allows 16).
pub(crate) fn max_cluster(
    f: &CudaFunction,
    smem: usize,
    stream: &cudarc::driver::CudaStream,
) -> usize {
    // SAFETY: a valid function handle and a documented attribute; failure leaves 8 the limit.
    let _ = unsafe {
        sys::cuFuncSetAttribute(
            f.cu_function(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            1,
        )
    };
    for x in (2..=16u32).rev() {
        let mut attr = cluster_attr(x);
        let lc = launch_config(
            &LaunchConfig {
                grid_dim: (x, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: smem as u32,
            },
            stream.cu_stream(),
            std::slice::from_mut(&mut attr),
        );
        let mut n = 0i32;
        // SAFETY: `lc` and its attribute live across the call; `n` is written by it.
        let r = unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), &lc) };
        if r == sys::CUresult::CUDA_SUCCESS && n >= 1 {
            return x as usize;
        }
    }
    0
}

fn cluster_attr(x: u32) -> sys::CUlaunchAttribute {
    // SAFETY: a zeroed union is a valid bit pattern; the one field set is plain ints.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.clusterDim.x = x;
    value.clusterDim.y = 1;
    value.clusterDim.z = 1;
    sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        pad: [0; 4],
        value,
    }
}

fn launch_config(
    cfg: &LaunchConfig,
    stream: sys::CUstream,
    attrs: &mut [sys::CUlaunchAttribute],
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    }
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
        self.launch_with(f, cfg, args, attr)
    }

    /// Launch `f` as clusters of `x` blocks along x (the grid's x a multiple of it).
    pub(crate) fn launch_cluster(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        args: &[Arg],
        x: u32,
    ) -> Result<(), BackendError> {
        self.launch_with(f, cfg, args, cluster_attr(x))
    }

    /// `cuLaunchKernelEx` with one launch attribute.
    fn launch_with(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        args: &[Arg],
        mut attr: sys::CUlaunchAttribute,
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
        let lc = launch_config(
            &cfg,
            self.dev.stream.cu_stream(),
            std::slice::from_mut(&mut attr),
        );
        self.dev.ctx.bind_to_thread()?;
        // SAFETY: `params` points at values that outlive the call, one per kernel
        // parameter as its .cu file documents (the callers in ops/ push exactly those);
        // `lc` and `attr` live across the call.
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
