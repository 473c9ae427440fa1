"""Waiting in a test for something another task or process does.

A busy machine (CI runs the suite on two cores, beside subprocesses and a
browser) can take seconds for what takes milliseconds when idle, so a test
waits for the condition it checks, with a deadline, instead of sleeping a
fixed time and assuming it happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(
    condition: Callable[[], bool], *, what: str, within: float = 30.0
) -> None:
    """Poll `condition` every 10 ms until it holds; fail after `within` seconds.

    Raises:
        AssertionError: it did not hold in time (the message names `what`).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.01)
