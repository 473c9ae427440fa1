"""LiteLLM's OpenAI-compatible proxy, started on 127.0.0.1 for the model's tests.

`start_proxy` copies `tests/support/litellm/` (the proxy's configuration
and the `CustomLLM` handler it loads) into a directory of its own, starts
`litellm --config` there on a free port with a fresh master key, and
returns once the proxy says it is serving (its own log line, not a timer).
It does not fetch LiteLLM's model-price map from the network
(`LITELLM_LOCAL_MODEL_COST_MAP`).

Where the proxy cannot start (LiteLLM not installed, or the process fails
or says nothing in `STARTUP_SECONDS`), `ProxyUnavailable` says why; the
fixture turns that into a skip with the reason, and `tests/support/
skipguard.py` turns such a skip into a failure where the proxy is
required (`TURNKEEP_REQUIRE_LITELLM=1`, as `.ci/run` sets).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Final

import attrs

HERE: Final = Path(__file__).resolve().parent / "litellm"
STARTUP_SECONDS: Final = 180.0
"""LiteLLM imports for 10-30 s on a busy two-core machine."""
READY: Final = "Uvicorn running on"
REQUIRE_VARIABLE: Final = "TURNKEEP_REQUIRE_LITELLM"


class ProxyUnavailable(Exception):
    """The proxy could not be started here; the message says why."""


def required() -> bool:
    """Whether a skipped proxy test must fail the run (CI sets the variable)."""
    return os.environ.get(REQUIRE_VARIABLE) == "1"


@attrs.frozen
class Proxy:
    """A running proxy.

    Attributes:
        base_url: the API root (`http://127.0.0.1:PORT/v1`).
        key: its master key (a canary: it must reach no stored byte).
        log: the file its `CustomLLM` handler appends each request to.
        output: the file holding the proxy's own output.
    """

    base_url: str
    key: str
    log: Path
    output: Path

    def requests(self, tag: str) -> int:
        """How many requests whose user message is `tag` reached the handler."""
        if not self.log.exists():
            return 0
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return sum(1 for line in lines if line == tag)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _executable() -> Path:
    script = Path(sys.executable).with_name("litellm")
    if not script.exists():
        raise ProxyUnavailable(
            f"LiteLLM's proxy is not installed ({script} is missing): "
            "uv sync --all-packages installs it with the dev group"
        )
    return script


@attrs.define
class _Running:
    process: subprocess.Popen[str]
    reader: threading.Thread
    port: int

    def stop(self) -> None:
        _stop(self.process)
        self.reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def start_proxy(directory: Path) -> Generator[Proxy]:
    """Run the proxy from `directory` until the block ends.

    A proxy that exits while starting (the free port it was given may have
    been taken meanwhile) is started again on another port, twice at most.

    Raises:
        ProxyUnavailable: it is not installed, exited, or did not say it
            was serving within `STARTUP_SECONDS`.
    """
    script = _executable()
    shutil.copytree(HERE, directory, dirs_exist_ok=True)
    key = "sk-proxy-canary-" + secrets.token_hex(16)
    log = directory / "requests.log"
    output = directory / "proxy.out"
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "FAULTS_LOG": str(log),
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_COLOR": "1",
    }
    running = _launch_again(script, directory, env, output)
    try:
        yield Proxy(
            base_url=f"http://127.0.0.1:{running.port}/v1",
            key=key,
            log=log,
            output=output,
        )
    finally:
        running.stop()


def _launch_again(
    script: Path, directory: Path, env: dict[str, str], output: Path, tries: int = 3
) -> _Running:
    for _ in range(tries - 1):
        with contextlib.suppress(_Exited):
            return _launch(script, directory, env, output)
    return _launch(script, directory, env, output)


class _Exited(ProxyUnavailable):
    """The proxy exited while it started (it may start on another port)."""


def _launch(
    script: Path, directory: Path, env: dict[str, str], output: Path
) -> _Running:
    port = _free_port()
    command = [
        str(script),
        "--config",
        str(directory / "config.yaml"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    ready = threading.Event()
    sink = output.open("w", encoding="utf-8")
    process = subprocess.Popen(
        command,
        cwd=directory,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def watch() -> None:
        assert process.stdout is not None
        with sink:
            for line in process.stdout:
                sink.write(line)
                sink.flush()
                if READY in line:
                    ready.set()
        ready.set()  # it exited: wake the waiter, which checks why

    running = _Running(process, threading.Thread(target=watch, daemon=True), port)
    running.reader.start()
    started = ready.wait(STARTUP_SECONDS)
    if started and process.poll() is None:
        return running
    running.stop()
    said = output.read_text(encoding="utf-8")[-2000:]
    if not started:
        raise ProxyUnavailable(
            f"LiteLLM's proxy did not start within {STARTUP_SECONDS:g} s; "
            f"its output: {said}"
        )
    raise _Exited(
        f"LiteLLM's proxy exited while starting (status {process.returncode}); "
        f"its output: {said}"
    )


def _stop(process: subprocess.Popen[str]) -> None:
    # SIGKILL at once: the proxy keeps nothing, and a graceful stop would
    # wait for a request still held by the `slow` fault.
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            # Its own session: the signal reaches any worker it started too.
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
