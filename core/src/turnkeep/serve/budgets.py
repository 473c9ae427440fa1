"""How much a client may ask: request buckets, stream counts, failed sign-ins.

`Budgets` holds a token bucket of requests (a sustained rate and a burst)
and a count of open SSE streams per client key, and caps all streams
together. `Failures` holds the failed authentications of each client
address: a few are free, then each one more doubles the time the address
must wait before it may present a credential again, so guessing a token
costs hours instead of seconds. Both forget idle clients. The keys are the
guard's (`turnkeep.serve.guard`); a spent budget is its `429`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import attrs

__all__ = ["Budgets", "Failures"]

_PRUNE_AT: Final = 4096
"""Entries kept before the idle ones are forgotten."""


@attrs.define(eq=False)
class Budgets:
    """Request buckets and stream counts per client key."""

    rate: float
    burst: int
    streams_per_client: int
    max_streams: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = attrs.field(
        init=False, factory=dict[str, tuple[float, float]]
    )
    _streams: dict[str, int] = attrs.field(init=False, factory=dict[str, int])

    def take(self, key: str) -> float | None:
        """Spend one request of `key`'s budget; `None` if granted, else the wait."""
        now = self.clock()
        tokens, then = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > _PRUNE_AT:
            self._prune(now)
        return None

    def _prune(self, now: float) -> None:
        # A bucket that has refilled is the same as no bucket.
        full = [
            k
            for k, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * self.rate >= self.burst
        ]
        for key in full:
            del self._buckets[key]

    def open_stream(self, key: str) -> bool:
        """Count a new stream for `key`, unless a limit is reached."""
        if self.open_streams >= self.max_streams:
            return False
        if self._streams.get(key, 0) >= self.streams_per_client:
            return False
        self._streams[key] = self._streams.get(key, 0) + 1
        return True

    def close_stream(self, key: str) -> None:
        """Count a stream of `key` as closed."""
        left = self._streams.get(key, 0) - 1
        if left > 0:
            self._streams[key] = left
        else:
            self._streams.pop(key, None)

    @property
    def open_streams(self) -> int:
        """Streams open now, over all clients."""
        return sum(self._streams.values())


@attrs.define(eq=False)
class Failures:
    """Failed authentications per client address, with a doubling wait.

    Attributes:
        free: failures an address may make before it has to wait.
        first_wait: seconds of the first wait; each later failure doubles it.
        longest_wait: the wait never grows past this (seconds).
        forget_after: seconds without a failure after which an address
            starts afresh.
    """

    free: int = 5
    first_wait: float = 1.0
    longest_wait: float = 300.0
    forget_after: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    # address -> (failures, time of the last one, blocked until)
    _seen: dict[str, tuple[int, float, float]] = attrs.field(
        init=False, factory=dict[str, tuple[int, float, float]]
    )

    def wait(self, address: str) -> float | None:
        """Seconds `address` must wait before it may try again; `None`: it may."""
        entry = self._seen.get(address)
        if entry is None:
            return None
        now = self.clock()
        _, last, until = entry
        if now - last > self.forget_after:
            del self._seen[address]
            return None
        return until - now if until > now else None

    def failed(self, address: str) -> None:
        """Count a failed authentication of `address`."""
        now = self.clock()
        count, last, _ = self._seen.get(address, (0, now, now))
        if now - last > self.forget_after:
            count = 0
        count += 1
        over = count - self.free
        wait = (
            min(self.longest_wait, self.first_wait * 2.0 ** min(over - 1, 60))
            if over > 0
            else 0.0
        )
        self._seen[address] = (count, now, now + wait)
        if len(self._seen) > _PRUNE_AT:
            stale = [
                k for k, (_, t, _) in self._seen.items() if now - t > self.forget_after
            ]
            for key in stale:
                del self._seen[key]

    def succeeded(self, address: str) -> None:
        """`address` presented the right credential: its failures are forgotten."""
        self._seen.pop(address, None)
