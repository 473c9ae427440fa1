"""`scripts/uv`: the README's commands work where uv is not installed yet.

The script is copied into a scratch project and run with a PATH that holds
no uv, behind a `python3` that refuses pip installs the way an externally
managed Python (Debian's) does, so only the private-environment fallback
can succeed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_REFUSING_PYTHON = """#!/bin/sh
case "$*" in
  "-m pip install"*)
    echo "error: externally-managed-environment" >&2
    echo "$*" >> "{log}"
    exit 1;;
  "-m uv"*) echo "No module named uv" >&2; exit 1;;
esac
exec "{python}" "$@"
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    script = project / "scripts" / "uv"
    script.write_bytes((ROOT / "scripts" / "uv").read_bytes())
    script.chmod(0o755)
    return project


def _run(project: Path, bin_dir: Path, home: Path) -> subprocess.CompletedProcess[str]:
    # The machine's ways to reach a package index (pip settings, proxies,
    # certificates) pass through; nothing that could find a uv does.
    env = {
        name: value
        for name, value in os.environ.items()
        if name.startswith(("PIP_", "SSL_CERT_", "REQUESTS_CA_"))
        or name.lower() in ("http_proxy", "https_proxy", "no_proxy")
    }
    env |= {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run(
        ["sh", str(project / "scripts" / "uv"), "--version"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_an_installed_uv_is_used_as_it_is(tmp_path: Path) -> None:
    project = _project(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "uv"
    fake.write_text('#!/bin/sh\necho "the uv on PATH: $*"\n')
    fake.chmod(0o755)
    done = _run(project, bin_dir, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the uv on PATH: --version\n"
    assert not (project / ".tools").exists()


@pytest.mark.slow
def test_an_externally_managed_python_gets_a_private_uv(tmp_path: Path) -> None:
    if any(Path(d, "uv").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip("this machine has uv in /usr/bin or /bin: nothing to bootstrap")
    project = _project(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    refused = tmp_path / "refused.log"
    python = bin_dir / "python3"
    python.write_text(_REFUSING_PYTHON.format(log=refused, python=sys.executable))
    python.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()

    first = _run(project, bin_dir, home)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("uv "), first.stdout
    assert "installing uv into" in first.stderr
    assert (project / ".tools" / "uv" / "bin" / "uv").exists()
    assert len(refused.read_text().splitlines()) == 2  # pip, then pip --user

    # Idempotent: the second run finds the private uv and installs nothing.
    second = _run(project, bin_dir, home)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert second.stderr == ""
    assert len(refused.read_text().splitlines()) == 2
