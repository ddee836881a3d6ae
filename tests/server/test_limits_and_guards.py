"""Limits and browser guards against a live server on loopback with the stand-in engine (issue 24, items
2, 3 and 7): stop lists, tools, schemas, messages and prompt size are 400s naming their option; a large
chunked body is 413; a full queue is 429 with Retry-After; a foreign Host is 421; a non-JSON POST is
415; responses carry CSP / X-Frame-Options / nosniff; unreadable bodies get clear 400s; engine failures
are not counted as vllm:request_success."""

from __future__ import annotations

import json

import httpx
import pytest

from live_server import API_KEY, MODEL, fake_app, thread_server
from strata.server.config import ServerConfig
from strata.server.middleware import allowed_host_names

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HI = [{"role": "user", "content": "Hi"}]
CHAT = {"model": MODEL, "messages": HI, "max_tokens": 2}
MESSAGES = {"model": MODEL, "messages": HI, "max_tokens": 2}


@pytest.fixture(scope="module")
def srv():
    with thread_server(fake_app("echo")) as live:
        yield live


def _post_raw(srv, path: str, content: bytes, content_type: str = "application/json", **headers) -> httpx.Response:
    return httpx.post(srv.base_url + path, content=content, timeout=60,
                      headers={**AUTH, "content-type": content_type, **headers})


def _error(response: httpx.Response) -> tuple[str, str | None]:
    body = response.json()
    if body.get("type") == "error":
        return body["error"]["message"], None
    return body["error"]["message"], body["error"]["param"]


def _tool(i: int, parameters: dict | None = None) -> dict:
    return {"type": "function", "function": {"name": f"f{i}", "parameters": parameters or {"type": "object"}}}


# ---- request limits (400 naming the option) ------------------------------------------------------

@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {**CHAT, "stop": [f"s{i}" for i in range(1000)]}),
    ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "stop": [f"s{i}" for i in range(1000)]}),
    ("/v1/messages", {**MESSAGES, "stop_sequences": [f"s{i}" for i in range(1000)]}),
])
def test_a_thousand_stop_strings_are_400(srv, path, body):
    response = srv.post(path, body)
    assert response.status_code == 400, response.text
    message, param = _error(response)
    assert "1000 strings" in message and "--max-stop-strings" in message
    assert param in (None, "stop")


def test_a_long_stop_string_is_400(srv):
    response = srv.post("/v1/chat/completions", {**CHAT, "stop": ["ok", "x" * 5000]})
    assert response.status_code == 400
    assert _error(response) == ("stop.1 is 5000 characters long; this server accepts at most 1024 "
                                "(--max-stop-chars)", "stop.1")
    assert srv.post("/v1/chat/completions", {**CHAT, "stop": ["ok", "x" * 1024]}).status_code == 200


def test_too_many_tools_and_too_large_a_schema_are_400(srv):
    response = srv.post("/v1/chat/completions", {**CHAT, "tools": [_tool(i) for i in range(129)]})
    assert response.status_code == 400 and _error(response)[1] == "tools"
    assert "--max-tools" in _error(response)[0]
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                            for i in range(1000)}}
    response = srv.post("/v1/chat/completions", {**CHAT, "tools": [_tool(0, big)]})
    assert response.status_code == 400 and _error(response)[1] == "tools.0.function.parameters"
    assert "--max-schema-bytes" in _error(response)[0]
    response = srv.post("/v1/messages", {**MESSAGES, "tools": [{"name": "f", "input_schema": big}]})
    assert response.status_code == 400 and "tools.0.input_schema" in _error(response)[0]


