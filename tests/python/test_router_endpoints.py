"""The worker endpoints SGLang's and vLLM's routers (and Kubernetes) call:
server/model info, load, cache flush, tokenize/detokenize/render in vLLM's
format, vLLM-named metrics, readiness apart from liveness. Token ids are
checked against Hugging Face transformers' outputs for the fixture model
(reference/outputs.json), model facts against its config.json."""

import json
import re
import signal
import time
import urllib.request

import openai
import pytest

from conftest import MODEL, MODEL_NAME, PACE, PLUGINS, ROOT, Server, wait_idle

REF = json.loads((MODEL / "reference" / "outputs.json").read_text())
HF_CONFIG = json.loads((MODEL / "config.json").read_text())


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-running", "4")
    yield s
    assert s.stop() == 0, "".join(s.log[-50:])


def flush(srv, method="POST"):
    """`/flush_cache` answers plain text, as SGLang's does."""
    req = urllib.request.Request(srv.base + "/flush_cache", data=b"" if method == "POST" else None,
                                 method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode()


def get_json(srv, path):
    status, body = srv.get(path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def test_server_info_has_sglang_fields(srv):
    models = get_json(srv, "/v1/models")["data"][0]
    for path in ("/server_info", "/get_server_info"):
        info = get_json(srv, path)
        assert info["model_path"] == str(MODEL)
        assert info["served_model_name"] == MODEL_NAME
        assert info["page_size"] == 16
        assert info["context_length"] == models["max_model_len"]
        assert info["dp_size"] == 1 and info["tp_size"] == 1
        assert info["max_running_requests"] == 4
        assert info["max_total_num_tokens"] % 16 == 0 and info["max_total_num_tokens"] > 0
        assert re.fullmatch(r"\d+\.\d+\.\d+.*", info["version"])


def test_model_info_matches_config_json(srv):
    for path in ("/model_info", "/get_model_info"):
        info = get_json(srv, path)
        assert info["model_path"] == str(MODEL)
        assert info["tokenizer_path"] == str(MODEL)
        assert info["model_type"] == HF_CONFIG["model_type"]
        assert info["architectures"] == HF_CONFIG["architectures"]
        assert info["is_generation"] is True


def test_version_matches_the_crate(srv):
    cargo = (ROOT / "Cargo.toml").read_text()
    want = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M).group(1)
    assert get_json(srv, "/version") == {"version": want}


def test_tokenize_matches_transformers(srv):
    for case in REF["tokenizer"]:
        if not case["text"]:
            continue
        status, body = srv.post("/tokenize", {"model": MODEL_NAME, "prompt": case["text"]})
        assert status == 200, body
        assert body["tokens"] == case["ids"], case["text"]
        assert body["count"] == len(case["ids"])
        assert body["max_model_len"] == get_json(srv, "/v1/models")["data"][0]["max_model_len"]
        assert body["token_strs"] is None
        status, body = srv.post(
            "/tokenize", {"prompt": case["text"], "add_special_tokens": False})
        assert body["tokens"] == case["ids_no_special"]
        status, body = srv.post("/detokenize", {"tokens": case["ids_no_special"]})
        assert status == 200 and body == {"prompt": case["decoded"]}


def test_tokenize_chat_matches_transformers(srv):
    checked = 0
    for case in REF["chat"]:
        if "ids" not in case:
            continue
        status, body = srv.post("/tokenize", {
            "messages": case["messages"],
            "add_generation_prompt": case["add_generation_prompt"],
        })
        assert status == 200, body
        assert body["tokens"] == case["ids"], case
        checked += 1
    assert checked >= 2


def test_token_strs_and_errors(srv):
    status, body = srv.post("/tokenize", {"prompt": "Hello world", "return_token_strs": True})
    assert status == 200 and len(body["token_strs"]) == body["count"]
    status, body = srv.post("/tokenize", {"prompt": 42})
    assert status == 400 and body["error"]["param"] == "prompt" and "42" in body["error"]["message"]
    status, body = srv.post("/tokenize", {"model": "nope", "prompt": "x"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    status, body = srv.post("/detokenize", {"tokens": [1, 99999]})
    assert status == 400 and "99999" in body["error"]["message"]
    status, body = srv.post("/tokenize", {})
    assert status == 400 and body["error"]["param"] == "prompt"


def test_render_gives_the_ids_generation_uses(srv):
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=60)
    text = REF["tokenizer"][2]["text"]
    status, body = srv.post("/v1/completions/render", {
        "model": MODEL_NAME, "prompt": [text, "Hello world"], "max_tokens": 5,
        "temperature": 0})
    assert status == 200, body
    assert [r["token_ids"] for r in body] == [REF["tokenizer"][2]["ids"], REF["tokenizer"][1]["ids"]]
    assert all(r["sampling_params"]["max_tokens"] == 5 for r in body)
    assert all(r["request_id"].startswith("cmpl-") and r["model"] == MODEL_NAME for r in body)
    done = client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=1)
    assert done.usage.prompt_tokens == len(body[0]["token_ids"])

    msgs = [{"role": "user", "content": "Hello!"}]
    status, body = srv.post("/v1/chat/completions/render", {"model": MODEL_NAME, "messages": msgs})
    assert status == 200, body
    want = next(c["ids"] for c in REF["chat"] if c["messages"] == msgs and c["add_generation_prompt"])
    assert body["token_ids"] == want
    chat = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=1)
    assert chat.usage.prompt_tokens == len(want)

    status, body = srv.post("/v1/completions/render", {"model": "other", "prompt": "x"})
    assert status == 404
    status, body = srv.post("/v1/completions/render", {"prompt": "x", "max_tokens": 10**6})
    assert status == 400 and body["error"]["param"] == "max_tokens"


