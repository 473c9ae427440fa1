"""What some tests need from the machine: root, namespaces, a compiler, cgroups.

A test that needs one asks here first. Where the machine lacks it, the test
skips with a reason naming what is missing. Where `.ci/run` promised it
(`TURNKEEP_REQUIRE_ROOT`, `TURNKEEP_REQUIRE_USERNS`, `TURNKEEP_REQUIRE_CC`,
`TURNKEEP_REQUIRE_CGROUP` set to `1`: it installs a compiler if there is
none, and says what it cannot provide), the test fails instead, so a
green CI run never hides a test CI could have run (R20).

The promises are read when this module is imported, before fixtures that
clear `TURNKEEP_*` from the environment run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Final, NoReturn

import pytest

_PROMISED: Final = frozenset(
    name
    for name in ("ROOT", "USERNS", "CC", "CGROUP")
    if os.environ.get(f"TURNKEEP_REQUIRE_{name}") == "1"
)


def _missing(name: str, reason: str) -> NoReturn:
    if name in _PROMISED:
        pytest.fail(f"{reason}; CI requires it here (TURNKEEP_REQUIRE_{name}=1)")
    pytest.skip(reason)


def root(why: str) -> None:
    """Skip (or fail where promised) unless this process runs as root."""
    if os.geteuid() != 0:
        _missing("ROOT", f"needs root {why}; run the tests as root to include it")


def user_namespaces() -> str:
    """The `unshare` command, if it can make user and mount namespaces here."""
    unshare = shutil.which("unshare")
    if unshare is not None:
        done = subprocess.run([unshare, "-rm", "true"], check=False)
        if done.returncode == 0:
            return unshare
    _missing(
        "USERNS",
        "needs user and mount namespaces (`unshare -rm`), which this machine "
        "does not allow",
    )


def c_compiler() -> str:
    """The C compiler (`cc` or `gcc`)."""
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        _missing("CC", "needs a C compiler (apt-get install -y gcc libc6-dev)")
    return found


def cgroup() -> None:
    """A cgroup v2 delegated to this process (the coding agent's commands)."""
    from coding_agent import cgroups

    if cgroups.base() is None:
        _missing(
            "CGROUP",
            "needs a cgroup v2 delegated to this process (cgroup2 mounted "
            "read-write and writable here): without one, processes that left "
            "a command's group with setsid can outlive a supervisor it killed",
        )
