"""Durations as people write them in configuration: `30d`, `12h`, `1d12h`.

Parsed here for `turnkeep.config` (retention, the service's timers) and the
command line; `turnkeep.config.parse_duration` is this function.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from turnkeep.errors import ConfigurationError

__all__ = ["parse_duration"]

_DURATION: Final = re.compile(r"(\d+)\s*([wdhms])")
_UNIT: Final = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str | timedelta) -> timedelta:
    """Parse `30d`, `12h`, `90m` (also `w`, `s`, and sums such as `1d12h`).

    A `timedelta` is returned as it is. `m` is minutes: a month is no fixed
    length, so say `30d`.

    Raises:
        ConfigurationError: not such a duration, or not longer than zero.
    """
    if isinstance(text, timedelta):
        value = text
    else:
        spec = text.strip().lower() if isinstance(text, str) else ""  # pyright: ignore[reportUnnecessaryIsInstance]
        parts = _DURATION.findall(spec)
        if not parts or _DURATION.sub("", spec).strip():
            raise ConfigurationError(
                f"{text!r} is not a duration; write a number and a unit: "
                "30d (days), 12h (hours), 90m (minutes), 2w, 45s, or sums such "
                "as 1d12h"
            )
        value = timedelta(seconds=sum(int(n) * _UNIT[u] for n, u in parts))
    if value <= timedelta(0):
        raise ConfigurationError(f"a duration must be longer than zero, got {text!r}")
    return value
