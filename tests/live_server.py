"""Live servers for the HTTP and browser tests: `strata serve` subprocesses on loopback ports (bundled
model, CPU, engine child process, API key), uvicorn in a thread for apps with a stand-in engine, and
the small client wrapper the tests use."""

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

API_KEY = "test-key"
MODEL = "smollm2-135m"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, base_url: str, proc: subprocess.Popen | None = None, log=None) -> None:
        self.base_url, self.proc, self.log = base_url, proc, log  # log: the subprocess's output file
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


def start_serve(registry: dict, log_prefix: str, *options: str, model: str = MODEL, keepalive: bool = True) -> None:
    """Start `strata serve` (the bundled model unless `model` names another, CPU, API key) as a subprocess;
    its process, log and port go into `registry`. Started right after collection so the model loads while
    quick tests run. `keepalive`: SSE keepalive comments every second."""
    import tempfile

    port = free_port()
    log = open(os.path.join(tempfile.mkdtemp(prefix=log_prefix), "serve.log"), "w+")
    env = {**os.environ, "PYTHONPATH": ROOT, "STRATA_API_KEY": API_KEY}
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli.main", "serve", model, "--device", "cpu",
                             "--dtype", "float32", "--port", str(port), *(("--keepalive-s", "1") if keepalive else ()),
                             "--log-level", "warning", *options],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    registry.update(proc=proc, log=log, port=port)


def stop_serve(registry: dict) -> None:
    proc = registry.get("proc")
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def attach(registry: dict) -> LiveServer:
    """Wait until the started server answers /health (printing its log if it never does)."""
    proc, log = registry["proc"], registry["log"]
    base_url = f"http://127.0.0.1:{registry['port']}"
    try:
        wait_healthy(base_url, 180, proc)
    except Exception:
        log.seek(0)
        print(log.read())
        raise
    return LiveServer(base_url, proc, log)


@contextlib.contextmanager
def served(model: str, log_prefix: str, *options: str):
    """`strata serve model` (a folder of the tests' own) for a with-block: started, waited for, stopped."""
    registry: dict = {}
    start_serve(registry, log_prefix, *options, model=model, keepalive=False)
    try:
        yield attach(registry)
    finally:
        stop_serve(registry)


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
