"""`HistoryView` behaves as an immutable sequence of messages."""

from __future__ import annotations

import copy
import pickle

import pytest

from turnkeep.agent.historyview import HistoryView
from turnkeep.agent.messages import Message, encode_messages


def _m(text: str) -> Message:
    return Message(role="user", content=text)


def test_a_view_shows_its_count_of_the_list_then_its_tail() -> None:
    settled = [_m("a"), _m("b")]
    view = HistoryView(settled, 2, (_m("t"),))
    settled.append(_m("later"))  # the history goes on appending
    assert list(view) == [_m("a"), _m("b"), _m("t")]
    assert len(view) == 3
    assert (view[0], view[2]) == (_m("a"), _m("t"))
    assert (view[-1], view[-3]) == (_m("t"), _m("a"))
    assert list(reversed(view)) == [_m("t"), _m("b"), _m("a")]
    assert view[1:] == (_m("b"), _m("t"))
    assert view.index(_m("b")) == 1
    assert _m("later") not in view
    assert view.count(_m("a")) == 1


@pytest.mark.parametrize("index", [3, -4, 10])
def test_an_index_outside_the_view_raises_index_error(index: int) -> None:
    view = HistoryView([_m("a"), _m("b"), _m("c")], 2, (_m("t"),))
    with pytest.raises(IndexError):
        view[index]


def test_a_view_equals_any_sequence_of_the_same_messages() -> None:
    view = HistoryView([_m("a"), _m("b")], 1, (_m("t"),))
    assert view == (_m("a"), _m("t"))
    assert (_m("a"), _m("t")) == view
    assert [_m("a"), _m("t")] == view
    assert view == HistoryView([_m("a")], 1, (_m("t"),))
    assert view != (_m("a"),)
    assert view != (_m("a"), _m("b"))
    assert view != "at"
    assert hash(view) == hash((_m("a"), _m("t")))


def test_a_view_encodes_as_its_messages() -> None:
    view = HistoryView([_m("a"), _m("b")], 2)
    assert encode_messages(view) == encode_messages((_m("a"), _m("b")))
    assert repr(view).startswith("HistoryView([")


@pytest.mark.parametrize(
    "part",
    [
        slice(None),
        slice(1, None),
        slice(None, -1),
        slice(None, None, -1),
        slice(0, 3, 2),
        slice(5, 9),
        slice(2, 3),
        slice(1, 2),
        slice(0, 0),
        slice(-2, None),
        slice(3, 1),
    ],
)
def test_a_slice_of_a_view_is_the_tuple_of_the_same_slice(part: slice) -> None:
    whole = (_m("a"), _m("b"), _m("t"))
    view = HistoryView([_m("a"), _m("b"), _m("later")], 2, (_m("t"),))
    assert view[part] == whole[part]
    assert type(view[part]) is tuple


def test_a_view_adds_to_a_tuple_as_the_tuple_it_replaces() -> None:
    view = HistoryView([_m("a"), _m("later")], 1, (_m("t"),))
    # `+` itself is what is tested here (code written for the tuple uses it).
    assert view + (_m("u"),) == (_m("a"), _m("t"), _m("u"))  # noqa: RUF005
    assert (_m("u"),) + view == (_m("u"), _m("a"), _m("t"))  # noqa: RUF005
    assert view + view == (_m("a"), _m("t"), _m("a"), _m("t"))
    assert type(view + (_m("u"),)) is tuple  # noqa: RUF005
    with pytest.raises(TypeError):
        view + [_m("u")]  # pyright: ignore[reportOperatorIssue, reportUnusedExpression]  # noqa: RUF005


def test_a_pickled_or_copied_view_holds_only_what_it_shows() -> None:
    settled = [_m("a"), _m("later")]
    view = HistoryView(settled, 1, (_m("t"),))
    pickled = pickle.loads(pickle.dumps(view))  # noqa: S301 - our own bytes
    for copied in (pickled, copy.deepcopy(view)):
        assert copied == view
        assert len(copied._settled) == 2  # pyright: ignore[reportPrivateUsage]
        assert _m("later") not in copied._settled  # pyright: ignore[reportPrivateUsage]
