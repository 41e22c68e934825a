#!/usr/bin/env bash
# Creates the project's Python venv (default target/venv) if it is missing
# and prints its python. Every Python tool of the project runs from here,
# never from the system interpreter (PEP 668 forbids installing into it).
# Usage: scripts/venv.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${MINISGL_VENV:-target/venv}}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    if ! command -v python3 >/dev/null; then
        echo "error: python3 not found; install Python >= 3.10 (Debian/Ubuntu: apt install python3 python3-venv)" >&2
        exit 1
    fi
    echo "== creating the Python venv $venv" >&2
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >&2; then
        echo "error: 'python3 -m venv' failed; on Debian/Ubuntu install python3-venv (apt install python3-venv)" >&2
        exit 1
    fi
fi
echo "$venv/bin/python"
