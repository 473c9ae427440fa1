"""Fixtures shared by the whole suite.

Every `Host` created by any test is watched by a `HookMonitor`: seq stays
contiguous per session, and no plugin receives `session_event` after its
dispose returned. Violations fail the test that caused them.

Tests marked `soak` (long, seeded runs) are skipped unless pytest runs with
`--soak` (as `make soak` does) or `TURNKEEP_SOAK=1` is set. Where PostgreSQL
is required, a skipped `postgres` test fails the run
(`tests/support/skipguard.py`). With `--durations`, the summary sums test
time by test directory (`tests/support/timing.py`). Hypothesis examples
are derandomized unless `HYPOTHESIS_PROFILE=explore`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
import pytest_asyncio
from hypothesis import settings

from turnkeep.config import Config
from turnkeep.hookspecs import PluginHost
from turnkeep.host import Host
from turnkeep.plugins import PluginSet
from turnkeep.testing import HookMonitor

# Property tests draw the same examples on every run (tests stay
# deterministic); `HYPOTHESIS_PROFILE=explore` draws new ones each time.
settings.register_profile("default", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

pytest_plugins = ["pytester", "tests.support.skipguard", "tests.support.timing"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add `--soak`."""
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the long, seeded soak-tier tests (marker `soak`)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Make `--soak` visible to code that checks the environment.

    Let the `turnkeep` processes the CLI tests start take Ctrl-C.
    """
    if config.getoption("--soak"):
        os.environ["TURNKEEP_SOAK"] = "1"
    # A run started in the background by a non-interactive shell (`cmd &`,
    # as a CI runner may) inherits SIGINT ignored, and so would every process
    # it starts: the tests that SIGINT a `turnkeep` command would wait for an
    # exit that never comes. A handler, unlike SIG_IGN, is reset to the
    # default at exec, so the children start as a terminal would start them.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Skip soak-tier tests unless they were asked for."""
    if os.environ.get("TURNKEEP_SOAK") == "1":
        return
    skip = pytest.mark.skip(reason="soak tier: run `make soak` (or TURNKEEP_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def hook_monitor(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[HookMonitor]]:
    """Attach a monitor to every host; fail the test on any violation."""
    monitors: list[HookMonitor] = []
    original_init = Host.__attrs_post_init__
    original_dispose = PluginSet.dispose

    def init(self: Host) -> None:
        original_init(self)
        monitor = HookMonitor.attach(self)
        monitors.append(monitor)

    async def dispose(self: PluginSet, plugin: object, host: PluginHost) -> None:
        try:
            await original_dispose(self, plugin, host)
        finally:
            for monitor in monitors:
                if cast(object, monitor.host) is host:
                    monitor.disposed(plugin)

    monkeypatch.setattr(Host, "__attrs_post_init__", init)
    monkeypatch.setattr(PluginSet, "dispose", dispose)
    yield monitors
    problems = [v for m in monitors for v in m.violations]
    assert not problems, "hook invariants violated:\n" + "\n".join(problems)


@pytest_asyncio.fixture
async def host() -> AsyncIterator[Host]:
    """A started host on the in-memory backend, no entry points loaded."""
    async with Host(Config(persistence="memory", plugins="none")) as started:
        yield started


def make_config(**overrides: Any) -> Config:
    """A test configuration: no entry points, memory backend unless told."""
    values: dict[str, Any] = {"persistence": "memory", "plugins": "none"}
    values.update(overrides)
    return Config(**values)
