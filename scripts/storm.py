#!/usr/bin/env python3
"""Throw hostile traffic at a running minisgl server and report what happened.

    python3 scripts/storm.py --url http://127.0.0.1:8000 [--requests 300]
        [--duration 120] [--workers 8] [--slow 40] [--swap-plugins DIR]

Mixes, in random order (seeded): valid requests on every endpoint (streamed
and not), malformed bodies, streams cut by the client after a few events,
oversized bodies; meanwhile it holds `--slow` connections that send half a
request head or half a body, and with `--swap-plugins DIR` (a folder of
built plugins, e.g. target/wasm32-wasip2/plugin) it hot-swaps the scheduler
to hostile plugins (looping, trapping, memory-hungry, invalid, oversized and
log-injecting names) and to paths that are a FIFO, /dev/zero and missing,
then back to the default FCFS component.

At the end it waits for the server to go idle and reads /metrics. The report
gives status codes per kind of request, valid requests lost, 5xx answers,
slow connections the server closed (and how fast), and KV pages held by
requests (must be 0) and by the prefix cache (all must be evictable). Exit
status 1 when anything is wrong. Bounded: `--requests` requests, `--duration`
seconds; loopback servers only. Standard library only.
"""

import argparse
import collections
import ipaddress
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

MAX_BODY = 8 << 20  # the server's body limit


