"""The hook monitor catches what it is there to catch.

Every test runs under the autouse `hook_monitor` fixture (tests/conftest.py);
these tests break each invariant on purpose and check that the violation is
reported, then clear it so that the fixture does not fail this test too.
"""

from __future__ import annotations

import pytest
from tests.conftest import make_config

from turnkeep import Host
from turnkeep.events import UserMessage, UserMessageData
from turnkeep.testing import HookMonitor, RecordingPlugin


def _monitor_of(host: Host, monitors: list[HookMonitor]) -> HookMonitor:
    """The monitor the autouse fixture attached to `host`."""
    (monitor,) = [m for m in monitors if m.host is host]
    return monitor


def _message(seq: int) -> UserMessage:
    return UserMessage(seq=seq, time=0, data=UserMessageData(text=f"m{seq}"))


@pytest.mark.asyncio
async def test_contiguous_events_are_no_violation(
    hook_monitor: list[HookMonitor],
) -> None:
    async with Host(make_config(persistence=None)) as host:
        monitor = _monitor_of(host, hook_monitor)
        session = host.sessions.create()
        for n in range(5):
            session.append(UserMessageData(text=f"m{n}"))
        assert monitor.violations == []


@pytest.mark.asyncio
async def test_a_seq_gap_is_reported(hook_monitor: list[HookMonitor]) -> None:
    async with Host(make_config(persistence=None)) as host:
        monitor = _monitor_of(host, hook_monitor)
        session = host.sessions.create()
        session.append(UserMessageData(text="m0"))
        host.pm.hook.session_event(session=session, event=_message(2))
        assert monitor.violations == [
            f"session {session.id!r}: session_event seq 2, expected 1"
        ]
        monitor.violations.clear()


@pytest.mark.asyncio
async def test_an_event_after_dispose_is_reported(
    hook_monitor: list[HookMonitor],
) -> None:
    async with Host(make_config(persistence=None)) as host:
        monitor = _monitor_of(host, hook_monitor)
        session = host.sessions.create()
        recorder = RecordingPlugin()
        async with host.plugin(recorder, name="recorder"):
            session.append(UserMessageData(text="m0"))
        assert monitor.violations == []
        # A disposed plugin that still receives events (as it would if the
        # host forgot to unregister it): put it back behind the host's back.
        host.pm.register(recorder, name="recorder")
        session.append(UserMessageData(text="m1"))
        assert monitor.violations == [
            "session_event reached 'recorder' after its dispose"
        ]
        host.pm.unregister(recorder)
        monitor.violations.clear()
