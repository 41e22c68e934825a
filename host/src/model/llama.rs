//! The one decoder-only model definition: Llama (incl. Llama-3 RoPE scaling,
//! tied or untied embeddings, GQA), Qwen2 (q/k/v bias), Qwen3 (per-head q/k
//! RMSNorm, free `head_dim`) and Mistral, written once against [`Backend`].
//!
//! Weights use the HF names (`model.layers.N.self_attn.q_proj.weight`, …);
//! q/k/v and gate/up are fused at load time (rows concatenated) so a layer
//! runs four GEMMs. Under tensor parallelism a model is one rank's shard
//! ([`super::tp`]): it attends with its own heads and all-reduces the
//! outputs of o and down, the two row-parallel products of a layer.

use super::config::ModelConfig;
use super::tp::TpShard;
use super::weights::{WeightTensor, Weights};
use super::ModelError;
use crate::backend::{AttnParams, Backend, ChainInput, DType, HostData, KvLayout, LayerChain};

/// One transformer block's weights on the device.
pub struct Layer<B: Backend> {
    input_norm: B::Tensor,
    post_attn_norm: B::Tensor,
    w_qkv: B::Tensor,
    b_qkv: Option<B::Tensor>,
    w_o: B::Tensor,
    b_o: Option<B::Tensor>,
    q_norm: Option<B::Tensor>,
    k_norm: Option<B::Tensor>,
    w_gate_up: B::Tensor,
    w_down: B::Tensor,
}

/// A loaded model: weights on the device plus the frozen config.
pub struct Model<B: Backend> {
    cfg: ModelConfig,
    shard: TpShard,
    embed: B::Tensor,
    layers: Vec<Layer<B>>,
    final_norm: B::Tensor,
    /// `None` when the LM head is tied to the embedding.
    lm_head: Option<B::Tensor>,
    inv_freq: B::Tensor,
}

/// Every tensor the definition reads, with its HF shape.
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let h = cfg.hidden_size();
    let d = cfg.head_dim();
    let (qd, kvd) = (cfg.num_heads() * d, cfg.num_kv_heads() * d);
    let i = cfg.intermediate_size();
    let mut v = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![cfg.vocab_size(), h],
    )];
    for l in 0..cfg.num_layers() {
        let p = format!("model.layers.{l}");
        v.push((format!("{p}.input_layernorm.weight"), vec![h]));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        for (n, out) in [("q", qd), ("k", kvd), ("v", kvd)] {
            v.push((format!("{p}.self_attn.{n}_proj.weight"), vec![out, h]));
            if cfg.qkv_bias() {
                v.push((format!("{p}.self_attn.{n}_proj.bias"), vec![out]));
            }
        }
        v.push((format!("{p}.self_attn.o_proj.weight"), vec![h, qd]));
        if cfg.o_bias() {
            v.push((format!("{p}.self_attn.o_proj.bias"), vec![h]));
        }
        if cfg.qk_norm() {
            v.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
            v.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
        }
        v.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        v.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        v.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    v.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings() {
        v.push(("lm_head.weight".to_string(), vec![cfg.vocab_size(), h]));
    }
    v
}

/// Concatenate tensors along dim 0 (row-major, so bytes append). Mixed dtypes
/// fall back to f32.
fn concat_rows(parts: &[WeightTensor<'_>]) -> (Vec<usize>, DType, Vec<u8>) {
    let rows: usize = parts.iter().map(|p| p.shape[0]).sum();
    let mut shape = parts[0].shape.clone();
    shape[0] = rows;
    let dtype = parts[0].dtype;
    if parts.iter().all(|p| p.dtype == dtype) {
        let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.bytes.len()).sum());
        for p in parts {
            bytes.extend_from_slice(&p.bytes);
        }
        (shape, dtype, bytes)
    } else {
        let mut f = Vec::new();
        for p in parts {
            f.extend(p.host().to_f32());
        }
        (shape, DType::F32, bytemuck::cast_slice(&f).to_vec())
    }
}

