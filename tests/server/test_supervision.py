"""Engine supervision with a stand-in engine process (fast, no model): an engine that dies after the first
token ends the stream with an error event, one that hangs is ended after the hang timeout with a 503, and in
both cases a new engine is started and serves the next request. With the bundled model (issue 24, items 5
and 6): an engine killed under 8 running and 4 queued requests fails only the running ones; the queued ones
complete on the spare engine, which is serving (/health 200) within 5 s of the kill (on the server that the
SIGTERM test of test_shutdown.py then stops: conftest's lifecycle_server)."""

from __future__ import annotations

import httpx

from live_server import API_KEY, MODEL, fake_app, thread_server

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def _wait_ready(srv, restarts: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        engine = srv.status()["engine"]
        if engine["state"] == "ready" and engine["restarts"] >= restarts:
            return
        time.sleep(0.1)
    raise AssertionError(srv.status())


def test_engine_death_after_first_token_ends_stream_with_error_event():
    with thread_server(fake_app("die")) as srv:
        with httpx.stream("POST", srv.base_url + "/v1/messages", headers=srv.headers, timeout=30,
                          json={**BODY, "stream": True}) as response:
            assert response.status_code == 200
            text = response.read().decode()
        assert '"text":"Hi"' in text and text.rstrip().split("\n")[-2] == "event: error"
        assert '"type":"overloaded_error"' in text
        _wait_ready(srv, 1)
        first_pid = srv.status()["engine"]["pid"]
        # the new engine serves again (and dies again: the stand-in does that on every request)
        response = srv.post("/v1/chat/completions", {**BODY, "stream": True})
        assert response.status_code == 200 and '"content":"Hi"' in response.text and '"code":503' in response.text
        _wait_ready(srv, 2)
        assert srv.status()["engine"]["pid"] != first_pid


def test_hung_engine_is_ended_with_503_and_restarted():
    with thread_server(fake_app("hang", engine_hang_timeout_s=1.0, keepalive_s=5.0)) as srv:
        response = srv.post("/v1/chat/completions", BODY)
        assert response.status_code == 503
        assert "did not respond" in response.json()["error"]["message"]
        _wait_ready(srv, 1)
        assert srv.get("/health").status_code == 200


def test_a_request_that_kills_every_engine_is_resubmitted_twice_then_503():
    """No output before the engine died: the request goes to the next engine, at most MAX_RESUBMITS times
    (a request that kills every engine must not restart them forever)."""
    from strata.engine.client import MAX_RESUBMITS

    with thread_server(fake_app("crash")) as srv:
        response = srv.post("/v1/chat/completions", BODY)
        assert response.status_code == 503 and "exited" in response.json()["error"]["message"]
        _wait_ready(srv, MAX_RESUBMITS + 1)
        engine = srv.status()["engine"]
        assert engine["resubmitted_requests"] == MAX_RESUBMITS and engine["restarts"] == MAX_RESUBMITS + 1


def test_echo_engine_serves_and_metrics_count():
    with thread_server(fake_app("echo")) as srv:
        response = srv.post("/v1/chat/completions", BODY)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "Hi there"
        assert response.json()["usage"]["completion_tokens"] == 2
        metrics = srv.get("/metrics").text
        assert 'vllm:generation_tokens_total{model_name="smollm2-135m"} 2.0' in metrics


# ---- the bundled model: queued requests survive an engine kill -----------------------------------

def _stream_chat(base_url: str, max_tokens: int, out: dict) -> None:
    body = {**BODY, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True}
    out.update(lines=[], tokens=0)
    try:
        with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {API_KEY}"}) as response:
            out["status"] = response.status_code
            for line in response.iter_lines():
                if line.startswith("data: "):
                    out["lines"].append(line[6:])
                    if '"content":"' in line and '"content":""' not in line:
                        out["tokens"] += 1
    except Exception as e:  # noqa: BLE001 - reported by the test
        out["error"] = e


def _wait(condition, timeout: float, what) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def test_engine_kill_resubmits_queued_requests_and_restarts_fast(lifecycle_server):
    """8 running streams and 4 queued behind them; SIGKILL the engine: the running ones end with an error
    event, the queued ones go to the promoted spare engine and complete; /health is back in < 5 s."""
    import json
    import os
    import signal
    import threading
    import time

    srv = lifecycle_server
    _wait(lambda: srv.status()["engine"]["spare"] == "ready", 300, srv.status)
    running, queued = [{} for _ in range(8)], [{} for _ in range(4)]
    threads = [threading.Thread(target=_stream_chat, args=(srv.base_url, 1500, out), daemon=True) for out in running]
    for t in threads:
        t.start()
    _wait(lambda: all(out.get("tokens") for out in running), 180, lambda: running)
    threads += [threading.Thread(target=_stream_chat, args=(srv.base_url, 5, out), daemon=True) for out in queued]
    for t in threads[8:]:
        t.start()
    _wait(lambda: srv.status()["queue"]["waiting"] == 4, 30, srv.status)
    engine = srv.status()["engine"]
    os.kill(engine["pid"], signal.SIGKILL)
    killed = time.monotonic()
    _wait(lambda: httpx.get(srv.base_url + "/health", timeout=5).status_code == 200, 30, srv.status)
    back_after = time.monotonic() - killed
    for t in threads:
        t.join(120)
    status = srv.status()["engine"]
    assert back_after < 5.0
    assert status["pid"] != engine["pid"] and status["restarts"] == 1 and status["resubmitted_requests"] == 4
    for out in running:
        assert out["status"] == 200 and out["lines"][-1] == "[DONE]", out
        assert json.loads(out["lines"][-2])["error"]["code"] == 503
    for out in queued:
        assert out["status"] == 200 and "error" not in out, out
        assert out["lines"][-1] == "[DONE]" and out["tokens"] >= 1, out["lines"]
        assert json.loads(out["lines"][-2])["choices"][0]["finish_reason"] == "length"
