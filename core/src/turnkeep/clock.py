"""The one clock every event and metadata timestamp comes from.

Times are integer milliseconds since the Unix epoch. Tests and replays that
need determinism pass their own `Clock` to the session store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeAlias

__all__ = ["Clock", "now_ms"]

Clock: TypeAlias = Callable[[], int]
"""A zero-argument callable returning epoch milliseconds."""

_time_ns = time.time_ns


def now_ms() -> int:
    """Return the current wall-clock time in epoch milliseconds."""
    return _time_ns() // 1_000_000
