"""`TurnkeepSaver` beyond LangGraph's suite: deltas, threads and loops, erasure, errors.

- a channel whose version did not change is not written again (the log and
  the SQLite file grow with what changed);
- sync methods work from worker threads, inside a running loop and across
  loops, on one shared host; a caller's started `Host` is used on its loop;
- thread ids that cannot be session ids as they are (too long, `#...`)
  round-trip, `list(None)` walks every thread;
- `prune` and `delete_for_runs` erase what they drop from the store's bytes,
  and a rewrite a crash interrupted is finished on the thread's next use;
- bad input is a typed error.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from turnkeep.errors import (
    ConfigurationError,
    FlushError,
    PluginNotFoundError,
    SessionExistsError,
    SessionHeldError,
    SessionLockedError,
    StorageError,
)
from turnkeep.host import Host
from turnkeep.storespec import parse_spec
from turnkeep_langgraph import TurnkeepSaver, events
from turnkeep_langgraph.events import BlobEvent, CheckpointEvent
from turnkeep_langgraph.threads import session_id

from .conftest import spec_for


@pytest.fixture
def saver(sqlite_store: str) -> Iterator[TurnkeepSaver]:
    with TurnkeepSaver(store=sqlite_store) as s:
        yield s


def put(
    saver: TurnkeepSaver,
    thread_id: str,
    values: dict[str, Any],
    versions: ChannelVersions,
    new: ChannelVersions,
    parent: RunnableConfig | None = None,
    **metadata: Any,
) -> RunnableConfig:
    config = generate_config(thread_id, None if parent is None else cid(parent))
    checkpoint = generate_checkpoint(values, versions)
    return saver.put(config, checkpoint, generate_metadata(**metadata), new)


def generate_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def generate_checkpoint(
    values: dict[str, Any] | None = None, versions: ChannelVersions | None = None
) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts="2026-01-01T00:00:00+00:00",
        channel_values=values or {},
        channel_versions=versions or {},
        versions_seen={},
        updated_channels=None,
    )


def generate_metadata(**extra: Any) -> CheckpointMetadata:
    metadata: dict[str, Any] = {"source": "loop", "step": 0, "parents": {}, **extra}
    return cast("CheckpointMetadata", metadata)


def tid(config: RunnableConfig) -> str:
    return config.get("configurable", {})["thread_id"]


def cid(config: RunnableConfig) -> str:
    return config.get("configurable", {})["checkpoint_id"]


def stored_events(saver: TurnkeepSaver, thread_id: str) -> list[Any]:
    threads = saver._shared.threads
    log = saver._shared.portal.run(lambda: threads._read(thread_id))
    assert log is not None
    return list(log.events)


# -- deltas --------------------------------------------------------------------


def test_a_channel_whose_version_did_not_change_is_written_once(store: str) -> None:
    big = "x" * 10_000
    with TurnkeepSaver(store=store) as saver:
        first = put(
            saver, "t", {"doc": big, "n": 0}, {"doc": 1, "n": 1}, {"doc": 1, "n": 1}
        )
        parent = first
        for n in range(1, 5):
            parent = put(
                saver,
                "t",
                {"doc": big, "n": n},
                {"doc": 1, "n": n + 1},
                {"n": n + 1},
                parent,
            )

        blobs = [e.data for e in stored_events(saver, "t") if isinstance(e, BlobEvent)]
        assert [b.channel for b in blobs].count("doc") == 1
        assert [b.channel for b in blobs].count("n") == 5
        for tup in saver.list(generate_config("t")):
            step = tup.checkpoint["channel_values"]["n"]
            assert tup.checkpoint["channel_values"] == {"doc": big, "n": step}
        assert saver.get_tuple(first) is not None
        assert saver.get_tuple(first).checkpoint["channel_values"]["n"] == 0  # type: ignore[union-attr]


def test_disk_grows_with_what_changed(tmp_path: Path) -> None:
    """50 checkpoints of a 100 kB unchanged channel store it once."""
    path = tmp_path / "threads.db"
    big = "y" * 100_000
    with TurnkeepSaver(store=f"sqlite:{path}") as saver:
        parent = put(
            saver, "t", {"doc": big, "n": 0}, {"doc": 1, "n": 1}, {"doc": 1, "n": 1}
        )
        for n in range(1, 50):
            parent = put(
                saver,
                "t",
                {"doc": big, "n": n},
                {"doc": 1, "n": n + 1},
                {"n": n + 1},
                parent,
            )
    size = sum(p.stat().st_size for p in tmp_path.iterdir() if p.is_file())
    assert size < 600_000, size  # 50 full copies would be over 6.6 MB (base64)


def _list_blobs(saver: TurnkeepSaver, thread_id: str, channel: str) -> list[Any]:
    return [
        e.data
        for e in stored_events(saver, thread_id)
        if isinstance(e, BlobEvent) and e.data.channel == channel
    ]


def test_a_growing_list_stores_each_item_once(store: str) -> None:
    with TurnkeepSaver(store=store) as saver:
        configs: list[RunnableConfig] = []
        parent = None
        for n in range(1, 21):
            messages = [f"message {i}" for i in range(n)]
            parent = put(saver, "t", {"m": messages}, {"m": n}, {"m": n}, parent)
            configs.append(parent)

        blobs = _list_blobs(saver, "t", "m")
        assert sum(len(b.items) for b in blobs) == 20
        assert blobs[0].base is None
        assert all(b.base is not None for b in blobs[1:])
        for n, config in enumerate(configs, start=1):
            tup = saver.get_tuple(config)
            assert tup is not None
            assert tup.checkpoint["channel_values"]["m"] == [
                f"message {i}" for i in range(n)
            ]


def test_a_list_that_does_not_extend_its_parents_is_stored_whole() -> None:
    with TurnkeepSaver(store="memory") as saver:
        first = put(saver, "t", {"m": ["a", "b"]}, {"m": 1}, {"m": 1})
        second = put(saver, "t", {"m": ["a", "x", "c"]}, {"m": 2}, {"m": 2}, first)
        third = put(saver, "t", {"m": ["a"]}, {"m": 3}, {"m": 3}, second)
        blobs = _list_blobs(saver, "t", "m")
        assert [(len(b.items), b.base) for b in blobs] == [
            (2, None),
            (3, None),
            (1, None),
        ]
        got = [saver.get_tuple(c) for c in (first, second, third)]
        assert [t.checkpoint["channel_values"]["m"] for t in got if t] == [
            ["a", "b"],
            ["a", "x", "c"],
            ["a"],
        ]


def test_branches_from_one_checkpoint_extend_its_list() -> None:
    """Time travel: two runs from the same checkpoint each extend its list."""
    with TurnkeepSaver(store="memory") as saver:
        root = put(saver, "t", {"m": ["a"]}, {"m": "1.1"}, {"m": "1.1"})
        left = put(saver, "t", {"m": ["a", "left"]}, {"m": "2.1"}, {"m": "2.1"}, root)
        right = put(saver, "t", {"m": ["a", "right"]}, {"m": "2.2"}, {"m": "2.2"}, root)
        after = put(
            saver, "t", {"m": ["a", "left", "more"]}, {"m": "3.1"}, {"m": "3.1"}, left
        )
        blobs = _list_blobs(saver, "t", "m")
        assert [len(b.items) for b in blobs] == [1, 1, 1, 1]
        values = {
            cid(c): saver.get_tuple(c).checkpoint["channel_values"]["m"]  # type: ignore[union-attr]
            for c in (root, left, right, after)
        }
        assert list(values.values()) == [
            ["a"],
            ["a", "left"],
            ["a", "right"],
            ["a", "left", "more"],
        ]


def test_prune_keeps_a_grown_list_whole() -> None:
    with TurnkeepSaver(store="memory") as saver:
        parent = None
        for n in range(1, 6):
            parent = put(saver, "t", {"m": list(range(n))}, {"m": n}, {"m": n}, parent)
        saver.prune(["t"])
        blobs = _list_blobs(saver, "t", "m")
        assert [(len(b.items), b.base) for b in blobs] == [(5, None)]
        tup = saver.get_tuple(generate_config("t"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["m"] == [0, 1, 2, 3, 4]


def test_disk_grows_with_new_messages_not_with_history(tmp_path: Path) -> None:
    """100 steps each adding a 2 kB message store each message once."""
    path = tmp_path / "threads.db"
    with TurnkeepSaver(store=f"sqlite:{path}") as saver:
        parent = None
        messages: list[str] = []
        for n in range(1, 101):
            messages = [*messages, f"{n:04d}" + "m" * 2000]
            parent = put(saver, "t", {"m": messages}, {"m": n}, {"m": n}, parent)
    size = sum(p.stat().st_size for p in tmp_path.iterdir() if p.is_file())
    # The whole history at every step would be over 13 MB (base64).
    assert size < 1_000_000, size


def test_a_value_not_new_but_never_stored_is_written() -> None:
    """A checkpoint whose new_versions omit a channel never stored keeps its value."""
    with TurnkeepSaver(store="memory") as saver:
        stored = put(saver, "t", {"a": "v"}, {"a": 3}, {})
        tup = saver.get_tuple(stored)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"a": "v"}


# -- threads and loops ---------------------------------------------------------


def test_sync_methods_work_from_threads_inside_a_loop_and_across_loops(
    saver: TurnkeepSaver,
) -> None:
    put(saver, "plain", {"a": 1}, {"a": 1}, {"a": 1})

    async def inside_a_loop() -> None:
        put(saver, "in-loop", {"a": 2}, {"a": 1}, {"a": 1})
        assert saver.get_tuple(generate_config("in-loop")) is not None

    asyncio.run(inside_a_loop())

    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            parent = None
            for step in range(5):
                parent = put(
                    saver,
                    f"w{n}",
                    {"s": step},
                    {"s": step + 1},
                    {"s": step + 1},
                    parent,
                )
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []

    async def on_a_new_loop(n: int) -> int:
        config = generate_config(f"loop{n}")
        checkpoint = generate_checkpoint({"a": n}, {"a": 1})
        await saver.aput(config, checkpoint, generate_metadata(), {"a": 1})
        return len([t async for t in saver.alist(generate_config(f"loop{n}"))])

    assert [asyncio.run(on_a_new_loop(n)) for n in range(3)] == [1, 1, 1]
    for n in range(4):
        assert len(list(saver.list(generate_config(f"w{n}")))) == 5
    everything = {tid(t.config) for t in saver.list(None)}
    assert everything == {"plain", "in-loop", "loop0", "loop1", "loop2"} | {
        f"w{n}" for n in range(4)
    }


def test_savers_on_one_store_share_one_host(sqlite_store: str) -> None:
    with TurnkeepSaver(store=sqlite_store) as a, TurnkeepSaver(store=sqlite_store) as b:
        assert a._shared is b._shared
        stored = put(a, "t", {"a": 1}, {"a": 1}, {"a": 1})
        assert b.get_tuple(stored) is not None
    # The last saver closed the host: a new saver starts another and sees the data.
    with TurnkeepSaver(store=sqlite_store) as c:
        assert c._shared is not a._shared
        assert c.get_tuple(stored) is not None


@pytest.mark.asyncio
async def test_a_started_host_is_used_on_its_loop() -> None:
    async with Host({"persistence": "memory", "plugins": "none"}) as host:
        saver = TurnkeepSaver(store=host)
        config = generate_config("t")
        checkpoint = generate_checkpoint({"a": 1}, {"a": 1})
        stored = await saver.aput(config, checkpoint, generate_metadata(), {"a": 1})
        assert (await saver.aget_tuple(stored)) is not None
        with pytest.raises(ConfigurationError, match="use the async method"):
            saver.get_tuple(stored)
        from_thread = await asyncio.to_thread(saver.get_tuple, stored)
        assert from_thread is not None
        assert from_thread.checkpoint["channel_values"] == {"a": 1}
        assert host.sessions.get(session_id("t")) is not None
        await saver.aclose()


@pytest.mark.asyncio
async def test_a_put_that_cannot_be_stored_fails_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Host({"persistence": "memory", "plugins": "none"}) as host:
        saver = TurnkeepSaver(store=host)
        config = generate_config("t")
        first = await saver.aput(
            config,
            generate_checkpoint({"a": 1}, {"a": 1}),
            generate_metadata(),
            {"a": 1},
        )
        backend = type(host.require_persistence())
        real_append = backend.append

        async def failing(*args: Any, **kwargs: Any) -> Any:
            raise StorageError("disk full")

        monkeypatch.setattr(backend, "append", failing)
        lost = generate_checkpoint({"a": 2}, {"a": 2})
        with pytest.raises(FlushError):
            await saver.aput(
                generate_config("t", cid(first)), lost, generate_metadata(), {"a": 2}
            )
        monkeypatch.setattr(backend, "append", real_append)

        # The thread is read afresh from storage: the failed put is not there.
        latest = await saver.aget_tuple(generate_config("t"))
        assert latest is not None
        assert cid(latest.config) == cid(first)
        again = await saver.aput(
            generate_config("t", cid(first)), lost, generate_metadata(), {"a": 2}
        )
        got = await saver.aget_tuple(again)
        assert got is not None
        assert got.checkpoint["channel_values"] == {"a": 2}
        await saver.aclose()


def test_a_host_needs_its_running_loop() -> None:
    host = Host({"persistence": "memory", "plugins": "none"})
    with pytest.raises(ConfigurationError, match="must be created on the loop"):
        TurnkeepSaver(store=host)


# -- thread ids ----------------------------------------------------------------


@pytest.mark.parametrize("thread_id", ["#hash-like", "t" * 300, "a/b\\c:d e", "ünï"])
def test_any_thread_id_round_trips(saver: TurnkeepSaver, thread_id: str) -> None:
    stored = put(saver, thread_id, {"a": 1}, {"a": 1}, {"a": 1})
    assert tid(stored) == thread_id
    tup = saver.get_tuple(generate_config(thread_id))
    assert tup is not None
    assert tid(tup.config) == thread_id
    listed = [tid(t.config) for t in saver.list(None)]
    assert listed == [thread_id]


def test_a_hashed_thread_id_does_not_collide_with_a_plain_one(
    saver: TurnkeepSaver,
) -> None:
    assert session_id("#x") != session_id("x")
    assert session_id("#x").startswith("lg-#")
    put(saver, "#x", {"a": "hashed"}, {"a": 1}, {"a": 1})
    put(saver, "x", {"a": "plain"}, {"a": 1}, {"a": 1})
    got = {tid(t.config): t.checkpoint["channel_values"]["a"] for t in saver.list(None)}
    assert got == {"#x": "hashed", "x": "plain"}


# -- erasure -------------------------------------------------------------------


def _stored_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _marker_on_disk(value: str) -> bytes:
    """How a value's serde bytes appear in the store (base64 in the event JSON)."""
    return base64.b64encode(JsonPlusSerializer().dumps_typed(value)[1])


