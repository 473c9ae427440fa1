"""LangGraph's own checkpointer conformance suite, on every turnkeep backend.

`langgraph-checkpoint-conformance` detects capabilities from the methods a
saver overrides; `TurnkeepSaver` overrides all of them (the base ones, and
`delete_for_runs`, `copy_thread`, `prune`), so every capability's tests run
and must pass: none may be reported missing or skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

# The suite ships no type information (no py.typed).
from langgraph.checkpoint.conformance import (  # pyright: ignore[reportMissingTypeStubs]
    checkpointer_test,
    validate,
)
from langgraph.checkpoint.conformance.capabilities import (  # pyright: ignore[reportMissingTypeStubs]
    ALL_CAPABILITIES,
)

from turnkeep_langgraph import TurnkeepSaver

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def test_langgraph_conformance_suite_passes(store: str) -> None:
    async def factory() -> AsyncIterator[TurnkeepSaver]:
        saver = TurnkeepSaver(store=store)
        yield saver
        await saver.aclose()

    registered = checkpointer_test(name=f"TurnkeepSaver[{store.split(':')[0]}]")(
        factory
    )
    report = await validate(registered)

    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    problems = {
        name: (result.detected, result.passed, result.failures)
        for name, result in report.results.items()
        if not (result.detected and result.passed)
    }
    assert problems == {}
    assert all(r.tests_passed > 0 for r in report.results.values())
