"""The event loop stays free while large requests are prepared (issue 24, item 1), against the live server
(bundled model): while 4 MB chat bodies (one long message, or 2,000 messages decoded and validated in the
preparation thread) are rejected, ~1 MB prompts are refused for the context before
tokenizing and ~100 kB prompts are rendered and tokenized (then refused for the context), /health answers with a
p90 under 25 ms and three running streams keep their token gaps under twice what they were before the large bodies
came. (The development VM's 2 cores, three runs each: p90 4.9-5.4 ms as built, 52.8-57.1 ms with the preparation
on the loop; the p99 < 100 ms bound this replaces passed that regression, 87-89 ms, and once failed the server as
built, 124 ms, in a full run.) Everything is bounded by counts, not
by time: the large requests run at least a fixed number of rounds, more until /health has answered 100
times (at most four times as many); the streams are read until they end."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time

import httpx

from live_server import MODEL

ROUNDS = 6


def _chat(content: str, stream: bool = False, max_tokens: int = 4) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": stream}


class Stream(threading.Thread):
    """One streaming chat request; records the arrival time of every content chunk until `stop` is set."""

    def __init__(self, server, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.server, self.stop, self.arrivals, self.error = server, stop, [], None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.server.base_url + "/v1/chat/completions", timeout=120,
                              headers=self.server.headers, json=_chat("Tell me a long story.", True, 1500)) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if '"content":"' in line and '"content":""' not in line:
                        self.arrivals.append(time.monotonic())
                    if self.stop.is_set():
                        return
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def gaps(self, start: float, end: float) -> list[float]:
        times = [t for t in self.arrivals if start <= t <= end]
        return [b - a for a, b in zip(times, times[1:])]


def _health_latencies(client: httpx.Client, url: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        t = time.monotonic()
        assert client.get(url).status_code == 200
        out.append(time.monotonic() - t)
        time.sleep(0.01)


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


# encoded once, up front: this process's own JSON encoding would hold its GIL and delay the health probe
BODIES = [json.dumps(_chat("x" * 4_000_000)).encode(),  # a 4 MB body: over --max-prompt-chars
          json.dumps({**_chat(""), "messages": [{"role": "user", "content": "y" * 2000}] * 2000}).encode(),  # 4 MB
          # in 2,000 messages: decoded and validated off the loop (strata/server/body.py), over --max-prompt-chars
          json.dumps(_chat("hello world, this is a long prompt. " * 28_000)).encode(),  # ~1 MB: too long for the context
          json.dumps(_chat("hello world, this is a long prompt. " * 3_000)).encode()]  # ~100 kB: tokenized, too long


def _large_requests(server, messages: list[str], health: list[float], rounds: list[int]) -> None:
    """At least ROUNDS rounds of BODIES, more (up to 4 x ROUNDS) until the health probe has 100 answers: a
    fast host gets through ROUNDS before the probe has enough to judge. Appends its round count to `rounds`."""
    # this test process's own sending of 4 MB bodies is not the server's work: at nice +10 (a per-thread priority on
    # Linux, as the server's preparation thread) it does not take a 2-core host's CPU from the engine
    if hasattr(os, "setpriority"):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    headers = {**server.headers, "content-type": "application/json"}
    done = 0
    with httpx.Client(timeout=120, headers=headers) as client:
        while done < ROUNDS or (len(health) < 100 and done < 4 * ROUNDS):
            done += 1
            for body in BODIES:
                response = client.post(server.base_url + "/v1/chat/completions", content=body)
                assert response.status_code == 400, response.text
                messages.append(response.json()["error"]["message"])
    rounds.append(done)


def _wait_tokens(streams: list[Stream], count: int) -> None:
    while min(len(s.arrivals) for s in streams) < count:
        assert all(s.is_alive() for s in streams), [s.error for s in streams]
        time.sleep(0.05)


def _wait_spare_loaded(server) -> None:
    """The spare engine loads beside the server after start-up; measure once it is idle."""
    deadline = time.monotonic() + 300
    while server.status()["engine"]["spare"] == "starting":
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_large_bodies_do_not_stall_health_or_streams(server):
    _wait_spare_loaded(server)
    stop_streams, stop_health = threading.Event(), threading.Event()
    streams = [Stream(server, stop_streams) for _ in range(3)]
    for s in streams:
        s.start()
    _wait_tokens(streams, 3)                 # all three decode together
    probe = httpx.Client(timeout=30)         # one connection for both phases
    idle_start = time.monotonic()
    idle_health: list[float] = []
    health = threading.Thread(target=_health_latencies, args=(probe, server.base_url + "/health", stop_health, idle_health), daemon=True)
    health.start()
    _wait_tokens(streams, 3 + 20)
    stop_health.set()
    health.join()
    idle_end = time.monotonic()

    stop_health.clear()
    busy_health: list[float] = []
    health = threading.Thread(target=_health_latencies, args=(probe, server.base_url + "/health", stop_health, busy_health), daemon=True)
    messages: list[str] = []
    rounds: list[int] = []  # each sender's
    senders = [threading.Thread(target=_large_requests, args=(server, messages, busy_health, rounds))
               for _ in range(2)]
    busy_start = time.monotonic()
    health.start()
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    busy_end = time.monotonic()
    stop_health.set()
    stop_streams.set()
    health.join()
    for s in streams:
        s.join(60)

    assert len(rounds) == 2 and len(messages) == len(BODIES) * sum(rounds)
    assert sum("--max-prompt-chars" in m for m in messages) == 2 * sum(rounds)
    assert sum("characters, so at least" in m for m in messages) == sum(rounds)  # refused before tokenizing
    assert sum("the prompt has 27" in m and "tokens" in m for m in messages) == sum(rounds), messages
    assert all(s.error is None for s in streams), [s.error for s in streams]
    assert busy_end - busy_start > 1.0, "the large requests should keep the server busy for a while"
    assert len(busy_health) >= 100 and _quantile(busy_health, 0.90) < 0.025, \
        (_quantile(idle_health, 0.90), sorted(busy_health)[-12:])
    for s in streams:
        idle, busy = s.gaps(idle_start, idle_end), s.gaps(busy_start, busy_end)
        assert len(busy) >= 5, (len(busy), busy_end - busy_start)
        assert statistics.median(busy) < 2 * statistics.median(idle), (statistics.median(idle), busy)
