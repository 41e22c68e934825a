#!/usr/bin/env python3
"""Build the tiny reference models under tests/fixtures/models/ and record
Hugging Face transformers' outputs for them.

Not run by CI (it needs torch + transformers, ~3 GB). To regenerate:

    python3 -m venv .venv-fixtures
    .venv-fixtures/bin/pip install torch transformers tokenizers safetensors numpy
    .venv-fixtures/bin/python scripts/make_fixtures.py

Everything is seeded, so a rerun with the same library versions gives the
same files. Outputs, per model directory:
  config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
  generation_config.json (saved by transformers)
  reference/logits.safetensors  prompts (int32) and HF last-position logits (f32)
  reference/outputs.json        greedy continuations, tokenizer and chat-template cases
"""

import json
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "models"
VOCAB = 1024
PROMPT_LENS = [1, 2, 7, 33, 100, 300]
GREEDY_NEW = 24

CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "{{- '<|im_start|>system\\n' + messages[0]['content'].strip() + '<|im_end|>\\n' }}\n"
    "{%- set rest = messages[1:] %}\n"
    "{%- else %}\n"
    "{{- '<|im_start|>system\\nYou are a tiny test model.<|im_end|>\\n' }}\n"
    "{%- set rest = messages %}\n"
    "{%- endif %}\n"
    "{%- for message in rest %}\n"
    "    {%- if message.role not in ['user', 'assistant'] %}\n"
    "        {{- raise_exception('Unknown role: ' + message.role) }}\n"
    "    {%- endif %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

LLAMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]


def corpus():
    """Text to train the BPE on: the Python standard library's own sources
    plus a few multilingual lines, read in a fixed order."""
    lib = Path(os.__file__).parent
    files = sorted(p for p in lib.glob("*.py"))[:120]
    texts = [p.read_text(encoding="utf-8", errors="ignore") for p in files]
    texts.append(
        "Once upon a time there was a little crab. Héllo wörld! Ça va? "
        "日本語のテキスト。 Привет, мир. 🦀🚀 naïve café résumé\n" * 20
    )
    return texts


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return tok


def write_tokenizer(tok, d: Path, style: str):
    tok = Tokenizer.from_str(tok.to_str())
    if style == "llama":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))],
        )
        cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": bos,
            "eos_token": "<|eot_id|>",
            "pad_token": "<|endoftext|>",
            "chat_template": LLAMA_TEMPLATE,
            "model_max_length": 512,
        }
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "model_max_length": 512,
        }
        (d / "chat_template.jinja").write_text(CHATML_TEMPLATE)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


COMMON = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    vocab_size=VOCAB,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    initializer_range=0.2,
)


def model_specs(tok):
    eot = tok.token_to_id("<|eot_id|>")
    im_end = tok.token_to_id("<|im_end|>")
    bot = tok.token_to_id("<|begin_of_text|>")
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    return [
        # name, config, tokenizer style, weight dtype, hub-style config.json
        (
            "llama_gqa_tied",
            LlamaConfig(
                **COMMON, num_attention_heads=4, num_key_value_heads=2,
                rope_scaling=llama3, rope_theta=10000.0, tie_word_embeddings=True,
                bos_token_id=bot, eos_token_id=eot,
            ),
            "llama", torch.float32, True,
        ),
        (
            "llama_untied_bias",
            LlamaConfig(
                **COMMON, num_attention_heads=4, num_key_value_heads=4,
                attention_bias=True, rope_theta=500000.0, tie_word_embeddings=False,
                bos_token_id=bot, eos_token_id=eot,
            ),
            "llama", torch.float32, False,
        ),
        (
            "qwen2",
            Qwen2Config(
                **COMMON, num_attention_heads=4, num_key_value_heads=2,
                rope_theta=1000000.0, tie_word_embeddings=True,
                eos_token_id=im_end,
            ),
            "chatml", torch.float32, False,
        ),
        (
            "qwen3",
            Qwen3Config(
                **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_theta=1000000.0, tie_word_embeddings=False,
                eos_token_id=im_end,
            ),
            "chatml", torch.float32, True,
        ),
        (
            "mistral",
            MistralConfig(
                **COMMON, num_attention_heads=4, num_key_value_heads=1,
                sliding_window=None, rope_theta=10000.0, tie_word_embeddings=False,
                eos_token_id=eot, bos_token_id=bot,
            ),
            "llama", torch.float32, False,
        ),
        (
            "llama_bf16",
            LlamaConfig(
                **COMMON, num_attention_heads=4, num_key_value_heads=2,
                rope_scaling=llama3, rope_theta=10000.0, tie_word_embeddings=False,
                bos_token_id=bot, eos_token_id=eot,
            ),
            "llama", torch.bfloat16, False,
        ),
        (
            "qwen3_bf16",
            Qwen3Config(
                **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_theta=1000000.0, tie_word_embeddings=True,
                eos_token_id=im_end,
            ),
            "chatml", torch.bfloat16, False,
        ),
    ]


