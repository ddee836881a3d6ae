"""OpenAI Responses routes: POST /v1/responses (stream and not), GET and DELETE /v1/responses/{id}.

A request's items become chat messages and take the chat route's path: limits and chat template (in the
preparation threads, off the event loop), context check, Generation, OutputParser. Streams follow the
official sequence: response.created, response.in_progress, per output item output_item.added /
content_part.added / *.delta / *.done / output_item.done, then response.completed (response.incomplete
when max_output_tokens ran out). Stored responses (store, the default) live in memory for
--responses-ttl-s, at most --responses-max-stored of them; previous_response_id continues one."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from fastapi import APIRouter, Request as HTTPRequest

from strata import structured
from strata.engine.client import EngineDeadError
from strata.server import limits, sse, structured_output
from strata.server.body import OffloadedBodyRoute
from strata.server.errors import APIError
from strata.server.generation import Generation, ServerState, cache_hints, check_prompt, sampling_params
from strata.server.parsing import OutputParser
from strata.server.protocol_responses import InputItem, NamedToolChoice, ResponsesRequest
from strata.server.responses import (OutputItems, ResponseStore, as_items, input_messages, input_texts,
                                     output_as_items)
from strata.server.routes_openai import state_of
from strata.server.template import Rendered, ToolSpec
from strata.server.thinking import from_effort
from strata.types import Request, SamplingParams, StructuredOutputs

router = APIRouter(route_class=OffloadedBodyRoute)


def store_of(http_request: HTTPRequest) -> ResponseStore:
    """One store per app, made on first use from the server's options."""
    app_state = http_request.app.state
    if getattr(app_state, "responses", None) is None:
        config = state_of(http_request).config
        app_state.responses = ResponseStore(config.responses_max_stored, config.responses_ttl_s)
    return app_state.responses


@dataclass
class Turn:
    """One create request, checked: what its Response object echoes and where its result is kept."""
    state: ServerState
    store: ResponseStore
    body: ResponsesRequest
    items: list[InputItem]  # the conversation: earlier turns' items, then this request's input
    params: SamplingParams
    response_id: str
    created_at: int

    def response(self, status: str, output: list[dict], usage: dict | None = None) -> dict:
        body = self.body
        tool_choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, NamedToolChoice) \
            else body.tool_choice or "auto"
        reasoning = body.reasoning.model_dump() if body.reasoning else {"effort": None, "summary": None}
        return {"id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
                "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
                "model": self.state.model_name, "output": output, "parallel_tool_calls": body.parallel_tool_calls,
                "previous_response_id": body.previous_response_id, "reasoning": reasoning, "store": body.store,
                "temperature": self.params.temperature, "top_p": self.params.top_p,
                "text": {"format": _text_format(body)}, "tool_choice": tool_choice,
                "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
                "truncation": body.truncation or "disabled", "usage": usage, "metadata": body.metadata or {},
                "user": body.user}

    def finish(self, output: list[dict], finish_reason: str, num_output_tokens: int, num_prompt_tokens: int,
               num_cached_tokens: int) -> dict:
        """The final Response object; kept in the store when the request asked for it."""
        usage = {"input_tokens": num_prompt_tokens, "input_tokens_details": {"cached_tokens": num_cached_tokens},
                 "output_tokens": num_output_tokens,
                 "output_tokens_details": {"reasoning_tokens": self._reasoning_tokens(output, num_output_tokens)},
                 "total_tokens": num_prompt_tokens + num_output_tokens}
        response = self.response(_status(finish_reason), output, usage)
        if self.body.store:
            self.store.put(self.response_id, response, self.items + output_as_items(output))
        return response

    def _reasoning_tokens(self, output: list[dict], num_output_tokens: int) -> int:
        """The reasoning text re-tokenized: the engine counts tokens, not which block they fell in."""
        text = "".join(part["text"] for item in output if item["type"] == "reasoning" for part in item["content"])
        tokenizer = self.state.template.tokenizer
        return min(len(tokenizer.encode(text, add_special_tokens=False)), num_output_tokens) if text else 0


