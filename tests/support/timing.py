"""A pytest plugin that sums test time by test directory at the end of a run.

With `--durations` (as `make test` passes) the summary also lists, per
group, the tests run and the seconds their setup, call and teardown took,
slowest group first. A group is a directory under `tests/`, one level
deeper under `tests/plugins/` (each backend is its own group). Under xdist
the times add up across workers, so the total exceeds the wall time. The
root conftest loads this plugin.
"""

from __future__ import annotations

from collections import defaultdict

import attrs
import pytest


def group_of(nodeid: str) -> str:
    """The group of a test id: `tests/core`, `tests/plugins/jsonl`, ..."""
    folders = nodeid.split("::", 1)[0].split("/")[:-1]
    if folders[:2] == ["tests", "plugins"]:
        return "/".join(folders[:3])
    return "/".join(folders[:2]) or "."


@attrs.define(eq=False)  # pluggy keeps plugins in sets: hashable by identity
class GroupTimes:
    """Seconds and test counts per group, from the reports of one run."""

    seconds: defaultdict[str, float] = attrs.field(
        factory=lambda: defaultdict[str, float](float)
    )
    tests: defaultdict[str, int] = attrs.field(
        factory=lambda: defaultdict[str, int](int)
    )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add one phase's duration to its group (a test counts once)."""
        group = group_of(report.nodeid)
        self.seconds[group] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[group] += 1

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        """Print the groups, slowest first, when durations were asked for."""
        if config.getoption("durations", None) is None or not self.seconds:
            return
        terminalreporter.write_sep("=", "time by test group (summed over workers)")
        width = max(len(g) for g in self.seconds)
        for group, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            count = self.tests[group]
            terminalreporter.write_line(
                f"{seconds:9.1f}s  {group:<{width}}  {count:5d} tests"
            )
        total = sum(self.seconds.values())
        terminalreporter.write_line(f"{total:9.1f}s  total")


def pytest_configure(config: pytest.Config) -> None:
    """Register one collector per run (in-process test runs get their own)."""
    config.pluginmanager.register(GroupTimes(), "test-group-times")
