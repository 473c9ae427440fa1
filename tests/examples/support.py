"""Helpers of the example tests: run the examples as real processes.

Each example chooses its persistence plugin by configuration only: the test
writes a `turnkeep.toml` into the process's working directory (or sets no
configuration at all, for the embedded default store, with the user data
directory redirected into the test's temporary directory).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
from tests.loop.support import backend_toml

REPO = Path(__file__).resolve().parents[2]


def example_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with no turnkeep settings and a private data dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TURNKEEP_", "OPENAI_", "CODING_AGENT_"))
    }
    env["XDG_DATA_HOME"] = str(home / "data")
    env["XDG_STATE_HOME"] = str(home / "state")
    env.update(extra)
    return env


def configure(cwd: Path, backend: str, store: Path) -> None:
    """Write `cwd/turnkeep.toml` choosing `backend` with its store in `store`."""
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "turnkeep.toml").write_text(backend_toml(backend, store))


@attrs.define(eq=False)
class Agent:
    """An example agent process, output piped line by line."""

    proc: subprocess.Popen[str]
    lines: list[str] = attrs.field(factory=list[str])

    @classmethod
    def start(
        cls,
        module: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        stdin: bool = False,
    ) -> Agent:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        return cls(proc)

    def read_until(self, prefix: str) -> str:
        """Read lines until one starts with `prefix` (blocking on the pipe)."""
        for line in self._stream():
            if line.startswith(prefix):
                return line
        raise AssertionError(
            f"the process ended ({self.proc.wait()}) before printing {prefix!r}:\n"
            + "\n".join(self.lines)
        )

    def finish(self, timeout: float = 60) -> str:
        """Read everything, wait for the exit; return the whole output."""
        for _ in self._stream():
            pass
        self.proc.wait(timeout=timeout)
        self._close()
        return "\n".join(self.lines)

    def kill(self) -> None:
        """SIGKILL the whole process group (no cleanup runs)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close()

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def _stream(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.lines.append(line)
            yield line

    def _close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def value(output: str, prefix: str) -> str:
    """The rest of the first output line starting with `prefix`."""
    for line in output.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no line starts with {prefix!r} in:\n{output}")
