"""OpenAI routes: /v1/chat/completions, /v1/models (/v1/completions: routes_completions.py). Bodies are validated
(400) and checked against the server's limits before they are rendered, then checked against the context before
anything reaches the engine."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

from fastapi import APIRouter, Request as HTTPRequest

from strata.engine.client import EngineDeadError
from strata.server import limits, sse, structured_output
from strata.server.body import OffloadedBodyRoute
from strata.server.config import ServerConfig
from strata.server.errors import APIError, error_body
from strata.server.choices import Choices
from strata.server.generation import Output, ServerState, cache_hints, check_prompt, sampling_params
from strata.server.logprobs import chat_logprobs, prompt_logprobs_json
from strata.server.parsing import OutputParser, parse_all
from strata.server.protocol_openai import ChatCompletionRequest, ChatMessage, SamplingFields, StreamOptions, Tool
from strata.server.template import ToolSpec
from strata.server.thinking import EFFORT_BUDGETS, from_effort
from strata.types import Request, StructuredOutputs, TokenDelta

router = APIRouter(route_class=OffloadedBodyRoute)

_THINKING = {effort: effort != "none" for effort in EFFORT_BUDGETS}  # effort -> the template's enable_thinking


def state_of(http_request: HTTPRequest) -> ServerState:
    return http_request.app.state.strata


def usage(num_prompt: int, num_completion: int, num_cached: int) -> dict:
    return {"prompt_tokens": num_prompt, "completion_tokens": num_completion,
            "total_tokens": num_prompt + num_completion, "prompt_tokens_details": {"cached_tokens": num_cached}}


class StreamUsage:
    """What a stream reports of its usage (`stream_options`): with include_usage a last chunk with the totals, and
    with continuous_usage_stats too (vLLM's extension) every chunk the counts so far (the choices' tokens summed,
    as in the last chunk)."""

    def __init__(self, options: StreamOptions | None):
        self.final = bool(options and options.include_usage)
        self.continuous = self.final and bool(options.continuous_usage_stats)

    def of(self, choices: Choices, completion: bool = True) -> dict:
        """The usage so far (completion=False: no completion tokens, as for an echo of the prompt alone)."""
        return usage(choices.num_prompt_tokens, choices.num_completion_tokens if completion else 0,
                     choices.num_cached_tokens)

    def running(self, choices: Choices, completion: bool = True) -> dict:
        """{"usage": the counts so far} for a chunk when continuous, else {}."""
        return {"usage": self.of(choices, completion)} if self.continuous else {}


def params_of(body: SamplingFields, max_tokens: int, logprobs: int | None, vocab_size: int,
              constraint: StructuredOutputs | None = None, *, thinking_budget: int | None = None,
              prompt_logprobs: int | None = None):
    return sampling_params(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                           min_p=body.min_p, seed=body.seed, presence_penalty=body.presence_penalty,
                           frequency_penalty=body.frequency_penalty, repetition_penalty=body.repetition_penalty,
                           max_tokens=max_tokens, min_tokens=body.min_tokens, stop=body.stop,
                           stop_token_ids=body.stop_token_ids, ignore_eos=body.ignore_eos, logprobs=logprobs,
                           logit_bias=structured_output.logit_bias(body.logit_bias, vocab_size),
                           structured_outputs=constraint, thinking_budget=thinking_budget,
                           prompt_logprobs=prompt_logprobs)


def check_common(state: ServerState, body: SamplingFields) -> None:
    state.check_model(body.model)
    if body.prompt_logprobs is not None and body.stream:
        raise APIError(400, "prompt_logprobs come with a non-streamed response only; ask without stream",
                       "prompt_logprobs")
    if body.n > state.config.max_n:
        raise APIError(400, f"n={body.n} asks for more choices than this server gives one request "
                            f"({state.config.max_n}, --max-n); ask for fewer", "n")
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
    if body.tool_choice == "none":
        return None
    return tool_specs(body.tools)


def tool_specs(tools: list[Tool] | None) -> list[ToolSpec] | None:
    """OpenAI function tools as the template takes them (None for none)."""
    return [ToolSpec(t.function.name, t.function.description, t.function.parameters or {"type": "object"})
            for t in tools] if tools else None


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
    check_common(state, body)
    await state.offload(_check_limits, state.config, body)
    tools = _tools(body)
    schemas = {t.name: t.parameters for t in tools or ()}  # the XML tool-call form's value types
    thinking = from_effort(body.reasoning_effort, state.config.reasoning_budgets, state.template)
    rendered = await state.offload(state.template.render, normalize_messages(body.messages), tools, thinking.enable)
    max_tokens = check_prompt(state, rendered.prompt_token_ids, body.max_completion_tokens or body.max_tokens,
                              "messages", "max_completion_tokens" if body.max_completion_tokens else "max_tokens")
    choice = structured_output.openai_tool_choice(body.tool_choice, tools)
    constraint, param = structured_output.requested(body, tools, choice, body.parallel_tool_calls is not False,
                                                    rendered.starts_in_reasoning, state.template.thinking is not None)
    await structured_output.check(state, constraint, param)
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    request = Request(state.new_id("chatcmpl-"), rendered.prompt_token_ids,
                      params_of(body, max_tokens, logprobs, state.vocab_size, constraint,
                                thinking_budget=thinking.budget, prompt_logprobs=body.prompt_logprobs),
                      **cache_hints(body))
    choices = Choices(state, request, body.n)
    await choices.__aenter__()
    if body.stream:
        streams = [_ChatChoiceStream(OutputParser(tools is not None, rendered.starts_in_reasoning, schemas=schemas))
                   for _ in range(body.n)]
        stream = _chat_stream(choices, state, streams, StreamUsage(body.stream_options), logprobs)
        return sse.sse_response(guarded(choices, "/v1/chat/completions", stream))
    try:
        outs = await choices.collect(http_request)
    finally:
        await choices.__aexit__()

    def choice(index: int, out: Output) -> dict:
        content, reasoning, calls = parse_all(out.text, tools is not None, rendered.starts_in_reasoning,
                                              schemas=schemas)
        message: dict = {"role": "assistant", "content": content if (content or not calls) else None}
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        finish = "tool_calls" if calls and out.finish_reason == "stop" else out.finish_reason
        lp = chat_logprobs(state.template.tokenizer, out.token_ids, out.logprobs, logprobs) \
            if logprobs is not None and out.logprobs else None
        return {"index": index, "message": message, "logprobs": lp, "finish_reason": finish}

    reply = {"id": request.request_id, "object": "chat.completion", "created": int(time.time()),
             "model": state.model_name, "choices": [choice(i, out) for i, out in enumerate(outs)],
             "usage": usage(choices.num_prompt_tokens, choices.num_completion_tokens, outs[0].num_cached_tokens)}
    if body.prompt_logprobs is not None:
        reply["prompt_logprobs"] = prompt_logprobs_json(state.template.tokenizer, rendered.prompt_token_ids,
                                                        outs[0].prompt_logprobs, body.prompt_logprobs)
    return reply


async def guarded(choices: Choices, path: str, events: AsyncIterator[str]) -> AsyncIterator[str]:
    """Relay a stream's events; an engine death or API error mid-stream becomes an SSE error event.
    The choices' requests are always released, and the stream always ends with [DONE]."""
    try:
        async for event in events:
            yield event
    except EngineDeadError as e:
        yield sse.data(error_body(path, 503, f"the engine failed mid-stream: {e}"))
    except APIError as e:
        yield sse.data(error_body(path, e.status, e.message))
    finally:
        await events.aclose()
        await choices.__aexit__()
    yield sse.DONE


