"""Fixtures of the agent-loop tests (soak sizes: see the root conftest)."""

from __future__ import annotations

import random

import pytest
from tests.loop.support import seeded_rng


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded random generator; the seed is printed for reproduction."""
    return seeded_rng(request)
