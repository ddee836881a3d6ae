"""Driving an EngineCore step by step in tests: requests arriving at given steps, aborts, the outputs collected, a
conversation's turns one at a time, and a count of a runner launch method's calls (whether each was queued behind a
step still in flight)."""

from __future__ import annotations

import torch

from strata import SamplingParams
from strata.engine.core import EngineCore
from strata.runner.model_runner import ModelRunner
from strata.types import Request


def prompt(i: int) -> list[int]:
    return torch.randint(3, 160, (3 + 2 * i,), generator=torch.Generator().manual_seed(i)).tolist()


def greedy(max_tokens: int, **kwargs) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kwargs)


def drive(core: EngineCore, requests: list[tuple[int, SamplingParams]], abort: dict[int, str] | None = None):
    """Request i (prompt(i)) arrives at step `arrival`; abort {step: request id}. -> id -> (tokens, finish reason,
    logprobs)."""
    out: dict[str, tuple] = {}
    step = 0
    while step == 0 or core.has_unfinished() or any(a >= step for a, _ in requests):
        for i, (arrival, params) in enumerate(requests):
            if arrival == step:
                core.add_request(Request(str(i), prompt(i), params))
        if abort and step in abort:
            core.abort_request(abort[step])
        for delta in core.step():
            tokens, _, logprobs = out.get(delta.request_id, ([], None, []))
            out[delta.request_id] = (tokens + delta.new_token_ids, delta.finish_reason,
                                     logprobs + (delta.new_logprobs or []))
        step += 1
    return out


def count_launches(monkeypatch, method: str) -> list[bool]:
    """Records, per call of ModelRunner.`method` (launch_decode, launch_verify), whether its inputs came from a
    step still in flight."""
    calls = []
    launch = getattr(ModelRunner, method)

    def counted(self, plan, inputs_from=None):
        calls.append(inputs_from is not None)
        return launch(self, plan, inputs_from)

    monkeypatch.setattr(ModelRunner, method, counted)
    return calls


def turn(core: EngineCore, request_id: str, tokens: list[int], max_tokens: int, cached: dict[str, int]) -> list[int]:
    """One greedy request run alone to its end -> its tokens; cached[request_id] := the prompt tokens it found in
    the prefix cache."""
    core.add_request(Request(request_id, tokens, greedy(max_tokens)))
    out = []
    while core.has_unfinished():
        for delta in core.step():
            out += delta.new_token_ids
            cached[request_id] = delta.num_cached_tokens
    return out