def vllm_metrics(srv):
    out = {}
    for key, v in srv.metrics().items():
        if key.startswith("vllm:") or key.startswith("minisgl_kv_cache_usage"):
            out[key.split("{")[0]] = (key, v)
    return out


def test_vllm_metrics_and_prefix_counters(srv):
    wait_idle(srv)
    before = vllm_metrics(srv)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:lora_requests_info",
                 "vllm:cache_config_info", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total", "minisgl_kv_cache_usage"):
        assert name in before, name
    assert f'model_name="{MODEL_NAME}"' in before["vllm:num_requests_running"][0]
    assert 'block_size="16"' in before["vllm:cache_config_info"][0]
    assert before["vllm:kv_cache_usage_perc"][1] == 0.0  # idle: nothing held
    prompt = list(range(10, 10 + 100))  # 6 full pages of 16
    for _ in range(2):
        status, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
        assert status == 200
    after = vllm_metrics(srv)
    queries = after["vllm:prefix_cache_queries_total"][1] - before["vllm:prefix_cache_queries_total"][1]
    hits = after["vllm:prefix_cache_hits_total"][1] - before["vllm:prefix_cache_hits_total"][1]
    assert queries == 200
    assert hits == 96  # the second request reuses the first one's 6 full pages


def test_load_usage_and_flush_keep_running_requests(srv):
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    wait_idle(srv)
    # Fill the cache with a finished request's prefix.
    warm = list(range(200, 264))
    srv.post("/v1/completions", {"prompt": warm, "max_tokens": 1})
    assert wait_idle(srv)["minisgl_kv_pages_cached"] > 0
    assert get_json(srv, "/get_load") == [
        {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]

    # A long request holds pages while the cache is flushed under it.
    stream = client.completions.create(
        model=MODEL_NAME, prompt=list(range(300, 348)), max_tokens=300, stream=True,
        extra_body={"ignore_eos": True})
    first = next(stream)
    load = get_json(srv, "/get_load")[0]
    assert load["num_reqs"] == 1 and load["num_tokens"] >= 48
    usage = vllm_metrics(srv)["vllm:kv_cache_usage_perc"][1]
    assert 0 < usage <= 1
    status, body = flush(srv)
    assert status == 200 and "pages freed" in body, body
    m = srv.metrics()
    assert m["minisgl_kv_pages_used"] > 0  # the running request's pages stay
    rest = list(stream)
    finishes = [c.choices[0].finish_reason for c in [first] + rest if c.choices[0].finish_reason]
    assert finishes == ["length"]
    # The flushed prefix is gone: the same prompt hits nothing now.
    wait_idle(srv)
    flush(srv)  # also drop what the long request left
    assert srv.metrics()["minisgl_kv_pages_cached"] == 0
    status, body = srv.post("/v1/completions", {"prompt": warm, "max_tokens": 1})
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    status, _ = flush(srv, "GET")  # SGLang accepts GET too
    assert status == 200


def test_health_generate_live_ready(srv):
    assert get_json(srv, "/health_generate") == {"status": "ok"}
    assert get_json(srv, "/live") == {"status": "alive"}
    assert get_json(srv, "/ready") == {"status": "ready"}
    assert get_json(srv, "/health/ready") == {"status": "ready"}


def test_not_ready_while_loading_and_draining():
    """Probes during the whole life of a server: alive throughout; ready only
    between loading (three Wasm plugins to compile) and draining."""
    # The pacing scheduler (FCFS at ~2 ms a step) keeps the 480-token stream
    # below alive for about a second: with plain FCFS the tiny model could
    # finish it, and the server exit, before the draining probe 50 ms after
    # SIGTERM (a connection refused in about 1 run of 3).
    plugins = [PACE] + [PLUGINS / f"minisgl_{n}.wasm" for n in ("lru_evictor", "default_sampler")]
    missing = [p for p in plugins if not p.exists()]
    assert not missing, f"build the plugins first (scripts/build-plugins.sh): {missing}"
    seen = {"loading": 0, "ready": 0, "draining": 0}
    srv = Server(*[a for p in plugins for a in ("--plugin", p)], wait_for="loading")
    try:
        # The server printed its address before loading: poll until serving.
        deadline = time.time() + 120
        while time.time() < deadline:
            status, body = srv.get("/ready")
            live, _ = srv.get("/live")
            assert live == 200
            state = json.loads(body)["status"]
            seen[state] += 1
            if state == "ready":
                break
            assert status == 503 and state == "loading"
            status, body = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
            if status != 200:  # 200: loading finished in between
                assert status == 503 and body["error"]["code"] == "loading", body
                seen["refused while loading"] = seen.get("refused while loading", 0) + 1
        assert seen["loading"] > 0 and seen["ready"] == 1, seen
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
        stream = client.completions.create(model=MODEL_NAME, prompt="long", max_tokens=480,
                                           stream=True, extra_body={"ignore_eos": True})
        next(stream)
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        status, body = srv.get("/ready")
        assert status == 503 and json.loads(body)["status"] == "draining"
        assert srv.get("/live")[0] == 200
        assert srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1})[0] == 503
        assert len([c for c in stream]) > 0
        assert srv.proc.wait(60) == 0
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
