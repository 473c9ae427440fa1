"""Plan item 29: canary secrets never reach a stored byte (JSONL, SQLite)."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from tests.reliability.secrets_workload import canaries, run_canary_turns

from turnkeep import Config, Host


def every_byte(root: Path) -> bytes:
    """Every file under `root` (logs, sidecars, catalog, -wal, -shm, quarantine)."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.asyncio
async def test_no_canary_is_stored_raw(
    backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seed = random.randrange(2**32)
    print(f"canary seed: {seed}")
    secrets = canaries(seed)
    store = tmp_path / "store"
    path = store / "sessions.sqlite3" if backend == "sqlite" else store
    config = Config(
        persistence=backend,
        plugins=(backend,),
        redact_secrets=True,
        redact_high_entropy=True,  # the canaries include random tokens
        backends={backend: {"path": str(path)}},
    )
    caplog.set_level(logging.DEBUG)
    async with Host(config) as host:
        session_id = await run_canary_turns(host, secrets)
        loaded = await host.require_persistence().load(session_id)
    stored = every_byte(store)
    assert stored, "the backend wrote nothing"
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for _, secret in secrets:
        assert secret.encode() not in stored, f"raw secret stored (seed {seed})"
        assert secret not in logs, f"raw secret logged (seed {seed})"
        assert secret.encode() not in b"".join(loaded.events)
    assert stored.count(b"[REDACTED:") >= 50
    assert loaded.meta.summary.title is not None
    assert "[REDACTED:" in loaded.meta.summary.title
