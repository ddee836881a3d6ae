"""HTTP-level errors keep their meaning in both wire shapes: a wrong method is 405 method_not_allowed
(OpenAI) / invalid_request_error (Anthropic), not internal_error (issue 24, item 9)."""

from __future__ import annotations

import httpx

from live_server import API_KEY

HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def test_a_wrong_method_is_405_method_not_allowed(tool_server):
    response = httpx.get(tool_server.base_url + "/v1/chat/completions", headers=HEADERS)
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"
    assert response.json()["error"]["code"] == 405


def test_a_wrong_method_on_messages_is_an_anthropic_invalid_request(tool_server):
    response = httpx.get(tool_server.base_url + "/v1/messages", headers=HEADERS)
    assert response.status_code == 405
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
