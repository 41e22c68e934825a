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
}
