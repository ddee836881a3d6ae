"""POST /v1/responses through the official `openai` client: against the live `strata serve` (bundled model,
greedy) for text, streaming and previous_response_id; against a stand-in engine whose answer is a
Qwen-style thinking block and tool call for reasoning items, function_call items and their stream
events; against a stand-in that says "Hi there" for bad input (400/404 naming the problem) and the
store's bound. The store's expiry is tested on its own with a fake clock."""

from __future__ import annotations

import json

from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from live_server import API_KEY, MODEL, fake_app, thread_server
from strata.server.parsing import ParsedToolCall
from strata.server.protocol_responses import ResponsesRequest
from strata.server.responses import OutputItems, ResponseStore
from strata.server.routes_responses import _constraint
from strata.server.template import Rendered

STORY = "Tell me a long story about a dragon."
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def _client(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def client(server):
    return _client(server)


@pytest.fixture(scope="module")
def tools_client(tool_server):
    return _client(tool_server)


@pytest.fixture(scope="module")
def echo_server():
    """Keeps at most two responses, so the store's bound is visible."""
    with thread_server(fake_app("echo", responses_max_stored=2)) as live:
        yield live


# ---- the live model ------------------------------------------------------------------------------

def test_text_output_usage_and_instructions(client, server):
    reply = client.responses.create(model=MODEL, input=STORY, instructions="Answer in one line.",
                                    max_output_tokens=5, temperature=0)
    assert reply.object == "response" and reply.model == MODEL and reply.id.startswith("resp_")
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    (message,) = reply.output
    assert message.type == "message" and message.role == "assistant" and message.status == "incomplete"
    assert reply.output_text and message.content[0].text == reply.output_text
    counted = server.post("/v1/messages/count_tokens", {"model": MODEL, "system": "Answer in one line.",
                                                        "messages": [{"role": "user", "content": STORY}]})
    assert reply.usage.input_tokens == counted.json()["input_tokens"]
    assert reply.usage.output_tokens == 5 and reply.usage.total_tokens == reply.usage.input_tokens + 5
    chat = client.chat.completions.create(model=MODEL, max_tokens=5, temperature=0,
                                          messages=[{"role": "system", "content": "Answer in one line."},
                                                    {"role": "user", "content": STORY}])
    assert chat.choices[0].message.content == reply.output_text  # the same engine path, the same greedy text


def test_stream_events_in_order(client):
    full = client.responses.create(model=MODEL, input=STORY, max_output_tokens=6, temperature=0)
    events = list(client.responses.create(model=MODEL, input=STORY, max_output_tokens=6, temperature=0,
                                          stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == events[-4].text == final.output_text == full.output_text
    assert final.usage.output_tokens == 6 and final.usage.input_tokens == full.usage.input_tokens
    assert {e.item_id for e in events[3:-2]} == {events[2].item.id} == {events[-2].item.id} == {final.output[0].id}


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model=MODEL, input="Hi!", instructions="Answer in one line.",
                                    max_output_tokens=4, temperature=0)
    chained = client.responses.create(model=MODEL, previous_response_id=first.id, input="And then?",
                                      max_output_tokens=4, temperature=0)
    history = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "And then?"}]
    resent = client.responses.create(model=MODEL, input=history, max_output_tokens=4, temperature=0)
    # instructions are not carried over from the previous response (OpenAI's rule)
    assert chained.usage.input_tokens == resent.usage.input_tokens
    assert chained.output_text == resent.output_text and chained.previous_response_id == first.id
    with_instructions = client.responses.create(model=MODEL, input=history, instructions="Answer in one line.",
                                                max_output_tokens=1, temperature=0)
    # (SmolLM2's template puts its own system prompt where none is given, so the counts differ either way)
    assert with_instructions.usage.input_tokens != chained.usage.input_tokens

    assert client.responses.retrieve(first.id).output_text == first.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match=first.id):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError, match="previous response") as err:
        client.responses.create(model=MODEL, previous_response_id=first.id, input="More?", max_output_tokens=1)
    assert err.value.body["param"] == "previous_response_id"


