//! GGUF tensors → Hugging Face names, shapes and layouts (block-quantised
//! data kept as is, or dequantised f32).

use std::collections::HashMap;

use rayon::prelude::*;

use super::config::Arch;
use super::dequant::dequantize;
use super::error::GgufError;
use super::reader::{GgufFile, TensorInfo};
use super::DenseTensor;
use crate::backend::{DType, HostData};

/// The GGUF name of the tensor llama.cpp uses for Llama-3 rope scaling.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The Hugging Face name of a GGUF tensor, or `None` if it has none.
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let hf = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undoes llama.cpp's Q/K row permutation. Within each head of `head_dim`
/// rows, llama.cpp stores HF row `j * head_dim/2 + i` (j ∈ {0,1}) at row
/// `2i + j`; works for weights (`row_len` = in-features, or a row's bytes for
/// block-quantised data, whose blocks never straddle rows) and biases
/// (`row_len` = 1).
pub fn unpermute_rows<T: Copy + Default>(data: &[T], n_heads: usize, row_len: usize) -> Vec<T> {
    let rows = data.len() / row_len;
    let head_dim = rows / n_heads;
    let half = head_dim / 2;
    let mut out = vec![T::default(); data.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_dim + 2 * i + j) * row_len;
                let dst = (h * head_dim + j * half + i) * row_len;
                out[dst..dst + row_len].copy_from_slice(&data[src..src + row_len]);
            }
        }
    }
    out
}

/// Heads whose rows llama.cpp permuted in tensor `gguf_name` (q and k only).
fn permuted_heads(arch: Arch, gguf_name: &str, n_heads: usize, n_kv_heads: usize) -> Option<usize> {
    if !arch.qk_permuted() {
        return None;
    }
    if gguf_name.ends_with(".attn_q.weight") || gguf_name.ends_with(".attn_q.bias") {
        Some(n_heads)
    } else if gguf_name.ends_with(".attn_k.weight") || gguf_name.ends_with(".attn_k.bias") {
        Some(n_kv_heads)
    } else {
        None
    }
}

/// One tensor under its HF name, shape and row order, in the type the file
/// stores it in when that is a block format a backend takes as is
/// ([`DType::Quant`], 2-D tensors only), else dequantised to f32.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTensor {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub bytes: Vec<u8>,
}

impl RawTensor {
    /// The data as f32 (dequantised when quantised).
    pub fn to_dense(&self) -> DenseTensor {
        DenseTensor {
            shape: self.shape.clone(),
            data: HostData {
                dtype: self.dtype,
                bytes: &self.bytes,
            }
            .to_f32(),
        }
    }
}

/// Every model tensor (in parallel) under its HF name: 2-D tensors in
/// Q4_0/Q4_1/Q8_0/Q4_K/Q6_K keep their blocks (rows reordered where llama.cpp
/// permuted them), everything else is dequantised to f32.
/// `rope_freqs.weight` is skipped: in HF terms it is config (`rope_scaling`).
pub fn load_raw_tensors(
    file: &GgufFile,
    arch: Arch,
    n_heads: usize,
    n_kv_heads: usize,
) -> Result<HashMap<String, RawTensor>, GgufError> {
    let mut jobs: Vec<(&TensorInfo, String)> = Vec::with_capacity(file.tensors.len());
    for t in file.tensors.iter().filter(|t| t.name != ROPE_FREQS) {
        let name = hf_name(&t.name).ok_or_else(|| GgufError::UnknownTensor(t.name.clone()))?;
        jobs.push((t, name));
    }
    // Tensors in parallel, and blocks in parallel inside each (rayon nests).
    jobs.into_par_iter()
        .map(|(t, name)| {
            let shape = t.shape();
            let bytes = file.tensor_bytes(t);
            let heads = permuted_heads(arch, &t.name, n_heads, n_kv_heads);
            let rows = shape[0];
            if let Some(h) = heads {
                if rows % h != 0 || (rows / h) % 2 != 0 {
                    return Err(GgufError::BadTensor {
                        tensor: t.name.clone(),
                        detail: format!("{rows} rows cannot be split into {h} heads of even size"),
                    });
                }
            }
            let quant = t.ggml_type.quant_type().filter(|_| shape.len() == 2);
            if let Some(q) = quant {
                let dtype = DType::Quant(q);
                let n = t.n_elements() as usize;
                let want = dtype.bytes_for(n).filter(|_| shape[1] % q.block_elems() == 0);
                if want != Some(bytes.len()) {
                    return Err(GgufError::BadTensor {
                        tensor: t.name.clone(),
                        detail: format!(
                            "{n} {} elements in rows of {} need whole blocks and {want:?} bytes, got {}",
                            q.name(),
                            shape[1],
                            bytes.len()
                        ),
                    });
                }
                let bytes = match heads {
                    Some(h) => unpermute_rows(bytes, h, bytes.len() / rows),
                    None => bytes.to_vec(),
                };
                return Ok((name, RawTensor { shape, dtype, bytes }));
            }
            let data = dequantize(&t.name, t.ggml_type, bytes, t.n_elements() as usize)?;
            let data = match heads {
                Some(h) => unpermute_rows(&data, h, data.len() / rows),
                None => data,
            };
            Ok((
                name,
                RawTensor {
                    shape,
                    dtype: DType::F32,
                    bytes: bytemuck::cast_slice(&data).to_vec(),
                },
            ))
        })
        .collect()
}
