//! Where weights come from: memory-mapped safetensors shards, GGUF tensors
//! held in memory (block-quantised ones still in their blocks, so a backend
//! can compute on them; the rest as f32), or deterministic random values of a
//! real shape.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;

use super::ModelError;
use crate::backend::cpu::sampling::splitmix64;
use crate::backend::{DType, HostData};
use crate::model::gguf::RawTensor;

/// One tensor's data, borrowed from a mapped file or owned.
#[derive(Clone, Debug)]
pub struct WeightTensor<'a> {
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Little-endian element bytes.
    pub bytes: Cow<'a, [u8]>,
}

impl WeightTensor<'_> {
    /// View for [`crate::backend::Backend::upload`].
    pub fn host(&self) -> HostData<'_> {
        HostData {
            dtype: self.dtype,
            bytes: &self.bytes,
        }
    }
}

struct StEntry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// Every `*.safetensors` file of a directory, memory-mapped and indexed.
pub struct SafetensorsWeights {
    maps: Vec<Mmap>,
    files: Vec<PathBuf>,
    index: HashMap<String, StEntry>,
}

impl SafetensorsWeights {
    /// Map and validate the given files (headers, offsets, file lengths).
    pub fn open(files: &[PathBuf]) -> Result<Self, ModelError> {
        if files.is_empty() {
            return Err(ModelError::Weights("no *.safetensors files found".into()));
        }
        let mut maps = Vec::new();
        let mut index = HashMap::new();
        for (fi, path) in files.iter().enumerate() {
            let f = File::open(path).map_err(|e| ModelError::io(path, e))?;
            // SAFETY: the map is read-only; model files are not expected to be
            // modified while the server runs (the same assumption every
            // safetensors loader makes).
            let map = unsafe { Mmap::map(&f) }.map_err(|e| ModelError::io(path, e))?;
            let (n, meta) = safetensors::SafeTensors::read_metadata(&map).map_err(|e| {
                ModelError::Weights(format!(
                    "{}: corrupt or truncated safetensors file ({e:?})",
                    path.display()
                ))
            })?;
            for (name, info) in meta.tensors() {
                let dtype = match info.dtype {
                    safetensors::Dtype::F32 => DType::F32,
                    safetensors::Dtype::BF16 => DType::BF16,
                    safetensors::Dtype::F16 => DType::F16,
                    other => {
                        return Err(ModelError::Unsupported(format!(
                            "tensor dtype {other:?} of `{name}` in {} (supported: F32, BF16, F16)",
                            path.display()
                        )))
                    }
                };
                let base = 8 + n;
                let entry = StEntry {
                    file: fi,
                    dtype,
                    shape: info.shape.clone(),
                    start: base + info.data_offsets.0,
                    end: base + info.data_offsets.1,
                };
                if index.insert(name.clone(), entry).is_some() {
                    return Err(ModelError::Weights(format!(
                        "tensor `{name}` appears in more than one shard"
                    )));
                }
            }
            maps.push(map);
        }
        Ok(SafetensorsWeights {
            maps,
            files: files.to_vec(),
            index,
        })
    }

    fn get(&self, name: &str) -> Option<WeightTensor<'_>> {
        let e = self.index.get(name)?;
        Some(WeightTensor {
            shape: e.shape.clone(),
            dtype: e.dtype,
            bytes: Cow::Borrowed(&self.maps[e.file][e.start..e.end]),
        })
    }

    /// The files that were opened.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// Deterministic random weights: mean 0, std 0.02, nearly normal (see `get`) for matrices, 1 for norm
/// weights, 0 for biases; stored as bf16 (half the host memory of f32, and what
/// a GPU backend keeps anyway).
pub struct RandomWeights {
    pub seed: u64,
}

fn fnv1a(s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x1000_0000_01b3);
    }
    h
}

