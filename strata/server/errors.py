"""API errors and their two wire shapes: OpenAI (`{"error": {message, type, param, code}}`) and
Anthropic (`{"type": "error", "error": {type, message}}`, on /v1/messages*). Every error a client
can cause becomes an APIError with a status code and, where one is at fault, the field's name."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    415: "invalid_request_error", 421: "invalid_request_error", 429: "rate_limit_error",
                    405: "invalid_request_error", 413: "request_too_large", 503: "overloaded_error",
                    500: "api_error"}
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                 415: "invalid_request_error", 421: "invalid_request_error", 429: "rate_limit_exceeded",
                 405: "method_not_allowed", 413: "invalid_request_error", 503: "service_unavailable",
                 500: "internal_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_body(path: str, status: int, message: str, param: str | None = None) -> dict:
    if is_anthropic_path(path):
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "internal_error"), "param": param,
                      "code": status}}


def error_response(path: str, status: int, message: str, param: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(path, status, message, param), status_code=status, headers=headers)


def _field_name(loc: tuple) -> str:
    """('body', 'messages', 0, 'content', 'list[TextPart]', 0) -> 'messages.0.content.0' (union members dropped)."""
    parts = [str(p) for p in loc if p != "body" and "[" not in str(p)]
    return ".".join(parts) or "body"


async def api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    return error_response(request.url.path, exc.status, exc.message, exc.param, exc.headers)


async def validation_error_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    found = exc.errors()
    first = found[0]
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error") or first.get("msg")
        return error_response(request.url.path, 400, f"the body is not valid JSON: {reason}", "body")
    # A union reports one error per member; the deepest one is about the member the client meant.
    first = max(found, key=lambda e: len(e.get("loc", ())))
    param = _field_name(tuple(first.get("loc", ())))
    ctx = first.get("ctx") or {}
    if first.get("type") == "union_tag_invalid":  # e.g. an image content block
        param = f"{param}.{str(ctx.get('discriminator')).strip(chr(39))}"
        message = f"{param}: {ctx.get('tag')!r} is not supported here; use one of {ctx.get('expected_tags')}"
        return error_response(request.url.path, 400, message, param)
    if first.get("type") == "literal_error":
        message = f"{param}: {first.get('input')!r} is not supported here; use {ctx.get('expected')}"
        return error_response(request.url.path, 400, message, param)
    return error_response(request.url.path, 400, f"{param}: {first.get('msg')}", param)


def param_of(message: str) -> str | None:
    """SamplingParams errors start with the field's name ("top_p must be …")."""
    head = message.split(" ", 1)[0]
    return head if head.isidentifier() else None
