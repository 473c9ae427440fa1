"""The web page in a real browser: Playwright driving the system's Chromium.

Where Chromium is not installed these tests skip, naming the install
command; where `.ci/run` requires them (`TURNKEEP_REQUIRE_CHROMIUM=1`) they
fail instead (`tests/support/chromium.py`).

The service runs as its own process in front of a SQLite store; another
process writes a session while the page follows it. Every request the page
makes is intercepted: anything not for the service on 127.0.0.1 is aborted
and fails the test. The cancel button is driven against a turn running in
another process (`tests/cli/_slow_turn.py`). Screenshots of the list and
of a transcript go to the directory `TURNKEEP_SCREENSHOTS` names (`make
screenshots` refreshes docs/images/ that way), else to the test's
temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest
from playwright.sync_api import (
    Browser,
    Dialog,
    Page,
    Request,
    Route,
    expect,
    sync_playwright,
)
from tests.cli.support import Store, converse
from tests.cli.test_cancel import slow_turn as started_slow_turn
from tests.serve.conftest import Serve, killed_in_turn
from tests.support.chromium import require_chromium

from turnkeep.cancelrequest import cancel_requests

WRITER = Path(__file__).parent / "_writer.py"
SHOTS = os.environ.get("TURNKEEP_SCREENSHOTS")  # read before the fixtures clear it

TOKEN = "Vq3xZ8pL0sN4tY7wB2mK6r"  # noqa: S105 - a test token
LIVE = 15_000
"""Milliseconds for what the page learns over its event stream.

Playwright's 5 s default is short for CI's busy machine, which runs
Chromium, the service and the writer beside the rest of the suite.
"""

pytestmark = [pytest.mark.slow, pytest.mark.browser]


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
    executable = require_chromium()
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(executable), args=args, headless=True
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
    expect(page.locator("#follow-state")).to_contain_text("following", timeout=LIVE)
    assert writer.stdin is not None
    assert writer.stdout is not None
    for turn in (2, 3):
        writer.stdin.write("next\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == f"turn {turn}\n"
    turns = page.locator("section.turn")
    expect(turns).to_have_count(3, timeout=LIVE)
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


@pytest.fixture
def slow_turn(sqlite_store: Store) -> Iterator[subprocess.Popen[bytes]]:
    """Session `busy`: its second turn sits in a slow tool in another process."""
    with started_slow_turn(sqlite_store, "busy") as proc:
        yield proc


def requested(store: Store) -> int | None:
    """The number of `busy`'s latest cancel request, read in a thread of its
    own (Playwright's sync API keeps an event loop in this one)."""

    async def read() -> int | None:
        async with store.host() as host:
            probe = cancel_requests(host.require_persistence())
            found = await probe.cancel_requested("busy", 0)
            return None if found is None else found.number

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, read()).result(timeout=60)


@pytest.mark.timeout(120)
def test_the_cancel_button_asks_first_and_ends_the_turn(
    sqlite_store: Store,
    serve_process: Serve,
    browser: Browser,
    slow_turn: subprocess.Popen[bytes],
) -> None:
    base = serve_process(sqlite_store, token=TOKEN)
    outside: list[str] = []
    page = guarded_page(browser, base, outside)
    posts: list[Request] = []

    def seen(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/cancel"):
            posts.append(request)

    page.on("request", seen)

    # Signed in through the form, the transcript has the button.
    page.goto(f"{base}/view/busy")
    expect(page).to_have_url(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    expect(page).to_have_url(f"{base}/")
    page.goto(f"{base}/view/busy")
    expect(page.locator("#follow-state")).to_contain_text("following", timeout=LIVE)
    button = page.locator("#cancel")
    result = page.locator("#cancel-result")

    # Dismissed: nothing is sent, nothing recorded, the turn runs on.
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    button.click()
    expect(result).to_have_attribute("data-outcome", "dismissed")
    assert asked == ["Cancel the turn running in session busy?"]
    assert posts == []
    assert requested(sqlite_store) is None
    assert slow_turn.poll() is None

    # A page whose anti-forgery token is wrong is refused, nothing recorded.
    page.evaluate(
        "document.querySelector('meta[name=\"turnkeep-csrf\"]').content = 'f00'"
    )
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    expect(result).to_have_attribute("data-outcome", "refused")
    expect(result).to_contain_text("X-Turnkeep-CSRF")
    assert len(posts) == 1
    assert requested(sqlite_store) is None
    assert slow_turn.poll() is None
    page.reload()
    expect(page.locator("#follow-state")).to_contain_text("following", timeout=LIVE)
    posts.clear()

    # Accepted: the request carries the page's token and the turn ends.
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    expect(result).to_have_text("the turn ended: cancelled", timeout=30_000)
    assert len(posts) == 1
    assert posts[0].headers.get("x-turnkeep-csrf")
    assert posts[0].post_data_json == {"confirm": True}
    assert slow_turn.stdout is not None
    assert slow_turn.stdout.readline() == b"turn ended cancelled\n"
    assert requested(sqlite_store) == 1
    expect(page.locator(".turn-end").last).to_contain_text("cancelled", timeout=LIVE)

    # Again, with no turn running: the page says so.
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    expect(result).to_have_attribute("data-outcome", "no-running-turn", timeout=15_000)
    expect(result).to_contain_text("no running turn")
    assert outside == []
