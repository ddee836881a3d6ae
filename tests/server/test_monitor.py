"""The Monitor's bookkeeping without a server: per-second token history, requests in flight and
finished, the activity state and the prompt-progress estimate, host numbers from /proc."""

from __future__ import annotations

import os

from strata.server.metrics import Metrics
from strata.server.monitor import HISTORY_S, Monitor, memory_numbers, prompt_progress, rss_bytes
from strata.types import FinishReason, TokenDelta


def delta(num_tokens: int, finished: bool = False, num_cached: int = 0) -> TokenDelta:
    return TokenDelta("r", list(range(num_tokens)), "x" * num_tokens, finished,
                      FinishReason.LENGTH if finished else None, num_cached_tokens=num_cached)


def steps_status(num_scheduled: int) -> dict:
    return {"steps": {"num_scheduled_tokens": num_scheduled}}


def test_tokens_land_in_per_second_buckets_and_old_seconds_drop(monkeypatch):
    monitor = Monitor()
    clock = [1000.0]
    monkeypatch.setattr("strata.server.monitor.time.time", lambda: clock[0])
    monitor.on_tokens(3)
    monitor.on_tokens(2)
    clock[0] = 1001.5
    monitor.on_tokens(7)
    clock[0] = 1002.0
    history = monitor.history()
    assert len(history) == HISTORY_S and history[-2:] == [5, 7] and sum(history) == 12
    clock[0] = 1000.0 + HISTORY_S + 1
    monitor.on_tokens(1)
    assert [s for s, _ in monitor.tokens_per_second] == [1000 + HISTORY_S + 1]


def test_a_tracked_request_goes_reading_then_generating_then_into_recent():
    status = steps_status(100)
    monitor = Monitor(engine_status=lambda: status)
    metrics = Metrics("m", monitor)
    tracker = metrics.track(50)
    assert monitor.activity("ready", status)["state"] == "reading_prompt"
    status = steps_status(125)
    assert monitor.activity("ready", status)["requests"][0]["prompt_progress"] == 0.5
    tracker.on_delta(delta(1, num_cached=10))
    assert monitor.activity("ready", status)["state"] == "generating"
    tracker.on_delta(delta(4, finished=True))
    tracker.on_end("length")
    activity = monitor.activity("ready", status)
    assert activity["state"] == "idle" and activity["requests"] == []
    (done,) = monitor.recent
    assert (done["id"], done["prompt_tokens"], done["cached_tokens"], done["output_tokens"], done["finish_reason"]) \
        == (1, 50, 10, 5, "length")
    assert done["ttft_s"] >= 0 and sum(monitor.history(now=10**10)) == 0
    assert monitor.activity("restarting", status) == {"state": "restarting"}


def test_prompt_progress_is_capped_and_unknown_when_all_cached():
    monitor = Monitor(engine_status=lambda: steps_status(40))
    tracker = Metrics("m", monitor).track(8)
    (request,) = monitor.active.values()
    assert request.scheduled_at_start == 40 and request.number == 1
    assert prompt_progress(request, steps_status(44)) == 0.5
    assert prompt_progress(request, steps_status(140)) == 1.0
    tracker.num_cached_tokens = 8
    assert prompt_progress(request, steps_status(140)) is None


def test_only_the_last_twenty_requests_are_kept_newest_first():
    monitor = Monitor()
    metrics = Metrics("m", monitor)
    for _ in range(25):
        metrics.track(3).on_end("stop")
    assert [r["id"] for r in monitor.recent] == list(range(25, 5, -1))


def test_host_numbers_come_from_proc():
    monitor = Monitor()
    assert monitor.cpu_numbers()["cpu_busy"] is None
    sum(i * i for i in range(300_000))
    busy = monitor.cpu_numbers()["cpu_busy"]
    assert busy is None or 0.0 <= busy <= 1.0
    memory = memory_numbers()
    assert 0 < memory["mem_available_bytes"] <= memory["mem_total_bytes"]
    assert rss_bytes(os.getpid()) > 0 and rss_bytes(None) is None
