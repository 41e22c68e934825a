"""The server driven by the official `openai` client: completions and chat,
streaming and not, stop strings and stop token ids, n > 1, logprobs, usage,
and greedy outputs equal to Hugging Face transformers' (reference/outputs.json)
and to the native /generate path. (Equality with the offline engine API is
tests/server_offline.rs.)"""

import openai
import pytest

from conftest import MODEL_NAME


def greedy_case(reference, which=-1):
    g = reference["greedy"][which]
    prompt = reference["prompts"][f"prompt.{g['prompt_index']}"]
    return prompt, g["new_tokens"]


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_greedy_matches_transformers(server, client, reference):
    for which in range(len(reference["greedy"])):
        prompt, expected = greedy_case(reference, which)
        # Native endpoint returns token ids: compare with HF's greedy tokens.
        status, out = server.post(
            "/generate",
            {
                "input_ids": prompt,
                "sampling_params": {
                    "max_new_tokens": len(expected),
                    "temperature": 0,
                    "ignore_eos": True,
                },
            },
        )
        assert status == 200, out
        assert out["output_ids"] == expected
        # The OpenAI path gives the same text for the same request.
        r = client.completions.create(
            model=MODEL_NAME,
            prompt=prompt,
            max_tokens=len(expected),
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        assert r.choices[0].text == out["text"]
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(prompt)
        assert r.usage.completion_tokens == len(expected)
        assert r.usage.total_tokens == len(prompt) + len(expected)


def test_text_prompt_and_streaming_agree(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=20, temperature=0,
              extra_body={"ignore_eos": True})
    whole = client.completions.create(**kw)
    text = whole.choices[0].text
    assert len(text) > 0
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    assert streamed == text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    usage = chunks[-1].usage
    assert usage.completion_tokens == 20
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def pick_stop(text):
    """A 3-character stop string whose first occurrence is past the start."""
    for i in range(3, len(text) - 3):
        s = text[i : i + 3]
        if s.strip() and text.find(s) == i:
            return s, i
    pytest.skip("no usable stop string in the greedy text")


def test_stop_strings(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=40, temperature=0,
              extra_body={"ignore_eos": True})
    text = client.completions.create(**kw).choices[0].text
    stop, at = pick_stop(text)
    r = client.completions.create(stop=[stop], **kw)
    assert r.choices[0].text == text[:at]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 40
    chunks = list(client.completions.create(stop=stop, stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text[:at]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stop_token_ids(server, client, reference):
    prompt, expected = greedy_case(reference)
    k = next(i for i in range(3, len(expected)) if expected[i] not in expected[:i])
    status, out = server.post(
        "/generate",
        {"input_ids": prompt, "sampling_params": {
            "max_new_tokens": len(expected), "temperature": 0, "ignore_eos": True,
            "stop_token_ids": [expected[k]]}},
    )
    assert status == 200, out
    assert out["output_ids"] == expected[:k]
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    r = client.completions.create(
        model=MODEL_NAME, prompt=prompt, max_tokens=len(expected), temperature=0,
        extra_body={"ignore_eos": True, "stop_token_ids": [expected[k]]},
    )
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == out["text"]
    # The stop token counts as generated but is not shown.
    assert r.usage.completion_tokens == k + 1


def test_n_choices_and_seed(client):
    kw = dict(model=MODEL_NAME, prompt="The crab", max_tokens=12, temperature=1.0, n=3, seed=7,
              extra_body={"ignore_eos": True})
    a = client.completions.create(**kw)
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    assert a.usage.completion_tokens == 36
    b = client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices], "same seed, same output"
    assert len({c.text for c in a.choices}) > 1, "choices should differ"
    chunks = list(client.completions.create(stream=True, **kw))
    texts = {}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
    assert [texts[i] for i in range(3)] == [c.text for c in a.choices]


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=8, temperature=0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    # Special tokens are listed in logprobs but skipped in the text.
    shown = [t for t in lp.tokens if not (t.startswith("<|") and t.endswith("|>"))]
    assert "".join(shown) == r.choices[0].text
    for chosen, tops in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0
        assert 1 <= len(tops) <= 3
        # Greedy: the chosen token is the most likely one.
        assert chosen >= max(tops.values()) - 1e-4


def test_chat(client, reference):
    # HF renders this conversation (with the generation prompt) to these ids.
    case = next(c for c in reference["chat"] if c.get("add_generation_prompt") and "ids" in c)
    r = client.chat.completions.create(model=MODEL_NAME, messages=case["messages"], max_tokens=10,
                                       temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == len(case["ids"])
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    text = r.choices[0].message.content
    stream = list(client.chat.completions.create(
        model=MODEL_NAME, messages=case["messages"], max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text
    assert stream[-1].usage.completion_tokens == 10


def test_chat_logprobs_and_n(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
        temperature=0.8, top_p=0.9, n=2, logprobs=True, top_logprobs=2, seed=1,
        frequency_penalty=0.5, presence_penalty=0.2,
        extra_body={"ignore_eos": True, "min_p": 0.01, "repetition_penalty": 1.1, "top_k": 50})
    assert len(r.choices) == 2
    for ch in r.choices:
        content = ch.logprobs.content
        assert len(content) == 5
        assert all(len(t.top_logprobs) <= 2 and t.logprob <= 0 for t in content)


def test_logit_bias_forces_token(server, client, reference):
    prompt, expected = greedy_case(reference)
    forced = next(t for t in range(100, 1024) if t not in expected[:4])
    status, out = server.post("/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "ignore_eos": True,
        "logit_bias": {str(forced): 100}}})
    assert status == 200, out
    assert out["output_ids"] == [forced] * 4
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=4, temperature=0,
                                  logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
    assert r.choices[0].text == out["text"]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_tokens=-1), "max_tokens"),
        (dict(max_tokens=10**9), "max_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(n=0), "n"),
        (dict(logit_bias={"99999": 1}), "logit_bias"),
        (dict(extra_body={"top_k": "many"}), "top_k"),
        (dict(prompt=[1, 2, 10**6]), "prompt"),
        (dict(prompt=list(range(1, 600))), "context"),
    ],
)
def test_bad_requests_are_400_and_name_the_field(client, kwargs, field):
    args = dict(model=MODEL_NAME, prompt="hi", max_tokens=4)
    args.update(kwargs)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**args)
    assert e.value.status_code == 400
    assert field in str(e.value.body)


def test_unknown_model_and_empty_messages(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-17", prompt="x", max_tokens=2)
    assert "gpt-17" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[], max_tokens=2)
    assert "messages" in e.value.body["message"]


def test_metrics_count_requests(server, client):
    client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=3, temperature=0)
    m = server.metrics()
    assert m['minisgl_http_responses_total{endpoint="completions",status="200"}'] >= 1
    assert m["minisgl_generation_tokens_total"] >= 3
    assert m["minisgl_time_to_first_token_seconds_count"] >= 1
    assert "minisgl_kv_pages_total" in m and m["minisgl_kv_pages_total"] > 0
    assert any(k.startswith("minisgl_plugin_calls_total") for k in m)
