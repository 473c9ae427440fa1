"""A pytest plugin that fails a run in which a required component's test skipped.

Three components may be missing from a machine: PostgreSQL (tests marked
`postgres`), Chromium (tests marked `browser`) and LiteLLM's proxy (tests
marked `litellm`). Where one is required (`pgserver.required()`: a server
is installed, `TURNKEEP_REQUIRE_POSTGRES=1` as `.ci/run` sets, or an
explicit DSN; `chromium.required()`: `TURNKEEP_REQUIRE_CHROMIUM=1`, also
set by `.ci/run`; `litellm_proxy.required()`: `TURNKEEP_REQUIRE_LITELLM=1`,
set by `.ci/run`), a skipped test with
its marker means the suite did not test what it claims to: the run's exit
status becomes "tests failed" and the summary lists them. Soak-tier tests
(skipped unless asked for) and expected failures are not counted. The root
conftest loads this plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs
import pytest
from tests.support import chromium, litellm_proxy, pgserver

GUARDED: Final[tuple[tuple[str, str, Callable[[], bool]], ...]] = (
    ("postgres", "PostgreSQL", lambda: pgserver.required()),
    ("browser", "Chromium", lambda: chromium.required()),
    ("litellm", "LiteLLM's proxy", lambda: litellm_proxy.required()),
)
"""Marker, component, and whether a skip of a test with that marker fails."""


@attrs.define(eq=False)  # pluggy keeps plugins in sets: hashable by identity
class RequiredSkipGuard:
    """Collects the skipped tests of the guarded components in one run."""

    skipped: dict[str, list[str]] = attrs.field(factory=dict[str, list[str]])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note a skipped guarded test (any phase: setup skips count)."""
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if "soak" in report.keywords:
            return
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        for marker, _, _ in GUARDED:
            if marker in report.keywords:
                self.skipped.setdefault(marker, []).append(f"{report.nodeid}: {reason}")

    def failing(self) -> list[tuple[str, list[str]]]:
        """The required components whose tests skipped, with those tests."""
        return [
            (component, self.skipped[marker])
            for marker, component, required in GUARDED
            if self.skipped.get(marker) and required()
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Turn a passing run with skipped required tests into a failed one."""
        if self.failing() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter
    ) -> None:
        """List the skipped required tests and why the run failed."""
        for component, lines in self.failing():
            terminalreporter.write_sep(
                "=", f"{component} is required here, but these tests skipped", red=True
            )
            for line in lines:
                terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    """Register one guard per run (in-process test runs get their own)."""
    config.pluginmanager.register(RequiredSkipGuard(), "required-skip-guard")
