"""The public API is small and typed; the old spellings work, with a warning."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

import turnkeep
from turnkeep import AgentLoop, Host, define_event_type
from turnkeep.config import Config
from turnkeep.errors import ConfigurationError, EventTypeError
from turnkeep.events import TurnStart, TurnStartData, UserMessage, UserMessageData
from turnkeep.testing import EchoModel, ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
MAX_NAMES = 30
MAX_QUICK_START_NAMES = 4


def test_the_namespace_is_small_and_every_name_resolves() -> None:
    assert len(turnkeep.__all__) <= MAX_NAMES
    for name in turnkeep.__all__:
        assert getattr(turnkeep, name) is not None


def test_the_readme_quick_start_needs_few_names() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    imported: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            assert all(not a.name.startswith("turnkeep") for a in node.names), (
                "the quick start imports a turnkeep module to reach around the names"
            )
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "turnkeep"
        ):
            assert node.module in ("turnkeep", "turnkeep.testing")
            imported += [a.name for a in node.names]
    assert 0 < len(imported) <= MAX_QUICK_START_NAMES


@pytest.mark.parametrize("old", sorted(turnkeep._MOVED))
def test_an_old_top_level_name_still_resolves_with_a_warning(old: str) -> None:
    module, _, new = turnkeep._MOVED[old].partition(":")
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{new}")):
        found = getattr(turnkeep, old)
    assert found is getattr(importlib.import_module(module), new)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
        _ = turnkeep.Nonsense  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("turnkeep.agent.messages", "ToolCallRequest", "HistoryToolCall"),
        ("turnkeep.agent.models", "ToolCallRequested", "ModelToolCall"),
        ("turnkeep.session", "SessionStore", "SessionStore"),
    ],
)
def test_renamed_and_moved_classes_keep_their_old_spelling(
    module: str, old: str, new: str
) -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        found = getattr(importlib.import_module(module), old)
    assert found.__name__ == new


@pytest.mark.asyncio
async def test_append_finds_the_event_type_from_the_payload(host: Host) -> None:
    session = host.sessions.create()
    said = session.append(UserMessageData(text="hi"))
    assert isinstance(said, UserMessage)
    assert said.data.text == "hi"
    started: TurnStart = session.append(TurnStartData(turn=1))
    assert started.seq == 1


@pytest.mark.asyncio
async def test_a_payload_that_names_no_type_is_refused(host: Host) -> None:
    session = host.sessions.create()
    with pytest.raises(EventTypeError, match="dict payload names no event type"):
        session.append({"text": "hi"})
    assert list(session.events) == []


@pytest.mark.asyncio
async def test_naming_the_type_is_deprecated_only_where_the_payload_names_it(
    host: Host,
) -> None:
    session = host.sessions.create()
    with pytest.warns(DeprecationWarning, match=r"session\.append\(data\)"):
        session.append(UserMessage, UserMessageData(text="old form"))
    note = define_event_type("test/note")  # payload `Any`: only its name says
    appended = session.append(note, {"n": 1})  # no warning (warnings are errors)
    assert appended.type == "test/note"
    assert [e.type for e in session.events] == ["user/message", "test/note"]


@pytest.mark.asyncio
async def test_a_loop_drives_its_own_session() -> None:
    async with Host({"persistence": "memory", "plugins": "none"}) as host:
        loop = AgentLoop.create("a", host=host, model=EchoModel())
        result = await loop.run_turn("hi")
        assert result.text == "You said: hi"
        assert not loop.running()
        assert await loop.cancel() is None
        await loop.close()
        assert host.sessions.list() == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "call",
    [
        lambda loop: loop.run_turn(loop.session_id, "hi"),
        lambda loop: loop.cancel(loop.session_id),
        lambda loop: loop.recover(loop.session_id),
    ],
    ids=["run_turn", "cancel", "recover"],
)
async def test_the_old_forms_that_name_the_session_still_work(
    host: Host, call: Any
) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    with pytest.warns(DeprecationWarning, match="one loop per session") as seen:
        await call(loop)
    # The warning points at the caller, not at turnkeep's own frames.
    assert seen[0].filename == __file__


@pytest.mark.asyncio
async def test_new_session_is_deprecated_but_works(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    with pytest.warns(DeprecationWarning, match=r"AgentLoop\.create"):
        other = loop.new_session("other")
    assert host.sessions.get(other).id == "other"


@pytest.mark.asyncio
async def test_a_scripted_reply_may_be_plain_text(host: Host) -> None:
    model = ScriptedModel([ScriptedModel.calling("missing", "Let me try."), "Done."])
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("go")
    assert result.text == "Done."


def test_a_host_takes_its_configuration_as_a_mapping() -> None:
    assert Host({"persistence": "memory"}).config == Config(persistence="memory")
    with pytest.raises(ConfigurationError, match="persistance"):
        Host({"persistance": "memory"})
