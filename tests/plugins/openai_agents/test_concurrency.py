"""Several event loops and threads on one store: no hang, no lost item.

The SDK calls a session from any loop (`Runner.run_sync` drives the
calling thread's default loop; `asyncio.run` makes a new one per call) and
any thread. Every store a spec names has one host per process,
on a private loop thread, shared by all session objects on it; two objects
with one id share one live session (one writer role). A cancelled change
still lands whole; `close` releases the writer role; `shutdown` closes the
hosts and a later call starts them again; a `Host` the caller passes is
used on its own loop only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from tests.plugins.openai_agents.conftest import Sessions, kind_params

from sdk_agent import make_agent
from turnkeep import Config, Host
from turnkeep.errors import ConfigurationError, SessionLockedError
from turnkeep.events import UserMessageData
from turnkeep.storespec import parse_spec
from turnkeep_openai_agents import TurnkeepSession, shutdown

STORES = ("memory", "jsonl", "sqlite", "postgres")
THREADS = 6
PER_THREAD = 12


def in_threads(count: int, work: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """Run `work(n)` for each n, each in its own thread and its own loop."""
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            asyncio.run(work(n))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


def item(thread: int, n: int) -> Any:
    return {"role": "user", "content": f"t{thread} #{n}"}


@pytest.fixture(params=kind_params(STORES))
def store(
    request: pytest.FixtureRequest, make_sessions: Callable[[str], Sessions]
) -> Sessions:
    return make_sessions(request.param)


@pytest.mark.timeout(300)
def test_threads_and_loops_lose_no_item(store: Sessions) -> None:
    async def work(thread: int) -> None:
        shared = TurnkeepSession("shared", store.spec)
        own = TurnkeepSession(f"own-{thread}", store.spec)
        for n in range(PER_THREAD):
            await shared.add_items([item(thread, n)])
            await own.add_items([item(thread, n)])
            assert len(await shared.get_items(limit=3)) == 3 or n < 3
        assert await own.get_items() == [item(thread, n) for n in range(PER_THREAD)]

    in_threads(THREADS, work)

    async def check() -> None:
        got: list[Any] = await TurnkeepSession("shared", store.spec).get_items()
        assert len(got) == THREADS * PER_THREAD
        for thread in range(THREADS):  # each thread's items in its order
            mine = [x for x in got if x["content"].startswith(f"t{thread} ")]
            assert mine == [item(thread, n) for n in range(PER_THREAD)]

    asyncio.run(check())


@pytest.mark.timeout(300)
def test_run_sync_from_several_threads(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 's.db'}"
    runs = 2

    def work_sync(thread: int) -> None:
        # run_sync drives the thread's default loop (a new one per thread),
        # and leaves it open: closed here, once the thread is done with it.
        for _ in range(runs):
            for session_id in (f"own-{thread}", "shared"):
                session = TurnkeepSession(session_id, spec)
                Runner.run_sync(make_agent(), f"hello {thread}", session=session)
        policy = asyncio.get_event_loop_policy()  # pyright: ignore[reportDeprecated] - the loop run_sync used
        policy.get_event_loop().close()

    errors: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            work_sync(thread)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors

    async def check() -> None:
        for n in range(3):
            own = await TurnkeepSession(f"own-{n}", spec).get_items()
            assert [x.get("role") for x in own] == ["user", "assistant"] * runs
        shared = await TurnkeepSession("shared", spec).get_items()
        assert len(shared) == 3 * runs * 2  # every run's message and reply

    asyncio.run(check())


@pytest.mark.asyncio
async def test_a_cancelled_add_still_lands_whole(tmp_path: Path) -> None:
    session = TurnkeepSession("cancel", f"sqlite:{tmp_path / 's.db'}")
    await session.add_items([item(0, 0)])
    task = asyncio.create_task(session.add_items([item(0, 1), item(0, 2)]))
    await asyncio.sleep(0)  # the change is under way on the store's loop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await session.get_items() == [item(0, 0), item(0, 1), item(0, 2)]


@pytest.mark.asyncio
async def test_close_of_the_last_object_releases_the_writer_role(
    tmp_path: Path,
) -> None:
    spec = f"sqlite:{tmp_path / 's.db'}"
    first, second = TurnkeepSession("held", spec), TurnkeepSession("held", spec)
    await first.add_items([item(0, 0)])
    await second.add_items([item(0, 1)])  # one live session: no lock fight
    overrides = parse_spec(spec).overrides()
    async with Host(Config(**overrides)) as other:  # another writer, same store
        with pytest.raises(SessionLockedError):
            await other.sessions.resume("held")
        first.close()
        with pytest.raises(SessionLockedError):  # `second` still uses it
            await other.sessions.resume("held")
        second.close()
        second.close()  # idempotent
        resumed = await other.sessions.resume("held")
        assert len(resumed.events) == 2


@pytest.mark.asyncio
async def test_shutdown_closes_the_hosts_and_a_later_call_starts_again(
    tmp_path: Path,
) -> None:
    spec = f"jsonl:{tmp_path / 'store'}"
    session = TurnkeepSession("again", spec)
    await session.add_items([item(0, 0)])
    shutdown()
    shutdown()  # idempotent
    await session.add_items([item(0, 1)])
    assert await TurnkeepSession("again", spec).get_items() == [
        item(0, 0),
        item(0, 1),
    ]


@pytest.mark.asyncio
async def test_a_host_passed_in_is_used_on_its_own_loop_only() -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        session = TurnkeepSession("mine", host)
        await session.add_items([item(0, 0)])
        assert await session.get_items() == [item(0, 0)]
        assert "oai/items" in host.codec.known_types
        live = host.sessions.get("mine")  # live in the caller's host
        assert len(live.events) == 1

        def elsewhere() -> None:
            asyncio.run(session.get_items())

        errors: list[BaseException] = []
        thread = threading.Thread(
            target=lambda: _catch(elsewhere, errors), name="other-loop"
        )
        thread.start()
        thread.join(timeout=60)
        assert len(errors) == 1
        assert isinstance(errors[0], ConfigurationError)
        assert "event loop that runs that host" in str(errors[0])
        session.close()


def _catch(fn: Callable[[], None], errors: list[BaseException]) -> None:
    try:
        fn()
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.asyncio
async def test_a_conversation_another_process_writes_says_what_to_do(
    tmp_path: Path,
) -> None:
    spec = f"sqlite:{tmp_path / 's.db'}"
    overrides = parse_spec(spec).overrides()
    async with Host(Config(**overrides)) as other:  # another writer holds it
        held = other.sessions.create("held")
        held.append(UserMessageData(text="written elsewhere"))
        await held.flush()
        session = TurnkeepSession("held", spec)
        try:
            with pytest.raises(SessionLockedError) as raised:
                await session.add_items([item(0, 0)])
        finally:
            session.close()
    message = str(raised.value)
    assert "conversation 'held' is being written by another live process" in message
    assert "steal" not in message, "TurnkeepSession offers no steal=True"
