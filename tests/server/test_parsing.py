"""Output parsing on handcrafted model output (the tiny model does not call tools reliably): Hermes/
Qwen tool calls and <think> reasoning, whole and split at every character boundary; and the tool-unaware
template fallback that writes tools, calls and results as Hermes text."""

from __future__ import annotations

import json

import pytest

from strata.server.parsing import OutputParser, parse_all
from strata.server.template import ChatTemplate, ToolSpec

QWEN_OUTPUT = ('<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n'
               '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>\n<tool_call>\n'
               '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>')


def test_parse_all_tools_and_reasoning():
    content, reasoning, calls = parse_all(QWEN_OUTPUT, parse_tools=True)
    assert reasoning == "The user wants the weather."
    assert content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "C"}), ("get_time", {"tz": "Europe/Paris"})]
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_streamed_in_any_split_equals_whole(chunk):
    parser = OutputParser(parse_tools=True)
    events = []
    for i in range(0, len(QWEN_OUTPUT), chunk):
        events += parser.feed(QWEN_OUTPUT[i:i + chunk])
    events += parser.finish()
    content = "".join(v for k, v in events if k == "content")
    reasoning = "".join(v for k, v in events if k == "reasoning")
    assert "<" not in content.replace("<tool", "") and "think>" not in content + reasoning
    assert reasoning.strip() == "The user wants the weather." and content.strip() == "Let me check."
    assert [v.name for k, v in events if k == "tool_call"] == ["get_weather", "get_time"]


def test_bad_json_and_unclosed_calls_stay_content():
    content, _, calls = parse_all('<tool_call>{"name": oops}</tool_call> and <tool_call>{"name"', parse_tools=True)
    assert calls == [] and content == '<tool_call>{"name": oops}</tool_call> and <tool_call>{"name"'


def test_tools_off_leaves_tags_as_text_and_reasoning_from_the_prompt():
    content, _, calls = parse_all('<tool_call>{"name": "f", "arguments": {}}</tool_call>', parse_tools=False)
    assert calls == [] and content.startswith("<tool_call>")
    content, reasoning, _ = parse_all("hmm</think>Answer: 4", parse_tools=False, starts_in_reasoning=True)
    assert (reasoning, content) == ("hmm", "Answer: 4")


def test_prefix_of_a_tag_is_held_then_released():
    parser = OutputParser(parse_tools=True)
    assert parser.feed("a <tool") == [("content", "a ")]
    assert parser.feed("box>") == [("content", "<toolbox>")]


@pytest.fixture(scope="module")
def template():
    from strata.tokenizer import load_tokenizer

    return ChatTemplate(load_tokenizer("smollm2-135m"))


def test_tool_unaware_template_gets_hermes_text(template):
    assert not template.native_tools
    tools = [ToolSpec("get_weather", "Current weather", {"type": "object", "properties": {"city": {"type": "string"}}})]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "get_weather",
                                                                     "arguments": {"city": "Paris"}}]},
                {"role": "tool", "content": "18 C", "tool_call_id": "c1"}]
    ids = template.render(messages, tools).prompt_token_ids
    text = template.tokenizer.decode(ids)
    assert "<tools>" in text and '"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
