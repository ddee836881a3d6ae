"""Step-time accounting (decode steps told apart from prompt steps), latency summaries and the
decode-only experts meter, on hand-made data."""

from __future__ import annotations

import pytest

from strata.bench.latency import DecodeExpertsMeter, RequestTimes, latency_summary
from strata.scheduler.stats import StepTimes
from strata.types import ScheduledSlot, StepPlan, StepResult


def _plan(*slots: ScheduledSlot) -> StepPlan:
    return StepPlan(0, [], list(slots), [])


def test_step_times_split_decode_from_prompt_steps():
    times = StepTimes()
    prompt_and_decode = _plan(ScheduledSlot(0, 0, 5, [], [1] * 5), ScheduledSlot(1, 9, 1, [], [7]))
    verify = _plan(ScheduledSlot(0, 5, 3, [], [1, 2, 3], draft_token_ids=[2, 3]), ScheduledSlot(1, 10, 1, [], [7]))
    times.record(prompt_and_decode, StepResult(0, [], 0.5, 0.2, 0.1), 1.0)
    times.record(verify, StepResult(1, [], 0.25, 0.125, 0.0625), 0.5)
    times.record(_plan(), StepResult(2, []), 0.01)
    everything, decode = times.as_dict()["all"], times.as_dict()["decode"]
    assert everything["num_steps"] == 3 and decode["num_steps"] == 1
    assert decode["forward_seconds"] == 0.25 and decode["host_seconds"] == pytest.approx(0.0625)
    assert decode["tokens_per_step"] == 4 and decode["slots_per_step"] == 2
    assert decode["context_tokens_per_step"] == (5 + 3) + (10 + 1)
    assert everything["host_seconds"] == pytest.approx(1.51 - 0.75 - 0.325 - 0.1625)


def test_latency_summary_by_hand():
    first = RequestTimes(added=0.0, token_times=[0.1, 0.3, 0.4], num_tokens=3)
    second = RequestTimes(added=1.0, token_times=[1.5, 1.6], num_tokens=4)  # last delta carried 3 tokens
    summary = latency_summary([first, second, RequestTimes(added=2.0)])
    assert summary["ttft_ms"]["p50"] == pytest.approx(100.0) and summary["ttft_ms"]["p95"] == pytest.approx(500.0)
    assert summary["token_gap_ms"]["mean"] == pytest.approx(400.0 / 3)
    assert summary["token_gap_ms"]["p95"] == pytest.approx(200.0)
    assert summary["tpot_ms"]["mean"] == pytest.approx((150.0 + 100.0 / 3) / 2)


class _FakeExperts:
    """Cumulative counters as the engine's routing stats report them."""

    def __init__(self) -> None:
        self.touched_sum, self.steps, self.reads = 0.0, 0, 0

    def step(self, mean_touched: float) -> None:
        self.touched_sum += mean_touched
        self.steps += 1

    def counter_mark(self):
        """The counters frozen now, as a CounterMark holds them (one layer: its touched sum is the mean's)."""
        self.reads += 1
        frozen = (self.steps, self.touched_sum, 1)
        return type("Mark", (), {"values": lambda _: frozen})()


def test_experts_meter_counts_decode_stretches_only():
    experts = _FakeExperts()
    meter = DecodeExpertsMeter(type("Core", (), {"experts": experts})())
    meter.close()                      # admission before anything ran
    experts.step(60.0)                 # prompt step
    meter.restart()
    for _ in range(3):
        experts.step(4.0)              # decode steps
    meter.close()                      # the next prompt arrives
    experts.step(50.0)
    meter.restart()
    experts.step(6.0)                  # a decode step, then a chunk of a preempted prompt: stretch dropped
    experts.step(40.0)
    meter.restart()
    experts.step(2.0)
    meter.close()
    assert meter.steps == 4 and meter.mean == pytest.approx((3 * 4.0 + 2.0) / 4)
    assert experts.reads == 5          # at stretch edges, never once per decode step
    assert DecodeExpertsMeter(type("Core", (), {"experts": None})()).mean is None
