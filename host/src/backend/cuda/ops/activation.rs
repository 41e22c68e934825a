//! SwiGLU's `silu(gate) * up` (`kernels/activation.cu`).

use super::shape_err;
use crate::backend::cuda::{cfg, g, timeline, Arg, CudaBackend, CudaTensor};
use crate::backend::BackendError;

impl CudaBackend {
    pub(super) fn silu_mul_impl(&self, gate_up: &CudaTensor) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = gate_up.rows_cols("silu_mul")?;
        if !cols.is_multiple_of(16) {
            return Err(shape_err(
                "silu_mul",
                format!("width {cols} (need a multiple of 16)"),
            ));
        }
        let n = cols / 2;
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            // Read gate and up, write their product.
            timeline::cost((3 * rows * n * 2) as f64, 0.0);
            self.launch(
                "silu_mul",
                cfg((rows as u32, g((n / 8).div_ceil(128)), 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(gate_up, "silu_mul")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                ],
            )?;
        }
        Ok(out)
    }

    /// `silu_mul` of a product of the raw residual stream `res` (`[rows, hidden]`),
    /// each row's gate and up first scaled by its RMSNorm factor (`silu_mul_rms`): the
    /// consumer of a norm folded into the gate_up weight.
    pub(super) fn silu_mul_rms_impl(
        &self,
        gate_up: &CudaTensor,
        res: &CudaTensor,
        eps: f32,
    ) -> Result<CudaTensor, BackendError> {
        let (rows, cols) = gate_up.rows_cols("silu_mul_rms")?;
        let (res_rows, hidden) = res.rows_cols("silu_mul_rms")?;
        if !cols.is_multiple_of(16) || res_rows != rows || !hidden.is_multiple_of(8) {
            return Err(shape_err(
                "silu_mul_rms",
                format!(
                    "gate_up {:?} (width a multiple of 16) over residual {:?}",
                    gate_up.shape, res.shape
                ),
            ));
        }
        let n = cols / 2;
        let out = self.new_bf16(rows, n)?;
        if rows > 0 {
            // Each block reads the residual row for its factor: few blocks a row, but
            // enough blocks in all to fill the SMs at small batches.
            let runs = (n / 8).div_ceil(128);
            let y = runs.min(2.max((4 * self.dev.num_sms).div_ceil(rows)));
            timeline::cost((3 * rows * n * 2 + y * rows * hidden * 2) as f64, 0.0);
            self.launch(
                "silu_mul_rms",
                cfg((rows as u32, g(y), 1), 128),
                &[
                    Arg::U64(self.bf16_ptr(gate_up, "silu_mul_rms")?),
                    Arg::U64(self.bf16_ptr(res, "silu_mul_rms")?),
                    Arg::U64(self.tptr(&out)),
                    Arg::I32(n as i32),
                    Arg::I32(hidden as i32),
                    Arg::F32(eps),
                ],
            )?;
        }
        Ok(out)
    }
}
