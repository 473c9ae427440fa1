"""`fresh_arguments`: a deep copy of a call's arguments, as `copy.deepcopy` makes."""

from __future__ import annotations

import copy
import enum
from typing import Any

from hypothesis import given, strategies as st

from turnkeep.agent.tools import fresh_arguments

_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


def _containers(value: Any) -> list[int]:
    """The ids of every dict and list in `value`."""
    found: list[int] = []
    if isinstance(value, dict):
        found.append(id(value))
        for item in value.values():  # pyright: ignore[reportUnknownVariableType]
            found += _containers(item)
    elif isinstance(value, list):
        found.append(id(value))
        for item in value:  # pyright: ignore[reportUnknownVariableType]
            found += _containers(item)
    return found


@given(st.dictionaries(st.text(), _json))
def test_json_arguments_are_copied_as_deepcopy_copies_them(value: Any) -> None:
    fresh = fresh_arguments(value)
    assert repr(fresh) == repr(copy.deepcopy(value))
    assert not set(_containers(fresh)) & set(_containers(value))  # nothing shared


class Level(enum.IntEnum):
    LOW = 1


class Tagged(dict[str, Any]):
    pass


def test_other_types_go_to_deepcopy() -> None:
    inner = Tagged(level=Level.LOW, items=[1])
    fresh = fresh_arguments({"tagged": inner})
    assert type(fresh["tagged"]) is Tagged
    assert fresh["tagged"] == inner
    assert fresh["tagged"] is not inner
    assert fresh["tagged"]["items"] is not inner["items"]
    assert fresh["tagged"]["level"] is Level.LOW
