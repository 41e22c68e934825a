"""The plugin contract as an operator and a client meet it: scheduling fields
on requests (priority, client identity, deadline) accepted or refused with a
400 naming the field; the built-in restored with DELETE; per-kind call-time
histograms and fixup causes on /metrics; `--plugin` compiling once through
the cache."""

import json
import re
import time
import urllib.request

import openai

from conftest import MODEL_NAME, PLUGINS, Server


def delete(srv, path):
    req = urllib.request.Request(srv.base + path, method="DELETE")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def test_scheduling_fields_reach_the_engine_or_are_refused(server, client):
    # Accepted through the official client: body fields and gateway headers.
    out = client.completions.create(
        model=MODEL_NAME, prompt="hello", max_tokens=2,
        user="alice", extra_body={"priority": 3, "deadline_ms": 5000},
        extra_headers={"x-client-id": "tenant-7", "x-deadline-ms": "2000"},
    )
    assert out.choices[0].finish_reason in ("length", "stop")
    out = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        user="bob", extra_body={"deadline_ms": 100},
    )
    assert out.choices[0].finish_reason in ("length", "stop")
    status, out = server.post("/generate", {"text": "hi", "user": "carol", "priority": -2,
                                            "deadline_ms": 50,
                                            "sampling_params": {"max_new_tokens": 2}})
    assert status == 200, out

    # Refused: a 400 whose param names the field and whose message echoes the value.
    bad_bodies = [
        ({"deadline_ms": "soon"}, "deadline_ms", '"soon"'),
        ({"deadline_ms": 0}, "deadline_ms", "0"),
        ({"deadline_ms": 90_000_000}, "deadline_ms", "90000000"),
        ({"user": 17}, "user", "17"),
        ({"priority": 2**40}, "priority", str(2**40)),
        ({"priority": "high"}, "priority", '"high"'),
    ]
    for extra, field, shown in bad_bodies:
        body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1, **extra}
        status, out = server.post("/v1/completions", body)
        assert status == 400, (extra, out)
        assert out["error"]["param"] == field, out
        assert shown in out["error"]["message"], out
    for headers, field, shown in [
        ({"x-deadline-ms": "tomorrow"}, "x-deadline-ms", "tomorrow"),
        ({"x-deadline-ms": "-4"}, "x-deadline-ms", "-4"),
    ]:
        status, out = server.post("/v1/completions",
                                  {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1},
                                  headers=headers)
        assert status == 400, (headers, out)
        assert out["error"]["param"] == field and shown in out["error"]["message"], out
    # Typed errors reach the official client as BadRequestError.
    try:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1,
                                  extra_body={"deadline_ms": -1})
        raise AssertionError("a negative deadline was accepted")
    except openai.BadRequestError as e:
        assert "deadline_ms" in str(e)


def test_metrics_histograms_and_fixup_causes(server, client):
    client.completions.create(model=MODEL_NAME, prompt="count me", max_tokens=3)
    m = server.metrics()
    for kind in ("scheduler", "evictor", "sampler"):
        assert f'minisgl_plugin_call_seconds_count{{kind="{kind}"}}' in m, sorted(m)
        assert f'minisgl_plugin_call_seconds_bucket{{kind="{kind}",le="+Inf"}}' in m
    assert m['minisgl_plugin_call_seconds_count{kind="scheduler"}'] > 0
    assert (m['minisgl_plugin_call_seconds_bucket{kind="scheduler",le="+Inf"}']
            == m['minisgl_plugin_call_seconds_count{kind="scheduler"}'])
    causes = {k for k in m if k.startswith("minisgl_engine_decision_fixups_total{")}
    assert {f'minisgl_engine_decision_fixups_total{{cause="{c}"}}'
            for c in ("idle", "stall", "pages", "invalid", "evictor", "sampler")} <= causes
    # The built-in policies never need a correction of any kind but `idle`.
    for c in ("stall", "pages", "invalid", "evictor", "sampler"):
        assert m[f'minisgl_engine_decision_fixups_total{{cause="{c}"}}'] == 0, m


def test_delete_restores_the_builtin_and_plugin_compiles_once(tmp_path):
    fcfs = PLUGINS / "minisgl_fcfs_scheduler.wasm"
    assert fcfs.exists(), f"{fcfs} missing: run scripts/build-plugins.sh"
    cache = tmp_path / "cache"
    srv = Server("--plugin", fcfs, "--plugin-cache-dir", cache, env={"RUST_LOG": "info"})
    try:
        # One compile, through the cache: exactly one artefact for this file.
        artefacts = list(cache.glob("*.cwasm"))
        assert len(artefacts) == 1, artefacts
        log = "".join(srv.log)
        # Given at start, it is "loaded" (not "swapped in" over the built-in), once.
        assert log.count("plugin loaded") == 1, log[-2000:]
        assert log.count("plugin swapped in") == 0, log[-2000:]

        status, listing = srv.get("/admin/plugins")
        slots = {p["kind"]: p for p in json.loads(listing)["plugins"]}
        assert slots["scheduler"]["source"]["type"] == "wasm"
        status, out = delete(srv, "/admin/plugins/scheduler")
        assert status == 200, out
        assert out["reset"]["kind"] == "scheduler" and out["reset"]["previous"], out
        status, listing = srv.get("/admin/plugins")
        slots = {p["kind"]: p for p in json.loads(listing)["plugins"]}
        assert slots["scheduler"]["source"]["type"] == "native", slots
        status, out = srv.post("/v1/completions", {"prompt": "after", "max_tokens": 2})
        assert status == 200, out
        status, out = delete(srv, "/admin/plugins/teleporter")
        assert status == 400 and out["error"]["param"] == "kind", out
    finally:
        assert srv.stop() == 0, "".join(srv.log[-40:])

    # A second start finds the compiled component in the cache.
    start = time.time()
    srv = Server("--plugin", fcfs, "--plugin-cache-dir", cache, env={"RUST_LOG": "info"})
    try:
        log = re.sub(r"\x1b\[[0-9;]*m", "", "".join(srv.log))
        assert "cached=true" in log, log[-2000:]
        status, out = srv.post("/v1/completions", {"prompt": "cached", "max_tokens": 2})
        assert status == 200, out
    finally:
        assert srv.stop() == 0
    assert time.time() - start < 120
