"""The root of the error tree (`TurnkeepError`), re-exported by `turnkeep.errors`.

Its own module so that the groups of errors kept beside `turnkeep.errors`
(`turnkeep.turnerrors`) derive from it without an import circle.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["TurnkeepError"]


class TurnkeepError(Exception):
    """Root of every error turnkeep raises."""

    code: ClassVar[str] = "turnkeep"
