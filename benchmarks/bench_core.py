"""Per-event cost of `Session.append` with the write-behind plugin attached.

Measured in one run, round-robin, on the same events:

- `list_append`: a bare `list.append` (the floor of any in-memory log);
- `pluggy_dispatch`: a bare pluggy hook call with one no-op implementation
  (what any pluggy-based emit path pays);
- `pluggy_copy`: pluggy with an implementation that snapshots a dict copy
  into a buffer handed off every 12 events (the peer benchmark's floor);
- `turnkeep_append`: `Session.append` on a live session of a started host
  whose write-behind plugin snapshots (encodes) every event; the buffer is
  drained every 12 events by a flush, outside the timed region, to a backend
  that acknowledges and discards (so the stored copies of earlier runs do not
  grow the heap under later ones).

- `turnkeep_append_only`: the same appends with the buffer simply dropped
  every 12 events instead of flushed, to show how much of the difference is
  the flush's (untimed) work evicting the appends' caches.

Goal: `turnkeep_append` at most 1.6x `pluggy_dispatch` per event.

`--callgrind` counts instructions instead (repeatable on a loaded machine):
per event of the bare dispatch, of the appends alone, and of the appends
with each turn's flush to the acknowledging backend, each minus a run that
only sets up.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pluggy

from benchmarks import callgrind
from benchmarks.workload import K, Workload
from turnkeep import Config, Host, SessionEvent, hookimpl
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord
from turnkeep.testing import MemoryPersistence

N_EVENTS = 240_000
REPS = 5
IR_EVENTS = 12_000
"""Events per callgrind run (the interpreter is ~50 times slower there)."""
_IR_MODES = ("setup", "pluggy_dispatch", "turnkeep_append_only", "turnkeep_append")

_spec = pluggy.HookspecMarker("benchcore")
_impl = pluggy.HookimplMarker("benchcore")


class _Spec:
    @_spec
    def on_event(self, session: object, event: object) -> None:
        """An event was appended."""


class _Noop:
    @_impl
    def on_event(self, session: object, event: object) -> None:
        return None


class _Copy:
    def __init__(self) -> None:
        self.buf: list[dict[str, Any]] = []

    @_impl
    def on_event(self, session: object, event: dict[str, Any]) -> None:
        buf = self.buf
        buf.append(event.copy())
        if len(buf) >= K:
            self.buf = []


class _Sink(MemoryPersistence):
    """Acknowledges appends without keeping the events (flushes are untimed)."""

    acknowledged: int = 0

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        self.acknowledged += sum(r.span for r in events)  # a pack stands for several


class _SinkPlugin:
    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register("sink", _make_sink)


def _make_sink(_config: object) -> _Sink:
    return _Sink()


def _manager(plugin: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("benchcore")
    pm.add_hookspecs(_Spec)
    pm.register(plugin)
    return pm


def main() -> dict[str, Any]:
    if "--ir" in sys.argv:
        ir_mode(sys.argv[sys.argv.index("--ir") + 1])
        return {}
    if "--callgrind" in sys.argv:
        return instructions()
    return wall_time()


def ir_mode(mode: str) -> None:
    """Run one mode over `IR_EVENTS` events, for callgrind to count."""
    if mode not in _IR_MODES:
        raise SystemExit(f"unknown mode {mode!r}; have: {', '.join(_IR_MODES)}")
    wl = Workload(seed=5, text_min=20, text_max=200)
    pool = [e for t in range(64) for e in wl.turn(t + 1, t * K)]
    payloads = [e.data for e in pool]
    noop = _manager(_Noop()).hook.on_event
    loop = asyncio.new_event_loop()
    config = Config(persistence="sink", plugins="none", redact_secrets=False)
    host = Host(config, plugins=[_SinkPlugin()])
    loop.run_until_complete(host.start())

    async def turns(flush: bool) -> None:
        session = host.sessions.create()
        writebehind = host._set.writebehind
        assert writebehind is not None
        for start in range(0, IR_EVENTS, K):
            for i in range(start, start + K):
                session.append(payloads[i % 768])
            if flush:
                await session.flush()
            else:
                writes = writebehind.state(session)
                writes.pending.clear()
                writes.persisted = len(session.events)

    if mode == "pluggy_dispatch":
        for i in range(IR_EVENTS):
            noop(session=None, event=pool[i % 768])
    elif mode in ("turnkeep_append_only", "turnkeep_append"):
        loop.run_until_complete(turns(flush=mode == "turnkeep_append"))
    loop.run_until_complete(host.aclose())
    loop.close()


def instructions() -> dict[str, Any]:
    """Instructions per event of each mode, minus the shared setup."""
    totals = {m: callgrind.count("benchmarks.bench_core", m) for m in _IR_MODES}
    per_event = {m: (totals[m] - totals["setup"]) / IR_EVENTS for m in _IR_MODES[1:]}
    base = per_event["pluggy_dispatch"]
    print(f"instructions per event (callgrind, {IR_EVENTS} events minus setup):")
    for mode, ir in per_event.items():
        print(f"  {mode:<22} {ir:9.0f}   x{ir / base:.2f} pluggy dispatch")
    ratio = per_event["turnkeep_append_only"] / base
    verdict = "meets" if ratio <= 1.6 else "misses"
    flush = (per_event["turnkeep_append"] - per_event["turnkeep_append_only"]) * K
    print(
        f"Session.append / pluggy dispatch (instructions) = {ratio:.2f} ({verdict} "
        f"the 1.6x goal); a {K}-event turn's flush to a sink adds {flush:,.0f}"
    )
    return {"ir_per_event": per_event, "ratio_ir": ratio, "flush_ir": flush}


def wall_time() -> dict[str, Any]:
    wl = Workload(seed=5, text_min=20, text_max=200)
    turns = [wl.turn(t + 1, t * K) for t in range(64)]
    pool: list[SessionEvent] = [e for turn in turns for e in turn]
    payloads = [e.data for e in pool]
    dicts = [
        {"type": e.type, "seq": e.seq, "time": e.time, "data": {"text": "x"}}
        for e in pool
    ]
    n = N_EVENTS - N_EVENTS % K

    def list_append() -> float:
        buf: list[object] = []
        app = buf.append
        items = pool
        t = time.perf_counter()
        for i in range(n):
            app(items[i % 768])
        return time.perf_counter() - t

    noop = _manager(_Noop()).hook.on_event

    def pluggy_dispatch() -> float:
        items = pool
        t = time.perf_counter()
        for i in range(n):
            noop(session=None, event=items[i % 768])
        return time.perf_counter() - t

    copy = _manager(_Copy()).hook.on_event

    def pluggy_copy() -> float:
        items = dicts
        t = time.perf_counter()
        for i in range(n):
            copy(session=None, event=items[i % 768])
        return time.perf_counter() - t

    loop = asyncio.new_event_loop()
    # Redaction off: this measures the append path itself; its share of a
    # turn with redaction on is `bench_redaction`'s.
    config = Config(persistence="sink", plugins="none", redact_secrets=False)
    host = Host(config, plugins=[_SinkPlugin()])
    loop.run_until_complete(host.start())

    async def turnkeep_turns() -> float:
        session = host.sessions.create()
        append = session.append
        flush = session.flush
        elapsed = 0.0
        for start in range(0, n, K):
            t = time.perf_counter()
            for i in range(start, start + K):
                append(payloads[i % 768])
            elapsed += time.perf_counter() - t
            await flush()  # per-turn durability point, not timed
        await host.sessions.close(session.id)
        return elapsed

    def turnkeep_append() -> float:
        # One running loop for the whole conversation, as in an agent.
        return loop.run_until_complete(turnkeep_turns())

    def turnkeep_append_only() -> float:
        session = host.sessions.create()
        append = session.append
        writebehind = host._set.writebehind
        assert writebehind is not None
        writes = writebehind.state(session)
        elapsed = 0.0
        for start in range(0, n, K):
            t = time.perf_counter()
            for i in range(start, start + K):
                append(payloads[i % 768])
            elapsed += time.perf_counter() - t
            writes.pending.clear()  # dropped, not stored: only appends are timed
            writes.persisted = len(session.events)
        loop.run_until_complete(host.sessions.close(session.id))
        return elapsed

    variants = {
        "list_append": list_append,
        "pluggy_dispatch": pluggy_dispatch,
        "pluggy_copy": pluggy_copy,
        "turnkeep_append": turnkeep_append,
        "turnkeep_append_only": turnkeep_append_only,
    }
    gc.freeze()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()  # warm-up
    for _ in range(REPS):
        for name, fn in variants.items():
            samples[name].append(fn())
    loop.run_until_complete(host.aclose())
    loop.close()

    medians = {k: statistics.median(v) / n * 1e9 for k, v in samples.items()}
    print(f"events per run: {n}, repetitions: {REPS} (round-robin), ns per event:")
    for name, ns in medians.items():
        spread = max(samples[name]) / min(samples[name])
        print(
            f"  {name:<16} {ns:8.1f} ns   x{ns / medians['pluggy_dispatch']:.2f} "
            f"pluggy dispatch   (spread {spread:.2f})"
        )
    ratio = medians["turnkeep_append"] / medians["pluggy_dispatch"]
    verdict = "meets" if ratio <= 1.6 else "misses"
    print(f"turnkeep_append / pluggy_dispatch = {ratio:.2f} ({verdict} the 1.6x goal)")
    return {"ns_per_event": medians, "ratio": ratio}


if __name__ == "__main__":
    main()