impl<B: Backend> Layer<B> {
    /// This layer's products (and the next layer's qkv) as one [`LayerChain`] from
    /// `input`.
    fn chain<'a>(
        &'a self,
        input: ChainInput<'a, B::Tensor>,
        next: Option<&'a Layer<B>>,
        eps: f32,
    ) -> LayerChain<'a, B::Tensor> {
        LayerChain {
            input,
            w_o: &self.w_o,
            b_o: self.b_o.as_ref(),
            post_norm: &self.post_attn_norm,
            w_gate_up: &self.w_gate_up,
            w_down: &self.w_down,
            next: next.map(|n| (&n.input_norm, &n.w_qkv, n.b_qkv.as_ref())),
            eps,
        }
    }
}

/// What chained launches of layers left ([`Model::chain_from_qkv`]): the next layer's
/// qkv, if the last launch wrote it, and how many layers they ran.
struct Chained<T> {
    next_qkv: Option<T>,
    layers: usize,
}

impl<B: Backend> Model<B> {
    /// Upload all weights of `cfg` from `weights` (shapes checked).
    pub fn load(backend: &B, cfg: &ModelConfig, weights: &Weights) -> Result<Self, ModelError> {
        Self::load_shard(backend, cfg, weights, TpShard::WHOLE)
    }

