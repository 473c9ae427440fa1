"""The loop tests' backend probe fails a broken shipped backend, never skips it.

A probe that turned an error into a skip let every JSONL loop case (items 34
and 35, cold/warm, the example agents) skip while the run passed. These
tests run `backend_ready` against backends broken on purpose and require a
failure; only a third-party backend that is not installed may skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.loop import support
from tests.support import pgserver

from turnkeep.persistence import LoadedSession
from turnkeep_jsonl.backend import JsonlPersistence
from turnkeep_sqlite import SqlitePersistence


def _outcome(name: str, tmp_path: Path) -> tuple[str, str]:
    """`("failed" | "skipped" | "passed", message)` of probing `name` afresh."""
    support._READY.pop(name, None)
    try:
        support.backend_ready(name, tmp_path)
    except pytest.fail.Exception as exc:
        return "failed", str(exc)
    except pytest.skip.Exception as exc:
        return "skipped", str(exc)
    finally:
        support._READY.pop(name, None)  # later tests probe the real backend
    return "passed", ""


async def _broken_load(self: object, session_id: str) -> LoadedSession:
    raise RuntimeError(f"load of {session_id!r} broken on purpose")


@pytest.mark.parametrize(
    ("name", "cls"), [("jsonl", JsonlPersistence), ("sqlite", SqlitePersistence)]
)
def test_a_shipped_backend_with_a_broken_load_fails(
    name: str, cls: type[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cls, "load", _broken_load)
    outcome, message = _outcome(name, tmp_path)
    assert outcome == "failed", f"a probe error became {outcome!r}: {message}"
    assert "broken on purpose" in message


@pytest.mark.asyncio
async def test_the_async_probe_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(JsonlPersistence, "load", _broken_load)
    support._READY.pop("jsonl", None)
    message = ""
    try:
        await support.backend_ready_async("jsonl", tmp_path)
    except pytest.skip.Exception as exc:
        pytest.fail(f"a probe error became a skip: {exc}")
    except pytest.fail.Exception as exc:
        message = str(exc)
    else:
        pytest.fail("the broken backend passed the probe")
    finally:
        support._READY.pop("jsonl", None)
    assert "broken on purpose" in message


@pytest.mark.parametrize("name", ["memory", "jsonl", "sqlite"])
def test_working_shipped_backends_pass(name: str, tmp_path: Path) -> None:
    assert _outcome(name, tmp_path) == ("passed", "")


def test_postgres_passes_with_the_test_server(tmp_path: Path) -> None:
    pgserver.require_server()
    assert _outcome("postgres", tmp_path) == ("passed", "")


def test_a_shipped_backend_that_is_not_installed_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(support, "SHIPPED", frozenset({"memory", "jsonl", "absent"}))
    outcome, message = _outcome("absent", tmp_path)
    assert outcome == "failed", message
    assert "ships in this repository" in message


def test_only_a_third_party_backend_that_is_not_installed_skips(
    tmp_path: Path,
) -> None:
    outcome, message = _outcome("thirdparty", tmp_path)
    assert outcome == "skipped", message
    assert "third-party thirdparty backend is not installed" in message


def test_postgres_skips_only_where_no_server_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 1: the server is down.
    monkeypatch.setattr(pgserver, "DSN", "postgresql://postgres@127.0.0.1:1/test")
    monkeypatch.setattr(pgserver, "installed", lambda: True)
    assert _outcome("postgres", tmp_path)[0] == "failed"
    monkeypatch.setattr(pgserver, "installed", lambda: False)
    monkeypatch.delenv(pgserver.REQUIRE_ENV, raising=False)
    monkeypatch.delenv("TURNKEEP_TEST_POSTGRES_DSN", raising=False)
    assert _outcome("postgres", tmp_path)[0] == "skipped"
    monkeypatch.setenv(pgserver.REQUIRE_ENV, "1")
    assert _outcome("postgres", tmp_path)[0] == "failed"
