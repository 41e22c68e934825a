//! GGUF metadata → a Hugging Face `config.json` equivalent.

use serde_json::{json, Map, Value};

use super::error::GgufError;
use super::reader::GgufFile;
use super::value::MetadataValue;

/// How a `general.architecture` value maps onto Hugging Face. llama.cpp
/// writes Mistral models as `llama` (same layout, same Q/K permutation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn parse(name: &str) -> Result<Self, GgufError> {
        match name {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            "qwen3" => Ok(Self::Qwen3),
            other => Err(GgufError::UnsupportedArchitecture(other.to_string())),
        }
    }

    fn hf(self) -> (&'static str, &'static str) {
        match self {
            Self::Llama => ("LlamaForCausalLM", "llama"),
            Self::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
            Self::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
        }
    }

    /// llama.cpp's converter permutes the Q/K rows of these architectures
    /// (its "normal" rope pairs adjacent elements, HF's pairs the two halves
    /// of a head); Qwen models use the NeoX layout and are stored unpermuted.
    pub fn qk_permuted(self) -> bool {
        matches!(self, Self::Llama)
    }
}

/// Typed access to metadata with errors that name the key.
pub struct Meta<'a>(pub &'a GgufFile);

impl<'a> Meta<'a> {
    pub fn opt(&self, key: &str) -> Option<&'a MetadataValue> {
        self.0.get(key)
    }

    fn req(&self, key: &str) -> Result<&'a MetadataValue, GgufError> {
        self.opt(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &'static str, v: &MetadataValue) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    pub fn u64_opt(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.opt(key)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| Self::wrong(key, "an unsigned integer", v))
            })
            .transpose()
    }

    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.req(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "an unsigned integer", v))
    }

    pub fn f64_opt(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.opt(key)
            .map(|v| v.as_f64().ok_or_else(|| Self::wrong(key, "a float", v)))
            .transpose()
    }

    pub fn f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.req(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "a float", v))
    }

    pub fn str_opt(&self, key: &str) -> Result<Option<&'a str>, GgufError> {
        self.opt(key)
            .map(|v| v.as_str().ok_or_else(|| Self::wrong(key, "a string", v)))
            .transpose()
    }

    pub fn str(&self, key: &str) -> Result<&'a str, GgufError> {
        let v = self.req(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "a string", v))
    }

    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.opt(key)
            .map(|v| v.as_bool().ok_or_else(|| Self::wrong(key, "a bool", v)))
            .transpose()
    }

    /// A required array whose elements all satisfy `f`.
    pub fn array<T>(
        &self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'a MetadataValue) -> Option<T>,
    ) -> Result<Vec<T>, GgufError> {
        let v = self.req(key)?;
        let arr = v.as_array().ok_or_else(|| Self::wrong(key, expected, v))?;
        arr.values
            .iter()
            .map(|e| f(e).ok_or_else(|| Self::wrong(key, expected, v)))
            .collect()
    }

    pub fn has(&self, key: &str) -> bool {
        self.opt(key).is_some()
    }
}

/// Parameters of Llama-3 rope scaling recovered from a `rope_freqs` tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: u64,
}

/// Builds the HF-style config. `tied` says whether the file lacks a separate
/// output matrix; `vocab_len` is the tokenizer's vocabulary size (used when
/// the architecture does not store `vocab_size`); `llama3_rope` comes from the
/// `rope_freqs` tensor when present.
pub fn build_config(
    file: &GgufFile,
    arch: Arch,
    tied: bool,
    vocab_len: usize,
    llama3_rope: Option<Llama3Rope>,
) -> Result<Value, GgufError> {
    let m = Meta(file);
    let a = file
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("llama");
    let key = |k: &str| format!("{a}.{k}");

    let hidden = m.u64(&key("embedding_length"))?;
    let heads = m.u64(&key("attention.head_count"))?;
    if heads == 0 || hidden == 0 {
        return Err(GgufError::BadValue {
            key: key("attention.head_count"),
            value: heads.to_string(),
            detail: format!("heads and embedding_length ({hidden}) must be positive"),
        });
    }
    let kv_heads = m.u64_opt(&key("attention.head_count_kv"))?.unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(GgufError::BadValue {
            key: key("attention.head_count_kv"),
            value: kv_heads.to_string(),
            detail: format!("must divide attention.head_count ({heads})"),
        });
    }
    let head_dim = match m.u64_opt(&key("attention.key_length"))? {
        Some(d) => d,
        None => hidden / heads,
    };
    let (arch_name, model_type) = arch.hf();
    let vocab_size = m.u64_opt(&key("vocab_size"))?.unwrap_or(vocab_len as u64);

    let mut c = Map::new();
    c.insert("architectures".into(), json!([arch_name]));
    c.insert("model_type".into(), json!(model_type));
    c.insert("hidden_size".into(), json!(hidden));
    c.insert(
        "intermediate_size".into(),
        json!(m.u64(&key("feed_forward_length"))?),
    );
    c.insert(
        "num_hidden_layers".into(),
        json!(m.u64(&key("block_count"))?),
    );
    c.insert("num_attention_heads".into(), json!(heads));
    c.insert("num_key_value_heads".into(), json!(kv_heads));
    c.insert("head_dim".into(), json!(head_dim));
    c.insert(
        "rms_norm_eps".into(),
        json!(f32_clean(m.f64(&key("attention.layer_norm_rms_epsilon"))?)),
    );
    c.insert(
        "rope_theta".into(),
        json!(f32_clean(
            m.f64_opt(&key("rope.freq_base"))?.unwrap_or(10000.0)
        )),
    );
    c.insert("rope_scaling".into(), rope_scaling(&m, a, llama3_rope)?);
    c.insert(
        "max_position_embeddings".into(),
        json!(m.u64_opt(&key("context_length"))?.unwrap_or(2048)),
    );
    c.insert("vocab_size".into(), json!(vocab_size));
    c.insert("tie_word_embeddings".into(), json!(tied));
    c.insert(
        "bos_token_id".into(),
        json!(m.u64_opt("tokenizer.ggml.bos_token_id")?),
    );
    c.insert(
        "eos_token_id".into(),
        json!(m.u64_opt("tokenizer.ggml.eos_token_id")?),
    );
    if let Some(pad) = m.u64_opt("tokenizer.ggml.padding_token_id")? {
        c.insert("pad_token_id".into(), json!(pad));
    }
    c.insert("hidden_act".into(), json!("silu"));
    // Qwen2 always has q/k/v biases; Llama-family GGUFs may carry them too.
    let bias = file.tensor("blk.0.attn_q.bias").is_some();
    if arch == Arch::Llama {
        c.insert("attention_bias".into(), json!(bias));
        c.insert("mlp_bias".into(), json!(false));
    }
    // Weights are handed out dequantised to f32.
    c.insert("torch_dtype".into(), json!("float32"));
    Ok(Value::Object(c))
}

