"""`clear_session` hides items; `turnkeep rm` and `turnkeep prune` erase them.

A clear is a tombstone on the append-only log: the items stay in the
store's bytes until the session itself is deleted. Deleting it with
`turnkeep rm`, or letting `turnkeep prune` remove it once it is old
enough, leaves nothing of its items in the store (R19 in
`docs/reliability.md`; what no backend can wipe is listed there).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.cli.support import cli

from turnkeep import Host
from turnkeep.clock import now_ms
from turnkeep.config import load_config
from turnkeep.storespec import parse_spec
from turnkeep_openai_agents import TurnkeepSession, shutdown

MARKER = "erase-me-7f3a9c"
DAY = 86_400_000


def stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.fixture(params=["jsonl", "sqlite"])
def spec_and_root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    root = tmp_path / "store"
    if request.param == "jsonl":
        return f"jsonl:{root}", root
    root.mkdir()
    return f"sqlite:{root / 's.db'}", root


async def cleared(session: TurnkeepSession, marker: str = MARKER) -> None:
    await session.add_items([{"role": "user", "content": f"my secret {marker}"}])  # pyright: ignore[reportArgumentType]
    await session.clear_session()
    assert await session.get_items() == []
    session.close()


def test_clear_hides_and_rm_erases(spec_and_root: tuple[str, Path]) -> None:
    spec, root = spec_and_root
    asyncio.run(cleared(TurnkeepSession("conv", spec)))
    asyncio.run(cleared(TurnkeepSession("kept", spec)))
    shutdown()
    assert MARKER.encode() in stored_bytes(root)  # cleared, not erased
    removed = cli("--store", spec, "rm", "--yes", "conv", "kept")
    assert removed.exit_code == 0, removed.stderr
    assert MARKER.encode() not in stored_bytes(root)
    assert asyncio.run(TurnkeepSession("conv", spec).get_items()) == []


def test_prune_erases_a_cleared_session_once_old_enough(
    spec_and_root: tuple[str, Path],
) -> None:
    spec, root = spec_and_root

    async def write_long_ago() -> None:
        config = load_config(overrides=parse_spec(spec).overrides())
        at = now_ms() - 40 * DAY
        async with Host(config, clock=lambda: at) as host:
            await cleared(TurnkeepSession("old", host), "old-marker-1b2c")

    asyncio.run(write_long_ago())
    asyncio.run(cleared(TurnkeepSession("recent", spec)))
    shutdown()
    assert b"old-marker-1b2c" in stored_bytes(root)
    shutdown()
    pruned = cli("--store", spec, "prune", "--older-than", "30d", "--yes")
    assert pruned.exit_code == 0, pruned.stderr
    listed = cli("--store", spec, "ls", "--json")
    assert "recent" in listed.stdout
    assert '"old"' not in listed.stdout
    # The old session is erased; the recent one still holds its cleared items.
    assert b"old-marker-1b2c" not in stored_bytes(root)
    assert MARKER.encode() in stored_bytes(root)
    rm = cli("--store", spec, "rm", "--yes", "recent")
    assert rm.exit_code == 0, rm.stderr
    assert MARKER.encode() not in stored_bytes(root)
