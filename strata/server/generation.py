"""One request's trip through the engine, shared by the OpenAI and Anthropic routes: sampling
parameters and length checks (400s), the queue limit (429), submit (503 when no engine or when the
server is draining for shutdown), the first delta (503 when the engine dies before it), then deltas
with keep-alive ticks (streaming) or the whole output (non-streaming, aborted when the client goes
away). Metrics are observed here. CPU-heavy per-request work (limits and schema checks, chat template
rendering, tokenization) runs through `ServerState.offload`, a small thread pool, never on the event
loop, which must stay free for /health and every stream's tokens."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from fastapi import Request as HTTPRequest

from strata.engine.client import AsyncEngineClient, EngineDeadError, EngineUnavailableError, RequestStream
from strata.server.config import ServerConfig
from strata.server.errors import APIError, param_of
from strata.server.metrics import Metrics, RequestTracker
from strata.server.template import ChatTemplate
from strata.server.thinking import effort_budgets
from strata.types import FinishReason, PromptEntry, Request, SamplingParams, TokenDelta

_DISCONNECT_POLL_S = 0.5
RETRY_AFTER_S = 2  # told to clients turned away by a full queue
PREPARE_NICE = 10  # CFS gives a nice-10 thread about a tenth of a nice-0 one's share of a busy core
T = TypeVar("T")


@dataclass
class ServerState:
    client: AsyncEngineClient
    template: ChatTemplate
    metrics: Metrics
    config: ServerConfig
    model_name: str
    model_aliases: tuple[str, ...] = ()
    started: float = field(default_factory=time.time)
    draining: bool = False   # SIGTERM: new requests get 503 while the running ones finish (shutdown.py)
    _ids: itertools.count = field(default_factory=itertools.count)
    _pool: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        self.template.normalize_stamps = self.config.normalize_prompt_stamps
        effort_budgets(self.config.reasoning_budgets)  # a malformed --reasoning-budgets fails the start

    async def offload(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Run `fn` in the server's request-preparation threads. Jinja rendering is pure Python and
        gives the GIL back every few milliseconds; HF fast tokenizers encode in Rust without the GIL,
        so the event loop keeps answering while a large prompt is prepared. The pool is bounded
        (--prepare-threads): a burst of large bodies queues here instead of taking every core."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, self.config.prepare_threads), thread_name_prefix="strata-prepare",
                                            initializer=_lower_thread_priority)
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def check_model(self, model: str) -> None:
        if model != self.model_name and model not in self.model_aliases:
            raise APIError(400, f"model {model!r} is not served here; this server serves {self.model_name!r}",
                           "model")

    def check_queue(self) -> None:
        """429 once max_queued_requests wait for a slot. The server counts them itself (requests in flight
        beyond the engine's slots): the engine's own count arrives only with its next status message, so
        a burst would pass it."""
        if self.draining:
            raise APIError(503, "the server is shutting down; retry on another server or after it restarts",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
        num_slots = self.client.stats.status.get("max_num_seqs") or 0
        num_waiting = self.client.num_in_flight - num_slots
        limit = self.config.max_queued_requests
        if num_waiting >= limit:
            raise APIError(429, f"the queue is full: {num_waiting} requests wait for one of the engine's {num_slots} "
                                f"slots (--max-queued-requests {limit}); retry in {RETRY_AFTER_S} s",
                           headers={"Retry-After": str(RETRY_AFTER_S)})

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{uuid.uuid4().hex[:16]}{next(self._ids)}"

    @property
    def max_model_len(self) -> int:
        return self.client.info["max_model_len"]

    @property
    def vocab_size(self) -> int:
        return self.client.info["vocab_size"]


def _lower_thread_priority() -> None:
    """Preparation threads run at a lower CPU priority (Linux: a nice value per thread) than the event loop
    and the engine: on a machine with few cores, tokenizing someone's huge prompt must not slow the streams
    already running."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + PREPARE_NICE)
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: same priority as the loop


def sampling_params(**fields) -> SamplingParams:
    fields = {k: v for k, v in fields.items() if v is not None}
    try:
        return SamplingParams(**fields)
    except (ValueError, TypeError) as e:
        raise APIError(400, str(e), param_of(str(e))) from e


def cache_hints(body) -> dict:
    """A body's prefix cache hints as Request fields (strata_pin_prefix, strata_checkpoint)."""
    return {"pin_prefix": body.strata_pin_prefix, "cache_prefix": body.strata_checkpoint}


def check_prompt(state: ServerState, prompt_token_ids: list[int], max_tokens: int | None, prompt_param: str,
                 max_tokens_param: str = "max_tokens") -> int:
    """Validate the prompt against the context; return the effective max_tokens (never truncates)."""
    n, limit, vocab_size = len(prompt_token_ids), state.max_model_len, state.vocab_size
    if n == 0:
        raise APIError(400, "the prompt is empty", prompt_param)
    if n >= limit:  # before the scan below: a huge prompt is refused without a pass over it
        raise APIError(400, f"the prompt has {n} tokens; the context (max_model_len) is {limit}, which leaves "
                            f"no room for output", prompt_param)
    if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= vocab_size:
        raise APIError(400, f"prompt token ids must be in [0, {vocab_size})", prompt_param)
    if max_tokens is None:
        return limit - n
    if n + max_tokens > limit:
        raise APIError(400, f"{max_tokens_param}={max_tokens} plus the prompt's {n} tokens exceeds the context of "
                            f"{limit} tokens; lower {max_tokens_param} to at most {limit - n}", max_tokens_param)
    return max_tokens


@dataclass
class Output:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[dict[int, float]] = field(default_factory=list)
    num_cached_tokens: int = 0
    prompt_logprobs: list[PromptEntry | None] | None = None  # SamplingParams.prompt_logprobs

    def add(self, delta: TokenDelta) -> None:
        self.text += delta.new_text
        if delta.prompt_logprobs is not None:
            self.prompt_logprobs = delta.prompt_logprobs
        self.token_ids.extend(delta.new_token_ids)
        self.logprobs.extend(delta.new_logprobs or [])
        self.num_cached_tokens = max(self.num_cached_tokens, delta.num_cached_tokens)
        if delta.finished:
            self.finish_reason = delta.finish_reason.value


class Generation:
    """Use as `async with Generation(...) as gen:`; leaving the block aborts an unfinished request."""

    def __init__(self, state: ServerState, request: Request) -> None:
        state.check_queue()
        self.state, self.request = state, request
        self.tracker: RequestTracker = state.metrics.track(len(request.prompt_token_ids))
        self.stream: RequestStream | None = None
        self._first: TokenDelta | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_token_ids)

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens the engine found in its prefix cache (known once a delta has arrived)."""
        return self.tracker.num_cached_tokens

    async def __aenter__(self) -> Generation:
        try:
            self.stream = await self.state.client.submit(self.request, wait_s=self.state.config.engine_start_timeout_s)
            self._first = await self.stream.next(self.state.config.keepalive_s)
        except (EngineUnavailableError, EngineDeadError) as e:
            self.tracker.on_end("engine_error")
            raise APIError(503, f"the engine is unavailable: {e}; retry shortly") from e
        self._check_error(self._first)
        if self._first is not None:
            self.tracker.num_cached_tokens = self._first.num_cached_tokens
        return self

    async def __aexit__(self, *exc) -> None:
        if self.stream is not None:
            if not self.stream.finished:
                self.tracker.on_end(FinishReason.ABORT.value)
            self.stream.close()

    def _check_error(self, delta: TokenDelta | None) -> None:
        if delta is not None and delta.finish_reason is FinishReason.ERROR:
            self.tracker.on_end("error")
            raise APIError(500, f"the engine failed this request: {delta.error}")

    def _observe(self, delta: TokenDelta) -> None:
        self.tracker.on_delta(delta)
        if delta.finished:
            self.tracker.on_end(delta.finish_reason.value if delta.finish_reason else "stop")

    async def deltas(self) -> AsyncIterator[TokenDelta | None]:
        """Deltas in order; None when `keepalive_s` passes without one. Raises EngineDeadError."""
        delta = self._first
        while True:
            if delta is not None:
                self._check_error(delta)
                self._observe(delta)
                yield delta
                if delta.finished:
                    return
            else:
                yield None
            try:
                delta = await self.stream.next(self.state.config.keepalive_s)
            except EngineDeadError:
                self.tracker.on_end("engine_error")
                raise

    async def collect(self, http_request: HTTPRequest) -> Output:
        """The whole output; 503 if the engine dies; aborts if the client disconnects."""
        out = Output()
        async for delta in while_connected(self.deltas(), http_request):
            out.add(delta)
        return out


async def while_connected(items: AsyncIterator[T | None], http_request: HTTPRequest) -> AsyncIterator[T]:
    """The items of a non-streaming request, keep-alive ticks (None) dropped: 400 (and so an abort) once the
    client has gone away, checked every _DISCONNECT_POLL_S; 503 if the engine dies."""
    last_check = time.monotonic()
    try:
        async for item in items:
            if time.monotonic() - last_check > _DISCONNECT_POLL_S:
                last_check = time.monotonic()
                if await http_request.is_disconnected():
                    raise APIError(400, "the client disconnected")
            if item is not None:
                yield item
    except EngineDeadError as e:
        raise APIError(503, f"the engine failed during this request: {e}; retry") from e
