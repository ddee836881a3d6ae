"""`strata chat` over HTTP (stand-in engine): the slash commands change the request body, and the SSE
reader splits thinking from content."""

from __future__ import annotations

import argparse

import httpx

from live_server import API_KEY, MODEL
from strata.cli.chat import Session, stream_chat


def _session() -> Session:
    return Session(MODEL, None, argparse.Namespace(max_tokens=8, temperature=0.0, top_p=1.0))


def test_commands_shape_the_request():
    session = _session()
    session.history.append({"role": "user", "content": "hi"})
    assert session.command("/system Be brief.") == "(system prompt set)"
    assert session.command("/think high") == "(thinking high)"
    body = session.request_body()
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and body["reasoning_effort"] == "high"
    assert session.command("/think off") and session.request_body()["reasoning_effort"] == "none"
    assert session.command("/think loud").startswith("usage")
    assert session.command("/reset") and session.request_body()["messages"] == [{"role": "system",
                                                                                 "content": "Be brief."}]
    assert session.command("hello") is None


def test_stream_chat_splits_thinking_and_content(tool_server):
    http = httpx.Client(headers={"Authorization": f"Bearer {API_KEY}"})
    session = _session()
    session.history.append({"role": "user", "content": "Weather?"})
    pieces = list(stream_chat(http, tool_server.base_url, session.request_body()))
    assert "".join(t for k, t in pieces if k == "reasoning") == "need the weather"
    assert "<tool_call>" in "".join(t for k, t in pieces if k == "content")  # no tools requested: plain text
