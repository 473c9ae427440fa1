from __future__ import annotations

from typing import Any

import attrs
import pytest
from tests.conftest import make_config

from turnkeep import Host, hookimpl
from turnkeep.errors import (
    ConfigurationError,
    FlushError,
    HookContractError,
    PersistenceConflictError,
    PersistenceNotConfiguredError,
    PluginNotFoundError,
    UnknownBackendError,
)
from turnkeep.events import UserMessageData, define_event_type
from turnkeep.persistence import validate_backend
from turnkeep.session import Session
from turnkeep.testing import MemoryPersistence


class Registers:
    def __init__(self, name: str, factory: Any = None, config_type: Any = None) -> None:
        self.name = name
        self.factory = factory or (lambda _config: MemoryPersistence())
        self.config_type = config_type

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register(self.name, self.factory, self.config_type)


@pytest.mark.asyncio
async def test_the_configured_backend_is_active() -> None:
    async with Host(
        make_config(persistence="mine"), plugins=[Registers("mine")]
    ) as host:
        assert host.persistence_name == "mine"
        assert isinstance(host.require_persistence(), MemoryPersistence)
        assert set(host.backends) == {"memory", "mine"}


@pytest.mark.asyncio
async def test_an_unknown_backend_is_a_typed_error() -> None:
    with pytest.raises(UnknownBackendError, match="nope"):
        await Host(make_config(persistence="nope")).start()


@pytest.mark.asyncio
async def test_two_plugins_registering_one_name_conflict() -> None:
    host = Host(make_config(), plugins=[Registers("same"), Registers("same")])
    with pytest.raises(PersistenceConflictError, match="same"):
        await host.start()


@pytest.mark.asyncio
async def test_nothing_configured_and_no_default_means_no_persistence() -> None:
    async with Host(make_config(persistence=None)) as host:
        assert host.persistence_name is None
        with pytest.raises(PersistenceNotConfiguredError):
            host.require_persistence()


@pytest.mark.asyncio
async def test_the_default_backend_is_jsonl_when_registered() -> None:
    async with Host(
        make_config(persistence=None), plugins=[Registers("jsonl")]
    ) as host:
        assert host.persistence_name == "jsonl"


@pytest.mark.asyncio
async def test_none_disables_persistence_even_with_a_default() -> None:
    async with Host(
        make_config(persistence="none"), plugins=[Registers("jsonl")]
    ) as host:
        assert host.persistence_name is None


@attrs.frozen
class Options:
    path: str
    depth: int = 1


@pytest.mark.asyncio
async def test_backend_options_are_structured_and_checked() -> None:
    seen: list[Options] = []

    def factory(options: Options) -> MemoryPersistence:
        seen.append(options)
        return MemoryPersistence()

    plugin = Registers("opt", factory, Options)
    config = make_config(
        persistence="opt", backends={"opt": {"path": "/x", "depth": "3"}}
    )
    async with Host(config, plugins=[plugin]):
        assert seen == [Options(path="/x", depth=3)]
    bad = make_config(persistence="opt", backends={"opt": {"path": "/x", "typo": 1}})
    with pytest.raises(ConfigurationError, match="typo"):
        await Host(bad, plugins=[Registers("opt", factory, Options)]).start()
    no_options = make_config(persistence="memory", backends={"memory": {"x": 1}})
    with pytest.raises(ConfigurationError, match="takes no options"):
        await Host(no_options).start()


class SyncAppend(MemoryPersistence):
    def append(self, session_id: str, events: Any) -> None:  # type: ignore[override]
        raise AssertionError("never called")


def test_validate_backend_checks_every_method_is_async() -> None:
    with pytest.raises(ConfigurationError, match=r"append\(\) is not async"):
        validate_backend(SyncAppend())
    with pytest.raises(ConfigurationError, match=r"missing create\(\)"):
        validate_backend(object())


@pytest.mark.asyncio
async def test_a_backend_that_is_not_a_persistence_is_refused_at_activation() -> None:
    plugin = Registers("broken", lambda _config: SyncAppend())
    with pytest.raises(ConfigurationError, match="not async"):
        await Host(make_config(persistence="broken"), plugins=[plugin]).start()


class AsyncEvent:
    @hookimpl
    async def session_event(self, session: Session, event: Any) -> None:
        raise AssertionError("never awaited")


@pytest.mark.asyncio
async def test_an_async_session_event_impl_is_a_contract_error(host: Host) -> None:
    async with host.plugin(AsyncEvent()):
        session = host.sessions.create()
        with pytest.raises(HookContractError, match="session_event"):
            session.append(UserMessageData(text="x"))


class FailingFlush:
    def __init__(self, message: str) -> None:
        self.message = message

    @hookimpl
    async def session_flush(self, session: Session) -> None:
        raise RuntimeError(self.message)


@pytest.mark.asyncio
async def test_flush_errors_surface_as_one_flush_error(host: Host) -> None:
    async with host.plugin(FailingFlush("first")), host.plugin(FailingFlush("second")):
        session = host.sessions.create()
        session.append(UserMessageData(text="x"))
        with pytest.raises(FlushError) as info:
            await session.flush()
        cause = info.value.__cause__
        assert isinstance(cause, ExceptionGroup)
        assert sorted(str(e) for e in cause.exceptions) == ["first", "second"]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]


