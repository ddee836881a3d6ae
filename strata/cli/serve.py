"""`strata serve [MODEL]`: the OpenAI/Anthropic-compatible HTTP server (FastAPI + uvicorn) with the
engine core in a child process. Engine options come from the engine config dataclasses, server options
from ServerConfig; `--api-key` defaults to $STRATA_API_KEY."""

from __future__ import annotations

import argparse
import os

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


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from strata.server.app import create_app

    engine = engine_config(args)
    server = server_config(args)
    print(f"strata: loading {engine.model or 'smollm2-135m'} in the engine process…", flush=True)
    app = create_app(engine, server, quiet_engine=False,
                     on_ready=lambda state: print_ready(state, server.host, server.port))
    uvicorn.run(app, host=server.host, port=server.port, log_level=server.log_level,
                timeout_graceful_shutdown=5)
    return 0
