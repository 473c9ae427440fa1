"""Starting and driving `worker.py` processes from the test process.

A backend's test directory turns `spawned_workers` into its `spawn_worker`
fixture, naming its backend; tests then start `serve` workers and talk to
them in JSON lines (see `worker.py` for the commands).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["WORKER_SCRIPT", "SpawnWorker", "Worker", "spawned_workers", "worker_argv"]

WORKER_SCRIPT = Path(__file__).with_name("worker.py")


def worker_argv(backend: str, mode: str, *args: str) -> list[str]:
    """The command line of a `worker.py` process in `mode` over `backend`.

    Fatal signals (other than SIGKILL) print the worker's stacks to stderr,
    so a hung or crashed worker says where it was.
    """
    return [
        sys.executable,
        "-X",
        "faulthandler",
        str(WORKER_SCRIPT),
        backend,
        mode,
        *args,
    ]


class Worker:
    """A `worker.py BACKEND serve` process driven by JSON lines."""

    def __init__(self, backend: str) -> None:
        self.proc = subprocess.Popen(
            worker_argv(backend, "serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, **cmd: Any) -> None:
        """Send one command; its answer waits for `recv`."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(msgspec.json.encode(cmd) + b"\n")
        self.proc.stdin.flush()

    def recv(self) -> dict[str, Any]:
        """The answer to the oldest command not yet answered."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.pid} exited ({self.proc.wait()})")
        reply: dict[str, Any] = msgspec.json.decode(line)
        return reply

    def call(self, **cmd: Any) -> dict[str, Any]:
        """Send one command and wait for its answer."""
        self.send(**cmd)
        return self.recv()

    def stop(self) -> None:
        """Ask the worker to exit (killing it if it does not within 30 s)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)  # a test may have stopped it
            try:
                self.send(op="exit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


SpawnWorker = Callable[[], Worker]
"""Starts one more `serve` worker of the test's backend."""


@contextlib.contextmanager
def spawned_workers(backend: str) -> Generator[SpawnWorker]:
    """Start `serve` workers over `backend`; stop them all on the way out."""
    workers: list[Worker] = []

    def spawn() -> Worker:
        worker = Worker(backend)
        workers.append(worker)
        return worker

    try:
        yield spawn
    finally:
        for worker in workers:
            worker.stop()
