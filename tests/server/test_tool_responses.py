"""Tool-call and thinking responses through the official clients, with a stand-in engine whose output
is a handcrafted Qwen-style answer (`<think>…</think>` then `<tool_call>{json}</tool_call>`, split
mid-tag across deltas): OpenAI `tool_calls` + `reasoning_content` (stream: name first, then arguments)
and Anthropic `thinking` + `tool_use` blocks (stream: input_json_delta)."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from live_server import API_KEY, MODEL

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def srv(tool_server):
    return tool_server


def test_openai_tool_calls(srv):
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=API_KEY, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.reasoning_content == "need the weather"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True))
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}
    assert "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks) == \
        "need the weather"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks).strip()
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_without_tools_keeps_the_text(srv):
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=API_KEY, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=ASK)
    assert reply.choices[0].message.tool_calls is None and "<tool_call>" in reply.choices[0].message.content


def test_anthropic_tool_use_and_thinking(srv):
    client = anthropic.Anthropic(base_url=srv.base_url, api_key=API_KEY, max_retries=0)
    tools = [{"name": "get_weather", "description": "Current weather", "input_schema": {"type": "object"}}]
    message = client.messages.create(model=MODEL, max_tokens=16, messages=ASK, tools=tools)
    assert [b.type for b in message.content] == ["thinking", "tool_use"] and message.stop_reason == "tool_use"
    assert message.content[0].thinking == "need the weather"
    assert message.content[1].name == "get_weather" and message.content[1].input == {"city": "Paris"}

    with client.messages.stream(model=MODEL, max_tokens=16, messages=ASK, tools=tools) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"] and final.stop_reason == "tool_use"
    assert final.content[1].input == {"city": "Paris"}
    assert any(e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events)
