"""What `turnkeep._pluggy` relies on in pluggy still holds.

The host's hot path reads a hook's implementation list in place and calls
the manager's executor directly. If a pluggy release moves either, these
tests fail (rather than the host silently taking the slow public path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pluggy import HookImpl

from turnkeep import hookimpl
from turnkeep._pluggy import FAST_PATH, direct_caller, live_impls, new_manager


class Plugin:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    @hookimpl
    def session_event(self, session: object, event: object) -> str:
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(self.name)
        return f"{self.name}:{event}"


class First(Plugin):
    @hookimpl(tryfirst=True)
    def session_event(self, session: object, event: object) -> str:
        return super().session_event(session, event)


class Last(Plugin):
    @hookimpl(trylast=True)
    def session_event(self, session: object, event: object) -> str:
        return super().session_event(session, event)


def test_this_pluggy_has_what_the_fast_path_uses() -> None:
    assert FAST_PATH


def test_the_implementation_list_is_kept_current_in_place() -> None:
    pm = new_manager()
    impls: list[HookImpl] = live_impls(pm, "session_event")
    assert impls == []
    log: list[str] = []
    plugin = Plugin("a", log)
    pm.register(plugin)
    assert [i.plugin for i in impls] == [plugin]  # the same list object grew
    pm.unregister(plugin)
    assert impls == []


def test_the_direct_caller_keeps_pluggys_order_and_results() -> None:
    pm = new_manager()
    log: list[str] = []
    call = direct_caller(pm, "session_event")  # taken before any registration
    for plugin in (Last("last", log), Plugin("a", log), Plugin("b", log)):
        pm.register(plugin)
    pm.register(First("first", log))
    direct = call("s", 7)
    public: Any = pm.hook.session_event(session="s", event=7)
    assert direct == public == ["first:7", "b:7", "a:7", "last:7"]
    assert log == ["first", "b", "a", "last"] * 2


def test_the_direct_caller_propagates_and_stops_at_an_error() -> None:
    pm = new_manager()
    log: list[str] = []
    pm.register(Plugin("after", log))
    pm.register(Plugin("raises", log, fail=True))
    with pytest.raises(RuntimeError, match="raises"):
        direct_caller(pm, "session_event")("s", 1)
    assert log == ["raises"]


def test_hook_call_monitoring_sees_direct_calls() -> None:
    pm = new_manager()
    pm.register(Plugin("a", []))
    call = direct_caller(pm, "session_event")
    seen: list[tuple[str, Mapping[str, object]]] = []
    undo = pm.add_hookcall_monitoring(
        lambda name, _impls, kwargs: seen.append((name, kwargs)),
        lambda *_args: None,
    )
    call("s", 3)
    undo()
    call("s", 4)
    assert seen == [("session_event", {"session": "s", "event": 3})]


class Quiet:
    @hookimpl
    def session_event(self, session: object, event: object) -> None:
        return None


class EventOnly:
    @hookimpl
    def session_event(self, event: object) -> str:
        return f"only:{event}"


class Wrapper:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    @hookimpl(wrapper=True)
    def session_event(self, session: object, event: object) -> Any:
        self.log.append("before")
        results = yield
        self.log.append("after")
        return [*results, "wrapped"]


@pytest.mark.parametrize(
    "plugin", [Plugin("one", []), Quiet(), EventOnly(), Plugin("x", [], fail=True)]
)
def test_one_implementation_is_called_as_pluggy_would(plugin: object) -> None:
    pm = new_manager()
    pm.register(plugin)
    call = direct_caller(pm, "session_event")
    try:
        public: Any = pm.hook.session_event(session="s", event=5)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError, match=str(exc)):
            call("s", 5)
    else:
        assert call("s", 5) == public


def test_a_wrapper_alone_still_wraps() -> None:
    pm = new_manager()
    log: list[str] = []
    pm.register(Wrapper(log))
    assert direct_caller(pm, "session_event")("s", 1) == ["wrapped"]
    assert log == ["before", "after"]
