//! The CPU backend with every upload rounded to bf16: the like-for-like reference
//! for the CUDA backend, which stores weights in bf16 (the CPU keeps f32).

use minisgl::backend::cpu::{CpuBackend, CpuKv, CpuStep, CpuTensor};
use minisgl::backend::{Backend, BackendError, HostData, KvLayout, Sampled, StepMeta};
use minisgl::batch::SampleSpec;

pub struct RoundedCpu(pub CpuBackend);

impl Backend for RoundedCpu {
    type Tensor = CpuTensor;
    type Step = CpuStep;
    type Kv = CpuKv;
    type Graph = ();
    type Sampling = Vec<Sampled>;
    fn name(&self) -> &'static str {
        "cpu-bf16-weights"
    }
    fn upload(&self, shape: &[usize], data: HostData<'_>) -> Result<CpuTensor, BackendError> {
        let mut t = self.0.upload(shape, data)?;
        // 1-D f32 tables (RoPE frequencies) stay exact on the GPU too.
        if shape.len() > 1 || data.dtype != minisgl::backend::DType::F32 {
            for x in t.data.iter_mut() {
                *x = half::bf16::from_f32(*x).to_f32();
            }
        }
        Ok(t)
    }
    fn to_host(&self, t: &CpuTensor) -> Result<Vec<f32>, BackendError> {
        self.0.to_host(t)
    }
    /// The inner backend's fold (on only for `CpuBackend::with_folded_norms`), then `g · W`
    /// rounded to bf16 as the CUDA backend stores it.
    fn fold_norm(
        &self,
        w: &mut CpuTensor,
        norm: &CpuTensor,
    ) -> Result<Option<CpuTensor>, BackendError> {
        let unit = self.0.fold_norm(w, norm)?;
        if unit.is_some() {
            for x in w.data.iter_mut() {
                *x = half::bf16::from_f32(*x).to_f32();
            }
        }
        Ok(unit)
    }
    fn alloc_kv(&self, layout: KvLayout) -> Result<CpuKv, BackendError> {
        self.0.alloc_kv(layout)
    }
    fn prepare_step(&self, meta: &StepMeta) -> Result<CpuStep, BackendError> {
        self.0.prepare_step(meta)
    }
    fn embedding(&self, table: &CpuTensor, step: &CpuStep) -> Result<CpuTensor, BackendError> {
        self.0.embedding(table, step)
    }
    fn rms_norm(&self, x: &CpuTensor, w: &CpuTensor, eps: f32) -> Result<CpuTensor, BackendError> {
        self.0.rms_norm(x, w, eps)
    }
    fn add_rms_norm(
        &self,
        r: &mut CpuTensor,
        x: &CpuTensor,
        w: &CpuTensor,
        eps: f32,
    ) -> Result<CpuTensor, BackendError> {
        self.0.add_rms_norm(r, x, w, eps)
    }
    fn linear(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        b: Option<&CpuTensor>,
    ) -> Result<CpuTensor, BackendError> {
        self.0.linear(x, w, b)
    }
    fn linear_add(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        b: Option<&CpuTensor>,
        r: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        self.0.linear_add(x, w, b, r)
    }
    fn split_cols(&self, x: &CpuTensor, widths: &[usize]) -> Result<Vec<CpuTensor>, BackendError> {
        self.0.split_cols(x, widths)
    }
    fn head_rms_norm(
        &self,
        x: &mut CpuTensor,
        w: &CpuTensor,
        hd: usize,
        eps: f32,
    ) -> Result<(), BackendError> {
        self.0.head_rms_norm(x, w, hd, eps)
    }
    fn rope(
        &self,
        x: &mut CpuTensor,
        hd: usize,
        f: &CpuTensor,
        step: &CpuStep,
    ) -> Result<(), BackendError> {
        self.0.rope(x, hd, f, step)
    }
    fn silu_mul(&self, gu: &CpuTensor) -> Result<CpuTensor, BackendError> {
        self.0.silu_mul(gu)
    }
    fn store_kv(
        &self,
        kv: &mut CpuKv,
        l: usize,
        k: &CpuTensor,
        v: &CpuTensor,
        step: &CpuStep,
    ) -> Result<(), BackendError> {
        self.0.store_kv(kv, l, k, v, step)
    }
    fn attention(
        &self,
        q: &CpuTensor,
        kv: &CpuKv,
        l: usize,
        step: &CpuStep,
        scale: f32,
    ) -> Result<CpuTensor, BackendError> {
        self.0.attention(q, kv, l, step, scale)
    }
    fn gather_rows(&self, x: CpuTensor, step: &CpuStep) -> Result<CpuTensor, BackendError> {
        self.0.gather_rows(x, step)
    }
    fn sample_launch(
        &self,
        logits: &CpuTensor,
        specs: &[SampleSpec],
    ) -> Result<Vec<Sampled>, BackendError> {
        self.0.sample_launch(logits, specs)
    }
    fn sample_finish(&self, s: Vec<Sampled>) -> Result<Vec<Sampled>, BackendError> {
        self.0.sample_finish(s)
    }
}