def _text_format(body: ResponsesRequest) -> dict:
    if body.text is None or body.text.format is None:
        return {"type": "text"}
    return body.text.format.model_dump(by_alias=True, exclude_none=True)


def _status(finish_reason: str) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


# ---- checks --------------------------------------------------------------------------------------

def _check_fields(body: ResponsesRequest) -> None:
    unsupported = sorted(body.model_extra or {})
    if unsupported:
        them = "it" if len(unsupported) == 1 else "them"
        raise APIError(400, f"/v1/responses here does not support {', '.join(unsupported)}: remove {them} from the "
                            f"request (docs/api.md lists the fields it implements)", unsupported[0])


def _previous_items(store: ResponseStore, previous_response_id: str | None) -> list[InputItem]:
    if previous_response_id is None:
        return []
    stored = store.try_get(previous_response_id)
    if stored is None:
        raise APIError(400, f"previous response with id {previous_response_id!r} not found: it was not stored "
                            f"(store: false), has expired (kept {store.ttl_s:g} s, --responses-ttl-s) or was "
                            f"dropped (at most {store.max_stored} kept, --responses-max-stored); send the "
                            f"conversation as input items instead", "previous_response_id")
    return stored.items


def _tools(body: ResponsesRequest) -> list[ToolSpec] | None:
    """Flat Responses tools -> the template's ToolSpecs (all of them whatever tool_choice names, as on chat:
    the prompt stays the same and the constraint picks the tool)."""
    if not body.tools or body.tool_choice == "none":
        return None
    return [ToolSpec(t.name, t.description, t.parameters or {"type": "object"}) for t in body.tools]


def _constraint(body: ResponsesRequest, tools: list[ToolSpec] | None, rendered: Rendered,
                close_token: bool = False) -> tuple[StructuredOutputs | None, str | None]:
    """What tool_choice (required, or a named function) or text.format (json_object, json_schema) asks the
    output to be, enforced while decoding (structured_output.py); both at once is a 400."""
    choice = body.tool_choice
    if isinstance(choice, NamedToolChoice):
        if choice.name not in {t.name for t in tools or ()}:
            raise APIError(400, f"tool_choice.name is {choice.name!r}, which is not one of the request's tools",
                           "tool_choice.name")
        choice = choice.name
    else:
        choice = structured_output.openai_tool_choice(choice, tools)
    constraint, param = structured_output.requested(body, tools, choice, body.parallel_tool_calls,
                                                    rendered.starts_in_reasoning, close_token)
    text_format = body.text.format if body.text else None
    if text_format is None or text_format.type == "text":
        return constraint, param
    if constraint is not None:
        raise APIError(400, "text.format and tool_choice each constrain the output; give only one of them",
                       "text.format")
    if text_format.type == "json_object":
        constraint, param = StructuredOutputs(json_object=True), "text.format"
    else:
        constraint, param = StructuredOutputs(json=text_format.schema_), "text.format.schema"
    # as requested() does for response_format: the parser reads reasoning until </think>, then the answer
    return (structured.after_reasoning(constraint, close_token) if rendered.starts_in_reasoning else constraint), param


def _check_limits(state: ServerState, body: ResponsesRequest, prior: list[InputItem], new: list[InputItem]) -> None:
    config = state.config
    limits.check_count(len(prior) + len(new), config.max_messages, "input", "--max-messages")
    limits.check_count(len(body.tools or ()), config.max_tools, "tools", "--max-tools")
    limits.check_text(config, _texts(body, prior, new), "input items")
    for i, tool in enumerate(body.tools or ()):
        if tool.parameters is not None:
            limits.check_schema(config, tool.parameters, f"tools.{i}.parameters")
    text_format = body.text.format if body.text else None
    if text_format is not None and text_format.type == "json_schema":
        if text_format.name is None or text_format.schema_ is None:
            raise APIError(400, "text.format of type json_schema needs name and schema (an object)", "text.format")
        limits.check_schema(config, text_format.schema_, "text.format.schema")


def _texts(body: ResponsesRequest, prior: list[InputItem], new: list[InputItem]) -> Iterator[tuple[str, object]]:
    yield "instructions", body.instructions or ""
    for _, text in input_texts(prior):
        yield "previous_response_id", text
    yield from input_texts(new)
    for i, tool in enumerate(body.tools or ()):
        yield f"tools.{i}", tool.name + (tool.description or "")


