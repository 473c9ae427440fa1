"""Holding a streamed reply back until no secret can straddle what is released.

`HeldStream` takes a model's text deltas one by one and gives each back,
redacted, once the text after it decides every secret that could include
any of it. Redacting each piece after the tail of the ones before it
(`SecretScanner.scan_continued`) cannot do that: the start of a token
(`ghp_`, `Bearer `) is in clear in the pieces that came before its shape
was recognisable. Held back, no byte of a secret leaves the stream, and
the released pieces join into what `SecretScanner.scan` gives for the
whole text.

How far a piece is held back:

- text without any rule's trigger: `SecretScanner.quiet` characters (a
  trigger cut at the end, or a key word whose `=` has not come yet);
- a trigger found: until its match is decided, which the rules found say
  takes at most `Survey.wait` characters from where it starts
  (`Rule.hold`); a rule that can match anywhere (a user's pattern, the
  high-entropy rule) holds every piece that long.

So a piece is released at the latest when `SecretScanner.hold` (K, the
largest `Rule.hold` of the rule set) characters have followed it, and at
the stream's end (`end`, also when it is cut off). A match still going on
when its start is released (a private key's body) keeps being suppressed as
its text comes: the marker was released with its start. A secret that
takes a rule longer than its `hold` to decide is redacted from where it is
decided on (what came before it was released).

Pieces are released whole, in order, one redacted text per piece (empty
when all of it was part of a secret already replaced).
"""

from __future__ import annotations

import collections

import attrs

from turnkeep.secretscan import Found, SecretScanner

__all__ = ["HeldStream"]

_BEHIND = 16
"""Released text kept before the held text: what lookbehinds (`\\b`) read."""
_AHEAD = 24
"""A released match ending this near the end may still grow (`sk-a-b`):
its start stays in view, so what continues it is suppressed too."""
_BATCH = 40
"""Text without triggers is looked at again once this much more came: one
look per few deltas instead of one each (a piece waits up to `quiet` plus
this; K covers it)."""
_OPEN_LIMIT = 16_384
_NOTHING: list[str] = []
"""What most pieces release (shared: never changed)."""
"""The longest released match kept in view (a private key's body)."""


