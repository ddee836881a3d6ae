"""`n` parallel choices and streamed logprobs, with the official `openai` client against a live `strata serve`
(bundled model, CPU): n=3 gives three indexed choices, seeded and reproducible, whose prompt the engine
reads once (the others attach to its cached blocks); streamed choices and logprobs concatenate to the
non-streamed ones; n beyond --max-n is a 400 naming n."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from live_server import API_KEY, MODEL

BLOCK_SIZE = 16  # CacheConfig.block_size of the shared server
STORY = [{"role": "user", "content": "Write three short poems about the sea, the wind and the mountains."}]
FIXED_LENGTH = {"ignore_eos": True}   # every choice runs to max_tokens: token counts are exact


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def same_logprobs(streamed, expected) -> bool:
    """Equal tokens, bytes and order; logprob values to 1e-4: the second run of a prompt reads it from the prefix
    cache and may batch its choices differently, which moves float32 logits in their last bits."""
    if isinstance(expected, float):
        return streamed == pytest.approx(expected, rel=1e-4, abs=1e-5)
    if isinstance(expected, dict):
        return list(streamed) == list(expected) and all(same_logprobs(streamed[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        return len(streamed) == len(expected) and all(same_logprobs(a, b) for a, b in zip(streamed, expected))
    return streamed == expected


def engine_steps(server) -> dict:
    """The engine's step totals once it is idle (its status arrives with each step's deltas)."""
    for _ in range(100):
        snapshot = server.get("/v1/monitor").json()
        if snapshot["slots"]["running"] == 0 and snapshot["slots"]["waiting"] == 0:
            return snapshot["steps"]
        time.sleep(0.1)
    raise TimeoutError("the engine did not become idle")


def test_chat_n3_indexed_seeded_and_prompt_read_once(client, server):
    messages = [{"role": "user", "content": "Name the colours of a rainbow, one per line, in order please."}]
    num_prompt = server.post("/v1/messages/count_tokens", {"model": MODEL, "messages": messages}).json()["input_tokens"]
    assert num_prompt > 2 * BLOCK_SIZE
    max_tokens = 6
    before = engine_steps(server)
    reply = client.chat.completions.create(model=MODEL, messages=messages, n=3, max_tokens=max_tokens, temperature=1.0,
                                           seed=11, extra_body=FIXED_LENGTH)
    after = engine_steps(server)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" and c.message.content for c in reply.choices)
    assert reply.usage.prompt_tokens == num_prompt                 # the prompt counted once
    assert reply.usage.completion_tokens == 3 * max_tokens        # the choices' tokens summed
    assert reply.usage.total_tokens == num_prompt + 3 * max_tokens
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) > 1                                     # each choice has its own seed stream

    # the prompt was read once: choices 1 and 2 found its full blocks in the prefix cache and computed only
    # the last partial block (a match always leaves one prompt token to compute)
    # (choice 0 itself may find the template's leading blocks cached by an earlier test's request)
    shared = (num_prompt - 1) // BLOCK_SIZE * BLOCK_SIZE
    cached_first = reply.usage.prompt_tokens_details.cached_tokens
    assert after["prompt_tokens_reused"] - before["prompt_tokens_reused"] == 2 * shared + cached_first
    computed = after["num_scheduled_tokens"] - before["num_scheduled_tokens"]
    assert computed == num_prompt - cached_first + 2 * (num_prompt - shared) + 3 * (max_tokens - 1)

    again = client.chat.completions.create(model=MODEL, messages=messages, n=3, max_tokens=max_tokens,
                                           temperature=1.0, seed=11, extra_body=FIXED_LENGTH)
    assert [c.message.content for c in again.choices] == texts
    # choice 0 keeps the request's seed: it is the n=1 answer
    single = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, temperature=1.0,
                                            seed=11, extra_body=FIXED_LENGTH)
    assert single.choices[0].message.content == texts[0]


def test_n_with_greedy_gives_identical_choices(client):
    reply = client.completions.create(model=MODEL, prompt="The capital of France is", n=2, max_tokens=5,
                                      temperature=0, extra_body=FIXED_LENGTH)
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[0].text == reply.choices[1].text and reply.choices[0].text
    assert reply.usage.completion_tokens == 10


def test_streamed_n2_chat_interleaves_indexes_and_equals_non_streamed(client):
    kwargs = dict(model=MODEL, messages=STORY, n=2, max_tokens=12, temperature=0.9, seed=5, extra_body=FIXED_LENGTH)
    full = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    texts, finishes = ["", ""], [None, None]
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes[choice.index] = choice.finish_reason or finishes[choice.index]
    assert {choice.index for c in chunks for choice in c.choices} == {0, 1}
    assert texts == [c.message.content for c in full.choices]
    assert finishes == ["length", "length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_streamed_n2_completions_equal_non_streamed(client):
    kwargs = dict(model=MODEL, prompt="Once upon a time, in a small village,", n=2, max_tokens=10, temperature=0.8,
                  seed=3, extra_body=FIXED_LENGTH)
    full = client.completions.create(**kwargs)
    texts = ["", ""]
    for c in client.completions.create(**kwargs, stream=True):
        for choice in c.choices:
            texts[choice.index] += choice.text
    assert texts == [c.text for c in full.choices] and texts[0] != texts[1]


def test_streamed_chat_logprobs_equal_non_streamed(client):
    kwargs = dict(model=MODEL, messages=STORY, max_tokens=10, temperature=0.7, seed=9, logprobs=True, top_logprobs=3,
                  n=2, extra_body=FIXED_LENGTH)
    full = client.chat.completions.create(**kwargs)
    streamed = [[], []]
    for c in client.chat.completions.create(**kwargs, stream=True):
        for choice in c.choices:
            if choice.logprobs is not None:
                streamed[choice.index] += choice.logprobs.content
    for index, choice in enumerate(full.choices):
        expected = [entry.model_dump() for entry in choice.logprobs.content]
        assert len(expected) == 10 and all(len(e["top_logprobs"]) == 3 for e in expected)
        assert same_logprobs([entry.model_dump() for entry in streamed[index]], expected)
        assert "".join(e["token"] for e in expected) == choice.message.content


def test_streamed_completion_logprobs_equal_non_streamed(client):
    kwargs = dict(model=MODEL, prompt="The best way to learn a language is", max_tokens=8, temperature=0.7, seed=4,
                  logprobs=2, extra_body=FIXED_LENGTH)
    full = client.completions.create(**kwargs).choices[0].logprobs
    tokens, token_logprobs, top_logprobs, text_offset = [], [], [], []
    for c in client.completions.create(**kwargs, stream=True):
        for choice in c.choices:
            if choice.logprobs is not None:
                tokens += choice.logprobs.tokens
                token_logprobs += choice.logprobs.token_logprobs
                top_logprobs += choice.logprobs.top_logprobs
                text_offset += choice.logprobs.text_offset
    assert len(full.tokens) == 8
    assert (tokens, text_offset) == (full.tokens, full.text_offset)
    assert same_logprobs(token_logprobs, full.token_logprobs) and same_logprobs(top_logprobs, full.top_logprobs)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": STORY, "n": 9}),
    ("/v1/completions", {"prompt": "Hi", "n": 9, "stream": True}),
])
def test_n_beyond_the_limit_is_400_naming_n(server, path, body):
    before = server.status()["in_flight_requests"]
    response = server.post(path, {"model": MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "n" and "--max-n" in error["message"]
    assert server.status()["in_flight_requests"] == before


def test_closing_an_n3_stream_aborts_every_choice(server):
    """A client that leaves mid-stream frees all three choices' slots, those submitted after choice 0's first
    token included."""
    body = {"model": MODEL, "messages": STORY, "n": 3, "max_tokens": 400, "stream": True, "temperature": 1.0,
            "ignore_eos": True}
    indexes = set()
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, headers=server.headers,
                      timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {") and '"content":""' not in line:
                indexes.add(json.loads(line[6:])["choices"][0]["index"])
            if indexes == {0, 1, 2}:   # every choice is decoding
                break
    for _ in range(100):
        status = server.status()
        if status["in_flight_requests"] == 0 and status["slots"]["running"] == 0:
            break
        time.sleep(0.1)
    assert status["in_flight_requests"] == 0 and status["slots"]["running"] == 0, status
