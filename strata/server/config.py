"""ServerConfig: the HTTP server's options (CLI flags are generated from these fields). Every limit a client
can hit is one of these fields, and its error names the flag (limits.py, middleware.py)."""

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
    max_body_bytes: int = _opt(4 << 20, "largest accepted request body in bytes, chunked or not (larger: 413)")
    max_messages: int = _opt(2048, "most messages in one chat request (more: 400)")
    max_prompt_chars: int = _opt(1 << 20, "most characters of text in one request's messages or prompt (more: 400)")
    max_stop_strings: int = _opt(64, "most stop strings (stop / stop_sequences) in one request (more: 400)")
    max_stop_chars: int = _opt(1024, "longest stop string in characters (longer: 400)")
    max_tools: int = _opt(128, "most tools in one request (more: 400)")
    max_schema_bytes: int = _opt(64 << 10, "largest JSON Schema of one tool or of response_format, in bytes of "
                                           "JSON (larger: 400)")
    max_prompts: int = _opt(64, "most prompts in one completions request (a list of them; more: 400)")
    max_n: int = _opt(8, "most choices (n) one chat or completion request may ask for (more: 400); they share "
                         "the prompt's KV blocks")
    max_queued_requests: int = _opt(256, "requests that may wait for an engine slot; beyond them a new request "
                                         "gets 429 with Retry-After")
    allowed_hosts: str = _opt("", "comma-separated Host header names accepted ('*': any); default: the loopback "
                                  "names when bound to a loopback address, else any (other Hosts: 421)")
    responses_max_stored: int = _opt(1024, "most /v1/responses results kept in memory for previous_response_id and GET "
                                           "(oldest dropped first; 0: none kept)")
    responses_ttl_s: float = _opt(3600.0, "seconds a stored /v1/responses response stays retrievable")
    sessions_dir: str = _opt("", "folder of the session files that POST /v1/sessions/save writes and /restore reads "
                                 "(names only, no paths; default: sessions off)")
    reasoning_budgets: str = _opt("", "thinking-token budgets of reasoning_effort / reasoning.effort over the defaults "
                                      "none=0,minimal=256,low=1024,medium=8192,high=none (none: no limit), e.g. "
                                      "'low=512,high=32768'")
    normalize_prompt_stamps: bool = _opt(True, "give Claude Code's per-request system prompt stamps (the values of "
                                               "cch= and cc_version=) a fixed value, so the prefix cache hits "
                                               "across turns")
    prepare_threads: int = _opt(1, "threads that check, render and tokenize requests off the event loop (a burst "
                                   "of large bodies waits for them; more take cores from a CPU engine)")
    drain_timeout_s: float = _opt(10.0, "on SIGTERM / Ctrl-C: how long running requests may finish before each "
                                        "stream is ended with an error event")
    keepalive_s: float = _opt(2.0, "SSE keep-alive comment interval while no token arrives")
    engine_hang_timeout_s: float = _opt(60.0, "end and restart an engine that sends nothing for this long")
    engine_start_timeout_s: float = _opt(600.0, "longest wait for the engine to load the model")
    engine_spare: str = _opt("auto", "keep a second engine loaded and idle, promoted at once when the engine dies "
                                     "(restart in well under a second): on, off, or auto (on when the engine "
                                     "runs on the CPU, where the spare costs host RAM only)")
    allowed_origins: str = _opt("", "comma-separated CORS origins (default: no CORS)")
    log_level: str = _opt("info", "uvicorn log level")
