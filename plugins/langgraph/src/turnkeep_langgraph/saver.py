"""`TurnkeepSaver`: LangGraph's `BaseCheckpointSaver` on a turnkeep store.

Translates LangGraph's calls (configs, checkpoints, metadata, writes) to
`turnkeep_langgraph.threads` and back, serializing with the saver's serde
on the caller's thread, so the shared host's loop only appends and reads.
Every method has its sync and async form; both work from any thread and
inside or outside a running loop (`turnkeep_langgraph.runner`).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from turnkeep.errors import ConfigurationError
from turnkeep.host import Host

from .events import CheckpointData, Item, WriteData, WritesData
from .runner import Shared, acquire, arelease, release
from .threads import RawTuple, Value

__all__ = ["TurnkeepSaver"]


class TurnkeepSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads are durable turnkeep sessions.

    Args:
        store: where threads live: a store spec (`"sqlite:./graph.db"`,
            `"jsonl:./threads"`, `"postgres:postgresql://host/db"`,
            `"memory"`), a started `turnkeep.Host` (the saver must then be
            created on the loop it runs on), or `None` for turnkeep's
            configuration (`turnkeep.toml`, `TURNKEEP_*` variables).
        serde: LangGraph's serializer (default: `JsonPlusSerializer`).

    Every saver on one store in a process shares one host (started on
    first use, closed at exit or when the last saver is closed).

    Raises:
        ConfigurationError: the spec is malformed or its backend cannot
            start.
        PersistenceNotConfiguredError: the store has no backend.
    """

    def __init__(
        self,
        store: str | Host | None = None,
        *,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._shared: Shared = acquire(store)
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Stop using the store (its host closes when no saver uses it)."""
        if not self._closed:
            self._closed = True
            release(self._shared)

    async def aclose(self) -> None:
        """`close` from a coroutine."""
        if not self._closed:
            self._closed = True
            await arelease(self._shared)

    def __enter__(self) -> TurnkeepSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> TurnkeepSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- reading -------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (the newest of its thread if none)."""
        thread_id, ns = _thread(config), _ns(config)
        cid = get_checkpoint_id(config)
        threads = self._shared.threads
        raw = self._shared.portal.run(lambda: threads.get(thread_id, ns, cid))
        return None if raw is None else self._tuple(raw)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async `get_tuple`."""
        thread_id, ns = _thread(config), _ns(config)
        cid = get_checkpoint_id(config)
        threads = self._shared.threads
        raw = await self._shared.portal.arun(lambda: threads.get(thread_id, ns, cid))
        return None if raw is None else self._tuple(raw)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first.

        Of `config`'s thread (and namespace, if it names one), or of every
        thread for `None`; `filter` matches metadata keys, `before` bounds
        by checkpoint id, `limit` caps the count.
        """
        raws = self._shared.portal.run(lambda: self._collect(config))
        yield from self._select(raws, config, filter, before, limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async `list`."""
        raws = await self._shared.portal.arun(lambda: self._collect(config))
        for item in self._select(raws, config, filter, before, limit):
            yield item

    async def _collect(self, config: RunnableConfig | None) -> list[RawTuple]:
        threads = self._shared.threads
        if config is None:
            found: list[RawTuple] = []
            for thread_id in await threads.thread_ids():
                found.extend(await threads.checkpoints(thread_id, None))
            found.sort(key=lambda r: r.checkpoint.id, reverse=True)
            return found
        ns = cast("str | None", (config.get("configurable") or {}).get("checkpoint_ns"))
        return await threads.checkpoints(_thread(config), ns)

    def _select(
        self,
        raws: Sequence[RawTuple],
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        only = get_checkpoint_id(config) if config is not None else None
        bound = get_checkpoint_id(before) if before is not None else None
        count = 0
        for raw in raws:
            if limit is not None and count >= limit:
                return
            data = raw.checkpoint
            if (only is not None and data.id != only) or (
                bound is not None and data.id >= bound
            ):
                continue
            metadata = self._metadata(data)
            if filter and any(metadata.get(k) != v for k, v in filter.items()):
                continue
            count += 1
            yield self._tuple(raw, metadata)

    # -- writing -------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; only channels at new versions are written."""
        thread_id, data, fresh = self._prepare(
            config, checkpoint, metadata, new_versions
        )
        self._shared.portal.run(
            lambda: self._put(thread_id, data, checkpoint, new_versions, fresh)
        )
        return _config(thread_id, data.ns, data.id)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async `put`."""
        thread_id, data, fresh = self._prepare(
            config, checkpoint, metadata, new_versions
        )
        await self._shared.portal.arun(
            lambda: self._put(thread_id, data, checkpoint, new_versions, fresh)
        )
        return _config(thread_id, data.ns, data.id)

    def _prepare(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[str, CheckpointData, dict[str, Value]]:
        thread_id, ns = _thread(config), _ns(config)
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint["channel_values"]
        fresh = {
            channel: self._dump(values[channel])
            for channel in new_versions
            if channel in values
        }
        kind, body = self.serde.dumps_typed(rest)
        meta_kind, meta = self.serde.dumps_typed(
            get_checkpoint_metadata(config, metadata)
        )
        data = CheckpointData(
            ns=ns,
            id=checkpoint["id"],
            parent_id=get_checkpoint_id(config),
            type=kind,
            checkpoint=body,
            metadata_type=meta_kind,
            metadata=meta,
            refs={},
        )
        return thread_id, data, fresh

    async def _put(
        self,
        thread_id: str,
        data: CheckpointData,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        fresh: dict[str, Value],
    ) -> None:
        values = checkpoint["channel_values"]

        def serialize(channel: str) -> Value | None:
            if channel in fresh:
                return fresh[channel]
            if channel in values:  # not new, yet never stored in this thread
                return self._dump(values[channel])
            return None

        await self._shared.threads.put(
            thread_id,
            data,
            dict(checkpoint["channel_versions"]),
            set(new_versions),
            serialize,
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against the checkpoint `config` names."""
        thread_id, data = self._writes(config, writes, task_id, task_path)
        threads = self._shared.threads
        self._shared.portal.run(lambda: threads.put_writes(thread_id, data))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async `put_writes`."""
        thread_id, data = self._writes(config, writes, task_id, task_path)
        threads = self._shared.threads
        await self._shared.portal.arun(lambda: threads.put_writes(thread_id, data))

    def _writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, WritesData]:
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise ConfigurationError(
                "put_writes needs the checkpoint the writes belong to: "
                "config['configurable']['checkpoint_id'] is missing"
            )
        entries: list[WriteData] = []
        for idx, (channel, value) in enumerate(writes):
            kind, body = self.serde.dumps_typed(value)
            index = WRITES_IDX_MAP.get(channel, idx)
            entries.append(WriteData(idx=index, channel=channel, type=kind, value=body))
        data = WritesData(
            ns=_ns(config),
            checkpoint_id=checkpoint_id,
            task_id=task_id,
            task_path=task_path,
            writes=entries,
        )
        return _thread(config), data

    # -- deleting, copying, pruning -------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Erase a thread (turnkeep's delete: nothing of it stays readable)."""
        threads = self._shared.threads
        self._shared.portal.run(lambda: threads.delete(str(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async `delete_thread`."""
        threads = self._shared.threads
        await self._shared.portal.arun(lambda: threads.delete(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints (and their writes) of these runs, in every thread."""
        self._shared.portal.run(lambda: self._delete_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async `delete_for_runs`."""
        await self._shared.portal.arun(lambda: self._delete_runs(run_ids))

    async def _delete_runs(self, run_ids: Iterable[str]) -> None:
        drop = set(run_ids)
        if not drop:
            return
        threads = self._shared.threads

        def keep(data: CheckpointData) -> bool:
            return self._metadata(data).get("run_id") not in drop

        for thread_id in await threads.thread_ids():
            await threads.rewrite(thread_id, keep)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread into another."""
        threads = self._shared.threads
        src, dst = str(source_thread_id), str(target_thread_id)
        self._shared.portal.run(lambda: threads.copy(src, dst))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async `copy_thread`."""
        threads = self._shared.threads
        src, dst = str(source_thread_id), str(target_thread_id)
        await self._shared.portal.arun(lambda: threads.copy(src, dst))

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """Keep the newest checkpoint per namespace, or erase the threads.

        `keep_latest` writes each thread anew with its newest checkpoint per
        namespace (and that one's writes) and erases the old log; `delete`
        erases the threads.

        Raises:
            ConfigurationError: an unknown strategy.
        """
        _check_strategy(strategy)
        self._shared.portal.run(lambda: self._prune(thread_ids, strategy))

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """Async `prune`."""
        _check_strategy(strategy)
        await self._shared.portal.arun(lambda: self._prune(thread_ids, strategy))

    async def _prune(self, thread_ids: Iterable[str], strategy: str) -> None:
        threads = self._shared.threads
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                await threads.delete(thread_id)
                continue
            newest = {
                raw.checkpoint.ns: raw.checkpoint.id
                for raw in reversed(await threads.checkpoints(thread_id, None))
            }
            await threads.rewrite(thread_id, lambda c, n=newest: n.get(c.ns) == c.id)

    # -- versions and tuples ---------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version above `current`, with a random part.

        As LangGraph's own savers make them: a branch from an old checkpoint
        never reuses a version another branch stored with another value.
        """
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"  # noqa: S311 - not secret

    def _dump(self, value: Any) -> Value:
        # A list is stored item by item, so one that grows is stored as
        # its new items (see turnkeep_langgraph.events).
        if type(value) is list:
            items = cast("list[Any]", value)
            return [Item(*self.serde.dumps_typed(item)) for item in items]
        return Item(*self.serde.dumps_typed(value))

    def _load(self, value: Value) -> Any:
        if isinstance(value, Item):
            return self.serde.loads_typed((value.type, value.value))
        return [self.serde.loads_typed((i.type, i.value)) for i in value]

    def _metadata(self, data: CheckpointData) -> dict[str, Any]:
        loaded = self.serde.loads_typed((data.metadata_type, data.metadata))
        return cast("dict[str, Any]", loaded)

    def _tuple(
        self, raw: RawTuple, metadata: dict[str, Any] | None = None
    ) -> CheckpointTuple:
        data = raw.checkpoint
        checkpoint = cast(
            "Checkpoint", self.serde.loads_typed((data.type, data.checkpoint))
        )
        checkpoint["channel_values"] = {
            channel: self._load(value) for channel, value in raw.values.items()
        }
        parent = (
            _config(raw.thread_id, data.ns, data.parent_id)
            if data.parent_id is not None
            else None
        )
        return CheckpointTuple(
            config=_config(raw.thread_id, data.ns, data.id),
            checkpoint=checkpoint,
            metadata=cast(
                "CheckpointMetadata",
                metadata if metadata is not None else self._metadata(data),
            ),
            parent_config=parent,
            pending_writes=[
                (task_id, channel, self.serde.loads_typed((kind, body)))
                for task_id, channel, kind, body in raw.pending
            ],
        )


def _thread(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigurationError(
            "the config names no thread: pass "
            "{'configurable': {'thread_id': ...}} to the graph"
        )
    return str(thread_id)


def _ns(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("checkpoint_ns") or "")


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _check_strategy(strategy: str) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise ConfigurationError(
            f"prune strategy {strategy!r} is not one of 'keep_latest', 'delete'"
        )
