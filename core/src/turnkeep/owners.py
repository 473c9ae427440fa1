"""Who holds a session, and whether that process still runs.

A kit piece for backends that record their writer's identity beside a hold
(turnkeep-sqlite in its session rows, turnkeep-jsonl in its lock files), so
that a later reader can tell a crashed owner from a live one without
touching the hold: `current_identity()` is what an owner records,
`process_alive(identity)` what a reader checks.

A recorded process counts as gone only when its identity proves it:

- another boot of this machine (the boot id differs);
- no process with that pid, or a zombie, or a different process that reused
  the pid (its start time differs).

Whenever the identity cannot be checked (another host, another pid
namespace, no `/proc`), the process counts as alive. The same process is
`alive` too: whether one of its own holds is still live, only the backend
knows (`is_this_process` lets it ask).
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["ProcessIdentity", "current_identity", "is_this_process", "process_alive"]

_PROC: Final = Path("/proc")


class ProcessIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Enough about a process to tell, later, whether it still runs.

    Attributes:
        pid: the process id.
        host: the host name.
        boot: the kernel's boot id (`None` where there is none).
        start: the process start time in clock ticks since boot (Linux).
        pidns: the inode of the pid namespace (Linux).
    """

    pid: int
    host: str
    boot: str | None = None
    start: int | None = None
    pidns: int | None = None


_identity_lock = threading.Lock()
_identity: ProcessIdentity | None = None


def current_identity() -> ProcessIdentity:
    """Return this process's identity (recomputed after a `fork`)."""
    global _identity
    with _identity_lock:
        if _identity is None or _identity.pid != os.getpid():
            pid = os.getpid()
            _identity = ProcessIdentity(
                pid=pid,
                host=socket.gethostname(),
                boot=_boot_id(),
                start=_start_time(pid),
                pidns=_pidns(pid),
            )
        return _identity


def is_this_process(owner: ProcessIdentity) -> bool:
    """Whether `owner` is the calling process."""
    me = current_identity()
    return (
        owner.host == me.host
        and owner.boot == me.boot
        and owner.pid == me.pid
        and owner.start == me.start
        and owner.pidns == me.pidns
    )


def process_alive(owner: ProcessIdentity) -> bool:
    """Whether the recorded process may still run (see the module doc)."""
    me = current_identity()
    if owner.host != me.host:
        return True  # another machine: nothing here can tell
    if owner.boot is not None and me.boot is not None and owner.boot != me.boot:
        return False
    if owner.pidns != me.pidns:
        return True  # pids of another namespace mean nothing here
    if owner.pid == me.pid and owner.start == me.start:
        return True
    if me.start is None:
        return _signal_probe(owner.pid)  # no /proc: pid reuse cannot be seen
    state = _proc_state(owner.pid)
    if state is None:
        return False
    process_state, start = state
    return start == owner.start and process_state not in ("Z", "X", "x")


def _signal_probe(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _boot_id() -> str | None:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _pidns(pid: int) -> int | None:
    try:
        return os.stat(_PROC / str(pid) / "ns/pid").st_ino
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    state = _proc_state(pid)
    return None if state is None else state[1]


def _proc_state(pid: int) -> tuple[str, int] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ")".
    _, _, rest = raw.rpartition(b")")
    fields = rest.split()
    try:
        return fields[0].decode("ascii"), int(fields[19])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
