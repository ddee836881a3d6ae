"""Engine supervision with a stand-in engine process (fast, no model): an engine that dies after the
first token ends the stream with an error event, one that hangs is ended after the hang timeout with a
503, and in both cases a new engine is started and serves the next request."""

from __future__ import annotations

import httpx

from live_server import MODEL, fake_app, thread_server

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


def test_echo_engine_serves_and_metrics_count():
    with thread_server(fake_app("echo")) as srv:
        response = srv.post("/v1/chat/completions", BODY)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "Hi there"
        assert response.json()["usage"]["completion_tokens"] == 2
        metrics = srv.get("/metrics").text
        assert 'vllm:generation_tokens_total{model_name="smollm2-135m"} 2.0' in metrics
