"""Large bodies are decoded and validated off the event loop (strata/server/body.py), with the answers
FastAPI gives when it decodes them itself: each body below is sent once through the preparation thread
(offload threshold 0) and once through FastAPI's path (threshold above the body), against a live server
with the stand-in engine, and the two responses must be equal."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from live_server import API_KEY, MODEL, fake_app, thread_server
from strata.server import body as body_module

AUTH = {"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
HI = [{"role": "user", "content": "Hi"}]


def _json(value) -> bytes:
    return json.dumps(value).encode()


CASES = [
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI, "max_tokens": 2})),
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI, "max_tokens": 2, "stop": ["a"],
                                    "tools": [{"type": "function", "function": {"name": "f"}}]})),
    ("/v1/completions", _json({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2})),
    ("/v1/messages", _json({"model": MODEL, "messages": HI, "max_tokens": 2})),
    ("/v1/responses", _json({"model": MODEL, "input": "Hi", "max_output_tokens": 2})),
    ("/v1/chat/completions", b'{"model": "m", "messages": [}'),                           # invalid JSON
    ("/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "\xff"}]}'),  # not UTF-8
    ("/v1/chat/completions", b'\xef\xbb\xbf{"model": "m"}'),                               # UTF-8 BOM
    ("/v1/chat/completions", b'{"model": "%s", "metadata": %s}' % (MODEL.encode(), b"[" * 5000 + b"]" * 5000)),
    ("/v1/completions", b'{"model": "%s", "prompt": "a \\ud800 b", "max_tokens": 2}' % MODEL.encode()),
    ("/v1/chat/completions", _json({"model": MODEL, "messages": [{"role": "robot", "content": "Hi"}]})),
    ("/v1/chat/completions", b'{"model": "%s", "messages": [], "temperature": NaN}' % MODEL.encode()),
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI, "max_tokens": "many"})),
    ("/v1/chat/completions", _json([1, 2])),
    ("/v1/messages", _json({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "video"}]}],
                            "max_tokens": 2})),
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI * 2049})),               # --max-messages
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI, "stop": ["s"] * 65})),  # --max-stop-strings
    ("/v1/messages", _json({"model": MODEL, "messages": HI, "max_tokens": 2, "stop_sequences": ["s"] * 65})),
    ("/v1/chat/completions", _json({"model": MODEL, "messages": HI,
                                    "tools": [{"type": "function", "function": {"name": "f"}}] * 129})),
    ("/v1/responses", _json({"model": MODEL, "input": HI * 2049})),
]


@pytest.fixture(scope="module")
def srv():
    with thread_server(fake_app("echo")) as live:
        yield live


def _answer(srv, path: str, content: bytes) -> tuple[int, dict]:
    response = httpx.post(srv.base_url + path, content=content, headers=AUTH, timeout=60)
    return response.status_code, _without_ids(response.json())


def _without_ids(value):
    """Ids and times differ between any two requests."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "created", "created_at")}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


@pytest.mark.parametrize("path,content", CASES)
def test_offloaded_and_fastapi_decoding_answer_alike(srv, monkeypatch, path, content):
    monkeypatch.setattr(body_module, "OFFLOAD_MIN_BYTES", len(content) + 1)
    by_fastapi = _answer(srv, path, content)
    monkeypatch.setattr(body_module, "OFFLOAD_MIN_BYTES", 0)
    assert _answer(srv, path, content) == by_fastapi


def test_large_bodies_decode_in_a_preparation_thread_and_small_ones_on_the_loop(srv, monkeypatch):
    threads: list[str] = []
    decode = body_module.decode

    def recording_decode(body: bytes):
        threads.append(threading.current_thread().name)
        return decode(body)

    monkeypatch.setattr(body_module, "decode", recording_decode)
    small = _json({"model": MODEL, "messages": HI, "max_tokens": 2})
    large = _json({"model": MODEL, "messages": HI, "max_tokens": 2, "padding": "x" * body_module.OFFLOAD_MIN_BYTES})
    assert _answer(srv, "/v1/chat/completions", small)[0] == 200
    assert threads == []
    assert _answer(srv, "/v1/chat/completions", large)[0] == 200
    assert len(threads) == 1 and threads[0].startswith("strata-prepare")


def test_list_limits_are_checked_before_validation(srv):
    """100,000 messages, some invalid: the count is refused before pydantic reads them (about 0.4 s of held GIL)."""
    content = _json({"model": MODEL, "messages": [{"role": "robot", "content": 1}] * 100_000})
    status, answer = _answer(srv, "/v1/chat/completions", content)
    assert status == 400 and answer["error"]["param"] == "messages"
    assert answer["error"]["message"] == ("messages has 100000 entries; this server accepts at most 2048 "
                                          "(--max-messages)")
