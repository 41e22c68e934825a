#!/usr/bin/env python3
"""Writes the small GGUF test fixtures under tests/fixtures/gguf/ and their
reference values, computed by outside implementations:

- dequantisation: `gguf.quants.dequantize` (the `gguf` PyPI package, which
  mirrors ggml's C code in numpy);
- tensor names / Q-K layout: Hugging Face transformers' own GGUF loader
  (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`), which undoes
  llama.cpp's Q/K permutation itself;
- tokenizer: the Python `tokenizers` pipeline the vocabulary was trained with,
  and transformers' tokenizer rebuilt from the GGUF.

Files (all seeded, so re-running reproduces them byte for byte):
  quant_types.gguf   one 2x512 tensor per ggml type + every metadata value type
  quant_types.json   gguf.quants.dequantize output for each tensor
  tiny_llama.gguf    1-layer llama (GQA, untied, Q/K permuted like llama.cpp's
                     converter, weights in many quant types) + BPE tokenizer
  tiny_qwen3.gguf    1-layer qwen3 (q/k norm, head_dim != hidden/heads, tied)
  tiny_qwen2.gguf    1-layer qwen2 (q/k/v bias)
  tiny_llama3.gguf   1-layer llama with Llama-3 rope scaling stored the way
                     llama.cpp's converter stores it (a rope_freqs tensor)
  tiny_spm.gguf      1-layer llama with a SentencePiece-style vocabulary
                     (tokenizer.ggml.model "llama": tokens + scores, byte
                     tokens, no merges), as in Llama-2 / Mistral GGUFs
  tiny_models.json   configs and sampled tensor values from transformers,
                     tokenizer cases, and the rope scaling each file encodes
                     (transformers' GGUF loader ignores rope scaling for these
                     architectures, so that part is the HF config the file was
                     written from)

Needs: pip install gguf numpy torch transformers (not in CI).
Run:   python3 scripts/gguf_fixtures.py
"""

import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gguf")
ROWS, COLS = 2, 512

# Byte offsets of the f16 scale fields inside one block, for the types whose
# quantiser the gguf package does not implement (K-quants, IQ4): their blocks
# are random bytes with these fields set to sane scales.
K_SCALE_FIELDS = {
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
}


def f16_scales(rng, n):
    return rng.uniform(-0.05, 0.05, size=n).astype(np.float16)


def quant_bytes(rng, qtype, rows, cols, values=None):
    """Raw bytes (rows x bytes_per_row, uint8) of one tensor of type qtype."""
    block, bsize = gguf.GGML_QUANT_SIZES[qtype]
    if values is None:
        values = rng.standard_normal((rows, cols)).astype(np.float32) * 0.1
    if qtype in K_SCALE_FIELDS:
        nblocks = rows * cols // block
        raw = rng.integers(0, 256, size=(nblocks, bsize), dtype=np.uint8)
        for off in K_SCALE_FIELDS[qtype]:
            raw[:, off:off + 2] = f16_scales(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
        return raw.reshape(rows, cols // block * bsize)
    if qtype == T.Q8_K:
        nblocks = rows * cols // block
        raw = rng.integers(0, 256, size=(nblocks, bsize), dtype=np.uint8)
        raw[:, 0:4] = rng.uniform(-0.01, 0.01, size=nblocks).astype(np.float32).view(np.uint8).reshape(nblocks, 4)
        return raw.reshape(rows, cols // block * bsize)
    return quantize(values, qtype)


def ref_dequant(qtype, raw, rows, cols):
    if qtype == T.Q8_K:
        # gguf.quants has no Q8_K; the layout is f32 d, int8 qs[256], int16 bsums[16].
        b = raw.reshape(-1, 292)
        d = b[:, 0:4].copy().view(np.float32)
        qs = b[:, 4:260].view(np.int8).astype(np.float32)
        return (d * qs).reshape(rows, cols)
    return dequantize(raw, qtype).reshape(rows, cols)


def write_quant_types(rng):
    path = os.path.join(OUT, "quant_types.gguf")
    w = gguf.GGUFWriter(path, "llama")
    # One key per metadata value type, arrays included (nested too).
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo wörld ✓")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 2.718281828459045)
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "bc", ""])
    w.add_array("test.array_nested", [[1, 2], [3]])
    refs = {}
    for qtype in [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
                  T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS]:
        name = f"q.{qtype.name}"
        values = (rng.standard_normal((ROWS, COLS)) * 0.1).astype(np.float32)
        if qtype == T.F32:
            raw, ref = values, values
            w.add_tensor(name, raw)
        elif qtype == T.F16:
            raw = values.astype(np.float16)
            ref = raw.astype(np.float32)
            w.add_tensor(name, raw)
        else:
            raw = quant_bytes(rng, qtype, ROWS, COLS, values)
            ref = ref_dequant(qtype, raw, ROWS, COLS)
            w.add_tensor(name, raw, raw_dtype=qtype)
        assert np.all(np.isfinite(ref)), name
        refs[name] = {"type": qtype.name, "shape": [ROWS, COLS],
                      "values": [float(x) for x in ref.reshape(-1)]}
    # An unsupported type, to check the error names type and tensor.
    iq = np.zeros((1, gguf.GGML_QUANT_SIZES[T.IQ2_XXS][1]), dtype=np.uint8)
    w.add_tensor("q.IQ2_XXS", iq, raw_dtype=T.IQ2_XXS)
    finish(w)
    with open(os.path.join(OUT, "quant_types.json"), "w") as f:
        json.dump(refs, f)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- tokenizer

CORPUS = (
    "Once upon a time there was a little robot who loved to read. Every day the robot "
    "read a new book about the world, the stars and the sea. In the year 2024 it read "
    "365 books! Hello world, hello again. The quick brown fox jumps over the lazy dog. "
    "Tokenizers split text into pieces; numbers like 1234567 become digits. "
    "Café, naïve, über — unicode text too. def main():\n    return 0\n"
) * 4

TOKENIZER_CASES = [
    "Hello world",
    "Once upon a time",
    "The year 2024 had 365 days.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\n\nlines",
    "<|im_start|>user\nHi there!<|im_end|>\n",
    "naïve café über — ✓",
    "emoji 🤗 and 中文",
    "",
]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    return tok, tokens, merges


def add_tokenizer(w, tokens, merges):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_unk_token_id(tokens.index("<|endoftext|>"))
    w.add_pad_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)


