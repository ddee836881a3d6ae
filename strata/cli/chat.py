"""`strata chat [--url URL]`: a terminal chat (rich) that talks HTTP to a Strata server, streaming
tokens as they come and showing the model's thinking dimmed. With no server at --url (default
http://127.0.0.1:8080) it starts one in-process on a free port (engine in its child process) and stops
it on exit. Commands: /reset, /think off|low|medium|high, /system TEXT, /quit."""

from __future__ import annotations

import argparse
import json

from strata.cli.options import add_engine_options, engine_config

DEFAULT_URL = "http://127.0.0.1:8080"
_EFFORTS = {"off": "none", "low": "low", "medium": "medium", "high": "high"}
HELP = "/reset clears, /think off|low|medium|high, /system TEXT, /quit leaves"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="terminal chat with a Strata server (starts one if none is running)")
    add_engine_options(p)
    p.add_argument("--url", default=None, help=f"server to talk to (default: {DEFAULT_URL}, else start one)")
    p.add_argument("--api-key", default=None, help="API key of the server (default: $STRATA_API_KEY)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    p.set_defaults(run=run)


class Session:
    """The conversation and its settings; `request_body` is what goes to /v1/chat/completions."""

    def __init__(self, model: str, system: str | None, args: argparse.Namespace) -> None:
        self.model, self.system, self.args = model, system, args
        self.effort: str | None = None
        self.history: list[dict] = []

    def command(self, text: str) -> str | None:
        """Apply a /command; returns a note to print, or None if `text` is not a command."""
        name, _, rest = text.partition(" ")
        if name == "/reset":
            self.history = []
            return "(conversation cleared)"
        if name == "/think":
            if rest.strip() not in _EFFORTS:
                return "usage: /think off|low|medium|high"
            self.effort = _EFFORTS[rest.strip()]
            return f"(thinking {rest.strip()})"
        if name == "/system":
            self.system = rest.strip() or None
            return f"(system prompt {'set' if self.system else 'cleared'})"
        if name.startswith("/"):
            return f"unknown command {name}; {HELP}"
        return None

    def request_body(self) -> dict:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + self.history
        body = {"model": self.model, "messages": messages, "stream": True, "max_tokens": self.args.max_tokens,
                "temperature": self.args.temperature, "top_p": self.args.top_p}
        if self.effort is not None:
            body["reasoning_effort"] = self.effort
        return body


def stream_chat(http, url: str, body: dict):
    """Yield ("reasoning" | "content", text) from a streaming chat completion; raise on an error event."""
    with http.stream("POST", url + "/v1/chat/completions", json=body, timeout=None) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(response.json().get("error", {}).get("message", response.text))
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("reasoning_content"):
                    yield "reasoning", delta["reasoning_content"]
                if delta.get("content"):
                    yield "content", delta["content"]


def run(args: argparse.Namespace) -> int:
    import os

    import httpx
    from rich.console import Console

    console = Console(highlight=False)
    api_key = args.api_key or os.environ.get("STRATA_API_KEY")
    http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    url, server = (args.url or DEFAULT_URL).rstrip("/"), None
    if not _is_up(http, url):
        if args.url:
            console.print(f"[red]no Strata server at {url}[/red]")
            return 1
        with console.status("no server running: starting one in-process (loading the model)…"):
            server, url = start_local_server(args)
    try:
        model = http.get(url + "/v1/models").raise_for_status().json()["data"][0]["id"]
        session = Session(model, args.system, args)
        console.print(f"[bold]strata chat[/bold] — {model} at {url}. {HELP}.")
        _loop(console, http, url, session)
    except httpx.HTTPError as e:
        console.print(f"[red]lost the server at {url}: {e}[/red]")
        return 1
    finally:
        if server is not None:
            stop_local_server(server)
    return 0


def _loop(console, http, url: str, session: Session) -> None:
    while True:
        try:
            text = console.input("[bold green]> [/bold green]").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return
        if text in ("/quit", "/exit"):
            return
        note = session.command(text) if text.startswith("/") else None
        if note is not None:
            console.print(f"[dim]{note}[/dim]")
            continue
        if not text:
            continue
        session.history.append({"role": "user", "content": text})
        reply = []
        try:
            for kind, piece in stream_chat(http, url, session.request_body()):
                console.print(piece, end="", style="dim" if kind == "reasoning" else None, markup=False)
                if kind == "content":
                    reply.append(piece)
        except KeyboardInterrupt:
            console.print("[dim] (stopped)[/dim]", end="")
        except (RuntimeError, OSError) as e:
            console.print(f"[red]error: {e}[/red]", end="")
        console.print()
        session.history.append({"role": "assistant", "content": "".join(reply)})


def _is_up(http, url: str) -> bool:
    import httpx

    try:
        return http.get(url + "/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def start_local_server(args: argparse.Namespace):
    """uvicorn in a background thread of this process (the engine runs in its child process); returns
    (the uvicorn Server, its thread) and the URL. Raises StartupFailed (one line) if the engine cannot
    start."""
    import socket
    import threading
    import time

    import httpx
    import uvicorn

    from strata.cli.serve import StartupFailed, report_startup_failure
    from strata.server.app import create_app
    from strata.server.config import ServerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    failures: list[str] = []
    app = report_startup_failure(create_app(engine_config(args), ServerConfig(port=port)), failures)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="strata-chat-server")
    thread.start()
    url = f"http://127.0.0.1:{port}"
    while not server.started:
        if not thread.is_alive():
            raise StartupFailed((failures or ["the in-process server failed to start"])[-1]
                                .removeprefix("RuntimeError: "))
        time.sleep(0.2)
    httpx.get(url + "/health", timeout=5).raise_for_status()
    return (server, thread), url


def stop_local_server(server) -> None:
    """Let uvicorn shut down (the app stops the engine process) before the interpreter exits: a daemon
    thread cut mid-shutdown prints tracebacks and can leave the engine process behind."""
    uvicorn_server, thread = server
    uvicorn_server.should_exit = True
    thread.join(timeout=15)
