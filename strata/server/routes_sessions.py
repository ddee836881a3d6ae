"""Sessions on disk: `POST /v1/sessions/save` writes the cached prefix of a conversation (given as chat
`messages` or a completion `prompt`, rendered and tokenized as those routes do) to a file in
--sessions-dir; `POST /v1/sessions/restore` puts a file's prefix back into the prefix cache, so the next
request that continues the conversation reads only its new tokens. Files are named, never given as
paths: a name is checked here and joined to the sessions folder; the engine does the rest
(strata.engine.sessions) and refuses a file saved from another model or configuration (409).
"""

from __future__ import annotations

import os
import re
import time
from typing import Literal

from fastapi import APIRouter, Request as HTTPRequest

from strata.engine.client import EngineDeadError, EngineUnavailableError
from strata.server import limits
from strata.server.body import OffloadedBodyRoute
from strata.server.config import ServerConfig
from strata.server.errors import APIError
from strata.server.protocol_openai import ChatMessage, Tool, _Body
from strata.server.routes_completions import one_prompt_ids
from strata.server.routes_openai import _THINKING, _texts, _tools, normalize_messages, state_of

router = APIRouter(route_class=OffloadedBodyRoute)

_FILENAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


class SessionSaveRequest(_Body):
    filename: str
    model: str | None = None
    messages: list[ChatMessage] | None = None     # as in /v1/chat/completions, with its tools and reasoning
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    prompt: str | list[int] | None = None         # or as in /v1/completions: text or token ids


class SessionRestoreRequest(_Body):
    filename: str
    model: str | None = None


def session_path(config: ServerConfig, filename: str) -> str:
    """The file `filename` names in --sessions-dir; 400 unless it is a plain name."""
    if not config.sessions_dir:
        raise APIError(400, "sessions on disk are off: start the server with --sessions-dir DIR")
    if not _FILENAME.fullmatch(filename):
        raise APIError(400, f"filename {filename[:200]!r} is not a plain file name: use 1 to 128 letters, digits, "
                            f"'.', '_' or '-', not starting with '.' (files live in --sessions-dir)", "filename")
    return os.path.join(os.path.abspath(config.sessions_dir), filename)


def _token_ids(state, body: SessionSaveRequest) -> list[int]:
    if (body.messages is None) == (body.prompt is None):
        raise APIError(400, "give the conversation to save as either messages (chat) or prompt (text or token "
                            "ids), rendered as the request that continues it will be", "messages")
    if body.prompt is not None:
        if isinstance(body.prompt, str):
            limits.check_text(state.config, [("prompt", body.prompt)], "prompt")
        return one_prompt_ids(state, body.prompt)
    limits.check_count(len(body.messages), state.config.max_messages, "messages", "--max-messages")
    limits.check_text(state.config, _texts(body))
    thinking = _THINKING.get(body.reasoning_effort) if body.reasoning_effort else None
    return state.template.render(normalize_messages(body.messages), _tools(body), thinking).prompt_token_ids


async def _call(state, action: str, args: dict, param: str) -> dict:
    """The engine's reply; its refusals as APIErrors about `param` (4xx) or none (5xx)."""
    try:
        reply = await state.client.session(action, args)
    except (EngineUnavailableError, EngineDeadError) as e:
        raise APIError(503, f"the engine is not available: {e}") from e
    if not reply["ok"]:
        raise APIError(reply["status"], reply["error"], param if reply["status"] < 500 else None)
    return reply


@router.post("/v1/sessions/save")
async def save(body: SessionSaveRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    if body.model is not None:
        state.check_model(body.model)
    path = session_path(state.config, body.filename)
    started = time.perf_counter()
    token_ids = await state.offload(_token_ids, state, body)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    param = "messages" if body.messages is not None else "prompt"
    reply = await _call(state, "save", {"path": path, "token_ids": token_ids}, param)
    return {"filename": body.filename, "n_tokens": len(token_ids), "n_saved": reply["num_tokens"],
            "n_written": reply["bytes"], "timings": _timings("save_ms", started, reply)}


@router.post("/v1/sessions/restore")
async def restore(body: SessionRestoreRequest, http_request: HTTPRequest):
    state = state_of(http_request)
    if body.model is not None:
        state.check_model(body.model)
    path = session_path(state.config, body.filename)
    if not os.path.isfile(path):
        raise APIError(404, f"no session file {body.filename!r} in the sessions folder (--sessions-dir)", "filename")
    started = time.perf_counter()
    reply = await _call(state, "restore", {"path": path}, "filename")
    return {"filename": body.filename, "n_restored": reply["num_tokens"], "n_read": reply["bytes"],
            "timings": _timings("restore_ms", started, reply)}


def _timings(name: str, started: float, reply: dict) -> dict:
    """The whole call; how long the engine loop spent on it in all, and in its longest step (one tensor's
    copy at most: requests running meanwhile wait at most that long once per step)."""
    return {name: round((time.perf_counter() - started) * 1000, 1),
            "engine_loop_ms": round(reply["loop_seconds"] * 1000, 1),
            "engine_loop_longest_step_ms": round(reply["longest_loop_step_seconds"] * 1000, 1)}
