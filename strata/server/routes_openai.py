"""OpenAI routes: /v1/chat/completions, /v1/completions, /v1/models. Bodies are validated (400) and
checked against the server's limits before they are rendered, then checked against the context
before anything reaches the engine."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

from fastapi import APIRouter, Request as HTTPRequest

from strata.engine.client import EngineDeadError
from strata.server import limits, sse, structured_output
from strata.server.config import ServerConfig
from strata.server.errors import APIError, error_body
from strata.server.generation import Generation, ServerState, check_prompt, sampling_params
from strata.server.logprobs import chat_logprobs, completion_logprobs
from strata.server.parsing import OutputParser, parse_all
from strata.server.protocol_openai import ChatCompletionRequest, ChatMessage, CompletionRequest, SamplingFields
from strata.server.template import ToolSpec
from strata.types import Request, StructuredOutputs

router = APIRouter()

_THINKING = {"none": False, "minimal": False, "low": True, "medium": True, "high": True}


def state_of(http_request: HTTPRequest) -> ServerState:
    return http_request.app.state.strata


def usage(num_prompt: int, num_completion: int, num_cached: int) -> dict:
    return {"prompt_tokens": num_prompt, "completion_tokens": num_completion,
            "total_tokens": num_prompt + num_completion, "prompt_tokens_details": {"cached_tokens": num_cached}}


def _params(body: SamplingFields, max_tokens: int, logprobs: int | None, vocab_size: int,
            constraint: StructuredOutputs | None = None):
    return sampling_params(n=body.n, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                           min_p=body.min_p, seed=body.seed, presence_penalty=body.presence_penalty,
                           frequency_penalty=body.frequency_penalty, repetition_penalty=body.repetition_penalty,
                           max_tokens=max_tokens, min_tokens=body.min_tokens, stop=body.stop,
                           stop_token_ids=body.stop_token_ids, ignore_eos=body.ignore_eos, logprobs=logprobs,
                           logit_bias=structured_output.logit_bias(body.logit_bias, vocab_size),
                           structured_outputs=constraint)


def _check_common(state: ServerState, body: SamplingFields) -> None:
    state.check_model(body.model)
    if body.n != 1:
        raise APIError(400, f"n must be 1 (got {body.n}): one completion per request", "n")
    if body.top_k is not None and body.top_k > state.vocab_size:
        raise APIError(400, f"top_k must be at most the vocabulary size {state.vocab_size}", "top_k")
    if body.stop_token_ids and any(not 0 <= t < state.vocab_size for t in body.stop_token_ids):
        raise APIError(400, f"stop_token_ids must be in [0, {state.vocab_size})", "stop_token_ids")


# ---- messages ------------------------------------------------------------------------------------

def _text(content) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(part.text for part in content)


def normalize_messages(messages: list[ChatMessage]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        role = "system" if m.role == "developer" else m.role
        entry = {"role": role, "content": _text(m.content)}
        if m.tool_calls:
            calls = []
            for j, call in enumerate(m.tool_calls):
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = None
                if not isinstance(arguments, dict):
                    raise APIError(400, "tool call arguments must be a JSON object",
                                   f"messages.{i}.tool_calls.{j}.function.arguments")
                calls.append({"id": call.id or f"call_{i}_{j}", "name": call.function.name, "arguments": arguments})
            entry["tool_calls"] = calls
        if m.tool_call_id:
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out


def _tools(body: ChatCompletionRequest) -> list[ToolSpec] | None:
    if not body.tools or body.tool_choice == "none":
        return None
    return [ToolSpec(t.function.name, t.function.description, t.function.parameters or {"type": "object"})
            for t in body.tools]


def _check_limits(config: ServerConfig, body: ChatCompletionRequest) -> None:
    """Sizes, Unicode and schemas, before anything is rendered (limits.py)."""
    limits.check_count(len(body.messages), config.max_messages, "messages", "--max-messages")
    limits.check_count(len(body.tools or ()), config.max_tools, "tools", "--max-tools")
    limits.check_stop(config, body.stop, "stop")
    limits.check_text(config, _texts(body))
    for i, tool in enumerate(body.tools or ()):
        if tool.function.parameters is not None:
            limits.check_schema(config, tool.function.parameters, f"tools.{i}.function.parameters")
    rf = body.response_format
    if rf is None or rf.type != "json_schema":
        return
    if rf.json_schema is None or not isinstance(rf.json_schema.schema_, dict):
        raise APIError(400, "response_format json_schema needs json_schema.name and json_schema.schema (an object)",
                       "response_format.json_schema")
    limits.check_schema(config, rf.json_schema.schema_, "response_format.json_schema.schema")


def _texts(body: ChatCompletionRequest) -> Iterator[tuple[str, object]]:
    for i, m in enumerate(body.messages):
        yield f"messages.{i}.content", _text(m.content)
        for j, call in enumerate(m.tool_calls or ()):
            yield f"messages.{i}.tool_calls.{j}.function", call.function.name + call.function.arguments
    for i, tool in enumerate(body.tools or ()):
        yield f"tools.{i}.function", tool.function.name + (tool.function.description or "")


# ---- /v1/chat/completions ------------------------------------------------------------------------

@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    _check_common(state, body)
    await state.offload(_check_limits, state.config, body)
    tools = _tools(body)
    schemas = {t.name: t.parameters for t in tools or ()}  # the XML tool-call form's value types
    thinking = _THINKING.get(body.reasoning_effort) if body.reasoning_effort else None
    rendered = await state.offload(state.template.render, normalize_messages(body.messages), tools, thinking)
    max_tokens = check_prompt(state, rendered.prompt_token_ids, body.max_completion_tokens or body.max_tokens,
                              "messages", "max_completion_tokens" if body.max_completion_tokens else "max_tokens")
    choice = structured_output.openai_tool_choice(body.tool_choice, tools)
    constraint, param = structured_output.requested(body, tools, choice, body.parallel_tool_calls is not False,
                                                    rendered.starts_in_reasoning)
    await structured_output.check(state, constraint, param)
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    request = Request(state.new_id("chatcmpl-"), rendered.prompt_token_ids,
                      _params(body, max_tokens, logprobs, state.vocab_size, constraint))
    gen = Generation(state, request)
    await gen.__aenter__()
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        parser = OutputParser(tools is not None, rendered.starts_in_reasoning, schemas=schemas)
        return sse.sse_response(_guarded(gen, "/v1/chat/completions", _chat_stream(gen, state, parser, include_usage)))
    try:
        out = await gen.collect(http_request)
    finally:
        await gen.__aexit__()
    content, reasoning, calls = parse_all(out.text, tools is not None, rendered.starts_in_reasoning,
                                          schemas=schemas)
    message: dict = {"role": "assistant", "content": content if (content or not calls) else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
    finish = "tool_calls" if calls and out.finish_reason == "stop" else out.finish_reason
    lp = chat_logprobs(state.template.tokenizer, out.token_ids, out.logprobs, logprobs) \
        if logprobs is not None and out.logprobs else None
    return {"id": request.request_id, "object": "chat.completion", "created": int(time.time()),
            "model": state.model_name,
            "choices": [{"index": 0, "message": message, "logprobs": lp, "finish_reason": finish}],
            "usage": usage(gen.num_prompt_tokens, len(out.token_ids), out.num_cached_tokens)}


async def _guarded(gen: Generation, path: str, events: AsyncIterator[str]) -> AsyncIterator[str]:
    """Relay a stream's events; an engine death or API error mid-stream becomes an SSE error event.
    The generation is always released, and the stream always ends with [DONE]."""
    try:
        async for event in events:
            yield event
    except EngineDeadError as e:
        yield sse.data(error_body(path, 503, f"the engine failed mid-stream: {e}"))
    except APIError as e:
        yield sse.data(error_body(path, e.status, e.message))
    finally:
        await events.aclose()
        await gen.__aexit__()
    yield sse.DONE


async def _chat_stream(gen: Generation, state: ServerState, parser: OutputParser,
                       include_usage: bool) -> AsyncIterator[str]:
    created, rid = int(time.time()), gen.request.request_id

    def chunk(delta: dict, finish: str | None = None) -> str:
        return sse.data({"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.model_name,
                         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    num_tools, num_tokens = 0, 0
    yield chunk({"role": "assistant", "content": ""})
    async for delta in gen.deltas():
        if delta is None:
            yield sse.KEEPALIVE
            continue
        num_tokens += len(delta.new_token_ids)
        events = parser.feed(delta.new_text) + (parser.finish() if delta.finished else [])
        for kind, value in events:
            if kind == "reasoning":
                yield chunk({"reasoning_content": value})
            elif kind == "content" and not (num_tools and not value.strip()):
                yield chunk({"content": value})
            elif kind == "tool_call":
                yield chunk({"tool_calls": [{"index": num_tools, "id": value.id, "type": "function",
                                             "function": {"name": value.name, "arguments": ""}}]})
                yield chunk({"tool_calls": [{"index": num_tools, "function": {"arguments": value.arguments}}]})
                num_tools += 1
        if delta.finished:
            reason = delta.finish_reason.value
            yield chunk({}, "tool_calls" if num_tools and reason == "stop" else reason)
    if include_usage:
        yield sse.data({"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": state.model_name, "choices": [],
                        "usage": usage(gen.num_prompt_tokens, num_tokens, gen.num_cached_tokens)})


# ---- /v1/completions -----------------------------------------------------------------------------

def _completion_prompt(state: ServerState, prompt) -> list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts; send one prompt per request", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, list):
        return list(prompt)
    if state.template.tokenizer is None:
        raise APIError(400, "this model has no tokenizer: send the prompt as token ids", "prompt")
    return state.template.encode(prompt, add_special_tokens=True) if prompt else []


@router.post("/v1/completions")
async def completions(body: CompletionRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    _check_common(state, body)
    if body.suffix:
        raise APIError(400, "suffix is not supported", "suffix")
    if body.echo:
        raise APIError(400, "echo is not supported", "echo")
    limits.check_stop(state.config, body.stop, "stop")
    if isinstance(body.prompt, str):
        limits.check_text(state.config, [("prompt", body.prompt)], "prompt")
    elif body.prompt and isinstance(body.prompt[0], str):
        limits.check_text(state.config, [(f"prompt.{i}", p) for i, p in enumerate(body.prompt)], "prompt")
    prompt_ids = await state.offload(_completion_prompt, state, body.prompt)
    max_tokens = check_prompt(state, prompt_ids, body.max_tokens if body.max_tokens is not None else 16, "prompt")
    constraint, param = structured_output.requested(body)
    await structured_output.check(state, constraint, param)
    request = Request(state.new_id("cmpl-"), prompt_ids,
                      _params(body, max_tokens, body.logprobs, state.vocab_size, constraint))
    gen = Generation(state, request)
    await gen.__aenter__()
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse.sse_response(_guarded(gen, "/v1/completions", _completion_stream(gen, state, include_usage)))
    try:
        out = await gen.collect(http_request)
    finally:
        await gen.__aexit__()
    lp = completion_logprobs(state.template.tokenizer, out.token_ids, out.logprobs, body.logprobs) \
        if body.logprobs is not None and out.logprobs else None
    return {"id": request.request_id, "object": "text_completion", "created": int(time.time()),
            "model": state.model_name,
            "choices": [{"index": 0, "text": out.text, "logprobs": lp, "finish_reason": out.finish_reason}],
            "usage": usage(gen.num_prompt_tokens, len(out.token_ids), out.num_cached_tokens)}


async def _completion_stream(gen: Generation, state: ServerState, include_usage: bool) -> AsyncIterator[str]:
    created, rid = int(time.time()), gen.request.request_id

    def chunk(text: str, finish: str | None = None, extra: dict | None = None, choices: bool = True) -> str:
        body = {"id": rid, "object": "text_completion", "created": created, "model": state.model_name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}] if choices else []}
        return sse.data({**body, **(extra or {})})

    num_tokens = 0
    async for delta in gen.deltas():
        if delta is None:
            yield sse.KEEPALIVE
            continue
        num_tokens += len(delta.new_token_ids)
        if delta.new_text or delta.finished:
            yield chunk(delta.new_text, delta.finish_reason.value if delta.finished else None)
    if include_usage:
        yield chunk("", extra={"usage": usage(gen.num_prompt_tokens, num_tokens, gen.num_cached_tokens)}, choices=False)


# ---- /v1/models ----------------------------------------------------------------------------------

@router.get("/v1/models")
async def models(http_request: HTTPRequest):
    state = state_of(http_request)
    return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": int(state.started),
                                        "owned_by": "strata", "max_model_len": state.max_model_len}]}