# -- special writes (errors, interrupts) ---------------------------------------

ERROR = "__error__"
INTERRUPT = "__interrupt__"
"""Special channels (LangGraph keeps its own names private since 1.0)."""


def test_a_special_write_keeps_the_regular_writes_of_its_task(store: str) -> None:
    assert {ERROR, INTERRUPT} <= set(WRITES_IDX_MAP)
    with TurnkeepSaver(store=store) as saver:
        config = put(saver, "t", {}, {}, {})
        saver.put_writes(config, [("a", "one"), ("b", "two")], "task")
        # The task fails after its writes: the error is one more write at
        # its own (negative) index, not a replacement of write 0.
        saver.put_writes(config, [(ERROR, "boom")], "task")
        saver.put_writes(config, [("a", "from another task")], "other")
        found = saver.get_tuple(config)
        assert found is not None
        assert sorted(found.pending_writes or []) == [
            ("other", "a", "from another task"),
            ("task", ERROR, "boom"),
            ("task", "a", "one"),
            ("task", "b", "two"),
        ]


def test_a_repeated_special_write_replaces_and_a_regular_one_does_not(
    store: str,
) -> None:
    with TurnkeepSaver(store=store) as saver:
        config = put(saver, "t", {}, {}, {})
        saver.put_writes(config, [(INTERRUPT, "first question")], "task")
        saver.put_writes(config, [(INTERRUPT, "second question")], "task")
        # A retried task's regular write is already stored: kept as it was.
        saver.put_writes(config, [("a", "kept")], "task")
        saver.put_writes(config, [("a", "retried")], "task")
        found = saver.get_tuple(config)
        assert found is not None
        assert sorted(found.pending_writes or []) == [
            ("task", INTERRUPT, "second question"),
            ("task", "a", "kept"),
        ]


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("how", ["prune", "delete_for_runs"])
def test_dropped_checkpoints_are_erased_from_the_stores_bytes(
    tmp_path: Path, backend: str, how: str
) -> None:
    secret = "dropped-value-" + "q" * 64
    for spec in spec_for(backend, tmp_path):
        with TurnkeepSaver(store=spec) as saver:
            first = put(saver, "t", {"a": secret}, {"a": 1}, {"a": 1}, run_id="r1")
            saver.put_writes(first, [("a", secret + "-write")], "task")
            latest = put(
                saver, "t", {"a": "kept"}, {"a": 2}, {"a": 2}, first, run_id="r2"
            )
            saver.put_writes(latest, [("b", "pending")], "task")
            assert _marker_on_disk(secret) in _stored_bytes(tmp_path)

            if how == "prune":
                saver.prune(["t"])
            else:
                saver.delete_for_runs(["r1"])

            listed = list(saver.list(generate_config("t")))
            assert [t.checkpoint["id"] for t in listed] == [cid(latest)]
            assert listed[0].checkpoint["channel_values"] == {"a": "kept"}
            assert listed[0].pending_writes == [("task", "b", "pending")]
            assert saver.get_tuple(first) is None
            kinds = [type(e) for e in stored_events(saver, "t")]
            assert kinds.count(CheckpointEvent) == 1
        on_disk = _stored_bytes(tmp_path)
        assert _marker_on_disk(secret) not in on_disk
        assert _marker_on_disk(secret + "-write") not in on_disk
        assert _marker_on_disk("kept") in on_disk


