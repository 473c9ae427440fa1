"""Issue 12 point 14: values storage would give back as something else are
refused at `Session.append`, naming their path; typed fields that name the
type are accepted; memory and every backend agree after a reload."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support import pgserver

from turnkeep import Config, Host, hookimpl
from turnkeep.errors import (
    EventNotSerializableError,
    EventRejectedError,
    LossyPayloadError,
)
from turnkeep.events import (
    RunContext,
    ToolCall,
    ToolCallData,
    UserMessageData,
    define_event_type,
)
from turnkeep.hookspecs import RegisterEventType

WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


class Stamp(msgspec.Struct, frozen=True):
    """A typed payload: its declared bytes and datetime round-trip exactly."""

    at: dt.datetime
    blob: bytes
    extra: dict[str, Any] = {}


class Color(enum.IntEnum):
    RED = 1


Stamped = define_event_type("test/stamped", Stamp)
Loose = define_event_type("test/loose")  # data: Any


class Types:
    @hookimpl
    def register_event_types(self, register: RegisterEventType) -> None:
        register(Stamped)
        register(Loose)


def call(**arguments: Any) -> ToolCallData:
    return ToolCallData(call_id="c", name="t", arguments=arguments)


@pytest.mark.parametrize(
    ("arguments", "path", "what"),
    [
        ({"when": WHEN}, "data.arguments.when", "datetime"),
        ({"tags": {"a", "b"}}, "data.arguments.tags", "set"),
        ({"x": {"y": [1, float("nan")]}}, "data.arguments.x.y[1]", "nan"),
        ({"x": math.inf}, "data.arguments.x", "inf"),
        ({"raw": b"\x00\x01"}, "data.arguments.raw", "bytes"),
        ({"pair": (1, 2)}, "data.arguments.pair", "tuple"),
        ({"m": {1: "one"}}, "data.arguments.m", "int key"),
        ({"s": Stamp(at=WHEN, blob=b"")}, "data.arguments.s", "Stamp"),
        ({"f": frozenset()}, "data.arguments.f", "frozenset"),
    ],
    ids=["datetime", "set", "nan", "inf", "bytes", "tuple", "int-key", "struct", "fs"],
)
@pytest.mark.asyncio
async def test_lossy_values_are_refused_naming_their_path(
    host: Host, arguments: dict[str, Any], path: str, what: str
) -> None:
    session = host.sessions.create()
    with pytest.raises(LossyPayloadError) as info:
        session.append(call(**arguments))
    assert info.value.path == path
    assert path in str(info.value)
    assert what in str(info.value)
    assert "tool/call" in str(info.value)
    assert isinstance(info.value, EventNotSerializableError | EventRejectedError)
    assert info.value.code == "lossy-payload"
    assert list(session.events) == []
    assert session.append(UserMessageData(text="next")).seq == 0


@pytest.mark.asyncio
async def test_values_that_come_back_equal_are_accepted(host: Host) -> None:
    session = host.sessions.create()
    arguments = {
        "s": "x",
        "n": 1,
        "f": 1.5,
        "b": True,
        "z": None,
        "l": [1, {"k": [2.0]}],
        "e": Color.RED,  # an int subclass: comes back as the equal int
    }
    event = session.append(call(**arguments))
    assert isinstance(event, ToolCall)


@pytest.mark.asyncio
async def test_a_payload_typed_as_any_is_checked_from_its_root() -> None:
    async with Host(make(persistence="memory"), plugins=[Types()]) as host:
        session = host.sessions.create()
        with pytest.raises(LossyPayloadError) as info:
            session.append(Loose, {1, 2})
        assert info.value.path == "data"


@pytest.mark.asyncio
async def test_declared_bytes_and_datetime_fields_are_accepted() -> None:
    async with Host(make(persistence="memory"), plugins=[Types()]) as host:
        session = host.sessions.create()
        session.append(Stamp(at=WHEN, blob=b"\x00\xff"))
        with pytest.raises(LossyPayloadError) as info:
            session.append(Stamp(at=WHEN, blob=b"", extra={"when": WHEN}))
        assert info.value.path == "data.extra.when"


def test_the_vocabulary_checks_only_tool_call_arguments_and_model_settings(
    host: Host,
) -> None:
    assert set(host.codec.checks) == {ToolCall, RunContext}


def make(**values: Any) -> Config:
    return Config(plugins="none", redact_secrets=False, **values)


BACKENDS = ["memory", "jsonl", "sqlite", "postgres"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_memory_and_disk_never_disagree(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    options: dict[str, Any] = {}
    if backend == "jsonl":
        options = {"path": str(tmp_path / "store")}
    elif backend == "sqlite":
        options = {"path": str(tmp_path / "s.sqlite3")}
    elif backend == "postgres":
        pgserver.require_server()  # fails, not skips, where one is installed
        schema = f"tk_test_lossless_{os.getpid()}"
        pgserver.drop_schema(schema)
        request.addfinalizer(lambda: pgserver.drop_schema(schema))
        options = {"dsn": pgserver.DSN, "schema": schema}
    plugins = "none" if backend == "memory" else (backend,)
    config = Config(
        persistence=backend,
        plugins=plugins,
        redact_secrets=False,
        backends={backend: options} if options else {},
    )
    attempts: list[dict[str, Any]] = [
        {"when": WHEN},
        {"tags": {"a"}},
        {"x": float("nan")},
        {"raw": b"x"},
        {"pair": (1, 2)},
        {"m": {1: "one"}},
        {"ok": [1, 2.5, {"deep": None}], "e": "é", "big": 2**62},
    ]
    async with Host(config, plugins=[Types()]) as host:
        session = host.sessions.create("s")
        for arguments in attempts:
            with contextlib.suppress(LossyPayloadError):
                session.append(call(**arguments))
        session.append(Stamp(at=WHEN, blob=b"\x00\xff"))
        live = list(session.events)
        await host.sessions.close("s")
        reloaded = await host.sessions.resume("s")
        assert list(reloaded.events) == live
    assert len(live) == 2
