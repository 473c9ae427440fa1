"""Plan item 30: bombs and limits, in events and in the log's own lines.

An event over `max_event_bytes` is refused at `append` with nothing
written. Hostile event contents (nesting depth 65 and 100,000, a
1,000,000-digit integer, 1e400, NaN, a lone surrogate escape, invalid
UTF-8, duplicate keys) are stored and loaded verbatim (the backend never
decodes events) and then either decode or raise a typed error in core. The
same bombs inside the backend's own control and header lines make the line
invalid, never an untyped exception. A 1 GiB line (a sparse file), a
header-only file and an empty file load or fail with a typed error, each
within 2 s, the loader's peak memory under 2 x `max_event_bytes` + 64 MiB
(measured in a fresh process).
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from plugins.jsonl.helpers import meta, turn, write_session
from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import EventDecodeError, EventTooLargeError, SessionCorruptError
from turnkeep_jsonl import JsonlPersistence

BOMBS = {
    "depth-65": b"[" * 65 + b"]" * 65,
    "depth-100000": b"[" * 100_000 + b"]" * 100_000,
    "million-digits": b"9" * 1_000_000,
    "1e400": b"1e400",
    "nan": b"NaN",
    "lone-surrogate": b'{"text":"\\ud800"}',
    "invalid-utf8": b'{"text":"\xff\xfe"}',
    "duplicate-keys": b'{"text":"a","text":"b"}',
}


def digest(root: Path) -> bytes:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != "locks":
            h.update(path.read_bytes())
    return h.digest()


@pytest.mark.asyncio
async def test_an_event_over_the_limit_is_refused_and_nothing_is_written(
    store: Path,
) -> None:
    small = JsonlPersistence(store, max_event_bytes=64 * 1024)
    await small.create(meta("s"))
    await small.append("s", turn(0, 0))
    before = digest(store)
    head = b'{"type":"user/message","seq":%d,"time":1,"data":{"text":"' % len(
        turn(0, 0)
    )
    raw = head + b"x" * (64 * 1024 + 1 - len(head) - 3) + b'"}}'
    assert len(raw) == 64 * 1024 + 1
    with pytest.raises(EventTooLargeError):
        await small.append("s", [EventRecord(len(turn(0, 0)), "user/message", 1, raw)])
    assert digest(store) == before
    await small.aclose()


@pytest.mark.parametrize("bomb", sorted(BOMBS))
@pytest.mark.asyncio
async def test_hostile_event_contents_round_trip_then_decode_or_fail_typed(
    store: Path, bomb: str, open_backend: Callable[..., JsonlPersistence]
) -> None:
    raw = b'{"type":"user/message","seq":0,"time":1,"data":' + BOMBS[bomb] + b"}"
    backend = open_backend()
    started = time.monotonic()
    await backend.create(meta("s"))
    await backend.append("s", [EventRecord(0, "user/message", 1, raw)])
    loaded = await backend.load("s")
    assert loaded.events == [raw]
    # Decodes, or fails typed: what a hostile event must come to.
    with contextlib.suppress(SessionCorruptError, EventDecodeError):
        EventCodec().decode_log(loaded.events, session_id="s")
    assert time.monotonic() - started < 2


def sealed(body: bytes) -> bytes:
    return body[:-1] + b',"crc":"%08x"}\n' % zlib.crc32(body)


@pytest.mark.parametrize("bomb", sorted(BOMBS))
@pytest.mark.parametrize("where", ["commit", "header"])
@pytest.mark.asyncio
async def test_bombs_in_the_logs_own_lines_are_just_damage(
    store: Path, bomb: str, where: str, open_backend: Callable[..., JsonlPersistence]
) -> None:
    log = write_session(store, [turn(0, 0)])
    data = log.read_bytes()
    if where == "header":
        end = data.index(b"\n")
        # The header's body without its closing brace, plus a second "cwd".
        header = data[: end - 18] + b',"cwd":' + BOMBS[bomb] + b"}"
        log.write_bytes(sealed(header) + data[end + 1 :])
    else:
        # A well-sealed extra commit line carrying the bomb in a field.
        line = b'{"mark":"commit","flush":3,"x":' + BOMBS[bomb] + b',"seq":9}'
        log.write_bytes(data + sealed(line))
    started = time.monotonic()
    backend = open_backend()
    try:
        loaded = await backend.load("s")
    except SessionCorruptError:
        assert where == "header"
    else:
        assert where == "commit"  # an invalid tail line: dropped, not fatal
        assert loaded.events == [r.raw for r in turn(0, 0)]
    assert time.monotonic() - started < 2


MEASURE = textwrap.dedent(
    """
    import asyncio, resource, sys, time
    import msgspec
    from turnkeep.errors import TurnkeepError
    from turnkeep_jsonl import JsonlPersistence

    async def main():
        backend = JsonlPersistence(sys.argv[1])
        try:
            loaded = await backend.load("s")
            return f"events {len(loaded.events)}"
        except TurnkeepError as exc:
            return type(exc).__name__
        finally:
            await backend.aclose()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    outcome = asyncio.run(main())
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(msgspec.json.encode({"outcome": outcome, "seconds": seconds,
                               "grew_mib": (peak - before) / 1024}).decode())
    """
)


def measure(store: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(store)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = msgspec.json.decode(done.stdout)
    return result


LATE_COMMIT = (
    b'{"mark":"commit","flush":9,"epoch":1,"seq":99,"time":1,"n":1,"len":1,'
    b'"fcrc":"00000000"}'
)
LIMIT_MIB = 2 * 16 + 64  # 2 x max_event_bytes (16 MiB default) + 64 MiB


@pytest.mark.parametrize(
    "shape", ["gib-line", "gib-line-then-commit", "header-only", "empty"]
)
def test_huge_and_empty_files_stay_within_time_and_memory(
    tmp_path: Path, shape: str
) -> None:
    store = tmp_path / "store"
    log = write_session(store, [turn(0, 0)])
    data = log.read_bytes()
    header = data[: data.index(b"\n") + 1]
    if shape == "empty":
        log.write_bytes(b"")
    elif shape == "header-only":
        log.write_bytes(header)
    else:
        with log.open("r+b") as f:
            f.truncate(len(data))
            f.seek(len(data))
            f.write(b'{"type":"user/message","seq":99,"data":"')
            f.truncate(1 << 30)  # a sparse gigabyte without a newline
            if shape == "gib-line-then-commit":
                f.seek(1 << 30)
                f.write(b"\n" + sealed(LATE_COMMIT))
    result = measure(store)
    expected = {
        "empty": "SessionCorruptError",
        "header-only": "events 0",
        "gib-line": f"events {len(turn(0, 0))}",
        "gib-line-then-commit": "SessionCorruptError",
    }[shape]
    assert result["outcome"] == expected, result
    assert float(str(result["seconds"])) < 2, result
    assert float(str(result["grew_mib"])) < LIMIT_MIB, result
