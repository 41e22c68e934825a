#!/usr/bin/env python3
"""Records what Hugging Face transformers does with the default model, the
SmolLM2-135M-Instruct Q4_1 GGUF (transformers dequantises it to f32 itself),
as the outside reference for minisgl's GGUF loader and model code:

- the chat template and a rendered conversation;
- tokenizer ids for a few strings;
- the prompt "Once upon a time" (raw, no chat template): its ids (whether a
  BOS token is prepended is recorded), the last-position logits (top 20), and
  the greedy continuation (32 new tokens, ids and text);
- sampled weights of a few tensors as transformers holds them (HF layout,
  after it undoes llama.cpp's Q/K permutation).

Writes tests/fixtures/gguf/smollm2_reference.json.

With --chat it writes tests/fixtures/gguf/smollm2_chat_reference.json
instead: a few one-message chats (the README's question among them) through
the chat template, each with transformers' greedy answer and, at every step
of it, the top-5 logits, so a test can tell a wrong token from a near tie.

Needs: pip install torch transformers accelerate gguf (not in CI; ~3 GB).
Run:   python3 scripts/hf_gguf_reference.py [--chat] [path/to/model.gguf]
"""

import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf", "smollm2_reference.json")
PROMPT = "Once upon a time"
NEW_TOKENS = 32

TOKENIZER_CASES = [
    "Once upon a time",
    "Hello, world!",
    "The year 2024 had 365 days.",
    "  two leading spaces and trailing  ",
    "tabs\tand\nnew\n\nlines",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n",
    "naïve café über — ✓ 🤗 中文",
    "def add(a, b):\n    return a + b\n",
]

WEIGHTS = [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.29.self_attn.k_proj.weight",
    "model.layers.29.input_layernorm.weight",
    "model.norm.weight",
]


CHAT_OUT = os.path.join(ROOT, "tests", "fixtures", "gguf", "smollm2_chat_reference.json")
CHATS = [
    "What is the capital of France?",
    "What is 2 + 2?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
]
CHAT_NEW_TOKENS = 32


def chat_reference(path, tok, model):
    """Greedy answers to CHATS, with the top-5 logits of every step."""
    cases = []
    for q in CHATS:
        messages = [{"role": "user", "content": q}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=CHAT_NEW_TOKENS, do_sample=False,
                                 attention_mask=torch.ones_like(ids),
                                 pad_token_id=tok.eos_token_id,
                                 output_logits=True, return_dict_in_generate=True)
        new = out.sequences[0, ids.shape[1]:].tolist()
        steps = []
        for row in out.logits:
            top = torch.topk(row[0].to(torch.float32), 5)
            steps.append({"ids": top.indices.tolist(), "values": [float(v) for v in top.values]})
        cases.append({"question": q, "prompt_ids": ids[0].tolist(), "greedy_new_ids": new,
                      "greedy_new_text": tok.decode(new, skip_special_tokens=True),
                      "top5": steps})
        print(f"{q!r} -> {cases[-1]['greedy_new_text']!r}")
    ref = {"file": os.path.basename(path), "transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "max_new_tokens": CHAT_NEW_TOKENS,
           "chats": cases}
    out_path = os.environ.get("CHAT_OUT", CHAT_OUT)
    with open(out_path, "w") as fh:
        json.dump(ref, fh, indent=1, ensure_ascii=False)
    print(f"wrote {out_path}")


def main():
    args = [a for a in sys.argv[1:] if a != "--chat"]
    path = args[0] if args else subprocess.check_output(
        [os.path.join(ROOT, "scripts", "fetch_default_model.sh")], text=True).strip()
    d, f = os.path.split(os.path.abspath(path))
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    if "--chat" in sys.argv[1:]:
        chat_reference(path, tok, model)
        return

    ref = {
        "file": f,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "config": {k: v for k, v in model.config.to_dict().items()
                   if k in ("architectures", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                            "head_dim", "rms_norm_eps", "rope_theta", "rope_parameters",
                            "max_position_embeddings", "vocab_size", "tie_word_embeddings",
                            "bos_token_id", "eos_token_id")},
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
        "chat_template": tok.chat_template,
    }
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ref["chat_rendered"] = {
        "messages": messages,
        "add_generation_prompt": True,
        "text": tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
    }
    ref["tokenizer_cases"] = [
        {"text": s, "ids": tok.encode(s, add_special_tokens=True),
         "decoded": tok.decode(tok.encode(s, add_special_tokens=True))}
        for s in TOKENIZER_CASES
    ]

    ids = tok(PROMPT, return_tensors="pt").input_ids
    prompt_ids = ids[0].tolist()
    with torch.no_grad():
        logits = model(ids).logits[0, -1].to(torch.float32)
        top = torch.topk(logits, 20)
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                             attention_mask=torch.ones_like(ids), pad_token_id=tok.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    ref["generation"] = {
        "prompt": PROMPT,
        "chat_template_applied": False,
        "prompt_ids": prompt_ids,
        "bos_prepended": bool(prompt_ids and prompt_ids[0] == tok.bos_token_id),
        "greedy_new_ids": new,
        "greedy_new_text": tok.decode(new, skip_special_tokens=False),
        "first16_text": tok.decode(new[:16], skip_special_tokens=False),
        "last_logits_top20": {"ids": top.indices.tolist(),
                              "values": [float(v) for v in top.values]},
        "last_logits_stats": {"mean": float(logits.mean()), "std": float(logits.std()),
                              "argmax": int(logits.argmax())},
    }

    rng = np.random.default_rng(0)
    state = model.state_dict()
    samples = {}
    for name in WEIGHTS:
        t = state[name].detach().to(torch.float32).numpy()
        flat = t.reshape(-1)
        idx = np.unique(np.concatenate([np.arange(64), rng.integers(0, flat.size, size=64)]))
        samples[name] = {
            "shape": list(t.shape),
            "index": [int(i) for i in idx],
            "values": [float(flat[i]) for i in idx],
            "sum": float(flat.astype(np.float64).sum()),
            "abs_sum": float(np.abs(flat.astype(np.float64)).sum()),
        }
    ref["weights"] = samples

    with open(OUT, "w") as fh:
        json.dump(ref, fh, indent=1, ensure_ascii=False)
    g = ref["generation"]
    print(f"prompt ids {g['prompt_ids']} (BOS prepended: {g['bos_prepended']})")
    print(f"greedy: {g['greedy_new_ids']}")
    print(f"text: {PROMPT}{g['greedy_new_text']!r}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
