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

The supervisor is one of the command's processes, so the command can kill
it (`kill -9 $PPID`): its processes are re-parented past it and keep
running. So `stop` also kills the command's process group whether or not
the supervisor is alive, and where the system delegates a cgroup v2
(`coding_agent.cgroups`), the supervisor moves itself into a cgroup of its
own before it starts the command, and `stop` kills whatever is left in that
cgroup: processes that also left the group with `setsid` included (R23).
Without a delegated cgroup those can outlive a killed supervisor.

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
    from coding_agent import cgroups

    # The supervisor reports a failed start on a pipe of its own: the
    # command's output is not the place for it.
    read, write = os.pipe()
    group = cgroups.create()
    try:
        shim = [sys.executable, "-I", "-S", __file__, str(write), str(group or "-")]
        shim += ["--", *argv]
        process = await _spawn(shim, cwd=cwd, env=env, pass_fds=(write,))
    except BaseException:
        os.close(read)
        if group is not None:
            await cgroups.end(group, STOP_GRACE)
        raise
    finally:
        os.close(write)
    _failures[process.pid] = read
    if group is not None:
        _cgroups[process.pid] = group
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


async def stop(process: asyncio.subprocess.Process) -> bool:
    """Kill `process`'s command and everything it started, and wait for it.

    Also what `run_command` calls once a command has ended, since the
    command may have killed its supervisor and left processes behind.

    Returns:
        whether the supervisor ended the tree itself within `STOP_GRACE`
        (always true unsupervised), rather than being killed with it.
    """
    import asyncio
    import contextlib

    in_time = True
    if SUPERVISED and process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), STOP_GRACE)
        in_time = process.returncode is not None
    # The group goes whether or not its leader, the supervisor, is alive: a
    # command that killed its supervisor leaves its group running. A
    # supervisor that ended its tree has left the group empty.
    _kill_group(process.pid)
    await process.wait()
    group = _cgroups.pop(process.pid, None)
    if group is not None:
        from coding_agent import cgroups

        await cgroups.end(group, STOP_GRACE)
    start_error(process)  # closes its pipe
    return in_time


def _kill_group(pgid: int) -> None:
    """`killpg(pgid, SIGKILL)` if some process is still in that group.

    Looked for first: a group with no process left frees its number, which a
    new, unrelated process could take as its own group's meanwhile.
    """
    import contextlib

    if not SUPERVISED or _in_group(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _in_group(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):  # it ended while we looked
            continue
        # After the command name: state, ppid, pgrp.
        if fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


_failures: Final[dict[int, int]] = {}
"""Supervisor pid -> the read end of its start-failure pipe."""
_cgroups: Final[dict[int, Path]] = {}
"""Supervisor pid -> the cgroup its command runs in (where one was made)."""


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
            # Every child already dead, at once: one per round would scan
            # `/proc` once per process, too slow for a large tree to end
            # within `STOP_GRACE`.
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:  # no child left, living or dead
            return


def _join(group: str) -> None:
    """Move this process into the cgroup `group` ("-": none was made).

    Before the command starts, so that everything it forks is born there. A
    refusal leaves the command without it, as where no cgroup is delegated.
    """
    if group == "-":
        return
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write("0")
    except OSError:
        pass  # not delegated to us after all: the group kill remains


def _supervise(report_fd: int, group: str, argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _expire)
    try:
        _join(group)
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
    sys.exit(_supervise(int(sys.argv[1]), sys.argv[2], sys.argv[4:]))
