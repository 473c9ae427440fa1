"""A cgroup per command, where the system delegates one: nothing escapes it (R23).

The supervisor (`coding_agent.reaper`) ends a command's whole tree, however
its processes regrouped, as long as it lives. A command can kill it, though
(`kill -9 $PPID`): its processes are then re-parented past it, and those
that left the process group with `setsid` are out of every reach that
`/proc`'s parent links or a group kill give. A cgroup v2 holds them all
whatever they do: every process forked inside it stays inside, and writing
`1` to its `cgroup.kill` kills them at once, without a race against forks.

So, where the process running the agent may create cgroups below its own
(root in most containers that mount cgroup2 read-write, a service with
systemd's `Delegate=yes`), each command gets one: `create` makes it before
the supervisor starts, the supervisor moves itself into it before it
starts the command, and `end` kills what is left in it and removes it once
the supervisor is gone. Where no such cgroup can be made (cgroup2 not
mounted, or mounted read-only as in many containers, or not delegated),
`create` returns `None` and a command that kills its supervisor can leave
processes that called `setsid` running: the process group is still killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from pathlib import Path
from typing import Final

__all__ = ["base", "create", "end", "members"]

_POLL: Final = 0.01
_MOUNTINFO: Final = Path("/proc/self/mountinfo")
_OWN: Final = Path("/proc/self/cgroup")
_found: list[Path | None] = []  # the base, once looked up (None: unavailable)


def base() -> Path | None:
    """The cgroup2 directory of this process, if it may make cgroups below it."""
    if not _found:
        _found.append(_own_cgroup())
    return _found[0]


def create() -> Path | None:
    """A new, empty cgroup for one command (`None`: not available here)."""
    where = base()
    if where is None:
        return None
    path = where / f"turnkeep-command-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        path.mkdir(mode=0o755)
    except OSError:
        _found[0] = None  # not delegated after all: do not try each time
        return None
    return path


def members(path: Path) -> list[int]:
    """The processes in the cgroup `path` (none if it is gone)."""
    try:
        text = (path / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(line) for line in text.split()]


async def end(path: Path, grace: float) -> bool:
    """Kill every process in `path`, wait until it is empty, remove it.

    Returns whether it was emptied and removed within `grace` seconds.
    """
    if members(path):
        try:
            _write(path / "cgroup.kill", "1")
        except FileNotFoundError:  # before Linux 5.14: one by one
            await _kill_each(path, grace)
        except OSError:
            pass  # gone meanwhile: the wait below says
    waited = 0.0
    while _populated(path) and waited < grace:
        await asyncio.sleep(_POLL)
        waited += _POLL
    return _remove(path)


def _write(path: Path, text: str) -> None:
    # cgroupfs files answer at once: no need for a worker thread
    path.write_text(text)


def _remove(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False  # still populated: left for the system to show
    return True


async def _kill_each(path: Path, grace: float) -> None:
    # Frozen, its processes cannot fork between the read and the kill.
    with contextlib.suppress(OSError):
        _write(path / "cgroup.freeze", "1")
    waited = 0.0
    while (pids := members(path)) and waited < grace:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        await asyncio.sleep(_POLL)
        waited += _POLL


def _populated(path: Path) -> bool:
    try:
        events = (path / "cgroup.events").read_text()
    except OSError:
        return False
    return "populated 1" in events


def _own_cgroup() -> Path | None:
    try:
        own = _OWN.read_text()
        mounts = _MOUNTINFO.read_text()
    except OSError:
        return None
    relative = next(
        (line[3:] for line in own.splitlines() if line.startswith("0::")), None
    )
    if relative is None:
        return None
    for line in mounts.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if not rest.startswith("cgroup2 ") or len(parts) < 6:
            continue
        root, mount, options = parts[3], parts[4], parts[5]
        if "ro" in options.split(","):
            return None
        if not (relative + "/").startswith(root.rstrip("/") + "/"):
            continue
        inside = relative[len(root.rstrip("/")) :].lstrip("/")
        path = Path(mount) / inside
        if os.access(path, os.W_OK) and (path / "cgroup.procs").exists():
            return path
        return None
    return None
