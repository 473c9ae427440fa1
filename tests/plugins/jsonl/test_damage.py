"""Plan items 10, 11, 18 and 32: damaged logs, and logs of a newer format.

- 10: damage inside data followed by at least two later acknowledged flushes
  (1-8 bit flips, a random 512-byte sector overwritten or zeroed) is always
  `SessionCorruptError` at the offset of the first bad record; the file is
  unchanged and appends are refused. CI 2,000 trials; soak 100,000.
- 11: damage confined to the last acknowledged flush, while the sidecar's
  watermark covers it, is `SessionCorruptError`, never a shorter log.
  CI 500 trials.
- 18: a real 20-turn log (35 KB) truncated at every byte offset, and 10,000 random
  structured mutations (bit flips, zeroed sectors, duplicated, swapped or
  deleted lines, garbage, a valid line from another session, header damage):
  the outcome is a valid prefix (only when the damage lies in the last flush),
  or `SessionCorruptError` / `UnsupportedFormatError`, nothing else. The
  parser runs on the bytes directly; one in 50 cases also through `load`.
  Soak: 1,000,000 mutations.
- 32: a header claiming a newer format version is refused by `load` and by
  `append` without changing a byte, torn tail or not.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from plugins.jsonl.helpers import (
    line_starts,
    log_file,
    meta,
    raws,
    turn,
    turns,
    units,
    write_session,
)
from support.faultyops import NoSyncFileOps
from turnkeep.errors import (
    SessionCorruptError,
    UnsupportedFormatError,
)
from turnkeep.meta import FORMAT_VERSION, SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.format import decode_header, encode_header
from turnkeep_jsonl.scan import scan

MAX_LINE = 1 << 20
MUTATIONS = "flip sector duplicate swap delete garbage foreign header".split()


def parse(data: bytes) -> list[bytes]:
    """The events `scan` accepts from a log's bytes (errors propagate)."""
    result = scan(
        lambda offset, n: data[offset : offset + n],
        len(data),
        session_id="s",
        collect=True,
        max_line=MAX_LINE,
    )
    return result.events


def digest(root: Path) -> bytes:
    """sha256 over every file of a store except lock files (no data)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != "locks":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.digest()


# -- 10: mid-log damage ----------------------------------------------------------


def mid_log_damage(data: bytes, rng: random.Random) -> tuple[bytes, int]:
    """Damage `data` before its last two units; return it and the first bad offset."""
    spans = units(data)
    low = data.index(b"\n") + 1  # the header is item 18's business
    high = spans[-2][0]  # the last two units stay intact
    out = bytearray(data)
    kind = rng.choice(("flip", "sector", "zero"))
    if kind == "flip":
        positions = sorted(rng.sample(range(low, high), rng.randint(1, 8)))
        for position in positions:
            out[position] ^= 1 << rng.randrange(8)
        first = positions[0]
    else:
        start = rng.randrange(low // 512 + 1, high // 512) * 512
        end = min(start + 512, high)
        out[start:end] = (
            bytes(end - start) if kind == "zero" else rng.randbytes(end - start)
        )
        first = next(i for i in range(start, end) if out[i] != data[i])
    starts = line_starts(data)
    return bytes(out), starts[bisect_right(starts, first) - 1]


@pytest.fixture(scope="module")
def sample_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real 20-turn log (about 35 KB), no release line, no sidecar."""
    root = tmp_path_factory.mktemp("sample") / "store"
    return write_session(root, turns(20, seed="sample", span=120)).read_bytes()


def check_mid_log(data: bytes, rng: random.Random, trials: int) -> None:
    for trial in range(trials):
        damaged, first_bad = mid_log_damage(data, rng)
        with pytest.raises(SessionCorruptError) as info:
            parse(damaged)
        assert info.value.offset == first_bad, f"trial {trial}"


def test_mid_log_damage_is_always_detected_at_its_offset(
    sample_log: bytes, rng: random.Random
) -> None:
    check_mid_log(sample_log, rng, 2000)