    /// Upload rank `shard`'s part of the weights (see [`super::tp`] for the
    /// split); with [`TpShard::WHOLE`], all of them.
    pub fn load_shard(
        backend: &B,
        cfg: &ModelConfig,
        weights: &Weights,
        shard: TpShard,
    ) -> Result<Self, ModelError> {
        TpShard::check(cfg, shard.world())?;
        let h = cfg.hidden_size();
        let d = cfg.head_dim();
        let (qd, kvd) = (cfg.num_heads() * d, cfg.num_kv_heads() * d);
        let i = cfg.intermediate_size();
        let upload = |t: WeightTensor<'_>| -> Result<B::Tensor, ModelError> {
            Ok(backend.upload(&t.shape, t.host())?)
        };
        let up = |name: &str, shape: &[usize]| upload(weights.get(name, shape)?);
        // Row-parallel: this rank's input columns.
        let up_cols =
            |name: &str, shape: &[usize]| upload(shard.cols(name, weights.get(name, shape)?)?);
        // Column-parallel, fused: each part's block of rows, then concatenated.
        let fused = |names: &[(String, Vec<usize>)]| -> Result<B::Tensor, ModelError> {
            let parts = names
                .iter()
                .map(|(n, s)| Ok(shard.rows(n, weights.get(n, s)?)?))
                .collect::<Result<Vec<_>, ModelError>>()?;
            let (shape, dtype, bytes) = concat_rows(&parts);
            Ok(backend.upload(
                &shape,
                HostData {
                    dtype,
                    bytes: &bytes,
                },
            )?)
        };
        let embed = up("model.embed_tokens.weight", &[cfg.vocab_size(), h])?;
        let mut layers = Vec::with_capacity(cfg.num_layers());
        for l in 0..cfg.num_layers() {
            let p = format!("model.layers.{l}");
            let a = format!("{p}.self_attn");
            let qkv_names = |kind: &str, w: bool| -> Vec<(String, Vec<usize>)> {
                [("q", qd), ("k", kvd), ("v", kvd)]
                    .iter()
                    .map(|(n, out)| {
                        let shape = if w { vec![*out, h] } else { vec![*out] };
                        (format!("{a}.{n}_proj.{kind}"), shape)
                    })
                    .collect()
            };
            layers.push(Layer {
                input_norm: up(&format!("{p}.input_layernorm.weight"), &[h])?,
                post_attn_norm: up(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                w_qkv: fused(&qkv_names("weight", true))?,
                b_qkv: if cfg.qkv_bias() {
                    Some(fused(&qkv_names("bias", false))?)
                } else {
                    None
                },
                w_o: up_cols(&format!("{a}.o_proj.weight"), &[h, qd])?,
                // Rank 0 adds it to its partial product: the sum counts it once.
                b_o: if cfg.o_bias() && shard.rank() == 0 {
                    Some(up(&format!("{a}.o_proj.bias"), &[h])?)
                } else {
                    None
                },
                q_norm: if cfg.qk_norm() {
                    Some(up(&format!("{a}.q_norm.weight"), &[d])?)
                } else {
                    None
                },
                k_norm: if cfg.qk_norm() {
                    Some(up(&format!("{a}.k_norm.weight"), &[d])?)
                } else {
                    None
                },
                w_gate_up: fused(&[
                    (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                    (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                ])?,
                w_down: up_cols(&format!("{p}.mlp.down_proj.weight"), &[h, i])?,
            });
        }
        // Where the backend applies a norm inside the consumer of the product after it,
        // the input and post-attention norms' weights go into the qkv and gate_up weights
        // now, and the layers hold unit norms in their place (Backend::fold_norm). Not on
        // a split shard: there the all-reduce comes before the norm, which then runs as
        // its own launch anyway (project_add_norm), so a fold would only add the rounding
        // of x · inv to bf16 before a product whose weight is already rounded with g in.
        if !shard.is_split() {
            for layer in layers.iter_mut() {
                if let Some(unit) = backend.fold_norm(&mut layer.w_qkv, &layer.input_norm)? {
                    layer.input_norm = unit;
                }
                if let Some(unit) =
                    backend.fold_norm(&mut layer.w_gate_up, &layer.post_attn_norm)?
                {
                    layer.post_attn_norm = unit;
                }
            }
        }
        let final_norm = up("model.norm.weight", &[h])?;
        let lm_head = if cfg.tie_word_embeddings() {
            None
        } else {
            Some(up("lm_head.weight", &[cfg.vocab_size(), h])?)
        };
        let inv = cfg.rope_inv_freq();
        let inv_freq = backend.upload(&[inv.len()], HostData::f32(&inv))?;
        Ok(Model {
            cfg: cfg.clone(),
            shard,
            embed,
            layers,
            final_norm,
            lm_head,
            inv_freq,
        })
    }

    /// Which part of the model this is.
    pub fn shard(&self) -> TpShard {
        self.shard
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// KV cache shape for this model (this rank's KV heads only).
    pub fn kv_layout(&self, num_pages: usize, page_size: usize) -> KvLayout {
        KvLayout {
            num_layers: self.cfg.num_layers(),
            num_pages,
            page_size,
            kv_heads: self.shard.part(self.cfg.num_kv_heads()),
            head_dim: self.cfg.head_dim(),
        }
    }

    /// Run one step's tokens through the model, writing their K/V into `kv`,
    /// and return the logits `[sample_rows, vocab]` of the rows the step
    /// samples from (`None` when no row samples).
    pub fn forward(
        &self,
        b: &B,
        kv: &mut B::Kv,
        step: &B::Step,
        num_sample_rows: usize,
    ) -> Result<Option<B::Tensor>, ModelError> {
        let x = self.hidden(b, kv, step)?;
        if num_sample_rows == 0 {
            return Ok(None);
        }
        let last = b.gather_rows(x, step)?;
        Ok(Some(b.linear(&last, self.head(), None)?))
    }

    /// [`Model::forward`] writing the logits into `out` (from
    /// [`Backend::alloc_logits`], at least as many rows as the step samples):
    /// what a recorded decode step runs, so that its output outlives the
    /// recording.
    pub fn forward_into(
        &self,
        b: &B,
        kv: &mut B::Kv,
        step: &B::Step,
        out: &mut B::Tensor,
    ) -> Result<(), ModelError> {
        let x = self.hidden(b, kv, step)?;
        let last = b.gather_rows(x, step)?;
        b.linear_into(&last, self.head(), out)?;
        Ok(())
    }

    fn head(&self) -> &B::Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Layer `l` (attention parameters `p`) and those after it as chained launches from
    /// layer `l`'s qkv, where the backend takes them: what the last launch left for the
    /// next layer (its qkv, if it wrote one) and how many layers ran; `None` where the
    /// chain does not apply.
    /// Split across ranks the products are partial sums: no chain there. The chain may
    /// take the attention too (from qkv), else its output; and the layers after this
    /// one, from the qkv each writes, in the same launch.
    #[allow(clippy::too_many_arguments)]
    fn chain_from_qkv<'p>(
        &'p self,
        b: &B,
        qkv: &B::Tensor,
        l: usize,
        p: &AttnParams<'p, B::Tensor>,
        params: &dyn Fn(usize) -> AttnParams<'p, B::Tensor>,
        residual: &mut B::Tensor,
        kv: &mut B::Kv,
        step: &B::Step,
        eps: f32,
    ) -> Result<Option<Chained<B::Tensor>>, ModelError> {
        if self.shard.is_split() {
            return Ok(None);
        }
        let input = ChainInput::Qkv {
            qkv,
            layer: l,
            params: p,
        };
        let c = self.layers[l].chain(input, self.layers.get(l + 1), eps);
        if !b.layer_chain_ok(residual, &c, kv, step) {
            return Ok(None);
        }
        let ps: Vec<_> = (l + 1..self.layers.len()).map(params).collect();
        let mut chains = vec![c];
        for (i, pi) in ps.iter().enumerate() {
            let input = ChainInput::Chained {
                layer: l + 1 + i,
                params: pi,
            };
            let next = self.layers.get(l + 2 + i);
            chains.push(self.layers[l + 1 + i].chain(input, next, eps));
        }
        let n = b.layer_span_len(residual, &chains, kv, step).max(1);
        let next_qkv = if n > 1 {
            b.layer_span(&chains[..n], kv, step, residual)?
        } else {
            b.layer_chain(&chains[0], kv, step, residual)?
        };
        Ok(Some(Chained {
            next_qkv,
            layers: n,
        }))
    }

    /// The final-normed hidden states of every token of the step.
    fn hidden(&self, b: &B, kv: &mut B::Kv, step: &B::Step) -> Result<B::Tensor, ModelError> {
        let cfg = &self.cfg;
        let eps = cfg.rms_norm_eps();
        let d = cfg.head_dim();
        let scale = 1.0 / (d as f32).sqrt();

        let mut residual = b.embedding(&self.embed, step)?;
        // Where the backend normalises inside the next product (or its consumer, for a
        // folded norm), the layers pass the residual and the norm to apply instead of a
        // normed copy: for the qkv products (`defer_attn`) and the gate_up ones
        // (`defer_mlp`), each asked for its own weight. Asked for both at once, a
        // layer whose qkv takes the gemv prologue but whose gate_up is too large for it
        // (Qwen3-1.7B / 4B, Llama-3.2-3B at 1-4 rows) normalised qkv's input in a launch
        // of its own, and under a folded norm rounded x · inv to bf16 in front of a
        // weight already rounded with g in.
        let whole = !self.shard.is_split();
        let l0 = &self.layers[0];
        let defers = |w: &B::Tensor| {
            whole && (b.norm_in_prologue(&residual, &[w]) || b.norm_in_consumer(&residual, w))
        };
        let defer_attn = defers(&l0.w_qkv);
        let defer_mlp = defers(&l0.w_gate_up);
        let first = &l0.input_norm;
        let mut x = if defer_attn {
            Input::Deferred(first)
        } else {
            Input::Normed(b.rms_norm(&residual, first, eps)?)
        };
        // The next layer's qkv when the previous layer's products ran as one chain.
        let mut chained_qkv = None;
        let params = |l: usize| {
            let layer = &self.layers[l];
            AttnParams {
                q_heads: self.shard.part(cfg.num_heads()),
                kv_heads: self.shard.part(cfg.num_kv_heads()),
                head_dim: d,
                q_norm: layer.q_norm.as_ref(),
                k_norm: layer.k_norm.as_ref(),
                inv_freq: &self.inv_freq,
                eps,
                scale,
            }
        };
        let mut l = 0;
        while l < self.layers.len() {
            let layer = &self.layers[l];
            let p = params(l);
            // What a chained launch of layers up to `last` leaves for the next layer.
            let after = |last: usize| {
                let next = self.layers.get(last + 1);
                Input::Deferred(next.map_or(&self.final_norm, |n| &n.input_norm))
            };
            let qkv = match (chained_qkv.take(), &x) {
                (Some(qkv), _) => qkv,
                (None, Input::Normed(t)) => b.linear(t, &layer.w_qkv, layer.b_qkv.as_ref())?,
                (None, Input::Deferred(n)) => {
                    b.rms_norm_linear(&residual, n, eps, &layer.w_qkv, layer.b_qkv.as_ref())?
                }
            };
            let chained =
                self.chain_from_qkv(b, &qkv, l, &p, &params, &mut residual, kv, step, eps)?;
            if let Some(c) = chained {
                chained_qkv = c.next_qkv;
                x = after(l + c.layers - 1);
                l += c.layers;
                continue;
            }
            let attn = b.qkv_attention(qkv, kv, l, step, &p)?;
            if !self.shard.is_split() {
                let c = layer.chain(ChainInput::Attn(&attn), self.layers.get(l + 1), eps);
                if b.layer_chain_ok(&residual, &c, kv, step) {
                    chained_qkv = b.layer_chain(&c, kv, step, &mut residual)?;
                    x = after(l);
                    l += 1;
                    continue;
                }
            }
            let (o, o_bias) = (&layer.w_o, layer.b_o.as_ref());
            let post = &layer.post_attn_norm;
            x = self.project_add_norm(b, &attn, o, o_bias, &mut residual, post, defer_mlp)?;
            let act = match &x {
                Input::Normed(t) => b.linear_silu_mul(t, &layer.w_gate_up)?,
                Input::Deferred(n) => {
                    b.rms_norm_linear_silu_mul(&residual, n, eps, &layer.w_gate_up)?
                }
            };
            // The final norm feeds the LM head (not a prologue kernel): normed here.
            let (next_norm, defer_next) = match self.layers.get(l + 1) {
                Some(n) => (&n.input_norm, defer_attn),
                None => (&self.final_norm, false),
            };
            let down = &layer.w_down;
            x = self.project_add_norm(b, &act, down, None, &mut residual, next_norm, defer_next)?;
            l += 1;
        }
        match x {
            Input::Normed(t) => Ok(t),
            Input::Deferred(n) => Ok(b.rms_norm(&residual, n, eps)?),
        }
    }

    /// A row-parallel projection (o or down) into the residual stream, and the norm
    /// that follows (applied now, or left to the next product when `defer`). Split
    /// across ranks, the partial products are summed before the add, so the add
    /// cannot ride in the product's epilogue there.
    #[allow(clippy::too_many_arguments)]
    fn project_add_norm<'n>(
        &self,
        b: &B,
        x: &B::Tensor,
        w: &B::Tensor,
        bias: Option<&B::Tensor>,
        residual: &mut B::Tensor,
        norm: &'n B::Tensor,
        defer: bool,
    ) -> Result<Input<'n, B::Tensor>, ModelError> {
        let eps = self.cfg.rms_norm_eps();
        if self.shard.is_split() {
            let mut o = b.linear(x, w, bias)?;
            b.all_reduce(&mut o)?;
            return Ok(Input::Normed(b.add_rms_norm(residual, &o, norm, eps)?));
        }
        if defer {
            b.linear_add(x, w, bias, residual)?;
            return Ok(Input::Deferred(norm));
        }
        Ok(Input::Normed(
            b.linear_add_rms_norm(x, w, bias, residual, norm, eps)?,
        ))
    }
}

/// What a layer's next product reads: the normed hidden states, or the residual
/// stream with the norm the product applies itself
/// ([`Backend::norm_in_prologue`]).
enum Input<'n, T> {
    Normed(T),
    Deferred(&'n T),
}
