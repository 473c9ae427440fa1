"""A pytest plugin that fails a run in which a PostgreSQL test skipped.

Where PostgreSQL is required (`pgserver.required()`: a server is installed,
`TURNKEEP_REQUIRE_POSTGRES=1` as `.ci/run` sets, or an explicit DSN), a
skipped test marked `postgres` means the suite did not test the backend it
claims to: the run's exit status becomes "tests failed" and the summary
lists them. Soak-tier tests (skipped unless asked for) and expected
failures are not counted. The root conftest loads this plugin.
"""

from __future__ import annotations

import attrs
import pytest
from tests.support import pgserver


@attrs.define(eq=False)  # pluggy keeps plugins in sets: hashable by identity
class PostgresSkipGuard:
    """Collects the skipped `postgres` tests of one run."""

    skipped: list[str] = attrs.field(factory=list[str])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note a skipped `postgres` test (any phase: setup skips count)."""
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if "postgres" not in report.keywords or "soak" in report.keywords:
            return
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        self.skipped.append(f"{report.nodeid}: {reason}")

    def failing(self) -> bool:
        """Whether the run must fail for the skips it saw."""
        return bool(self.skipped) and pgserver.required()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Turn a passing run with skipped PostgreSQL tests into a failed one."""
        if self.failing() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter
    ) -> None:
        """List the skipped PostgreSQL tests and why the run failed."""
        if not self.failing():
            return
        terminalreporter.write_sep(
            "=", "PostgreSQL is required here, but these tests skipped", red=True
        )
        for line in self.skipped:
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    """Register one guard per run (in-process test runs get their own)."""
    config.pluginmanager.register(PostgresSkipGuard(), "postgres-skip-guard")
