"""Hot reload: a plugin swapped for a fresh import while sessions stay live."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import make_config
from tests.support.writes import write_state

from turnkeep import Host, hookimpl
from turnkeep.errors import PluginReloadError
from turnkeep.events import (
    AssistantChunkData,
    TurnEndData,
    UserMessageData,
)
from turnkeep.testing import MemoryStorage

PLUGIN = """
from turnkeep import hookimpl
from turnkeep.memory import MemoryPersistence
import {shared}

VERSION = {version}

@hookimpl
def register_persistence(register):
    register("reloadable", lambda _config: MemoryPersistence({shared}.STORAGE))
"""


DISK_PLUGIN = """
from turnkeep import hookimpl
from {package} import {config}, {backend}

VERSION = {version}

@hookimpl
def register_persistence(register):
    register("reloadable", {factory}, {config})
"""
"""A plugin whose backend is a real disk backend: each reload disposes one
(draining its buffers, closing its files, giving up its writer role) and
builds a fresh one that takes the live sessions over."""

DISK: dict[str, dict[str, str]] = {
    "jsonl": {
        "package": "turnkeep_jsonl",
        "config": "JsonlConfig",
        "backend": "JsonlPersistence",
        "factory": "JsonlPersistence.from_config",
        "path": "store",
    },
    "sqlite": {
        "package": "turnkeep_sqlite",
        "config": "SqliteConfig",
        "backend": "SqlitePersistence",
        "factory": "SqlitePersistence",
        "path": "s.sqlite3",
    },
}


def write_plugin(
    root: Path,
    name: str,
    shared: str,
    version: int,
    broken: bool = False,
    backend: str = "memory",
) -> None:
    if backend == "memory":
        source = PLUGIN.format(shared=shared, version=version)
    else:
        source = DISK_PLUGIN.format(version=version, **DISK[backend])
    if broken:
        source += "\nthis is not python\n"
    path = root / name / "__init__.py"
    path.write_text(textwrap.dedent(source))
    # Make the change visible to the import system even within one mtime tick.
    stamp = 1_000_000_000 + version
    os.utime(path, (stamp, stamp))


@pytest.fixture
def reloadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Path, MemoryStorage]:
    """A plugin package on disk whose backend stores into a shared storage."""
    name = f"reloadable_{tmp_path.name.replace('-', '_')}"
    shared = f"{name}_storage"
    (tmp_path / name).mkdir()
    storage = MemoryStorage()
    shared_module = types.ModuleType(shared)
    shared_module.STORAGE = storage  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, shared, shared_module)
    write_plugin(tmp_path, name, shared, 1)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, tmp_path, storage


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def any_reloadable(
    request: pytest.FixtureRequest,
    reloadable: tuple[str, Path, MemoryStorage],
) -> tuple[str, Path, str]:
    """`reloadable`, its backend the memory one, a JSONL store or a db file."""
    name, root, _ = reloadable
    backend: str = request.param
    write_plugin(root, name, f"{name}_storage", 1, backend=backend)
    return name, root, backend


async def start_host(name: str, root: Path | None = None, backend: str = "") -> Host:
    module = __import__(name)
    options = {}
    if backend in DISK:
        path = str(root / DISK[backend]["path"]) if root is not None else ""
        options = {"reloadable": {"path": path}}
    host = Host(
        make_config(persistence="reloadable", backends=options), plugins=[module]
    )
    return await host.start()


async def stored_events(host: Host, session_id: str) -> list[Any]:
    loaded = await host.require_persistence().load(session_id)
    return host.codec.decode_log(loaded.events, session_id=session_id)


def load_texts(storage: MemoryStorage, session_id: str) -> list[bytes]:
    return list(storage.sessions[session_id].events)


@pytest.mark.asyncio
async def test_reload_imports_afresh_and_keeps_the_cursor(
    reloadable: tuple[str, Path, MemoryStorage],
) -> None:
    name, root, storage = reloadable
    host = await start_host(name)
    try:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="before"))
        await session.flush()
        session.append(UserMessageData(text="pending at reload"))
        write_plugin(root, name, f"{name}_storage", 2)
        new = await host.reload(name)
        assert isinstance(new, types.ModuleType)
        assert new.VERSION == 2  # type: ignore[attr-defined]
        session.append(UserMessageData(text="after"))
        await session.flush()
        events = host.codec.decode_log(load_texts(storage, "s"), session_id="s")
        assert [e.data.text for e in events] == ["before", "pending at reload", "after"]  # type: ignore[attr-defined]
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_a_reload_that_fails_to_import_keeps_the_old_plugin(
    reloadable: tuple[str, Path, MemoryStorage],
) -> None:
    name, root, storage = reloadable
    host = await start_host(name)
    try:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        write_plugin(root, name, f"{name}_storage", 3, broken=True)
        with pytest.raises(PluginReloadError, match="old plugin stays active"):
            await host.reload(name)
        assert host.persistence_name == "reloadable"
        assert sys.modules[name].VERSION == 1  # type: ignore[attr-defined]
        session.append(UserMessageData(text="two"))
        await session.flush()
        assert len(load_texts(storage, "s")) == 2
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_reload_of_a_plain_plugin_disposes_old_and_applies_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: Host
) -> None:
    name = f"plain_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from turnkeep import hookimpl
            LOG = []

            class Plugin:
                @hookimpl
                def plugin_apply(self, host):
                    LOG.append(("apply", id(self)))

                @hookimpl
                def plugin_dispose(self, host):
                    LOG.append(("dispose", id(self)))
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    old = module.Plugin()
    host.register(old, "plain")
    new = await host.reload("plain")
    assert type(new).__name__ == "Plugin"
    assert type(new) is not type(old)
    assert [("apply", id(old)), ("dispose", id(old))] == module.LOG
    assert [("apply", id(new))] == sys.modules[name].LOG
    assert host.pm.get_plugin("plain") is new


class Churn:
    """Appends events to a session while reloads happen underneath it."""

    @hookimpl
    def plugin_apply(self, host: Host) -> None:
        self.host = host


@pytest.mark.asyncio
async def test_hot_reload_at_100_random_points_loses_and_duplicates_nothing(
    any_reloadable: tuple[str, Path, str],
) -> None:
    name, root, backend = any_reloadable
    seed = random.randrange(2**32)
    print(f"reload seed: {seed} ({backend})")
    rnd = random.Random(seed)
    host = await start_host(name, root, backend)
    try:
        sessions = [host.sessions.create(f"s{i}") for i in range(3)]
        total_events = 900
        reload_points = set(rnd.sample(range(total_events), 100))
        pending_reloads: list[asyncio.Task[Any]] = []
        version = 1
        turn = [0, 0, 0]
        for index in range(total_events):
            which = rnd.randrange(len(sessions))
            session = sessions[which]
            roll = rnd.random()
            if roll < 0.15:
                turn[which] += 1
                session.append(TurnEndData(turn=turn[which], status="completed"))
                await session.flush()
            elif roll < 0.5:
                session.append(UserMessageData(text=f"{which}:{index}"))
            else:
                session.append(AssistantChunkData(text=f"{which}:{index}"))
            if index in reload_points:
                version += 1
                write_plugin(root, name, f"{name}_storage", version, backend=backend)
                task = asyncio.create_task(host.reload(name))
                pending_reloads.append(task)
                if rnd.random() < 0.5:
                    await task  # sometimes let it finish, sometimes race it
            if rnd.random() < 0.2:
                await asyncio.sleep(0)
        await asyncio.gather(*pending_reloads)
        assert version == sys.modules[name].VERSION  # type: ignore[attr-defined]
        for session in sessions:
            await session.flush()
            stored = await stored_events(host, session.id)
            assert stored == list(session.events), f"seed {seed}"
            assert [e.seq for e in stored] == list(range(len(stored)))
        live = [list(session.events) for session in sessions]
    finally:
        await host.aclose()
    # What the last backend left on disk is what another process loads.
    reader = await start_host(name, root, backend)
    try:
        for session_id, events in zip(["s0", "s1", "s2"], live, strict=True):
            assert await stored_events(reader, session_id) == events, f"seed {seed}"
    finally:
        await reader.aclose()


@pytest.mark.asyncio
async def test_a_session_with_nothing_durable_survives_a_reload(
    reloadable: tuple[str, Path, MemoryStorage],
) -> None:
    name, _, storage = reloadable
    host = await start_host(name)
    try:
        session = host.sessions.create("fresh")
        session.set_summary(title="kept")
        await asyncio.sleep(0)  # let the backend registration task run
        assert write_state(host, session).registered_with is not None
        await host.reload(name)
        session.append(UserMessageData(text="first"))
        await session.flush()
        assert len(load_texts(storage, "fresh")) == 1
        assert storage.sessions["fresh"].meta.summary.title == "kept"
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_a_reloaded_module_with_an_invalid_hook_is_refused(
    reloadable: tuple[str, Path, MemoryStorage],
) -> None:
    name, root, storage = reloadable
    host = await start_host(name)
    try:
        session = host.sessions.create("s")
        path = root / name / "__init__.py"
        path.write_text(
            path.read_text()
            + "\n@hookimpl\ndef session_event(wrong_argument):\n    return None\n"
        )
        os.utime(path, (1_000_000_099, 1_000_000_099))
        with pytest.raises(PluginReloadError, match="not valid"):
            await host.reload(name)
        assert sys.modules[name].VERSION == 1  # type: ignore[attr-defined]
        session.append(UserMessageData(text="still stored"))
        await session.flush()
        assert len(load_texts(storage, "s")) == 1
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_commits_are_reported_once_across_a_reload(
    reloadable: tuple[str, Path, MemoryStorage],
) -> None:
    name, _, _ = reloadable
    ranges: list[tuple[int, int]] = []

    class Recorder:
        @hookimpl
        def session_committed(
            self, session: Any, first_seq: int, last_seq: int
        ) -> None:
            ranges.append((first_seq, last_seq))

    host = await start_host(name)
    host.register(Recorder())
    try:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await session.flush()
        session.append(UserMessageData(text="two"))  # pending across the reload
        await host.reload(name)
        session.append(UserMessageData(text="three"))
        await session.flush()
        assert ranges[0] == (0, 0)
        covered = [seq for first, last in ranges for seq in range(first, last + 1)]
        assert covered == [0, 1, 2]  # no gap, no overlap, in order
    finally:
        await host.aclose()
