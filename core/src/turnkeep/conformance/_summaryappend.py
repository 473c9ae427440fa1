"""Contracts of `append(..., summary=...)`: one atomic unit for both."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from turnkeep.errors import SequenceError
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["SummaryAppendContract"]


def _fields(summary: SessionSummary) -> tuple[str | None, str | None, str]:
    return (summary.title, summary.first_prompt, summary.status)


class SummaryAppendContract(BackendHarness):
    """[summary-append]. Needs `supports_summary_append`."""

    @pytest.fixture(autouse=True)
    def _needs_summary_append(self) -> None:
        self.need("supports_summary_append")

    @staticmethod
    def summary(meta: SessionMeta, title: str, status: str = "idle") -> SessionSummary:
        """A caller's summary of `meta` (its numbers nonsense, to be ignored)."""
        return SessionSummary(
            updated_at=meta.summary.updated_at + 1,
            title=title,
            first_prompt=f"prompt of {title}",
            status=status,  # pyright: ignore[reportArgumentType]
            event_count=999,
            turns=77,
            size=123_456,
        )

    async def _check(
        self,
        backend: SessionPersistence,
        session_id: str,
        want: tuple[str | None, str | None, str],
        numbers: tuple[int, int, int],
    ) -> None:
        loaded = await backend.load(session_id)
        got = _fields(loaded.meta.summary)
        assert got == want, f"load shows {got}, not {want}"
        assert self.numbers_of(loaded.meta.summary) == numbers, "load numbers"
        listed = [m for m in (await backend.list()).items if m.id == session_id]
        assert [_fields(m.summary) for m in listed] == [want], "list"
        assert [self.numbers_of(m.summary) for m in listed] == [numbers]

    @pytest.mark.asyncio
    async def test_an_append_lands_its_summary_with_its_records(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        more = self.records(4, 4)
        summary = self.summary(meta, "named by the flush")
        await backend.append(meta.id, more, summary=summary)
        everything = [*written, *more]
        assert (await backend.load(meta.id)).events == self.raws(everything)
        await self._check(backend, meta.id, _fields(summary), self.numbers(everything))
        updated_at = (await backend.load(meta.id)).meta.summary.updated_at
        assert updated_at >= max(summary.updated_at, more[-1].time)

    @pytest.mark.asyncio
    async def test_the_first_flush_lands_its_summary(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        written = self.records(0, 4)
        summary = self.summary(meta, "first", status="active")
        await backend.append(meta.id, written, summary=summary)
        await self._check(backend, meta.id, _fields(summary), self.numbers(written))

    @pytest.mark.asyncio
    async def test_a_refused_append_stores_neither_records_nor_summary(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        before = (await backend.load(meta.id)).meta.summary
        with pytest.raises(SequenceError):
            await backend.append(
                meta.id, self.records(2, 4), summary=self.summary(meta, "never")
            )
        await self._check(backend, meta.id, _fields(before), self.numbers(written))

    @pytest.mark.asyncio
    async def test_an_empty_append_stores_no_summary(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        before = (await backend.load(meta.id)).meta.summary
        await backend.append(meta.id, [], summary=self.summary(meta, "empty"))
        await self._check(backend, meta.id, _fields(before), self.numbers(written))

    @pytest.mark.asyncio
    async def test_the_latest_summary_wins_and_survives_a_reopen(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, written = await self.stored(backend, flushes=(4,))
        # An update after an append's summary, then an append's after that,
        # then plain appends: each reader sees the newest, also reopened.
        renamed = msgspec.structs.replace(meta.summary, title="u")
        await backend.update(meta.id, renamed)
        want = _fields(renamed)
        for step, count in [("a", 4), ("", 3), ("update", 0), ("b", 2), ("", 1)]:
            more = self.records(len(written), count)
            if step == "update":
                summary = msgspec.structs.replace(renamed, title="v", status="idle")
                await backend.update(meta.id, summary)
                want = _fields(summary)
            elif step:
                summary = self.summary(meta, step)
                await backend.append(meta.id, more, summary=summary)
                want = _fields(summary)
            else:
                await backend.append(meta.id, more)
            written.extend(more)
            await self._check(backend, meta.id, want, self.numbers(written))
        await backend.aclose()
        reopened = open_backend()
        await self._check(reopened, meta.id, want, self.numbers(written))
        await reopened.claim(meta.id)
        more = self.records(len(written), 4)
        last = self.summary(meta, "after reopen", status="active")
        await reopened.append(meta.id, more, summary=last)
        written.extend(more)
        await reopened.aclose()
        await self._check(open_backend(), meta.id, _fields(last), self.numbers(written))
