"""One behaviour suite, run against the SDK's `SQLiteSession` and `TurnkeepSession`.

Every test runs on the SDK's own SQLite session (the reference) and on
turnkeep's memory, JSONL, SQLite and PostgreSQL stores, and asserts what
the `Session` protocol promises: order, `limit` (the latest N, in order; 0
none; negative all), `pop_item` returns and removes the newest item,
`clear_session` empties only its session, sessions never see each other's
items, every kind of item round-trips exactly, what a call returns is the
caller's own copy, and history survives a new process.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from agents.memory import SessionSettings, SQLiteSession
from tests.plugins.openai_agents.conftest import REFERENCE, Sessions
from tests.plugins.openai_agents.corpus import ITEMS

from turnkeep import Host
from turnkeep.config import load_config
from turnkeep.storespec import parse_spec
from turnkeep_openai_agents import TurnkeepSession

pytestmark = pytest.mark.asyncio


def item(n: int) -> Any:
    return {"role": "user" if n % 2 else "assistant", "content": f"message {n}"}


async def test_a_new_session_is_empty(sessions: Sessions) -> None:
    session = sessions("empty")
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []
    assert await session.pop_item() is None
    await session.clear_session()
    assert await session.get_items() == []


async def test_items_come_back_in_order_with_limit_the_latest_n(
    sessions: Sessions,
) -> None:
    session = sessions("ordered")
    added = [item(n) for n in range(7)]
    await session.add_items(added[:3])
    await session.add_items(added[3:4])
    await session.add_items([])
    await session.add_items(added[4:])
    assert await session.get_items() == added
    for limit in range(1, 10):
        assert await session.get_items(limit=limit) == added[-limit:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == added


async def test_the_settings_limit_applies_when_none_is_given(
    sessions: Sessions,
) -> None:
    session = sessions("settings", session_settings=SessionSettings(limit=2))
    added = [item(n) for n in range(5)]
    await session.add_items(added)
    assert session.session_settings == SessionSettings(limit=2)
    assert await session.get_items() == added[-2:]
    assert await session.get_items(limit=4) == added[-4:]


async def test_pop_returns_and_removes_the_newest(sessions: Sessions) -> None:
    session = sessions("pops")
    added = [item(n) for n in range(4)]
    await session.add_items(added[:2])
    await session.add_items(added[2:])
    assert await session.pop_item() == added[3]
    assert await session.get_items() == added[:3]
    assert await session.pop_item() == added[2]  # across a batch boundary
    await session.add_items([item(9)])
    assert await session.get_items() == [*added[:2], item(9)]
    assert await session.get_items(limit=2) == [added[1], item(9)]
    assert await session.pop_item() == item(9)
    assert await session.pop_item() == added[1]
    assert await session.pop_item() == added[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_clear_empties_only_its_session(sessions: Sessions) -> None:
    mine, other = sessions("mine"), sessions("other")
    await mine.add_items([item(1), item(2)])
    await other.add_items([item(3)])
    await mine.clear_session()
    assert await mine.get_items() == []
    assert await mine.pop_item() is None
    assert await other.get_items() == [item(3)]
    await mine.add_items([item(4)])
    assert await mine.get_items() == [item(4)]
    assert await other.get_items() == [item(3)]


async def test_sessions_never_see_each_others_items(sessions: Sessions) -> None:
    names = ["a", "b", "a/b", "../a", "A", "ü", "x" * 200]
    for n, name in enumerate(names):
        await sessions(name).add_items([item(n)])
    for n, name in enumerate(names):
        assert await sessions(name).get_items() == [item(n)]


async def test_every_kind_of_item_round_trips_exactly(sessions: Sessions) -> None:
    session = sessions("corpus")
    await session.add_items(copy.deepcopy(ITEMS[:5]))
    await session.add_items(copy.deepcopy(ITEMS[5:]))
    assert await session.get_items() == ITEMS
    assert await session.get_items(limit=len(ITEMS) - 2) == ITEMS[2:]
    assert await session.pop_item() == ITEMS[-1]
    got = await session.get_items()
    assert [type(x) for x in got] == [dict] * (len(ITEMS) - 1)
    assert repr(got) == repr(ITEMS[:-1])  # same key order, same float digits


async def test_a_caller_owns_what_it_gave_and_got(sessions: Sessions) -> None:
    session = sessions("copies")
    given: Any = [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}]
    await session.add_items(given)
    given[0]["content"][0]["text"] = "changed after add"
    got: Any = await session.get_items()
    got[0]["content"][0]["text"] = "changed after get"
    assert await session.get_items() == [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}]}
    ]


async def test_a_second_object_with_the_same_id_sees_the_same_items(
    sessions: Sessions,
) -> None:
    first, second = sessions("shared"), sessions("shared")
    await first.add_items([item(1)])
    await second.add_items([item(2)])
    assert await first.get_items() == [item(1), item(2)]
    assert await second.pop_item() == item(2)
    assert await first.get_items() == [item(1)]


async def test_a_closed_object_refuses_calls(sessions: Sessions) -> None:
    session = sessions("closed")
    await session.add_items([item(1)])
    session.close()  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(RuntimeError):
        await session.add_items([item(2)])
    with pytest.raises(RuntimeError):
        await session.get_items()
    assert await sessions("closed").get_items() == [item(1)]


async def read_elsewhere(durable: Sessions, session_id: str) -> list[Any]:
    """The items as another instance of the store reads them, now.

    The SDK's reference through a second connection to its file; turnkeep's
    stores through a host and backend of their own (not the one the
    test's session objects share), while those objects stay open.
    """
    if durable.kind == REFERENCE:
        other = SQLiteSession(session_id, durable.spec)
        try:
            return await other.get_items()
        finally:
            other.close()
    config = load_config(overrides=parse_spec(durable.spec).overrides())
    async with Host(config) as host:
        return await TurnkeepSession(session_id, host).get_items()


async def test_every_change_is_stored_when_its_call_returns(
    durable: Sessions,
) -> None:
    session = durable("stored")
    await session.add_items([item(1), item(2), item(3)])
    assert await read_elsewhere(durable, "stored") == [item(1), item(2), item(3)]
    assert await session.pop_item() == item(3)
    assert await read_elsewhere(durable, "stored") == [item(1), item(2)]
    await session.clear_session()
    assert await read_elsewhere(durable, "stored") == []
    await session.add_items([item(4)])
    assert await read_elsewhere(durable, "stored") == [item(4)]


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import agents
    from agents.memory import SQLiteSession
    from turnkeep_openai_agents import TurnkeepSession

    agents.set_tracing_disabled(True)
    kind, spec, session_id, count = sys.argv[1:5]

    async def main():
        if kind == "sdk-sqlite":
            session = SQLiteSession(session_id, spec)
        else:
            session = TurnkeepSession(session_id, spec)
        before = await session.get_items()
        await session.add_items(
            [{"role": "user", "content": f"from child {n}"} for n in range(int(count))]
        )
        await session.pop_item()
        print(len(before))

    asyncio.run(main())
    """
)


def run_child(sessions: Sessions, session_id: str, count: int) -> int:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            sessions.kind,
            sessions.spec,
            session_id,
            str(count),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.slow  # two interpreters importing the SDK (seconds of CPU each)
async def test_history_survives_a_new_process(durable: Sessions) -> None:
    session = durable("lasting")
    await session.add_items(copy.deepcopy(ITEMS))
    if durable.kind != REFERENCE:
        session.close()  # pyright: ignore[reportAttributeAccessIssue]
    # A new process reads all of it, adds three and pops one.
    assert run_child(durable, "lasting", 3) == len(ITEMS)
    again = durable("lasting")
    expected = [*ITEMS, {"role": "user", "content": "from child 0"}]
    expected.append({"role": "user", "content": "from child 1"})
    assert await again.get_items() == expected
    assert await again.get_items(limit=2) == expected[-2:]
    # And this process's additions reach the next one.
    await again.add_items([item(7)])
    again.close()  # pyright: ignore[reportAttributeAccessIssue]
    assert run_child(durable, "lasting", 1) == len(expected) + 1
