"""Helpers of the agent-loop tests: spy tools, backends, fault wrappers.

- `SpyTool`: a tool that records every invocation (the "spy" that proves the
  loop never re-runs an unsafe call), optionally blocking until released.
- `backend_host_config(name, root)`: a `Config` selecting one real backend
  (`jsonl`, `sqlite`, `postgres`) or `memory`, by configuration only;
  `backend_ready` fails a test whose backend cannot store and load an event
  (it skips only a third-party backend that is not installed, and PostgreSQL
  where no server is installed at all).
- `SharedMemory`: a plugin whose `shared` backend keeps sessions in one
  `MemoryStorage`, so several hosts act like several processes.
- `Gated`: a `SessionPersistence` wrapper that delays or fails appends, and
  a plugin registering it over any backend (R7/item 34 fault injection).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs
import pytest
from tests.support import pgserver
from tests.support.delegating import Delegating

from turnkeep import Config, Host, SessionEvent, ToolContext, hookimpl
from turnkeep.config import structure_config
from turnkeep.errors import PluginNotFoundError, StorageError, UnknownBackendError
from turnkeep.events import ReplayPolicy, UserMessageData
from turnkeep.persistence import (
    EventRecord,
    SessionPersistence,
)
from turnkeep.testing import MemoryPersistence, MemoryStorage

BACKENDS = ("jsonl", "sqlite")
"""The durable backends every loop guarantee is tested against."""


# -- tools ---------------------------------------------------------------------


@attrs.define(eq=False)
class SpyTool:
    """A tool that records each call; `block` makes calls wait for `release`."""

    name: str
    replay: ReplayPolicy = "unsafe"
    description: str = "a test tool"
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    output: str = "ok"
    fail: BaseException | None = None
    block: bool = False
    calls: list[ToolContext] = attrs.field(factory=list[ToolContext])
    arguments: list[Mapping[str, Any]] = attrs.field(factory=list[Mapping[str, Any]])
    started: asyncio.Event = attrs.field(factory=asyncio.Event)
    release: asyncio.Event = attrs.field(factory=asyncio.Event)
    cancelled: int = 0
    on_call: Callable[[ToolContext], None] | None = None

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.calls.append(context)
        self.arguments.append(arguments)
        if self.on_call is not None:
            self.on_call(context)
        self.started.set()
        if self.block:
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.fail is not None:
            raise self.fail
        return f"{self.output} ({context.call_id})"

    @property
    def call_ids(self) -> list[str]:
        return [c.call_id for c in self.calls]


# -- backends ------------------------------------------------------------------


def backend_options(name: str, root: Path) -> dict[str, Any]:
    """The options table that puts backend `name`'s store under `root`.

    PostgreSQL's store is a schema on the test server named after this
    process and `root` (the caller drops it when done).
    """
    if name == "sqlite":
        return {"path": str(root / "store" / "sessions.sqlite3")}
    if name == "jsonl":
        return {"path": str(root / "store")}
    if name == "postgres":
        tag = zlib.crc32(str(root).encode())
        return {"dsn": pgserver.DSN, "schema": f"tk_loop_{os.getpid()}_{tag}"}
    return {}


def backend_host_config(name: str, root: Path, **overrides: Any) -> Config:
    """A configuration selecting backend `name` (its entry point only)."""
    if name == "memory":
        values: dict[str, Any] = {"persistence": "memory", "plugins": "none"}
    else:
        values = {
            "persistence": name,
            "plugins": (name,),
            "backends": {name: backend_options(name, root)},
        }
    values.update(overrides)
    return Config(**values)


def backend_toml(name: str, root: Path) -> str:
    """A `turnkeep.toml` selecting backend `name` (for example subprocesses)."""
    options = "\n".join(f'{k} = "{v}"' for k, v in backend_options(name, root).items())
    return f'persistence = "{name}"\n\n[backends.{name}]\n{options}\n'


SHIPPED = frozenset({"memory", "jsonl", "sqlite", "postgres"})
"""The backends this repository ships: a failed probe fails the test, never skips."""


@attrs.frozen
class Unready:
    """Why a backend cannot run a test; `skip` only where it is not installed."""

    skip: bool
    reason: str

    def act(self) -> NoReturn:
        """Skip or fail the calling test with the reason."""
        if self.skip:
            pytest.skip(self.reason)
        pytest.fail(self.reason, pytrace=False)


_READY: dict[str, Unready | None] = {}


def _not_installed(name: str, exc: Exception) -> Unready:
    if name in SHIPPED:
        return Unready(
            skip=False,
            reason=f"the {name} backend ships in this repository but is not "
            f"installed in this environment (run `make install`): {exc}",
        )
    return Unready(
        skip=True, reason=f"the third-party {name} backend is not installed: {exc}"
    )


async def _probe(name: str, root: Path) -> Unready | None:
    """Store one event through backend `name` and load it back; what failed."""
    if name == "postgres" and not pgserver.server_up():
        return Unready(skip=not pgserver.required(), reason=pgserver.START_HINT)
    try:
        async with Host(backend_host_config(name, root)) as host:
            session = host.sessions.create("probe")
            session.append(UserMessageData(text="probe"))
            await session.flush()
            await host.sessions.close("probe")
            resumed = await host.sessions.resume("probe")
            if len(resumed.events) != 1:
                return Unready(False, f"{name}: a stored event did not load back")
            await host.sessions.close("probe")
    except (UnknownBackendError, PluginNotFoundError) as exc:
        return _not_installed(name, exc)
    except Exception as exc:
        return Unready(
            skip=False,
            reason=f"the {name} backend failed to store and load one event: "
            f"{type(exc).__name__}: {exc}",
        )
    finally:
        if name == "postgres":
            pgserver.drop_schema(backend_options(name, root)["schema"])
    return None


def backend_ready(name: str, tmp_path: Path) -> None:
    """Fail the calling test unless backend `name` stores and loads an event.

    Only a third-party backend that is not installed skips (as does
    PostgreSQL where no server is installed at all); an error of a backend
    this repository ships fails every test that needs it. The verdict is
    probed once per process.
    """
    if name not in _READY:
        _READY[name] = asyncio.run(_probe(name, tmp_path / f"probe-{name}"))
    unready = _READY[name]
    if unready is not None:
        unready.act()


async def backend_ready_async(name: str, tmp_path: Path) -> None:
    """`backend_ready` for async tests (no nested event loop)."""
    if name not in _READY:
        _READY[name] = await _probe(name, tmp_path / f"probe-{name}")
    unready = _READY[name]
    if unready is not None:
        unready.act()


def inner_factory(name: str, root: Path) -> Callable[[], SessionPersistence]:
    """Build backend `name` the way the host would, through its own hook."""
    if name == "memory":
        return MemoryPersistence
    module = importlib.import_module(f"turnkeep_{name}")
    found: dict[str, tuple[Callable[[Any], Any], type[Any] | None]] = {}

    def register(
        key: str, factory: Callable[[Any], Any], config_type: type[Any] | None = None
    ) -> None:
        found[key] = (factory, config_type)

    module.register_persistence(register=register)
    factory, config_type = found[name]
    options = backend_options(name, root)
    config = (
        structure_config(options, config_type, source="test")
        if config_type is not None
        else None
    )
    return lambda: factory(config)


@attrs.define(eq=False)
class SharedMemory:
    """A plugin: backend `shared` over one `MemoryStorage` for every host."""

    storage: MemoryStorage = attrs.Factory(MemoryStorage)

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register("shared", lambda _config: MemoryPersistence(self.storage))  # pyright: ignore[reportUnknownLambdaType]


def shared_host(plugin: SharedMemory, *, redact_secrets: bool = True) -> Host:
    config = Config(persistence="shared", plugins="none", redact_secrets=redact_secrets)
    return Host(config, plugins=[plugin])


FailRule = Callable[[str, Sequence[EventRecord]], bool]


@attrs.define(eq=False)
class Gated(Delegating):
    """Wraps a backend: appends may be delayed (after they land) or refused.

    Attributes:
        inner: the wrapped backend.
        delay: seconds to wait after each append landed, before it returns
            (a slow fsync: the ACK comes late).
        fail: appends for which this returns true raise `StorageError`
            without reaching `inner`.
        appends: `(session_id, first seq, count, ok)` of every append.
        hold: when set, each append waits for this event before landing.
        entered: set when an append starts (to wait for a flush in flight).
    """

    delay: float = 0.0
    fail: FailRule = lambda _sid, _events: False  # pyright: ignore[reportUnknownLambdaType]
    appends: list[tuple[str, int, int, bool]] = attrs.field(
        factory=list[tuple[str, int, int, bool]]
    )
    hold: asyncio.Event | None = None
    entered: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def append(self, session_id: str, events: Sequence[EventRecord]) -> None:
        first = events[0].seq if events else -1
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.fail(session_id, events):
            self.appends.append((session_id, first, len(events), False))
            raise StorageError(f"injected failure appending to {session_id!r}")
        await self.inner.append(session_id, events)
        if self.delay:
            await asyncio.sleep(self.delay)  # the injected slow fsync
        self.appends.append((session_id, first, len(events), True))


@attrs.define(eq=False)
class GatedPlugin:
    """A plugin registering backend `gated`: a `Gated` over a real backend."""

    build: Callable[[], SessionPersistence]
    gate: Gated | None = None
    delay: float = 0.0
    fail: FailRule = lambda _sid, _events: False  # pyright: ignore[reportUnknownLambdaType]

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        def make(_config: object) -> Gated:
            self.gate = Gated(self.build(), delay=self.delay, fail=self.fail)
            return self.gate

        register("gated", make)


def gated_host(plugin: GatedPlugin) -> Host:
    return Host(Config(persistence="gated", plugins="none"), plugins=[plugin])


async def stored_events(host: Host, session_id: str) -> list[SessionEvent]:
    """The events the host's backend holds for a session (a cold read)."""
    loaded = await host.require_persistence().load(session_id)
    return host.codec.decode_log(loaded.events, session_id=session_id)


def seeded_rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded generator; the seed is printed so a failure reproduces."""
    seed = int(os.environ.get("TURNKEEP_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] seed={seed} (TURNKEEP_SEED={seed} to reproduce)")
    return random.Random(seed)
