"""The web app's Chat page on a 390-px-wide phone screen (issue 24, item 9): a conversation with a long title
(words, or one unbroken string) and long messages never makes the page wider than the screen, with the
conversation list closed or open; the title is cut with an ellipsis and the Settings button stays on screen.
Debian's Chromium through Playwright (skipped without them, like tests/web) against the app served with a
stand-in engine: the layout needs no model."""

from __future__ import annotations

import os

import pytest

from live_server import API_KEY, fake_app, thread_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TITLES = ["A very long conversation title about many things " * 6, "x" * 400]


@pytest.fixture(scope="module")
def phone():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with thread_server(fake_app("echo")) as srv, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        tab = browser.new_page(viewport={"width": 390, "height": 844})
        tab.set_default_timeout(20_000)
        tab.goto(srv.base_url + "/")
        yield tab
        browser.close()


def _open_conversation(tab, title: str) -> None:
    conversation = {"id": "c1", "title": title, "created": 1, "updated": 1,
                    "messages": [{"role": "user", "content": "Hi " * 60 + "y" * 300},
                                 {"role": "assistant", "content": "word " * 120}]}
    tab.evaluate("""([key, conv]) => {
        localStorage.setItem('strata.apiKey', JSON.stringify(key));
        localStorage.setItem('strata.conversations', JSON.stringify([conv]));
        localStorage.setItem('strata.current', JSON.stringify(conv.id)); }""", [API_KEY, conversation])
    tab.reload()
    tab.wait_for_function("document.querySelector('#chat-title').textContent.length > 100")


def _page_width(tab) -> int:
    return tab.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")


@pytest.mark.parametrize("title", TITLES, ids=["words", "unbroken"])
def test_long_title_does_not_overflow_a_phone_screen(phone, title):
    _open_conversation(phone, title)
    assert _page_width(phone) <= 390
    assert phone.eval_on_selector("#chat-title", "el => el.scrollWidth > el.clientWidth")  # cut, with an ellipsis
    settings = phone.locator("#open-settings").bounding_box()
    assert settings["x"] + settings["width"] <= 390
    assert phone.locator(".msg.user .body").bounding_box()["width"] <= 390
    phone.click("#toggle-sidebar")
    phone.wait_for_selector("#sidebar.open")
    assert _page_width(phone) <= 390
    conv = phone.locator("#conv-list li").first.bounding_box()
    assert conv["x"] + conv["width"] <= 390
    phone.click("#close-sidebar")
