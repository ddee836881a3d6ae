"""Incremental parsing of generated text into content, reasoning (`<think>…</think>`) and tool calls.
A `<tool_call>…</tool_call>` body is either Hermes JSON (`{"name": …, "arguments": {…}}`) or the XML
form of Qwen3-Coder and Qwen3.5 (`<function=NAME>` holding `<parameter=KEY>value</parameter>` blocks,
values converted by the request's JSON-Schema types); both become the same ParsedToolCall.

Text that might be the start of a tag is held until the next chunk decides it, so no tag fragment is
ever emitted as content. A tool call whose body is neither form is passed through as content, never
dropped.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

TAGS = {"<think>": "reasoning", "</think>": "content", "<tool_call>": "tool", "</tool_call>": "content"}
_ENDS = {"content": ("<think>", "<tool_call>"), "reasoning": ("</think>",), "tool": ("</tool_call>",)}
_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*)</function>", re.S)
_XML_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


@dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # JSON text of the arguments object


def new_tool_call_id(prefix: str = "call_") -> str:
    return prefix + uuid.uuid4().hex[:24]


def parse_tool_call(body: str, id_prefix: str = "call_",
                    schemas: Mapping[str, dict] | None = None) -> ParsedToolCall | None:
    """A stripped `<tool_call>` body -> the call, or None when it is neither well-formed JSON nor XML.
    `schemas` maps a tool name to its parameters schema; only the XML form needs it (its values are text)."""
    if body.startswith("<function="):
        return _parse_xml_tool_call(body, id_prefix, schemas or {})
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedToolCall(new_tool_call_id(id_prefix), data["name"], json.dumps(args))


def _parse_xml_tool_call(body: str, id_prefix: str, schemas: Mapping[str, dict]) -> ParsedToolCall | None:
    """Every character of the body must belong to the function or a parameter block: stray text or an
    unclosed parameter makes the call malformed rather than silently lost."""
    function = _XML_FUNCTION.fullmatch(body)
    if function is None or not function.group(1).strip():
        return None
    name, inner = function.group(1).strip(), function.group(2)
    schema = schemas.get(name)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    args: dict = {}
    position = 0
    while inner[position:].strip():
        parameter = _XML_PARAMETER.match(inner, position)
        # a value holding "<parameter=" is an unclosed parameter swallowed by the next one
        if parameter is None or "<parameter=" in parameter.group(2):
            return None
        key = parameter.group(1).strip()
        value_schema = properties.get(key) if isinstance(properties, dict) else None
        args[key] = _convert(parameter.group(2), value_schema)
        position = parameter.end()
    return ParsedToolCall(new_tool_call_id(id_prefix), name, json.dumps(args))


def _convert(value: str, schema: dict | None):
    """A string-typed parameter keeps its text ("007" stays "007"); any other type, or no schema, is
    read as JSON, and text that is not JSON stays a string."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


class OutputParser:
    """feed(text) / finish() -> events: ("content", str) | ("reasoning", str) | ("tool_call", ParsedToolCall)."""

    def __init__(self, parse_tools: bool, starts_in_reasoning: bool = False, id_prefix: str = "call_",
                 schemas: Mapping[str, dict] | None = None) -> None:
        self.parse_tools, self.id_prefix, self.schemas = parse_tools, id_prefix, schemas
        self.state = "reasoning" if starts_in_reasoning else "content"
        self._buffer = ""
        self._tool_body = ""

    def _ends(self) -> tuple[str, ...]:
        tags = _ENDS[self.state]
        return tuple(t for t in tags if self.parse_tools or t != "<tool_call>")

    def feed(self, text: str) -> list[tuple]:
        self._buffer += text
        events: list[tuple] = []
        while True:
            hits = [(self._buffer.find(t), t) for t in self._ends()]
            hits = [(i, t) for i, t in hits if i >= 0]
            if not hits:
                break
            index, tag = min(hits)
            self._emit(self._buffer[:index], events)
            self._buffer = self._buffer[index + len(tag):]
            self._switch(tag, events)
        keep = _partial_tag_len(self._buffer, self._ends())
        self._emit(self._buffer[:len(self._buffer) - keep], events)
        self._buffer = self._buffer[len(self._buffer) - keep:]
        return events

    def finish(self) -> list[tuple]:
        events: list[tuple] = []
        self._emit(self._buffer, events)
        self._buffer = ""
        if self.state == "tool":  # an unclosed call: give back the text as it was
            events.append(("content", "<tool_call>" + self._tool_body))
            self._tool_body, self.state = "", "content"
        return events

    def _emit(self, text: str, events: list[tuple]) -> None:
        if not text:
            return
        if self.state == "tool":
            self._tool_body += text
        else:
            events.append((self.state, text))

    def _switch(self, tag: str, events: list[tuple]) -> None:
        if tag == "</tool_call>":
            call = parse_tool_call(self._tool_body.strip(), self.id_prefix, self.schemas)
            events.append(("tool_call", call) if call else ("content", f"<tool_call>{self._tool_body}</tool_call>"))
            self._tool_body = ""
        self.state = TAGS[tag]


def _partial_tag_len(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `tags`."""
    best = 0
    for tag in tags:
        for k in range(min(len(tag) - 1, len(text)), best, -1):
            if text.endswith(tag[:k]):
                best = k
                break
    return best


def parse_all(text: str, parse_tools: bool, starts_in_reasoning: bool = False, id_prefix: str = "call_",
              schemas: Mapping[str, dict] | None = None) -> tuple[str, str, list[ParsedToolCall]]:
    """Whole output -> (content, reasoning, tool calls), for non-streaming responses."""
    parser = OutputParser(parse_tools, starts_in_reasoning, id_prefix, schemas)
    events = parser.feed(text) + parser.finish()
    content = "".join(e[1] for e in events if e[0] == "content")
    reasoning = "".join(e[1] for e in events if e[0] == "reasoning")
    calls = [e[1] for e in events if e[0] == "tool_call"]
    return (content.strip() if calls else content), reasoning.strip(), calls