def test_too_many_messages_and_too_long_a_prompt_are_400(srv):
    many = [{"role": "user", "content": "Hi"}] * 2049
    response = srv.post("/v1/chat/completions", {**CHAT, "messages": many})
    assert response.status_code == 400 and "--max-messages" in _error(response)[0]
    response = srv.post("/v1/messages", {**MESSAGES, "messages": many})
    assert response.status_code == 400 and "--max-messages" in _error(response)[0]
    long = [{"role": "user", "content": "x" * ((1 << 20) + 1)}]
    response = srv.post("/v1/chat/completions", {**CHAT, "messages": long})
    assert response.status_code == 400 and "--max-prompt-chars" in _error(response)[0]
    response = srv.post("/v1/completions", {"model": MODEL, "prompt": "x" * ((1 << 20) + 1), "max_tokens": 2})
    assert response.status_code == 400 and _error(response)[1] == "prompt"


def test_a_20_mb_chunked_body_is_413(srv):
    def chunks():
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * (1 << 20)
        yield b'"}]}'

    response = httpx.post(srv.base_url + "/v1/chat/completions", content=chunks(), timeout=60,
                          headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 413
    assert "--max-body-bytes" in response.json()["error"]["message"]
    assert srv.post("/v1/chat/completions", CHAT).status_code == 200  # the server is fine after it


def test_a_full_queue_is_429_with_retry_after():
    """The stand-in engine in "hang" mode never answers: 4 requests fill its 4 slots, 2 more wait
    (max_queued_requests=2), and the next one is turned away."""
    app = fake_app("hang", max_queued_requests=2, keepalive_s=0.2, engine_hang_timeout_s=600)
    with thread_server(app) as live, httpx.Client(headers=AUTH, timeout=30) as client:
        streams = []
        try:
            for _ in range(6):
                stream = client.stream("POST", live.base_url + "/v1/chat/completions", json={**CHAT, "stream": True})
                response = stream.__enter__()
                streams.append(stream)
                assert response.status_code == 200
            assert live.status()["in_flight_requests"] == 6
            response = httpx.post(live.base_url + "/v1/messages", json=MESSAGES, headers=AUTH, timeout=30)
            assert response.status_code == 429 and response.headers["retry-after"] == "2"
            assert response.json()["error"]["type"] == "rate_limit_error"
            assert "--max-queued-requests 2" in response.json()["error"]["message"]
            response = live.post("/v1/chat/completions", CHAT)
            assert response.status_code == 429 and response.json()["error"]["type"] == "rate_limit_exceeded"
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)


# ---- browser guards ------------------------------------------------------------------------------

def test_a_foreign_host_is_421_naming_the_option(srv):
    port = srv.base_url.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        response = httpx.get(srv.base_url + "/v1/monitor", headers={**AUTH, "host": host})
        assert response.status_code == 421, host
        assert "--allowed-hosts" in response.json()["error"]["message"]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert httpx.get(srv.base_url + "/v1/monitor", headers={**AUTH, "host": host}).status_code == 200, host


def test_allowed_hosts_option():
    assert allowed_host_names(ServerConfig()) == {"localhost", "127.0.0.1", "[::1]"}
    assert allowed_host_names(ServerConfig(host="::1")) == {"localhost", "127.0.0.1", "[::1]"}
    assert allowed_host_names(ServerConfig(host="0.0.0.0")) is None
    assert allowed_host_names(ServerConfig(allowed_hosts="*")) is None
    assert allowed_host_names(ServerConfig(host="0.0.0.0", allowed_hosts="llm.lan:8080, Box")) == {"llm.lan", "box"}


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", ""])
def test_a_non_json_post_is_415(srv, content_type):
    headers = {**AUTH, "origin": "http://evil.example", "content-type": content_type}
    response = httpx.post(srv.base_url + "/v1/chat/completions", content=json.dumps(CHAT).encode(), headers=headers)
    assert response.status_code == 415, response.text
    assert "application/json" in response.json()["error"]["message"]
    response = _post_raw(srv, "/v1/messages", json.dumps(MESSAGES).encode(), content_type)
    assert response.status_code == 415 and response.json()["type"] == "error"


