//! The tensor-parallel sum: NCCL on the activations where they are.

use crate::backend::cuda::{Buf, CudaBackend, CudaTensor};
use crate::backend::BackendError;

impl CudaBackend {
    /// Sums `x` over the rank's group in place, on the backend's stream, so
    /// that it is ordered with the ops around it and recorded into decode
    /// graphs like they are (NCCL supports stream capture).
    pub(super) fn all_reduce_impl(&self, x: &mut CudaTensor) -> Result<(), BackendError> {
        let Some(rank) = &self.nccl else {
            return Err(BackendError::Unsupported(
                "all-reduce: this CUDA backend is not a rank of a tensor-parallel group".into(),
            ));
        };
        let n = x.numel();
        let Buf::Bf16(s) = &x.buf else {
            return Err(super::shape_err(
                "all_reduce",
                format!("expected bf16 activations, got f32 {:?}", x.shape),
            ));
        };
        let ptr = self.ptr(s);
        rank.all_reduce_bf16(ptr, n, &self.dev.stream)
    }
}
