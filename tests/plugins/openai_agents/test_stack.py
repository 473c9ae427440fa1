"""The item stack against a plain list, and what a read costs.

Random sequences of `add_items`, `pop_item`, `clear_session` and
`get_items(limit)` give what a Python list gives, read from the live
session in memory and, after it is closed, from storage with the
backend's tail read. Reading the newest N items from storage fetches
O(N) records however long the log and however many pops and clears came
before, and never loads the whole log.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from turnkeep import Config, Host
from turnkeep.memory import MemoryPersistence
from turnkeep_openai_agents import TurnkeepSession, shutdown

_ids = itertools.count()

Op = tuple[str, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 4)),
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("get"), st.integers(-1, 12)),
    ),
    max_size=40,
)


def expected_get(model: list[Any], limit: int) -> list[Any]:
    if limit == 0:
        return []
    return model if limit < 0 else model[-limit:]


async def play(session: TurnkeepSession, steps: list[Op], model: list[Any]) -> None:
    counter = itertools.count(len(model))
    for op, n in steps:
        if op == "add":
            batch = [
                {"role": "user", "content": f"item {next(counter)}"} for _ in range(n)
            ]
            await session.add_items(batch)  # pyright: ignore[reportArgumentType]
            model.extend(batch)
        elif op == "pop":
            assert await session.pop_item() == (model.pop() if model else None)
        elif op == "clear":
            await session.clear_session()
            model.clear()
        else:
            assert await session.get_items(limit=n) == expected_get(model, n)


@settings(max_examples=40, deadline=None)
@given(first=ops, second=ops)
def test_the_stack_behaves_as_a_list(first: list[Op], second: list[Op]) -> None:
    async def check() -> None:
        session_id = f"prop-{next(_ids)}"
        model: list[Any] = []
        session = TurnkeepSession(session_id, "memory")
        await play(session, first, model)  # the live session, in memory
        session.close()  # the live session is closed: reads go to storage
        reader = TurnkeepSession(session_id, "memory")
        for limit in (None, 1, 3, len(model) + 1):
            got = await reader.get_items(limit=limit)
            assert got == (model if limit is None else model[-limit:])
        await play(reader, second, model)  # made live again, from storage
        assert await reader.get_items() == model
        reader.close()

    try:
        asyncio.run(check())
    finally:
        shutdown()


def test_a_long_random_run_matches_the_list(tmp_path: Any) -> None:
    rng = random.Random(20261201)
    spec = f"sqlite:{tmp_path / 's.db'}"
    steps: list[Op] = []
    for _ in range(400):
        roll = rng.random()
        if roll < 0.5:
            steps.append(("add", rng.randint(1, 5)))
        elif roll < 0.8:
            steps.append(("pop", 0))
        elif roll < 0.82:
            steps.append(("clear", 0))
        else:
            steps.append(("get", rng.randint(-1, 30)))

    async def check() -> list[Any]:
        model: list[Any] = []
        session = TurnkeepSession("long", spec)
        await play(session, steps, model)
        session.close()
        return model

    model = asyncio.run(check())
    shutdown()

    async def reread() -> None:
        reader = TurnkeepSession("long", spec)
        assert await reader.get_items() == model
        for limit in (1, 7, 50):
            assert await reader.get_items(limit=limit) == model[-limit:]

    asyncio.run(reread())


class Counted:
    """Counts the records the memory backend's tail read returns; refuses `load`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = 0
        original = MemoryPersistence.load_after

        async def load_after(
            backend: MemoryPersistence, session_id: str, after: int, limit: int
        ) -> list[bytes]:
            found = await original(backend, session_id, after, limit)
            self.records += len(found)
            return found

        async def load(backend: MemoryPersistence, session_id: str) -> Any:
            raise AssertionError(f"the whole log of {session_id!r} was loaded")

        monkeypatch.setattr(MemoryPersistence, "load_after", load_after)
        monkeypatch.setattr(MemoryPersistence, "load", load)


@pytest.mark.asyncio
@pytest.mark.parametrize("pattern", ["appends", "pops", "batches", "cleared"])
async def test_reading_n_items_from_storage_costs_o_of_n(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        session = TurnkeepSession("big", host)
        model: list[Any] = []
        for n in range(3000):
            batch = [
                {"role": "user", "content": f"item {n}.{k}"}
                for k in range(1 + (pattern == "batches") * 4)
            ]
            await session.add_items(batch)  # pyright: ignore[reportArgumentType]
            model.extend(batch)
            if pattern == "pops" and n % 3 == 2:  # two pops after every third add
                for _ in range(2):
                    model.pop()
                    await session.pop_item()
            if pattern == "cleared" and n == 2900:
                await session.clear_session()
                model.clear()
        await host.sessions.close("big")  # reads now go to storage
        counted = Counted(monkeypatch)
        for limit in (1, 10, 100):
            counted.records = 0
            assert await session.get_items(limit=limit) == model[-limit:]
            # The events holding `limit` items, plus one window of lookahead
            # after each jump over popped items: never the 3000-event log.
            assert counted.records <= 4 * limit + 32, (pattern, limit, counted.records)
        session.close()
