"""Plan item 26: hostile session ids.

- 26: a seeded corpus of 10,000 hostile ids (path pieces, reserved names,
  NFC/NFD/NFKC and case variants, bidi marks, emoji, random text, very long
  ones) maps to distinct single-component names, also after case folding,
  checked over the whole corpus; Hypothesis draws more (300 examples) on
  the same property; invalid ids are refused before the disk is touched. 300
  hostile ids (and cwds) are stored for real: every file lands inside the
  store, every header id round-trips, `list` returns exactly them.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from plugins.jsonl.helpers import meta, seeded, turn
from support.faultyops import NoSyncFileOps
from turnkeep.errors import InvalidSessionIdError
from turnkeep.ids import MAX_SESSION_ID_BYTES, validate_session_id
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import group_name, session_name

# -- 26: the id corpus ---------------------------------------------------------------

PIECES = [
    "../",
    "..",
    ".",
    "/",
    "\\",
    "/etc/passwd",
    "C:\\Windows\\",
    "CON",
    "con",
    "NUL",
    "aux.txt",
    "COM1",
    "LPT9",
    "\u202e",
    "\u200f",
    "\U0001f600",
    "caf\u00e9",
    "cafe\u0301",
    "%2e%2e%2f",
    " ",
    "\t",
    "\n",
    "*?<>|:\"'",
    "\u0130",
    "\u0131",
    "\u00df",
    "SS",
    "\ufb01",
]
text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=30,
)
raw_ids = st.one_of(
    text,
    st.lists(st.one_of(st.sampled_from(PIECES), text), min_size=1, max_size=8).map(
        "".join
    ),
    st.text(min_size=200, max_size=4096),  # long: hashed names, or refused
    st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x" * (MAX_SESSION_ID_BYTES + 1)]),
)


def variants(session_id: str) -> set[str]:
    """An id with its case and normalisation siblings (all distinct ids)."""
    out = {session_id, session_id.upper(), session_id.lower(), session_id.swapcase()}
    for form in ("NFC", "NFD", "NFKC"):
        out.add(unicodedata.normalize(form, session_id))
    return out


def valid(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except InvalidSessionIdError:
        return False
    return True


SAFE_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def check_names(ids: Iterable[str], corpus: dict[str, str]) -> None:
    """Names are safe single components, distinct after case folding."""
    for session_id in ids:
        name = session_name(session_id)
        assert set(name) <= SAFE_CHARS, name
        assert not name.startswith(".")
        assert len(name) + len(".jsonl") <= 255
        folded = name.casefold()
        assert corpus.setdefault(folded, session_id) == session_id, (
            f"{session_id!r} and {corpus[folded]!r} collide on {name}"
        )


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(raw_ids, min_size=1, max_size=10))
def test_ids_hypothesis_draws_map_to_distinct_safe_names(drawn: list[str]) -> None:
    ids = {v for base in drawn for v in variants(base) if valid(v)}
    check_names(ids, {})


def test_a_corpus_of_10000_hostile_ids_maps_to_distinct_safe_names(
    request: pytest.FixtureRequest,
) -> None:
    rng = seeded(request)
    corpus: dict[str, str] = {}
    ids = hostile_ids(10_000, rng)
    assert len(ids) >= 10_000
    check_names(ids, corpus)
    assert len(corpus) == len(ids)


def hostile_ids(count: int, rnd: random.Random) -> list[str]:
    """Ids glued from path pieces, reserved names, marks and random text,
    with their case and normalisation variants; long ones included."""
    out: set[str] = set()
    while len(out) < count:
        pieces: list[str] = []
        for _ in range(rnd.randint(1, 6)):
            if rnd.random() < 0.6:
                pieces.append(rnd.choice(PIECES))
            else:
                pieces.append(
                    "".join(
                        chr(rnd.randrange(1, 0x2FFF)) for _ in range(rnd.randint(1, 8))
                    )
                )
        base = "".join(pieces)
        if rnd.random() < 0.05:
            base *= rnd.randint(10, 60)  # long: a hashed name, or refused
        out |= {v for v in variants(base) if valid(v)}
    return sorted(out)[:count]


@pytest.mark.asyncio
async def test_hostile_ids_stored_for_real_stay_inside_and_round_trip(
    scratch: Path,
) -> None:
    store = scratch / "store"
    ids = hostile_ids(300, random.Random(26))
    writer = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    for session_id in ids:
        writer.create(meta(session_id, cwd=session_id))  # a hostile cwd too
        writer.append(session_id, turn(0, 0, seed=session_id))
        writer.release(session_id)
    writer.close()
    real = store.resolve()
    files = [p for p in store.rglob("*")]
    assert len([p for p in files if p.suffix == ".jsonl"]) == len(ids) + 1  # catalog
    for path in files:
        assert real in path.resolve().parents
        assert not path.is_symlink()
    reader = JsonlPersistence(store)
    try:
        for session_id in ids[::10]:
            loaded = await reader.load(session_id)
            assert loaded.meta.header.id == session_id
            assert loaded.meta.header.cwd == session_id
        listed: set[str] = set()
        cursor: str | None = None
        while True:
            page = await reader.list(limit=250, cursor=cursor)
            listed |= {m.id for m in page.items}
            cursor = page.next_cursor
            if cursor is None:
                break
        assert listed == set(ids)
        assert len({group_name(i) for i in ids}) == len(
            {p.name for p in store.glob("g-*")}
        )
    finally:
        await reader.aclose()


@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800x", "y" * 300])
@pytest.mark.asyncio
async def test_invalid_ids_are_refused_before_the_disk_is_touched(
    tmp_path: Path, bad: str
) -> None:
    store = tmp_path / "never"
    backend = JsonlPersistence(store)
    calls: list[Callable[[], Any]] = [
        lambda: backend.create(meta(bad)),
        lambda: backend.append(bad, turn(0, 0)),
        lambda: backend.load(bad),
        lambda: backend.has(bad),
        lambda: backend.delete(bad),
        lambda: backend.update(bad, SessionSummary()),
        lambda: backend.claim(bad),
        lambda: backend.release(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError):
            await call()
    await backend.aclose()
    assert not store.exists()
