//! A model's architecture hyper-parameters, parsed from an HF `config.json`.
//!
//! Both spellings in the wild are accepted: Hub configs (`rope_theta`,
//! `rope_scaling`, `torch_dtype`) and transformers-5 configs
//! (`rope_parameters`, `dtype`). The result is frozen: fields are private and
//! read through accessors.

use serde_json::Value;

use super::ModelError;

/// Supported model families (all share one definition, `model::llama`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Mistral,
}

impl Arch {
    /// Map an HF `architectures[0]` name.
    pub fn from_hf(name: &str) -> Option<Arch> {
        match name {
            "LlamaForCausalLM" => Some(Arch::Llama),
            "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            "MistralForCausalLM" => Some(Arch::Mistral),
            _ => None,
        }
    }

    /// The HF class name.
    pub fn hf_name(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
        }
    }
}

/// RoPE frequency scaling.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// `inv_freq / factor`.
    Linear { factor: f32 },
    /// Llama 3.1's piecewise scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
}

/// Storage dtype declared by the config (informational; tensors carry their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigDType {
    F32,
    BF16,
    F16,
}

/// Frozen model hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    arch: Arch,
    hidden_size: usize,
    intermediate_size: usize,
    num_layers: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    vocab_size: usize,
    rms_norm_eps: f32,
    rope_theta: f32,
    rope_scaling: RopeScaling,
    max_position_embeddings: usize,
    tie_word_embeddings: bool,
    qkv_bias: bool,
    o_bias: bool,
    dtype: Option<ConfigDType>,
    bos_token_id: Option<u32>,
    eos_token_ids: Vec<u32>,
    sliding_window: Option<usize>,
}

fn missing(key: &str) -> ModelError {
    ModelError::Config(format!("config.json is missing required key `{key}`"))
}

fn bad(key: &str, v: &Value, want: &str) -> ModelError {
    ModelError::Config(format!("config.json key `{key}` = {v} is not {want}"))
}

fn req_usize(o: &Value, key: &str) -> Result<usize, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Err(missing(key)),
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| bad(key, v, "a positive integer")),
    }
}

fn opt_usize(o: &Value, key: &str) -> Result<Option<usize>, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => req_usize(o, key).map(Some),
    }
}

fn opt_f32(o: &Value, key: &str) -> Result<Option<f32>, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| bad(key, v, "a number")),
    }
}

fn opt_bool(o: &Value, key: &str) -> Result<Option<bool>, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| bad(key, v, "a boolean")),
    }
}

fn token_ids(o: &Value, key: &str) -> Result<Vec<u32>, ModelError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .map(|n| n as u32)
                    .ok_or_else(|| bad(key, x, "a token id"))
            })
            .collect(),
        Some(v) => v
            .as_u64()
            .map(|n| vec![n as u32])
            .ok_or_else(|| bad(key, v, "a token id or a list of them")),
    }
}

fn parse_dtype(o: &Value) -> Result<Option<ConfigDType>, ModelError> {
    for key in ["dtype", "torch_dtype"] {
        match o.get(key) {
            None | Some(Value::Null) => continue,
            Some(v) => {
                return match v.as_str() {
                    Some("float32") => Ok(Some(ConfigDType::F32)),
                    Some("bfloat16") => Ok(Some(ConfigDType::BF16)),
                    Some("float16") => Ok(Some(ConfigDType::F16)),
                    _ => Err(bad(key, v, "one of float32, bfloat16, float16")),
                }
            }
        }
    }
    Ok(None)
}

