"""Fixtures: one real `strata serve` subprocess shared by the server tests, and in-thread uvicorn
servers for apps with a stand-in engine (helpers in tests/live_server.py).

The real server starts right after collection and the tests that need it run last, so the model loads
while the fast stand-in-engine tests run."""

from __future__ import annotations

import pytest

from live_server import attach, fake_app, start_serve, stop_serve, thread_server

_LIVE: dict = {}


def pytest_collection_modifyitems(session, config, items):
    needs_server = [item for item in items if "server" in getattr(item, "fixturenames", ())]
    if needs_server and not _LIVE:
        start_serve(_LIVE, "strata-serve-", "--max-model-len", "2048", "--max-num-seqs", "16")
        items[:] = [item for item in items if item not in needs_server] + needs_server


def pytest_unconfigure(config):
    stop_serve(_LIVE)


@pytest.fixture(scope="session")
def server():
    return attach(_LIVE)


@pytest.fixture(scope="session")
def tool_server():
    """A stand-in engine that answers every request with a Qwen-style thinking + tool-call output."""
    with thread_server(fake_app("tool")) as live:
        yield live