# ---- routes --------------------------------------------------------------------------------------

@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, http_request: HTTPRequest):
    state, store = state_of(http_request), store_of(http_request)
    state.check_model(body.model)
    _check_fields(body)
    prior, new = _previous_items(store, body.previous_response_id), as_items(body.input)
    await state.offload(_check_limits, state, body, prior, new)
    tools = _tools(body)
    messages = input_messages(prior + new)
    if body.instructions:  # never carried over from the previous response, as OpenAI does
        messages.insert(0, {"role": "system", "content": body.instructions})
    effort = body.reasoning.effort if body.reasoning else None
    thinking = from_effort(effort, state.config.reasoning_budgets, state.template)
    rendered = await state.offload(state.template.render, messages, tools, thinking.enable)
    max_tokens = check_prompt(state, rendered.prompt_token_ids, body.max_output_tokens, "input",
                              "max_output_tokens")
    constraint, param = _constraint(body, tools, rendered, state.template.thinking is not None)
    await structured_output.check(state, constraint, param)
    params = sampling_params(temperature=body.temperature, top_p=body.top_p, max_tokens=max_tokens,
                             structured_outputs=constraint, thinking_budget=thinking.budget)
    turn = Turn(state, store, body, prior + new, params, state.new_id("resp_"), int(time.time()))
    gen = Generation(state, Request(turn.response_id, rendered.prompt_token_ids, params, **cache_hints(body)))
    await gen.__aenter__()
    parser = OutputParser(tools is not None, rendered.starts_in_reasoning,
                          schemas={t.name: t.parameters for t in tools or ()})
    output = OutputItems(state.new_id, body.parallel_tool_calls)
    if body.stream:
        return sse.sse_response(_stream(gen, turn, parser, output))
    try:
        out = await gen.collect(http_request)
    finally:
        await gen.__aexit__()
    for kind, value in parser.feed(out.text) + parser.finish():
        output.feed(kind, value)
    output.finish(_status(out.finish_reason))
    return turn.finish(output.items, out.finish_reason, len(out.token_ids), gen.num_prompt_tokens,
                       out.num_cached_tokens)


async def _stream(gen: Generation, turn: Turn, parser: OutputParser, output: OutputItems) -> AsyncIterator[str]:
    sequence = itertools.count()

    def frame(event: dict) -> str:
        return sse.event(event["type"], {**event, "sequence_number": next(sequence)})

    num_tokens = 0
    try:
        for kind in ("created", "in_progress"):
            yield frame({"type": f"response.{kind}", "response": turn.response("in_progress", [])})
        async for delta in gen.deltas():
            if delta is None:
                yield sse.KEEPALIVE
                continue
            num_tokens += len(delta.new_token_ids)
            events = [e for kind, value in parser.feed(delta.new_text) + (parser.finish() if delta.finished else [])
                      for e in output.feed(kind, value)]
            if delta.finished:
                reason = delta.finish_reason.value
                events += output.finish(_status(reason))
                response = turn.finish(output.items, reason, num_tokens, gen.num_prompt_tokens, gen.num_cached_tokens)
                events.append({"type": f"response.{response['status']}", "response": response})
            for event in events:
                yield frame(event)
    except (EngineDeadError, APIError) as e:
        message = f"the engine failed mid-stream: {e}" if isinstance(e, EngineDeadError) else e.message
        failed = {**turn.response("failed", output.items), "error": {"code": "server_error", "message": message}}
        yield frame({"type": "error", "code": "server_error", "message": message, "param": None})
        yield frame({"type": "response.failed", "response": failed})
    finally:
        await gen.__aexit__()


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"response with id {response_id!r} not found (not stored, expired or deleted)",
                    "response_id")


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, http_request: HTTPRequest):
    stored = store_of(http_request).try_get(response_id)
    if stored is None:
        raise _not_found(response_id)
    return stored.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, http_request: HTTPRequest):
    if not store_of(http_request).delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}