class Storm:
    def __init__(self, args):
        self.url = args.url.rstrip("/")
        u = urllib.parse.urlparse(self.url)
        self.host, self.port = u.hostname, u.port or 80
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.codes = collections.defaultdict(collections.Counter)  # kind -> status -> n
        self.lost = []  # valid requests that did not complete
        self.bad = []  # answers that broke the contract (5xx, non-JSON errors, resets)
        self.deadline = time.time() + args.duration
        self.model = args.model or self.served_model()

    # -- plumbing ---------------------------------------------------------
    def record(self, kind, status):
        with self.lock:
            self.codes[kind][status] += 1

    def http(self, method, path, body=None, timeout=60):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def served_model(self):
        _, raw = self.http("GET", "/v1/models")
        return json.loads(raw)["data"][0]["id"]

    def metrics(self):
        _, raw = self.http("GET", "/metrics")
        out = {}
        for line in raw.decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def sock(self, timeout=30):
        return socket.create_connection((self.host, self.port), timeout=timeout)

    # -- request kinds ----------------------------------------------------
    def valid(self, i):
        r = self.rng
        stream = r.random() < 0.5
        ep = r.choice(["completions", "chat", "generate"])
        if ep == "completions":
            path, body = "/v1/completions", {
                "model": self.model, "prompt": f"storm {i}", "max_tokens": r.randint(1, 16),
                "stream": stream}
        elif ep == "chat":
            path, body = "/v1/chat/completions", {
                "model": self.model, "messages": [{"role": "user", "content": f"storm {i}"}],
                "max_tokens": r.randint(1, 16), "stream": stream}
        else:
            path, body = "/generate", {
                "text": f"storm {i}", "sampling_params": {"max_new_tokens": r.randint(1, 16)},
                "stream": stream}
        kind = f"valid-{ep}{'-stream' if stream else ''}"
        try:
            status, raw = self.http("POST", path, body, timeout=120)
        except OSError as e:
            self.record(kind, "error")
            self.lost.append(f"{kind} {i}: {e!r}")
            return
        self.record(kind, status)
        if status == 429:
            return  # refused by the queue bound: told, not lost
        if status != 200:
            self.lost.append(f"{kind} {i}: HTTP {status} {raw[:200]!r}")
            return
        if stream:
            lines = [ln for ln in raw.decode().splitlines() if ln]
            for ln in lines:
                if not ln.startswith("data: "):
                    self.bad.append(f"{kind} {i}: non-data SSE line {ln[:80]!r}")
                elif ln != "data: [DONE]" and "error" in json.loads(ln[6:]):
                    self.lost.append(f"{kind} {i}: stream error {ln[:200]}")
            if not lines or lines[-1] != "data: [DONE]":
                self.lost.append(f"{kind} {i}: stream did not end with [DONE]")

    def malformed(self, i):
        r = self.rng
        path = r.choice(["/v1/completions", "/v1/chat/completions", "/generate",
                         "/admin/plugins/scheduler"])
        junk = [
            b"", b"{", b"[]", b"null", b"\xff\xfe\x00garbage", b'{"prompt": "x"' ,
            json.dumps({"model": self.model, "prompt": 5}).encode(),
            json.dumps({"model": self.model, "prompt": "x", "max_tokens": -3}).encode(),
            json.dumps({"model": self.model, "prompt": "x", "max_tokens": 10**30}).encode(),
            json.dumps({"model": self.model, "prompt": [10**12]}).encode(),
            json.dumps({"model": self.model, "messages": "hi"}).encode(),
            json.dumps({"model": self.model, "prompt": "x", "n": 10**6}).encode(),
            json.dumps({"model": self.model, "prompt": [5] * 5000}).encode(),
            json.dumps({"text": "x", "sampling_params": {"temperature": "hot"}}).encode(),
            json.dumps({"input_ids": [[]]}).encode(),
            json.dumps({"path": 7}).encode(),
            bytes(r.randrange(256) for _ in range(r.randint(1, 200))),
        ]
        body = r.choice(junk)
        try:
            status, raw = self.http("POST", path, body)
        except OSError as e:
            self.record("malformed", "error")
            self.bad.append(f"malformed {i} on {path}: {e!r}")
            return
        self.record("malformed", status)
        if not 400 <= status < 500:
            self.bad.append(f"malformed {i} on {path}: HTTP {status} for {body[:60]!r}")
            return
        try:
            json.loads(raw)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            self.bad.append(f"malformed {i} on {path}: error body is not OpenAI JSON: {raw[:100]!r}")

    def disconnect(self, i):
        body = json.dumps({"model": self.model, "prompt": f"cut {i}", "max_tokens": 64,
                           "ignore_eos": True, "stream": True}).encode()
        s = self.sock()
        try:
            s.sendall(
                f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            want = self.rng.randint(0, 4)
            got = 0
            while got < want:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk.count(b"data: ")
        except OSError:
            pass
        finally:
            s.close()
        self.record("disconnect", "cut")

    def oversized(self, i):
        body = b"{" + b" " * (MAX_BODY + self.rng.randint(1, 4 << 20)) + b"}"
        try:
            status, _ = self.http("POST", "/v1/completions", body)
        except OSError as e:
            self.record("oversized", "error")
            self.bad.append(f"oversized {i}: the 413 was not readable: {e!r}")
            return
        self.record("oversized", status)
        if status != 413:
            self.bad.append(f"oversized {i}: HTTP {status}")

    # -- slow connections -------------------------------------------------
    def slow(self, n, wait):
        """Opens `n` connections that stall mid-head or mid-body; returns
        (closed by the server, seconds until the last one was closed)."""
        socks = []
        for i in range(n):
            try:
                s = self.sock(timeout=wait)
            except OSError:
                self.bad.append(f"slow {i}: could not connect")
                continue
            if i % 2:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
            else:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pr")
            socks.append(s)
        start = time.time()
        closed, last = 0, 0.0
        for s in socks:
            s.settimeout(max(0.1, wait - (time.time() - start)))
            try:
                while s.recv(4096):
                    pass
                closed += 1
                last = time.time() - start
            except ConnectionResetError:
                closed += 1
                last = time.time() - start
            except OSError:
                pass
            s.close()
        return closed, len(socks), last

    # -- hostile swaps ----------------------------------------------------
    def swaps(self, folder):
        tmp = tempfile.mkdtemp(prefix="storm-")
        fifo = os.path.join(tmp, "fifo.wasm")
        os.mkfifo(fifo)
        targets = [os.path.join(folder, f"minisgl_guest_{g}.wasm")
                   for g in ("loop", "trap", "alloc", "invalid_scheduler", "hugename", "lognl")]
        targets += [fifo, "/dev/zero", os.path.join(tmp, "missing.wasm")]
        out = []
        for t in targets:
            if time.time() > self.deadline:
                break
            start = time.time()
            try:
                status, raw = self.http("POST", "/admin/plugins/scheduler", {"path": t}, timeout=150)
            except OSError as e:
                status, raw = "error", repr(e).encode()
                self.bad.append(f"swap to {t}: {e!r}")
            took = time.time() - start
            self.record("swap", status)
            out.append((os.path.basename(t), status, round(took, 2)))
            if status != "error" and status >= 500:
                self.bad.append(f"swap to {t}: HTTP {status} {raw[:200]!r}")
            time.sleep(0.5)  # let a few steps run under the new plugin
        default = os.path.join(folder, "minisgl_fcfs_scheduler.wasm")
        status, _ = self.http("POST", "/admin/plugins/scheduler", {"path": default}, timeout=150)
        out.append(("minisgl_fcfs_scheduler.wasm (restore)", status, None))
        os.unlink(fifo)
        return out

    # -- the run ----------------------------------------------------------
    def run(self):
        a = self.args
        kinds = (["valid"] * 5 + ["malformed"] * 4 + ["disconnect"] * 2 + ["oversized"])
        plan = [self.rng.choice(kinds) for _ in range(a.requests)]
        slow_result = {}
        swap_result = []
        side = []
        if a.slow:
            t = threading.Thread(target=lambda: slow_result.update(
                zip(("closed", "opened", "last_closed_s"), self.slow(a.slow, a.slow_wait))))
            side.append(t)
        if a.swap_plugins:
            side.append(threading.Thread(target=lambda: swap_result.extend(self.swaps(a.swap_plugins))))
        for t in side:
            t.start()
        skipped = 0
        with ThreadPoolExecutor(a.workers) as pool:
            futs = []
            for i, k in enumerate(plan):
                if time.time() > self.deadline:
                    skipped = len(plan) - i
                    break
                futs.append(pool.submit(getattr(self, k), i))
            for f in futs:
                try:
                    f.result()
                except Exception as e:  # noqa: BLE001 - a crash of the tool is a finding too
                    self.bad.append(f"storm worker: {e!r}")
        for t in side:
            t.join()
        idle, m = self.wait_idle()
        return {
            "requests": len(plan) - skipped,
            "skipped_at_deadline": skipped,
            "status_codes": {k: dict(v) for k, v in sorted(self.codes.items())},
            "valid_lost": len(self.lost),
            "contract_broken": len(self.bad),
            "examples": (self.lost + self.bad)[:20],
            "slow_connections": slow_result,
            "swaps": swap_result,
            "idle": idle,
            "kv_pages_used_by_requests": m.get("minisgl_kv_pages_used"),
            "kv_pages_cached": m.get("minisgl_kv_pages_cached"),
            "kv_pages_evictable": m.get("minisgl_kv_pages_evictable"),
            "client_disconnects": m.get("minisgl_client_disconnects_total"),
            "engine_aborts": m.get("minisgl_engine_requests_aborted_total"),
        }

    def wait_idle(self, timeout=60):
        end = time.time() + timeout
        m = {}
        while time.time() < end:
            m = self.metrics()
            if all(m.get(k, -1) == 0 for k in (
                    "minisgl_kv_pages_used", "minisgl_running_requests",
                    "minisgl_queue_length", "minisgl_requests_in_flight")):
                return True, m
            time.sleep(0.25)
        return False, m


def check(report, args):
    """The findings that make the exit status 1."""
    problems = []
    if report["valid_lost"]:
        problems.append(f"{report['valid_lost']} valid requests lost")
    if report["contract_broken"]:
        problems.append(f"{report['contract_broken']} answers broke the contract")
    if not report["idle"]:
        problems.append("the server did not go idle")
    if report["kv_pages_used_by_requests"] != 0:
        problems.append(f"{report['kv_pages_used_by_requests']} KV pages still held by requests")
    ev, cached = report["kv_pages_evictable"], report["kv_pages_cached"]
    if ev is not None and ev != cached:
        problems.append(f"only {ev} of {cached} cached pages are evictable")
    s = report["slow_connections"]
    if s and s["closed"] != s["opened"]:
        problems.append(f"{s['opened'] - s['closed']} slow connections still open after {args.slow_wait} s")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="server base URL (loopback only)")
    p.add_argument("--model", help="model name (default: the one /v1/models lists)")
    p.add_argument("--requests", type=int, default=300, help="requests in the mix (max 5000)")
    p.add_argument("--duration", type=float, default=120, help="stop submitting after this many seconds")
    p.add_argument("--workers", type=int, default=8, help="concurrent requests (max 64)")
    p.add_argument("--slow", type=int, default=40, help="stalled connections to hold (max 500)")
    p.add_argument("--slow-wait", type=float, default=40, help="seconds to wait for the server to close them")
    p.add_argument("--swap-plugins", help="folder of built plugins: also run hostile hot swaps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the report here")
    args = p.parse_args()
    host = urllib.parse.urlparse(args.url).hostname or ""
    try:
        loop = all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        loop = False
    if not loop:
        sys.exit(f"storm: {args.url} is not a loopback address; this tool only attacks local servers")
    if not (0 < args.requests <= 5000 and 0 < args.workers <= 64 and 0 <= args.slow <= 500
            and 0 < args.duration <= 3600):
        sys.exit("storm: --requests 1..5000, --workers 1..64, --slow 0..500, --duration up to 3600 s")
    report = Storm(args).run()
    problems = check(report, args)
    report["problems"] = problems
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print("storm: " + ("FAILED: " + "; ".join(problems) if problems else "OK"), file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