class _ChatChoiceStream:
    """One choice of a chat stream: its output parser, its tool calls so far, and the logprobs of tokens
    whose text the parser still holds (they go out with the choice's next chunk)."""

    def __init__(self, parser: OutputParser) -> None:
        self.parser, self.num_tools = parser, 0
        self.token_ids: list[int] = []
        self.logprobs: list[dict[int, float]] = []

    def feed(self, delta: TokenDelta) -> list[tuple[dict, str | None]]:
        """The (delta, finish_reason) chunk bodies of one engine delta."""
        if delta.new_logprobs:  # requested
            self.token_ids += delta.new_token_ids
            self.logprobs += delta.new_logprobs
        out = []
        for kind, value in self.parser.feed(delta.new_text) + (self.parser.finish() if delta.finished else []):
            if kind == "reasoning":
                out.append(({"reasoning_content": value}, None))
            elif kind == "content" and not (self.num_tools and not value.strip()):
                out.append(({"content": value}, None))
            elif kind == "tool_call":
                out.append(({"tool_calls": [{"index": self.num_tools, "id": value.id, "type": "function",
                                             "function": {"name": value.name, "arguments": ""}}]}, None))
                out.append(({"tool_calls": [{"index": self.num_tools, "function": {"arguments": value.arguments}}]},
                            None))
                self.num_tools += 1
        if delta.finished:
            reason = delta.finish_reason.value
            out.append(({}, "tool_calls" if self.num_tools and reason == "stop" else reason))
        return out

    def take_logprobs(self, tokenizer, top_logprobs: int | None) -> dict | None:
        if top_logprobs is None or not self.logprobs:
            return None
        lp = chat_logprobs(tokenizer, self.token_ids, self.logprobs, top_logprobs)
        self.token_ids, self.logprobs = [], []
        return lp


async def _chat_stream(choices: Choices, state: ServerState, streams: list[_ChatChoiceStream],
                       stream_usage: StreamUsage, top_logprobs: int | None) -> AsyncIterator[str]:
    created, rid = int(time.time()), choices.request.request_id

    def chunk(index: int, delta: dict, finish: str | None = None, logprobs: dict | None = None) -> str:
        return sse.data({"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.model_name,
                         "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
                         **stream_usage.running(choices)})

    for index in range(len(streams)):
        yield chunk(index, {"role": "assistant", "content": ""})
    async for item in choices.deltas():
        if item is None:
            yield sse.KEEPALIVE
            continue
        index, delta = item
        stream = streams[index]
        for body, finish in stream.feed(delta):
            yield chunk(index, body, finish, stream.take_logprobs(state.template.tokenizer, top_logprobs))
    if stream_usage.final:
        yield sse.data({"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": state.model_name, "choices": [], "usage": stream_usage.of(choices)})


# ---- /v1/models ----------------------------------------------------------------------------------

@router.get("/v1/models")
async def models(http_request: HTTPRequest):
    state = state_of(http_request)
    return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": int(state.started),
                                        "owned_by": "strata", "max_model_len": state.max_model_len}]}
