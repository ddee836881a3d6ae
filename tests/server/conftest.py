"""Fixtures: one real `strata serve` subprocess shared by the server tests, and in-thread uvicorn
servers for apps with a stand-in engine (helpers in tests/live_server.py).

The real server starts right after collection and the tests that need it run last, so the model loads
while the fast stand-in-engine tests run. A second real server (8 slots, a spare engine, a 5 s drain) is
shared by the tests that end its processes: the engine-kill test, then the SIGTERM test, which runs last."""

from __future__ import annotations

import pytest

from live_server import attach, fake_app, start_serve, stop_serve, thread_server

_LIVE: dict = {}
_LIFECYCLE: dict = {}
_FUZZ: dict = {}


def pytest_collection_modifyitems(session, config, items):
    def using(name: str) -> list:
        return [item for item in items if name in getattr(item, "fixturenames", ())]

    needs_server = using("server")
    if needs_server and not _LIVE:
        start_serve(_LIVE, "strata-serve-", "--max-model-len", "2048", "--max-num-seqs", "16", "--engine-spare", "off")
    stopping = using("lifecycle_server_to_stop")
    _FUZZ["wanted"] = bool(fuzz := using("background_fuzz"))
    last = fuzz + needs_server + [item for item in using("lifecycle_server") if item not in stopping] + stopping
    items[:] = [item for item in items if item not in last] + last


def pytest_runtest_setup(item):
    """The schemathesis run starts with the first test here (test_fuzz.py says why)."""
    if _FUZZ.get("wanted") and "run" not in _FUZZ:
        from test_fuzz import BackgroundFuzz

        _FUZZ["run"] = BackgroundFuzz()


def pytest_unconfigure(config):
    stop_serve(_LIVE)
    stop_serve(_LIFECYCLE)
    if "run" in _FUZZ:
        _FUZZ["run"].stop()


@pytest.fixture(scope="session")
def server():
    return attach(_LIVE)


@pytest.fixture(scope="session")
def lifecycle_server():
    """Started at its first use (it holds two engines: one model load for both tests, not four)."""
    if not _LIFECYCLE:
        start_serve(_LIFECYCLE, "strata-lifecycle-", "--max-model-len", "2048", "--max-num-seqs", "8",
                    "--drain-timeout-s", "5")
    return attach(_LIFECYCLE)


@pytest.fixture
def lifecycle_server_to_stop(lifecycle_server):
    """The same server, for a test that ends it (ordered after every other user)."""
    return lifecycle_server


@pytest.fixture(scope="session")
def background_fuzz():
    if "run" not in _FUZZ:
        from test_fuzz import BackgroundFuzz

        _FUZZ["run"] = BackgroundFuzz()
    return _FUZZ["run"]


@pytest.fixture(scope="session")
def tool_server():
    """A stand-in engine that answers every request with a Qwen-style thinking + tool-call output."""
    with thread_server(fake_app("tool")) as live:
        yield live