impl RandomWeights {
    fn get(&self, name: &str, shape: &[usize]) -> WeightTensor<'static> {
        let n: usize = shape.iter().product();
        let fill = if name.ends_with("norm.weight") {
            Some(1.0f32)
        } else if name.ends_with(".bias") {
            Some(0.0)
        } else {
            None
        };
        // bf16 little-endian bytes, generated in parallel chunks that each
        // seed their own stream (so the result does not depend on threads).
        let mut out = vec![0u8; 2 * n];
        let seed = self.seed ^ fnv1a(name);
        const CHUNK: usize = 1 << 14;
        out.par_chunks_mut(2 * CHUNK)
            .enumerate()
            .for_each(|(ci, chunk)| {
                if let Some(v) = fill {
                    let b = half::bf16::from_f32(v).to_le_bytes();
                    for e in chunk.chunks_mut(2) {
                        e.copy_from_slice(&b);
                    }
                    return;
                }
                // Irwin–Hall: the sum of four 16-bit uniforms from one splitmix64 draw,
                // centred and scaled to std 0.02, is close enough to a normal for
                // benchmark weights and takes integer work only. Box–Muller in f64
                // (ln, sqrt, sin, cos per pair) took ~30 ns an element: 95 s of
                // startup for the 14.8B weights of Qwen3-14B on the GPU machine.
                const MEAN: f32 = 2.0 * 65535.0;
                // One uniform on 0..=65535 has variance (65536² - 1) / 12; four, a third of that.
                const SCALE: f32 = 0.02 / 37_837.23;
                let mut state = splitmix64(seed ^ ((ci as u64) << 20));
                for e in chunk.chunks_exact_mut(2) {
                    state = splitmix64(state);
                    let s = (state & 0xffff)
                        + ((state >> 16) & 0xffff)
                        + ((state >> 32) & 0xffff)
                        + (state >> 48);
                    let b = ((s as f32 - MEAN) * SCALE).to_bits();
                    // f32 -> bf16, round to nearest even (finite values only).
                    let h = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16;
                    e.copy_from_slice(&h.to_le_bytes());
                }
            });
        let bytes = out;
        WeightTensor {
            shape: shape.to_vec(),
            dtype: DType::BF16,
            bytes: Cow::Owned(bytes),
        }
    }
}

/// A model's tensors, by HF name.
pub enum Weights {
    Safetensors(SafetensorsWeights),
    /// GGUF tensors ([`crate::model::gguf::RawTensor`]: quantised blocks or f32).
    Gguf(HashMap<String, RawTensor>),
    Random(RandomWeights),
}

impl Weights {
    /// Whether a tensor is present (random weights have every tensor).
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Weights::Safetensors(s) => s.index.contains_key(name),
            Weights::Gguf(d) => d.contains_key(name),
            Weights::Random(_) => true,
        }
    }

    /// Fetch tensor `name`, checking it has `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<WeightTensor<'_>, ModelError> {
        let t = match self {
            Weights::Safetensors(s) => s.get(name),
            Weights::Gguf(d) => d.get(name).map(|t| WeightTensor {
                shape: t.shape.clone(),
                dtype: t.dtype,
                bytes: Cow::Borrowed(&t.bytes),
            }),
            Weights::Random(r) => Some(r.get(name, shape)),
        }
        .ok_or_else(|| ModelError::Weights(format!("missing tensor `{name}`")))?;
        if t.shape != shape {
            return Err(ModelError::Weights(format!(
                "tensor `{name}` has shape {:?}, the config implies {shape:?}",
                t.shape
            )));
        }
        let n = shape.iter().product::<usize>();
        let want = t.dtype.bytes_for(n);
        if want != Some(t.bytes.len()) {
            return Err(ModelError::Weights(format!(
                "tensor `{name}` has {} bytes, shape {shape:?} of {:?} needs {}",
                t.bytes.len(),
                t.dtype,
                want.map_or("whole blocks".to_string(), |w| w.to_string())
            )));
        }
        Ok(t)
    }
}

/// Sorted `*.safetensors` files directly inside `dir`.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_weights_have_the_documented_distribution() {
        let r = RandomWeights { seed: 3 };
        let t = r.get("model.layers.0.mlp.up_proj.weight", &[300, 301]);
        let v = t.host().to_f32();
        assert_eq!(v.len(), 300 * 301);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 1e-3, "mean {mean}");
        assert!((var.sqrt() - 0.02).abs() < 5e-4, "std {}", var.sqrt());
        // Same name and seed → same values; another name → different values.
        assert_eq!(
            r.get("model.layers.0.mlp.up_proj.weight", &[300, 301])
                .bytes,
            t.bytes
        );
        assert_ne!(
            r.get("model.layers.1.mlp.up_proj.weight", &[300, 301])
                .bytes,
            t.bytes
        );
        let norm = r.get("model.norm.weight", &[7]).host().to_f32();
        assert_eq!(norm, vec![1.0; 7]);
        let bias = r
            .get("model.layers.0.self_attn.q_proj.bias", &[5])
            .host()
            .to_f32();
        assert_eq!(bias, vec![0.0; 5]);
    }
}
