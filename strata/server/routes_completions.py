"""OpenAI /v1/completions: a prompt as text or token ids, or a list of them (prompt p's n choices at indexes
p * n .. p * n + n - 1, as OpenAI and vLLM number them; evaluation harnesses send batches so), with `echo`
(echo.py), logprobs and streaming. Each prompt is checked against the context before any reaches the engine."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request as HTTPRequest

from strata.server import limits, sse, structured_output
from strata.server.body import OffloadedBodyRoute
from strata.server.choices import Choices
from strata.server.echo import Echo, joined
from strata.server.errors import APIError
from strata.server.generation import Output, ServerState, cache_hints, check_prompt
from strata.server.logprobs import completion_logprobs, prompt_logprobs_json
from strata.server.protocol_openai import CompletionRequest
from strata.server.routes_openai import StreamUsage, check_common, guarded, params_of, state_of, usage
from strata.types import Request

router = APIRouter(route_class=OffloadedBodyRoute)


def prompts_of(prompt) -> list:
    """The body's prompt as a list of prompts, each a text or a list of token ids."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and isinstance(prompt[0], (str, list)):
        return list(prompt)
    return [prompt]  # token ids (or an empty list, refused as an empty prompt)


def _param(i: int, prompts: list) -> str:
    """How an error names prompt i: `prompt` when it is the only one."""
    return "prompt" if len(prompts) == 1 else f"prompt.{i}"


def _prompt_ids(state: ServerState, prompts: list) -> list[list[int]]:
    ids = []
    for i, prompt in enumerate(prompts):
        param = _param(i, prompts)
        if isinstance(prompt, list):
            ids.append(list(prompt))
        elif state.template.tokenizer is None:
            raise APIError(400, "this model has no tokenizer: send the prompt as token ids", param)
        else:
            ids.append(state.template.encode(prompt, add_special_tokens=True, param=param) if prompt else [])
    return ids


def one_prompt_ids(state: ServerState, prompt) -> list[int]:
    """A body's single prompt (text, token ids, or a list of one of them) as token ids (sessions' save)."""
    prompts = prompts_of(prompt)
    if len(prompts) != 1:
        raise APIError(400, f"prompt holds {len(prompts)} prompts; send one", "prompt")
    return _prompt_ids(state, prompts)[0]