# ------------------------------------------------------------- tiny models

def permute(wt, n_head):
    """llama.cpp's converter layout for Q/K rows (see convert_hf_to_gguf.py)."""
    return (wt.reshape(n_head, 2, wt.shape[0] // n_head // 2, *wt.shape[1:])
            .swapaxes(1, 2).reshape(wt.shape))


def put(w, rng, name, hf_weight, qtype):
    """Adds tensor `name` (HF layout value hf_weight) stored as qtype."""
    rows = hf_weight.shape[0] if hf_weight.ndim == 2 else 1
    cols = hf_weight.shape[-1]
    if qtype == T.F32:
        w.add_tensor(name, hf_weight.astype(np.float32))
    elif qtype == T.F16:
        w.add_tensor(name, hf_weight.astype(np.float16))
    else:
        raw = quant_bytes(rng, qtype, rows, cols, hf_weight.reshape(rows, cols).astype(np.float32))
        w.add_tensor(name, raw, raw_dtype=qtype)


HEAD_DIM = {}
LINEAR = {"rope_type": "linear", "factor": 2.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "beta_fast": 32.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def llama3_rope_freqs(theta, head_dim, p):
    """The per-dimension divisors llama.cpp's converter stores as rope_freqs
    for a Llama-3 `rope_scaling` (its generate_extra_tensors, in float32)."""
    import math
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = p["original_max_position_embeddings"] / p["low_freq_factor"]
    high_wavelen = p["original_max_position_embeddings"] / p["high_freq_factor"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(p["factor"])
        else:
            smooth = ((p["original_max_position_embeddings"] / wavelen - p["low_freq_factor"])
                      / (p["high_freq_factor"] - p["low_freq_factor"]))
            out.append(1 / ((1 - smooth) / p["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def write_tiny_llama3(rng, tokens, merges):
    """Llama-3-style rope scaling; head_dim 16 and theta 5e5 put the eight
    frequencies in all three bands (kept, smoothed, divided by the factor)."""
    vocab, hidden, heads, kv, head_dim, ffn, theta = len(tokens), 64, 4, 2, 16, 128, 500000.0
    path = os.path.join(OUT, "tiny_llama3.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(131072)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(theta)
    w.add_rope_dimension_count(head_dim)
    add_tokenizer(w, tokens, merges)
    g = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    freqs = llama3_rope_freqs(theta, head_dim, LLAMA3)
    w.add_tensor("rope_freqs.weight", freqs)
    w.add_tensor("token_embd.weight", g(vocab, hidden).astype(np.float16))
    for name, shape in [("attn_q", (heads * head_dim, hidden)), ("attn_k", (kv * head_dim, hidden)),
                        ("attn_v", (kv * head_dim, hidden)), ("attn_output", (hidden, heads * head_dim)),
                        ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                        ("ffn_down", (hidden, ffn))]:
        w.add_tensor(f"blk.0.{name}.weight", g(*shape).astype(np.float16))
    for name in ["blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"]:
        w.add_tensor(name, 1 + g(hidden))
    finish(w)
    return {"file": os.path.basename(path), "rope_scaling": LLAMA3, "rope_theta": theta,
            "head_dim": head_dim, "rope_freqs": [float(x) for x in freqs]}


def write_tiny(rng, arch, tokens, merges):
    vocab = len(tokens)
    if arch == "llama":
        hidden, heads, kv, head_dim, ffn = 256, 4, 2, 64, 256
    elif arch == "qwen3":
        hidden, heads, kv, head_dim, ffn = 64, 4, 2, 32, 128
    else:
        hidden, heads, kv, head_dim, ffn = 64, 4, 2, 16, 128
    HEAD_DIM[arch] = head_dim
    path = os.path.join(OUT, f"tiny_{arch}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6 if arch != "llama" else 1e-5)
    w.add_rope_freq_base(1000000.0 if arch != "llama" else 10000.0)
    if arch == "llama":
        w.add_vocab_size(vocab)
        w.add_rope_dimension_count(head_dim)
    else:
        if arch == "qwen3":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(LINEAR["factor"])
        if arch == "qwen2":
            # A non-default data alignment, to exercise the offset arithmetic.
            w.add_custom_alignment(64)
            # Qwen2.5's long-context setting, as llama.cpp's converter writes it.
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(YARN["factor"])
            w.add_rope_scaling_orig_ctx_len(YARN["original_max_position_embeddings"])
            w.add_rope_scaling_yarn_beta_fast(YARN["beta_fast"])
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    add_tokenizer(w, tokens, merges)

    g = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    if arch == "llama":
        kinds = dict(embd=T.Q8_0, q=T.Q4_K, k=T.F16, v=T.Q5_K, o=T.Q6_K,
                     gate=T.Q4_0, up=T.Q3_K, down=T.Q2_K, out=T.Q4_1)
    elif arch == "qwen3":
        kinds = dict(embd=T.BF16, q=T.F32, k=T.F32, v=T.F16, o=T.Q5_0,
                     gate=T.Q5_1, up=T.Q8_0, down=T.F16, out=None)
    else:
        kinds = dict(embd=T.F16, q=T.F32, k=T.Q8_0, v=T.F32, o=T.F16,
                     gate=T.Q4_0, up=T.Q4_1, down=T.Q8_0, out=T.F16)
    put(w, rng, "token_embd.weight", g(vocab, hidden), kinds["embd"])
    put(w, rng, "blk.0.attn_norm.weight", 1 + g(hidden), T.F32)
    q, k = g(heads * head_dim, hidden), g(kv * head_dim, hidden)
    if arch == "llama":
        q, k = permute(q, heads), permute(k, kv)
    put(w, rng, "blk.0.attn_q.weight", q, kinds["q"])
    put(w, rng, "blk.0.attn_k.weight", k, kinds["k"])
    put(w, rng, "blk.0.attn_v.weight", g(kv * head_dim, hidden), kinds["v"])
    if arch == "qwen2":
        put(w, rng, "blk.0.attn_q.bias", g(heads * head_dim), T.F32)
        put(w, rng, "blk.0.attn_k.bias", g(kv * head_dim), T.F32)
        put(w, rng, "blk.0.attn_v.bias", g(kv * head_dim), T.F32)
    if arch == "qwen3":
        put(w, rng, "blk.0.attn_q_norm.weight", 1 + g(head_dim), T.F32)
        put(w, rng, "blk.0.attn_k_norm.weight", 1 + g(head_dim), T.F32)
    put(w, rng, "blk.0.attn_output.weight", g(hidden, heads * head_dim), kinds["o"])
    put(w, rng, "blk.0.ffn_norm.weight", 1 + g(hidden), T.F32)
    put(w, rng, "blk.0.ffn_gate.weight", g(ffn, hidden), kinds["gate"])
    put(w, rng, "blk.0.ffn_up.weight", g(ffn, hidden), kinds["up"])
    put(w, rng, "blk.0.ffn_down.weight", g(hidden, ffn), kinds["down"])
    put(w, rng, "output_norm.weight", 1 + g(hidden), T.F32)
    if kinds["out"] is not None:
        put(w, rng, "output.weight", g(vocab, hidden), kinds["out"])
    finish(w)
    return path


def transformers_reference(path, rng, head_dim):
    """Config and sampled weights as transformers loads the GGUF."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.split(path)
    cfg = AutoConfig.from_pretrained(d, gguf_file=f)
    overrides = {}
    if getattr(cfg, "head_dim", head_dim) != head_dim:
        # transformers' GGUF config mapping ignores `<arch>.attention.key_length`
        # (qwen3 then defaults to head_dim 128); give it the file's value.
        overrides["head_dim"] = {"transformers_default": cfg.head_dim, "file": head_dim}
        cfg.head_dim = head_dim
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, config=cfg, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    samples = {}
    for name, t in model.state_dict().items():
        t = t.detach().to(torch.float32).numpy()
        flat = t.reshape(-1)
        idx = np.unique(np.concatenate([np.arange(min(16, flat.size)),
                                        rng.integers(0, flat.size, size=48)]))
        # The 2-D index of each sample, so the Rust test also checks the shape.
        samples[name] = {
            "shape": list(t.shape),
            "index": [int(i) for i in idx],
            "values": [float(flat[i]) for i in idx],
            "sum": float(flat.astype(np.float64).sum()),
            "abs_sum": float(np.abs(flat.astype(np.float64)).sum()),
        }
    keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
            "vocab_size", "tie_word_embeddings", "bos_token_id", "eos_token_id"]
    config = {k: getattr(cfg, k, None) for k in keys}
    config["architectures"] = cfg.architectures
    config["rope_theta"] = (getattr(cfg, "rope_theta", None)
                            or (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta"))
    tok_ids = {s: tok.encode(s, add_special_tokens=True) for s in TOKENIZER_CASES}
    return config, samples, tok_ids, overrides


SPM_EXTRA_CASES = [" one leading space", "<tool> call\ttab", "\u00e9\u00e9\u00e9 \U0001F600"]


def train_spm_vocab():
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte
    tokens, then pieces (with the \u2581 word marker) in the order a BPE
    trainer learned them; each piece's score is minus its position, so
    earlier merges rank first, as in a real SentencePiece model."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    pieces = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + ["<tool>"]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces) + [4]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))] + [0.0]
    return tokens, types, scores


def write_tiny_spm(rng):
    tokens, types, scores = train_spm_vocab()
    vocab, hidden, heads, kv, head_dim, ffn = len(tokens), 64, 4, 2, 16, 128
    path = os.path.join(OUT, "tiny_spm.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    g = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float16)
    w.add_tensor("token_embd.weight", g(vocab, hidden))
    for name, shape in [("attn_q", (heads * head_dim, hidden)), ("attn_k", (kv * head_dim, hidden)),
                        ("attn_v", (kv * head_dim, hidden)), ("attn_output", (hidden, heads * head_dim)),
                        ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                        ("ffn_down", (hidden, ffn))]:
        w.add_tensor(f"blk.0.{name}.weight", g(*shape))
    for name in ["blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"]:
        w.add_tensor(name, np.ones(hidden, dtype=np.float32))
    finish(w)

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(OUT, gguf_file=os.path.basename(path))
    cases = {}
    for text in TOKENIZER_CASES + SPM_EXTRA_CASES:
        ids = tok.encode(text, add_special_tokens=True)
        cases[text] = {"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                       "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
    return {"file": os.path.basename(path), "transformers_tokenizer_cases": cases,
            "bos_token": tok.bos_token, "eos_token": tok.eos_token}


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(0)
    write_quant_types(rng)
    tok, tokens, merges = train_tokenizer()
    result = {"tokenizer_cases": {}, "models": {}}
    for s in TOKENIZER_CASES:
        enc = tok.encode(s)
        result["tokenizer_cases"][s] = {"ids": enc.ids,
                                        "decoded": tok.decode(enc.ids, skip_special_tokens=False)}
    for arch in ["llama", "qwen3", "qwen2"]:
        path = write_tiny(np.random.default_rng({"llama": 1, "qwen3": 2, "qwen2": 3}[arch]),
                          arch, tokens, merges)
        config, samples, tok_ids, overrides = transformers_reference(
            path, np.random.default_rng(7), HEAD_DIM[arch])
        result["models"][arch] = {"file": os.path.basename(path), "transformers_config": config,
                                  "transformers_config_overrides": overrides,
                                  "rope_scaling": {"qwen2": YARN, "qwen3": LINEAR}.get(arch),
                                  "transformers_tensors": samples,
                                  "transformers_tokenizer_ids": tok_ids}
    result["llama3_rope"] = write_tiny_llama3(np.random.default_rng(4), tokens, merges)
    result["spm"] = write_tiny_spm(np.random.default_rng(5))
    with open(os.path.join(OUT, "tiny_models.json"), "w") as f:
        json.dump(result, f, indent=0, ensure_ascii=False)
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    sys.exit(main())
