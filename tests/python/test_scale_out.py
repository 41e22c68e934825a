"""Scale-out behind the real routers from PyPI (pinned in scripts/setup.sh):
three minisgl replicas of the tiny fixture model behind SGLang's router and
behind vLLM's router, on one machine.

- Routing: a shared-prefix workload (groups of requests sharing a long text
  prefix, groups interleaved) with a KV cache too small for every prefix on
  every replica; `cache_aware` must reach a higher prefix-cache hit rate
  than `round_robin` (hit rates from the replicas' vLLM-named counters).
- Failover (SGLang's router): one replica SIGKILLed mid-run loses no
  non-streaming request (the router retries it elsewhere); streams that
  were on it are cut, and how the client sees the cut is recorded. The
  replica is ejected, restarted on the same port and re-admitted. Then the
  same with SIGTERM: the replica drains and nothing is cut.
- vLLM's router: the routing comparison (happy path), and it tokenises
  through `/v1/*/render` instead of falling back to `/tokenize`.

Results are printed (pytest -s shows them) and written as JSON to
target/scale-out-results.json; docs/results/scale-out.md reports a run.
"""

import concurrent.futures as cf
import http.client
import importlib.metadata
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import MODEL_NAME, ROOT, Server

PINNED = {"sglang-router": "0.3.2", "vllm-router": "0.1.17"}
RESULTS = ROOT / "target" / "scale-out-results.json"
REPLICA_ARGS = ("--kv-memory-mb", "1", "--max-running", "8", "--shutdown-timeout-s", "30")
GROUPS, PER_GROUP, PREFIX_WORDS = 8, 5, 110
HEALTH_FLAGS = [  # health checks and breakers every second instead of the 60 s default
    "--health-check-interval-secs", "1", "--health-check-timeout-secs", "2",
    "--health-failure-threshold", "1", "--health-success-threshold", "1",
    "--cb-failure-threshold", "3", "--cb-success-threshold", "1",
    "--cb-timeout-duration-secs", "2", "--cb-window-duration-secs", "10",
    "--retry-max-retries", "4", "--retry-initial-backoff-ms", "50",
    "--retry-max-backoff-ms", "400", "--worker-startup-timeout-secs", "60",
    "--worker-startup-check-interval", "1",
]

results = {}


