"""The Responses API's own pieces, apart from the HTTP route: input items -> chat messages (the same
dicts the chat template renders for /v1/chat/completions), parsed output -> output items together with
the stream events that build them, and the bounded in-memory store behind `previous_response_id`.

Invariant: a stored response keeps its conversation as items (earlier turns, its input, its output as a
client would send it back), so chaining by id and resending the items render the same prompt."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from strata.server.parsing import ParsedToolCall
from strata.server.protocol_responses import (ContentPart, FunctionCallItem, FunctionCallOutputItem, InputItem,
                                              MessageItem)

_ITEMS = TypeAdapter(list[InputItem])


# ---- input items -> messages ---------------------------------------------------------------------

def _text(content: str | list[ContentPart]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text if part.type != "refusal" else part.refusal for part in content)


def as_items(value: str | list[InputItem]) -> list[InputItem]:
    return [MessageItem(type="message", role="user", content=value)] if isinstance(value, str) else value


def output_as_items(output: list[dict]) -> list[InputItem]:
    """A response's output items as a client would send them back."""
    return _ITEMS.validate_python(output)


def input_messages(items: list[InputItem]) -> list[dict]:
    """Items in order; function calls join the assistant message before them, as one assistant turn."""
    out: list[dict] = []
    for item in items:
        if isinstance(item, MessageItem):
            out.append({"role": "system" if item.role == "developer" else item.role, "content": _text(item.content)})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments or "{}")}
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            out.append({"role": "tool", "content": _text(item.output), "tool_call_id": item.call_id})
    return out


def input_texts(items: list[InputItem]) -> Iterator[tuple[str, str]]:
    """(param, text) pairs of everything the items are made of, for limits.check_text."""
    for i, item in enumerate(items):
        if isinstance(item, MessageItem):
            yield f"input.{i}.content", _text(item.content)
        elif isinstance(item, FunctionCallItem):
            yield f"input.{i}", item.name + item.arguments
        elif isinstance(item, FunctionCallOutputItem):
            yield f"input.{i}.output", _text(item.output)


# ---- parsed output -> output items and stream events ---------------------------------------------

_TEXT_ITEM = {"content": ("message", "output_text", "response.output_text"),
              "reasoning": ("reasoning", "reasoning_text", "response.reasoning_text")}


class OutputItems:
    """feed(kind, value) / finish(status) -> stream events (without sequence numbers), for the parser's
    ("content" | "reasoning", text) and ("tool_call", ParsedToolCall) events. `items` is the output so
    far; the non-streaming route reads only that, so both routes give the same output."""

    def __init__(self, new_id: Callable[[str], str], parallel_tool_calls: bool = True) -> None:
        self.new_id, self.parallel_tool_calls = new_id, parallel_tool_calls
        self.items: list[dict] = []
        self._open: dict | None = None  # the message or reasoning item that text goes to

    @property
    def num_calls(self) -> int:
        return sum(item["type"] == "function_call" for item in self.items)

    def feed(self, kind: str, value) -> list[dict]:
        if kind == "tool_call":
            return self._call(value)
        item_type, part_type, event = _TEXT_ITEM[kind]
        if self._open is not None and self._open["type"] == item_type:
            events = []
        elif kind == "content" and not value.strip() and self.items:
            return []  # whitespace between a reasoning block or a call and what follows
        else:
            events = self._close("completed") + self._add(item_type, part_type)
        self._open["content"][0]["text"] += value
        delta = {"type": f"{event}.delta", **self._where(self._open), "content_index": 0, "delta": value}
        return events + [{**delta, "logprobs": []} if kind == "content" else delta]

    def finish(self, status: str) -> list[dict]:
        """`status`: "completed", or "incomplete" when the output ran out of tokens mid-item."""
        events = [] if self.items else self._add("message", "output_text")
        return events + self._close(status)

    def _where(self, item: dict) -> dict:
        return {"item_id": item["id"], "output_index": self.items.index(item)}

    def _add(self, item_type: str, part_type: str) -> list[dict]:
        if item_type == "message":
            item = {"id": self.new_id("msg_"), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}
            part = {"type": part_type, "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"id": self.new_id("rs_"), "type": "reasoning", "status": "in_progress", "summary": [],
                    "content": [], "encrypted_content": None}
            part = {"type": part_type, "text": ""}
        self.items.append(item)
        self._open = item
        added = {"type": "response.output_item.added", "output_index": len(self.items) - 1, "item": _copy(item)}
        item["content"].append(part)
        return [added, {"type": "response.content_part.added", **self._where(item), "content_index": 0,
                        "part": _copy(part)}]

    def _close(self, status: str) -> list[dict]:
        item, self._open = self._open, None
        if item is None:
            return []
        part, where = item["content"][0], self._where(item)
        event = _TEXT_ITEM["content" if item["type"] == "message" else "reasoning"][2]
        done = {"type": f"{event}.done", **where, "content_index": 0, "text": part["text"]}
        if item["type"] == "message":
            done["logprobs"] = []
        item["status"] = status
        return [done, {"type": "response.content_part.done", **where, "content_index": 0, "part": _copy(part)},
                {"type": "response.output_item.done", "output_index": where["output_index"], "item": _copy(item)}]

    def _call(self, call: ParsedToolCall) -> list[dict]:
        if self.num_calls and not self.parallel_tool_calls:
            return []  # parallel_tool_calls: false asks for at most one call
        events = self._close("completed")
        item = {"id": self.new_id("fc_"), "type": "function_call", "status": "in_progress", "call_id": call.id,
                "name": call.name, "arguments": ""}
        self.items.append(item)
        where = self._where(item)
        events.append({"type": "response.output_item.added", "output_index": where["output_index"],
                       "item": _copy(item)})
        item["arguments"], item["status"] = call.arguments, "completed"
        return events + [{"type": "response.function_call_arguments.delta", **where, "delta": call.arguments},
                         {"type": "response.function_call_arguments.done", **where, "arguments": call.arguments},
                         {"type": "response.output_item.done", "output_index": where["output_index"],
                          "item": _copy(item)}]


def _copy(obj: dict) -> dict:
    """Events carry a snapshot: the item goes on changing after its event is queued."""
    return json.loads(json.dumps(obj))


# ---- the store behind previous_response_id -------------------------------------------------------

@dataclass
class StoredResponse:
    response: dict        # the Response object, as GET /v1/responses/{id} returns it
    items: list[InputItem]  # the conversation through this response's output (instructions apart)
    expires_at: float = field(default=0.0)


class ResponseStore:
    """At most `max_stored` responses, each for `ttl_s` seconds; the oldest go first. Entries share the
    items of the responses they continue, so a long chain costs a list of references per turn."""

    def __init__(self, max_stored: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_stored, self.ttl_s, self.clock = max_stored, ttl_s, clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, response_id: str, response: dict, items: list[InputItem]) -> None:
        if self.max_stored <= 0:
            return
        self._expire()
        self._entries[response_id] = StoredResponse(response, items, self.clock() + self.ttl_s)
        while len(self._entries) > self.max_stored:
            self._entries.popitem(last=False)

    def try_get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        self._expire()
        return self._entries.pop(response_id, None) is not None

    def _expire(self) -> None:
        now = self.clock()
        while self._entries and next(iter(self._entries.values())).expires_at <= now:
            self._entries.popitem(last=False)
