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


@contextlib.contextmanager
def start_proxy(directory: Path) -> Generator[Proxy]:
    """Run the proxy from `directory` until the block ends.

    Raises:
        ProxyUnavailable: it is not installed, exited, or did not say it
            was serving within `STARTUP_SECONDS`.
    """
    script = _executable()
    shutil.copytree(HERE, directory, dirs_exist_ok=True)
    port = _free_port()
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
    with output.open("w", encoding="utf-8") as sink:
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
            for line in process.stdout:
                sink.write(line)
                sink.flush()
                if READY in line:
                    ready.set()
            ready.set()  # it exited: wake the waiter, which checks why

        reader = threading.Thread(target=watch, daemon=True)
        reader.start()
        try:
            if not ready.wait(STARTUP_SECONDS) or process.poll() is not None:
                raise ProxyUnavailable(
                    f"LiteLLM's proxy did not start within {STARTUP_SECONDS:g} s "
                    f"(exit status {process.poll()}); its output: "
                    + output.read_text(encoding="utf-8")[-2000:]
                )
            yield Proxy(
                base_url=f"http://127.0.0.1:{port}/v1",
                key=key,
                log=log,
                output=output,
            )
        finally:
            _stop(process)
            reader.join(timeout=10)
            if process.stdout is not None:
                process.stdout.close()


def _stop(process: subprocess.Popen[str]) -> None:
    # SIGKILL at once: the proxy keeps nothing, and a graceful stop would
    # wait for a request still held by the `slow` fault.
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            # Its own session: the signal reaches any worker it started too.
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
