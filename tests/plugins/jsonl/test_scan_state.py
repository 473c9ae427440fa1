"""`ScanState.copy` copies every field, as `attrs.evolve` does."""

from __future__ import annotations

import attrs

from turnkeep_jsonl.format import Owner, Said
from turnkeep_jsonl.scan import ScanState


def test_copy_holds_every_field_and_is_its_own_object() -> None:
    owner = Owner(flush=1, epoch=2, seq=3, time=4, pid=5, host="h", boot="b")
    values = {
        "flush": 7,
        "seq": 8,
        "epoch": 9,
        "time": 10,
        "owner": owner,
        "released": True,
        "turns": 11,
        "size": 12,
        "said": Said(updated_at=13, title="t"),
        "said_flush": 14,
    }
    # Every field set to a value other than its default: a field the copy
    # forgot would come back as its default.
    assert set(values) == {f.name for f in attrs.fields(ScanState)}
    state = ScanState(**values)  # pyright: ignore[reportArgumentType]
    copied = state.copy()
    assert copied is not state
    assert copied == state == attrs.evolve(state)
    copied.seq += 1
    assert state.seq == 8
