//! RMS norm, with the residual add fused (`kernels/norm.cu`).

use super::shape_err;
use crate::backend::cuda::{cfg, g, timeline, Arg, CudaBackend, CudaTensor};
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
            // Read x, write the normed copy.
            timeline::cost((2 * rows * n * 2 + n * 2) as f64, 0.0);
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), self.norm_threads(rows, n)),
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
            // Read the residual and x, write the sum back and the normed copy.
            timeline::cost((4 * rows * n * 2 + n * 2) as f64, 0.0);
            self.launch(
                "add_rmsnorm",
                cfg((g(rows), 1, 1), self.norm_threads(rows, n)),
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

    /// Threads a block of `add_rmsnorm` for `rows` rows of `hidden`. Where 256-thread
    /// blocks (a row each) fit in one wave, 256: every row then costs one memory round
    /// trip spread over the most warps. Past that wave, enough threads for four 16-byte
    /// vectors each (the kernel's one-pass limit, `NORM_VPT`), in whole warps, 32 to
    /// 256, so more rows stay resident. Measured on the H200 (Qwen3-0.6B, hidden 1,024,
    /// docs/results/gpu-2026-12-04-norm.md): 8,190 rows 27.6 -> 17.4 µs with one warp a
    /// row, but 14 rows 2.58 -> 3.36 µs. `MINISGL_NORM_THREADS` sets a count by hand.
    pub(crate) fn norm_threads(&self, rows: usize, hidden: usize) -> u32 {
        match self.norm_threads.get() {
            0 => norm_block_threads(rows, hidden, self.dev.norm_blocks_per_sm * self.dev.num_sms),
            n => n as u32,
        }
    }
}

/// [`CudaBackend::norm_threads`]'s rule for `rows` rows of `hidden`, where a wave of
/// 256-thread blocks holds `wave_rows` rows.
fn norm_block_threads(rows: usize, hidden: usize, wave_rows: usize) -> u32 {
    if rows <= wave_rows {
        256
    } else {
        hidden.div_ceil(32).next_multiple_of(32).clamp(32, 256) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::norm_block_threads;

    #[test]
    fn decode_rows_keep_256_threads_and_prefill_rows_take_four_vectors_a_thread() {
        // The H200: 4 blocks of 256 an SM x 132 SMs.
        let wave = 528;
        for hidden in [1024, 4096, 5120] {
            assert_eq!(norm_block_threads(1, hidden, wave), 256);
            assert_eq!(norm_block_threads(wave, hidden, wave), 256);
        }
        assert_eq!(norm_block_threads(8190, 1024, wave), 32);
        assert_eq!(norm_block_threads(8190, 4096, wave), 128);
        assert_eq!(norm_block_threads(8190, 5120, wave), 160);
        // Narrow rows still take a whole warp; past 8,192 the two-pass path at 256.
        assert_eq!(norm_block_threads(8190, 576, wave), 32);
        assert_eq!(norm_block_threads(8190, 10240, wave), 256);
        // Every count covers the row in at most four vectors a thread up to 8,192.
        for hidden in (8..=8192).step_by(8) {
            let t = norm_block_threads(10_000, hidden, wave) as usize;
            assert!(
                t.is_multiple_of(32) && hidden / 8 <= 4 * t,
                "hidden {hidden}: {t}"
            );
        }
    }
}
