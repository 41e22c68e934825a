//! Where a model runs: the runner a device and a tensor-parallel degree get
//! (one rank, or [`super::tp_runner`]'s thread per rank), and the KV budget a
//! rank takes when none is configured. Kept apart from [`super::runner`], which
//! the TP ranks themselves build on, so the two do not import each other.

use super::loader::LoadedModel;
use super::runner::{DeviceKind, ModelRunner, Runner, RunnerOptions};
use super::tp::TpShard;
use super::ModelError;
use crate::backend::cpu::CpuBackend;

/// Share of the device memory left after the weights that the KV cache takes
/// when no size is configured (Mini-SGLang's `--memory-ratio`).
pub const KV_MEMORY_RATIO: f64 = 0.9;

/// Device memory kept back from the KV cache for activations, logits, cuBLAS's
/// workspace and recorded graphs (a 8192-token prefill chunk of a 14B model
/// needs about 1 GiB of activations).
const GPU_RESERVE_BYTES: u64 = 4 << 30;

/// KV cache budget in bytes of one rank when none is configured: on a GPU,
/// [`KV_MEMORY_RATIO`] of the free device memory once `weight_bytes` (the
/// rank's weights) are loaded, less a reserve, on the least free of the `tp`
/// devices the ranks use; on the CPU (or `Auto` without a GPU), 1 GiB.
pub fn auto_kv_budget(device: DeviceKind, weight_bytes: u64, tp: usize) -> Result<u64, ModelError> {
    const CPU_DEFAULT: u64 = 1 << 30;
    let gpu = |strict: bool| -> Result<u64, ModelError> {
        let ordinals = match super::tp_runner::gpu_ordinals(tp.max(1)) {
            Ok(o) => o,
            Err(e) if strict => return Err(e),
            Err(_) => return Ok(CPU_DEFAULT),
        };
        let free = ordinals
            .into_iter()
            .map(|o| crate::backend::cuda::device::memory_info(o).map(|(f, _)| f))
            .collect::<Result<Vec<u64>, _>>()
            .map(|f| f.into_iter().min().unwrap_or(0));
        match free {
            Ok(free) => {
                let left = free.saturating_sub(weight_bytes);
                let kv = (left as f64 * KV_MEMORY_RATIO) as u64;
                let kv = kv.saturating_sub(GPU_RESERVE_BYTES);
                if kv == 0 {
                    return Err(ModelError::Backend(crate::backend::BackendError::Device(
                        format!(
                            "no device memory left for the KV cache: {free} bytes free, the weights take {weight_bytes}"
                        ),
                    )));
                }
                Ok(kv)
            }
            Err(e) if strict => Err(ModelError::Backend(crate::backend::BackendError::Device(
                e.to_string(),
            ))),
            Err(_) => Ok(CPU_DEFAULT),
        }
    };
    match device {
        DeviceKind::Cpu => Ok(CPU_DEFAULT),
        DeviceKind::Cuda => gpu(true),
        DeviceKind::Auto => gpu(false),
    }
}

/// A runner on the CPU backend.
pub fn cpu_runner(
    model: &LoadedModel,
    num_pages: u32,
    page_size: u32,
) -> Result<Runner<CpuBackend>, ModelError> {
    Runner::new(CpuBackend::new(), model, num_pages, page_size)
}

/// A runner on the requested device with default [`RunnerOptions`].
pub fn build_runner(
    model: &LoadedModel,
    device: DeviceKind,
    num_pages: u32,
    page_size: u32,
) -> Result<Box<dyn ModelRunner>, ModelError> {
    build_runner_with(
        model,
        device,
        num_pages,
        page_size,
        &RunnerOptions::default(),
    )
}

/// A runner on the requested device. `Auto` falls back to the CPU (with a
/// log line) when CUDA is unavailable. With `opts.tp > 1` the model is split
/// across that many ranks ([`super::tp_runner`]): threads on the CPU, GPUs
/// meeting through NCCL on CUDA.
pub fn build_runner_with(
    model: &LoadedModel,
    device: DeviceKind,
    num_pages: u32,
    page_size: u32,
    opts: &RunnerOptions,
) -> Result<Box<dyn ModelRunner>, ModelError> {
    use crate::backend::cuda::{CudaBackend, CudaOptions};
    TpShard::check(&model.config, opts.tp)?;
    let cuda = || {
        CudaBackend::new(&CudaOptions::default())
            .map_err(|e| ModelError::Backend(crate::backend::BackendError::Device(e.to_string())))
    };
    let on_cuda = |b| -> Result<Box<dyn ModelRunner>, ModelError> {
        Ok(Box::new(Runner::with_options(
            b, model, num_pages, page_size, opts,
        )?))
    };
    let split_cuda = || -> Result<Box<dyn ModelRunner>, ModelError> {
        Ok(Box::new(super::tp_runner::cuda_ranks(
            model, num_pages, page_size, opts,
        )?))
    };
    let on_cpu = || -> Result<Box<dyn ModelRunner>, ModelError> {
        if opts.tp > 1 {
            return Ok(Box::new(super::tp_runner::cpu_threads(
                model, opts.tp, num_pages, page_size,
            )?));
        }
        Ok(Box::new(cpu_runner(model, num_pages, page_size)?))
    };
    match device {
        DeviceKind::Cpu => on_cpu(),
        DeviceKind::Cuda if opts.tp > 1 => split_cuda(),
        DeviceKind::Cuda => on_cuda(cuda()?),
        DeviceKind::Auto if opts.tp > 1 => match crate::backend::cuda::device::device_count() {
            Ok(n) if n > 0 => split_cuda(),
            Ok(_) => {
                tracing::info!("CUDA shows no GPU; using the CPU backend");
                on_cpu()
            }
            Err(e) => {
                tracing::info!("CUDA unavailable ({e}); using the CPU backend");
                on_cpu()
            }
        },
        DeviceKind::Auto => match cuda() {
            Ok(b) => on_cuda(b),
            Err(e) => {
                tracing::info!("CUDA unavailable ({e}); using the CPU backend");
                on_cpu()
            }
        },
    }
}
