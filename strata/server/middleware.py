"""Pure-ASGI guards in front of every route, outermost first: security headers on every response, the
Host allow-list (421; a browser page on another name cannot reach a loopback server through DNS
rebinding), the request body (POSTs must say Content-Type: application/json, else 415, so a
cross-origin form or preflight-free fetch cannot start generations; the body is read whole, chunked
or not, and is over max_body_bytes: 413) and the API key (all paths but /health and the web app's
static files, whose API calls carry the key). Each error names the option that sets its limit."""

from __future__ import annotations

import hmac
import ipaddress
import json

from strata.server.config import ServerConfig
from strata.server.errors import error_body

OPEN_PATHS = ("/health", "/")
OPEN_PREFIXES = ("/static/",)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

# The web app loads only its own files (the favicon is a data: URL) and calls only its own API. No
# inline script or style runs, so markup injected into a rendered reply cannot execute; eval stays
# allowed because the browser tests' Playwright waits (wait_for_function) poll with it, and the app's
# own code never calls it.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self' 'unsafe-eval'; img-src 'self' data:; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


async def _send_error(send, path: str, status: int, message: str, headers: tuple = ()) -> None:
    body = json.dumps(error_body(path, status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class SecurityHeadersMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *SECURITY_HEADERS]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def allowed_host_names(config: ServerConfig) -> frozenset[str] | None:
    """Host names (without port) the server answers; None: any. The port is not compared: a rebinding
    page changes the name the browser sends, never the port it connected to."""
    if config.allowed_hosts.strip() == "*":
        return None
    if config.allowed_hosts.strip():
        return frozenset(host_name(h.strip().encode()) for h in config.allowed_hosts.split(",") if h.strip())
    if is_loopback(config.host):
        return frozenset({*LOOPBACK_NAMES, host_name(config.host.encode())})
    return None


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(host: bytes) -> str:
    """'Localhost:8080' -> 'localhost'; '[::1]:8080' -> '[::1]'; a bare IPv6 address gets brackets."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[:text.find("]") + 1]
    if text.count(":") > 1:
        return f"[{text}]"
    return text.split(":", 1)[0]


class HostMiddleware:
    def __init__(self, app, allowed: frozenset[str] | None) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.allowed is None:
            return await self.app(scope, receive, send)
        host = dict(scope["headers"]).get(b"host")
        if host is not None and host_name(host) not in self.allowed:
            return await _send_error(send, scope["path"], 421,
                                     f"Host {host.decode('latin-1')!r} is not served here; accepted host names: "
                                     f"{', '.join(sorted(self.allowed))} (add names with --allowed-hosts, '*' for "
                                     f"any)")
        return await self.app(scope, receive, send)


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


def is_json_type(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class BodyLimitMiddleware:
    """POST bodies: JSON only (415), at most `max_bytes` (413) whether announced by Content-Length or
    chunked. The body is read here and replayed to the route, so the route never sees a partial one."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(scope, send)
        if not is_json_type(headers.get(b"content-type")):
            given = (headers.get(b"content-type") or b"none").decode("latin-1")
            return await _send_error(send, scope["path"], 415,
                                     f"the body must be JSON sent with Content-Type: application/json (got {given!r})")
        body = await self._read(receive)
        if body is None:
            return await self._too_large(scope, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect notice
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    async def _read(self, receive) -> bytes | None:
        """The whole body; None once it passes the limit (the rest is not read)."""
        chunks, received = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client left: the route sees an empty body and a disconnect
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope, send) -> None:
        await _send_error(send, scope["path"], 413,
                          f"the request body is over the limit of {self.max_bytes} bytes (--max-body-bytes)")
