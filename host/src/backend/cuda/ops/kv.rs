//! The paged KV cache: allocation, and writing new tokens' K and V
//! (`kernels/kv_store.cu`).

use super::shape_err;
use crate::backend::cuda::{cfg, g, Arg, CudaBackend, CudaKv, CudaStep, CudaTensor};
use crate::backend::{BackendError, KvLayout};

/// Every slot the step writes lies in the pool or the scratch page past it.
pub(super) fn check_slots(l: KvLayout, step: &CudaStep) -> Result<(), BackendError> {
    let cap = (l.num_pages + 1) * l.page_size;
    match step.meta.slots.iter().find(|&&s| s as usize >= cap) {
        Some(s) => Err(BackendError::InvalidInput(format!(
            "slot {s} out of range ({cap})"
        ))),
        None => Ok(()),
    }
}

impl CudaBackend {
    pub(super) fn alloc_kv_impl(&self, layout: KvLayout) -> Result<CudaKv, BackendError> {
        if !layout.head_dim.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "head_dim {} (the CUDA kernels need a multiple of 8)",
                layout.head_dim
            )));
        }
        // One page past the pool: the scratch page that padding rows of
        // recorded decode steps read and write.
        let n = (layout.num_pages + 1) * layout.page_size * layout.kv_heads * layout.head_dim;
        let mut k = Vec::with_capacity(layout.num_layers);
        let mut v = Vec::with_capacity(layout.num_layers);
        for _ in 0..layout.num_layers {
            k.push(self.dev.stream.alloc_zeros::<u16>(n.max(1))?);
            v.push(self.dev.stream.alloc_zeros::<u16>(n.max(1))?);
        }
        Ok(CudaKv { layout, k, v })
    }

    pub(super) fn store_kv_impl(
        &self,
        kv: &mut CudaKv,
        layer: usize,
        k: &CudaTensor,
        v: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        let l = kv.layout;
        let width = l.kv_heads * l.head_dim;
        let (rows, cols) = k.rows_cols("store_kv")?;
        if layer >= l.num_layers
            || cols != width
            || v.shape != k.shape
            || step.meta.slots.len() != rows
        {
            return Err(shape_err(
                "store_kv",
                format!(
                    "layer {layer}, k {:?}, v {:?}, cache {l:?}, {} slots",
                    k.shape,
                    v.shape,
                    step.meta.slots.len()
                ),
            ));
        }
        check_slots(l, step)?;
        if rows == 0 {
            return Ok(());
        }
        let kc = self.ptr(&kv.k[layer]);
        let vc = self.ptr(&kv.v[layer]);
        self.launch(
            "kv_store",
            cfg((g(rows), 1, 1), 128),
            &[
                Arg::U64(self.bf16_ptr(k, "store_kv")?),
                Arg::U64(self.bf16_ptr(v, "store_kv")?),
                Arg::I32(width as i32),
                Arg::I32(width as i32),
                Arg::U64(self.step_ptr(step, step.off.slots)),
                Arg::U64(kc),
                Arg::U64(vc),
                Arg::I32(width as i32),
            ],
        )
    }
}
