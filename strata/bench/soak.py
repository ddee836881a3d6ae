"""Soak benchmark: a `strata serve` subprocess under N mixed requests (OpenAI chat and completions, Anthropic
messages; streaming and not) at a fixed concurrency, with a fraction of clients that disconnect mid-stream
and engine processes killed (SIGKILL) at even intervals. Every request is classified: ok, disconnected (on
purpose), 503 (the documented answer of a request that had output when its engine died), or a failure
(any other status, a stream without its final event, a client error or a request past its timeout: a
hang). At the end, with the server idle: no slot, KV block, queued or in-flight request may be left, and
the server must exit cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import httpx

from strata.bench.result import percentiles

API_KEY = "soak-key"
PROMPTS = ["Tell me a story.", "What is the capital of France?", "Count to ten.", "Name three colours.",
           "Write a haiku about the sea.", "Why is the sky blue?"]
KINDS = ("chat_stream", "chat", "completion_stream", "completion", "messages_stream", "messages")


def _request(kind: str, model: str, prompt: str, max_tokens: int) -> tuple[str, dict]:
    stream = kind.endswith("_stream")
    if kind.startswith("completion"):
        return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": stream}
    path = "/v1/messages" if kind.startswith("messages") else "/v1/chat/completions"
    return path, {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                  "stream": stream}


def _stream_outcome(path: str, lines: list[str]) -> str:
    """ok: the stream ended with its API's final event; 503: with a 503 error event; else a failure."""
    if path == "/v1/messages":
        if lines and lines[-1].startswith("data: ") and '"message_stop"' in lines[-1]:
            return "ok"
        if len(lines) >= 2 and lines[-2] == "event: error":
            return "503" if '"overloaded_error"' in lines[-1] else "failure:" + lines[-1][:200]
        return "failure: no final event"
    data = [line[6:] for line in lines if line.startswith("data: ")]
    if not data or data[-1] != "[DONE]":
        return "failure: no [DONE]"
    if len(data) >= 2 and '"error"' in data[-2]:
        return "503" if json.loads(data[-2])["error"].get("code") == 503 else "failure:" + data[-2][:200]
    return "ok"


async def _one(client: httpx.AsyncClient, kind: str, model: str, rng: random.Random, max_tokens: int,
               disconnect: bool, timeout_s: float) -> str:
    path, body = _request(kind, model, rng.choice(PROMPTS), rng.randint(1, max_tokens))
    try:
        async with asyncio.timeout(timeout_s):
            if not body["stream"]:
                response = await client.post(path, json=body)
                return "ok" if response.status_code == 200 else str(response.status_code)
            async with client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    return str(response.status_code)
                lines = []
                async for line in response.aiter_lines():
                    if line:
                        lines.append(line)
                    if disconnect and len(lines) >= 2:
                        return "disconnected"  # leaving the block closes the connection mid-stream
                return _stream_outcome(path, lines)
    except TimeoutError:
        return "failure: hang"
    except httpx.HTTPError as e:
        return f"failure: {type(e).__name__}: {e}"


class Server:
    def __init__(self, model: str, serve_args: list[str]) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(tempfile.mkdtemp(prefix="strata-soak-"), "serve.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "serve", *([model] if model else []),
                                      "--port", str(self.port), "--api-key", API_KEY, "--log-level", "warning",
                                      *serve_args], stdout=self.log, stderr=subprocess.STDOUT)
        self.headers = {"Authorization": f"Bearer {API_KEY}"}

    def status(self) -> dict:
        return httpx.get(self.url + "/v1/status", headers=self.headers, timeout=10).json()

    def healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float) -> float:
        started = time.monotonic()
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the server did not become healthy; log: {self.log_path}")
            time.sleep(0.05)
        return time.monotonic() - started

    def stop(self) -> tuple[int, float]:
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, time.monotonic() - started


