"""Closed-loop offline runs through the engine's step loop, every token delta time-stamped.

At most `concurrency` requests are in flight; the next prompt is added as one finishes, as a client
pool would send it, so TTFT (add_request -> first token) does not count time queued behind other
prompts. The token gap is the time between successive deltas of a request that carry tokens: a
verify step's accepted drafts arrive together, as a streaming client sees them. The engine's routing
counters are read only at the edges of decode stretches, so decode steps get no extra host sync.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field

from strata.bench.result import percentiles
from strata.engine.core import EngineCore
from strata.types import FinishReason, Request, SamplingParams

_run_ids = itertools.count()


@dataclass
class RequestTimes:
    added: float
    token_times: list[float] = field(default_factory=list)  # one per delta that carried tokens
    num_tokens: int = 0


class DecodeExpertsMeter:
    """Mean distinct experts touched per MoE layer per decode step, from the engine's cumulative
    routing counters (`core.experts`) differenced over stretches of decode-only steps; a stretch that
    a prompt step falls into is dropped. None when the engine keeps no routing counters. The counters
    are marked at stretch edges without a host sync (a sync there would drain the steps planned ahead and
    leave the device idle while the next is planned) and read when `mean` is."""

    def __init__(self, core: EngineCore) -> None:
        self.experts = getattr(core, "experts", None)
        self.stretches: list[tuple] = []  # (mark at its start, mark at its end): CounterMark-like pairs
        self.mark = None

    def restart(self) -> None:
        """After a step with prompt tokens: a decode stretch may start here."""
        if self.experts is not None:
            self.mark = self.experts.counter_mark()

    def close(self) -> None:
        """Before prompt tokens are added, and at the end: count the stretch since the mark."""
        if self.experts is not None and self.mark is not None:
            self.stretches.append((self.mark, self.experts.counter_mark()))
        self.mark = None

    def _totals(self) -> tuple[float, int]:
        """(distinct experts per layer summed over the stretches' decode steps, those steps): reads the marks."""
        touched = steps = 0
        for start, end in self.stretches:
            (s0, t0, l0), (s1, t1, l1) = start.values(), end.values()
            touched += (t1 / l1 if l1 else 0.0) - (t0 / l0 if l0 else 0.0)
            steps += s1 - s0
        return touched, steps

    @property
    def steps(self) -> int:
        return self._totals()[1]

    @property
    def mean(self) -> float | None:
        touched, steps = self._totals()
        return touched / steps if steps else None


def run_closed_loop(core: EngineCore, prompts: list[list[int]], params: SamplingParams, concurrency: int,
                    meter: DecodeExpertsMeter | None = None) -> tuple[list[RequestTimes], float]:
    """-> (per-request times in prompt order, wall seconds of the whole run)."""
    prefix = f"bench{next(_run_ids)}-"
    waiting = deque(enumerate(prompts))
    times: dict[str, RequestTimes] = {}
    in_flight = 0
    started = time.perf_counter()
    while waiting or in_flight:
        if waiting and in_flight < concurrency and meter is not None:
            meter.close()
        while waiting and in_flight < concurrency:
            index, prompt = waiting.popleft()
            times[f"{prefix}{index}"] = RequestTimes(time.perf_counter())
            core.add_request(Request(f"{prefix}{index}", prompt, params))
            in_flight += 1
        decode_steps = core.step_times.decode.num_steps
        deltas = core.step()
        if meter is not None and core.step_times.decode.num_steps == decode_steps:
            meter.restart()  # not a decode step: whatever stretch was open now includes prompt work
        for delta in deltas:
            record = times[delta.request_id]
            if delta.new_token_ids:
                record.token_times.append(time.perf_counter())
                record.num_tokens += len(delta.new_token_ids)
            if delta.finished:
                in_flight -= 1
                if delta.finish_reason is FinishReason.ERROR:
                    raise RuntimeError(f"request {delta.request_id} failed in the engine: {delta.error}")
    elapsed = time.perf_counter() - started
    while core.has_unfinished():  # a step planned ahead for requests that all ended (its tokens are dropped)
        core.step()
    if meter is not None:
        meter.close()
    return [times[f"{prefix}{i}"] for i in range(len(prompts))], elapsed


def latency_summary(requests: list[RequestTimes]) -> dict:
    """TTFT, token gap and TPOT (time per output token after the first, per request) in ms."""
    served = [r for r in requests if r.token_times]
    ttft = [r.token_times[0] - r.added for r in served]
    gaps = [b - a for r in served for a, b in zip(r.token_times, r.token_times[1:])]
    tpot = [(r.token_times[-1] - r.token_times[0]) / (r.num_tokens - 1) for r in served if r.num_tokens > 1]
    ms = lambda xs: {k: v * 1000 for k, v in percentiles(xs).items()}  # noqa: E731
    return {"ttft_ms": ms(ttft), "token_gap_ms": ms(gaps), "tpot_ms": ms(tpot)}
