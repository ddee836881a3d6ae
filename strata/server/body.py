"""Large JSON bodies are decoded and validated in the request-preparation threads, not on the event loop.
`OffloadedBodyRoute` is the route class of the API routers: a body of OFFLOAD_MIN_BYTES or more (its size
already checked by BodyLimitMiddleware) is decoded with jiter (pydantic-core's parser, several times faster
than `json`), its list lengths are checked against the server's limits, then it is validated against the
route's body model, and the route gets the validated model; smaller bodies take FastAPI's own path.
Invariant: a body gives the same value and the same error either way (undecodable bodies go through
`json.loads`, as FastAPI's do, so their messages and positions are FastAPI's), except that a list over
its limit is reported before the body's other validation errors."""

from __future__ import annotations

import json
from collections.abc import Callable

import pydantic_core
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from strata.server import limits
from strata.server.config import ServerConfig

# Below this a body decodes and validates in well under a millisecond: the thread hop would cost more,
# and a small request would wait behind a large prompt being tokenized.
OFFLOAD_MIN_BYTES = 64 << 10

# Lists whose length a limit bounds, checked before validation: pydantic validates about 4 µs an element
# and holds the GIL meanwhile, so 100,000 messages would stall the loop ~0.4 s even from a thread.
LIST_LIMITS: dict[str, Callable[[ServerConfig, int, str], None]] = {
    "messages": lambda config, n, key: limits.check_count(n, config.max_messages, key, "--max-messages"),
    "input": lambda config, n, key: limits.check_count(n, config.max_messages, key, "--max-messages"),
    "tools": lambda config, n, key: limits.check_count(n, config.max_tools, key, "--max-tools"),
    "stop": limits.check_stop_count,
    "stop_sequences": limits.check_stop_count,
}


class OffloadedBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()
        field = self.body_field if self.body_field is not None and not self._embed_body_fields else None
        if field is None:
            return handler

        async def offloaded_handler(request: Request):
            body = await request.body()
            if len(body) >= OFFLOAD_MIN_BYTES:
                state = request.app.state.strata
                # Starlette's cache of the decoded body: FastAPI then finds the model already validated
                request._json = await state.offload(_decode_and_validate, field, state.config, body)
            return await handler(request)

        return offloaded_handler


def _decode_and_validate(field, config: ServerConfig, body: bytes):
    data = decode(body)
    check_list_limits(config, data)
    value, errors = field.validate(data, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=data)
    return value


def decode(body: bytes):
    """jiter first; what it refuses (a lone surrogate escape, UTF-16 text, deep nesting, bad JSON) goes to
    `json.loads`, whose result or error is the one FastAPI gives a small body."""
    try:
        return pydantic_core.from_json(body)
    except ValueError:
        pass
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": e.msg}}], body=e.doc) from e
    except Exception as e:  # noqa: BLE001 - FastAPI's own answer to a body it cannot decode
        raise HTTPException(400, "There was an error parsing the body") from e


def check_list_limits(config: ServerConfig, data) -> None:
    if not isinstance(data, dict):
        return
    for key, check in LIST_LIMITS.items():
        if isinstance(data.get(key), list):
            check(config, len(data[key]), key)
