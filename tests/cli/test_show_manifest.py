"""`turnkeep show` and `tail` print each turn's commit manifest and a recorded drift."""

from __future__ import annotations

import asyncio

import attrs
from tests.cli.support import Store, cli

from turnkeep import AgentLoop, hookimpl
from turnkeep.testing import ScriptedModel

LONG = "sha256:" + "ab" * 32


@attrs.define(eq=False)
class World:
    versions: dict[str, str]

    @hookimpl
    def turn_manifest(self) -> dict[str, str]:
        return dict(self.versions)


async def drifted(store: Store) -> None:
    """Session `s`: a turn naming the world, then a resume that recorded a drift."""
    world = World({"workspace": LONG, "db": "row-7"})
    async with store.host() as host, host.plugin(world):
        loop = AgentLoop.create(
            "a", host=host, model=ScriptedModel(["hi", "again"]), session_id="s"
        )
        await loop.run_turn("hello")
        await loop.close()
    world.versions["db"] = "row-8"
    async with store.host() as host, host.plugin(world):
        loop = await AgentLoop.resume(
            "a", "s", host=host, model=ScriptedModel(["hi", "again"]), drift="record"
        )
        await loop.close()


def test_show_prints_the_manifest_under_its_turn_and_the_drift(store: Store) -> None:
    asyncio.run(drifted(store))
    result = cli("show", "s", store=store)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "manifest: db row-7, workspace sha256:abababababababab…" in out
    assert "outside state changed while the session was not running" in out
    assert "db: recorded row-7, now row-8" in out
    assert out.index("manifest: db row-7") < out.index("db: recorded row-7")
    full = cli("show", "s", "--full", store=store).stdout
    assert f"workspace{LONG}" in "".join(full.split())  # wrapped to the width


def test_tail_names_what_drifted(store: Store) -> None:
    asyncio.run(drifted(store))
    out = cli("tail", "s", store=store).stdout
    assert "run/drift" in out
    assert "changed since seq" in out
    assert ": db" in out
