"""Graceful shutdown, the terminal shell, config precedence and the online
load generator, all on the real binary."""

import json
import signal
import subprocess
import threading
import time

import openai

from conftest import BIN, MODEL, MODEL_NAME, Server, PACE


def test_sigterm_finishes_in_flight_requests_and_exits_0():
    srv = Server()
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    stream = client.completions.create(
        model=MODEL_NAME, prompt="long", max_tokens=400, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = [next(stream)]
    srv.proc.send_signal(signal.SIGTERM)
    # Draining: the server stops taking new requests...
    time.sleep(0.2)
    try:
        status, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=10)
        assert status == 503
    except OSError:
        pass  # or the listener is already closed
    # ...while the request in flight runs to its end.
    chunks += list(stream)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"], finish
    assert chunks[-1].usage.completion_tokens == 400
    assert srv.proc.wait(60) == 0, "".join(srv.log)


def test_sigterm_aborts_after_the_grace_period():
    srv = Server("--shutdown-timeout-s", "1", "--max-running", "1", "--scheduler", PACE)
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    # Many long requests on a tiny batch: they cannot finish within 1 s.
    streams = [client.completions.create(
        model=MODEL_NAME, prompt=f"p{i}", max_tokens=500 - 8, stream=True,
        extra_body={"ignore_eos": True}) for i in range(16)]
    next(streams[0])
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    finishes = []
    for st in streams:
        try:
            for c in st:
                if c.choices and c.choices[0].finish_reason:
                    finishes.append(c.choices[0].finish_reason)
        except openai.APIError:
            finishes.append("cut")
    assert srv.proc.wait(60) == 0, "".join(srv.log)
    assert time.time() - t0 < 30
    assert len(finishes) == 16
    assert "abort" in finishes, finishes


def test_sigint_exits_0():
    srv = Server()
    assert srv.get("/health")[0] == 200
    assert srv.stop(signal.SIGINT) == 0


def test_shell_over_a_pipe(server, client):
    proc = subprocess.run(
        [str(BIN), "shell", "--model", str(MODEL), "--kv-memory-mb", "8",
         "--temperature", "0", "--max-tokens", "8"],
        input="Hello!\n/reset\nHello!\n/exit\n", capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(conversation cleared)" in out
    # The same greedy reply as the server gives for the same conversation.
    r = client.chat.completions.create(model=MODEL_NAME, max_tokens=8, temperature=0,
                                       messages=[{"role": "user", "content": "Hello!"}])
    reply = r.choices[0].message.content
    replies = [part.split("\n")[0] for part in out.split("> ")[1:]]
    assert replies[0] == reply, (replies, reply)
    assert reply in replies[2], "after /reset the same question gets the same answer"


def test_config_precedence(tmp_path):
    cfg = tmp_path / "minisgl.toml"
    cfg.write_text('port = 9101\nmax_running = 5\nmax_waiting = 7\n')
    env = {"MINISGL_PORT": "9100", "MINISGL_MAX_WAITING": "3", "MINISGL_CHUNK_SIZE": "64",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [str(BIN), "--config", str(cfg), "--max-running", "9", "--print-config"],
        capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)
    assert c["port"] == 9101  # file over env
    assert c["max_waiting"] == 7  # file over env
    assert c["max_prefill_tokens"] == 64  # env over default, through the old spelling
    assert "`MINISGL_CHUNK_SIZE` is deprecated; use `MINISGL_MAX_PREFILL_TOKENS`" in out.stderr
    assert c["max_running"] == 9  # flag over file
    assert c["host"] == "127.0.0.1"
    bad = subprocess.run([str(BIN), "--config", str(cfg), "--page-size", "12", "--print-config"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "page_size" in bad.stderr and "12" in bad.stderr
    old = subprocess.run([str(BIN), "--config", str(cfg), "--chunk-size", "32", "--shutdown-timeout", "5",
                          "--print-config"], capture_output=True, text=True, timeout=60)
    assert old.returncode == 0, old.stderr
    c = json.loads(old.stdout)
    assert c["max_prefill_tokens"] == 32 and c["shutdown_timeout_s"] == 5
    assert "`--chunk-size` is deprecated; use `--max-prefill-tokens`" in old.stderr
    assert "`--shutdown-timeout` is deprecated; use `--shutdown-timeout-s`" in old.stderr
    cfg.write_text("prot = 1\n")
    bad = subprocess.run([str(BIN), "--config", str(cfg), "--print-config"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "prot" in bad.stderr


def test_bench_online(server, tmp_path):
    out = subprocess.run(
        [str(BIN), "bench", "online", "--url", server.base, "--rate", "20",
         "--num-requests", "8", "--input-len", "8:32", "--output-len", "4:8", "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["completed"] == 8 and r["failed"] == 0, r
    assert r["total_output_tokens"] >= 32
    assert 0 < r["ttft"]["p50_ms"] <= r["ttft"]["p99_ms"]
    assert r["tpot"]["p50_ms"] > 0 and r["output_token_throughput"] > 0
    # A Mooncake-format trace: arrival times, lengths and shared prefixes.
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": i * 50, "input_length": 1024, "output_length": 100,
                    "hash_ids": [0, i + 1]}) + "\n" for i in range(6)))
    out = subprocess.run(
        [str(BIN), "bench", "online", "--url", server.base, "--trace", str(trace),
         "--length-scale", "0.05", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["completed"] == 6 and r["total_output_tokens"] == 6 * 5, r
