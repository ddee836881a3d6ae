"""Fixtures: one real `strata serve` subprocess on a loopback port (bundled model, CPU, engine child
process, API key) shared by the server tests, and in-thread uvicorn servers for apps with a stand-in
engine.

The real server starts right after collection and the tests that need it run last, so the model loads
while the fast stand-in-engine tests run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

API_KEY = "test-key"
MODEL = "smollm2-135m"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, base_url: str, proc: subprocess.Popen | None = None) -> None:
        self.base_url, self.proc = base_url, proc
        self.headers = {"Authorization": f"Bearer {API_KEY}"}

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.base_url + path, headers=kw.pop("headers", self.headers), timeout=60, **kw)

    def post(self, path: str, json=None, **kw) -> httpx.Response:
        return httpx.post(self.base_url + path, json=json, headers=kw.pop("headers", self.headers), timeout=120, **kw)

    def status(self) -> dict:
        return self.get("/v1/status").json()


def wait_healthy(base_url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    raise TimeoutError(f"{base_url} did not become healthy in {timeout} s")


_LIVE: dict = {}


def _start_server(log_path: str) -> None:
    port = free_port()
    log = open(log_path, "w+")
    env = {**os.environ, "PYTHONPATH": ROOT, "STRATA_API_KEY": API_KEY}
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "serve", MODEL, "--device", "cpu",
                             "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "16",
                             "--port", str(port), "--keepalive-s", "1", "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    _LIVE.update(proc=proc, log=log, port=port)


def pytest_collection_modifyitems(session, config, items):
    needs_server = [item for item in items if "server" in getattr(item, "fixturenames", ())]
    if needs_server and not _LIVE:
        import tempfile

        _start_server(os.path.join(tempfile.mkdtemp(prefix="strata-serve-"), "serve.log"))
        items[:] = [item for item in items if item not in needs_server] + needs_server


def pytest_unconfigure(config):
    proc = _LIVE.get("proc")
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def server():
    proc, log = _LIVE["proc"], _LIVE["log"]
    base_url = f"http://127.0.0.1:{_LIVE['port']}"
    try:
        wait_healthy(base_url, 180, proc)
    except Exception:
        log.seek(0)
        print(log.read())
        raise
    return LiveServer(base_url, proc)


@contextlib.contextmanager
def thread_server(app):
    """uvicorn in a thread (the app's engine is still a child process)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 60)
        yield LiveServer(f"http://127.0.0.1:{port}")
    finally:
        srv.should_exit = True
        thread.join(15)


def fake_app(mode: str = "echo", **server_options):
    import functools

    from fake_engine import run_fake_engine
    from strata.config import EngineConfig
    from strata.server.app import create_app
    from strata.server.config import ServerConfig

    config = ServerConfig(api_key=API_KEY, **server_options)
    return create_app(EngineConfig(model=MODEL), config,
                      engine_target=functools.partial(run_fake_engine, mode=mode))


@pytest.fixture(scope="session")
def tool_server():
    """A stand-in engine that answers every request with a Qwen-style thinking + tool-call output."""
    with thread_server(fake_app("tool")) as live:
        yield live
