"""/tokenize and /detokenize, as vLLM's server has them (a `prompt`, or chat `messages` rendered by the model's
template as /v1/chat/completions renders them) and accepting llama.cpp's server's names too (`content`,
`add_special`, `with_pieces`). Bodies are checked against the server's size limits; nothing reaches the engine."""

from __future__ import annotations

from fastapi import APIRouter, Request as HTTPRequest
from pydantic import Field

from strata.server import limits
from strata.server.body import OffloadedBodyRoute
from strata.server.errors import APIError
from strata.server.generation import ServerState
from strata.server.protocol_openai import ChatMessage, Tool, _Body
from strata.server.routes_openai import normalize_messages, tool_specs

router = APIRouter(route_class=OffloadedBodyRoute)


class TokenizeRequest(_Body):
    model: str | None = None
    prompt: str | None = None
    content: str | None = None             # llama.cpp's name for prompt
    messages: list[ChatMessage] | None = None
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool | None = None  # default: True for a prompt, False for messages (the template has them)
    add_special: bool | None = None         # llama.cpp's name
    return_token_strs: bool = False
    with_pieces: bool = False               # llama.cpp: tokens as {id, piece}


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[int] = Field(max_length=1_000_000)


def _state_and_tokenizer(body, http_request: HTTPRequest) -> tuple[ServerState, object]:
    """The server's state and the model's tokenizer, once the body's model (if named) is this server's."""
    state: ServerState = http_request.app.state.strata
    if body.model is not None:
        state.check_model(body.model)
    if state.template.tokenizer is None:
        raise APIError(400, "this model has no tokenizer", "model")
    return state, state.template.tokenizer


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, http_request: HTTPRequest):
    state, tokenizer = _state_and_tokenizer(body, http_request)
    text = body.prompt if body.prompt is not None else body.content
    if (text is None) == (body.messages is None):
        raise APIError(400, "send either a prompt (or content) or messages", "prompt")
    add_special = body.add_special_tokens if body.add_special_tokens is not None else body.add_special
    if text is not None:
        limits.check_text(state.config, [("prompt", text)], "prompt")
        add_special = True if add_special is None else add_special
        ids = await state.offload(tokenizer.encode, text, add_special_tokens=add_special)
    else:
        limits.check_count(len(body.messages), state.config.max_messages, "messages", "--max-messages")
        messages = normalize_messages(body.messages)
        limits.check_text(state.config, [(f"messages.{i}.content", m["content"]) for i, m in enumerate(messages)])
        rendered = await state.offload(state.template.render, messages, tool_specs(body.tools), None,
                                       body.add_generation_prompt)
        ids = rendered.prompt_token_ids
        if add_special and tokenizer.bos_token_id is not None and ids[:1] != [tokenizer.bos_token_id]:
            ids = [tokenizer.bos_token_id] + ids
    pieces = tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs or body.with_pieces else None
    tokens = [{"id": i, "piece": p} for i, p in zip(ids, pieces)] if body.with_pieces else ids
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": tokens,
            "token_strs": pieces if body.return_token_strs else None}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, http_request: HTTPRequest):
    state, tokenizer = _state_and_tokenizer(body, http_request)
    if body.tokens and not all(0 <= t < state.vocab_size for t in body.tokens):
        raise APIError(400, f"token ids must be in [0, {state.vocab_size})", "tokens")
    text = await state.offload(tokenizer.decode, body.tokens)
    return {"prompt": text, "content": text}  # vLLM's name, llama.cpp's