/// RoPE θ and scaling from either `rope_parameters` (transformers 5) or
/// `rope_theta` + `rope_scaling` (Hub).
fn parse_rope(o: &Value) -> Result<(f32, RopeScaling), ModelError> {
    let (params, key) = match o.get("rope_parameters") {
        Some(p) if !p.is_null() => (Some(p), "rope_parameters"),
        _ => (
            o.get("rope_scaling").filter(|v| !v.is_null()),
            "rope_scaling",
        ),
    };
    let theta = match params.and_then(|p| opt_f32(p, "rope_theta").transpose()) {
        Some(t) => t?,
        None => opt_f32(o, "rope_theta")?.unwrap_or(10_000.0),
    };
    let Some(p) = params else {
        return Ok((theta, RopeScaling::None));
    };
    if !p.is_object() {
        return Err(bad(key, p, "an object"));
    }
    let ty = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let need = |k: &str| -> Result<f32, ModelError> {
        opt_f32(p, k)?.ok_or_else(|| missing(&format!("{key}.{k}")))
    };
    let scaling = match ty {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: need("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: need("factor")?,
            low_freq_factor: need("low_freq_factor")?,
            high_freq_factor: need("high_freq_factor")?,
            original_max_position_embeddings: need("original_max_position_embeddings")?,
        },
        other => {
            return Err(ModelError::Unsupported(format!(
                "{key}.rope_type `{other}` (supported: default, linear, llama3)"
            )))
        }
    };
    Ok((theta, scaling))
}

