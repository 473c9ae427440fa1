"""Watching a turn while it runs: the loop's `Watch` settings.

`Watch` holds the settings that act on a turn while a model call streams
or a tool runs, as opposed to the budgets (`turnkeep.agent.budgets`), which
are part of the recorded run context:

- `stream_flush_seconds`: flush a long model stream every so many seconds,
  so a crash keeps the text streamed up to the last flush
  (`turnkeep.agent.partial`); off by default, so a short turn stays one
  durable write.
"""

from __future__ import annotations

import math

import attrs

from turnkeep.errors import ConfigurationError

__all__ = ["Watch"]


def _seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value > 0 and math.isfinite(value))
    ):
        raise ConfigurationError(
            f"{name} must be a positive number of seconds or None, got {value!r}"
        )
    return float(value)


@attrs.frozen
class Watch:
    """How a running turn is watched (all off by default).

    Attributes:
        stream_flush_seconds: flush a model call's streamed text at most this
            often while it streams (`None`: only at the turn's durability
            points).

    Raises:
        ConfigurationError: a value is not a positive, finite number.
    """

    stream_flush_seconds: float | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        _seconds("stream_flush_seconds", self.stream_flush_seconds)
