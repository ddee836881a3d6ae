"""ServerConfig: the HTTP server's options (CLI flags are generated from these fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServerConfig:
    host: str = _opt("127.0.0.1", "address to bind")
    port: int = _opt(8080, "port to bind")
    api_key: str | None = _opt(None, "require this key (Authorization: Bearer or x-api-key) on every endpoint "
                                     "but /health; default: $STRATA_API_KEY, else no auth")
    served_model_name: str | None = _opt(None, "model name reported by /v1/models (default: the model spec)")
    max_body_bytes: int = _opt(4 << 20, "largest accepted request body in bytes (larger: 413)")
    keepalive_s: float = _opt(2.0, "SSE keep-alive comment interval while no token arrives")
    engine_hang_timeout_s: float = _opt(60.0, "end and restart an engine that sends nothing for this long")
    engine_start_timeout_s: float = _opt(600.0, "longest wait for the engine to load the model")
    allowed_origins: str = _opt("", "comma-separated CORS origins (default: no CORS)")
    log_level: str = _opt("info", "uvicorn log level")
