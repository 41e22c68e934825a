#!/usr/bin/env python3
"""How much bf16 noise MINISGL_FOLD_NORMS adds, without a GPU: a numpy forward of a
fixture model (tests/fixtures/models/NAME; Llama, Mistral, Qwen2 layouts, no q/k norm)
that rounds to bf16 where the CUDA backend does, unfolded and with the norms folded
into the qkv / gate_up weights (docs/results/gpu-2026-12-07-fold.md section 2), each
against the f32 forward of the same prompts (37, 11 and 64 random tokens).

    python3 scripts/diag/fold_rounding.py NAME [SEED] [TAG,TAG...]

Prints the minimum logits cosine over the rows and the mean of 1 - cosine for each of:
unfold (the default path), fold (MINISGL_FOLD_NORMS=1 as built since aebbf01: every qkv
product deferred, a bias added after the row factor) and foldexact (the same with the
folded weights g * W kept in f32, to separate the weights' rounding from the kernels')
and foldgemv (the fold on rows the gemv kernels take, 1-4 a step: the norm in the
product's prologue with a unit weight, its output rounded to bf16 before the folded
product; that is what the model check's decode steps of three sequences run).
TAGs name rounding points to leave out (emb, normed, prod, raw, scaled, vscaled, rope,
attn, res, act), to see which one carries the difference; `scaled` alone gives the path
of the head dims with a fused build (64, 128, 256). Needs numpy only.
"""
import json, struct, sys
import numpy as np


