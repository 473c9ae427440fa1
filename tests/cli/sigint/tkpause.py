"""Stop the `turnkeep` process at a chosen point until a signal arrives.

Used by `tests/cli/test_interrupt.py` through `sitecustomize` (a pause while
a named module is imported) and the `slowplug` plugin (pauses while loading
a plugin and inside a command). `pause` writes `tk-test-paused WHERE` to
stderr and blocks until any signal is delivered, with no window in which a
signal could be missed: the signal's wakeup byte lands in a pipe the pause
reads, whichever thread the kernel delivers it to. The signal's own handler
then runs as it would have at that moment (the default one raises
`KeyboardInterrupt`; asyncio's cancels the running command).
"""

from __future__ import annotations

import os
import signal

PAUSE_AT = "TK_TEST_PAUSE_AT"
MARKER = "tk-test-paused"


def wanted(where: str) -> bool:
    """Whether the test asked to pause at `where`."""
    return os.environ.get(PAUSE_AT) == where


def pause(where: str) -> None:
    """Announce `where` on stderr, then wait for a signal."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end)
    try:
        os.write(2, f"{MARKER} {where}\n".encode())
        os.read(read_end, 1)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
