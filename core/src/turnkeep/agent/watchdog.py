"""Watching a turn while it runs: the `Watch` settings and the `Guard`.

`Watch` holds the loop's settings that act on a turn while a model call
streams or a tool runs (unlike the budgets, `turnkeep.agent.budgets`, they
are not part of the recorded run context):

- `stall_seconds`: a model call or tool during which no event is appended
  for this long (for a model call: no delta streams, counting those held
  back for redaction) is stopped, and the turn ends `timed_out`;
- `stream_flush_seconds`: flush a long model stream every so many seconds,
  so a crash keeps the text streamed up to the last flush
  (`turnkeep.agent.partial`); off by default, so a short turn stays one
  durable write.

`Guard` enforces, per turn, the stall limit and the turn's `deadline`
budget *while* a model call or tool runs (the budget itself is checked
only before each call): the call is cancelled where it waits (a tool gets
an `interrupted` result, a streamed reply is kept as partial) and
`TimedOut` ends the turn. A flush is never cut short by it; the deadline
is then checked before the next call.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Final

import attrs

from turnkeep.errors import ConfigurationError

__all__ = ["Guard", "TimedOut", "Watch"]


class TimedOut(Exception):
    """A model call or tool ran past the turn's deadline or stall limit."""


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
        stall_seconds: the longest a model call or tool may run without the
            turn appending an event (`None`: no limit).
        stream_flush_seconds: flush a model call's streamed text at most this
            often while it streams (`None`: only at the turn's durability
            points).

    Raises:
        ConfigurationError: a value is not a positive, finite number.
    """

    stall_seconds: float | None = None
    stream_flush_seconds: float | None = None

    def __attrs_post_init__(self) -> None:
        _seconds("stall_seconds", self.stall_seconds)
        _seconds("stream_flush_seconds", self.stream_flush_seconds)


_UNWATCHED: Final = nullcontext()
"""What `Guard.watching` gives when no limit is in force."""


@attrs.define(eq=False)
class Guard:
    """One turn's deadline and stall limit, enforced while a call runs.

    Attributes:
        stall: seconds a call may go without an event (`None`: no limit).
        deadline: the turn's `deadline` budget in seconds, once `arm`ed.
    """

    stall: float | None = None
    deadline: float | None = None
    _deadline_at: float | None = None
    _last: float = 0.0
    _timeout: asyncio.Timeout | None = None

    def arm(self, deadline: float | None) -> None:
        """Start the turn's deadline (the budgets start here too)."""
        self.deadline = deadline
        if deadline is not None:
            self._deadline_at = asyncio.get_running_loop().time() + deadline

    def activity(self) -> None:
        """The turn appended an event: the stall limit starts again."""
        timeout = self._timeout
        # Runs for every event: with no stall limit in force there is nothing
        # to move (`watching` starts the clock afresh for each call).
        if timeout is None or self.stall is None:
            return
        self._last = asyncio.get_running_loop().time()
        if not timeout.expired():
            timeout.reschedule(self._when())

    def _when(self) -> float | None:
        stalls_at = None if self.stall is None else self._last + self.stall
        candidates = [t for t in (stalls_at, self._deadline_at) if t is not None]
        return min(candidates) if candidates else None

    def watching(self, what: str) -> AbstractAsyncContextManager[None]:
        """Run the body (a model call or tool) under the limits.

        Raises:
            TimedOut: a limit passed; the body was cancelled where it waited
                (or, if it ignored that, the turn still ends here).
        """
        if self.stall is None and self._deadline_at is None:
            return _UNWATCHED  # the default: no limit, nothing to set up
        return self._watched(what)

    @asynccontextmanager
    async def _watched(self, what: str) -> AsyncGenerator[None]:
        self._last = asyncio.get_running_loop().time()
        when = self._when()
        if when is None:
            yield
            return
        timeout = asyncio.timeout_at(when)
        try:
            async with timeout:
                self._timeout = timeout
                try:
                    yield
                finally:
                    self._timeout = None
        except TimeoutError as exc:
            if not timeout.expired():
                raise  # the body's own TimeoutError, not ours
            raise TimedOut(self._why(what)) from exc
        if timeout.expired():  # the body swallowed the cancellation
            raise TimedOut(self._why(what))

    def _why(self, what: str) -> str:
        at = self._deadline_at
        if at is not None and asyncio.get_running_loop().time() >= at:
            return f"the turn's deadline ({self.deadline:g} s) passed during {what}"
        return f"nothing happened for {self.stall:g} s during {what} (stalled)"
