"""Who owns a session, and whether that owner is still alive.

Every writer role recorded in the database carries the owner's *token* (random,
one per backend instance) and a `ProcessIdentity`: pid, host, boot id,
process start time and pid namespace. A claimant treats the recorded owner
as gone, and takes the session without `steal`, when the identity proves it
(docs/adr/0007-sqlite-session-ownership.md):

- another boot of this machine (the boot id differs);
- no process with that pid, or a zombie, or a different process that reused
  the pid (its start time differs);
- this very process, but an instance that was closed or collected.

Whenever the identity cannot be checked (another host, another pid namespace,
no `/proc`), the owner counts as alive: the claimant must `steal`, and the
generation fence keeps that safe.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["ProcessIdentity", "current_identity", "is_alive", "live_tokens"]

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

_live_lock = threading.Lock()
_live: set[str] = set()


def live_tokens() -> _LiveTokens:
    """The registry of owner tokens of this process's open backend instances."""
    return _LIVE


class _LiveTokens:
    def add(self, token: str) -> None:
        with _live_lock:
            _live.add(token)

    def discard(self, token: str) -> None:
        with _live_lock:
            _live.discard(token)

    def __contains__(self, token: str) -> bool:
        with _live_lock:
            return token in _live


_LIVE: Final = _LiveTokens()


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


def is_alive(token: str, owner: ProcessIdentity) -> bool:
    """Whether the recorded owner may still be writing (see the module doc)."""
    me = current_identity()
    if owner.host != me.host:
        return True  # another machine: nothing here can tell
    if owner.boot is not None and me.boot is not None and owner.boot != me.boot:
        return False
    if owner.pidns != me.pidns:
        return True  # pids of another namespace mean nothing here
    if owner.pid == me.pid and owner.start == me.start:
        return token in _LIVE
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
