"""The web app end to end: Debian's Chromium (headless, Playwright) against a live `strata serve` with the
bundled model. Chat streams and stops, the Monitor moves during a request, conversations survive a
reload, a wrong key brings up the key box. Screenshots go to test-artifacts/web/."""

from __future__ import annotations

import time

import httpx
import pytest

from live_server import API_KEY

LONG_PROMPT = "Count from 1 to 500, separated by commas."


def set_settings(tab, max_tokens: int | None, temperature: float = 0.0) -> None:
    tab.click("#open-settings")
    tab.fill("#set-max-tokens", "" if max_tokens is None else str(max_tokens))
    tab.eval_on_selector("#set-temperature", """(el, v) => { el.value = v;
                         el.dispatchEvent(new Event('input', {bubbles: true})); }""", str(temperature))
    tab.click("#close-settings")


def send(tab, text: str) -> None:
    tab.click("#new-chat")
    tab.fill("#prompt", text)
    tab.press("#prompt", "Enter")


def last_answer(tab):
    return tab.locator(".msg.assistant .body").last


def wait_idle(web_server, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = web_server.status()
        if status["slots"]["running"] == 0 or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_wrong_key_shows_the_key_box_and_the_right_key_closes_it(page, screenshot):
    page.evaluate("localStorage.setItem('strata.apiKey', JSON.stringify('wrong-key'))")
    page.reload()
    page.wait_for_selector("#key-box", state="visible")
    assert page.locator("#engine-badge").inner_text() == "API key needed"
    screenshot(page, "key-box")
    page.fill("#key-input", API_KEY)
    page.press("#key-input", "Enter")
    page.wait_for_selector("#key-box", state="hidden")
    page.wait_for_function("document.querySelector('#engine-badge').textContent.endsWith('ready')")
    assert page.evaluate("JSON.parse(localStorage.getItem('strata.apiKey'))") == API_KEY


def test_send_a_message_and_see_the_answer_stream_in(page, web_server, screenshot):
    set_settings(page, max_tokens=16)
    send(page, "Name three colours.")
    assert page.locator(".msg.user .body").last.inner_text() == "Name three colours."
    # Text that is still streaming: the answer is non-empty while the live cursor is on it.
    page.wait_for_function("(() => { const b = document.querySelector('.msg.assistant .body.cursor');"
                           " return b && b.textContent.trim().length > 0; })()")
    assert page.locator("#stop").is_visible()
    page.wait_for_selector(".msg.assistant .body.cursor", state="detached")
    answer = last_answer(page).inner_text().strip()
    assert answer
    assert "tokens" in page.locator(".msg.assistant .meta").last.inner_text()
    assert page.locator("#send").is_visible() and not page.locator("#stop").is_visible()
    assert page.locator("#conv-list .conv-open").first.inner_text() == "Name three colours."
    screenshot(page, "chat-answer")


def test_stop_a_long_answer_frees_the_slot(page, web_server, screenshot):
    set_settings(page, max_tokens=None)
    send(page, LONG_PROMPT)
    page.wait_for_function("(() => { const b = document.querySelector('.msg.assistant .body.cursor');"
                           " return b && b.textContent.length > 3; })()")
    assert web_server.status()["slots"]["running"] == 1
    page.click("#stop")
    page.wait_for_selector(".msg.assistant .msg-error")
    assert page.locator(".msg.assistant .msg-error").last.inner_text() == "(stopped)"
    stopped_text = last_answer(page).inner_text()
    assert stopped_text
    assert wait_idle(web_server, 5.0)["slots"]["running"] == 0
    screenshot(page, "chat-stopped")
    recent = web_server.get("/v1/monitor").json()["recent_requests"]
    assert recent[0]["finish_reason"] == "abort" and recent[0]["output_tokens"] > 0


def test_monitor_counters_move_during_a_request(page, web_server, screenshot):
    page.goto(web_server.base_url + "/#monitor")
    page.wait_for_function("document.querySelector('#m-state').textContent === 'Idle'")
    served_before = int(page.locator("[data-testid=m-total-requests]").inner_text())
    page.click("nav a[data-view=chat]")
    set_settings(page, max_tokens=None)
    send(page, LONG_PROMPT)
    page.wait_for_selector(".msg.assistant .body.cursor")
    page.click("nav a[data-view=monitor]")
    page.wait_for_function("document.querySelector('#m-state').textContent === 'Generating'")
    assert page.locator("[data-testid=m-running]").inner_text() == "1"
    assert int(page.locator("[data-testid=m-total-requests]").inner_text()) == served_before + 1
    page.wait_for_function("!document.querySelector('#m-tok-s').textContent.startsWith('now 0 ')")
    screenshot(page, "monitor-generating")
    page.click("nav a[data-view=chat]")
    page.click("#stop")
    page.click("nav a[data-view=monitor]")
    # Activity is the server's view (at once); slots are the engine's next status message (within a second).
    page.wait_for_function("document.querySelector('#m-state').textContent === 'Idle'"
                           " && document.querySelector('[data-testid=m-running]').textContent === '0'")
    first_row = page.locator("#m-requests tbody tr").first.locator("td")
    assert first_row.nth(0).inner_text() == str(served_before + 1) and first_row.nth(7).inner_text() == "abort"
    assert int(first_row.nth(3).inner_text()) > 0


def test_a_reload_finds_the_conversation_again(page):
    set_settings(page, max_tokens=8)
    send(page, "Say hello to Ada.")
    page.wait_for_selector(".msg.assistant .meta")
    answer = last_answer(page).inner_text()
    page.reload()
    page.wait_for_selector(".msg.assistant .body")
    assert page.locator("#chat-title").inner_text() == "Say hello to Ada."
    assert page.locator(".msg.user .body").last.inner_text() == "Say hello to Ada."
    assert last_answer(page).inner_text() == answer
    titles = page.locator("#conv-list .conv-open").all_inner_texts()
    assert {"Say hello to Ada.", "Name three colours."} <= set(titles)
    page.get_by_role("button", name="Rename “Say hello to Ada.”").click()
    page.fill("#conv-list input", "Greeting")
    page.press("#conv-list input", "Enter")
    page.reload()
    assert page.locator("#conv-list .conv-open").first.inner_text() == "Greeting"


def test_context_too_long_shows_the_servers_message(page):
    set_settings(page, max_tokens=5000)
    send(page, "Hi")
    error = page.locator("#chat-error")
    error.wait_for(state="visible")
    assert "400" in error.inner_text() and "exceeds the context of 1024 tokens" in error.inner_text()


@pytest.mark.parametrize("theme, width", [("light", 1280), ("dark", 1280), ("light", 390), ("dark", 390)])
def test_views_render_in_both_themes_and_at_phone_width(page, web_server, screenshot, theme, width):
    page.set_viewport_size({"width": width, "height": 800 if width > 500 else 844})
    page.evaluate("t => localStorage.setItem('strata.theme', JSON.stringify(t))", theme)
    page.reload()
    for view in ("chat", "monitor", "about"):
        page.goto(f"{web_server.base_url}/#{view}")
        if view == "monitor":
            page.wait_for_function("document.querySelector('#m-state').textContent === 'Idle'")
        if view == "about":
            page.wait_for_selector("#a-examples pre")
            assert f"{web_server.base_url}/v1" in page.locator("#a-urls").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        screenshot(page, f"{view}-{theme}-{width}")
        if view == "chat" and width < 500:   # the conversation list is an overlay on a phone
            assert not page.locator("#sidebar").is_visible()
            page.click("#toggle-sidebar")
            assert page.locator("#sidebar").is_visible()
            screenshot(page, f"chat-list-{theme}-{width}")
            page.keyboard.press("Escape")
            assert not page.locator("#sidebar").is_visible()


def test_markdown_escapes_html_and_renders_code_blocks(page):
    source = "# T\n<img src=x onerror=alert(1)> **b** `<i>`\n\n```py\nx = 1 < 2\n```"
    html = page.evaluate("renderMarkdown", source)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<strong>b</strong>" in html and "<code>&lt;i&gt;</code>" in html
    assert '<pre><code>x = 1 &lt; 2</code></pre>' in html and 'class="copy"' in html
    loose = page.evaluate("renderMarkdown", "1. a\n\n2. b\n\ntext")
    assert loose == "<ol><li>a</li><li>b</li></ol>\n<p>text</p>"


def test_static_files_need_no_key_and_the_api_does(web_server):
    assert httpx.get(web_server.base_url + "/").status_code == 200
    assert httpx.get(web_server.base_url + "/static/app.js").status_code == 200
    assert httpx.get(web_server.base_url + "/v1/monitor").status_code == 401


def test_thinking_is_folded_and_code_blocks_copy(page, browser_context, web_server):
    conversation = {"id": "md", "title": "Stored", "created": 0, "updated": 0, "messages": [
        {"role": "user", "content": "Code?"},
        {"role": "assistant", "reasoning": "They want code.", "content": "Sure:\n\n```python\nprint('<hi>')\n```"}]}
    page.evaluate("""c => { localStorage.setItem('strata.conversations', JSON.stringify([c]));
                            localStorage.setItem('strata.current', JSON.stringify(c.id)); }""", conversation)
    page.reload()
    thinking = page.locator(".msg.assistant details")
    assert thinking.get_attribute("open") is None and not page.get_by_text("They want code.").is_visible()
    thinking.locator("summary").click()
    assert page.get_by_text("They want code.").is_visible()
    browser_context.grant_permissions(["clipboard-read", "clipboard-write"], origin=web_server.base_url)
    page.get_by_role("button", name="Copy code").click()
    assert page.evaluate("navigator.clipboard.readText()") == "print('<hi>')"