def test_function_call_items_render_like_chat_tool_calls(client):
    """The tiny model cannot be relied on to call a tool: send the call and its output as items; the prompt
    equals the chat route's for the same conversation."""
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "18 C and sunny"}]
    reply = client.responses.create(model=MODEL, input=items, tools=TOOLS, max_output_tokens=1, temperature=0)
    fn = {k: TOOLS[0][k] for k in ("name", "description", "parameters")}
    chat = client.chat.completions.create(
        model=MODEL, max_tokens=1, temperature=0, tools=[{"type": "function", "function": fn}],
        messages=[items[0], {"role": "assistant", "content": None,
                             "tool_calls": [{"id": "call_1", "type": "function",
                                             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}])
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.tools[0].name == "get_weather" and reply.tool_choice == "auto"


class Weather(BaseModel):
    city: Literal["Paris", "Rome", "Oslo"]
    days: int = Field(ge=1, le=7)


def test_text_format_json_schema_is_enforced(client):
    """The client's own structured-output helper: text.format json_schema (strict) from a pydantic model."""
    reply = client.responses.parse(model=MODEL, input="Weather in Paris for the next days?", text_format=Weather,
                                   max_output_tokens=64, temperature=0)
    assert reply.status == "completed" and isinstance(reply.output_parsed, Weather)
    assert reply.text.format.type == "json_schema" and reply.text.format.name == "Weather"


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_time"}])
def test_tool_choice_required_or_named_gives_a_valid_call(client, tool_choice):
    clock = {"name": "get_time", "description": "Time in a zone", "type": "function",
             "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                            "required": ["zone"], "additionalProperties": False}}
    reply = client.responses.create(model=MODEL, input="What now?", tools=[TOOLS[0], clock], tool_choice=tool_choice,
                                    parallel_tool_calls=False, max_output_tokens=96, temperature=0)
    calls = [item for item in reply.output if item.type == "function_call"]
    assert reply.status == "completed" and len(calls) == 1
    tool = {t["name"]: t for t in (TOOLS[0], clock)}[calls[0].name]
    jsonschema.validate(json.loads(calls[0].arguments), tool["parameters"])
    if isinstance(tool_choice, dict):
        assert calls[0].name == "get_time" and reply.tool_choice.name == "get_time"


# ---- a stand-in engine that thinks, then calls a tool --------------------------------------------

def test_reasoning_and_function_call_items(tools_client):
    reply = tools_client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    assert reply.status == "completed" and [item.type for item in reply.output] == ["reasoning", "function_call"]
    reasoning, call = reply.output
    assert reasoning.content[0].text == "need the weather" and reasoning.summary == []
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.status == "completed"
    assert 0 < reply.usage.output_tokens_details.reasoning_tokens <= reply.usage.output_tokens


def test_function_call_stream_events(tools_client):
    events = list(tools_client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS, stream=True))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    added, delta, done = events[8], events[9], events[10]
    assert added.item.type == "function_call" and added.item.arguments == "" and added.item.name == "get_weather"
    assert delta.item_id == done.item_id == added.item.id and delta.output_index == 1
    assert json.loads(delta.delta) == json.loads(done.arguments) == {"city": "Paris"}
    assert events[-1].response.output[1].arguments == done.arguments

    with tools_client.responses.stream(model=MODEL, input="Weather in Paris?", tools=TOOLS) as stream:
        reasoning = "".join(e.delta for e in stream if e.type == "response.reasoning_text.delta")
        final = stream.get_final_response()
    assert reasoning == final.output[0].content[0].text == "need the weather"
    assert final.output[1].name == "get_weather"


CODEX_LIKE = {  # the shape of a Codex CLI turn: store off, reasoning echoed back, a shell call and its output
    "instructions": "You are a coding agent.", "tool_choice": "auto", "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "0199a1b2-session",
    "tools": [{"type": "function", "name": "shell", "description": "Runs a shell command", "strict": False,
               "parameters": {"type": "object", "required": ["command"], "additionalProperties": False,
                              "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}],
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "run ls"}], "content": None,
         "encrypted_content": None},
        {"type": "function_call", "id": "fc_1", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py\nb.py"}]}


def test_a_codex_like_turn_streams_to_completion(tool_server):
    with httpx.stream("POST", tool_server.base_url + "/v1/responses", headers=tool_server.headers, timeout=60,
                      json={"model": MODEL, **CODEX_LIKE}) as reply:
        assert reply.status_code == 200
        frames = [line for line in reply.iter_lines() if line.startswith("event: ")]
    assert frames[0] == "event: response.created" and frames[-1] == "event: response.completed"
    assert "event: response.function_call_arguments.done" in frames


def test_tool_round_trip_by_previous_response_id(tools_client):
    """The call's output sent with previous_response_id renders the same prompt as the whole conversation
    resent as items (the output items echoed back, as the Agents SDK does) and as chat messages."""
    first = tools_client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    call = first.output[1]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"}
    chained = tools_client.responses.create(model=MODEL, previous_response_id=first.id, input=[result],
                                            tools=TOOLS)
    resent = tools_client.responses.create(model=MODEL, tools=TOOLS, input=[
        {"role": "user", "content": "Weather in Paris?"}, *[item.to_dict() for item in first.output], result])
    assert chained.usage.input_tokens == resent.usage.input_tokens > first.usage.input_tokens
    fn = {k: TOOLS[0][k] for k in ("name", "description", "parameters")}
    chat = tools_client.chat.completions.create(
        model=MODEL, tools=[{"type": "function", "function": fn}],
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None,
                   "tool_calls": [{"id": call.call_id, "type": "function",
                                   "function": {"name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": "18 C and sunny"}])
    assert chat.usage.prompt_tokens == chained.usage.input_tokens


# ---- bad input and the store ---------------------------------------------------------------------

@pytest.mark.parametrize("fields, param, words", [
    ({"background": True, "conversation": "c"}, "background", "does not support background, conversation"),
    ({"previous_response_id": "resp_unknown"}, "previous_response_id", "'resp_unknown' not found"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type", "'web_search' is not supported"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "needs name and schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}, "text.format.schema",
     "not a valid JSON Schema"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "'xml' is not supported"),
    ({"tools": TOOLS, "tool_choice": "required", "text": {"format": {"type": "json_object"}}}, "text.format",
     "each constrain the output"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.message.content.0.type", "'input_image' is not supported"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "input.0.function_call.arguments", "JSON text of an object"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "other"}}, "tool_choice.name", "'other'"),
    ({"model": "gpt-5"}, "model", "'gpt-5' is not served here"),
    ({"max_output_tokens": 5000}, "max_output_tokens", "exceeds the context"),
])
def test_bad_input_is_a_400_naming_the_field(echo_server, fields, param, words):
    reply = echo_server.post("/v1/responses", {"model": MODEL, "input": "Hi", **fields})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and words in error["message"]


def test_unknown_ids_are_404(echo_server):
    client = _client(echo_server)
    with pytest.raises(openai.NotFoundError, match="resp_nope"):
        client.responses.retrieve("resp_nope")
    error = echo_server.get("/v1/responses/resp_nope").json()["error"]
    assert error["type"] == "not_found_error" and error["code"] == 404
    deleted = httpx.delete(echo_server.base_url + "/v1/responses/resp_nope", headers=echo_server.headers)
    assert deleted.status_code == 404 and "resp_nope" in deleted.json()["error"]["message"]


def test_store_keeps_the_newest_and_honours_store_false(echo_server):
    client = _client(echo_server)
    ids = [client.responses.create(model=MODEL, input=f"Hi {i}").id for i in range(3)]
    assert [r.output_text for r in (client.responses.retrieve(i) for i in ids[1:])] == ["Hi there"] * 2
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])  # --responses-max-stored 2: the oldest went
    unstored = client.responses.create(model=MODEL, input="Hi", store=False)
    assert unstored.store is False and unstored.output_text == "Hi there"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError, match="store: false"):
        client.responses.create(model=MODEL, input="Hi", previous_response_id=unstored.id)


def test_engine_death_mid_stream_is_an_error_event_then_response_failed():
    with thread_server(fake_app("die")) as srv:
        events = list(_client(srv).responses.create(model=MODEL, input="Hi", stream=True))
    types = [e.type for e in events]
    assert types[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert types[-2:] == ["error", "response.failed"] and events[4].delta == "Hi"
    assert "the engine failed mid-stream" in events[-2].message
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert failed.output[0].content[0].text == "Hi"


def test_store_expiry_and_bound():
    now = [0.0]
    store = ResponseStore(max_stored=2, ttl_s=10.0, clock=lambda: now[0])
    store.put("a", {"id": "a"}, [])
    now[0] = 5.0
    store.put("b", {"id": "b"}, [])
    assert store.try_get("a").response == {"id": "a"}
    now[0] = 10.0
    assert store.try_get("a") is None and store.try_get("b") is not None
    store.put("c", {}, [])
    store.put("d", {}, [])
    assert store.try_get("b") is None and store.try_get("c") is not None  # two kept, oldest out
    assert store.delete("c") and not store.delete("c")
    ResponseStore(0, 10.0).put("x", {}, [])  # 0 keeps none


def test_text_format_behind_a_reasoning_block():
    """A template that opened <think>: the schema's constraint comes after the reasoning, as on chat."""
    schema = Weather.model_json_schema()
    body = ResponsesRequest(model=MODEL, input="Hi", text={"format": {"type": "json_schema", "name": "w",
                                                                      "schema": schema}})
    constraint, param = _constraint(body, None, Rendered([1], starts_in_reasoning=False))
    assert param == "text.format.schema" and constraint.json == schema
    constraint, param = _constraint(body, None, Rendered([1], starts_in_reasoning=True))
    assert param == "text.format.schema" and constraint.grammar.startswith("start: think")


def test_parallel_tool_calls_false_keeps_the_first_call():
    ids = iter(range(100))
    calls = [ParsedToolCall("call_a", "f", "{}"), ParsedToolCall("call_b", "g", "{}")]
    for parallel, expected in ((True, ["call_a", "call_b"]), (False, ["call_a"])):
        output = OutputItems(lambda prefix: f"{prefix}{next(ids)}", parallel)
        for call in calls:
            output.feed("tool_call", call)
        output.finish("completed")
        assert [item["call_id"] for item in output.items] == expected
