"""AsyncEngineClient: the server's handle on the engine-core child process.

Owns the child's life: spawns it, routes its TokenDeltas to one asyncio queue per request, and
supervises it. If the child dies or sends nothing for `hang_timeout_s`, every in-flight request gets
an EngineDeadError, the child is killed and a new one started; later submits wait for it.
Imports no torch and no model code: the child process does that (spawn context).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field

from strata.config import EngineConfig
from strata.engine.process import run_engine
from strata.types import Request, TokenDelta

logger = logging.getLogger(__name__)

_WATCHDOG_S = 0.25
_MAX_RESTART_DELAY_S = 30.0


class EngineDeadError(RuntimeError):
    """The engine process died (or hung and was ended) while this request was in flight."""


class EngineUnavailableError(RuntimeError):
    """No engine is ready to take the request (starting, restarting or failed to start)."""


@dataclass
class EngineStats:
    restarts: int = 0
    state: str = "stopped"         # starting | ready | restarting | failed | stopped
    last_error: str | None = None
    status: dict = field(default_factory=dict)


class RequestStream:
    """One submitted request's deltas. `close()` (or leaving `async with`) aborts it in the engine
    unless it already finished."""

    def __init__(self, client: AsyncEngineClient, request_id: str, queue: asyncio.Queue) -> None:
        self.client, self.request_id, self._queue = client, request_id, queue
        self.finished = False

    async def next(self, timeout: float | None = None) -> TokenDelta | None:
        """The next delta; None when `timeout` passes first. Raises EngineDeadError."""
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None
        if isinstance(item, Exception):
            self.finished = True
            raise item
        self.finished = item.finished
        return item

    def close(self) -> None:
        self.client._queues.pop(self.request_id, None)
        if not self.finished:
            self.finished = True
            self.client.abort(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


class AsyncEngineClient:
    def __init__(self, config: EngineConfig, hang_timeout_s: float = 60.0, start_timeout_s: float = 600.0,
                 quiet: bool = True, target=run_engine) -> None:
        """`target(config, conn, quiet)` is the child's entry point: `run_engine`, or a stand-in in tests."""
        self.config, self.hang_timeout_s, self.start_timeout_s, self.quiet = \
            config, hang_timeout_s, start_timeout_s, quiet
        self.target = target
        self.info: dict = {}
        self.stats = EngineStats()
        self._queues: dict[str, asyncio.Queue] = {}
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None
        self._generation = 0
        self._last_message = 0.0
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.Task | None = None
        self._restarting: asyncio.Task | None = None
        self._stopping = False

    # ---- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the engine and wait until it has loaded the model (raises if it cannot)."""
        self._loop = asyncio.get_running_loop()
        await self._spawn()
        await asyncio.wait_for(self._ready.wait(), self.start_timeout_s)
        if self.stats.state != "ready":
            raise RuntimeError(f"the engine failed to start: {self.stats.last_error}")
        self._watchdog = asyncio.create_task(self._watch())

    async def shutdown(self) -> None:
        self._stopping = True
        for task in (self._watchdog, self._restarting):
            if task is not None:
                task.cancel()
        self._fail_all(EngineDeadError("the server is shutting down"))
        await asyncio.to_thread(self._stop_process, 5.0)
        self.stats.state = "stopped"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def num_in_flight(self) -> int:
        return len(self._queues)

    # ---- requests --------------------------------------------------------------------------------

    async def submit(self, request: Request, wait_s: float | None = None) -> RequestStream:
        """Queue a validated request in the engine; waits up to `wait_s` for a (re)starting engine."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), wait_s if wait_s is not None else self.start_timeout_s)
            except TimeoutError:
                pass
        if self.stats.state != "ready":
            raise EngineUnavailableError(f"the engine is {self.stats.state}; retry shortly")
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request.request_id] = queue
        stream = RequestStream(self, request.request_id, queue)
        if not self._send(("add", request)):
            stream.close()
            raise EngineUnavailableError("the engine is restarting; retry shortly")
        return stream

    def abort(self, request_id: str) -> None:
        self._queues.pop(request_id, None)
        self._send(("abort", request_id))

    # ---- messages from the child -----------------------------------------------------------------

    def _send(self, message: tuple) -> bool:
        if self._conn is None or self.stats.state != "ready":
            return False
        try:
            self._conn.send(message)
            return True
        except (OSError, ValueError):
            return False

    def _read(self, conn, generation: int) -> None:
        """Reader thread: one per child; hands every message to the event loop."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                self._loop.call_soon_threadsafe(self._on_exit, generation, "the engine process exited")
                return
            self._loop.call_soon_threadsafe(self._on_message, generation, message)

    def _on_message(self, generation: int, message: tuple) -> None:
        if generation != self._generation:
            return
        self._last_message = time.monotonic()
        kind = message[0]
        if kind == "step":
            for delta in message[1]:
                queue = self._queues.get(delta.request_id)
                if queue is not None:
                    queue.put_nowait(delta)
            self.stats.status = message[2]
        elif kind == "ready":
            self.info = message[1]
            self.stats.status = self.info["status"]
            self.stats.state = "ready"
            self._ready.set()
        elif kind == "fatal":
            self.stats.last_error = message[1]
            logger.error("engine failed to start: %s", message[1])

    def _on_exit(self, generation: int, reason: str) -> None:
        if generation != self._generation or self._stopping:
            return
        if self.stats.state == "starting":
            self.stats.state = "failed"   # died while loading: start() or _restart() sees it
            self.stats.last_error = self.stats.last_error or reason
            self._ready.set()
            return
        self._engine_lost(reason)

    # ---- supervision -----------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(_WATCHDOG_S)
            if self.stats.state != "ready":
                continue
            if self._proc is not None and not self._proc.is_alive():
                self._engine_lost("the engine process died")
            elif time.monotonic() - self._last_message > self.hang_timeout_s:
                self._engine_lost(f"the engine did not respond for {self.hang_timeout_s:.0f} s")

    def _engine_lost(self, reason: str) -> None:
        if self.stats.state != "ready":
            return
        logger.error("%s; failing %d in-flight requests and restarting it", reason, len(self._queues))
        self.stats.last_error = reason
        self.stats.state = "restarting"
        self._ready.clear()
        self._generation += 1
        self._fail_all(EngineDeadError(reason))
        self._restarting = asyncio.create_task(self._restart())

    def _fail_all(self, error: Exception) -> None:
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            queue.put_nowait(error)

    async def _restart(self) -> None:
        delay = 1.0
        while not self._stopping:
            await asyncio.to_thread(self._stop_process, 0.0)
            self.stats.restarts += 1
            await self._spawn()
            try:
                await asyncio.wait_for(self._ready.wait(), self.start_timeout_s)
            except TimeoutError:
                pass
            if self.stats.state == "ready":
                logger.warning("engine restarted (pid %s)", self.pid)
                return
            self.stats.state = "restarting"
            self._ready.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RESTART_DELAY_S)

    async def _spawn(self) -> None:
        self._generation += 1
        self.stats.state = "starting"
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(target=self.target, args=(self.config, child_conn, self.quiet),
                                 name="strata-engine", daemon=True)
        await asyncio.to_thread(proc.start)
        child_conn.close()  # the child's end lives in the child only: its death closes the pipe
        self._proc, self._conn = proc, parent_conn
        self._last_message = time.monotonic()
        threading.Thread(target=self._read, args=(parent_conn, self._generation), daemon=True,
                         name="strata-engine-reader").start()

    def _stop_process(self, grace_s: float) -> None:
        proc, conn = self._proc, self._conn
        if proc is None:
            return
        if grace_s > 0 and proc.is_alive():
            try:
                conn.send(("shutdown",))
            except (OSError, ValueError):
                pass
            proc.join(grace_s)
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        try:
            conn.close()
        except OSError:
            pass
