//! GGUF tensors → Hugging Face names, shapes and layouts (dequantised f32).

use std::collections::HashMap;

use rayon::prelude::*;

use super::config::Arch;
use super::dequant::dequantize;
use super::error::GgufError;
use super::reader::{GgufFile, TensorInfo};
use super::DenseTensor;

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
/// `2i + j`; works for weights (`row_len` = in-features) and biases
/// (`row_len` = 1).
pub fn unpermute_rows(data: &[f32], n_heads: usize, row_len: usize) -> Vec<f32> {
    let rows = data.len() / row_len;
    let head_dim = rows / n_heads;
    let half = head_dim / 2;
    let mut out = vec![0f32; data.len()];
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

/// Dequantises every model tensor (in parallel) under its HF name.
/// `rope_freqs.weight` is skipped: in HF terms it is config (`rope_scaling`).
pub fn load_tensors(
    file: &GgufFile,
    arch: Arch,
    n_heads: usize,
    n_kv_heads: usize,
) -> Result<HashMap<String, DenseTensor>, GgufError> {
    let mut jobs: Vec<(&TensorInfo, String)> = Vec::with_capacity(file.tensors.len());
    for t in file.tensors.iter().filter(|t| t.name != ROPE_FREQS) {
        let name = hf_name(&t.name).ok_or_else(|| GgufError::UnknownTensor(t.name.clone()))?;
        jobs.push((t, name));
    }
    // Tensors in parallel, and blocks in parallel inside each (rayon nests).
    jobs.into_par_iter()
        .map(|(t, name)| {
            let data = dequantize(
                &t.name,
                t.ggml_type,
                file.tensor_bytes(t),
                t.n_elements() as usize,
            )?;
            let shape = t.shape();
            let data = if arch.qk_permuted() {
                let heads = if t.name.ends_with(".attn_q.weight")
                    || t.name.ends_with(".attn_q.bias")
                {
                    Some(n_heads)
                } else if t.name.ends_with(".attn_k.weight") || t.name.ends_with(".attn_k.bias") {
                    Some(n_kv_heads)
                } else {
                    None
                };
                match heads {
                    Some(h) => {
                        let rows = shape[0];
                        if rows % h != 0 || (rows / h) % 2 != 0 {
                            return Err(GgufError::BadTensor {
                                tensor: t.name.clone(),
                                detail: format!(
                                    "{rows} rows cannot be split into {h} heads of even size"
                                ),
                            });
                        }
                        let row_len = data.len() / rows;
                        unpermute_rows(&data, h, row_len)
                    }
                    None => data,
                }
            } else {
                data
            };
            Ok((name, DenseTensor { shape, data }))
        })
        .collect()
}
