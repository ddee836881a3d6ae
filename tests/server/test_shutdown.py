"""Graceful shutdown of a real `strata serve` (bundled model) on SIGTERM with four streams running
(issue 24, item 4): a short stream finishes within the drain and ends with its finish chunk and [DONE];
the long OpenAI streams end with an error event and [DONE], the long Anthropic stream with an error event;
the server exits within 10 s, leaves no child process behind and logs no traceback. The
server is the one the engine-kill test used before (conftest's lifecycle_server): one model load for both."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx

from live_server import API_KEY, MODEL

HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Stream(threading.Thread):
    def __init__(self, base_url: str, path: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.body = base_url + path, body
        self.lines: list[str] = []
        self.num_tokens = 0
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url, json=self.body, headers=HEADERS, timeout=60) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
                    if '"content":"' in line and '"content":""' not in line or '"text_delta"' in line:
                        self.num_tokens += 1
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def data(self) -> list[str]:
        return [line[6:] for line in self.lines if line.startswith("data: ")]


def _chat(max_tokens: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True}


def test_sigterm_drains_streams_and_exits_cleanly(lifecycle_server_to_stop):
    srv = lifecycle_server_to_stop  # --max-num-seqs 8 --drain-timeout-s 5, a spare engine (tests/server/conftest.py)
    base, proc = srv.base_url, srv.proc
    log_start = os.path.getsize(srv.log.name)  # what the server logs from here on: this test's part
    try:
        short = Stream(base, "/v1/chat/completions", _chat(10))
        longs = [Stream(base, "/v1/chat/completions", _chat(1500)) for _ in range(2)]
        anthropic = Stream(base, "/v1/messages", _chat(1500))
        streams = [short, *longs, anthropic]
        for s in streams:
            s.start()
        deadline = time.monotonic() + 120
        while min(s.num_tokens for s in streams) < 1:  # every stream holds a slot and has output
            assert time.monotonic() < deadline and all(s.is_alive() for s in streams), [(s.error, s.num_tokens, s.lines[-3:]) for s in streams]
            time.sleep(0.05)
        assert short.num_tokens < 10
        children = _children(proc.pid)
        assert children  # the engine (and its spare, loading again after the engine-kill test)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        proc.wait(10)
        exited = time.monotonic() - signalled
        for s in streams:
            s.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        with open(srv.log.name) as log:
            log.seek(log_start)
            output = log.read()
        print(output)
    assert exited < 10
    assert all(s.error is None for s in streams), [s.error for s in streams]
    short_data = short.data()
    assert short_data[-1] == "[DONE]" and json.loads(short_data[-2])["choices"][0]["finish_reason"] == "length"
    for s in longs:
        data = s.data()
        assert data[-1] == "[DONE]", data[-3:]
        error = json.loads(data[-2])["error"]
        assert error["code"] == 503 and "shutting down" in error["message"]
    assert anthropic.lines[-2] == "event: error" and "shutting down" in anthropic.lines[-1], anthropic.lines[-3:]
    deadline = time.monotonic() + 0.5  # the server has exited; its children may take a moment more
    while [pid for pid in children if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in children if _alive(pid)], output
    assert "Traceback" not in output and "CancelledError" not in output, output
