"""Anthropic Messages routes: /v1/messages (stream and not; text, thinking and tool_use blocks) and
/v1/messages/count_tokens. Streams follow the official event sequence: message_start, ping, per block
content_block_start / *_delta / content_block_stop, message_delta (stop_reason, usage), message_stop."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

from fastapi import APIRouter, Request as HTTPRequest

from strata.engine.client import EngineDeadError
from strata.server import limits, sse, structured_output
from strata.server.body import OffloadedBodyRoute
from strata.server.config import ServerConfig
from strata.server.errors import APIError, error_body
from strata.server.generation import Generation, ServerState, cache_hints, check_prompt, sampling_params
from strata.server.parsing import OutputParser, parse_all
from strata.server.protocol_anthropic import CountTokensRequest, MessagesRequest, TextBlock
from strata.server.routes_openai import state_of
from strata.server.template import Rendered, ToolSpec
from strata.server.thinking import Thinking, from_anthropic
from strata.types import Request

router = APIRouter(route_class=OffloadedBodyRoute)

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "abort": "end_turn"}


def _system_text(system: str | list[TextBlock] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    return "\n".join(block.text for block in system)


def normalize_messages(body: CountTokensRequest) -> list[dict]:
    out: list[dict] = []
    system = _system_text(body.system)
    if system:
        out.append({"role": "system", "content": system})
    for m in body.messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        text, calls = [], []
        for block in m.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append({"id": block.id, "name": block.name, "arguments": block.input})
            elif block.type == "tool_result":
                result = block.content if isinstance(block.content, str) or block.content is None \
                    else "".join(b.text for b in block.content)
                out.append({"role": "tool", "content": result or "", "tool_call_id": block.tool_use_id})
        if text or calls or m.role == "assistant":
            entry = {"role": m.role, "content": "".join(text)}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
    return out


def _render(state: ServerState, body: CountTokensRequest) -> tuple[Rendered, list[ToolSpec] | None, Thinking]:
    state.check_model(body.model)
    _check_limits(state.config, body)
    tools = None
    if body.tools and not (body.tool_choice and body.tool_choice.type == "none"):
        tools = [ToolSpec(t.name, t.description, t.input_schema) for t in body.tools]
    thinking = from_anthropic(body.thinking, state.template)
    return state.template.render(normalize_messages(body), tools, thinking.enable), tools, thinking


def _check_limits(config: ServerConfig, body: CountTokensRequest) -> None:
    """Sizes, Unicode and schemas, before anything is rendered (limits.py)."""
    limits.check_count(len(body.messages), config.max_messages, "messages", "--max-messages")
    limits.check_count(len(body.tools or ()), config.max_tools, "tools", "--max-tools")
    limits.check_stop(config, getattr(body, "stop_sequences", None), "stop_sequences")
    limits.check_text(config, _texts(body))
    for i, tool in enumerate(body.tools or ()):
        limits.check_schema(config, tool.input_schema, f"tools.{i}.input_schema")


def _texts(body: CountTokensRequest) -> Iterator[tuple[str, object]]:
    yield "system", _system_text(body.system)
    for i, m in enumerate(body.messages):
        if isinstance(m.content, str):
            yield f"messages.{i}.content", m.content
            continue
        for j, block in enumerate(m.content):
            yield f"messages.{i}.content.{j}", block.model_dump(exclude={"type"})
    for i, tool in enumerate(body.tools or ()):
        yield f"tools.{i}", tool.name + (tool.description or "")


def _usage(num_prompt: int, num_output: int, num_cached: int) -> dict:
    """Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens is the whole prompt."""
    return {"input_tokens": num_prompt - num_cached, "output_tokens": num_output,
            "cache_read_input_tokens": num_cached, "cache_creation_input_tokens": 0}


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    rendered, _, _ = await state.offload(_render, state, body)
    return {"input_tokens": len(rendered.prompt_token_ids)}


@router.post("/v1/messages")
async def messages(body: MessagesRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    rendered, tools, thinking = await state.offload(_render, state, body)
    if body.top_k is not None and body.top_k > state.vocab_size:
        raise APIError(400, f"top_k must be at most the vocabulary size {state.vocab_size}", "top_k")
    max_tokens = check_prompt(state, rendered.prompt_token_ids, body.max_tokens, "messages")
    choice = structured_output.anthropic_tool_choice(body.tool_choice, tools)
    parallel = not (body.tool_choice and body.tool_choice.disable_parallel_tool_use)
    constraint, param = structured_output.requested(body, tools, choice, parallel, rendered.starts_in_reasoning,
                                                    state.template.thinking is not None)
    await structured_output.check(state, constraint, param)
    params = sampling_params(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
                             max_tokens=max_tokens, stop=body.stop_sequences, structured_outputs=constraint,
                             thinking_budget=thinking.budget)
    request = Request(state.new_id("msg_"), rendered.prompt_token_ids, params, **cache_hints(body))
    gen = Generation(state, request)
    await gen.__aenter__()
    schemas = {t.name: t.parameters for t in tools or ()}  # the XML tool-call form's value types
    parser = OutputParser(tools is not None, rendered.starts_in_reasoning, "toolu_", schemas)
    if body.stream:
        return sse.sse_response(_stream(gen, state, parser))
    try:
        out = await gen.collect(http_request)
    finally:
        await gen.__aexit__()
    text, reasoning, calls = parse_all(out.text, tools is not None, rendered.starts_in_reasoning, "toolu_",
                                       schemas)
    content: list[dict] = []
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if text or not (calls or reasoning):
        content.append({"type": "text", "text": text})
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)} for c in calls]
    stop_reason = "tool_use" if calls and out.finish_reason == "stop" else _STOP_REASONS.get(out.finish_reason,
                                                                                              "end_turn")
    return {"id": request.request_id, "type": "message", "role": "assistant", "model": state.model_name,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": _usage(gen.num_prompt_tokens, len(out.token_ids), out.num_cached_tokens)}


class _Blocks:
    """Opens and closes content blocks as the parsed output switches between thinking, text and tools."""

    def __init__(self) -> None:
        self.index, self.open_type = -1, None

    def start(self, block: dict) -> list[str]:
        frames = self.stop()
        self.index += 1
        self.open_type = block["type"]
        return frames + [sse.event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                           "content_block": block})]

    def delta(self, delta: dict) -> str:
        return sse.event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def stop(self) -> list[str]:
        if self.open_type is None:
            return []
        frames = []
        if self.open_type == "thinking":
            frames.append(self.delta({"type": "signature_delta", "signature": ""}))
        self.open_type = None
        return frames + [sse.event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def frames_for(self, kind: str, value) -> list[str]:
        if kind == "reasoning":
            head = self.start({"type": "thinking", "thinking": "", "signature": ""}) \
                if self.open_type != "thinking" else []
            return head + [self.delta({"type": "thinking_delta", "thinking": value})]
        if kind == "content":
            if self.open_type != "text" and not value.strip() and self.index >= 0:
                return []  # whitespace between blocks
            head = self.start({"type": "text", "text": ""}) if self.open_type != "text" else []
            return head + [self.delta({"type": "text_delta", "text": value})]
        return self.start({"type": "tool_use", "id": value.id, "name": value.name, "input": {}}) + \
            [self.delta({"type": "input_json_delta", "partial_json": value.arguments})] + self.stop()


async def _stream(gen: Generation, state: ServerState, parser: OutputParser) -> AsyncIterator[str]:
    message = {"id": gen.request.request_id, "type": "message", "role": "assistant", "model": state.model_name,
               "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage(gen.num_prompt_tokens, 0, gen.num_cached_tokens)}
    blocks, num_tokens, num_tools = _Blocks(), 0, 0
    try:
        yield sse.event("message_start", {"type": "message_start", "message": message})
        yield sse.event("ping", {"type": "ping"})
        async for delta in gen.deltas():
            if delta is None:
                yield sse.KEEPALIVE
                continue
            num_tokens += len(delta.new_token_ids)
            for kind, value in parser.feed(delta.new_text) + (parser.finish() if delta.finished else []):
                num_tools += kind == "tool_call"
                for frame in blocks.frames_for(kind, value):
                    yield frame
            if delta.finished:
                if blocks.index < 0:
                    for frame in blocks.start({"type": "text", "text": ""}):
                        yield frame
                for frame in blocks.stop():
                    yield frame
                reason = delta.finish_reason.value
                stop_reason = "tool_use" if num_tools and reason == "stop" else _STOP_REASONS.get(reason, "end_turn")
                yield sse.event("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                                  "usage": _usage(gen.num_prompt_tokens, num_tokens,
                                                                  gen.num_cached_tokens)})
                yield sse.event("message_stop", {"type": "message_stop"})
    except EngineDeadError as e:
        yield sse.event("error", error_body("/v1/messages", 503, f"the engine failed mid-stream: {e}"))
    except APIError as e:
        yield sse.event("error", error_body("/v1/messages", e.status, e.message))
    finally:
        await gen.__aexit__()
