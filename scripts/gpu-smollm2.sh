#!/usr/bin/env bash
# The default model (SmolLM2-135M-Instruct Q4_1 GGUF, 98 MB) on the GPU against
# the CPU backend: same greedy text. The device tool carries at most 64 MiB per
# call, so the model travels in two calls on a warm machine:
#
#   scripts/gpu-smollm2.sh prepare   (here) splits the model into .gpu-smol-a/ and
#                                    .gpu-smol-b/ (git-ignored), gzips the release
#                                    binary into .gpu-smol-b/, and writes the CPU
#                                    backend's greedy outputs there as the reference;
#   device call 1: carry [".gpu-smol-a"], command: cp .gpu-smol-a/part-aa /tmp/part-aa
#   device call 2 (within 30 s): carry [".gpu-smol-b"], command:
#                                    bash scripts/gpu-smollm2.sh device
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
story="Once upon a time"
chat="What is the capital of France? Answer in one sentence."

case "${1:-}" in
prepare)
    [ -f "$model" ] || bash scripts/fetch_default_model.sh
    cargo build --release -p minisgl-host
    rm -rf .gpu-smol-a .gpu-smol-b
    mkdir -p .gpu-smol-a .gpu-smol-b
    for d in /.gpu-smol-a/ /.gpu-smol-b/; do
        grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
    done
    split -b 56000000 "$model" .gpu-smol-a/part-
    mv .gpu-smol-a/part-ab .gpu-smol-b/part-ab
    gzip -1 -c target/release/minisgl-host > .gpu-smol-b/minisgl-host.gz
    bin=target/release/minisgl-host
    # The GPU dequantises the weights, so the CPU reference does too (its
    # default computes on the quantised blocks with 8-bit activations).
    export MINISGL_CPU_F32_WEIGHTS=1
    "$bin" generate --model "$model" --prompt "$story" --max-new-tokens 64 --device cpu --json > .gpu-smol-b/story.json
    "$bin" generate --model "$model" --chat --prompt "$chat" --max-new-tokens 64 --device cpu --json > .gpu-smol-b/chat.json
    sha256sum "$model" | cut -d' ' -f1 > .gpu-smol-b/sha256
    # gguf (pure Python) for transformers' GGUF reader on the GPU machine,
    # which has torch and transformers but no registry.
    if [ -x target/venv/bin/pip ]; then
        target/venv/bin/pip download -q --no-deps -d .gpu-smol-b/wheels gguf || true
    fi
    du -sb .gpu-smol-a .gpu-smol-b
    ;;
device)
    out="${OUT:-$PWD/gpu-out}"
    mkdir -p "$out"
    cat /tmp/part-aa .gpu-smol-b/part-ab > /tmp/smol.gguf
    [ "$(sha256sum /tmp/smol.gguf | cut -d' ' -f1)" = "$(cat .gpu-smol-b/sha256)" ] || { echo "model checksum differs"; exit 1; }
    gunzip -c .gpu-smol-b/minisgl-host.gz > /tmp/mh && chmod +x /tmp/mh
    export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export MINISGL_KERNEL_CACHE=/tmp/minisgl-kernels
    for g in graph eager; do
        extra=()
        [ "$g" = eager ] && extra=(--cuda-graph-max-bs 0)
        /tmp/mh generate --model /tmp/smol.gguf --prompt "$story" --max-new-tokens 64 --device cuda --json "${extra[@]}" > "$out/story-$g.json"
        /tmp/mh generate --model /tmp/smol.gguf --chat --prompt "$chat" --max-new-tokens 64 --device cuda --json "${extra[@]}" > "$out/chat-$g.json"
    done
    set +e
    OUT="$out" python3 - <<'PY'
import json, os, sys
out = os.environ["OUT"]
ok = True
for name in ["story", "chat"]:
    cpu = json.load(open(f".gpu-smol-b/{name}.json"))
    for g in ["graph", "eager"]:
        gpu = json.load(open(f"{out}/{name}-{g}.json"))
        a, b = cpu["token_ids"], gpu["token_ids"]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        ok &= a == b
        print(f"{name} [{g}]: cpu {len(a)} tokens, gpu {len(b)} tokens, identical={a == b}, "
              f"first difference at {first}; gpu decode {gpu['decode_tokens_per_s']:.1f} tok/s")
    print(f"{name} text: {cpu['text']!r}")
sys.exit(0 if ok else 1)
PY
    rc=$?
    # Transformers' greedy chat answers with per-step top-5 logits
    # (tests/fixtures/gguf/smollm2_chat_reference.json): the GPU machine has
    # torch and transformers; gguf travels as a wheel when prepare found one.
    if ls .gpu-smol-b/wheels/gguf-*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-deps --target /tmp/pyextra .gpu-smol-b/wheels/gguf-*.whl
        mkdir -p /tmp/smoldir && cp /tmp/smol.gguf /tmp/smoldir/SmolLM2-135M-Instruct.Q4_1.gguf
        PYTHONPATH=/tmp/pyextra CHAT_OUT="$out/smollm2_chat_reference.json" CUDA_VISIBLE_DEVICES= \
            python3 scripts/hf_gguf_reference.py --chat /tmp/smoldir/SmolLM2-135M-Instruct.Q4_1.gguf
    fi
    exit $rc
    ;;
*)
    echo "usage: $0 prepare|device" >&2
    exit 2
    ;;
esac