@pytest.mark.soak
def test_mid_log_damage_soak(sample_log: bytes, rng: random.Random) -> None:
    check_mid_log(sample_log, rng, 100_000)


@pytest.mark.asyncio
async def test_mid_log_damage_through_the_backend_changes_nothing(
    store: Path, rng: random.Random, open_backend: Callable[..., JsonlPersistence]
) -> None:
    log = write_session(store, turns(12, seed="backend"))
    original = log.read_bytes()
    backend = open_backend()
    for _ in range(50):
        damaged, first_bad = mid_log_damage(original, rng)
        log.write_bytes(damaged)
        before = digest(store)
        with pytest.raises(SessionCorruptError) as info:
            await backend.load("s")
        assert info.value.offset == first_bad
        with pytest.raises(SessionCorruptError):
            await backend.append("s", turn(999, 1))
        with pytest.raises(SessionCorruptError):
            await backend.claim("s")
        assert digest(store) == before
    log.write_bytes(original)
    assert len((await backend.load("s")).events) == len(raws(turns(12, seed="backend")))


# -- 11: damage in the last acknowledged flush -------------------------------------


@pytest.mark.asyncio
async def test_damage_in_the_last_acknowledged_flush_is_an_error(
    store: Path, rng: random.Random, open_backend: Callable[..., JsonlPersistence]
) -> None:
    batches = turns(6, seed="last")
    writer = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    writer.create(meta("s"))
    for batch in batches:
        writer.append("s", batch)
    # The summary update writes the sidecar, whose watermark now covers the
    # last flush; then the writer stops without writing anything after it.
    writer.update("s", SessionSummary(title="covered"))
    writer.close()
    log = log_file(store)
    original = log.read_bytes()
    start, end = units(original)[-1]
    sidecar = next(log.parent.glob("*.meta"))
    reader = open_backend()
    for trial in range(500):
        damaged = bytearray(original)
        if rng.random() < 0.5:
            # Distinct places: two flips of one bit would cancel out and
            # leave the flush intact (seed 1364883604, trial 416).
            for position in rng.sample(range(start, end), rng.randint(1, 8)):
                damaged[position] ^= 1 << rng.randrange(8)
        else:
            cut = rng.randrange(start, end)
            del damaged[cut:]
        log.write_bytes(bytes(damaged))
        with pytest.raises(SessionCorruptError) as info:
            await reader.load("s")
        assert info.value.offset is not None, f"trial {trial}"
        assert start <= info.value.offset <= end
    # Without the watermark the same damage is a legal torn tail.
    log.write_bytes(original[: start + 10])
    sidecar.unlink()
    assert (await reader.load("s")).events == raws(batches[:-1])


# -- 18: truncation and structured mutations ------------------------------------


def expected_prefix(data: bytes) -> dict[int, int]:
    """Bytes needed for each flush count: end offset of unit k -> events in it."""
    ends: dict[int, int] = {}
    count = 0
    for start, end in units(data):
        count += max(0, data.count(b"\n", start, end) - 1)
        ends[end] = count
    return ends


