"""Pure-ASGI guards in front of every route: API-key check (all paths but /health and the web app's
static files, whose API calls carry the key) and the request
body size limit (413, checked on Content-Length and on the bytes actually received). POST bodies are
always read as JSON."""

from __future__ import annotations

import hmac
import json

from strata.server.errors import error_body

OPEN_PATHS = ("/health", "/")
OPEN_PREFIXES = ("/static/",)


async def _send_error(send, path: str, status: int, message: str) -> None:
    body = json.dumps(error_body(path, status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class AuthMiddleware:
    def __init__(self, app, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.api_key or is_open(scope["path"]):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key", b"").decode("latin-1")
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if auth.lower().startswith("bearer "):
            given = given or auth[7:].strip()
        if not given or not hmac.compare_digest(given.encode(), self.api_key.encode()):
            return await _send_error(send, scope["path"], 401,
                                     "missing or wrong API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
        return await self.app(scope, receive, send)


class BodyLimitMiddleware:
    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _send_error(send, scope["path"], 413,
                                     f"the request body is over the limit of {self.max_bytes} bytes")
        if scope["method"] == "POST":
            scope = _json_content_type(scope)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await _send_error(send, scope["path"], 413, f"the request body is over the limit of {self.max_bytes} bytes")


class _BodyTooLarge(Exception):
    pass


def _json_content_type(scope: dict) -> dict:
    """Every POST body here is JSON: treat it as such whatever Content-Type says (curl -d sends a form
    type), so a missing header is not mistaken for a missing body."""
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    return {**scope, "headers": headers + [(b"content-type", b"application/json")]}
