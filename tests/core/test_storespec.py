"""Store specs (`turnkeep.storespec`) and the plugins a spec loads.

A spec selects its backend's plugin plus the installed plugins that declare
event types (entry-point group `turnkeep.event_types`), so a reader opened
with `--store` decodes every event those plugins store; no other backend's
plugin is loaded.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from turnkeep import Config, Host
from turnkeep.config import load_config
from turnkeep.errors import HookContractError
from turnkeep.events import SessionEvent
from turnkeep.hookspecs import hookimpl
from turnkeep.storespec import (
    EVENT_TYPES_GROUP,
    StoreSpec,
    event_type_plugins,
    parse_spec,
)
from turnkeep.transcripts import TranscriptEntry


def test_specs_parse_to_a_backend_and_its_location(tmp_path: Path) -> None:
    assert parse_spec(f"sqlite:{tmp_path}/s.db") == StoreSpec(
        "sqlite", {"path": str(tmp_path / "s.db")}
    )
    assert parse_spec("postgres:postgresql://h/db?schema=x") == StoreSpec(
        "postgres", {"dsn": "postgresql://h/db", "schema": "x"}
    )
    assert parse_spec("memory") == StoreSpec("memory")
    with pytest.raises(ValueError, match="not a store spec"):
        parse_spec("Not A Spec")
    with pytest.raises(ValueError, match="no location"):
        parse_spec("sqlite:")


def test_the_event_type_plugins_are_the_declared_and_installed_ones() -> None:
    declared = {
        ep.name for ep in importlib.metadata.entry_points(group=EVENT_TYPES_GROUP)
    }
    found = event_type_plugins()
    assert found == sorted(found)
    assert set(found) <= declared
    assert "openai-agents" in found  # this repository's Agents SDK session


def test_a_spec_loads_its_backend_and_the_event_type_plugins() -> None:
    readers = event_type_plugins()
    assert StoreSpec("sqlite", {"path": "/x"}).overrides()["plugins"] == [
        "sqlite",
        *readers,
    ]
    # The memory backend is built in: only the event-type plugins load.
    assert StoreSpec("memory").overrides()["plugins"] == (readers or "none")


@pytest.mark.asyncio
async def test_a_host_on_a_spec_decodes_the_plugins_event_types(
    tmp_path: Path,
) -> None:
    spec = parse_spec(f"sqlite:{tmp_path / 's.db'}")
    async with Host(load_config(overrides=spec.overrides())) as host:
        assert {"oai/items", "oai/pop", "oai/clear"} <= host.codec.known_types
        assert "jsonl" not in host.plugin_names()
        assert "postgres" not in host.plugin_names()


class _Renders:
    def __init__(self, result: object) -> None:
        self.result = result

    @hookimpl
    def render_transcript(self, events: list[SessionEvent]) -> object:
        return self.result


@pytest.mark.asyncio
async def test_render_transcript_is_none_when_no_plugin_claims_the_log() -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        assert host.render_transcript([]) is None


@pytest.mark.asyncio
async def test_render_transcript_returns_what_the_plugin_renders() -> None:
    entries = [TranscriptEntry(label="user", text="hi")]
    plugin = _Renders(entries)
    config = Config(persistence="memory", plugins="none")
    async with Host(config, plugins=[plugin]) as host:
        assert host.render_transcript([]) == entries


@pytest.mark.parametrize("bad", ["text", ["not an entry"], 42])
@pytest.mark.asyncio
async def test_a_render_transcript_of_the_wrong_shape_is_refused(bad: object) -> None:
    config = Config(persistence="memory", plugins="none")
    async with Host(config, plugins=[_Renders(bad)]) as host:
        with pytest.raises(HookContractError, match="TranscriptEntry"):
            host.render_transcript([])
