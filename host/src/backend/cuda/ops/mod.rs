//! The [`Backend`] ops on the device: shape checks, then one kernel or GEMM each.
//!
//! One file per op family, mirroring `kernels/*.cu`; this file holds the
//! [`Backend`] impl, which forwards each op to `<op>_impl` in its family's
//! file (a trait impl cannot be split across files; the suffix keeps the
//! inherent method from shadowing the trait's), and what the families share.

mod activation;
mod attention;
pub(crate) mod chain;
mod collective;
mod embedding;
mod kv;
mod linear;
mod norm;
mod rope;
mod tensor;

pub use attention::AttnPath;
pub use chain::LAYER_CHAIN_MAX_SMEM;
pub use linear::{GEMV_MAX_WEIGHT_BYTES, NORM_PROLOGUE_SMEM};

use super::{CudaBackend, CudaKv, CudaStep, CudaTensor};
use crate::backend::{
    AttnParams, Backend, BackendError, HostData, KvLayout, LayerChain, Sampled, StepMeta,
};
use crate::batch::SampleSpec;

// The one definition, shared with the CPU backend; the op files import it
// from here.
use crate::backend::shapes::shape_err;

impl CudaBackend {
    /// Device address of the step buffer's `i32` at offset `off`.
    fn step_ptr(&self, step: &CudaStep, off: usize) -> u64 {
        step.base + (off * 4) as u64
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Step = CudaStep;
    type Kv = CudaKv;
    type Graph = super::CudaGraphStep;
    type Sampling = super::CudaSampling;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn upload(&self, shape: &[usize], data: HostData<'_>) -> Result<CudaTensor, BackendError> {
        self.upload_impl(shape, data)
    }

    fn to_host(&self, t: &CudaTensor) -> Result<Vec<f32>, BackendError> {
        self.to_host_impl(t)
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<CudaKv, BackendError> {
        self.alloc_kv_impl(layout)
    }

    fn prepare_step(&self, meta: &StepMeta) -> Result<CudaStep, BackendError> {
        self.prepare_step_impl(meta)
    }

    fn all_reduce(&self, x: &mut CudaTensor) -> Result<(), BackendError> {
        self.all_reduce_impl(x)
    }

    fn embedding(&self, table: &CudaTensor, step: &CudaStep) -> Result<CudaTensor, BackendError> {
        self.embedding_impl(table, step)
    }

    fn rms_norm(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        self.rms_norm_impl(x, w, eps)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        self.add_rms_norm_impl(residual, x, w, eps)
    }

    fn linear(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        self.linear_impl(x, w, bias)
    }

    fn split_cols(
        &self,
        x: &CudaTensor,
        widths: &[usize],
    ) -> Result<Vec<CudaTensor>, BackendError> {
        self.split_cols_impl(x, widths)
    }

    fn head_rms_norm(
        &self,
        x: &mut CudaTensor,
        w: &CudaTensor,
        head_dim: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        self.head_rms_norm_impl(x, w, head_dim, eps)
    }

    fn rope(
        &self,
        x: &mut CudaTensor,
        head_dim: usize,
        inv_freq: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        self.rope_impl(x, head_dim, inv_freq, step)
    }

    fn silu_mul(&self, gate_up: &CudaTensor) -> Result<CudaTensor, BackendError> {
        self.silu_mul_impl(gate_up)
    }

    fn linear_silu_mul(&self, x: &CudaTensor, w: &CudaTensor) -> Result<CudaTensor, BackendError> {
        self.linear_silu_mul_impl(x, w)
    }

    fn linear_add_rms_norm(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        residual: &mut CudaTensor,
        norm: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        self.linear_add_rms_norm_impl(x, w, bias, residual, norm, eps)
    }

    fn norm_in_prologue(&self, residual: &CudaTensor, consumers: &[&CudaTensor]) -> bool {
        self.norm_in_prologue_impl(residual, consumers)
    }

    fn fold_norm(
        &self,
        w: &mut CudaTensor,
        norm: &CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        self.fold_norm_impl(w, norm)
    }

    fn norm_in_consumer(&self, residual: &CudaTensor, w: &CudaTensor) -> bool {
        self.norm_in_consumer_impl(residual, w)
    }

    fn linear_add(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        residual: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        self.linear_add_impl(x, w, bias, residual)
    }

    fn layer_chain_ok(
        &self,
        residual: &CudaTensor,
        chain: &LayerChain<'_, CudaTensor>,
        kv: &CudaKv,
        step: &CudaStep,
    ) -> bool {
        self.layer_chain_ok_impl(residual, chain, kv, step)
    }

    fn layer_chain(
        &self,
        chain: &LayerChain<'_, CudaTensor>,
        kv: &mut CudaKv,
        step: &CudaStep,
        residual: &mut CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        self.layer_span_impl(std::slice::from_ref(chain), kv, step, residual)
    }

    fn layer_span_len(
        &self,
        residual: &CudaTensor,
        chains: &[LayerChain<'_, CudaTensor>],
        kv: &CudaKv,
        step: &CudaStep,
    ) -> usize {
        self.layer_span_len_impl(residual, chains, kv, step)
    }

    fn layer_span(
        &self,
        chains: &[LayerChain<'_, CudaTensor>],
        kv: &mut CudaKv,
        step: &CudaStep,
        residual: &mut CudaTensor,
    ) -> Result<Option<CudaTensor>, BackendError> {
        self.layer_span_impl(chains, kv, step, residual)
    }

    fn rms_norm_linear(
        &self,
        x: &CudaTensor,
        norm: &CudaTensor,
        eps: f32,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        self.rms_norm_linear_impl(x, norm, eps, w, bias)
    }

    fn rms_norm_linear_silu_mul(
        &self,
        x: &CudaTensor,
        norm: &CudaTensor,
        eps: f32,
        w: &CudaTensor,
    ) -> Result<CudaTensor, BackendError> {
        self.rms_norm_linear_silu_mul_impl(x, norm, eps, w)
    }

    fn store_kv(
        &self,
        kv: &mut CudaKv,
        layer: usize,
        k: &CudaTensor,
        v: &CudaTensor,
        step: &CudaStep,
    ) -> Result<(), BackendError> {
        self.store_kv_impl(kv, layer, k, v, step)
    }

    fn attention(
        &self,
        q: &CudaTensor,
        kv: &CudaKv,
        layer: usize,
        step: &CudaStep,
        scale: f32,
    ) -> Result<CudaTensor, BackendError> {
        self.attention_impl(q, kv, layer, step, scale)
    }

    fn gather_rows(&self, x: CudaTensor, step: &CudaStep) -> Result<CudaTensor, BackendError> {
        self.gather_rows_impl(x, step)
    }

    fn sample_launch(
        &self,
        logits: &CudaTensor,
        specs: &[SampleSpec],
    ) -> Result<super::CudaSampling, BackendError> {
        self.sample_launch_impl(logits, specs)
    }

    fn sample_ready(&self, s: &super::CudaSampling) -> bool {
        self.sample_ready_impl(s)
    }

    fn sample_finish(&self, s: super::CudaSampling) -> Result<Vec<Sampled>, BackendError> {
        self.sample_finish_impl(s)
    }

    fn qkv_attention(
        &self,
        qkv: CudaTensor,
        kv: &mut CudaKv,
        layer: usize,
        step: &CudaStep,
        p: &AttnParams<'_, CudaTensor>,
    ) -> Result<CudaTensor, BackendError> {
        self.qkv_attention_impl(qkv, kv, layer, step, p)
    }

    fn reserve_graph_steps(
        &self,
        kv: &CudaKv,
        max_seqs: usize,
        max_pages: usize,
    ) -> Result<bool, BackendError> {
        self.reserve_graph_arena(kv.layout, max_seqs, max_pages)?;
        Ok(true)
    }

    fn prepare_graph_step(
        &self,
        meta: &StepMeta,
        padded_seqs: usize,
    ) -> Result<CudaStep, BackendError> {
        self.graph_step(meta, padded_seqs)
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        self.begin_capture_impl()
    }

    fn end_capture(&self) -> Result<super::CudaGraphStep, BackendError> {
        self.end_capture_impl()
    }

    fn replay(&self, graph: &super::CudaGraphStep) -> Result<(), BackendError> {
        graph.0.launch()?;
        Ok(())
    }

    fn alloc_logits(&self, rows: usize, cols: usize) -> Result<CudaTensor, BackendError> {
        self.alloc_logits_impl(rows, cols)
    }

    fn linear_into(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        self.linear_into_impl(x, w, out)
    }
}
