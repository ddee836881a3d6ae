"""`strata serve [MODEL]`: the OpenAI/Anthropic-compatible HTTP server (FastAPI + uvicorn) with the
engine core in a child process. Engine options come from the engine config dataclasses, server options
from ServerConfig; `--api-key` defaults to $STRATA_API_KEY. Failures a user causes (a taken port, a model
the engine cannot load) end in one `strata: error:` line: the port is checked before the model loads, and
an engine that fails to start is reported without uvicorn's lifespan traceback. SIGTERM / Ctrl-C drain
the running requests first (strata/server/shutdown.py)."""

from __future__ import annotations

import argparse
import os
import socket

from strata.cli.options import add_engine_options, add_section_options, engine_config, section_config
from strata.server.config import ServerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI- and Anthropic-compatible HTTP API")
    add_engine_options(p)
    add_section_options(p, "server", ServerConfig)
    p.set_defaults(run=run)


def server_config(args: argparse.Namespace) -> ServerConfig:
    config = section_config(args, "server", ServerConfig)
    if config.api_key is None and os.environ.get("STRATA_API_KEY"):
        import dataclasses

        config = dataclasses.replace(config, api_key=os.environ["STRATA_API_KEY"])
    return config


def print_ready(state, host: str, port: int) -> None:
    base = f"http://{host}:{port}"
    info = state.client.info
    print(f"strata: model {state.model_name} ({info.get('architecture')}, {info.get('device')}, "
          f"{info.get('dtype')}, max_model_len {info.get('max_model_len')})", flush=True)
    print(f"strata: OpenAI API    {base}/v1  (chat/completions, completions, models)", flush=True)
    print(f"strata: Anthropic API {base}/v1/messages", flush=True)
    print(f"strata: status {base}/v1/status, metrics {base}/metrics, health {base}/health", flush=True)
    print(f"strata: ready at {base}", flush=True)


def check_port_free(host: str, port: int) -> None:
    """Bind and release (host, port) the way uvicorn will (SO_REUSEADDR), so a taken port is reported in
    a second, not after the model has loaded."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(address)
    except OSError as e:
        raise ValueError(f"cannot listen on {host}:{port} ({e.strerror or e}); is another server running there? "
                         f"stop it or pass --port") from None


class StartupFailed(ValueError):
    """The app's start-up (the engine loading the model) failed; main prints the message as one line."""


def report_startup_failure(app, failures: list[str]):
    """`app` as an ASGI app whose failed start-up reaches uvicorn without its traceback (uvicorn logs the
    lifespan's message whole): the last line, the error itself, is kept in `failures` for the CLI."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "lifespan":
            return await app(scope, receive, send)

        async def send_short(message):
            if message["type"] == "lifespan.startup.failed":
                lines = message.get("message", "").strip().splitlines()
                failures.append(lines[-1] if lines else "the server failed to start")
                message = {**message, "message": ""}
            await send(message)

        return await app(scope, receive, send_short)

    return wrapped


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from strata.server.app import create_app
    from strata.server.shutdown import FINAL_GRACE_S, DrainingServer

    engine = engine_config(args)
    server = server_config(args)
    check_port_free(server.host, server.port)
    print(f"strata: loading {engine.model or 'smollm2-135m'} in the engine process…", flush=True)
    app = create_app(engine, server, quiet_engine=False,
                     on_ready=lambda state: print_ready(state, server.host, server.port))
    failures: list[str] = []
    config = uvicorn.Config(report_startup_failure(app, failures), host=server.host, port=server.port,
                            log_level=server.log_level, timeout_graceful_shutdown=FINAL_GRACE_S)
    uvicorn_server = DrainingServer(config, app.state.strata)
    try:
        uvicorn_server.run()
    except SystemExit:
        if not failures:
            raise
    if failures:
        raise StartupFailed(failures[-1].removeprefix("RuntimeError: "))
    return 0