impl ModelConfig {
    /// Parse the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<Self, ModelError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ModelError::Config(format!("config.json is not valid JSON: {e}")))?;
        Self::from_json(&v)
    }

    /// Parse a `config.json` value.
    pub fn from_json(o: &Value) -> Result<Self, ModelError> {
        if !o.is_object() {
            return Err(ModelError::Config(
                "config.json is not a JSON object".into(),
            ));
        }
        let arch_name = match o.get("architectures") {
            Some(Value::Array(a)) if !a.is_empty() => a[0]
                .as_str()
                .ok_or_else(|| bad("architectures", &a[0], "a string"))?
                .to_string(),
            Some(v) if !v.is_null() => return Err(bad("architectures", v, "a non-empty list")),
            _ => return Err(missing("architectures")),
        };
        let arch = Arch::from_hf(&arch_name).ok_or_else(|| {
            ModelError::Unsupported(format!(
                "architecture `{arch_name}` (supported: LlamaForCausalLM, Qwen2ForCausalLM, \
                 Qwen3ForCausalLM, MistralForCausalLM)"
            ))
        })?;
        if let Some(act) = o.get("hidden_act").or_else(|| o.get("hidden_activation")) {
            if act.as_str() != Some("silu") {
                return Err(ModelError::Unsupported(format!(
                    "hidden_act {act} (only silu is supported)"
                )));
            }
        }
        let hidden_size = req_usize(o, "hidden_size")?;
        let num_heads = req_usize(o, "num_attention_heads")?;
        let num_kv_heads = opt_usize(o, "num_key_value_heads")?.unwrap_or(num_heads);
        let head_dim = match opt_usize(o, "head_dim")? {
            Some(d) => d,
            None => {
                if !hidden_size.is_multiple_of(num_heads) {
                    return Err(ModelError::Config(format!(
                        "config.json has no `head_dim` and hidden_size {hidden_size} is not \
                         divisible by num_attention_heads {num_heads}"
                    )));
                }
                hidden_size / num_heads
            }
        };
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(ModelError::Config(format!(
                "num_attention_heads {num_heads} is not a multiple of num_key_value_heads \
                 {num_kv_heads}"
            )));
        }
        if !head_dim.is_multiple_of(2) {
            return Err(ModelError::Config(format!("head_dim {head_dim} is odd")));
        }
        let (rope_theta, rope_scaling) = parse_rope(o)?;
        let attention_bias = opt_bool(o, "attention_bias")?.unwrap_or(false);
        if opt_bool(o, "mlp_bias")?.unwrap_or(false) {
            return Err(ModelError::Unsupported("mlp_bias = true".into()));
        }
        // Qwen2 always has q/k/v biases; the others only with attention_bias,
        // which then also covers o_proj.
        let (qkv_bias, o_bias) = match arch {
            Arch::Qwen2 => (true, false),
            _ => (attention_bias, attention_bias),
        };
        let use_sw = opt_bool(o, "use_sliding_window")?;
        let sliding_window = match (arch, use_sw) {
            (Arch::Qwen2 | Arch::Qwen3, Some(false) | None) => None,
            _ => opt_usize(o, "sliding_window")?,
        };
        Ok(ModelConfig {
            arch,
            hidden_size,
            intermediate_size: req_usize(o, "intermediate_size")?,
            num_layers: req_usize(o, "num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: req_usize(o, "vocab_size")?,
            rms_norm_eps: opt_f32(o, "rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            max_position_embeddings: opt_usize(o, "max_position_embeddings")?.unwrap_or(4096),
            tie_word_embeddings: opt_bool(o, "tie_word_embeddings")?.unwrap_or(false),
            qkv_bias,
            o_bias,
            dtype: parse_dtype(o)?,
            bos_token_id: token_ids(o, "bos_token_id")?.first().copied(),
            eos_token_ids: token_ids(o, "eos_token_id")?,
            sliding_window,
        })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }
    pub fn hidden_size(&self) -> usize {
        self.hidden_size
    }
    pub fn intermediate_size(&self) -> usize {
        self.intermediate_size
    }
    pub fn num_layers(&self) -> usize {
        self.num_layers
    }
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }
    pub fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    pub fn rms_norm_eps(&self) -> f32 {
        self.rms_norm_eps
    }
    pub fn rope_theta(&self) -> f32 {
        self.rope_theta
    }
    pub fn rope_scaling(&self) -> &RopeScaling {
        &self.rope_scaling
    }
    pub fn max_position_embeddings(&self) -> usize {
        self.max_position_embeddings
    }
    pub fn tie_word_embeddings(&self) -> bool {
        self.tie_word_embeddings
    }
    /// q/k/v projections carry a bias.
    pub fn qkv_bias(&self) -> bool {
        self.qkv_bias
    }
    /// o_proj carries a bias.
    pub fn o_bias(&self) -> bool {
        self.o_bias
    }
    /// Per-head q/k RMSNorm (Qwen3).
    pub fn qk_norm(&self) -> bool {
        self.arch == Arch::Qwen3
    }
    pub fn dtype(&self) -> Option<ConfigDType> {
        self.dtype
    }
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }
    /// Sliding-window size when the config enables one (not applied: contexts
    /// longer than the window attend to everything).
    pub fn sliding_window(&self) -> Option<usize> {
        self.sliding_window
    }

    /// KV elements stored per token over all layers (K and V).
    pub fn kv_elems_per_token(&self) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim
    }

    /// Parameter count (embeddings counted once when tied).
    pub fn num_params(&self) -> usize {
        let h = self.hidden_size;
        let qd = self.num_heads * self.head_dim;
        let kvd = self.num_kv_heads * self.head_dim;
        let per_layer = h * (qd + 2 * kvd) + qd * h + 3 * h * self.intermediate_size + 2 * h;
        let emb = self.vocab_size * h;
        emb * if self.tie_word_embeddings { 1 } else { 2 } + self.num_layers * per_layer + h
    }

    /// RoPE inverse frequencies `[head_dim / 2]`, including any scaling, in
    /// f32 the way transformers computes them.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim;
        let base: Vec<f32> = (0..d / 2)
            .map(|i| {
                // transformers: 1 / base ** (arange(0, d, 2).float() / d), base**x in f32
                let e = (2 * i) as f32 / d as f32;
                1.0 / self.rope_theta.powf(e)
            })
            .collect();
        match self.rope_scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wl = old / low_freq_factor;
                let high_wl = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wl = 2.0 * std::f32::consts::PI / f;
                        if wl > low_wl {
                            f / factor
                        } else if wl < high_wl {
                            f
                        } else {
                            let smooth =
                                (old / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}
