"""Session saves and restores in flight in the engine process (strata.engine.sessions does the work).
Each job is a generator of steps, each run where it must: LOOP steps on the engine loop with the caches
settled (no step in flight, queued copies done), LOOP_ANY steps on the loop as they come, THREAD steps
on one worker thread while the loop keeps serving. The loop calls `run()` between its steps; while
requests run, one call spends about max(LOOP_SLICE_S, STEP_SHARE x the last step's time) on session
steps (each copies one tensor at most), so a save or restore slows the running requests' steps by about
a tenth, never stalls them for its whole size.
Replies are plain dicts: {"ok": True, "num_tokens", "bytes", "seconds", "loop_seconds",
"longest_loop_step_seconds"} or {"ok": False, "status": HTTP status, "error": message}.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from strata.engine import sessions
from strata.engine.sessions import SessionError

logger = logging.getLogger(__name__)

LOOP, LOOP_ANY, THREAD = "loop", "loop_any", "thread"
LOOP_SLICE_S = 0.005   # session work per loop call while requests run: at least this, ...
STEP_SHARE = 0.1       # ... or this share of the time since the last call (about one engine step)
Step = tuple[str, Callable[[], object]]


@dataclass
class _Job:
    call_id: int
    steps: Generator[Step, object, dict]
    started: float
    loop_seconds: float = 0.0
    longest_loop_step: float = 0.0


class SessionJobs:
    def __init__(self, engine) -> None:
        self.engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="strata-session")
        self._on_thread: dict[Future, _Job] = {}
        self._on_loop: deque[tuple[_Job, str, Callable[[], object]]] = deque()
        self._replies: list[tuple[int, dict]] = []
        self._fingerprint = self._thread.submit(sessions.fingerprint, engine)  # reads the weight files' heads
        self._last_run = time.perf_counter()

    @property
    def busy(self) -> bool:
        return bool(self._on_thread or self._on_loop or self._replies)

    def submit(self, call_id: int, action: str, args: dict) -> None:
        jobs = {"save": self._save, "restore": self._restore}
        if action not in jobs:
            self._replies.append((call_id, _error(400, f"unknown session action {action!r}")))
            return
        job = _Job(call_id, jobs[action](args), time.perf_counter())
        self._last_run = job.started  # the first slice is not measured from before the job
        self._advance(job, None, None)

    def run(self) -> tuple[list, list[tuple[int, dict]]]:
        """Advance the jobs (loop steps for a slice of time while requests run) -> (token deltas of a step
        that settling the caches finished, replies)."""
        now = time.perf_counter()
        budget = max(LOOP_SLICE_S, STEP_SHARE * (now - self._last_run))
        self._last_run = now
        for future in [f for f in self._on_thread if f.done()]:
            job = self._on_thread.pop(future)
            self._advance(job, *((None, future.exception()) if future.exception() else (future.result(), None)))
        deltas = []
        if any(kind == LOOP for _, kind, _ in self._on_loop):
            deltas = self.engine.settle()  # settled until the engine's next step: later LOOP steps here too
        deadline = time.perf_counter() + budget if self.engine.has_unfinished() else float("inf")
        ran = 0
        while self._on_loop and (not ran or time.perf_counter() < deadline):  # at least one step per call
            ran += 1
            job, _, fn = self._on_loop.popleft()
            started = time.perf_counter()
            try:
                value, error = fn(), None
            except Exception as e:
                value, error = None, e
            spent = time.perf_counter() - started
            job.loop_seconds += spent
            job.longest_loop_step = max(job.longest_loop_step, spent)
            self._advance(job, value, error)
        replies, self._replies = self._replies, []
        return deltas, replies

    def _advance(self, job: _Job, value, error: Exception | None) -> None:
        """Hand the last step's outcome to the job and queue its next step, or reply."""
        try:
            kind, fn = job.steps.throw(error) if error is not None else job.steps.send(value)
        except StopIteration as done:
            self._replies.append((job.call_id, {"ok": True, **done.value, "loop_seconds": job.loop_seconds,
                                                "longest_loop_step_seconds": job.longest_loop_step,
                                                "seconds": time.perf_counter() - job.started}))
            return
        except SessionError as e:
            self._replies.append((job.call_id, _error(e.status, str(e))))
            return
        except Exception as e:  # a failed copy or write must not take the engine down
            logger.exception("session job failed")
            self._replies.append((job.call_id, _error(500, f"{type(e).__name__}: {e}")))
            return
        if kind == THREAD:
            self._on_thread[self._thread.submit(fn)] = job
        else:
            self._on_loop.append((job, kind, fn))

    # ---- the jobs --------------------------------------------------------------------------------

    def _save(self, args: dict) -> Generator[Step, object, dict]:
        engine = self.engine
        current = yield THREAD, self._fingerprint.result
        held = yield LOOP, lambda: sessions.hold_prefix(engine, args["token_ids"])
        kv = {}
        try:
            for name in sessions.kv_names(engine):
                kv[name] = yield LOOP_ANY, lambda name=name: sessions.copy_out(engine, held, name)
        finally:
            yield LOOP_ANY, lambda: sessions.release_prefix(engine, held)
        num_bytes = yield THREAD, lambda: sessions.write_session(args["path"], held.token_ids, kv, held.states,
                                                                 current)
        return {"num_tokens": len(held.token_ids), "bytes": num_bytes}

    def _restore(self, args: dict) -> Generator[Step, object, dict]:
        engine = self.engine
        current = yield THREAD, self._fingerprint.result
        saved = yield THREAD, lambda: sessions.read_session(args["path"], current, engine.model_config.vocab_size)
        reservation = yield LOOP, lambda: sessions.reserve_blocks(engine, saved.token_ids)
        try:
            for name, tensor in saved.kv.items():
                yield LOOP_ANY, lambda name=name, tensor=tensor: sessions.copy_in(engine, reservation, name, tensor)
        except BaseException:
            yield LOOP_ANY, lambda: sessions.release_blocks(engine, reservation)
            raise
        yield LOOP, lambda: sessions.finish_restore(engine, reservation, saved.states)
        return {"num_tokens": len(saved.token_ids), "bytes": saved.num_bytes}


def _error(status: int, message: str) -> dict:
    return {"ok": False, "status": status, "error": message}
