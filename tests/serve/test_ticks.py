"""The service's timers: the recovery sweep (`[serve] recover_every`,
`--recover-every`) and retention (`[serve] prune_every`), each on its own.

Sessions are left inside a turn by a real SIGKILL (`killed_in_turn`), on
JSONL and SQLite. Two `turnkeep serve` processes ticking over one store
settle each session once, and neither reports a failure because the other
got there first. A sweep that recovered or failed is on the audit trail; an
idle tick records nothing.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from tests.cli.conftest import make_store
from tests.cli.support import SCRIPT, Store, cli
from tests.serve.conftest import Served, config, free_port, killed_in_turn

from turnkeep import Host
from turnkeep.agent.sweep import SweepResult, recover_interrupted, run_recovery
from turnkeep.audit import AuditRecord
from turnkeep.auditing import read_trail
from turnkeep.config import RetentionPolicy, ServeConfig
from turnkeep.errors import ConfigurationError
from turnkeep.events import TurnEnd, UserMessageData
from turnkeep.serve import create_app

BACKENDS = ("jsonl", "sqlite")


async def trail(host: Host, scope: str | None) -> list[AuditRecord]:
    return await read_trail(host.require_persistence(), scope)


async def settled(store: Store, ids: list[str], seconds: float = 60.0) -> None:
    """Wait until no session of `ids` is stored `active` (a turn running)."""
    deadline = time.monotonic() + seconds
    while True:
        async with store.host() as host:
            backend = host.require_persistence()
            statuses = [(await backend.load(i)).meta.summary.status for i in ids]
        if "active" not in statuses:
            return
        assert time.monotonic() < deadline, f"still active: {statuses}"
        await asyncio.sleep(0.1)


async def check_recovered_once(store: Store, ids: list[str]) -> None:
    async with store.host() as host:
        for session_id in ids:
            records = await trail(host, session_id)
            assert [r.action for r in records] == ["recovery"], records
            assert records[0].detail.get("why") != "sweep failed"
            events = host.codec.decode_log(
                (await host.require_persistence().load(session_id)).events,
                session_id=session_id,
            )
            ends = [e for e in events if isinstance(e, TurnEnd)]
            assert [e.data.status for e in ends] == ["interrupted"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_the_timer_sweeps_and_an_idle_tick_records_nothing(
    backend: str, tmp_path: Path
) -> None:
    store = make_store(backend, tmp_path)
    ids = ["s1", "s2"]
    for session_id in ids:
        killed_in_turn(store, session_id)
    sweeps: list[list[SweepResult]] = []
    enough = asyncio.Event()

    def seen(results: list[SweepResult]) -> None:
        sweeps.append(results)
        if len(sweeps) >= 3:
            enough.set()

    async with store.host() as host:
        ticking = asyncio.create_task(
            run_recovery(host, timedelta(milliseconds=20), on_results=seen)
        )
        try:
            await asyncio.wait_for(enough.wait(), 60)
        finally:
            ticking.cancel()
            with pytest.raises(asyncio.CancelledError):
                await ticking
        assert sorted(r.session_id for r in sweeps[0]) == ids
        assert {r.action for r in sweeps[0]} == {"recovered"}
        assert all(s == [] for s in sweeps[1:])  # nothing left: idle ticks
    # The recoveries are on the trail, once each; the idle ticks left nothing.
    await check_recovered_once(store, ids)
    async with store.host() as host:
        assert [r.action for r in await trail(host, None)] == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_sweep_that_fails_is_on_the_trail(backend: str, tmp_path: Path) -> None:
    store = make_store(backend, tmp_path)
    killed_in_turn(store, "real")
    async with store.host() as host:
        results = await recover_interrupted(host, session_ids=["ghost"])
        assert [(r.session_id, r.action) for r in results] == [("ghost", "failed")]
        # Not stored: the store's own trail keeps what the sweep could not do.
        [record] = await trail(host, None)
        assert record.action == "recovery"
        assert record.session_id == "ghost"
        assert record.detail == {"why": "sweep failed"}
        assert "could not settle it" in record.reason
        assert await trail(host, "real") == []  # not asked about: untouched


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_the_service_runs_the_sweep_on_its_timer(
    backend: str, tmp_path: Path, served: Served
) -> None:
    store = make_store(backend, tmp_path)
    killed_in_turn(store, "s1")
    every = config(recover_every=timedelta(milliseconds=50))
    async with served(store, every) as client:
        deadline = time.monotonic() + 60
        while True:
            records = (await client.get("/sessions/s1/audit")).json()["records"]
            if records:
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert [r["action"] for r in records] == ["recovery"]
    await check_recovered_once(store, ["s1"])


@pytest.mark.asyncio
async def test_the_service_prunes_on_its_own_timer(tmp_path: Path) -> None:
    store = make_store("sqlite", tmp_path)
    async with store.host() as host:
        for session_id in ("a", "b"):
            session = host.sessions.create(session_id)
            session.append(UserMessageData(text="hello"))
            session.set_summary(status="idle")
            await host.sessions.close(session_id)
    policy = RetentionPolicy(older_than=timedelta(milliseconds=1))
    async with Host(store.config(retention=policy)) as host:
        backend = host.require_persistence()
        # Recovery is not asked for: only retention ticks.
        app = create_app(host, config(prune_every=timedelta(milliseconds=50)))
        async with app.router.lifespan_context(app):
            deadline = time.monotonic() + 60
            while True:
                # Each deletion is audited right after it: wait for both.
                deleted = sorted(
                    str(r.session_id)
                    for r in await trail(host, None)
                    if r.action == "deletion"
                )
                if len(deleted) == 2:
                    break
                assert time.monotonic() < deadline, deleted
                await asyncio.sleep(0.05)
        assert not await backend.has("a")
        assert not await backend.has("b")
    assert deleted == ["a", "b"]


def test_prune_every_needs_a_retention_policy(tmp_path: Path) -> None:
    store = make_store("sqlite", tmp_path)

    async def build() -> None:
        async with store.host() as host:
            create_app(host, config(prune_every="1h"))

    with pytest.raises(ConfigurationError, match=r"\[retention\]"):
        asyncio.run(build())
    result = cli("serve", "--prune-every", "1h", store=store)
    assert result.exit_code != 0
    assert "[retention]" in result.stderr
    result = cli("serve", "--recover-every", "soon", store=store)
    assert result.exit_code != 0
    assert "soon" in result.stderr
    assert ServeConfig(recover_every="90s").recover_every == timedelta(seconds=90)
    assert ServeConfig().recover_every is None


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_services_ticking_at_once_recover_each_session_once(
    backend: str, tmp_path: Path
) -> None:
    store = make_store(backend, tmp_path)
    ids = [f"s{i}" for i in range(4)]
    for session_id in ids:
        killed_in_turn(store, session_id)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
    procs = [
        subprocess.Popen(
            [
                str(SCRIPT),
                "--store",
                store.spec,
                "serve",
                "--port",
                str(free_port()),
                "--recover-every",
                "1s",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        asyncio.run(settled(store, ids))
        # A few more ticks of both: each finds nothing left to do.
        time.sleep(2.5)
    finally:
        errors: list[str] = []
        for proc in procs:
            proc.terminate()
            _, stderr = proc.communicate(timeout=30)
            errors.append(stderr.decode())
    for text in errors:
        assert "Traceback" not in text, text
        assert "could not" not in text, text
        assert "recovery sweep every 1s" in text, text
    asyncio.run(check_recovered_once(store, ids))

    async def store_trail() -> list[AuditRecord]:
        async with store.host() as host:
            return await trail(host, None)

    assert asyncio.run(store_trail()) == []
