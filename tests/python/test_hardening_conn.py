"""Slow, idle and oversized connections against the real server (issue 17).

Each test is the attack itself, driven through raw sockets (and urllib where
a common client matters): half-sent heads and bodies, idle keep-alive
connections, a flood past the connection cap, bodies over the size limit.
Before the fix half-sent heads stayed open forever and clients saw a reset
instead of the 413.
"""

import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import Server

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 24
LIMIT = 8 << 20  # server::MAX_BODY_BYTES


@pytest.fixture(scope="module")
def srv():
    s = Server(
        env={
            "MINISGL_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "MINISGL_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
            "MINISGL_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        }
    )
    yield s
    assert s.stop() == 0, "".join(s.log[-40:])


def addr(srv):
    host, port = srv.base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def connect(srv, timeout=10):
    return socket.create_connection(addr(srv), timeout=timeout)


def closed_within(sock, seconds):
    """Reads until EOF or reset; returns (seconds until closed, bytes read),
    or (None, bytes) if the connection is still open after `seconds`."""
    start = time.time()
    data = b""
    sock.settimeout(0.1)
    while time.time() - start < seconds:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.time() - start, data
        if not chunk:
            return time.time() - start, data
        data += chunk
    return None, data


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def test_half_headers_are_closed_and_server_still_answers(srv):
    socks = []
    for _ in range(16):
        s = connect(srv)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
        socks.append(s)
    # While they hang, the server answers others.
    assert srv.get("/health")[0] == 200
    waits = [closed_within(s, HEADER_TIMEOUT_S + 3)[0] for s in socks]
    for s in socks:
        s.close()
    assert all(w is not None for w in waits), f"still open: {waits}"
    assert srv.get("/health")[0] == 200


def test_idle_keep_alive_connection_is_closed(srv):
    s = connect(srv)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.2)
    first = s.recv(65536)
    assert status_of(first) == 200, first
    waited, _ = closed_within(s, HEADER_TIMEOUT_S + 3)
    s.close()
    assert waited is not None, "an idle keep-alive connection was never closed"


def test_half_body_gets_408_and_is_closed(srv):
    s = connect(srv)
    s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{\"prompt\": \"hel"
    )
    waited, data = closed_within(s, BODY_TIMEOUT_S + 3)
    s.close()
    assert waited is not None, "a half-sent body held its connection open"
    assert status_of(data) == 408, data[:300]
    assert b"1000" in data, data  # the message says what arrived of what


def over_the_cap(srv):
    """Holds MAX_CONNECTIONS silent connections, then sends a request on one more;
    returns (its response, seconds from the first held connection to the response)."""
    held = []
    start = time.monotonic()
    try:
        for _ in range(MAX_CONNECTIONS):
            held.append(connect(srv))
        time.sleep(0.1)
        extra = connect(srv)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        _, data = closed_within(extra, 2)
        extra.close()
        return data, time.monotonic() - start
    finally:
        for s in held:
            s.close()


def test_connection_cap_refuses_with_503_and_logs(srv):
    # The held connections send nothing, so the server closes each one a header timeout
    # after accepting it. On a loaded machine (a clean-clone CI run, 2026-12-06) opening
    # them took long enough that the first had closed and the extra request got a 200.
    # Only an attempt that stayed inside half the timeout can tell that the cap failed.
    for _ in range(3):
        data, took = over_the_cap(srv)
        if status_of(data) == 503 or took < HEADER_TIMEOUT_S / 2:
            break
    assert status_of(data) == 503, (took, data)
    assert b"too many open connections" in data
    # The warning goes to stderr as the 503 goes out; the reader thread may take it
    # a moment later (a clean-clone CI run once asserted before it arrived).
    deadline = time.time() + 5
    while not any("connection cap reached" in line for line in srv.log) and time.time() < deadline:
        time.sleep(0.05)
    assert any("connection cap reached" in line for line in srv.log), "".join(srv.log[-20:])
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            if srv.get("/health", timeout=2)[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    else:
        raise AssertionError("server did not recover after the cap")


def oversized_raw(srv, size, expect_continue=False):
    s = connect(srv, timeout=20)
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n"
    )
    if expect_continue:
        head += "Expect: 100-continue\r\n"
    s.sendall(head.encode() + b"\r\n")
    if not expect_continue:
        chunk = b"x" * (1 << 20)
        sent = 0
        while sent < size:
            n = min(len(chunk), size - sent)
            s.sendall(chunk[:n])
            sent += n
    _, data = closed_within(s, 10)
    s.close()
    return data


def test_oversized_body_413_is_readable_over_raw_sockets(srv):
    for size in (LIMIT + 1, 20 << 20):
        data = oversized_raw(srv, size)
        assert status_of(data) == 413, (size, data[:200])
        assert b"connection: close" in data.lower()
        assert str(LIMIT).encode() in data


def test_oversized_body_with_expect_continue_is_refused_before_sending(srv):
    data = oversized_raw(srv, 20 << 20, expect_continue=True)
    assert status_of(data) == 413, data[:200]
    assert not data.startswith(b"HTTP/1.1 100"), data[:200]


def test_oversized_body_413_reaches_urllib(srv):
    body = b"{" + b" " * (12 << 20) + b"}"
    codes = []
    for _ in range(10):
        req = urllib.request.Request(
            srv.base + "/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                codes.append(r.status)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
            e.read()
        except OSError as e:
            codes.append(repr(e))
    assert codes == [413] * 10, codes