@router.post("/v1/completions")
async def completions(body: CompletionRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    check_common(state, body)
    if body.suffix:
        raise APIError(400, "suffix is not supported", "suffix")
    if body.max_tokens == 0 and not body.echo:
        raise APIError(400, "max_tokens must be at least 1 (0 only with echo: the prompt alone)", "max_tokens")
    prompts = prompts_of(body.prompt)
    limits.check_count(len(prompts), state.config.max_prompts, "prompt", "--max-prompts")
    limits.check_stop(state.config, body.stop, "stop")
    limits.check_text(state.config, [(_param(i, prompts), p) for i, p in enumerate(prompts) if isinstance(p, str)],
                      "prompt")
    prompt_ids = await state.offload(_prompt_ids, state, prompts)
    wanted = body.max_tokens if body.max_tokens is not None else 16
    max_tokens = [check_prompt(state, ids, max(wanted, 1), _param(i, prompts)) for i, ids in enumerate(prompt_ids)]
    tokenizer = state.template.tokenizer
    echoes = [Echo.of(tokenizer, p, ids, body.logprobs) for p, ids in zip(prompts, prompt_ids)] if body.echo else None
    constraint, param = structured_output.requested(body)
    await structured_output.check(state, constraint, param)
    # the prompt's logprobs, for echo (its top `logprobs`) and vLLM's prompt_logprobs (its own top)
    wanted_prompt = [n for n in (body.logprobs if body.echo else None, body.prompt_logprobs) if n is not None]
    requests = [Request(state.new_id("cmpl-"), ids, params_of(body, most, body.logprobs, state.vocab_size, constraint,
                                                                prompt_logprobs=max(wanted_prompt, default=None)),
                        **cache_hints(body)) for ids, most in zip(prompt_ids, max_tokens)]
    choices = Choices(state, requests, body.n)
    await choices.__aenter__()
    prompt_only = body.echo and body.max_tokens == 0  # the engine's one token is not returned
    if body.stream:
        return sse.sse_response(guarded(choices, "/v1/completions", _completion_stream(
            choices, state, StreamUsage(body.stream_options), body.logprobs, echoes, prompt_only)))
    try:
        outs = await choices.collect(http_request)
    finally:
        await choices.__aexit__()
    echoed = [echo.logprobs(tokenizer, outs[head].prompt_logprobs) for echo, head in zip(echoes, choices.heads)] \
        if echoes is not None else None

    def choice(index: int, out: Output) -> dict:
        p = index // body.n
        reply = _choice(index, p, out)
        if body.prompt_logprobs is not None:  # vLLM's: each choice carries its prompt's
            entries = outs[choices.heads[p]].prompt_logprobs
            reply["prompt_logprobs"] = prompt_logprobs_json(tokenizer, prompt_ids[p], entries, body.prompt_logprobs)
        return reply

    def _choice(index: int, p: int, out: Output) -> dict:
        if prompt_only:
            return {"index": index, "text": echoes[p].prompt_text, "logprobs": echoed[p], "finish_reason": "length"}
        offset = Echo.text_length(echoed[p]) if echoed is not None else 0
        lp = completion_logprobs(tokenizer, out.token_ids, out.logprobs, body.logprobs, offset) \
            if body.logprobs is not None and out.logprobs else None
        if echoes is None:
            return {"index": index, "text": out.text, "logprobs": lp, "finish_reason": out.finish_reason}
        return {"index": index, "text": echoes[p].prompt_text + out.text, "logprobs": joined(echoed[p], lp),
                "finish_reason": out.finish_reason}

    num_completion = 0 if prompt_only else choices.num_completion_tokens
    num_cached = sum(outs[head].num_cached_tokens for head in choices.heads)
    return {"id": requests[0].request_id, "object": "text_completion", "created": int(time.time()),
            "model": state.model_name, "choices": [choice(i, out) for i, out in enumerate(outs)],
            "usage": usage(choices.num_prompt_tokens, num_completion, num_cached)}


async def _completion_stream(choices: Choices, state: ServerState, stream_usage: StreamUsage,
                             top_logprobs: int | None, echoes: list[Echo] | None,
                             prompt_only: bool) -> AsyncIterator[str]:
    created, rid, n = int(time.time()), choices.request.request_id, choices.n
    tokenizer = state.template.tokenizer
    text_offsets = [0] * len(choices.gens)                 # per choice: where its next token's text starts
    echoing = [echoes is not None] * len(choices.gens)     # per choice: its prompt is still to be sent
    echoed = [None] * len(choices.heads)  # per prompt: its logprobs, from its choice 0's first delta (siblings follow)

    def chunk(choice: dict | None, extra: dict | None = None) -> str:
        body = {"id": rid, "object": "text_completion", "created": created, "model": state.model_name,
                "choices": [choice] if choice else [], **stream_usage.running(choices, not prompt_only)}
        return sse.data({**body, **(extra or {})})

    async for item in choices.deltas():
        if item is None:
            yield sse.KEEPALIVE
            continue
        index, delta = item
        p = index // n
        if delta.prompt_logprobs is not None:
            echoed[p] = echoes[p].logprobs(tokenizer, delta.prompt_logprobs)
        if echoing[index]:
            echoing[index] = False
            text_offsets[index] = Echo.text_length(echoed[p])
            yield chunk({"index": index, "text": echoes[p].prompt_text, "logprobs": echoed[p], "finish_reason": None})
        if prompt_only:
            if delta.finished:
                yield chunk({"index": index, "text": "", "logprobs": None, "finish_reason": "length"})
            continue
        lp = None
        if top_logprobs is not None and delta.new_logprobs:
            lp = completion_logprobs(tokenizer, delta.new_token_ids, delta.new_logprobs, top_logprobs,
                                     text_offsets[index])
            text_offsets[index] += sum(len(token) for token in lp["tokens"])
        if delta.new_text or delta.finished or lp:
            yield chunk({"index": index, "text": delta.new_text, "logprobs": lp,
                         "finish_reason": delta.finish_reason.value if delta.finished else None})
    if stream_usage.final:
        yield chunk(None, {"usage": stream_usage.of(choices, not prompt_only)})
