"""`turnkeep.cancelrequest`: the capability check, reasons, numbering."""

from __future__ import annotations

import pytest

from turnkeep.cancelrequest import (
    MAX_REASON_CHARS,
    CancelRequest,
    ask_to_cancel,
    cancel_requests,
    check_reason,
    decode_request,
    encode_request,
    has_cancel_requests,
    next_request,
)
from turnkeep.errors import CancelUnsupportedError
from turnkeep.memory import MemoryPersistence


class _WithoutRequests:
    """A backend from before cancel requests: the seam's methods only."""

    def __init__(self) -> None:
        self.inner = MemoryPersistence()

    def __getattr__(self, name: str) -> object:
        if name in {"request_cancel", "cancel_requested"}:
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_backend_without_the_methods_is_refused_naming_it() -> None:
    backend = _WithoutRequests()
    assert not has_cancel_requests(backend)
    assert has_cancel_requests(MemoryPersistence())
    with pytest.raises(
        CancelUnsupportedError, match=r"'old'.*_WithoutRequests"
    ) as info:
        cancel_requests(backend, name="old")
    assert info.value.code == "cancel-unsupported"


@pytest.mark.asyncio
async def test_ask_to_cancel_refuses_such_a_backend_before_anything_is_read() -> None:
    with pytest.raises(CancelUnsupportedError):
        await ask_to_cancel(_WithoutRequests(), "s", "stop")  # pyright: ignore[reportArgumentType]


def test_reasons_are_text_of_bounded_length() -> None:
    assert check_reason("") == ""
    assert check_reason("x" * MAX_REASON_CHARS) == "x" * MAX_REASON_CHARS
    with pytest.raises(ValueError, match="at most"):
        check_reason("x" * (MAX_REASON_CHARS + 1))
    with pytest.raises(ValueError, match="text"):
        check_reason(b"stop")


def test_requests_are_numbered_on_and_round_trip() -> None:
    first = next_request(None, "a", now_ms=5)
    assert first == CancelRequest(number=1, reason="a", requested_at=5)
    second = next_request(first, "b")
    assert second.number == 2
    assert second.requested_at > 5
    assert decode_request(encode_request(second)) == second
