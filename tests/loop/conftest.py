"""Fixtures of the agent-loop tests.

Soak sizes run only with `TURNKEEP_SOAK=1` (or `--soak` when a root conftest
defines it); otherwise `@pytest.mark.soak` tests here are skipped.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from tests.loop.support import seeded_rng


def soak_enabled(config: pytest.Config) -> bool:
    try:
        flag = bool(config.getoption("--soak"))
    except ValueError:
        flag = False  # no root conftest defines --soak
    return flag or os.environ.get("TURNKEEP_SOAK") == "1"


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if soak_enabled(config):
        return
    skip = pytest.mark.skip(reason="soak size: set TURNKEEP_SOAK=1 (make soak)")
    here = Path(__file__).parent
    for item in items:
        if "soak" in item.keywords and here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded random generator; the seed is printed for reproduction."""
    return seeded_rng(request)