def load_file(path):
    """safetensors (F32 or BF16 tensors) into float32 arrays."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if v["dtype"] == "F32":
            x = np.frombuffer(buf, np.float32)
        elif v["dtype"] == "BF16":
            x = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{k}: dtype {v['dtype']} not handled")
        out[k] = x.reshape(v["shape"])
    return out


def bf(x):
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)
name = sys.argv[1]
if name.startswith("qwen3"):
    raise SystemExit("q/k norms are not emulated: Llama, Mistral and Qwen2 layouts only")
d = f"{__import__('os').path.dirname(__file__)}/../../tests/fixtures/models/{name}"
c = json.load(open(f"{d}/config.json"))
W = load_file(f"{d}/model.safetensors")
H = c["hidden_size"]; nh = c["num_attention_heads"]; nkv = c["num_key_value_heads"]
hd = c.get("head_dim") or H // nh; L = c["num_hidden_layers"]; eps = c["rms_norm_eps"]
theta = c.get("rope_theta", 10000.0)
def g(k): return W[k].astype(np.float32)
emb = g("model.embed_tokens.weight"); lm = g("lm_head.weight") if "lm_head.weight" in W else emb
inv_freq = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd)
def rope(x, pos):  # x [T, h, hd], rotate-half
    f = np.outer(pos, inv_freq); cos = np.cos(np.concatenate([f, f], -1))[:, None]; sin = np.sin(np.concatenate([f, f], -1))[:, None]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin
def inv(x): return 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
def forward(toks, mode, R):
    # mode: "f32" | "unfold" | "fold" | "foldexact" | "foldgemv"; R(x, tag) rounds at the
    # GPU's points
    wr = (lambda w: w) if mode == "f32" else bf
    T = len(toks); pos = np.arange(T)
    r = R(wr(emb)[toks], "emb")
    for l in range(L):
        p = f"model.layers.{l}."
        gin, gpost = wr(g(p + "input_layernorm.weight")), wr(g(p + "post_attention_layernorm.weight"))
        Wq, Wk, Wv = wr(g(p + "self_attn.q_proj.weight")), wr(g(p + "self_attn.k_proj.weight")), wr(g(p + "self_attn.v_proj.weight"))
        bias = (p + "self_attn.q_proj.bias") in W
        bq, bk, bv = [(wr(g(p + f"self_attn.{n}_proj.bias")) if bias else 0) for n in "qkv"]
        Wo = wr(g(p + "self_attn.o_proj.weight"))
        Wg, Wu, Wd = wr(g(p + "mlp.gate_proj.weight")), wr(g(p + "mlp.up_proj.weight")), wr(g(p + "mlp.down_proj.weight"))
        fold = mode.startswith("fold")
        if fold:
            fw = bf if mode == "fold" else (lambda w: w)
            Wq, Wk, Wv = fw(Wq * gin), fw(Wk * gin), fw(Wv * gin); Wg, Wu = fw(Wg * gpost), fw(Wu * gpost)
        defer = fold and mode != "foldgemv"
        if defer:  # the bias after the row factor (aebbf01), in f32 with it
            s = inv(r)
            q = R(R(r @ Wq.T, "raw") * s + bq, "scaled"); k = R(R(r @ Wk.T, "raw") * s + bk, "scaled")
            v = R(R(r @ Wv.T, "raw") * s + bv, "vscaled")  # v is rounded again as it is cached
        else:
            h = R(r * inv(r) * (1 if fold else gin), "normed")
            q, k, v = R(h @ Wq.T + bq, "prod"), R(h @ Wk.T + bk, "prod"), R(h @ Wv.T + bv, "prod")
        q = R(rope(q.reshape(T, nh, hd), pos), "rope"); k = R(rope(k.reshape(T, nkv, hd), pos), "rope"); v = v.reshape(T, nkv, hd)
        rep = nh // nkv; o = np.zeros((T, nh, hd), np.float32)
        for hh in range(nh):
            sc = q[:, hh] @ k[:, hh // rep].T / np.sqrt(hd); sc = sc + np.triu(np.full((T, T), -np.inf), 1)
            pr = np.exp(sc - sc.max(-1, keepdims=True)); pr /= pr.sum(-1, keepdims=True)
            o[:, hh] = pr @ v[:, hh // rep]
        o = R(o.reshape(T, nh * hd), "attn")
        if defer:
            r = R(r + o @ Wo.T, "res")  # beta = 1: one rounding
            s = inv(r); gr = R(r @ Wg.T, "raw"); ur = R(r @ Wu.T, "raw")
            a = R((lambda x: x / (1 + np.exp(-x)))(gr * s) * (ur * s), "act")
        else:
            r = R(r + R(o @ Wo.T, "prod"), "res")
            h = R(r * inv(r) * (1 if fold else gpost), "normed")
            gg, uu = R(h @ Wg.T, "prod"), R(h @ Wu.T, "prod")
            a = R(gg / (1 + np.exp(-gg)) * uu, "act")
        if defer and (l + 1 < L):
            r = R(r + a @ Wd.T, "res")
        else:
            r = R(r + R(a @ Wd.T, "prod"), "res")
    gf = wr(g("model.norm.weight"))
    h = R(r * inv(r) * gf, "normed")
    return h @ wr(lm).T
def cos(a, b): return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
skip = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()
R = lambda x, tag: x if tag in skip else bf(x)
modes = ["unfold", "fold", "foldexact", "foldgemv"]
worst = {m: 1.0 for m in modes}; mean = {m: [] for m in modes}
# The model check's gate compares against the CPU on the same bf16 weights (folded the
# same way under the fold), whose activations stay f32: each mode's own weights with no
# activation rounding. There the weights' rounding cancels, and only the kernels' own
# rounding points remain.
gworst = {m: 1.0 for m in modes}; gmean = {m: [] for m in modes}
for n in [37, 11, 64]:
    toks = rng.integers(0, c["vocab_size"], n)
    ref = forward(toks, "f32", lambda x, t: x)
    for m in modes:
        out = forward(toks, m, R)
        cs = [cos(out[i], ref[i]) for i in range(n)]
        worst[m] = min(worst[m], min(cs)); mean[m] += [1 - x for x in cs]
        same = forward(toks, m, lambda x, t: x)
        cs = [cos(out[i], same[i]) for i in range(n)]
        gworst[m] = min(gworst[m], min(cs)); gmean[m] += [1 - x for x in cs]
print(name, "skip", sorted(skip), {m: (round(worst[m], 6), "%.2e" % np.mean(mean[m])) for m in worst})
print(name, "gate (same weights)", {m: (round(gworst[m], 6), "%.2e" % np.mean(gmean[m])) for m in gworst})
