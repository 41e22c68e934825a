"""Hundreds of malformed or hostile requests: every one is answered with a
4xx (with an OpenAI-style error body) or, for connections the client cuts,
closed cleanly; afterwards the server is healthy and no KV page is held by a
request."""

import json
import random
import socket
import time

import pytest

from conftest import MODEL_NAME, Server, wait_idle, PACE


@pytest.fixture(scope="module")
def srv():
    # A small running batch keeps the long requests of the disconnect test
    # queued long enough to be cut while waiting as well as while running.
    s = Server("--max-waiting", "64", "--max-running", "4")
    yield s
    assert s.stop() == 0, "".join(s.log[-50:])


def raw_request(base, method, path, body=b"", headers=None, read=True, timeout=60):
    """Sends bytes over a socket; returns (status, body) or None if closed."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    hdrs = {"Host": f"{host}:{port}", "Content-Length": str(len(body)), "Connection": "close"}
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    sock.sendall(head.encode() + b"\r\n" + body)
    if not read:
        return sock
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    if not data:
        return None
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


VALID = {"model": MODEL_NAME, "prompt": "hello", "max_tokens": 4}
JUNK = ["x", [], {}, True, [[[]]], {"a": "b"}]
# Values each field must reject (`null` means absent, so it is not here).
INVALID = {
    "model": [5, "gpt-unknown", [], {}],
    "prompt": [5, True, {}, [], [[]], [1, -5], [10**9], [1.5], [[1], "x"], ["x", 5], "x" * 100000],
    "max_tokens": JUNK + [-1, 0, 10**9, 10**30, 1.5],
    "n": JUNK + [0, -1, 10**6, 2.5],
    "top_k": JUNK + [-2, 10**9],
    "logprobs": JUNK + [-1, 21, 10**20],
    "seed": JUNK + [10**30, -10**30, 0.5],
    "temperature": JUNK + [-0.1, 2.5, 1e308, -1e308],
    "top_p": JUNK + [0, -1, 1.5],
    "min_p": JUNK + [-0.1, 2],
    "presence_penalty": JUNK + [3, -3],
    "frequency_penalty": JUNK + [3, -3],
    "repetition_penalty": JUNK + [0, -1, 11],
    "ignore_eos": ["x", 1, [], {}],
    "stop": [5, [5], "", [""], ["a"] * 20, {}],
    "stop_token_ids": ["x", [10**9], [-1], [1.5], 5],
    "logit_bias": [[], "x", {"x": 1}, {"1": "x"}, {"1": 1000}, {"-3": 1}, {"99999": 1}],
    "stream_options": ["x", 5, {"include_usage": "yes"}],
    "best_of": [5],
}


def hostile_bodies(rng):
    """(path, body bytes, content-type) cases that must all be rejected."""
    cases = []
    for field, values in INVALID.items():
        for v in values:
            cases.append(("/v1/completions", {**VALID, field: v}))
    fields = sorted(INVALID)
    for _ in range(80):
        # Several bad fields at once, some streaming.
        body = dict(VALID, stream=rng.random() < 0.5)
        for f in rng.sample(fields, rng.randrange(1, 4)):
            body[f] = rng.choice(INVALID[f])
        cases.append((rng.choice(["/v1/completions", "/v1/chat/completions"]), body))
    # Garbage and broken JSON.
    for _ in range(40):
        n = rng.randrange(0, 200)
        cases.append(("/v1/completions", bytes(rng.randrange(256) for _ in range(n))))
    valid = json.dumps(VALID).encode()
    for cut in range(1, len(valid) - 1, 3):
        cases.append(("/v1/completions", valid[:cut]))
    cases += [
        ("/v1/completions", b"[" * 100000),
        ("/v1/completions", b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("/v1/completions", json.dumps([VALID]).encode()),
        ("/v1/completions", b"null"),
        ("/v1/completions", b'"just a string"'),
        ("/v1/completions", json.dumps({"prompt": "x" * 200000, "max_tokens": 4}).encode()),
        ("/v1/completions", json.dumps({"prompt": list(range(2000)), "max_tokens": 1}).encode()),
        ("/v1/completions", json.dumps({"prompt": [], "max_tokens": 1}).encode()),
        ("/v1/completions", json.dumps({"prompt": [[]], "max_tokens": 1}).encode()),
        ("/v1/completions", json.dumps({"prompt": "x", "n": 10**6}).encode()),
        ("/v1/completions", json.dumps({"prompt": ["x"] * 1000, "max_tokens": 1}).encode()),
        ("/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 2}'),
        ("/v1/chat/completions", json.dumps({"messages": []}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": "hi"}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user"}]}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": 5, "content": "x"}]}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}).encode()),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 999}).encode()),
        ("/generate", json.dumps({"text": "x", "input_ids": [1]}).encode()),
        ("/generate", json.dumps({"input_ids": "abc"}).encode()),
        ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 0}}).encode()),
        ("/generate", json.dumps({"text": "x", "sampling_params": []}).encode()),
        ("/admin/plugins/teleporter", json.dumps({"path": "/x.wasm"}).encode()),
        ("/admin/plugins/scheduler", json.dumps({"path": 5}).encode()),
        ("/admin/plugins/scheduler", json.dumps({"path": "/nonexistent/x.wasm"}).encode()),
        ("/nope", b"{}"),
    ]
    return cases


def test_hostile_requests(srv):
    rng = random.Random(1234)
    idle_before = wait_idle(srv)
    statuses = {}
    cases = hostile_bodies(rng)
    assert len(cases) >= 200
    for path, body in cases:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        res = raw_request(srv.base, "POST", path, data, {"Content-Type": "application/json"})
        assert res is not None, f"connection closed without an answer for {path} {data[:100]!r}"
        status, payload = res
        statuses[status] = statuses.get(status, 0) + 1
        assert 400 <= status < 500, (status, path, data[:200], payload[:300])
        err = json.loads(payload)["error"]
        assert err["message"] and err["type"], err
    # Wrong methods and unknown routes.
    for method, path in [("GET", "/v1/completions"), ("DELETE", "/v1/models"), ("PUT", "/generate"),
                         ("GET", "/v2/anything"), ("POST", "/health")]:
        status, payload = raw_request(srv.base, method, path)
        assert status in (404, 405), (method, path, status)
        assert "error" in json.loads(payload)
    # Body bigger than the limit.
    status, _ = raw_request(srv.base, "POST", "/v1/completions", b"x" * (9 << 20))
    assert status == 413
    # A declared body that never fully arrives, then a cut connection.
    s = raw_request(srv.base, "POST", "/v1/completions", b'{"prompt": "x"',
                    {"Content-Length": "1000"}, read=False)
    s.close()
    assert srv.get("/health")[0] == 200
    assert set(statuses) <= {400, 404, 413}, statuses
    after = wait_idle(srv)
    assert after["minisgl_kv_pages_used"] == idle_before["minisgl_kv_pages_used"]


def test_cut_streams_free_pages(srv):
    """Clients that disconnect mid-stream (and mid-wait) are aborted."""
    idle = wait_idle(srv)
    before = srv.metrics().get("minisgl_client_disconnects_total", 0)
    socks = []
    body = {"model": MODEL_NAME, "prompt": "once", "max_tokens": 500, "stream": True,
            "ignore_eos": True, "temperature": 0.7}
    for i in range(12):
        s = raw_request(srv.base, "POST", "/v1/completions", json.dumps(body).encode(),
                        {"Content-Type": "application/json"}, read=False)
        if i % 2 == 0:
            s.recv(512)  # read the first bytes of the stream, then hang up
        socks.append(s)
    time.sleep(0.1)
    for s in socks:
        s.close()
    # Non-streaming requests cut while generating are aborted too.
    s = raw_request(srv.base, "POST", "/v1/completions",
                    json.dumps({**body, "stream": False}).encode(),
                    {"Content-Type": "application/json"}, read=False)
    time.sleep(0.3)
    s.close()
    after = wait_idle(srv, timeout=60)
    assert after["minisgl_kv_pages_used"] == idle["minisgl_kv_pages_used"]
    # At least the 8 that could not start (running batch of 4) were cut.
    assert after["minisgl_client_disconnects_total"] - before >= 8
    assert srv.get("/health")[0] == 200
    # Still serving normally.
    status, out = srv.post("/v1/completions", {"prompt": "hi", "max_tokens": 3})
    assert status == 200 and out["usage"]["completion_tokens"] >= 1


def test_queue_bound_gives_429():
    s = Server("--max-waiting", "2", "--max-running", "1", "--scheduler", PACE)
    try:
        body = json.dumps({"model": MODEL_NAME, "prompt": "x", "max_tokens": 500,
                           "ignore_eos": True, "stream": True}).encode()
        socks = [raw_request(s.base, "POST", "/v1/completions", body,
                             {"Content-Type": "application/json"}, read=False) for _ in range(6)]
        # One runs, two wait; everything beyond that is refused.
        deadline = time.time() + 30
        status, payload = None, None
        while time.time() < deadline:
            status, payload = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2, "n": 4})
            if status == 429:
                break
            time.sleep(0.02)
        assert status == 429, payload
        assert "queue" in payload["error"]["message"]
        assert payload["error"]["type"] == "rate_limit_error"
        for k in socks:
            k.close()
        wait_idle(s)
    finally:
        assert s.stop() == 0
