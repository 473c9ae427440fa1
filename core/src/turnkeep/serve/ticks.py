"""The service's timers: the recovery sweep and retention, each on its own.

`[serve] recover_every` runs `turnkeep.agent.sweep.run_recovery` while the
service runs, sharing `POST /recover`'s lock so this process never sweeps
twice at once; `[serve] prune_every` runs `turnkeep.retention.run_retention`
with the `[retention]` policy. Each is its own task: a slow deletion pass
never delays recovery. Several instances of the service may tick over one
store; the per-session claim serialises their sweeps (see `run_recovery`).
"""

from __future__ import annotations

import asyncio
import contextlib

from turnkeep.agent.sweep import run_recovery
from turnkeep.config import ServeConfig
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host
from turnkeep.retention import run_retention

__all__ = ["Timers", "check_timers"]


def check_timers(host: Host, config: ServeConfig) -> None:
    """Refuse `prune_every` without a `[retention]` policy to apply.

    Raises:
        ConfigurationError: `prune_every` is set and `[retention]` is not.
    """
    if config.prune_every is not None and host.config.retention is None:
        raise ConfigurationError(
            "[serve] prune_every is set but there is no [retention] policy to "
            "apply; set [retention] older_than (and status), or unset prune_every"
        )


class Timers:
    """The running timer tasks of one service."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[object]] = []

    def start(self, host: Host, config: ServeConfig, lock: asyncio.Lock) -> None:
        """Start the timers `config` asks for (none: nothing runs)."""
        check_timers(host, config)
        if config.recover_every is not None:
            sweep = run_recovery(host, config.recover_every, lock=lock)
            self._tasks.append(asyncio.create_task(sweep, name="turnkeep recovery"))
        policy = host.config.retention
        if config.prune_every is not None and policy is not None:
            prune = run_retention(host, policy, config.prune_every)
            self._tasks.append(asyncio.create_task(prune, name="turnkeep retention"))

    async def stop(self) -> None:
        """Cancel the timers and wait for them to end."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