def test_json_content_types_are_accepted(srv):
    for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        assert _post_raw(srv, "/v1/chat/completions", json.dumps(CHAT).encode(), content_type).status_code == 200


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/health", "/v1/models"])
def test_security_headers(srv, path):
    response = httpx.get(srv.base_url + path, headers=AUTH)
    assert response.status_code == 200
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert "default-src 'self'" in response.headers["content-security-policy"]


# ---- unreadable bodies and schemas (clear 400s) --------------------------------------------------

def test_deep_nesting_invalid_utf8_and_lone_surrogates_are_clear_400s(srv):
    nested = "[" * 100_000 + "]" * 100_000
    response = _post_raw(srv, "/v1/chat/completions", f'{{"model": "{MODEL}", "metadata": {nested}}}'.encode())
    assert response.status_code == 400
    assert _error(response) == ("the body's JSON is nested too deeply to read", "body")
    response = _post_raw(srv, "/v1/chat/completions",
                         b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}')
    assert response.status_code == 400
    assert _error(response) == ("the body is not valid UTF-8 (byte 57): send JSON encoded as UTF-8", "body")
    for path, body, param in [
        ("/v1/completions", b'{"model": "%s", "prompt": "a \\ud800 b"}', "prompt"),
        ("/v1/chat/completions", b'{"model": "%s", "messages": [{"role": "user", "content": "\\udfff"}]}',
         "messages.0.content"),
    ]:
        response = _post_raw(srv, path, body.replace(b"%s", MODEL.encode()))
        assert response.status_code == 400, response.text
        assert "unpaired UTF-16 surrogate" in _error(response)[0] and _error(response)[1] == param
    body = json.dumps({**MESSAGES, "messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]})
    response = _post_raw(srv, "/v1/messages", body.encode())
    assert response.status_code == 400 and _error(response)[0].startswith("messages.0.content.0 holds an unpaired")


def test_unknown_content_blocks_are_400_naming_the_block(srv):
    response = srv.post("/v1/messages", {**MESSAGES, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}]}]})
    assert response.status_code == 400
    assert _error(response)[0] == ("messages.0.content.1.type: 'image' is not supported here; use one of 'text', "
                                   "'tool_use', 'tool_result', 'thinking'")
    response = srv.post("/v1/chat/completions", {**CHAT, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})
    assert response.status_code == 400
    assert _error(response) == ("messages.0.content.0.type: 'image_url' is not supported here; use 'text'",
                                "messages.0.content.0.type")


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {**CHAT, "tools": [_tool(0, {"type": "objectx"})]}, "tools.0.function.parameters"),
    ("/v1/chat/completions", {**CHAT, "tools": [_tool(0, {"type": "object", "required": "city"})]},
     "tools.0.function.parameters"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": 12}}}}}},
     "response_format.json_schema.schema"),
    ("/v1/messages", {**MESSAGES, "tools": [{"name": "f", "input_schema": {"type": "objectx"}}]},
     "tools.0.input_schema"),
])
def test_invalid_json_schemas_are_400_naming_the_field(srv, path, body, param):
    response = srv.post(path, body)
    assert response.status_code == 400, response.text
    message, given = _error(response)
    assert message.startswith(f"{param} is not a valid JSON Schema: at ")
    assert given in (None, param)


def test_valid_schemas_pass(srv):
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"city": {"type": "string"}}, "required": ["city"]}
    assert srv.post("/v1/chat/completions", {**CHAT, "tools": [_tool(0, schema)]}).status_code == 200
    assert srv.post("/v1/messages", {**MESSAGES, "tools": [{"name": "f", "input_schema": schema}]}).status_code == 200


# ---- metrics -------------------------------------------------------------------------------------

def test_engine_failures_are_not_counted_as_success():
    with thread_server(fake_app("die")) as live:
        assert live.post("/v1/chat/completions", CHAT).status_code == 503
        metrics = live.get("/metrics").text
    assert 'vllm:request_success_total{finished_reason="engine_error"' not in metrics
    assert f'strata:failed_requests_total{{model_name="{MODEL}",reason="engine_error"}} 1.0' in metrics
