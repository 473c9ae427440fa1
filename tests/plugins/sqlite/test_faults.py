"""Plan items 12, 14 and part of 16 for SQLite: real I/O errors under SQLite.

12. `faultshim.c` (LD_PRELOAD, compiled here with the system C compiler)
    fails the k-th `fdatasync` or `pwrite` SQLite makes on the database
    files, once or from then on, for every k of a 50-turn run. Each trial
    checks a typed `StorageError`, no acknowledgement of the failing flush, a
    poisoned writer that does no further I/O, and a valid reload
    (`_faultrun.py` holds the checks). CI: every k for fdatasync (EIO and
    ENOSPC), every 4th k for pwrite (EIO and ENOSPC): about 700 trials; soak:
    every k of all four.
14. `RLIMIT_FSIZE` set to a random size (SIGXFSZ ignored) in the writing
    process: the kernel's short write / EFBIG surfaces as `StorageError`, the
    reload shows no partial turn and `integrity_check` is ok. CI 300 trials;
    soak 3,000.
16. (part) EIO on a read during `load` is a typed error, not a short log
    (`StorageError`, or `SessionCorruptError` where SQLite reports the failed
    read as a malformed page).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

HERE = Path(__file__).parent
RUNNER = HERE / "_faultrun.py"


def run(args: list[str], *, shim: Path | None, match: Path) -> dict[str, Any]:
    env = dict(os.environ)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
        env["FAULTSHIM_MATCH"] = str(match)
    done = subprocess.run(
        [sys.executable, str(RUNNER), *args],
        env=env,
        capture_output=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    result: dict[str, Any] = msgspec.json.decode(done.stdout.splitlines()[-1])
    return result


CI_LOOPS = [
    ("sync", "EIO", 1),
    ("sync", "ENOSPC", 1),
    ("write", "EIO", 4),
    ("write", "ENOSPC", 4),
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "err", "stride"), CI_LOOPS)
def test_io_error_at_every_call_of_a_flush(
    shim: Path, tmp_path: Path, kind: str, err: str, stride: int
) -> None:
    result = run(
        ["loop", kind, err, str(tmp_path), str(stride)], shim=shim, match=tmp_path
    )
    print(f"{kind}/{err}: {result['calls']} calls per run, {result['trials']} trials")
    assert result["calls"] >= 50  # every flush syncs at least once
    assert result["violations"] == []


@pytest.mark.soak
@pytest.mark.parametrize(("kind", "err"), [(k, e) for k, e, _ in CI_LOOPS])
def test_io_error_at_every_call_soak(
    shim: Path, tmp_path: Path, kind: str, err: str
) -> None:
    result = run(["loop", kind, err, str(tmp_path), "1"], shim=shim, match=tmp_path)
    assert result["violations"] == []


def test_claim_and_release_add_no_sync_to_a_turn(shim: Path, tmp_path: Path) -> None:
    # Open per request: take the writer role, one turn, give it up. Only the
    # turn's commit syncs; the role rides on it (a light commit, R9).
    result = run(["syncs", str(tmp_path)], shim=shim, match=tmp_path)
    assert result["turn"] >= 1
    assert result["request"] == result["turn"], result
    assert result["violations"] == []


def test_eio_during_load_is_a_typed_error(shim: Path, tmp_path: Path) -> None:
    result = run(["read-eio", str(tmp_path)], shim=shim, match=tmp_path)
    assert result["violations"] == []


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 2])
def test_file_size_limit_mid_write(tmp_path: Path, chunk: int, rng: Any) -> None:
    result = run(
        ["rlimit", str(tmp_path), "150", str(rng.randrange(2**32))],
        shim=None,
        match=tmp_path,
    )
    del chunk
    assert result["violations"] == []
    assert result["refused"] >= 100  # the limits must actually bite


@pytest.mark.soak
def test_file_size_limit_soak(tmp_path: Path, rng: Any) -> None:
    result = run(
        ["rlimit", str(tmp_path), "3000", str(rng.randrange(2**32))],
        shim=None,
        match=tmp_path,
    )
    assert result["violations"] == []