async def _kill_engine(server: Server) -> float:
    """SIGKILL the engine; seconds until /health answers 200 again."""
    pid = (await asyncio.to_thread(server.status))["engine"]["pid"]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    await asyncio.sleep(0.05)
    await asyncio.to_thread(server.wait_healthy, 120)
    return time.monotonic() - killed


async def soak(server: Server, num_requests: int, concurrency: int, disconnect_fraction: float, engine_kills: int,
               max_tokens: int, seed: int, timeout_s: float, progress=None) -> dict:
    rng = random.Random(seed)
    status = server.status()
    model = status["model"]
    plan = [(rng.choice(KINDS), rng.random() < disconnect_fraction) for _ in range(num_requests)]
    # a disconnect needs a stream to leave
    plan = [(kind if not disconnect or kind.endswith("_stream") else kind + "_stream", disconnect)
            for kind, disconnect in plan]
    kill_at = {num_requests * (k + 1) // (engine_kills + 1) for k in range(engine_kills)}
    outcomes: list[str] = []
    restarts_s: list[float] = []
    kills: list[asyncio.Task] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, limits=limits, timeout=None) as client:
        async def run(i: int, kind: str, disconnect: bool) -> None:
            async with gate:
                request_rng = random.Random(seed * 1_000_003 + i)
                outcomes.append(await _one(client, kind, model, request_rng, max_tokens, disconnect, timeout_s))
            if len(outcomes) in kill_at:
                kill_at.discard(len(outcomes))
                kills.append(asyncio.create_task(_kill_engine(server)))
            if progress is not None:
                progress(len(outcomes))

        started = time.monotonic()
        await asyncio.gather(*(run(i, kind, disconnect) for i, (kind, disconnect) in enumerate(plan)))
        duration = time.monotonic() - started
        restarts_s = [await k for k in kills]
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return {"duration_s": duration, "outcomes": counts, "restart_to_health_s": restarts_s,
            "restart_to_health_s_percentiles": percentiles(restarts_s) if restarts_s else {},
            "failures": sum(n for o, n in counts.items() if o not in ("ok", "disconnected", "503"))}


def idle_leaks(server: Server, timeout_s: float = 30.0) -> dict:
    """With no client left, the engine must return every slot and block and the server forget every request."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = server.status()
        leaks = {"slots_running": s["slots"]["running"], "slots_not_free": s["slots"]["total"] - s["slots"]["free"],
                 "kv_blocks_not_free": s["kv_blocks"]["total"] - s["kv_blocks"]["free"],
                 "queued": s["queue"]["waiting"], "in_flight_requests": s["in_flight_requests"]}
        if not any(leaks.values()) or time.monotonic() > deadline:
            return {**leaks, "engine": s["engine"]}
        time.sleep(0.5)


def run_soak(model: str, serve_args: list[str], num_requests: int, concurrency: int, disconnect_fraction: float,
             engine_kills: int, max_tokens: int, seed: int, timeout_s: float) -> dict:
    from strata.bench.serve import request_progress

    server = Server(model, serve_args)
    try:
        with request_progress() as bar:
            task = bar.add_task("starting the server", total=None)
            startup_s = server.wait_healthy(900)
            bar.update(task, description="soak", total=num_requests, completed=0)
            result = asyncio.run(soak(server, num_requests, concurrency, disconnect_fraction, engine_kills,
                                      max_tokens, seed, timeout_s,
                                      progress=lambda n: bar.update(task, completed=n)))
        result["leaks"] = idle_leaks(server)
    finally:
        exit_code, exit_s = server.stop()
    server.log.seek(0)
    log = server.log.read()
    result.update(startup_s=startup_s, shutdown_exit_code=exit_code, shutdown_s=exit_s,
                  tracebacks_in_log=log.count("Traceback"), server_log=server.log_path,
                  config={"model": model, "serve_args": serve_args, "num_requests": num_requests,
                          "concurrency": concurrency, "disconnect_fraction": disconnect_fraction,
                          "engine_kills": engine_kills, "max_tokens": max_tokens, "seed": seed,
                          "request_timeout_s": timeout_s})
    return result