def test_delete_thread_erases_it(tmp_path: Path) -> None:
    secret = "erased-thread-" + "z" * 64
    spec = f"sqlite:{tmp_path / 'threads.db'}"
    with TurnkeepSaver(store=spec) as saver:
        put(saver, "t", {"a": secret}, {"a": 1}, {"a": 1})
        put(saver, "other", {"a": "stays"}, {"a": 1}, {"a": 1})
        saver.delete_thread("t")
        assert saver.get_tuple(generate_config("t")) is None
        assert saver.get_tuple(generate_config("other")) is not None
    assert _marker_on_disk(secret) not in _stored_bytes(tmp_path)


def test_a_rewrite_cut_short_is_finished_on_next_use(sqlite_store: str) -> None:
    """A crash after the kept copy was stored and the old log deleted loses nothing."""
    with TurnkeepSaver(store=sqlite_store) as saver:
        first = put(saver, "t", {"a": "old"}, {"a": 1}, {"a": 1})
        latest = put(saver, "t", {"a": "new"}, {"a": 2}, {"a": 2}, first)
        threads, portal = saver._shared.threads, saver._shared.portal

        async def crash_midway() -> None:
            from turnkeep_langgraph.copies import generation
            from turnkeep_langgraph.threads import _temp_id

            log = await threads._read("t")
            assert log is not None
            fresh = generation(log, {("", cid(latest))})
            await threads._store(_temp_id("t"), fresh)
            await threads._erase(session_id("t"))

        portal.run(crash_midway)
        # Read while only the copy exists: the kept checkpoint is there.
        tup = saver.get_tuple(generate_config("t"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"a": "new"}
        assert [tid(t.config) for t in saver.list(None)] == ["t"]
        # The next write restores the thread under its own id.
        put(saver, "t", {"a": "newer"}, {"a": 3}, {"a": 3}, latest)
        backend = saver._shared.host.require_persistence()
        from turnkeep_langgraph.threads import _temp_id

        assert portal.run(lambda: backend.has(session_id("t")))
        assert not portal.run(lambda: backend.has(_temp_id("t")))
        assert len(list(saver.list(generate_config("t")))) == 2


# -- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("spec", ["sqlite:", "Not A Spec"])
def test_a_malformed_store_spec_is_refused(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="store spec"):
        TurnkeepSaver(store=spec)


def test_a_store_whose_backend_is_not_installed_is_refused() -> None:
    with pytest.raises(PluginNotFoundError, match="nosuchbackend"):
        TurnkeepSaver(store="nosuchbackend:/tmp/x")


def test_a_config_without_a_thread_is_refused(saver: TurnkeepSaver) -> None:
    with pytest.raises(ConfigurationError, match="names no thread"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ConfigurationError, match="names no thread"):
        saver.put({}, generate_checkpoint(), generate_metadata(), {})


def test_writes_without_a_checkpoint_are_refused(saver: TurnkeepSaver) -> None:
    with pytest.raises(ConfigurationError, match="checkpoint_id"):
        saver.put_writes(generate_config("t"), [("a", 1)], "task")


def test_an_unknown_prune_strategy_is_refused(saver: TurnkeepSaver) -> None:
    put(saver, "t", {"a": 1}, {"a": 1}, {"a": 1})
    with pytest.raises(ConfigurationError, match="prune strategy 'everything'"):
        saver.prune(["t"], strategy="everything")
    assert len(list(saver.list(generate_config("t")))) == 1


def test_a_session_that_is_not_a_thread_is_refused(sqlite_store: str) -> None:
    spec = parse_spec(sqlite_store)

    async def foreign() -> None:
        async with Host(
            {**spec.overrides(), "plugins": "none"} | {"plugins": [spec.backend]}
        ) as host:
            session = host.sessions.create(session_id("foreign"))
            from turnkeep.events import UserMessageData

            session.append(UserMessageData(text="hello"))
            await session.flush()

    asyncio.run(foreign())
    with TurnkeepSaver(store=sqlite_store) as saver:
        with pytest.raises(SessionExistsError, match="not a LangGraph thread"):
            saver.get_tuple(generate_config("foreign"))
        with pytest.raises(SessionExistsError, match="not a LangGraph thread"):
            put(saver, "foreign", {"a": 1}, {"a": 1}, {"a": 1})
        # The refused write left the session as it was, and the saver usable;
        # listing every thread passes over the foreign session.
        put(saver, "fine", {"a": 1}, {"a": 1}, {"a": 1})
        assert [tid(t.config) for t in saver.list(None)] == ["fine"]


EXITING = """
import sys
from turnkeep_langgraph import TurnkeepSaver, events
from langgraph.checkpoint.base import empty_checkpoint

saver = TurnkeepSaver(store=sys.argv[1])  # never closed: exit closes the host
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
checkpoint = empty_checkpoint()
checkpoint["channel_values"] = {"a": "from the child"}
checkpoint["channel_versions"] = {"a": 1}
saver.put(config, checkpoint, {"source": "input", "step": -1}, {"a": 1})
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    ["memory", "jsonl", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def test_exit_releases_the_threads_a_process_wrote(
    backend: str, tmp_path: Path
) -> None:
    """A process that ends without closing its saver lets the next one write.

    PostgreSQL would otherwise refuse the thread until the writer's lease
    (30 s) ran out. The close at exit is quiet on every backend: twice (the
    second process finds the thread stored), nothing on stderr (on SQLite
    it printed a 45-line traceback: the executor and the backend's
    finalizer were gone before the host closed).
    """
    for spec in spec_for(backend, tmp_path):
        root = Path(__file__).resolve().parents[3]
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", EXITING, spec],
                env={**os.environ, "PYTHONPATH": str(root)},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert done.stderr == ""
        if backend == "memory":
            return  # nothing outlives the process
        with TurnkeepSaver(store=spec) as saver:
            parent = saver.get_tuple(generate_config("t"))
            assert parent is not None
            assert parent.checkpoint["channel_values"] == {"a": "from the child"}
            put(saver, "t", {"a": "from the parent"}, {"a": 2}, {"a": 2}, parent.config)
            # Two from the children, one from here.
            assert len(list(saver.list(generate_config("t")))) == 3


def test_a_thread_another_writer_holds_is_not_pruned_or_deleted(
    sqlite_store: str,
) -> None:
    spec = parse_spec(sqlite_store)
    with TurnkeepSaver(store=sqlite_store) as saver:
        first = put(saver, "t", {"a": 1}, {"a": 1}, {"a": 1})
        put(saver, "t", {"a": 2}, {"a": 2}, {"a": 2}, first)
        threads, portal = saver._shared.threads, saver._shared.portal
        portal.run(threads.aclose)  # let the thread go

        async def hold_elsewhere_and_try() -> None:
            async with Host(spec.overrides(), plugins=[events]) as other:
                await other.sessions.open(session_id("t"))
                with pytest.raises(SessionLockedError):
                    await saver.aprune(["t"])
                # A write names the thread and what to do, not `steal=True`,
                # which the saver does not offer.
                with pytest.raises(SessionLockedError) as raised:
                    await saver.aput(generate_config("t"), empty_checkpoint(), {}, {})
                assert "thread 't' is being written by another live process" in str(
                    raised.value
                )
                assert "steal" not in str(raised.value)
                with pytest.raises(SessionHeldError):
                    await saver.adelete_thread("t")

        asyncio.run(hold_elsewhere_and_try())
        # Nothing was dropped, and no copy was left beside the thread.
        assert len(list(saver.list(generate_config("t")))) == 2
        backend = saver._shared.host.require_persistence()
        from turnkeep_langgraph.threads import _temp_id

        assert not portal.run(lambda: backend.has(_temp_id("t")))
        saver.prune(["t"])
        assert len(list(saver.list(generate_config("t")))) == 1


def test_threads_past_the_limit_are_let_go_least_recently_used_first(
    sqlite_store: str,
) -> None:
    with TurnkeepSaver(store=sqlite_store) as saver:
        threads = saver._shared.threads
        threads.max_held = 2
        configs = {
            n: put(saver, f"t{n}", {"a": n}, {"a": 1}, {"a": 1}) for n in range(5)
        }
        assert list(threads._held) == [session_id("t3"), session_id("t4")]
        host = saver._shared.host
        assert {s.id for s in host.sessions.list()} == set(threads._held)
        # A thread let go is read from storage, and taken again to write.
        for n, config in configs.items():
            got = saver.get_tuple(config)
            assert got is not None
            assert got.checkpoint["channel_values"] == {"a": n}
            put(saver, f"t{n}", {"a": n + 10}, {"a": 2}, {"a": 2}, config)
        assert len(threads._held) == 2
        assert len(list(saver.list(None))) == 10


@pytest.mark.timeout(60)
def test_a_saver_on_a_finished_loops_host_closes_without_waiting() -> None:
    """Closing after the host's loop ended neither hangs nor fails."""

    async def use() -> TurnkeepSaver:
        async with Host({"persistence": "memory", "plugins": "none"}) as host:
            saver = TurnkeepSaver(store=host)
            await saver.aput(
                generate_config("t"),
                generate_checkpoint({"a": 1}, {"a": 1}),
                generate_metadata(),
                {"a": 1},
            )
            return saver

    saver = asyncio.run(use())
    errors: list[BaseException] = []

    def close() -> None:
        try:
            saver.close()
            saver.close()  # a second close does nothing
        except BaseException as exc:
            errors.append(exc)

    closer = threading.Thread(target=close)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive()
    assert errors == []


def test_the_command_reads_a_thread_with_only_store_given(tmp_path: Path) -> None:
    from tests.cli.support import cli

    spec = f"sqlite:{tmp_path / 'graph.db'}"
    with TurnkeepSaver(store=spec) as saver:
        put(saver, "t1", {"a": "hello"}, {"a": 1}, {"a": 1})
    for command in ("show", "verify"):
        result = cli("--store", spec, command, "lg-t1")
        assert result.exit_code == 0, result.stderr
        assert "unknown event type" not in result.stdout + result.stderr
    assert "langgraph/checkpoint" in cli("--store", spec, "show", "lg-t1").stdout