@attrs.define(eq=False)
class HeldStream:
    """One streamed reply, held back for redaction (see the module).

    Attributes:
        scanner: the rules.
    """

    scanner: SecretScanner
    _pieces: collections.deque[str] = attrs.field(
        init=False, factory=collections.deque[str]
    )
    _context: str = attrs.field(init=False, default="")
    """Released text just before the held pieces (from an open match's start)."""
    _open: int = attrs.field(init=False, default=-1)
    """Where, in `_context`, a released match that may go on starts."""
    _resume: int = attrs.field(init=False, default=0)
    """Where, in `_context`, a scan of the whole text would go on: after
    the last released match (or at the open one), never inside one."""
    _fresh: bool = attrs.field(init=False, default=True)
    """Whether `_context` starts where the stream starts."""
    _seen: int = attrs.field(init=False, default=0)
    """How many characters were fed."""
    _gone: int = attrs.field(init=False, default=0)
    """How many characters were released."""
    _due: int = attrs.field(init=False, default=0)
    """`_seen` at which the held text is looked at again."""

    @property
    def held(self) -> int:
        """How many characters are held back."""
        return self._seen - self._gone

    def feed(self, piece: str) -> list[str]:
        """Take one piece; return those released by it, redacted, in order.

        Mostly nothing: the held text is looked at once the characters that
        can decide something have come (`_due`).
        """
        self._pieces.append(piece)
        seen = self._seen = self._seen + len(piece)
        if seen < self._due:
            return _NOTHING
        context = self._context
        window = context + "".join(self._pieces)
        cut = len(context)
        size = len(window)
        scanner = self.scanner
        survey = scanner.survey(window, self._resume)
        if survey is None:
            # Nothing could start a secret, but a trigger cut at the end.
            self._due = seen + _BATCH
            return self._release(window, cut, size - scanner.quiet, [])
        matches = self._relevant(survey.matches, cut)
        limit = size - scanner.quiet
        due = seen + _BATCH
        if survey.anywhere:
            limit = min(limit, size - survey.wait)
            due = seen + 1
        else:
            # The first start not decided yet bounds what can go, until
            # `wait` characters from it have come.
            decided = size - survey.wait
            for start in survey.starts:
                if start >= cut and start > decided:
                    limit = min(limit, start)
                    due = min(due, seen + start - decided)
                    break
        self._due = due
        for start, end, _ in matches:
            if start >= limit:
                break
            # Decided (it starts before every undecided start): it goes
            # whole, and may still grow (see `_keep`).
            limit = max(limit, end)
        return self._release(window, cut, limit, matches)

    def end(self) -> list[str]:
        """The stream ended (or was cut off): release every held piece."""
        if not self._pieces:
            return []
        window = self._context + "".join(self._pieces)
        cut = len(self._context)
        survey = self.scanner.survey(window, self._resume)
        matches = [] if survey is None else self._relevant(survey.matches, cut)
        return self._release(window, cut, len(window), matches)

    def _relevant(self, matches: list[Found], cut: int) -> list[Found]:
        """The matches but those only the window's edge made (a word boundary)."""
        if self._fresh or not matches or matches[0][0] > 0:
            return matches
        if matches[0][0] == self._open or cut == 0:
            return matches
        return matches[1:]

    def _release(
        self, window: str, cut: int, limit: int, matches: list[Found]
    ) -> list[str]:
        """Release the pieces that end by `limit`, redacted by `matches`."""
        if limit <= cut:
            return _NOTHING
        pieces = self._pieces
        end = cut
        released: list[str] = []
        for piece in pieces:
            size = len(piece)
            if end + size > limit:
                break
            end += size
            released.append(piece)
        if not released:
            return _NOTHING
        for _ in released:
            pieces.popleft()
        self._gone += end - cut
        if matches:
            edits = self._edits(cut, end, matches)
            if edits:
                released = _apply(window, cut, released, edits)
        self._keep(window, end, matches)
        return released

    def _edits(
        self, cut: int, end: int, matches: list[Found]
    ) -> list[tuple[int, int, str]]:
        """What to replace in the released text: (start, end, text), in order."""
        edits: list[tuple[int, int, str]] = []
        for start, finish, span in matches:
            if start >= end:
                break
            if span is None:
                continue
            low, high, marker = span
            high = min(high, finish)  # as `SecretScanner.scan` replaces
            if high <= cut:
                continue
            if low < cut:
                # Its marker went with the match's start; a match found
                # only now (it took longer than its rule's hold) gets one.
                marker = "" if start == self._open else marker
                low = cut
            edits.append((low, min(high, end), marker))
        return edits

    def _keep(self, window: str, end: int, matches: list[Found]) -> None:
        """Keep the released text before `end` in view."""
        near = len(window) - _AHEAD
        opened = -1
        after = self._resume
        for start, finish, span in matches:
            if start >= end:
                break
            after = finish
            if span is not None and (span[1] > end or finish > near):
                opened = start
        if opened >= 0 and end - opened <= _OPEN_LIMIT:
            keep = max(0, opened - _BEHIND)
            after = opened
        else:
            opened = -1
            keep = max(0, end - _BEHIND)
        self._fresh = self._fresh and keep == 0
        self._context = window[keep:end]
        self._open = opened - keep if opened >= 0 else -1
        self._resume = max(0, after - keep)


def _apply(
    window: str, cut: int, pieces: list[str], edits: list[tuple[int, int, str]]
) -> list[str]:
    """`pieces` (of `window`, from `cut`) with `edits` made, piece by piece."""
    out: list[str] = []
    at = cut
    index = 0
    for piece in pieces:
        stop = at + len(piece)
        if index >= len(edits) or edits[index][0] >= stop:
            out.append(piece)
            at = stop
            continue
        parts: list[str] = []
        pos = at
        while index < len(edits) and edits[index][0] < stop:
            start, finish, text = edits[index]
            if start > pos:
                parts.append(window[pos:start])
            if start >= at:
                parts.append(text)  # once, where the replaced part starts
            if finish > stop:
                pos = stop
                break
            pos = finish
            index += 1
        if pos < stop:
            parts.append(window[pos:stop])
        out.append("".join(parts))
        at = stop
    return out