def record(key, value):
    results[key] = value
    print(f"\n[scale-out] {key}: {json.dumps(value)}", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def router_cmd(name):
    """The router's console script; fails (not skips) when not installed."""
    for dist, want in PINNED.items():
        try:
            got = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            got = None
        assert got == want, f"{dist}=={want} is needed (found {got}): run scripts/setup.sh"
    exe = shutil.which(name) or os.path.join(os.path.dirname(sys.executable), name)
    assert os.path.exists(exe), f"{name} not found on PATH: run scripts/setup.sh"
    return exe


def http_json(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if raw.strip().startswith(("{", "[")) else raw)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, repr(e)


class Router:
    """A router process and its base URL."""

    def __init__(self, kind, urls, policy, log_dir):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        common = ["--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
                  "--prometheus-port", str(free_port()), "--worker-urls", *urls]
        if kind == "sglang":
            args = [router_cmd("sglang-router"), "launch", *common, *HEALTH_FLAGS,
                    "--log-level", "warn"]
        else:
            args = [router_cmd("vllm-router"), *common, *HEALTH_FLAGS, "--log-level", "warning"]
        self.log_path = log_dir / f"{kind}-{policy}-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            status, _ = http_json("GET", self.base + "/v1/models", timeout=2)
            if status == 200 and self.healthy_count(urls) == len(urls):
                return
            time.sleep(0.2)
        raise AssertionError("router did not come up:\n" + self.log_path.read_text())

    def workers(self):
        """SGLang's `/workers` listing: {url: is_healthy}."""
        status, body = http_json("GET", self.base + "/workers", timeout=5)
        if status != 200 or not isinstance(body, dict) or "workers" not in body:
            return None
        return {w["url"]: w["is_healthy"] for w in body["workers"]}

    def healthy_count(self, urls):
        w = self.workers()
        return len(urls) if w is None else sum(1 for u in urls if w.get(u))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Fleet:
    """Replicas on fixed ports (a restarted replica keeps its URL)."""

    def __init__(self, n):
        self.ports = [free_port() for _ in range(n)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.replicas = [self.start(i) for i in range(n)]

    def start(self, i):
        return Server(*REPLICA_ARGS, "--port", self.ports[i])

    def restart(self, i):
        self.replicas[i] = self.start(i)
        return self.replicas[i]

    def counters(self):
        """Summed prefix-cache counters (prompt tokens) over live replicas."""
        q = h = 0.0
        for r in self.replicas:
            if r.proc.poll() is not None:
                continue
            for key, v in r.metrics().items():
                if key.startswith("vllm:prefix_cache_queries_total"):
                    q += v
                elif key.startswith("vllm:prefix_cache_hits_total"):
                    h += v
        return q, h

    def flush(self):
        for url in self.urls:
            status, body = http_json("POST", url + "/flush_cache")
            assert status == 200, body

    def stop(self):
        for r in self.replicas:
            if r.proc.poll() is None:
                r.stop()


@pytest.fixture(scope="module")
def fleet():
    f = Fleet(3)
    yield f
    f.stop()


def shared_prefix_workload(seed):
    """GROUPS x PER_GROUP text prompts, groups interleaved: a ~330-token
    shared prefix per group (so 8 prefixes overflow one replica's 2048-token
    cache while 3 fit) and a short unique tail."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 6)))
             for _ in range(400)]
    prefixes = [" ".join(rng.choice(words) for _ in range(PREFIX_WORDS)) for _ in range(GROUPS)]
    return [f"{prefixes[g]} question {k} {rng.choice(words)}?"
            for k in range(PER_GROUP) for g in range(GROUPS)]


def run_requests(base, prompts, concurrency=3, max_tokens=2):
    """Non-streaming completions through a router; returns error strings."""
    def one(p):
        status, body = http_json("POST", base + "/v1/completions",
                                 {"model": MODEL_NAME, "prompt": p, "max_tokens": max_tokens,
                                  "temperature": 0})
        if status != 200 or not isinstance(body, dict) or not body.get("choices"):
            return f"{status}: {str(body)[:200]}"
        return None
    with cf.ThreadPoolExecutor(concurrency) as ex:
        return [e for e in ex.map(one, prompts) if e]


def hit_rate(fleet, base, seed):
    fleet.flush()
    q0, h0 = fleet.counters()
    errors = run_requests(base, shared_prefix_workload(seed))
    assert not errors, errors
    q1, h1 = fleet.counters()
    assert q1 > q0
    return round((h1 - h0) / (q1 - q0), 3)


def stream_through(base, max_tokens, out):
    """A streaming completion read as raw SSE; records how it ended."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    body = {"model": MODEL_NAME, "prompt": "tell me a long story", "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    chunks, how, tokens = 0, None, None
    try:
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            how = f"HTTP {resp.status}: {resp.read()[:200]!r}"
        else:
            for line in resp:
                line = line.decode().strip()
                if line == "data: [DONE]":
                    how = "complete"
                    break
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                    if "error" in data:
                        how = f"error event: {json.dumps(data)[:200]}"
                        break
                    chunks += 1
                    if data.get("usage"):
                        tokens = data["usage"]["completion_tokens"]
            if how is None:
                how = "ended without [DONE]"
    except (OSError, http.client.HTTPException) as e:
        how = f"exception: {type(e).__name__}: {e}"[:200]
    finally:
        conn.close()
    out.append({"chunks": chunks, "completion_tokens": tokens, "how": how})


def wait_for(pred, timeout, step=0.1):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return round(time.time() - t0, 2)
        time.sleep(step)
    return None


def failover(fleet, router, victim, sig):
    """Streams and non-streaming requests through `router` while replica
    `victim` gets `sig`; returns what happened."""
    url = fleet.urls[victim]
    streams, stream_threads = [], []
    for _ in range(6):
        t = threading.Thread(target=stream_through, args=(router.base, 400, streams))
        t.start()
        stream_threads.append(t)
    time.sleep(0.5)
    rng = random.Random(sig)
    prompts = [f"request {i} " + " ".join(str(rng.randint(0, 999)) for _ in range(20))
               for i in range(40)]
    done = []
    errors = []

    def one(p):
        status, body = http_json("POST", router.base + "/v1/completions",
                                 {"model": MODEL_NAME, "prompt": p, "max_tokens": 24,
                                  "ignore_eos": True})
        ok = status == 200 and isinstance(body, dict) and body.get("choices")
        (done if ok else errors).append(None if ok else f"{status}: {str(body)[:200]}")

    with cf.ThreadPoolExecutor(6) as ex:
        futures = [ex.submit(one, p) for p in prompts]
        while len(done) + len(errors) < 8:
            time.sleep(0.02)
        victim_in_flight = fleet.replicas[victim].metrics().get("minisgl_requests_in_flight", 0)
        t_sig = time.time()
        fleet.replicas[victim].proc.send_signal(sig)
        # Ejected: marked unhealthy (or dropped from the registry).
        eject_s = wait_for(lambda: (router.workers() or {}).get(url) is not True, 30)
        for f in futures:
            f.result()
    for t in stream_threads:
        t.join(180)
    exit_code = fleet.replicas[victim].proc.wait(60)
    drain_s = round(time.time() - t_sig, 2)
    # Restart on the same port; the router re-admits it by health check.
    t_restart = time.time()
    fresh = fleet.restart(victim)
    serving_s = round(time.time() - t_restart, 2)
    readmit_s = wait_for(lambda: (router.workers() or {}).get(url) is True, 30)
    key = 'minisgl_http_responses_total{endpoint="completions",status="200"}'

    def served_traffic():
        assert not run_requests(router.base, ["after"] * 3, max_tokens=1)
        return fresh.metrics().get(key, 0) > 0
    # Health-checked back in; traffic may wait for the circuit breaker too.
    traffic_s = wait_for(served_traffic, 30, step=0.2)
    return {
        "signal": signal.Signals(sig).name,
        "non_streaming": {"sent": len(prompts), "ok": len(done), "failed": len(errors),
                          "errors": errors[:3]},
        "streams": streams,
        "victim_in_flight_at_signal": victim_in_flight,
        "victim_exit_code": exit_code,
        "eject_s": eject_s,
        "signal_to_exit_s": drain_s,
        "restart_to_serving_s": serving_s,
        "serving_to_readmitted_s": readmit_s,
        "serving_to_first_routed_request_s": traffic_s,
    }


def test_sglang_router_cache_aware_beats_round_robin(fleet, tmp_path):
    rates = {}
    for policy in ("round_robin", "cache_aware"):
        router = Router("sglang", fleet.urls, policy, tmp_path)
        try:
            # Our /server_info names the model: the router no longer says "unknown".
            status, models = http_json("GET", router.base + "/v1/models")
            assert status == 200 and models["data"][0]["id"] == MODEL_NAME, models
            # The router's flush reaches every replica.
            status, body = http_json("POST", router.base + "/flush_cache")
            assert status == 200 and body["workers_flushed"] == 3, body
            status, loads = http_json("GET", router.base + "/get_loads")
            assert status == 200 and all(w["load"] >= 0 for w in loads["workers"]), loads
            rates[policy] = hit_rate(fleet, router.base, seed=len(rates))
        finally:
            router.stop()
    record("sglang_hit_rate", {"router": f"sglang-router {PINNED['sglang-router']}",
                               "workload": f"{GROUPS} groups x {PER_GROUP} requests, "
                                           f"{PREFIX_WORDS}-word shared prefix, kv 1 MiB/replica",
                               **rates})
    assert rates["cache_aware"] > rates["round_robin"] + 0.1, rates


def test_sglang_router_failover_sigkill_then_sigterm(fleet, tmp_path):
    router = Router("sglang", fleet.urls, "round_robin", tmp_path)
    try:
        kill = failover(fleet, router, victim=0, sig=signal.SIGKILL)
        record("sglang_sigkill", kill)
        term = failover(fleet, router, victim=1, sig=signal.SIGTERM)
        record("sglang_sigterm", term)
    finally:
        router.stop()
    for r in (kill, term):
        assert r["non_streaming"]["failed"] == 0, r
        assert r["eject_s"] is not None and r["serving_to_readmitted_s"] is not None, r
        assert r["serving_to_first_routed_request_s"] is not None, r
    cut = [s for s in kill["streams"] if s["how"] != "complete"]
    assert len(cut) <= kill["victim_in_flight_at_signal"], kill
    assert term["victim_exit_code"] == 0, term
    assert all(s["how"] == "complete" and s["completion_tokens"] == 400
               for s in term["streams"]), term


def test_vllm_router_happy_path(fleet, tmp_path):
    rates = {}
    for policy in ("round_robin", "cache_aware"):
        router = Router("vllm", fleet.urls, policy, tmp_path)
        try:
            rates[policy] = hit_rate(fleet, router.base, seed=10 + len(rates))
            status, body = http_json("POST", router.base + "/v1/chat/completions", {
                "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2})
            assert status == 200 and body["choices"], body
        finally:
            router.stop()
    # The router tokenised through /render on the replicas, never /tokenize.
    seen = {"completions_render": 0, "chat_completions_render": 0, "tokenize": 0}
    for r in fleet.replicas:
        for key, v in r.metrics().items():
            for ep in seen:
                if f'endpoint="{ep}",status="200"' in key:
                    seen[ep] += v
    record("vllm_hit_rate", {"router": f"vllm-router {PINNED['vllm-router']}", **rates,
                             "endpoint_calls": seen})
    assert seen["completions_render"] >= GROUPS * PER_GROUP and seen["chat_completions_render"] >= 1
    assert seen["tokenize"] == 0, seen
    assert rates["cache_aware"] > rates["round_robin"], rates