def test_damage_in_the_last_two_flushes_with_the_last_commit_line_lost(
    sample_log: bytes,
) -> None:
    # Flush N-1 damaged inside, flush N's commit line damaged: no valid
    # control line numbered past N-1 remains, but flush N's event lines
    # follow N-1's intact commit line. They could only have been written
    # after N-1 was acknowledged, so N-1's damage is acknowledged data.
    (before_start, _), (last_start, last_end) = units(sample_log)[-2:]
    out = bytearray(sample_log)
    line_end = sample_log.index(b"\n", before_start)
    out[line_end - 30] ^= 0x20  # inside N-1's first event line
    out[last_end - 30] ^= 0x20  # inside N's commit line (the log's last line)
    assert sample_log.rfind(b"\n", 0, last_end - 1) < last_end - 30
    with pytest.raises(SessionCorruptError) as info:
        parse(bytes(out))
    assert info.value.offset == before_start
    # Damage to N's commit line alone is still only a torn last flush.
    alone = bytearray(sample_log)
    alone[last_end - 30] ^= 0x20
    written = parse(sample_log)
    last_events = sample_log.count(b"\n", last_start, last_end) - 1
    assert parse(bytes(alone)) == written[: len(written) - last_events]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param((14, 0x02), id="mark-name"),  # "commit" -> "commiv"
        pytest.param((23, 0x04), id="quote"),  # the line stops being JSON
        pytest.param((2, 0x20), id="mark-prefix"),  # '{"Mark"': not a control line
    ],
)
def test_damage_to_the_last_two_commit_lines(
    sample_log: bytes, damage: tuple[int, int]
) -> None:
    # Flush N-1's commit line no longer decodes and neither does N's: no
    # control line is left to count units by, but N's events follow the line
    # that closed N-1's events. A unit's write ends with its commit line and
    # the next starts after its fsync, so N-1 was acknowledged and is damaged.
    # (Found by the structured-mutation soak: seed 985315645, trial 749726.)
    at, bit = damage
    (before_start, before_end), (_, last_end) = units(sample_log)[-2:]
    before_commit = sample_log.rfind(b"\n", 0, before_end - 1) + 1
    last_commit = sample_log.rfind(b"\n", 0, last_end - 1) + 1
    out = bytearray(sample_log)
    out[before_commit + at] ^= bit
    out[last_commit + 23] ^= 0x04  # N's commit line: not JSON any more
    with pytest.raises(SessionCorruptError) as info:
        parse(bytes(out))
    assert info.value.offset == before_commit
    # N-1's damaged commit line alone, as the log's last line, is a torn tail.
    alone = bytearray(sample_log[:before_end])
    alone[before_commit + at] ^= bit
    written = parse(sample_log)
    events_in_before = sample_log.count(b"\n", before_start, before_end) - 1
    last_events = sample_log.count(b"\n", before_end, last_end) - 1
    assert (
        parse(bytes(alone)) == written[: len(written) - last_events - events_in_before]
    )


def test_truncation_at_every_offset_loads_the_flushes_before_it(
    sample_log: bytes,
) -> None:
    written = parse(sample_log)
    ends = expected_prefix(sample_log)
    header_end = sample_log.index(b"\n") + 1
    boundaries = sorted(ends)
    for size in range(len(sample_log) + 1):
        cut = sample_log[:size]
        if size < header_end:
            with pytest.raises(SessionCorruptError):
                parse(cut)
            continue
        done = [e for e in boundaries if e <= size]
        count = ends[done[-1]] if done else 0
        assert parse(cut) == written[:count], f"truncated at {size}"


