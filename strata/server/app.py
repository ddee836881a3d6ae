"""The FastAPI app: wires the engine client, chat template and metrics into the routes, the guards
(security headers, Host allow-list, JSON-only bodies and their size limit, auth, optional CORS) in
front, and the error handlers that give every failure its OpenAI- or Anthropic-shaped body. The
engine process starts with the app (lifespan) and stops with it. The web app (static files at / and
/static/) and its /v1/monitor feed are served here too."""

from __future__ import annotations

import contextlib
import logging
import pathlib

from fastapi import FastAPI, Request as HTTPRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from strata.config import EngineConfig
from strata.engine.client import AsyncEngineClient
from strata.server import (errors, routes_anthropic, routes_completions, routes_openai, routes_responses,
                           routes_sessions, routes_tokens)
from strata.server.config import ServerConfig
from strata.server.generation import ServerState
from strata.server.metrics import Metrics
from strata.server.middleware import (AuthMiddleware, BodyLimitMiddleware, HostMiddleware,
                                     SecurityHeadersMiddleware, allowed_host_names)
from strata.server.monitor import Monitor
from strata.server.template import ChatTemplate
from strata.tokenizer import load_tokenizer

logger = logging.getLogger("strata.server")
STATIC_DIR = pathlib.Path(__file__).parent / "static"


def served_name(engine_config: EngineConfig, server_config: ServerConfig) -> str:
    return server_config.served_model_name or engine_config.model or "smollm2-135m"


def create_app(engine_config: EngineConfig, server_config: ServerConfig, quiet_engine: bool = True,
               on_ready=None, engine_target=None) -> FastAPI:
    """`on_ready(state)` runs once the engine has loaded the model (the CLI prints its ready line);
    `engine_target` replaces the engine process's entry point (tests)."""
    name = served_name(engine_config, server_config)
    client = AsyncEngineClient(engine_config, server_config.engine_hang_timeout_s,
                               server_config.engine_start_timeout_s, quiet=quiet_engine,
                               spare=server_config.engine_spare,
                               **({"target": engine_target} if engine_target else {}))
    monitor = Monitor(engine_config, lambda: client.stats.status)
    template = ChatTemplate(load_tokenizer(engine_config.model, engine_config.chat_template))
    state = ServerState(client, template, Metrics(name, monitor), server_config, name,
                        model_aliases=tuple({engine_config.model or "smollm2-135m"} - {name}))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await client.start()
        state.template.max_prompt_tokens = client.info["max_model_len"]
        if on_ready is not None:
            on_ready(state)
        yield
        await client.shutdown()
        state.close()

    app = FastAPI(title="Strata", version="0.1.0", lifespan=lifespan,
                  description="OpenAI- and Anthropic-compatible inference server")
    app.state.strata = state
    app.state.monitor = monitor
    app.include_router(routes_openai.router)
    app.include_router(routes_completions.router)
    app.include_router(routes_anthropic.router)
    app.include_router(routes_responses.router)
    app.include_router(routes_sessions.router)
    app.include_router(routes_tokens.router)
    app.include_router(_service_routes())
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_exception_handler(errors.APIError, errors.api_error_handler)
    app.add_exception_handler(RequestValidationError, errors.validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
    app.add_exception_handler(Exception, _unexpected_error_handler)
    if server_config.allowed_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=server_config.allowed_origins.split(","),
                           allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(AuthMiddleware, api_key=server_config.api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=server_config.max_body_bytes)
    app.add_middleware(HostMiddleware, allowed=allowed_host_names(server_config))
    app.add_middleware(SecurityHeadersMiddleware)  # outermost: every response, errors included
    return app


async def _http_error_handler(request: HTTPRequest, exc: StarletteHTTPException) -> JSONResponse:
    unreadable = _unreadable_body(exc.__cause__)
    if unreadable:
        return errors.error_response(request.url.path, 400, unreadable, "body")
    return errors.error_response(request.url.path, exc.status_code, str(exc.detail))


def _unreadable_body(cause: BaseException | None) -> str | None:
    """FastAPI reports every body it cannot decode as one vague 400; say which way it failed."""
    if isinstance(cause, RecursionError):
        return "the body's JSON is nested too deeply to read"
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid UTF-8 (byte {cause.start}): send JSON encoded as UTF-8"
    return None


async def _unexpected_error_handler(request: HTTPRequest, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error on %s", request.url.path)
    return errors.error_response(request.url.path, 500, f"internal error: {type(exc).__name__}")


def _service_routes():
    from fastapi import APIRouter

    router = APIRouter()

    @router.get("/health")
    async def health(http_request: HTTPRequest):
        stats = http_request.app.state.strata.client.stats
        ok = stats.state == "ready"
        return JSONResponse({"status": "ok" if ok else stats.state}, status_code=200 if ok else 503)

    @router.get("/v1/status")
    async def status(http_request: HTTPRequest):
        state: ServerState = http_request.app.state.strata
        client, stats = state.client, state.client.stats
        s = stats.status or {}
        return {"model": state.model_name, "max_model_len": client.info.get("max_model_len"),
                "vocab_size": client.info.get("vocab_size"),
                "engine": {"state": stats.state, "pid": client.pid, "restarts": stats.restarts,
                           "last_error": stats.last_error, "spare": stats.spare, "pids": client.child_pids,
                           "resubmitted_requests": stats.resubmitted, "device": client.info.get("device"),
                           "dtype": client.info.get("dtype")},
                "slots": {"total": s.get("max_num_seqs"), "running": s.get("num_running"),
                          "free": s.get("num_free_slots")},
                "queue": {"waiting": s.get("num_waiting")},
                "kv_blocks": {"total": s.get("kv_blocks_total"), "free": s.get("kv_blocks_free")},
                "in_flight_requests": client.num_in_flight}

    @router.get("/v1/monitor")
    async def monitor(http_request: HTTPRequest):
        return http_request.app.state.monitor.snapshot(http_request.app.state.strata)

    @router.get("/", include_in_schema=False)
    async def web_app():
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @router.get("/metrics")
    async def metrics(http_request: HTTPRequest):
        state: ServerState = http_request.app.state.strata
        return Response(state.metrics.render(state.client.stats), media_type="text/plain; version=0.0.4")

    return router
