//! RMS norm, with the residual add fused (`kernels/norm.cu`).

use super::shape_err;
use crate::backend::cuda::{cfg, g, Arg, CudaBackend, CudaTensor};
use crate::backend::BackendError;

impl CudaBackend {
    pub(super) fn rms_norm_impl(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, n) = x.rows_cols("rms_norm")?;
        if w.numel() != n || !n.is_multiple_of(8) {
            return Err(shape_err(
                "rms_norm",
                format!("x {:?} weight {:?}", x.shape, w.shape),
            ));
        }
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), 256),
                &[
                    Arg::U64(self.bf16_ptr(x, "rms_norm")?),
                    Arg::U64(0),
                    Arg::U64(self.bf16_ptr(w, "rms_norm")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                    Arg::F32(eps),
                ],
            )?;
        }
        Ok(out)
    }

    pub(super) fn add_rms_norm_impl(
        &self,
        residual: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, n) = residual.rows_cols("add_rms_norm")?;
        if residual.shape != x.shape || w.numel() != n || !n.is_multiple_of(8) {
            return Err(shape_err(
                "add_rms_norm",
                format!(
                    "residual {:?} x {:?} weight {:?}",
                    residual.shape, x.shape, w.shape
                ),
            ));
        }
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), 256),
                &[
                    Arg::U64(self.bf16_ptr(residual, "add_rms_norm")?),
                    Arg::U64(self.bf16_ptr(x, "add_rms_norm")?),
                    Arg::U64(self.bf16_ptr(w, "add_rms_norm")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                    Arg::F32(eps),
                ],
            )?;
        }
        Ok(out)
    }
}
