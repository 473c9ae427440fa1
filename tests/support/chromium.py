"""The Chromium the browser tests drive, and whether they must run.

The web page's tests (`tests/serve/test_browser.py`, marked `browser`)
drive Debian's Chromium through Playwright. Where it is not installed they
skip with the command that installs it, so `make test` passes on a machine
without a browser; where `TURNKEEP_REQUIRE_CHROMIUM=1` (`.ci/run` sets it
after installing Chromium) a missing browser fails the test, and a skipped
`browser` test fails the run (`tests/support/skipguard.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
REQUIRE_ENV = "TURNKEEP_REQUIRE_CHROMIUM"
INSTALL_HINT = (
    f"the browser tests need Chromium at {CHROMIUM}: apt-get install -y chromium "
    "(.ci/run installs it and requires these tests)"
)


def required() -> bool:
    """Whether the browser tests must run (fail, not skip, without Chromium)."""
    return os.environ.get(REQUIRE_ENV) == "1"


def require_chromium() -> Path:
    """Chromium's path; else fail where required, or skip naming the install."""
    if CHROMIUM.exists():
        return CHROMIUM
    if required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {INSTALL_HINT}", pytrace=False)
    pytest.skip(INSTALL_HINT)
