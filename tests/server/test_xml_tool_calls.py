"""The XML tool-call form of Qwen3-Coder and Qwen3.5 (`<tool_call><function=NAME><parameter=KEY>
value</parameter></function></tool_call>`): parsed whole and streamed one character at a time into the
same calls as Hermes JSON, values typed by the request's schema, malformed calls kept as content; and
end to end through the official clients with a stand-in engine that answers in this form."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from live_server import API_KEY, MODEL, thread_server
from strata.server.parsing import OutputParser, parse_all

XML_OUTPUT = ("<think>\nweather, then time\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n"
              "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
              "<parameter=zip>\n75001\n</parameter>\n<parameter=note>\nline one\n\nline two\n</parameter>\n"
              "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nEurope/Paris\n"
              "</parameter>\n</function>\n</tool_call>")
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                   "zip": {"type": "string"}, "note": {"type": "string"}}}
SCHEMAS = {"get_weather": WEATHER_SCHEMA}
EXPECTED_CALLS = [("get_weather", {"city": "Paris", "days": 3, "zip": "75001", "note": "line one\n\nline two"}),
                  ("get_time", {"tz": "Europe/Paris"})]


def _calls(calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


def _stream(text: str, pieces: list[str], schemas=SCHEMAS) -> list[tuple]:
    parser = OutputParser(parse_tools=True, schemas=schemas)
    assert "".join(pieces) == text
    return [e for piece in pieces for e in parser.feed(piece)] + parser.finish()


def test_whole_output_gives_typed_calls_reasoning_and_content():
    content, reasoning, calls = parse_all(XML_OUTPUT, parse_tools=True, schemas=SCHEMAS)
    assert (content, reasoning) == ("Checking.", "weather, then time")
    assert _calls(calls) == EXPECTED_CALLS
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id


def test_one_character_chunks_equal_the_whole():
    events = _stream(XML_OUTPUT, list(XML_OUTPUT))
    assert "".join(v for k, v in events if k == "content").strip() == "Checking."
    assert "".join(v for k, v in events if k == "reasoning").strip() == "weather, then time"
    assert _calls(v for k, v in events if k == "tool_call") == EXPECTED_CALLS


def test_every_two_piece_split_equals_the_whole():
    for i in range(1, len(XML_OUTPUT)):
        events = _stream(XML_OUTPUT, [XML_OUTPUT[:i], XML_OUTPUT[i:]])
        assert _calls(v for k, v in events if k == "tool_call") == EXPECTED_CALLS, i
        assert "".join(v for k, v in events if k == "content").strip() == "Checking.", i


def _one_call(params: str, schemas=None) -> dict:
    text = f"<tool_call>\n<function=f>\n{params}</function>\n</tool_call>"
    content, _, calls = parse_all(text, parse_tools=True, schemas=schemas)
    assert content == "" and len(calls) == 1 and calls[0].name == "f"
    return json.loads(calls[0].arguments)


def _params(values: dict[str, str]) -> str:
    return "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())


RAW = {"s": "007", "i": "42", "n": "2.5", "b": "true", "o": '{"a": [1, 2]}', "a": "[1, \"x\"]", "z": "null",
       "bad_int": "forty-two", "bad_obj": "{not json", "free": "12", "word": "Paris"}


def test_values_converted_by_schema_type():
    types = {"s": "string", "i": "integer", "n": "number", "b": "boolean", "o": "object", "a": "array",
             "z": "null", "bad_int": "integer", "bad_obj": "object"}
    schemas = {"f": {"type": "object", "properties": {k: {"type": t} for k, t in types.items()}}}
    assert _one_call(_params(RAW), schemas) == {
        "s": "007", "i": 42, "n": 2.5, "b": True, "o": {"a": [1, 2]}, "a": [1, "x"], "z": None,
        "bad_int": "forty-two", "bad_obj": "{not json", "free": 12, "word": "Paris"}


def test_values_without_schema_are_json_when_they_parse():
    expected = {"s": "007", "i": 42, "n": 2.5, "b": True, "o": {"a": [1, 2]}, "a": [1, "x"],
                "z": None, "bad_int": "forty-two", "bad_obj": "{not json", "free": 12, "word": "Paris"}
    assert _one_call(_params(RAW)) == expected  # "007" is not JSON (leading zero), so it stays text
    assert _one_call(_params({"s": "12"})) == {"s": 12}
    assert _one_call(_params({"s": "12"}), {"f": {"type": "object", "properties": {"s": {"type": "string"}}}}) == \
        {"s": "12"}
    assert _one_call(_params({"s": "12"}), {"other_tool": {"properties": {"s": {"type": "string"}}}}) == {"s": 12}


def test_only_the_format_newlines_are_taken_from_a_value():
    assert _one_call("<parameter=v>\n\n  indented\n\n</parameter>\n") == {"v": "\n  indented\n"}
    assert _one_call("<parameter=v>same line</parameter>\n") == {"v": "same line"}
    assert _one_call("") == {}


@pytest.mark.parametrize("body", [
    "\n<fn=get_weather>\n<parameter=city>\nParis\n</parameter>\n</fn>\n",         # no <function=
    "\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n",           # unclosed parameter
    "\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</parameter>\n</function>\n",  # a unclosed, b closed
    "\n<function=f>\nsay hi\n<parameter=a>\n1\n</parameter>\n</function>\n",      # stray text
    "\n<function=f>\n<parameter=a>\n1\n</parameter>\n",                           # no </function>
    "\n<function=>\n</function>\n",                                               # no name
])
def test_malformed_xml_calls_stay_content(body):
    text = f"Before <tool_call>{body}</tool_call> after"
    content, _, calls = parse_all(text, parse_tools=True)
    assert calls == [] and content == text
    events = _stream(text, list(text))
    assert [k for k, _ in events if k == "tool_call"] == []
    assert "".join(v for k, v in events if k == "content") == text


def test_unclosed_xml_call_and_tools_off_stay_content():
    text = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n"
    assert parse_all(text, parse_tools=True) == (text, "", [])
    closed = text + "</tool_call>"
    assert parse_all(closed, parse_tools=False) == (closed, "", [])


def test_json_and_xml_calls_mix_in_one_output():
    text = ('<tool_call>\n{"name": "a", "arguments": {"x": "1"}}\n</tool_call>\n'
            "<tool_call>\n<function=b>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>")
    _, _, calls = parse_all(text, parse_tools=True, id_prefix="toolu_")
    assert _calls(calls) == [("a", {"x": "1"}), ("b", {"x": 1})]
    assert all(c.id.startswith("toolu_") for c in calls)


# ---- end to end: the stand-in engine answers in the XML form -------------------------------------

def run_xml_engine(config, conn, quiet=True):
    """The stand-in engine in "tool" mode, its answer swapped for XML_OUTPUT in 7-character pieces. This
    runs in the engine's own spawned process, so rebinding the module's answer reaches no other test."""
    import fake_engine

    fake_engine.TOOL_OUTPUT = [XML_OUTPUT[i:i + 7] for i in range(0, len(XML_OUTPUT), 7)]
    fake_engine.run_fake_engine(config, conn, quiet, mode="tool")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER_SCHEMA}},
         {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                           "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "Weather and time in Paris?"}]


@pytest.fixture(scope="module")
def xml_server():
    from strata.config import EngineConfig
    from strata.server.app import create_app
    from strata.server.config import ServerConfig

    app = create_app(EngineConfig(model=MODEL), ServerConfig(api_key=API_KEY), engine_target=run_xml_engine)
    with thread_server(app) as live:
        yield live


def test_openai_client_gets_xml_calls_as_tool_calls(xml_server):
    client = openai.OpenAI(base_url=xml_server.base_url + "/v1", api_key=API_KEY, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == EXPECTED_CALLS

    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True))
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    names = {tc.index: tc.function.name for tc in deltas if tc.function.name}
    arguments = {i: json.loads("".join(tc.function.arguments or "" for tc in deltas if tc.index == i)) for i in names}
    assert [(names[i], arguments[i]) for i in sorted(names)] == EXPECTED_CALLS
    assert "".join(c.choices[0].delta.content or "" for c in chunks).strip() == "Checking."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    plain = client.chat.completions.create(model=MODEL, messages=ASK)  # no tools: the text as generated
    assert plain.choices[0].message.tool_calls is None and "<function=get_weather>" in plain.choices[0].message.content


def test_anthropic_client_gets_xml_calls_as_tool_use(xml_server):
    client = anthropic.Anthropic(base_url=xml_server.base_url, api_key=API_KEY, max_retries=0)
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK, tools=tools) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == EXPECTED_CALLS
    assert final.stop_reason == "tool_use"
