#!/usr/bin/env python3
"""One attack at a time against a running loopback server, with counts.

    python3 scripts/storm_probe.py --url http://127.0.0.1:8000 ATTACK [...]

Attacks (each prints one JSON line of counts):
  half-head N WAIT     N connections send half a request head; how many has
                       the server closed after WAIT seconds, and is it still
                       answering?
  half-body N WAIT     the same with a complete head and half a body
  oversized N          N bodies of 12 MiB through urllib and raw sockets:
                       how many clients read the 413
  sse-wait N TOKENS    a streamed request queued behind N requests generating
                       TOKENS tokens each (start the server with
                       --max-running 1): SSE lines that are not `data:` JSON
  swap-paths N         N refused swaps with 100 kB paths: /metrics size
  swap-special         swaps to a FIFO and /dev/zero: status and seconds
  swap-file PATH       one swap to PATH: status, seconds, /metrics and
                       /admin/plugins sizes

Used for docs/results/reliability.md (before and after). Loopback only;
standard library only.
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--url":
        sys.exit(__doc__)
    url, attack, rest = args[1].rstrip("/"), args[2], args[3:]
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("storm_probe: loopback servers only")
    p = Probe(url, u.hostname, u.port or 80)
    fn = getattr(p, attack.replace("-", "_"), None)
    if fn is None:
        sys.exit(f"unknown attack {attack!r}\n{__doc__}")
    print(json.dumps({"attack": attack, "args": rest, **fn(*rest)}))


class Probe:
    def __init__(self, url, host, port):
        self.url, self.host, self.port = url, host, port

    def sock(self, timeout=30):
        return socket.create_connection((self.host, self.port), timeout=timeout)

    def http(self, method, path, body=None, timeout=30):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def healthy(self):
        try:
            return self.http("GET", "/health", timeout=5)[0] == 200
        except OSError:
            return False

    def _hold(self, n, wait, payload):
        socks, refused = [], 0
        for _ in range(int(n)):
            try:
                s = self.sock()
                s.sendall(payload)
                socks.append(s)
            except OSError:
                refused += 1
        healthy_during = self.healthy()
        end = time.time() + float(wait)
        closed = 0
        for s in socks:
            s.settimeout(max(0.05, end - time.time()))
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except ConnectionResetError:
                closed += 1
            except OSError:
                pass
        for s in socks:
            s.close()
        return {"opened": len(socks), "connect_failed": refused, "closed_by_server": closed,
                "healthy_during": healthy_during, "healthy_after": self.healthy()}

    def half_head(self, n="200", wait="15"):
        return self._hold(n, wait, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")

    def half_body(self, n="200", wait="15"):
        return self._hold(n, wait, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                   b"Content-Length: 1000\r\n\r\n{\"prompt\": \"a")

    def oversized(self, n="20"):
        body = b"{" + b" " * (12 << 20) + b"}"
        urllib_codes, raw_codes = [], []
        for _ in range(int(n)):
            try:
                urllib_codes.append(self.http("POST", "/v1/completions", body)[0])
            except OSError as e:
                urllib_codes.append(type(e).__name__)
            s = self.sock()
            data = b""
            try:
                s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
                          .encode() + body)
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    data += c
            except OSError as e:
                data = data or type(e).__name__.encode()
            s.close()
            raw_codes.append(data.split(b"\r\n", 1)[0].decode(errors="replace"))
        return {"urllib_read_413": urllib_codes.count(413), "urllib": urllib_codes[:5],
                "raw_read_413": sum(" 413 " in c for c in raw_codes), "raw": raw_codes[:3], "n": int(n)}

    def sse_wait(self, busy_requests="40", tokens="480"):
        model = json.loads(self.http("GET", "/v1/models")[1])["data"][0]["id"]
        busy = [threading.Thread(target=self.http, args=(
            "POST", "/v1/completions",
            {"model": model, "prompt": f"busy {i}", "max_tokens": int(tokens), "ignore_eos": True},
            600)) for i in range(int(busy_requests))]
        for t in busy:
            t.start()
        time.sleep(0.3)
        req = urllib.request.Request(
            self.url + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": model, "prompt": "wait", "max_tokens": 4, "stream": True}).encode())
        start, first, lines = time.time(), None, []
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                ln = raw.decode().rstrip("\r\n")
                if ln.startswith("data:") and first is None:
                    first = time.time() - start
                if ln:
                    lines.append(ln)
        for t in busy:
            t.join()
        bad = [ln for ln in lines if not ln.startswith("data: ")]
        return {"first_token_s": round(first or -1, 2), "lines": len(lines),
                "non_data_lines": len(bad), "examples": bad[:3]}

    def swap_paths(self, n="100"):
        for i in range(int(n)):
            self.http("POST", "/admin/plugins/scheduler", {"path": f"/nonexistent/{'p' * 100_000}{i}"})
        _, m = self.http("GET", "/metrics")
        return {"swaps": int(n), "metrics_bytes": len(m)}

    def swap_special(self):
        tmp = tempfile.mkdtemp()
        fifo = os.path.join(tmp, "fifo.wasm")
        os.mkfifo(fifo)
        out = {}
        for path in (fifo, "/dev/zero"):
            start = time.time()
            try:
                status, _ = self.http("POST", "/admin/plugins/scheduler", {"path": path}, timeout=10)
            except OSError as e:
                status = type(e).__name__
            out[os.path.basename(path)] = {"status": status, "seconds": round(time.time() - start, 2)}
        os.unlink(fifo)
        return out

    def swap_file(self, path):
        start = time.time()
        try:
            status, body = self.http("POST", "/admin/plugins/scheduler", {"path": path}, timeout=120)
        except OSError as e:
            status, body = type(e).__name__, b""
        took = time.time() - start
        _, m = self.http("GET", "/metrics")
        _, a = self.http("GET", "/admin/plugins")
        return {"status": status, "seconds": round(took, 2), "answer": body[:160].decode(errors="replace"),
                "metrics_bytes": len(m), "admin_bytes": len(a)}


if __name__ == "__main__":
    main()
