//! The device rates gpu-check's benches and timeline set their floors against: the
//! device-to-device copy bandwidth and the bf16 GEMM rate the device holds.
//!
//! They are measured on this device at start (`bench_floor`'s ~3 s of copies and
//! GEMMs, as `bench offline` does), because the same binary runs on H100s (3.0 TB/s)
//! and H200s (4.3 TB/s): constants of one card printed floors 30% too low on the other
//! (2026-12-05, docs/results/gpu-2026-12-05-h100.md). Under a profiler those extra
//! launches would land in its report, so `MINISGL_GPU_RATES=COPY_TBPS,GEMM_TFLOPS`
//! gives them instead.

use anyhow::{bail, Result};
use minisgl::backend::cuda::CudaBackend;

/// Copy bandwidth and GEMM rate, and where they came from.
#[derive(Clone, Debug)]
pub struct Rates {
    /// Device-to-device copy, bytes read + written per second.
    pub copy_bytes_s: f64,
    /// bf16 GEMM FLOP/s held at the power limit.
    pub gemm_flops_s: f64,
    /// "measured now" or "given by MINISGL_GPU_RATES".
    pub source: &'static str,
}

impl Rates {
    /// `MINISGL_GPU_RATES` if set, else measured on the device `gpu` has open.
    pub fn get(gpu: &CudaBackend) -> Result<Rates> {
        match std::env::var("MINISGL_GPU_RATES") {
            Ok(v) => parse(&v),
            Err(_) => {
                let c = crate::cli::bench_floor::measure_on(gpu)?;
                Ok(Rates {
                    copy_bytes_s: c.copy_bytes_s,
                    gemm_flops_s: c.gemm_flops_s,
                    source: "measured now",
                })
            }
        }
    }

    /// Copy bandwidth in TB/s.
    pub fn copy_tbps(&self) -> f64 {
        self.copy_bytes_s / 1e12
    }

    /// GEMM rate in TFLOP/s.
    pub fn gemm_tflops(&self) -> f64 {
        self.gemm_flops_s / 1e12
    }

    /// The line benches print before their figures.
    pub fn describe(&self) -> String {
        format!(
            "device rates: copy {:.2} TB/s, bf16 GEMM {:.0} TFLOP/s held ({})",
            self.copy_tbps(),
            self.gemm_tflops(),
            self.source
        )
    }
}

/// `COPY_TBPS,GEMM_TFLOPS`, e.g. `4.28,670`.
fn parse(v: &str) -> Result<Rates> {
    let nums: Vec<Option<f64>> = v
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
        })
        .collect();
    match nums[..] {
        [Some(copy), Some(gemm)] => Ok(Rates {
            copy_bytes_s: copy * 1e12,
            gemm_flops_s: gemm * 1e12,
            source: "given by MINISGL_GPU_RATES",
        }),
        _ => bail!(
            "MINISGL_GPU_RATES must be COPY_TBPS,GEMM_TFLOPS (two positive numbers, e.g. 4.28,670), got {v:?}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn given_rates_parse_and_bad_ones_name_the_variable_and_value() {
        let r = parse(" 3.01, 664 ").unwrap();
        assert_eq!(r.copy_bytes_s, 3.01e12);
        assert_eq!(r.gemm_flops_s, 664e12);
        assert_eq!(r.source, "given by MINISGL_GPU_RATES");
        for bad in [
            "",
            "4.28",
            "4.28,670,1",
            "fast,670",
            "0,670",
            "4.28,-1",
            "4.28,inf",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("MINISGL_GPU_RATES") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
    }
}