def randomize(model, seed):
    """Weights far from the defaults, so every parameter matters: matrices
    N(0, 0.2), norm weights 1 + N(0, 0.2), biases N(0, 0.2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.2
            if name.endswith("norm.weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def to_hub_style(d: Path):
    """Rewrite a transformers-5 config.json with Hub-style keys
    (rope_theta / rope_scaling / torch_dtype), so both spellings are tested."""
    p = d / "config.json"
    c = json.loads(p.read_text())
    rp = c.pop("rope_parameters", None) or {}
    c["rope_theta"] = rp.pop("rope_theta", 10000.0)
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    p.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")


def min_gap(logits):
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


TOKENIZER_TEXTS = [
    "",
    "Hello world",
    "Once upon a time there was a little crab.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\n",
    "def f(x):\n    return x + 1\n",
    "Héllo wörld! Ça va? naïve café",
    "日本語のテキスト",
    "Привет, мир",
    "emoji 🦀🚀 and a rare one 🪼",
    "special <|im_start|>user\nhi<|im_end|> inline",
    "numbers 1234567890 3.14159",
]

CHAT_CASES = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
    [{"role": "user", "content": "Ünïcödé 🦀 text"}, {"role": "assistant", "content": " ok "}],
    # Invalid for both templates: must raise.
    [{"role": "assistant", "content": "first"}, {"role": "tool", "content": "x"}],
]


def tokenizer_cases(d: Path):
    hf = AutoTokenizer.from_pretrained(str(d))
    enc = []
    for t in TOKENIZER_TEXTS:
        ids = hf(t, add_special_tokens=True)["input_ids"]
        ids_plain = hf(t, add_special_tokens=False)["input_ids"]
        enc.append(
            {
                "text": t,
                "ids": ids,
                "ids_no_special": ids_plain,
                "decoded": hf.decode(ids_plain),
                "decoded_skip_special": hf.decode(ids, skip_special_tokens=True),
            }
        )
    chats = []
    for msgs in CHAT_CASES:
        for agp in (False, True):
            try:
                text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
                ids = hf(text, add_special_tokens=False)["input_ids"]
                chats.append(
                    {"messages": msgs, "add_generation_prompt": agp, "text": text, "ids": ids}
                )
            except Exception as e:  # the template raised: record that it must
                chats.append(
                    {"messages": msgs, "add_generation_prompt": agp, "error": str(e)}
                )
    return enc, chats


def build(name, config, style, dtype, hub_style, tok, seed):
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model = model.to(dtype).eval()
    model.save_pretrained(str(d), safe_serialization=True)
    if hub_style:
        to_hub_style(d)
    write_tokenizer(tok, d, style)

    # Prompts: random ids (specials excluded) of several lengths, plus real text.
    rng = random.Random(seed)
    prompts = [[rng.randrange(len(SPECIALS), VOCAB) for _ in range(n)] for n in PROMPT_LENS]
    hf_tok = AutoTokenizer.from_pretrained(str(d))
    prompts.append(hf_tok("Once upon a time there was a little crab.")["input_ids"])

    tensors = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            out = model(torch.tensor([p]))
            logits = out.logits[0, -1].float()
            tensors[f"prompt.{i}"] = np.array(p, dtype=np.int32)
            tensors[f"logits.{i}"] = logits.numpy().astype(np.float32)

        greedy = []
        for i in (0, 3, len(prompts) - 1):
            p = prompts[i]
            ids = list(p)
            gaps = []
            for _ in range(GREEDY_NEW):
                lg = model(torch.tensor([ids])).logits[0, -1]
                gaps.append(min_gap(lg))
                ids.append(int(torch.argmax(lg)))
            greedy.append(
                {"prompt_index": i, "new_tokens": ids[len(p):], "min_top2_gap": min(gaps)}
            )

    (d / "reference").mkdir()
    save_file(tensors, str(d / "reference" / "logits.safetensors"))
    enc, chats = tokenizer_cases(d)
    ref = {
        "model": name,
        "dtype": "bfloat16" if dtype == torch.bfloat16 else "float32",
        "transformers_version": __import__("transformers").__version__,
        "torch_version": torch.__version__,
        "num_prompts": len(prompts),
        "greedy": greedy,
        "tokenizer": enc,
        "chat": chats,
    }
    (d / "reference" / "outputs.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    gaps = [g["min_top2_gap"] for g in greedy]
    print(f"{name}: {sum(f.stat().st_size for f in d.rglob('*') if f.is_file())} bytes, min greedy gap {min(gaps):.2e}")


def main():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    OUT.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    only = set(sys.argv[1:])
    for seed, (name, config, style, dtype, hub) in enumerate(model_specs(tok)):
        if only and name not in only:
            continue
        build(name, config, style, dtype, hub, tok, 1000 + seed)


if __name__ == "__main__":
    main()
