"""The official `anthropic` client against the live server: messages (stream and not; the official
event sequence), count_tokens, usage, tool_use round trip, Anthropic-shaped errors."""

from __future__ import annotations

import anthropic
import pytest

from live_server import API_KEY, MODEL

HI = [{"role": "user", "content": "Tell me a long story about a dragon."}]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def test_messages_stream_equals_non_stream(client):
    message = client.messages.create(model=MODEL, messages=HI, max_tokens=5, extra_body={"temperature": 0})
    assert message.role == "assistant" and message.stop_reason == "max_tokens"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens == 5
    counted = client.messages.count_tokens(model=MODEL, messages=HI)
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == counted.input_tokens > 5

    with client.messages.stream(model=MODEL, messages=HI, max_tokens=5, extra_body={"temperature": 0}) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == message.content[0].text
    assert final.usage.output_tokens == 5 and final.stop_reason == "max_tokens"
    # the same conversation again: its full KV blocks are read from the prefix cache
    assert final.usage.cache_read_input_tokens >= 16
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == counted.input_tokens
    core = [e for e in events if e in ("message_start", "content_block_start", "content_block_stop",
                                       "message_delta", "message_stop")]
    assert core == ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]


def test_tool_use_round_trip_renders(client):
    tools = [{"name": "get_weather", "description": "Current weather", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    history = HI + [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"}]}]
    without = client.messages.count_tokens(model=MODEL, messages=HI).input_tokens
    with_tools = client.messages.count_tokens(model=MODEL, messages=HI, tools=tools).input_tokens
    round_trip = client.messages.count_tokens(model=MODEL, messages=history, tools=tools,
                                              system="Be brief.").input_tokens
    assert without + 50 < with_tools < round_trip  # generation with tools: test_tool_responses.py


def test_anthropic_error_shape(server):
    response = server.post("/v1/messages", {"model": MODEL, "messages": HI})  # max_tokens missing
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, messages=HI, max_tokens=2)
