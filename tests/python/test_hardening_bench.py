"""SGLang 0.5.2's `bench_serving` against the CPU server, with the backends
peer servers are benchmarked with (`vllm`, `vllm-chat`, `sglang`): every
request must complete. One request decodes at a time, so the last requests
wait for their first token far longer than the server's (shortened)
keep-alive timeout; bench_serving parses every SSE line as JSON, so a
keep-alive comment line during that wait used to fail the request.

The client counts tokens with the fixture model's own tokenizer directory
(tokenizer.json), so client and server agree on prompt and output lengths.
Needs `sglang==0.5.2` and `transformers` (scripts/setup.sh installs them);
bench_serving is run as a file, which needs only its own imports.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MODEL, MODEL_NAME, Server, wait_idle, PACE

KEEP_ALIVE_S = 0.25
# With one running slot the last of 8 requests waits for 7 x 400 tokens.
# The client decodes random prompt ids to text and the server encodes that
# text again, which can give more tokens than 16: leave room in the 512-token
# context.
PROMPTS = 8
OUTPUT_LEN = 400


def bench_script():
    spec = importlib.util.find_spec("sglang")
    assert spec is not None, "sglang is not installed: run scripts/setup.sh"
    path = Path(spec.submodule_search_locations[0]) / "bench_serving.py"
    assert path.exists(), path
    return path


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-running", "1", "--scheduler", PACE, env={"MINISGL_HTTP_HEADER_TIMEOUT_S": str(KEEP_ALIVE_S)})
    yield s
    assert s.stop() == 0, "".join(s.log[-40:])


@pytest.mark.parametrize("backend", ["vllm", "vllm-chat", "sglang"])
def test_bench_serving_completes_every_request(srv, backend, tmp_path):
    out = tmp_path / "bench.jsonl"
    cmd = [
        sys.executable, str(bench_script()),
        "--backend", backend,
        "--base-url", srv.base,
        "--model", MODEL_NAME,
        "--tokenizer", str(MODEL),
        "--dataset-name", "random-ids",
        "--random-input-len", "16",
        "--random-output-len", str(OUTPUT_LEN),
        "--random-range-ratio", "1",
        "--num-prompts", str(PROMPTS),
        "--request-rate", "inf",
        "--seed", "1",
        "--disable-tqdm",
        "--output-file", str(out),
        "--output-details",
    ]
    # The model name is not a Hub id: keep transformers from asking the Hub.
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert rows, log
    res = rows[-1]
    assert res["completed"] == PROMPTS, log
    errors = [e for e in res.get("errors", []) if e]
    assert not errors, errors
    assert res["total_output_tokens"] == PROMPTS * OUTPUT_LEN, res["total_output_tokens"]
    ttfts = res["ttfts"]
    assert max(ttfts) > 2 * KEEP_ALIVE_S, (
        f"no request waited long for its first token ({ttfts}); the test must cover a wait "
        f"longer than the {KEEP_ALIVE_S} s keep-alive timeout"
    )
    wait_idle(srv)
