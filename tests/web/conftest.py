"""Fixtures for the browser tests: one real `strata serve` (bundled model, CPU, API key) started right
after collection so the model loads while other tests run, and Debian's Chromium driven by Playwright
with a fresh profile (Playwright never downloads a browser here: it gets executable_path). The tests
skip when /usr/bin/chromium or the playwright package is missing."""

from __future__ import annotations

import os

import pytest

from live_server import API_KEY, ROOT, attach, start_serve, stop_serve

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "web")
MAX_MODEL_LEN = 1024

_WEB: dict = {}


def missing_browser() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[test]'"
    return None


def pytest_collection_modifyitems(session, config, items):
    if _WEB or missing_browser() or not any("web_server" in getattr(i, "fixturenames", ()) for i in items):
        return
    start_serve(_WEB, "strata-web-", "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "4",
                "--engine-spare", "off")


def pytest_unconfigure(config):
    stop_serve(_WEB)


@pytest.fixture(scope="session")
def web_server():
    reason = missing_browser()
    if reason:
        pytest.skip(reason)
    return attach(_WEB)


@pytest.fixture(scope="module")
def browser_context(web_server, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 800})
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser_context, web_server):
    """A tab on the web app with the right API key stored and the light theme."""
    tab = browser_context.new_page()
    tab.goto(web_server.base_url + "/")
    tab.evaluate("""key => { localStorage.setItem('strata.apiKey', JSON.stringify(key));
                             localStorage.setItem('strata.theme', JSON.stringify('light')); }""", API_KEY)
    tab.reload()
    yield tab
    tab.close()


@pytest.fixture
def screenshot():
    """screenshot(tab, name) saves test-artifacts/web/NAME.png."""
    def take(tab, name: str) -> None:
        tab.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"))
    return take
