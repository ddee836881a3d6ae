"""Session saves and restores in flight in the engine process (strata.engine.sessions does the work).
Each job is a generator of steps, each step run where it must: LOOP steps on the engine loop with the
caches settled (no step in flight, queued copies done), LOOP_ANY steps on the loop as they come, THREAD
steps on one worker thread while the loop keeps serving. The loop calls `run()` between steps.
Replies are plain dicts: {"ok": True, "num_tokens", "bytes", "seconds", "loop_seconds"} or
{"ok": False, "status": HTTP status, "error": message}.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from strata.engine import sessions
from strata.engine.sessions import SessionError

logger = logging.getLogger(__name__)

LOOP, LOOP_ANY, THREAD = "loop", "loop_any", "thread"
Step = tuple[str, Callable[[], object]]


@dataclass
class _Job:
    call_id: int
    steps: Generator[Step, object, dict]
    started: float
    loop_seconds: float = 0.0


class SessionJobs:
    def __init__(self, engine) -> None:
        self.engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="strata-session")
        self._on_thread: dict[Future, _Job] = {}
        self._on_loop: deque[tuple[_Job, str, Callable[[], object]]] = deque()
        self._replies: list[tuple[int, dict]] = []
        self._fingerprint: dict | None = None

    @property
    def busy(self) -> bool:
        return bool(self._on_thread or self._on_loop or self._replies)

    def submit(self, call_id: int, action: str, args: dict) -> None:
        jobs = {"save": self._save, "restore": self._restore}
        if action not in jobs:
            self._replies.append((call_id, _error(400, f"unknown session action {action!r}")))
            return
        job = _Job(call_id, jobs[action](args), time.perf_counter())
        self._advance(job, None, None)

    def run(self) -> tuple[list, list[tuple[int, dict]]]:
        """Advance every job as far as it goes now -> (token deltas of a step the settling finished, replies)."""
        for future in [f for f in self._on_thread if f.done()]:
            job = self._on_thread.pop(future)
            self._advance(job, *((None, future.exception()) if future.exception() else (future.result(), None)))
        deltas = []
        if any(kind == LOOP for _, kind, _ in self._on_loop):
            deltas = self.engine.settle()
        while self._on_loop:
            job, _, fn = self._on_loop.popleft()
            started = time.perf_counter()
            try:
                value, error = fn(), None
            except Exception as e:
                value, error = None, e
            job.loop_seconds += time.perf_counter() - started
            self._advance(job, value, error)
        replies, self._replies = self._replies, []
        return deltas, replies

    def _advance(self, job: _Job, value, error: Exception | None) -> None:
        """Hand the last step's outcome to the job and queue its next step, or reply."""
        try:
            kind, fn = job.steps.throw(error) if error is not None else job.steps.send(value)
        except StopIteration as done:
            self._replies.append((job.call_id, {"ok": True, **done.value, "loop_seconds": job.loop_seconds,
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

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = sessions.fingerprint(self.engine)
        return self._fingerprint

    # ---- the jobs --------------------------------------------------------------------------------

    def _save(self, args: dict) -> Generator[Step, object, dict]:
        engine, current = self.engine, self.fingerprint()
        held = yield LOOP, lambda: sessions.hold_prefix(engine, args["token_ids"])
        try:
            num_bytes = yield THREAD, lambda: sessions.write_prefix(args["path"], engine.runner, held, current)
        finally:
            yield LOOP_ANY, lambda: sessions.release_prefix(engine, held)
        return {"num_tokens": len(held.token_ids), "bytes": num_bytes}

    def _restore(self, args: dict) -> Generator[Step, object, dict]:
        engine, current, path = self.engine, self.fingerprint(), args["path"]
        reader, token_ids = yield THREAD, lambda: sessions.open_session(path, current,
                                                                        engine.model_config.vocab_size)
        reservation = yield LOOP, lambda: sessions.reserve_blocks(engine, token_ids)
        try:
            states = yield THREAD, lambda: sessions.fill_blocks(engine.runner, reader, reservation)
        except BaseException:
            yield LOOP_ANY, lambda: sessions.release_blocks(engine, reservation)
            raise
        yield LOOP, lambda: sessions.finish_restore(engine, reservation, states)
        return {"num_tokens": len(token_ids), "bytes": os.path.getsize(path)}


def _error(status: int, message: str) -> dict:
    return {"ok": False, "status": status, "error": message}
