"""Server-sent events: frame formatting and the streaming response (no proxy buffering, no caching).
A keep-alive is an SSE comment line, which every SSE client ignores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

KEEPALIVE = ": keep-alive\n\n"
DONE = "data: [DONE]\n\n"


def data(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def event(name: str, obj: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n"


def sse_response(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
