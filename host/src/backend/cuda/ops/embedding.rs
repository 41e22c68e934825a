//! Token embedding lookup (`kernels/embedding.cu`).

use crate::backend::cuda::{cfg, g, Arg, CudaBackend, CudaStep, CudaTensor};
use crate::backend::{shapes, BackendError};

impl CudaBackend {
    pub(super) fn embedding_impl(
        &self,
        table: &CudaTensor,
        step: &CudaStep,
    ) -> Result<CudaTensor, BackendError> {
        let toks = &step.meta.tokens;
        let (vocab, hidden) = shapes::embedding(&table.shape, toks)?;
        if !hidden.is_multiple_of(8) {
            return Err(BackendError::Unsupported(format!(
                "embedding: hidden {hidden} not a multiple of 8"
            )));
        }
        let out = self.new_bf16(toks.len(), hidden)?;
        if !toks.is_empty() {
            self.launch(
                "embedding_gather",
                cfg((g(toks.len()), 1, 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(table, "embedding")?),
                    Arg::U64(self.step_ptr(step, step.off.tokens)),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(hidden as i32),
                    Arg::I32(vocab as i32),
                ],
            )?;
        }
        Ok(out)
    }
}
