"""The official `openai` client against a live `strata serve` (bundled model, CPU, engine child
process): models, chat (stream and not, same greedy text), completions, usage numbers, tools round
trip, and 400s that name the field without reaching the engine."""

from __future__ import annotations

import json

import openai
import pytest

from live_server import API_KEY, MODEL

HI = [{"role": "user", "content": "Tell me a long story about a dragon."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_stream_equals_non_stream_and_usage(client, server):
    full = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, temperature=0)
    choice = full.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert full.usage.completion_tokens == 5 and choice.finish_reason == "length"
    counted = server.post("/v1/messages/count_tokens", {"model": MODEL, "messages": HI}).json()["input_tokens"]
    assert full.usage.prompt_tokens == counted
    assert full.usage.total_tokens == full.usage.prompt_tokens + 5
    assert 0 <= full.usage.prompt_tokens_details.cached_tokens < full.usage.prompt_tokens

    chunks = list(client.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    # the same prompt again: its full KV blocks come from the prefix cache
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 16


def test_completions_stream_and_not(client):
    full = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert full.choices[0].text and full.usage.completion_tokens == 6
    streamed = list(client.completions.create(model=MODEL, prompt=[504, 3458, 282], max_tokens=3, temperature=0,
                                              stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in streamed if c.choices)
    assert streamed[-1].usage.prompt_tokens == 3 and streamed[-1].usage.completion_tokens == 3



def test_continuous_usage_stats_put_the_counts_so_far_on_every_chunk(client):
    """vLLM's stream_options.continuous_usage_stats: each chunk's usage counts the tokens so far (every choice's),
    rising to the last chunk's totals; without it only the last chunk has usage."""
    kwargs = dict(model=MODEL, messages=HI, max_tokens=6, temperature=0, n=2, stream=True)
    plain = list(client.chat.completions.create(**kwargs, stream_options={"include_usage": True}))
    assert all(c.usage is None for c in plain[:-1]) and plain[-1].usage.completion_tokens == 12
    chunks = list(client.chat.completions.create(**kwargs, stream_options={"include_usage": True,
                                                                          "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert counts == sorted(counts) and counts[0] < counts[-1] == 12
    assert {c.usage.prompt_tokens for c in chunks} == {plain[-1].usage.prompt_tokens}
    assert all(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens for c in chunks)
    assert chunks[-1].choices == [] and [c.choices[0].finish_reason for c in chunks[:-1]].count("length") == 2

    streamed = list(client.completions.create(model=MODEL, prompt=[504, 3458, 282], max_tokens=4, temperature=0,
                                              stream=True, stream_options={"include_usage": True,
                                                                           "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in streamed]
    assert counts == sorted(counts) and counts[-1] == 4 and {c.usage.prompt_tokens for c in streamed} == {3}

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_tools_round_trip_request_shape(client, server):
    """Tools in, an assistant tool call and the tool's answer back in: the server renders all of them (the
    tiny model cannot be relied on to call tools; the parser is tested on handcrafted output). The prompt
    equals the one the Anthropic route renders for the same conversation."""
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]
    reply = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=1, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    fn = TOOLS[0]["function"]
    anthropic_body = {"model": MODEL, "tools": [{"name": fn["name"], "description": fn["description"],
                                                  "input_schema": fn["parameters"]}],
                      "messages": [history[0],
                                   {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                                                      "name": "get_weather",
                                                                      "input": {"city": "Paris"}}]},
                                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                                 "content": "18 C and sunny"}]}]}
    count = server.post("/v1/messages/count_tokens", anthropic_body).json()["input_tokens"]
    plain = server.post("/v1/messages/count_tokens", {"model": MODEL, "messages": history[:1]}).json()["input_tokens"]
    assert reply.usage.prompt_tokens == count > plain + 50


@pytest.mark.parametrize("body, param", [
    ({"messages": HI, "max_tokens": 4000}, "max_tokens"),
    ({"messages": HI, "top_p": 7}, "top_p"),
    ({"messages": HI, "temperature": "hot"}, "temperature"),
    ({"messages": HI, "n": 9}, "n"),
    ({"messages": []}, "messages"),
    ({"messages": HI, "model": "gpt-4"}, "model"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": HI, "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
])
def test_bad_chat_requests_are_400_naming_the_field(server, body, param):
    before = server.status()["engine"]
    response = server.post("/v1/chat/completions", {"model": MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert server.status()["engine"] == before


def test_malformed_json_and_too_large_body(server):
    response = server.post("/v1/chat/completions", content=b'{"model": ', headers={**server.headers,
                                                                                  "content-type": "application/json"})
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (5 << 20)}]}
    assert server.post("/v1/chat/completions", big).status_code == 413


def test_prompt_beyond_context_is_400_not_truncated(server):
    response = server.post("/v1/completions", {"model": MODEL, "prompt": [504] * 2048, "max_tokens": 1})
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt"
    response = server.post("/v1/completions", {"model": MODEL, "prompt": [504] * 2000, "max_tokens": 100})
    assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"
