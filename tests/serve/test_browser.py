"""The web page in a real browser: Playwright driving the system's Chromium.

The service runs as its own process in front of a SQLite store; another
process writes a session while the page follows it. Every request the page
makes is intercepted: anything not for the service on 127.0.0.1 is aborted
and fails the test. Screenshots of the list and of a transcript go to the
directory `TURNKEEP_SCREENSHOTS` names (`make screenshots` refreshes
docs/images/ that way), else to the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright
from tests.cli.support import Store, converse
from tests.serve.conftest import Serve, killed_in_turn

CHROMIUM = Path("/usr/bin/chromium")
WRITER = Path(__file__).parent / "_writer.py"
SHOTS = os.environ.get("TURNKEEP_SCREENSHOTS")  # read before the fixtures clear it

pytestmark = pytest.mark.slow


@pytest.fixture
def stored(sqlite_store: Store) -> Store:
    """A finished conversation and a session cut off inside a tool."""
    asyncio.run(
        converse(sqlite_store, "s-talk", ("hello there", "look it up", "thanks"))
    )
    killed_in_turn(sqlite_store, "s-cut")
    return sqlite_store


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), (
        "the browser tests need Debian's Chromium: apt-get install -y chromium "
        "(.ci/run installs it)"
    )
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=args, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def writer(stored: Store) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(WRITER),
            stored.name,
            msgspec.json.encode(stored.options()).decode(),
            "s-live",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)
    proc.stdout.close()


def guarded_page(browser: Browser, base: str, outside: list[str]) -> Page:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    allowed = urlsplit(base).netloc

    def route(route: Route) -> None:
        url = route.request.url
        if urlsplit(url).netloc != allowed:
            outside.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", route)
    return context.new_page()


def test_the_page_lists_shows_and_follows_sessions(
    stored: Store,
    serve_process: Serve,
    browser: Browser,
    writer: subprocess.Popen[str],
    tmp_path: Path,
) -> None:
    shots = Path(SHOTS) if SHOTS else tmp_path
    base = serve_process(stored)
    outside: list[str] = []
    page = guarded_page(browser, base, outside)

    # The list: status, title, turns, updated, size; search by title.
    page.goto(f"{base}/")
    rows = page.locator("table.sessions tbody tr")
    expect(rows).to_have_count(3)
    talk = rows.filter(has_text="hello there")
    expect(talk.locator(".badge")).to_have_text("idle")
    expect(talk.locator("td").nth(2)).to_have_text("3")
    expect(talk.locator("time")).to_contain_text("UTC")
    expect(talk.locator("td").nth(4)).to_contain_text("kB")
    expect(rows.filter(has_text="deploy it").locator(".badge")).to_have_text(
        "interrupted"
    )
    page.screenshot(path=str(shots / "serve-list.png"), full_page=True)
    page.fill("input[name=q]", "HELLO THERE")
    page.click("form.search button")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("hello there")

    # A transcript: messages, a tool call with its replay policy and status,
    # turn boundaries with usage.
    page.goto(f"{base}/view/s-talk")
    expect(page.locator("section.turn")).to_have_count(3)
    expect(page.locator(".msg.user").first).to_contain_text("hello there")
    expect(page.locator(".msg.assistant").first).to_be_visible()
    call = page.locator(".call").first
    expect(call.locator(".replay")).to_have_text("unsafe")
    expect(call.locator(".status")).to_have_text("ok")
    expect(call.locator(".output")).to_contain_text("found x")
    expect(page.locator(".turn-end .usage").first).to_contain_text("events")
    page.screenshot(path=str(shots / "serve-transcript.png"), full_page=True)

    # A session cut off inside a tool: interrupted marks.
    page.goto(f"{base}/view/s-cut")
    expect(page.locator('.call[data-status="unanswered"] .mark')).to_contain_text(
        "INTERRUPTED"
    )
    expect(page.locator(".open-turn.cut")).to_contain_text("cut off")

    # Live follow: another process writes turns while the page is open.
    page.goto(f"{base}/view/s-live")
    expect(page.locator("section.turn")).to_have_count(1)
    expect(page.locator("#follow-state")).to_contain_text("following")
    assert writer.stdin is not None
    assert writer.stdout is not None
    for turn in (2, 3):
        writer.stdin.write("next\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == f"turn {turn}\n"
    turns = page.locator("section.turn")
    expect(turns).to_have_count(3, timeout=15_000)
    live_call = turns.nth(2).locator(".call")
    expect(live_call.locator(".status")).to_have_text("ok")
    expect(live_call.locator(".replay")).to_have_text("unsafe")
    expect(turns.nth(2).locator(".turn-end")).to_contain_text("completed")
    expect(turns.nth(2).locator(".msg.assistant").last).to_contain_text("is out")
    # Reloaded, the server renders the same transcript the script built.
    live_html = page.locator("#transcript .call").count()
    page.reload()
    expect(page.locator("#transcript .call")).to_have_count(live_html)

    assert outside == []
