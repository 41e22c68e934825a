"""Shared fixtures: start the real `minisgl-host` binary on a loopback port
with a tiny fixture model and hand tests its base URL.

Needs `target/release/minisgl-host` (scripts/build-host.sh, or
`cargo build --release -p minisgl-host`: the release build is the one the
README's commands and scripts/test.sh share) and the Wasm
plugins (scripts/build-plugins.sh). Installs nothing; needs the `openai` and
`pytest` packages. `MINISGL_BIN` overrides the binary path.
"""

import json
import os
import re
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("MINISGL_BIN", ROOT / "target" / "release" / "minisgl-host"))
MODELS = ROOT / "tests" / "fixtures" / "models"
PLUGINS = ROOT / "target" / "wasm32-wasip2" / "plugin"
# FCFS taking ~2 ms per step (tests/guests/pace): for tests that need requests
# to wait, whatever the machine's speed (the fixtures decode in microseconds).
PACE = PLUGINS / "minisgl_guest_pace.wasm"
# Tiny random Llama (vocab 1024, context 512) with a chat template and
# Hugging Face reference outputs (reference/outputs.json, reference/logits.safetensors).
MODEL = MODELS / "llama_gqa_tied"
MODEL_NAME = "llama_gqa_tied"


class Server:
    """A running `minisgl-host` process."""

    def __init__(self, *extra_args, env=None, model=MODEL, wait_for="serving"):
        """`wait_for="loading"` returns as soon as the socket is bound (the
        model still loading) instead of once it serves."""
        if not BIN.exists():
            raise RuntimeError(
                f"{BIN} not found: run `cargo build --release -p minisgl-host` first "
                "(or point MINISGL_BIN at a build)"
            )
        extra = list(map(str, extra_args))
        defaults = {"--port": "0", "--kv-memory-mb": "8", "--shutdown-timeout-s": "20"}
        args = [str(BIN), "--model", str(model)]
        for flag, value in defaults.items():
            if flag not in extra:
                args += [flag, value]
        args += extra
        full_env = dict(os.environ)
        full_env.setdefault("RUST_LOG", "warn")
        full_env.update(env or {})
        self.log = []
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, text=True
        )
        self.base = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = re.search(wait_for + r" .* on (http://[\d.:]+)", line)
                if m and not ready.is_set():
                    self.base = m.group(1)
                    ready.set()
            ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(180) or self.base is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        self.url = self.base + "/v1"

    def get(self, path, timeout=30):
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, headers=None, timeout=120):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read().decode() or "null")
        except urllib.error.HTTPError as e:
            raw = e.read().decode()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw

    def metrics(self):
        """Parsed `/metrics`: {'name{labels}': value}."""
        status, text = self.get("/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, val = line.rpartition(" ")
                out[key] = float(val)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("server did not exit after the signal:\n" + "".join(self.log))
        self._pump.join(5)
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    code = s.stop()
    assert code == 0, f"server exited with {code}:\n" + "".join(s.log[-50:])


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def read_safetensors(path):
    """Minimal safetensors reader (int32/float32 only): {name: list}."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        fmt = {"I32": "i", "F32": "f"}[meta["dtype"]]
        count = (end - start) // 4
        out[name] = list(struct.unpack(f"<{count}{fmt}", raw[base + start : base + end]))
    return out


@pytest.fixture(scope="session")
def reference():
    """Hugging Face transformers reference outputs of the fixture model."""
    ref = json.loads((MODEL / "reference" / "outputs.json").read_text())
    ref["prompts"] = read_safetensors(MODEL / "reference" / "logits.safetensors")
    return ref


def wait_idle(server, timeout=60):
    """Waits until no request runs or waits and no KV page is owned by a
    request; returns the last metrics."""
    deadline = time.time() + timeout
    m = {}
    while time.time() < deadline:
        m = server.metrics()
        if (
            m.get("minisgl_kv_pages_used", -1) == 0
            and m.get("minisgl_running_requests", -1) == 0
            and m.get("minisgl_queue_length", -1) == 0
            and m.get("minisgl_requests_in_flight", -1) == 0
        ):
            return m
        time.sleep(0.2)
    raise AssertionError(f"server did not go idle: {m}")
