"""AsyncEngineClient: the server's handle on the engine-core child process.

Owns the child's life: spawns it, routes its TokenDeltas to one asyncio queue per request, and
supervises it. If the child dies, the requests that had produced no output yet (queued, or reading
their prompt) are kept and re-submitted to the next engine; those with output get an EngineDeadError.
A child that sends nothing for `hang_timeout_s` is ended and every request fails (one of them may be
what hangs it). Restarts are quick when a spare engine is kept: a second child, loaded and idle,
promoted at once (its own replacement then loads in the background). Later submits wait for the
engine. Imports no torch and no model code: the child process does that (spawn context).
"""

from __future__ import annotations

import asyncio
import itertools
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
MAX_RESUBMITS = 2  # a request that was in flight at this many engine deaths fails: it may be the cause


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
    resubmitted: int = 0           # requests handed to a new engine after the one they waited in died
    spare: str = "off"             # the spare engine: off | starting | ready


@dataclass(eq=False)
class _Child:
    """One engine process and the connection to it; `generation` tags its messages."""
    proc: object
    conn: object
    generation: int
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    info: dict | None = None
    error: str | None = None


@dataclass
class _InFlight:
    request: Request
    queue: asyncio.Queue
    has_output: bool = False
    resubmits: int = 0


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
        if not self.finished:
            self.finished = True
            self.client.abort(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


class AsyncEngineClient:
    def __init__(self, config: EngineConfig, hang_timeout_s: float = 60.0, start_timeout_s: float = 600.0,
                 quiet: bool = True, target=run_engine, spare: str = "off") -> None:
        """`target(config, conn, quiet)` is the child's entry point: `run_engine`, or a stand-in in tests.
        `spare`: on | off | auto (on when the engine runs on the CPU, where it costs host RAM only)."""
        if spare not in ("on", "off", "auto"):
            raise ValueError(f"engine spare must be on, off or auto, got {spare!r}")
        self.config, self.hang_timeout_s, self.start_timeout_s, self.quiet = \
            config, hang_timeout_s, start_timeout_s, quiet
        self.target, self.spare_mode = target, spare
        self.info: dict = {}
        self.stats = EngineStats()
        self._requests: dict[str, _InFlight] = {}
        self._ctx = mp.get_context("spawn")
        self._child: _Child | None = None
        self._spare: _Child | None = None
        self._generation = 0
        self._last_message = 0.0
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.Task | None = None
        self._restarting: asyncio.Task | None = None
        self._spare_task: asyncio.Task | None = None
        self._live: set[_Child] = set()   # every child started and not yet stopped (shutdown ends them all)
        self._calls: dict[int, asyncio.Future] = {}  # session saves / restores waiting for the engine's reply
        self._call_ids = itertools.count()
        self._stopping = False

    # ---- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the engine and wait until it has loaded the model (raises if it cannot)."""
        self._loop = asyncio.get_running_loop()
        self._child = await self._spawn()
        self.stats.state = "starting"
        await self._wait_ready(self._child)
        if self.stats.state != "ready":
            raise RuntimeError(f"the engine failed to start: {self.stats.last_error}")
        self._watchdog = asyncio.create_task(self._watch())
        self._start_spare()

    async def shutdown(self) -> None:
        self._stopping = True
        for task in (self._watchdog, self._restarting, self._spare_task):
            if task is not None:
                task.cancel()
        self.end_all("the server is shutting down")
        # a child still loading reads no message until it has loaded: it is killed, not asked
        await asyncio.gather(*(asyncio.to_thread(self._stop_process, c, 5.0 if c.info is not None else 0.0)
                               for c in list(self._live)))
        self.stats.state = "stopped"

    def end_all(self, reason: str) -> None:
        """Fail every request in flight with EngineDeadError(reason): streams end with an error event."""
        requests, self._requests = self._requests, {}
        for entry in requests.values():
            entry.queue.put_nowait(EngineDeadError(reason))
        self._fail_calls(reason)

    @property
    def pid(self) -> int | None:
        return self._child.proc.pid if self._child is not None else None

    @property
    def child_pids(self) -> list[int]:
        return [c.proc.pid for c in (self._child, self._spare) if c is not None]

    @property
    def num_in_flight(self) -> int:
        return len(self._requests)

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
        self._requests[request.request_id] = _InFlight(request, queue)
        stream = RequestStream(self, request.request_id, queue)
        if not self._send(("add", request)):
            stream.close()
            raise EngineUnavailableError("the engine is restarting; retry shortly")
        return stream

    def abort(self, request_id: str) -> None:
        if self._requests.pop(request_id, None) is not None:
            self._send(("abort", request_id))

    async def session(self, action: str, args: dict) -> dict:
        """Save or restore a session in the engine (strata.engine.sessions) -> its reply. Raises
        EngineUnavailableError, or EngineDeadError when the engine dies first."""
        if self.stats.state != "ready":
            raise EngineUnavailableError(f"the engine is {self.stats.state}; retry shortly")
        call_id = next(self._call_ids)
        self._calls[call_id] = future = self._loop.create_future()
        try:
            if not self._send(("session", call_id, action, args)):
                raise EngineUnavailableError("the engine is restarting; retry shortly")
            return await future
        finally:
            self._calls.pop(call_id, None)

    def _fail_calls(self, reason: str) -> None:
        for future in self._calls.values():
            if not future.done():
                future.set_exception(EngineDeadError(reason))

    # ---- messages from the children --------------------------------------------------------------

    def _send(self, message: tuple) -> bool:
        if self._child is None or self.stats.state != "ready":
            return False
        try:
            self._child.conn.send(message)
            return True
        except (OSError, ValueError):
            return False

    def _read(self, conn, generation: int) -> None:
        """Reader thread: one per child; hands every message to the event loop (until that loop is closed: a
        server shutting down no longer hears of its engine's exit)."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                self._hand_over(self._on_exit, generation, "the engine process exited")
                return
            if not self._hand_over(self._on_message, generation, message):
                return

    def _hand_over(self, callback, *args) -> bool:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
            return True
        except RuntimeError:  # the event loop is closed
            return False

    def _on_message(self, generation: int, message: tuple) -> None:
        child = self._child_of(generation)
        if child is None:
            return
        kind = message[0]
        if kind == "ready":
            child.info = message[1]
            child.ready.set()
        elif kind == "fatal":
            child.error = message[1]
            logger.error("engine failed to start: %s", message[1])
        elif kind == "step" and child is self._child:
            self._last_message = time.monotonic()
            for delta in message[1]:
                entry = self._requests.get(delta.request_id)
                if entry is None:
                    continue
                entry.has_output = entry.has_output or bool(delta.new_token_ids or delta.new_text or delta.finished)
                if delta.finished:
                    del self._requests[delta.request_id]
                entry.queue.put_nowait(delta)
            self.stats.status = message[2]
        elif kind == "session" and child is self._child:
            future = self._calls.get(message[1])
            if future is not None and not future.done():
                future.set_result(message[2])

    def _child_of(self, generation: int) -> _Child | None:
        for child in (self._child, self._spare):
            if child is not None and child.generation == generation:
                return child
        return None

    def _on_exit(self, generation: int, reason: str) -> None:
        child = self._child_of(generation)
        if child is None or self._stopping:
            return
        child.error = child.error or reason
        if not child.ready.is_set():
            child.ready.set()   # died while loading: whoever waits for it sees no info
            return
        if child is self._spare:
            logger.warning("the spare engine exited; a new one starts after the next restart")
            self._spare, self.stats.spare = None, "off"
            return
        self._engine_lost(reason, resubmit=True)

    # ---- supervision -----------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(_WATCHDOG_S)
            if self.stats.state != "ready":
                continue
            if not self._child.proc.is_alive():
                self._engine_lost("the engine process died", resubmit=True)
            elif time.monotonic() - self._last_message > self.hang_timeout_s:
                self._engine_lost(f"the engine did not respond for {self.hang_timeout_s:.0f} s", resubmit=False)

    def _engine_lost(self, reason: str, resubmit: bool) -> None:
        """Fail the requests with output (all of them after a hang) and keep the rest for the next engine."""
        if self.stats.state != "ready":
            return
        self.stats.last_error = reason
        self.stats.state = "restarting"
        self._ready.clear()
        failed = 0
        for request_id, entry in list(self._requests.items()):
            if resubmit and not entry.has_output and entry.resubmits < MAX_RESUBMITS:
                continue
            del self._requests[request_id]
            entry.queue.put_nowait(EngineDeadError(reason))
            failed += 1
        logger.error("%s; failing %d in-flight requests with output, re-submitting %d to the next engine",
                     reason, failed, len(self._requests))
        self._fail_calls(reason)
        self._restarting = asyncio.create_task(self._restart())

    async def _restart(self) -> None:
        delay = 1.0
        while not self._stopping:
            dead, self._child = self._child, None
            await asyncio.to_thread(self._stop_process, dead, 0.0)
            self.stats.restarts += 1
            if self._spare is not None:  # loaded (or loading): promote it
                self._child, self._spare, self.stats.spare = self._spare, None, "off"
            else:
                self._child = await self._spawn()
            await self._wait_ready(self._child)
            if self.stats.state == "ready":
                logger.warning("engine restarted (pid %s)", self.pid)
                self._resubmit()
                self._start_spare()
                return
            self.stats.state = "restarting"
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RESTART_DELAY_S)

    def _resubmit(self) -> None:
        for request_id, entry in list(self._requests.items()):
            entry.resubmits += 1
            if self._send(("add", entry.request)):
                self.stats.resubmitted += 1
            else:
                del self._requests[request_id]
                entry.queue.put_nowait(EngineDeadError("the engine is restarting"))

    async def _wait_ready(self, child: _Child) -> None:
        """Wait for `child` to load; on success it becomes the engine that serves, else state `failed`."""
        try:
            await asyncio.wait_for(child.ready.wait(), self.start_timeout_s)
        except TimeoutError:
            child.error = child.error or f"the engine did not load in {self.start_timeout_s:.0f} s"
        if child.info is None:
            self.stats.state = "failed"
            self.stats.last_error = child.error or "the engine process exited"
            return
        self.info = child.info
        self.stats.status = child.info["status"]
        self._last_message = time.monotonic()
        self.stats.state = "ready"
        self._ready.set()

    def _start_spare(self) -> None:
        wanted = self.spare_mode == "on" or (self.spare_mode == "auto" and self.info.get("device") == "cpu")
        if wanted and self._spare is None and not self._stopping:
            self._spare_task = asyncio.create_task(self._load_spare())

    async def _load_spare(self) -> None:
        self.stats.spare = "starting"
        self._spare = spare = await self._spawn()
        try:
            await asyncio.wait_for(spare.ready.wait(), self.start_timeout_s)
        except TimeoutError:
            pass
        if self._spare is spare:
            self.stats.spare = "ready" if spare.info is not None else "off"

    async def _spawn(self) -> _Child:
        self._generation += 1
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(target=self.target, args=(self.config, child_conn, self.quiet),
                                 name="strata-engine", daemon=True)
        child = _Child(proc, parent_conn, self._generation)
        self._live.add(child)  # before it starts: a shutdown that cancels this spawn still ends it
        await asyncio.to_thread(proc.start)
        child_conn.close()  # the child's end lives in the child only: its death closes the pipe
        threading.Thread(target=self._read, args=(parent_conn, child.generation), daemon=True,
                         name="strata-engine-reader").start()
        return child

    def _stop_process(self, child: _Child | None, grace_s: float) -> None:
        if child is None:
            return
        self._live.discard(child)
        proc, conn = child.proc, child.conn
        if proc.pid is None:  # never started (a spawn cancelled by shutdown before proc.start)
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
