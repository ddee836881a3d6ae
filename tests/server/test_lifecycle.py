"""Lifecycle against the live server: 16 concurrent streams give the texts they give alone (greedy);
a client that disconnects mid-stream frees its slot within a second; killing the engine mid-stream
ends the stream with an error event and the next request succeeds on a new engine; auth."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import openai
import pytest

from live_server import API_KEY, MODEL

PROMPTS = ["The capital of France is", "One, two, three,", "My favourite colour is", "Once upon a time"]


def test_sixteen_concurrent_streams_equal_alone(server):
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

    async def one(prompt: str) -> str:
        stream = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0,
                                                 stream=True, extra_body={"ignore_eos": True})
        return "".join([c.choices[0].text async for c in stream if c.choices])

    async def main():
        alone = [await one(p) for p in PROMPTS]
        together = await asyncio.gather(*(one(PROMPTS[i % 4]) for i in range(16)))
        return alone, together

    alone, together = asyncio.run(main())
    assert all(alone)
    assert together == [alone[i % 4] for i in range(16)]


def _long_stream_body() -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 500,
            "ignore_eos": True, "temperature": 0, "stream": True}


def test_disconnect_frees_the_slot_within_a_second(server):
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=_long_stream_body(),
                      headers=server.headers, timeout=60) as response:
        lines = response.iter_lines()
        while True:  # up to a generated token: the request then holds a slot
            line = next(lines)
            if '"content":"' in line and '"content":""' not in line:
                break
        deadline = time.monotonic() + 2  # the status is the engine's last report (<= 0.5 s old)
        while server.status()["slots"]["running"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    closed = time.monotonic()
    while True:
        status = server.status()
        if status["slots"]["running"] == 0 and status["in_flight_requests"] == 0:
            break
        assert time.monotonic() - closed < 1.0, status
        time.sleep(0.05)


def test_engine_killed_mid_stream_then_recovers(server):
    pid = server.status()["engine"]["pid"]
    frames = []
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=_long_stream_body(),
                      headers=server.headers, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            frames.append(line[6:])
            if len(frames) == 3:
                os.kill(pid, signal.SIGKILL)
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["code"] == 503 and "engine" in error["message"]
    again = server.post("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 2})
    assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 2
    status = server.status()["engine"]
    assert status["pid"] != pid and status["restarts"] >= 1 and status["state"] == "ready"


@pytest.mark.parametrize("headers, expected", [
    ({}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({"x-api-key": "wrong"}, 401),
    ({"Authorization": f"Bearer {API_KEY}"}, 200),
    ({"x-api-key": API_KEY}, 200),
])
def test_auth(server, headers, expected):
    assert server.get("/v1/models", headers=headers).status_code == expected
    assert server.get("/health", headers=headers).status_code == 200


def test_metrics_and_status(server):
    text = server.get("/metrics").text
    for name in ("vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:request_success_total", "strata:engine_up 1.0",
                 "vllm:spec_decode_num_draft_tokens_total", "vllm:prefix_cache_hits_total", "strata:engine_steps_total"):
        assert name in text
    status = server.status()
    assert status["slots"]["total"] == 16 and status["kv_blocks"]["total"] > 0