def mutate(data: bytes, other: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random structured mutation of a log."""
    lines = data.split(b"\n")[:-1]
    kind = rng.choice(
        (
            "flip",
            "sector",
            "duplicate",
            "swap",
            "delete",
            "garbage",
            "foreign",
            "header",
        )
    )
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    if kind == "sector":
        out = bytearray(data)
        start = rng.randrange(0, len(out) // 512 + 1) * 512
        out[start : start + 512] = bytes(len(out[start : start + 512]))
        return kind, bytes(out)
    if kind == "garbage":
        at = rng.randrange(len(data) + 1)
        junk = rng.randbytes(rng.randint(1, 600))
        if rng.random() < 0.5:
            junk += b"\n"
        return kind, data[:at] + junk + data[at:]
    if kind == "header":
        out = bytearray(data)
        out[rng.randrange(data.index(b"\n") + 1)] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    index = rng.randrange(1, len(lines))
    if kind == "duplicate":
        lines.insert(index, lines[index])
    elif kind == "swap" and index + 1 < len(lines):
        lines[index], lines[index + 1] = lines[index + 1], lines[index]
    elif kind == "delete":
        del lines[index]
    elif kind == "foreign":
        foreign = other.split(b"\n")[1:-1]
        lines.insert(index, rng.choice(foreign))
    return kind, b"\n".join(lines) + b"\n"


def first_difference(a: bytes, b: bytes) -> int:
    """The offset of the first byte where `a` and `b` differ (binary search)."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # invariant: a[:low] == b[:low]
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def check_mutations(data: bytes, other: bytes, rng: random.Random, trials: int) -> None:
    written = parse(data)
    ends = expected_prefix(data)
    spans = units(data)
    last_start = spans[-1][0]
    counts = {ends[e] for e in ends}
    for trial in range(trials):
        kind, mutated = mutate(data, other, rng)
        first = first_difference(data, mutated)
        try:
            events = parse(mutated)
        except (SessionCorruptError, UnsupportedFormatError):
            continue
        n = len(events)
        where = f"trial {trial} ({kind}, first change at {first})"
        assert n <= len(written), where
        assert events == written[:n], where
        if n < len(written):
            # A shorter log is legal only when the damage is in its last flush.
            assert n in counts or n == 0, where
            assert first >= last_start, where


@pytest.fixture(scope="module")
def other_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Another session's log, whose lines are valid on their own."""
    root = tmp_path_factory.mktemp("other") / "store"
    return write_session(root, turns(5, seed="other"), session_id="s").read_bytes()


def test_structured_mutations_give_a_prefix_or_a_typed_error(
    sample_log: bytes, other_log: bytes, rng: random.Random
) -> None:
    check_mutations(sample_log, other_log, rng, 10_000)


@pytest.mark.soak
def test_structured_mutations_soak(
    sample_log: bytes, other_log: bytes, rng: random.Random
) -> None:
    check_mutations(sample_log, other_log, rng, 1_000_000)


@pytest.mark.asyncio
async def test_mutations_through_the_backend_match_the_parser(
    store: Path,
    sample_log: bytes,
    other_log: bytes,
    rng: random.Random,
    open_backend: Callable[..., JsonlPersistence],
) -> None:
    log = write_session(store, turns(1, seed="placeholder"))
    backend = open_backend()
    for _ in range(200):
        _, mutated = mutate(sample_log, other_log, rng)
        log.write_bytes(mutated)
        try:
            expected: list[bytes] | type[Exception] = parse(mutated)
        except (SessionCorruptError, UnsupportedFormatError) as exc:
            expected = type(exc)
        if isinstance(expected, list):
            assert (await backend.load("s")).events == expected
        else:
            with pytest.raises(expected):
                await backend.load("s")


# -- 32: newer format ---------------------------------------------------------------


def age(log: Path) -> None:
    """Rewrite the header line with format version current + 1."""
    data = log.read_bytes()
    end = data.index(b"\n")
    header = decode_header(data[:end])
    assert header is not None
    newer = msgspec.structs.replace(header, format_version=FORMAT_VERSION + 1)
    log.write_bytes(encode_header(newer) + data[end + 1 :])


@pytest.mark.parametrize("torn", [False, True])
@pytest.mark.asyncio
async def test_a_newer_format_is_refused_without_changing_a_byte(
    store: Path, torn: bool, open_backend: Callable[..., JsonlPersistence]
) -> None:
    log = write_session(store, turns(4, seed="aging"), title="old")
    age(log)
    if torn:
        with log.open("ab") as f:
            f.write(b'{"type":"user/message","seq":')
    before = digest(store)
    backend = open_backend()
    with pytest.raises(UnsupportedFormatError):
        await backend.load("s")
    with pytest.raises(UnsupportedFormatError):
        await backend.append("s", turn(0, 99))
    with pytest.raises(UnsupportedFormatError):
        await backend.claim("s", steal=True)
    with pytest.raises(UnsupportedFormatError):
        await backend.update("s", SessionSummary(title="new"))
    assert await backend.has("s")
    assert digest(store) == before


def test_a_newer_format_with_a_damaged_layout_is_still_refused_as_newer() -> None:
    line = msgspec.json.encode(
        {"mark": "header", "format_version": FORMAT_VERSION + 1, "layout": "other"}
    )
    with pytest.raises(UnsupportedFormatError):
        parse(line + b"\n" + b"whatever comes next\n")


# -- damage found in a session this instance holds ---------------------------------


async def held_and_damaged(
    store: Path, open_backend: Callable[..., JsonlPersistence]
) -> tuple[JsonlPersistence, Path, int]:
    """A session held by a backend, with a bit flipped in its first flush.

    Returns the backend, the log, and the session's next seq.
    """
    batches = turns(4, seed="held")
    owner = open_backend()
    await owner.create(meta())
    for batch in batches:
        await owner.append("s", batch)
    log = log_file(store)
    data = bytearray(log.read_bytes())
    data[data.index(b'{"type"') + 20] ^= 1  # acknowledged: three flushes follow
    log.write_bytes(bytes(data))
    return owner, log, len(raws(batches))


@pytest.mark.asyncio
async def test_a_held_session_found_damaged_is_released_without_a_write(
    store: Path, open_backend: Callable[..., JsonlPersistence]
) -> None:
    owner, _, seq = await held_and_damaged(store, open_backend)
    with pytest.raises(SessionCorruptError):
        await owner.load("s")
    before = digest(store)
    with pytest.raises(SessionCorruptError, match="bury the damage"):
        await owner.append("s", turn(seq, 9))
    await owner.release("s")  # no release line after the damage
    assert digest(store) == before
    with pytest.raises(SessionCorruptError):
        await owner.claim("s")
    assert digest(store) == before


@pytest.mark.asyncio
async def test_claiming_a_held_session_found_damaged_looks_at_it_again(
    store: Path, open_backend: Callable[..., JsonlPersistence]
) -> None:
    owner, _, _ = await held_and_damaged(store, open_backend)
    with pytest.raises(SessionCorruptError):
        await owner.load("s")
    before = digest(store)
    with pytest.raises(SessionCorruptError):
        await owner.claim("s")  # not "already ours": the damage is still there
    assert digest(store) == before


@pytest.mark.asyncio
async def test_damage_an_append_finds_stops_the_handle_like_damage_load_finds(
    store: Path, open_backend: Callable[..., JsonlPersistence]
) -> None:
    owner, log, seq = await held_and_damaged(store, open_backend)
    with log.open("ab") as f:  # a torn tail too: the append reads the log again
        f.write(b'{"type":"user/message","seq":')
    before = digest(store)
    with pytest.raises(SessionCorruptError):
        await owner.append("s", turn(seq, 9))
    with pytest.raises(SessionCorruptError, match="bury the damage"):
        await owner.append("s", turn(seq, 9))
    assert digest(store) == before
    # The summary is kept as a bystander's update keeps it, nothing is cut.
    await owner.update("s", SessionSummary(title="kept"))
    bystander = open_backend()
    await bystander.update("s", SessionSummary(title="kept"))
    with pytest.raises(SessionCorruptError):
        await bystander.load("s")
    assert log.read_bytes().endswith(b'{"type":"user/message","seq":')


@pytest.mark.asyncio
async def test_damage_an_update_finds_stops_the_handle_too(
    store: Path, open_backend: Callable[..., JsonlPersistence]
) -> None:
    owner, log, seq = await held_and_damaged(store, open_backend)
    with log.open("ab") as f:
        f.write(b'{"type":"user/message","seq":')
    before = digest(store)
    with pytest.raises(SessionCorruptError):
        await owner.update("s", SessionSummary(title="first"))
    with pytest.raises(SessionCorruptError, match="bury the damage"):
        await owner.append("s", turn(seq, 9))
    assert digest(store) == before