/// GGUF stores floats as f32; print them as the shortest decimal that
/// round-trips through f32 (1e-5, not 9.999999747378752e-6).
fn f32_clean(v: f64) -> f64 {
    let s = format!("{}", v as f32);
    s.parse().unwrap_or(v)
}

fn rope_scaling(m: &Meta, a: &str, llama3: Option<Llama3Rope>) -> Result<Value, GgufError> {
    if let Some(r) = llama3 {
        return Ok(json!({
            "rope_type": "llama3",
            "factor": r.factor,
            "low_freq_factor": r.low_freq_factor,
            "high_freq_factor": r.high_freq_factor,
            "original_max_position_embeddings": r.original_max_position_embeddings,
        }));
    }
    let key = |k: &str| format!("{a}.rope.scaling.{k}");
    let ty = m.str_opt(&key("type"))?;
    let factor = match m.f64_opt(&key("factor"))? {
        Some(f) => Some(f),
        // Older files only store the linear scale.
        None => m.f64_opt(&format!("{a}.rope.scale_linear"))?,
    };
    match (ty, factor) {
        (None | Some("none"), None) => Ok(Value::Null),
        (None | Some("none"), Some(1.0)) => Ok(Value::Null),
        (None | Some("linear"), Some(f)) => {
            Ok(json!({"rope_type": "linear", "factor": f32_clean(f)}))
        }
        (Some("yarn"), Some(f)) => {
            let mut r = Map::new();
            r.insert("rope_type".into(), json!("yarn"));
            r.insert("factor".into(), json!(f32_clean(f)));
            if let Some(orig) = m.u64_opt(&key("original_context_length"))? {
                r.insert("original_max_position_embeddings".into(), json!(orig));
            }
            for (gguf_key, hf_key) in [
                ("yarn_beta_fast", "beta_fast"),
                ("yarn_beta_slow", "beta_slow"),
            ] {
                if let Some(v) = m.f64_opt(&key(gguf_key))? {
                    r.insert(hf_key.into(), json!(f32_clean(v)));
                }
            }
            Ok(Value::Object(r))
        }
        (Some(t), _) => Err(GgufError::BadValue {
            key: key("type"),
            value: format!("{t:?}"),
            detail:
                "unsupported rope scaling type (supported: none, linear, yarn) or missing factor"
                    .into(),
        }),
    }
}

/// Recovers Llama-3 rope scaling from the per-dimension frequency divisors
/// llama.cpp stores as `rope_freqs.weight`. The file keeps only the divisors,
/// so we take the parameters every Llama 3.x release uses (low/high frequency
/// factors 1 and 4, original context 8192) and the largest divisor as the
/// factor, then check that they reproduce every stored divisor.
pub fn infer_llama3_rope(
    freqs: &[f32],
    rope_theta: f64,
    head_dim: usize,
) -> Result<Llama3Rope, GgufError> {
    let bad = |detail: String| GgufError::BadTensor {
        tensor: "rope_freqs.weight".into(),
        detail,
    };
    if freqs.len() * 2 != head_dim {
        return Err(bad(format!(
            "has {} entries, expected head_dim/2 = {}",
            freqs.len(),
            head_dim / 2
        )));
    }
    let factor = freqs.iter().copied().fold(f32::MIN, f32::max) as f64;
    let r = Llama3Rope {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    };
    let old = r.original_max_position_embeddings as f64;
    let low_wavelen = old / r.low_freq_factor;
    let high_wavelen = old / r.high_freq_factor;
    for (i, &stored) in freqs.iter().enumerate() {
        let freq = 1.0 / rope_theta.powf((2 * i) as f64 / head_dim as f64);
        let wavelen = 2.0 * std::f64::consts::PI / freq;
        let divisor = if wavelen < high_wavelen {
            1.0
        } else if wavelen > low_wavelen {
            factor
        } else {
            let smooth =
                (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
            1.0 / ((1.0 - smooth) / factor + smooth)
        };
        if (divisor - stored as f64).abs() > 1e-3 * divisor.abs().max(1.0) {
            return Err(bad(format!(
                "entry {i} is {stored}, but Llama-3 scaling with factor {factor}, low/high frequency factors 1/4 and original context 8192 gives {divisor}; other rope scalings are not supported"
            )));
        }
    }
    Ok(r)
}