class Lifecycle:
    def __init__(self) -> None:
        self.applied: list[int] = []
        self.disposed = 0

    @hookimpl
    def plugin_apply(self, host: Host) -> None:
        self.applied.append(len(host.sessions.list()))

    @hookimpl
    async def plugin_dispose(self, host: Host) -> None:
        self.disposed += 1


@pytest.mark.asyncio
async def test_apply_is_replayed_to_late_plugins_and_dispose_is_awaited(
    host: Host,
) -> None:
    host.sessions.create()
    early = Lifecycle()
    async with host.plugin(early) as plugin:
        assert plugin.applied == [1]
        assert host.pm.is_registered(plugin)
    assert early.disposed == 1
    assert not host.pm.is_registered(early)


@pytest.mark.asyncio
async def test_aclose_disposes_every_plugin_newest_first() -> None:
    order: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        @hookimpl
        def plugin_dispose(self) -> None:
            order.append(self.name)

    async with Host(make_config(), plugins=[Named("a"), Named("b")]):
        pass
    assert order == ["b", "a"]


@pytest.mark.asyncio
async def test_event_types_cannot_be_registered_twice(host: Host) -> None:
    kind = define_event_type("plug/once")

    class Types:
        @hookimpl
        def register_event_types(self, register: Any) -> None:
            register(kind)

    host.register(Types())
    with pytest.raises(ConfigurationError, match="already registered"):
        host.register(Types())

    class Builtin:
        @hookimpl
        def register_event_types(self, register: Any) -> None:
            register(define_event_type("user/message"))

    with pytest.raises(ConfigurationError, match="built in"):
        host.register(Builtin())


@pytest.mark.asyncio
async def test_entry_points_none_by_name_blocked_and_unknown() -> None:
    async with Host(make_config(plugins="none")) as host:
        assert "jsonl" not in host.plugin_names()
    async with Host(make_config(plugins=("jsonl",))) as host:
        assert "jsonl" in host.plugin_names()
        assert "sqlite" not in host.plugin_names()
    async with Host(make_config(plugins="all", blocked_plugins=("sqlite",))) as host:
        assert "sqlite" not in host.plugin_names()
        assert "jsonl" in host.plugin_names()
    with pytest.raises(PluginNotFoundError, match="nonexistent"):
        await Host(make_config(plugins=("nonexistent",))).start()


@pytest.mark.asyncio
async def test_remove_and_reload_of_unknown_plugins_are_typed(host: Host) -> None:
    with pytest.raises(PluginNotFoundError):
        await host.remove("nobody")
    with pytest.raises(PluginNotFoundError):
        await host.reload(object())


@attrs.frozen
class Limited:
    max_event_bytes: int = 1


@pytest.mark.asyncio
async def test_the_host_limit_reaches_backends_that_declare_one() -> None:
    seen: list[Limited] = []

    def factory(options: Limited) -> MemoryPersistence:
        seen.append(options)
        return MemoryPersistence()

    config = make_config(persistence="lim", max_event_bytes=12345)
    async with Host(config, plugins=[Registers("lim", factory, Limited)]):
        pass
    own = make_config(persistence="lim", backends={"lim": {"max_event_bytes": 7}})
    async with Host(own, plugins=[Registers("lim", factory, Limited)]):
        pass
    assert [s.max_event_bytes for s in seen] == [12345, 7]


@pytest.mark.asyncio
async def test_options_for_an_unknown_backend_are_an_error() -> None:
    config = make_config(backends={"memroy": {"path": "x"}})
    with pytest.raises(ConfigurationError) as info:
        await Host(config).start()
    message = str(info.value)
    assert "'memroy', which is neither registered nor installed" in message
    assert "did you mean 'memory'?" in message


@pytest.mark.asyncio
async def test_options_for_an_installed_backend_that_is_not_loaded_are_kept() -> None:
    # A shared configuration may hold the table of an installed backend that
    # this host does not load (here: no entry points at all).
    config = make_config(backends={"sqlite": {"path": "x.db"}})
    async with Host(config) as host:
        assert host.persistence_name == "memory"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("selection", "says"),
    [
        ({"plugins": "none"}, '`plugins = "none"` loads no installed plugin'),
        ({"plugins": ("sqlite",)}, "`plugins` lists only 'sqlite'"),
        ({"blocked_plugins": ("jsonl",)}, "`blocked_plugins` lists it"),
    ],
)
async def test_an_installed_backend_left_unloaded_says_which_setting_did_it(
    selection: dict[str, Any], says: str
) -> None:
    # turnkeep-jsonl is installed in this workspace; the selection keeps it out.
    config = make_config(persistence="jsonl", **selection)
    with pytest.raises(UnknownBackendError) as raised:
        await Host(config).start()
    message = str(raised.value)
    assert "'jsonl' is installed but not loaded" in message
    assert says in message
    assert "install turnkeep-jsonl" not in message


@pytest.mark.asyncio
async def test_a_backend_not_installed_says_to_install_it() -> None:
    with pytest.raises(UnknownBackendError, match="install turnkeep-nope"):
        await Host(make_config(persistence="nope")).start()
