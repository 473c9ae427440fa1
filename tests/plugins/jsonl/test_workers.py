"""The JSONL backend's worker threads: the hop from the event loop and back.

A caller flushing turn after turn wakes one warm thread (the cheapest hop,
see `benchmarks/bench_hop.py`); jobs that arrive together still run side by
side; a cancelled caller's job runs to its end; a stopped pool refuses work.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from turnkeep.errors import PersistenceError
from turnkeep_jsonl.workers import Workers

pytestmark = pytest.mark.asyncio


async def test_one_caller_after_another_wakes_the_same_thread() -> None:
    workers = Workers(8, "t")
    try:
        idents = {await workers.run(threading.get_ident) for _ in range(50)}
    finally:
        workers.stop()
    assert len(idents) == 1
    assert workers.started == 1


async def test_jobs_that_arrive_together_run_side_by_side() -> None:
    workers = Workers(4, "t")
    barrier = threading.Barrier(4, timeout=10)  # breaks unless all 4 run at once
    try:
        await asyncio.gather(*(workers.run(barrier.wait) for _ in range(4)))
        assert workers.started == 4
        # More jobs than threads: the rest wait in the backlog, none is lost.
        results = await asyncio.gather(*(workers.run(lambda n=n: n) for n in range(40)))
    finally:
        workers.stop()
    assert results == list(range(40))
    assert workers.started == 4


async def test_errors_reach_the_caller() -> None:
    workers = Workers(2, "t")

    def fail() -> None:
        raise OSError("boom")

    try:
        with pytest.raises(OSError, match="boom"):
            await workers.run(fail)
        assert await workers.run(lambda: "still serving") == "still serving"
    finally:
        workers.stop()


async def test_a_cancelled_callers_job_runs_to_its_end() -> None:
    workers = Workers(1, "t")
    entered, gate, done = threading.Event(), threading.Event(), threading.Event()

    def job() -> None:
        entered.set()
        gate.wait(10)
        done.set()

    try:
        task = asyncio.create_task(workers.run(job))
        await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        # The next job runs after the cancelled one has finished.
        assert await workers.run(done.is_set) is True
    finally:
        workers.stop()


async def test_a_stopped_pool_refuses_jobs() -> None:
    workers = Workers(2, "t")
    await workers.run(lambda: None)
    workers.stop()
    workers.stop()  # idempotent
    with pytest.raises(PersistenceError, match="stopped"):
        await workers.run(lambda: None)
