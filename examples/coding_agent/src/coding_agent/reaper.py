"""Reaping a command's whole process tree, including what left its group.

`run_command` starts its command in a process group of its own, but a
process the command starts may leave that group (`setsid`, `setpgid`, the
classic double fork of a daemon) and so outlive a kill of the group. On
Linux, the command is therefore started through a small supervisor, this
module run as a script: it marks itself a *child subreaper*
(`prctl(PR_SET_CHILD_SUBREAPER)`), so every process the command leaves
behind is re-parented to it instead of to init, and it runs the command as
its child. When the command ends, or when the supervisor gets `SIGTERM`
(the tool was cancelled or timed out), it kills every descendant it still
has, however they regrouped, and reaps each one, then exits with the
command's status (a command killed by a signal makes it die of the same
signal). So a command's processes end with it: none survives, none stays a
zombie, and the process running the agent is not made a subreaper itself
(its other children, and theirs, are none of this module's business).

`start`, `start_error` and `stop` are the agent's side. Elsewhere (no `prctl`), `start`
runs the command directly in a new process group and `stop` kills that
group only: a descendant that left the group is not reached there.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the supervisor script starts faster without them
    import asyncio
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["SUPERVISED", "StartError", "start", "start_error", "stop"]

PR_SET_CHILD_SUBREAPER: Final = 36
"""From `<linux/prctl.h>`."""
SUPERVISED: Final = sys.platform.startswith("linux")
"""Whether commands run under the subreaper supervisor on this system."""
STOP_GRACE: Final = 5.0
"""Seconds `stop` gives the supervisor before it kills its group outright."""
_CANNOT_START: Final = 127
"""The supervisor's exit status when the command could not be started."""


class StartError(Exception):
    """The command could not be started (`strerror` says why)."""

    def __init__(self, strerror: str) -> None:
        super().__init__(strerror)
        self.strerror = strerror


async def start(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]
) -> asyncio.subprocess.Process:
    """Start `argv` with its output (stdout and stderr) piped, stdin empty.

    Raises:
        StartError: the program (on Linux: the supervisor) could not be
            started. On Linux, a command the supervisor could not start is
            reported by `start_error` once the process has ended.
    """
    if not SUPERVISED:
        return await _spawn(list(argv), cwd=cwd, env=env, pass_fds=())
    # The supervisor reports a failed start on a pipe of its own: the
    # command's output is not the place for it.
    read, write = os.pipe()
    try:
        shim = [sys.executable, "-I", "-S", __file__, str(write), "--", *argv]
        process = await _spawn(shim, cwd=cwd, env=env, pass_fds=(write,))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    _failures[process.pid] = read
    return process


def start_error(process: asyncio.subprocess.Process) -> StartError | None:
    """After `process` ended: why its command could not start, if it could not."""
    read = _failures.pop(process.pid, None)
    if read is None:
        return None
    try:
        # The writer has exited: this returns at once, with its report or b"".
        report = os.read(read, 4096).decode("utf-8", "replace")
    finally:
        os.close(read)
    return StartError(report) if report else None


async def stop(process: asyncio.subprocess.Process) -> None:
    """Kill `process`'s command and everything it started, and wait for it."""
    import asyncio
    import contextlib

    if SUPERVISED:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), STOP_GRACE)
    # Unsupervised, the group goes (its leader may have exited already). A
    # supervisor that has exited has reaped its tree; one that has not in
    # `STOP_GRACE` is killed with its group.
    if not SUPERVISED or process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    start_error(process)  # closes its pipe


_failures: Final[dict[int, int]] = {}
"""Supervisor pid -> the read end of its start-failure pipe."""


async def _spawn(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], pass_fds: tuple[int, ...]
) -> asyncio.subprocess.Process:
    import asyncio  # here, not above: the supervisor script does not need it

    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        raise StartError(exc.strerror or type(exc).__name__) from None


# -- the supervisor (this file run as a script) ------------------------------


class _Expired(Exception):
    """`SIGTERM` arrived: the command's time is up."""


class _Signals:
    """What the `SIGTERM` handler knows: whether it came, and where we are."""

    expired = False
    waiting = False


def _expire(signum: int, frame: object) -> None:
    _Signals.expired = True
    if _Signals.waiting:  # else it is seen once the command has started
        raise _Expired


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _descendants(root: int) -> list[int]:
    """Every live process below `root`, from `/proc`'s parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):  # it ended while we looked
            continue
        # After the command name: state, ppid. A zombie has nothing to kill.
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_all() -> None:
    """Kill and reap every descendant, until none is left.

    Each round kills everything alive below us, then waits for one child.
    A killed process's children are re-parented to us (we are a subreaper),
    so a process forked after a round's look is found by the next: its
    parent was seen and killed, and its death ends the wait.
    """
    me = os.getpid()
    while True:
        for pid in _descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended meanwhile: reaped below
                continue
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:  # no child left, living or dead
            return


def _supervise(report_fd: int, argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _expire)
    try:
        try:
            _become_subreaper()
        except OSError as exc:
            # Refused rather than run with a promise it cannot keep.
            why = f"cannot become a child subreaper: {exc.strerror}"
            os.write(report_fd, why.encode())
            return _CANNOT_START
        try:
            # As `subprocess` would, minus its import time: PATH from our
            # environment (the command's), SIGPIPE and SIGXFSZ back to their
            # defaults, the report pipe not inherited.
            command = os.posix_spawnp(
                argv[0],
                argv,
                os.environ,
                file_actions=[(os.POSIX_SPAWN_CLOSE, report_fd)],
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except OSError as exc:
            os.write(report_fd, (exc.strerror or type(exc).__name__).encode())
            return _CANNOT_START
    finally:
        os.close(report_fd)
    status = -signal.SIGKILL
    try:
        _Signals.waiting = True
        if not _Signals.expired:
            status = os.waitstatus_to_exitcode(os.waitpid(command, 0)[1])
    except _Expired:
        pass  # the command is killed with the rest below
    finally:
        _Signals.waiting = False
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is not cut short
    _kill_all()
    if status < 0:  # die of the command's signal, as the command did
        if -status != signal.SIGKILL:  # whose action cannot be set
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(_supervise(int(sys.argv[1]), sys.argv[3:]))
